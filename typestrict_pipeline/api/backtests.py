"""Backtests through the API: checked at the edge, run as Dagster runs, read, cancelled.

A backtest request is checked completely before anything runs or is charged (the workflow, the
time range against the data, the step, the parameters: :func:`check_backtest`, the same checks
``typestrict backtest run`` makes), then launched as a run of the code location's
``backtest_<workflow>_job`` (:class:`~typestrict_pipeline.api.runs.DagsterRuns`): the run the
Dagster UI's launchpad makes, listed there, run by the daemon in its own process. The backtest's
id is chosen here and given to the run, so it can be read at once:

* ``queued``: the run waits for the daemon (no row in the store yet);
* then the store's states (``running``, ``completed``, ``stopped``, ``failed``, ...), with the
  run card and the cost as they are recorded;
* a run that ended before the backtest started (cancelled in the queue, or failed to start) is
  that run's end: ``cancelled`` or ``failed``.

Cancelling a queued backtest takes its run out of the queue; a running one is cancelled by the
lifecycle's :func:`~typestrict_pipeline.lifecycle.reaper.cancel_backtest` (the CLI's ``backtest
cancel``), and its run stops before its next step, keeping what ran.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline.api import datasets
from typestrict_pipeline.api.runs import (
    DagsterRuns,
    RunInfo,
    RunState,
    dagster_unavailable,
    unstarted,
)
from typestrict_pipeline.backtest.engine import for_workspace
from typestrict_pipeline.backtest.workflows.datasets import API_DATASETS, DatasetWords
from typestrict_pipeline.errors import InputError, NotFoundError
from typestrict_pipeline.values import number

MAX_STEPS = 100_000
"""Most steps one backtest through the API may plan (bounded before any work)."""


@dataclass(frozen=True)
class BacktestRequest:
    """What a customer sends to run a backtest (the fields of ``typestrict backtest run``)."""

    workflow: str
    start: str
    end: str
    step: str = "1d"
    dataset: str = "seattle_weather"
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckedBacktest:
    """A request that passed every check: what the run will do."""

    workflow: str
    version_id: str
    dataset: str
    start: dt.datetime
    end: dt.datetime
    step: dt.timedelta
    steps_planned: int
    params: Mapping[str, Any]


@dataclass(frozen=True)
class BacktestView:
    """A backtest as the API shows it (HISTORICAL, with what it cost)."""

    id: str
    workspace_id: str
    workflow: str
    state: str
    mode: str = "HISTORICAL"
    version_id: str | None = None
    steps_planned: int | None = None
    steps_run: int = 0
    cost_micro_usd: int = 0
    mean_score: float | None = None
    error: str | None = None
    run_id: str | None = None
    card: str | None = None
    created_at: str | None = None
    finished_at: str | None = None


def plain_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``params`` of a JSON body as the CLI's ``--param NAME=VALUE`` gives them: the API
    decodes a number with a fraction or an exponent as a ``Decimal`` (exact money); here it
    becomes the ``float`` JSON means (``1E+2`` is ``100.0``), once, at the edge, so the
    workflow's checks see the types every other door gives them. A number beyond a float is
    refused, and every text is text that may be stored, as on the command line.

    >>> plain_params({"threshold": Decimal("0.5"), "lookback_days": 7, "ks": [Decimal("1E+2")]})
    {'threshold': 0.5, 'lookback_days': 7, 'ks': [100.0]}
    >>> plain_params({"threshold": Decimal("1E+400")})
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: field 'params.threshold': expected params.threshold as a finite number, got '1E+400'. Write a finite number, e.g. 0.5.
    """
    from typestrict_pipeline.values import check_strings

    def plain(value: Any, where: str) -> Any:
        if isinstance(value, Decimal):
            return number(value, where, fix="write a finite number, e.g. 0.5")
        if isinstance(value, list):
            return [plain(v, where) for v in value]
        if isinstance(value, dict):
            return {k: plain(v, f"{where}.{k}") for k, v in value.items()}
        return value

    out = {}
    for name, value in params.items():
        where = f"params.{name}"
        try:
            out[name] = plain(value, where)
            check_strings(out[name], f"a {where} value")
        except InputError as exc:
            raise InputError(exc.expected, exc.got, exc.fix, file=f"field {where!r}") from None
    return out


def _object(backtest_id: str) -> str:
    return f"backtest:{backtest_id}"


def _not_found(backtest_id: str) -> NotFoundError:
    return NotFoundError.in_workspace(
        "backtest", backtest_id, "Check the id (GET /v1/backtests lists them) and that you use this workspace's key")


