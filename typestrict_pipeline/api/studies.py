"""Studies through the API: the form's estimate, scoped reads, and running a created study.

The estimate is what the study form shows as soon as a USD budget is entered: the same arithmetic
and refusals as :func:`typestrict_pipeline.study.repository.create_study` (limits required, a USD
budget refused for a version never backtested in the workspace, with the page's message), but
nothing is written. Creating, cancelling, the leaderboard, schedules and the lineage call the
studies and re-runs core directly; this module only adds the workspace scoping.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Engine

from typestrict_pipeline.errors import LimitError, NotFoundError
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study.limits import (
    NO_BACKTEST_MESSAGE,
    estimate_cost_micro,
    estimate_text,
    study_total_steps,
)
from typestrict_pipeline.study.service import StudyConfig, lookup_last_backtest, study_backend
from typestrict_pipeline.study.tables import StudyRow


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


def estimate_study(engine: Engine, config: StudyConfig) -> StudyEstimate:
    """The estimate for a filled-in form, refused as creating it would be (nothing is written).

    Raises:
        LimitError: a required limit is missing, or a USD budget with no backtest to estimate
            from (the page's message).
        NotEnoughDataError: the folds do not fit in the time range.
    """
    layout = config.layout()
    limits = config.limits()
    limits.validate()
    kept, dropped = config.space.expand()
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
    return NotFoundError(
        f"expected a study with id {str(study_id)[:40]!r} in this workspace, got none. Check the id "
        "(GET /v1/studies lists them) and that you use this workspace's key"
    )


def parse_study_id(text: str) -> int:
    """A study id from a URL segment; anything else is "not found" (never a 500).

    >>> parse_study_id("12")
    12
    """
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise _not_found(text)
    return int(text)


def check_study(engine: Engine, workspace_id: str, study_id: int) -> StudyRow:
    """The study if it belongs to ``workspace_id`` (another workspace's is "not found")."""
    with session_scope(engine) as s:
        row = s.get(StudyRow, study_id)
        if row is None or row.workspace != workspace_id:
            raise _not_found(study_id)
        s.expunge(row)
        return row


def list_studies(engine: Engine, workspace_id: str, limit: int = 200) -> list[StudyRow]:
    """The workspace's studies, newest first."""
    from sqlalchemy import select

    with session_scope(engine) as s:
        rows = list(s.execute(select(StudyRow).where(StudyRow.workspace == workspace_id)
                              .order_by(StudyRow.id.desc()).limit(limit)).scalars().all())
        for r in rows:
            s.expunge(r)
        return rows


class StudyRunner:
    """Runs created studies one at a time in a background thread (no Dagster in the server).

    The same in-process runner the CLI's tests and re-runs use
    (:func:`typestrict_pipeline.study.runner.run_study_local`); a failure is recorded on the study
    by the runner itself (state ``FAILED`` with its reason).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="study")
        self._lock = threading.Lock()
        self._futures: dict[int, Future[None]] = {}

    def submit(self, study_id: int) -> None:
        with self._lock:
            self._futures[study_id] = self._pool.submit(self._run, study_id)

    def _run(self, study_id: int) -> None:
        from typestrict_pipeline.study.runner import run_study_local

        try:
            run_study_local(self.engine, study_id, study_backend(self.engine, study_id), max_workers=2)
        except Exception:  # recorded on the study by run_study_local (mark_failed)
            return

    def wait(self, study_id: int, timeout: float | None = None) -> None:
        """Wait for a submitted study (tests)."""
        with self._lock:
            fut = self._futures.get(study_id)
        if fut is not None:
            fut.result(timeout=timeout)

    def shutdown(self) -> None:
        """Stop at once: queued studies never start (their lease, this server's, ends with it);
        a running one is marked ``INTERRUPTED`` (when and why) so its runs stop before their next
        step and the server's process can exit; re-executing it resumes it."""
        from typestrict_pipeline.study import repository as repo

        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = [sid for sid, fut in self._futures.items() if fut.running()]
        for sid in running:
            with contextlib.suppress(Exception):  # a store that is gone: the reaper ends it later
                repo.interrupt_study(self.engine, sid, "interrupted: the API server running it "
                                     "stopped; re-execute it to resume it")


__all__ = ["StudyEstimate", "StudyRunner", "check_study", "estimate_study", "list_studies",
           "parse_study_id"]
