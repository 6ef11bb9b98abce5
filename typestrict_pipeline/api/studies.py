"""Studies through the API: the form's estimate, launching a study as a Dagster run, scoped reads.

The estimate is what the study form shows as soon as a USD budget is entered: the same arithmetic
and refusals as :func:`typestrict_pipeline.study.repository.create_study` (limits required, a USD
budget refused for a version never backtested in the workspace, with the page's message), but
nothing is written. A created study runs as a ``study_job`` run on the Dagster instance
(:func:`launch_study`), exactly the run the Dagster UI launches: the API process never executes
a study. Cancelling, the leaderboard, schedules and the lineage call the studies and re-runs core
directly; this module adds the workspace scoping.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline.api.runs import (
    DagsterRuns,
    RunInfo,
    RunState,
    dagster_unavailable,
    unstarted,
)
from typestrict_pipeline.api.schemas import PromoteOut
from typestrict_pipeline.backtest.workflows.datasets import API_DATASETS, DatasetWords
from typestrict_pipeline.errors import ConflictError, LimitError, NotFoundError
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.form import API_SPACE, SpaceWords
from typestrict_pipeline.study.limits import (
    NO_BACKTEST_MESSAGE,
    estimate_cost_micro,
    estimate_text,
    study_total_steps,
)
from typestrict_pipeline.study.service import (
    StudyConfig,
    candidate_validator,
    check_layout_data,
    lookup_last_backtest,
)
from typestrict_pipeline.study.tables import StudyRow, StudyState
from typestrict_pipeline.values import row_id


@dataclass(frozen=True)
class StudyEstimate:
    """What the form shows before a study is created.

    Attributes:
        candidates: candidates that would run (at most Max candidates).
        planned: candidates the search space describes (duplicates included).
        folds: folds per candidate.
        total_steps: steps the study would run (candidates × folds' windows + the holdout twice).
        estimate_micro: the USD estimate in micro-USD, or None when the version was never
            backtested in the workspace.
        text: the form's line (``≈ $0.01 for 2 candidates × 2 folds × 2 windows + the holdout``),
            or the page's message when there is nothing to estimate from.
    """

    candidates: int
    planned: int
    folds: int
    total_steps: int
    estimate_micro: int | None
    text: str

    @property
    def form_text(self) -> str:
        """What the console's form shows: :attr:`text` as a sentence, then what would run.

        >>> StudyEstimate(2, 3, 2, 200, 12_000, "≈ $0.01 for 2 candidates × 2 folds × 2 windows + the holdout").form_text
        '≈ $0.01 for 2 candidates × 2 folds × 2 windows + the holdout. 2 candidates of 3 planned, 200 steps in all.'
        >>> StudyEstimate(1, 1, 1, 90, None, NO_BACKTEST_MESSAGE).form_text.endswith("empty. 1 candidate of 1 planned, 90 steps in all.")
        True
        """
        sentence = self.text if self.text.endswith(".") else f"{self.text}."
        return (f"{sentence} {self.candidates} candidate{'s' if self.candidates != 1 else ''} of "
                f"{self.planned} planned, {self.total_steps:,} steps in all.")


def estimate_study(engine: Engine, config: StudyConfig) -> StudyEstimate:
    """The estimate for a filled-in form, refused as creating it would be (nothing is written):
    its candidates screened by the workflow as creating the study screens them
    (:func:`~typestrict_pipeline.study.repository.screen_candidates`), so a grid the study would
    refuse gets no price, and a value the workflow rejects is not counted.

    Raises:
        LimitError: a required limit is missing, a USD budget with no backtest to estimate
            from (the page's message), or no candidate the workflow accepts.
        NotEnoughDataError: the folds do not fit in the time range.
        InputError: a window reaches outside the workflow's data.
    """
    layout = config.layout()
    limits = config.limits()
    limits.validate()
    check_layout_data(config.backend, layout)
    kept, dropped = repo.screen_candidates(config.space, candidate_validator(config.backend))
    assert limits.max_candidates is not None
    admitted = kept[: limits.max_candidates]
    total = study_total_steps(len(admitted), layout.search_steps_per_candidate, layout.holdout.steps)
    last = lookup_last_backtest(engine, config.workspace, config.workflow, config.workflow_version)
    estimate = None if last is None else estimate_cost_micro(last.cost_micro, last.steps, total)
    if limits.budget_micro is not None and estimate is None:
        raise LimitError(
            f"expected a completed backtest of workflow {config.workflow!r} version "
            f"{config.workflow_version!r} in workspace {config.workspace!r} to estimate the USD "
            f"budget from, got none. {NO_BACKTEST_MESSAGE}"
        )
    text = (estimate_text(estimate, len(admitted), config.n_folds) if estimate is not None
            else NO_BACKTEST_MESSAGE)
    return StudyEstimate(len(admitted), len(kept) + len(dropped), config.n_folds, total, estimate, text)


def _not_found(study_id: object) -> NotFoundError:
    return NotFoundError.in_workspace(
        "study", study_id, "Check the id (GET /v1/studies lists them) and that you use this workspace's key")


def parse_study_id(text: str) -> int:
    """A study id from a URL segment (:func:`~typestrict_pipeline.values.row_id`, the one rule);
    anything else is "not found" (never another study, never a 500).

    >>> parse_study_id("12")
    12
    """
    parsed = row_id(text)
    if parsed is None:
        raise _not_found(text)
    return parsed


def check_study(engine: Engine, workspace_id: str, study_id: int) -> StudyRow:
    """The study if it belongs to ``workspace_id`` (another workspace's is "not found")."""
    with session_scope(engine) as s:
        row = s.get(StudyRow, study_id)
        if row is None or row.workspace != workspace_id:
            raise _not_found(study_id)
        s.expunge(row)
        return row


def list_studies(engine: Engine, workspace_id: str, limit: int = 200, offset: int = 0) -> list[StudyRow]:
    """The workspace's studies, newest first: ``limit`` of them after the ``offset`` newest."""
    from sqlalchemy import select

    with session_scope(engine) as s:
        rows = list(s.execute(select(StudyRow).where(StudyRow.workspace == workspace_id)
                              .order_by(StudyRow.id.desc()).offset(offset).limit(limit)).scalars().all())
        for r in rows:
            s.expunge(r)
        return rows


def count_studies(engine: Engine, workspace_id: str) -> int:
    """How many studies the workspace has (deleted ones are gone from the store)."""
    from sqlalchemy import func, select

    with session_scope(engine) as s:
        return int(s.scalar(select(func.count()).select_from(StudyRow)
                            .where(StudyRow.workspace == workspace_id)) or 0)


def _object(study_id: int) -> str:
    return f"study:{study_id}"


def study_form_config(home: Path, workspace: str, fields: Mapping[str, Any], *,
                      words: SpaceWords = API_SPACE, dataset_words: DatasetWords = API_DATASETS) -> StudyConfig:
    """The study the form describes, for ``workspace``: its dataset named as the workspace may
    name it (built in, or registered by the workspace), its USD budget a JSON number or a
    decimal string (never a binary float: :func:`money_text`); its search space refused in the
    door's ``words`` (the body's fields; the console passes its form's labels), a dataset it
    cannot name in its ``dataset_words``."""
    from typestrict_pipeline.api import datasets
    from typestrict_pipeline.study.form import StudyForm, study_config

    values = dict(fields)
    values["dataset"] = datasets.resolve(home, workspace, str(values.get("dataset", "seattle_weather")),
                                         words=dataset_words)
    if values.get("budget_usd") is not None:
        values["budget_usd"] = money_text(values["budget_usd"])
    return study_config(StudyForm(**values, workspace=workspace), words=words)


def money_text(value: object) -> str:
    """A USD amount as the text the money parser reads: a ``Decimal`` (a JSON number, decoded
    exactly) written out in plain digits, a string as it is.

    >>> money_text(Decimal("0.05")), money_text(Decimal("1E+2")), money_text("0.25")
    ('0.05', '100', '0.25')
    """
    if isinstance(value, Decimal) and value.is_finite() and -40 <= value.adjusted() <= 12:
        return format(value, "f")  # bounded: 1E+999999999 is never written out in a billion digits
    return str(value)


def launch_study(engine: Engine, home: Path, runs: DagsterRuns, workspace: str,
                 fields: Mapping[str, Any], *, words: SpaceWords = API_SPACE,
                 dataset_words: DatasetWords = API_DATASETS) -> StudyRow:
    """Create the study (refused as the form refuses it), then launch its ``study_job`` run on
    the Dagster instance: the run the UI launches, listed there, surviving an API restart.

    A launch that fails leaves no study in flight: the study ends ``FAILED`` (its workflow's
    lock released, nothing reserved or spent) with a message for the customer; the raw failure,
    which may name the server's folders, goes to the server's log only.

    Raises:
        ApiError: 503 ``dagster_unavailable`` with ``Retry-After``: the Dagster instance could not
            take the run (the server's fault; the same request can succeed later).
    """
    from typestrict_pipeline.study.service import create_study_from_config

    config = study_form_config(home, workspace, fields, words=words, dataset_words=dataset_words)
    try:
        study_id = create_study_from_config(engine, config)
    except repo.WorkflowBusyError as exc:  # how to cancel through this door, not the operator's
        raise ConflictError(exc.for_workspace()) from None
    try:
        run_config = importlib.import_module("assets.studies").study_run_config(study_id)
        run_id = runs.submit("study_job", run_config, workspace=workspace, object_ref=_object(study_id),
                             tags={"workflow": config.workflow})
    except BaseException as exc:
        why = ("its Dagster run could not be queued: the server's Dagster instance was unavailable. "
               "Nothing was spent; create the study again later (POST /v1/studies), and tell the "
               "operator if it persists")
        repo.abandon_unstarted(engine, study_id, why)
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not the customer's answer
            raise
        raise dagster_unavailable(f"study {study_id}'s Dagster run to be queued", exc,
                                  after=f"study {study_id} ended FAILED and nothing was spent") from None
    try:  # it waits on its run now, not on this server
        repo.await_run(engine, study_id, run_id)
    except Exception:  # the store failed just now: the study and its run are there, as before this
        logging.getLogger("typestrict.api").warning(  # step (held by this server's process)
            "study %s: recording its queued run %s failed", study_id, run_id, exc_info=True)
    return check_study(engine, workspace, study_id)


def repo_error(engine: Engine, study_id: int, error: str) -> None:
    """Record why a study ended without running (its state is left as it is)."""
    from sqlalchemy import update

    with session_scope(engine) as s:
        s.execute(update(StudyRow).where(StudyRow.id == study_id).values(error=error[:4000]))


def study_run(runs: DagsterRuns, workspace: str, study_id: int) -> RunInfo | None:
    """The newest Dagster run the API launched for the study (None for a study made elsewhere)."""
    found = runs.runs_for(workspace, _object(study_id))
    return found[0] if found else None


def settle_unstarted(engine: Engine, runs: DagsterRuns, row: StudyRow) -> StudyRow:
    """A ``PENDING`` study whose run ended before it started (cancelled in the queue, or failed
    to launch) is ended too: cancelled, or failed with why; so no study waits forever on a run
    that will never come. Any other study is returned as it is."""
    if row.state != StudyState.PENDING.value:
        return row
    run = study_run(runs, row.workspace, row.id)
    if run is None or run.state in (RunState.QUEUED, RunState.RUNNING):
        return row
    if run.state == RunState.CANCELLED:
        repo.cancel_study(engine, row.id)
        repo_error(engine, row.id, f"its Dagster run {run.run_id} was cancelled before the study started")
    else:
        repo.mark_failed(engine, row.id, unstarted("study", run.run_id, run.state, "Create the study again"))
    return check_study(engine, row.workspace, row.id)


def cancel_study(engine: Engine, runs: DagsterRuns, workspace: str, study_id: int) -> StudyRow:
    """Cancel a study that has not ended (:func:`typestrict_pipeline.lifecycle.reaper.cancel_study`,
    what ``typestrict study cancel`` calls): what ran is kept and ranked; its Dagster run leaves
    the queue, or stops starting window runs (the study's state is read before each one).

    Raises:
        NotFoundError: not a study of this workspace.
        ConflictError: it has ended already.
    """
    from typestrict_pipeline.lifecycle.reaper import cancel_study as cancel_stored

    row = check_study(engine, workspace, study_id)
    cancel_stored(engine, row.id, workspace=workspace)
    run = study_run(runs, workspace, row.id)
    if run is not None and run.state == RunState.QUEUED:
        runs.cancel(run.run_id)
    return check_study(engine, workspace, row.id)


def promote_study(engine: Engine, workspace: str, study_id: int) -> PromoteOut:
    """Promote the winner of the workspace's study (:func:`typestrict_pipeline.study.promote.promote_winner`,
    what ``typestrict study promote`` calls) without a backend: the gate reads the study's stored
    baseline holdout run and no model is called, so the request never waits on one.

    Raises:
        NotFoundError: not a study of this workspace.
        ConflictError: not finished, no holdout score, the gate refused, or a study whose
            promotion needs the operator (no stored baseline run; prompts on the operator's own
            setup), each with why.
    """
    from typestrict_pipeline.study.promote import promote_winner, promoted_kind

    row = check_study(engine, workspace, study_id)
    res = promote_winner(engine, row.id)
    return PromoteOut(study_id=row.id, promoted=promoted_kind(res), version_id=res.version_id,
                      params=dict(res.params), message=res.message)


__all__ = [
    "StudyEstimate",
    "cancel_study",
    "check_study",
    "count_studies",
    "estimate_study",
    "launch_study",
    "list_studies",
    "money_text",
    "parse_study_id",
    "promote_study",
    "settle_unstarted",
    "study_form_config",
    "study_run",
]