def check_backtest(engine: Engine, home: Path, workspace: str, req: BacktestRequest, *,
                   dataset_words: DatasetWords = API_DATASETS) -> CheckedBacktest:
    """Every check ``typestrict backtest run`` makes, before anything runs; a dataset the
    workspace cannot name refused in the door's ``dataset_words`` (the console passes its own).

    Raises:
        InputError: an unknown workflow or dataset, a bad time, step, range or parameter (the
            message says what would work).
    """
    from typestrict_pipeline.backtest.engine import parse_step, plan_steps
    from typestrict_pipeline.backtest.service import CUSTOMER_VERSION, active_workflow, parse_time
    from typestrict_pipeline.backtest.workflows import default_registry

    registry = default_registry()
    if req.workflow not in registry.names():
        raise InputError(f"a registered workflow ({', '.join(sorted(registry.names()))})",
                         repr(req.workflow[:80]), "name one of them (GET /v1/backtests/workflows)",
                         file="field 'workflow'")
    start, end = parse_time(req.start, "start"), parse_time(req.end, "end")
    try:  # the field named, as the others: the console marks it, the API's 422 says which
        step = parse_step(req.step)
    except InputError as exc:
        raise InputError(exc.expected, exc.got, exc.fix, file="field 'step'") from None
    if step > dt.timedelta(days=366):
        raise InputError("a step of at most 366 days", repr(req.step), "pick a smaller step", file="field 'step'")
    if end >= start and (end - start) // step >= MAX_STEPS:
        raise InputError(f"at most {MAX_STEPS:,} steps in one backtest",
                         f"{(end - start) // step + 1:,} steps", "shorten the range or take a longer step")
    stored = datasets.resolve(home, workspace, req.dataset, words=dataset_words)
    workflow = active_workflow(engine, req.workflow, workspace=workspace, words=CUSTOMER_VERSION)
    run_wf = workflow.variant(params=dict(req.params)) if req.params else workflow
    times = plan_steps(run_wf, datasets.load(home, stored), start=start, end=end, step=step)
    return CheckedBacktest(req.workflow, run_wf.version_id, stored, times[0], times[-1], step,
                           len(times), dict(req.params))


def run_config(checked: CheckedBacktest, req: BacktestRequest, workspace: str,
               backtest_id: str) -> dict[str, Any]:
    """The run config of ``backtest_<workflow>_job`` (its launchpad's fields)."""
    return {"ops": {f"backtest_{checked.workflow}": {"config": {
        "workspace": workspace, "dataset": checked.dataset, "start": req.start, "end": req.end,
        "step": req.step, "params": dict(checked.params), "backtest_id": backtest_id}}}}


def launch_backtest(engine: Engine, home: Path, runs: DagsterRuns, workspace: str,
                    req: BacktestRequest, *, dataset_words: DatasetWords = API_DATASETS) -> BacktestView:
    """Check the request, then launch its Dagster run; the backtest, ``queued``."""
    checked = check_backtest(engine, home, workspace, req, dataset_words=dataset_words)
    backtest_id = uuid.uuid4().hex
    try:
        run_id = runs.submit(f"backtest_{checked.workflow}_job", run_config(checked, req, workspace, backtest_id),
                             workspace=workspace, object_ref=_object(backtest_id),
                             tags={"workflow": checked.workflow, "mode": "HISTORICAL"})
    except Exception as exc:  # the raw failure to the log only, the customer gets a 503 to retry
        raise dagster_unavailable("the backtest's Dagster run to be queued", exc,
                                  after="nothing was stored or spent") from None
    return BacktestView(id=backtest_id, workspace_id=workspace, workflow=checked.workflow,
                        state=RunState.QUEUED, version_id=checked.version_id,
                        steps_planned=checked.steps_planned, run_id=run_id)


def _stored_view(b: Any) -> BacktestView:
    return BacktestView(
        id=b.id, workspace_id=b.workspace, workflow=b.workflow, state=b.status.value,
        mode=b.mode.value, version_id=b.version_id, steps_planned=b.steps_planned,
        steps_run=b.steps_run, cost_micro_usd=b.cost_micro_usd, mean_score=b.mean_score,
        error=None if b.error is None else for_workspace(b.error), run_id=b.dagster_run_id,
        card=None if b.card is None else for_workspace(b.card.to_text()),
        created_at=b.created_at.isoformat(), finished_at=None if b.finished_at is None else b.finished_at.isoformat())


def _pending_view(workspace: str, backtest_id: str, run: RunInfo) -> BacktestView:
    state = run.state if run.state in (RunState.FAILED, RunState.CANCELLED) else RunState.QUEUED
    error = None
    if state == RunState.FAILED:
        error = unstarted("backtest", run.run_id, state, "Run the backtest again")
    elif state == RunState.CANCELLED:
        error = "cancelled before it started"
    workflow = run.job_name.removeprefix("backtest_").removesuffix("_job")
    return BacktestView(id=backtest_id, workspace_id=workspace, workflow=workflow, state=state,
                        error=error, run_id=run.run_id)


def get_backtest(engine: Engine, runs: DagsterRuns, workspace: str, backtest_id: str) -> BacktestView:
    """The backtest if it belongs to ``workspace`` (another workspace's is "not found")."""
    from typestrict_pipeline.backtest.store import load_backtest

    if not _plausible(backtest_id):
        raise _not_found(backtest_id)
    try:
        stored = load_backtest(engine, backtest_id)
    except NotFoundError:
        stored = None
    if stored is not None:
        if stored.workspace != workspace:
            raise _not_found(backtest_id)
        return _stored_view(stored)
    launched = runs.runs_for(workspace, _object(backtest_id))
    if not launched:
        raise _not_found(backtest_id)
    return _pending_view(workspace, backtest_id, launched[0])


QUEUED_UNKNOWN = (
    "expected the backtests still queued for their Dagster run in this list, got the server's Dagster "
    "instance unavailable: the list holds the backtests the store has (every one that started), and "
    "those still queued appear once the instance is back; retry later, and tell the operator if it "
    "persists")
"""The note of a backtest list read while the Dagster instance is down (``X-Queued-Backtests``)."""


def backtest_page(engine: Engine, runs: DagsterRuns, workspace: str, *, limit: int,
                  offset: int) -> tuple[list[BacktestView], int, str | None]:
    """``limit`` backtests after the first ``offset`` (newest first: those waiting for their
    run, then the store's), how many the whole list holds, and a note when it could not hold
    them all. The store is asked for the page's rows only, never the workspace's whole history.

    The queued backtests are known only to the Dagster instance (no row in the store until their
    run starts): while it cannot be read, the list is the store's alone, every backtest that
    started with its state, card, cost and ``run_id`` (all stored), and the note
    (:data:`QUEUED_UNKNOWN`) says the queued ones are missing, rather than a ``503`` for the whole
    list (a customer could not see why their backtest ended)."""
    from typestrict_pipeline.api.errors import ApiError
    from typestrict_pipeline.backtest.store import count_backtests, stored_backtest_ids
    from typestrict_pipeline.backtest.store import list_backtests as stored

    note: str | None = None
    try:
        found = runs.runs_for(workspace)
    except ApiError as exc:
        if exc.code != "dagster_unavailable":
            raise
        found, note = [], QUEUED_UNKNOWN
    launched = [((run.object_ref or "")[9:], run) for run in found
                if (run.object_ref or "").startswith("backtest:")]
    known = stored_backtest_ids(engine, workspace=workspace, ids=[b for b, _ in launched])
    pending = [_pending_view(workspace, b, run) for b, run in launched if b not in known]
    total = len(pending) + count_backtests(engine, workspace=workspace)
    page = pending[offset:offset + limit]
    if len(page) < limit:
        page += [_stored_view(b) for b in stored(engine, workspace=workspace, limit=limit - len(page),
                                                offset=max(0, offset - len(pending)))]
    return page, total, note


def cancel_backtest(engine: Engine, runs: DagsterRuns, workspace: str, backtest_id: str) -> BacktestView:
    """Cancel a backtest that has not ended; the backtest after the call.

    A queued one (its run not started) leaves the Dagster queue. A running one is ``cancelled``
    at once by :func:`typestrict_pipeline.lifecycle.reaper.cancel_backtest` (what
    ``typestrict backtest cancel`` calls): its run's process reads that before its next step and
    stops, keeping (and costing) what ran.

    Raises:
        NotFoundError: not a backtest of this workspace.
        ConflictError: it has ended already.
    """
    from typestrict_pipeline.lifecycle.reaper import cancel_backtest as cancel_stored

    view = get_backtest(engine, runs, workspace, backtest_id)
    if view.state == RunState.QUEUED:
        for run in runs.runs_for(workspace, _object(backtest_id)):
            runs.cancel(run.run_id)
        after = get_backtest(engine, runs, workspace, backtest_id)
        if after.state != "running":  # its run started meanwhile: cancelled as a running one below
            return after
    cancel_stored(engine, backtest_id, workspace=workspace)
    return get_backtest(engine, runs, workspace, backtest_id)


def _plausible(backtest_id: str) -> bool:
    return 1 <= len(backtest_id) <= 64 and backtest_id.isascii() and backtest_id.isalnum()


def workflows() -> list[dict[str, Any]]:
    """The registered workflows a backtest may name, with their active version, the columns a
    dataset for each must have (per table, each with its kind:
    :func:`~typestrict_pipeline.backtest.workflow.columns_read`) and their parameters."""
    from typestrict_pipeline.backtest.workflow import columns_read
    from typestrict_pipeline.backtest.workflows import default_registry

    reg = default_registry()
    out = []
    for name in reg.names():
        wf = reg.active(name)
        out.append({"workflow": name, "version_id": wf.version_id, "tables": list(wf.tables),
                    "columns": columns_read(wf), "params": dict(wf.default_params),
                    "scored_by": wf.outcome_description})
    return out


__all__ = [
    "QUEUED_UNKNOWN",
    "BacktestRequest",
    "BacktestView",
    "CheckedBacktest",
    "backtest_page",
    "cancel_backtest",
    "check_backtest",
    "get_backtest",
    "launch_backtest",
    "plain_params",
    "run_config",
    "workflows",
]
