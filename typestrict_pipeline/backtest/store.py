"""Persisting backtests, their steps and calls, live decisions, versions; workspace usage.

Historical and live records live apart: backtests and their steps in ``backtest_runs`` /
``backtest_steps`` (``mode = 'HISTORICAL'`` enforced by check constraints), live decisions in
``backtest_live_decisions`` (``mode = 'LIVE'`` enforced). The functions that read live decisions
read only that table, so nothing historical can be read back as live; every metered call is in
``backtest_calls`` with its mode, so usage shows historical and live spend apart.

Typical use (the Dagster asset and the CLI do this)::

    engine = open_store(url)
    with BacktestRecorder(engine, workspace="demo", workflow=wf, ...) as rec:
        result = run_backtest(wf, ..., on_step=rec.on_step)
        rec.finish(result.card)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
from sqlalchemy import Engine, and_, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.backtest.engine import (
    BacktestStatus,
    LiveDecision,
    RunCard,
    StepRecord,
    StepStatus,
)
from typestrict_pipeline.backtest.metering import CallRecord, PriceTable, RunMode
from typestrict_pipeline.backtest.tables import (
    ActiveVersionRow,
    BacktestRow,
    CallRow,
    LiveDecisionRow,
    StepRow,
    WorkflowVersionRow,
)
from typestrict_pipeline.backtest.workflow import Workflow
from typestrict_pipeline.errors import NotFoundError, StoreError
from typestrict_pipeline.lifecycle.leases import Lease, LeaseKind, release_in, take_in
from typestrict_pipeline.store import rows_by_id, session_scope, utcnow

__all__ = [
    "BacktestRecorder",
    "StoredBacktest",
    "StoredLiveDecision",
    "StoredStep",
    "UsageRow",
    "activate_version",
    "active_version_id",
    "count_backtests",
    "end_backtest",
    "interruption_reason",
    "last_completed_backtest",
    "list_backtests",
    "live_decisions",
    "load_backtest",
    "load_steps",
    "record_live_decision",
    "save_backtest",
    "stored_backtest_ids",
    "stored_version",
    "to_jsonable",
    "usage",
]


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (numpy scalars, enums, datetimes, tuples converted).

    Non-finite floats become the strings ``'nan'``/``'inf'``/``'-inf'`` (JSON has no such
    numbers, and an undefined value must not turn into one). Unknown objects become their repr.

    >>> to_jsonable({"p": np.float64(0.5), "rain": np.bool_(True), "t": (1, 2)})
    {'p': 0.5, 'rain': True, 't': [1, 2]}
    """
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(float(value))
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return repr(value)


def _new_id() -> str:
    return uuid.uuid4().hex


def _call_row(
    c: CallRecord, *, workspace: str, workflow: str, version_id: str, run_kind: str, run_id: str
) -> CallRow:
    started = dt.datetime.fromtimestamp(c.started_at_unix, dt.UTC)
    return CallRow(
        workspace=workspace, workflow=workflow, version_id=version_id, mode=c.mode.value,
        run_kind=run_kind, run_id=run_id, step_index=c.step_index, kind=c.kind.value, name=c.name,
        model=c.model, input_tokens=c.input_tokens, output_tokens=c.output_tokens,
        cost_micro_usd=c.cost_micro_usd, latency_s=c.latency_s, attempt=c.attempt, ok=c.ok,
        error=c.error, started_at=started, day=started.date().isoformat(),
    )


def _remember_version(session: Any, workflow: Workflow) -> None:
    if session.get(WorkflowVersionRow, (workflow.name, workflow.version_id)) is None:
        session.add(WorkflowVersionRow(
            workflow=workflow.name, version_id=workflow.version_id,
            params_json=to_jsonable(workflow.default_params), prompts_json=dict(workflow.prompts),
        ))


class BacktestRecorder:
    """Writes a backtest to the store as it runs: the row first, steps in batches, the card last.

    The row is written with a lease (:mod:`typestrict_pipeline.lifecycle.leases`) naming this
    process, renewed by a heartbeat until the backtest ends: if the process dies (``kill -9``, a
    crash, a reboot) the reaper (:mod:`typestrict_pipeline.lifecycle.reaper`) marks it
    ``interrupted``. If the block exits with an exception, the steps already finished are written
    and the backtest is marked ``interrupted`` (Ctrl-C, SIGTERM) or ``failed`` (any other error),
    with when and why: nothing that ran is lost. ``typestrict backtest cancel`` sets
    ``cancelled``; :meth:`should_stop` then starts no further step.

    Args:
        engine: the store.
        workspace: the workspace id.
        workflow: the version that runs (``workflow.variant(params, prompts)`` for overrides).
        start: first step time.
        end: last step time.
        step: step size.
        steps_planned: how many steps the range holds.
        dataset: a label of the replayed data (for example ``seattle_weather``).
        prices: the price table used (stored, so costs can be re-checked).
        dagster_run_id: the Dagster run, if any.
        batch: steps per write.
        backtest_id: the id to record it under (the API names a backtest before its run
            starts); default a new one.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        workspace: str,
        workflow: Workflow,
        start: dt.datetime,
        end: dt.datetime,
        step: dt.timedelta,
        steps_planned: int,
        dataset: str,
        prices: PriceTable,
        dagster_run_id: str | None = None,
        batch: int = 256,
        backtest_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.workspace = workspace
        self.workflow = workflow
        self.batch = batch
        self.id = backtest_id or _new_id()
        self._buffer: list[StepRecord] = []
        self._lock = threading.Lock()
        self._finished = False
        self._closed = False
        self._cancelled = False
        self._checked_at = 0.0
        self.steps_written = 0
        with session_scope(engine) as s:
            _remember_version(s, workflow)
            token = take_in(s, LeaseKind.BACKTEST, self.id)
            assert isinstance(token, str)  # a new id: nobody else holds it
            s.add(BacktestRow(
                id=self.id, workspace=workspace, workflow=workflow.name,
                version_id=workflow.version_id, mode=RunMode.HISTORICAL.value,
                status=BacktestStatus.RUNNING.value, start_at=start, end_at=end,
                step_seconds=step.total_seconds(), dataset=dataset, steps_planned=steps_planned,
                steps_run=0, steps_ok=0, steps_unscored=0, steps_failed=0, cost_micro_usd=0,
                params_json=to_jsonable(workflow.default_params), prompts_json=dict(workflow.prompts),
                prices_json=prices.to_json(), dagster_run_id=dagster_run_id,
            ))
        self.lease = Lease(engine, LeaseKind.BACKTEST, self.id, token).start()

    def __enter__(self) -> BacktestRecorder:
        return self

    def on_step(self, record: StepRecord) -> None:
        """Pass as ``run_backtest(..., on_step=recorder.on_step)``."""
        with self._lock:
            if self._closed:
                return  # the backtest ended (interrupted): a step still in flight is not kept
            self._buffer.append(record)
            if len(self._buffer) >= self.batch:
                self._flush_locked()

    def should_stop(self) -> bool:
        """Pass as ``run_backtest(..., should_stop=recorder.should_stop)``: True once the backtest
        was cancelled (read from the store at most every :data:`CANCEL_CHECK_S` seconds) or ended."""
        if self._closed or self._cancelled:
            return True
        now = time.monotonic()
        if now - self._checked_at < CANCEL_CHECK_S:
            return False
        self._checked_at = now
        with session_scope(self.engine) as s:
            status = s.scalar(select(BacktestRow.status).where(BacktestRow.id == self.id))
        self._cancelled = status != BacktestStatus.RUNNING.value
        return self._cancelled

    def flush(self) -> None:
        """Write the buffered steps now."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        steps, self._buffer = self._buffer, []
        write_steps(self.engine, self.id, steps, workspace=self.workspace,
                    workflow=self.workflow.name, version_id=self.workflow.version_id)
        self.steps_written += len(steps)

    def finish(self, card: RunCard, *, error: str | None = None) -> RunCard:
        """Write the remaining steps and the run card; set the final status (a backtest that was
        cancelled meanwhile stays ``cancelled``, with the card of what ran). Returns the card as
        stored: one that ended meanwhile (``cancelled``) says so, with why, in its card too,
        never "stopped by the caller" beside a row that says ``cancelled``."""
        self.flush()
        self.lease.stop()
        with session_scope(self.engine) as s:
            row = s.get(BacktestRow, self.id)
            assert row is not None
            if row.status == BacktestStatus.RUNNING.value:
                row.status = card.status.value
                row.error = error or (card.stop_reason if card.status is BacktestStatus.FAILED else None)
                row.finished_at = utcnow()
            elif row.status != card.status.value:
                card = dataclasses.replace(card, status=BacktestStatus(row.status), stop_reason=row.error)
            row.steps_run = card.steps_run
            row.steps_ok = card.steps_ok
            row.steps_unscored = card.steps_unscored
            row.steps_failed = card.steps_failed
            row.mean_score = card.mean_score
            row.cost_micro_usd = card.cost_micro_usd
            row.card_json = card.to_json()
            release_in(s, LeaseKind.BACKTEST, self.id, self.lease.token)
        self._finished = True
        return card

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._finished:
            return
        # Ctrl-C, SIGTERM (the CLI raises KeyboardInterrupt for it), Dagster's run termination:
        # every BaseException that is not an error.
        if exc is not None and not isinstance(exc, Exception):
            # First the status (one short write: a second Ctrl-C must not find it "running"),
            # then what ran.
            end_backtest(self.engine, self.id, BacktestStatus.INTERRUPTED, interruption_reason(exc))
        with self._lock:
            self._flush_locked()
            self._closed = True
        partial = getattr(exc, "backtest_result", None)
        if partial is not None:
            self.finish(partial.card, error=f"{type(exc).__name__}: {exc}")
            return
        self.lease.stop()
        error = f"{type(exc).__name__}: {exc}" if exc else "the backtest ended without a run card"
        end_backtest(self.engine, self.id, BacktestStatus.FAILED, error, only_if_running=False)


CANCEL_CHECK_S = 1.0
"""How often a running backtest reads whether it was cancelled (seconds)."""

ENDED = frozenset({BacktestStatus.COMPLETED, BacktestStatus.STOPPED, BacktestStatus.FAILED,
                   BacktestStatus.INTERRUPTED, BacktestStatus.CANCELLED})


def interruption_reason(exc: BaseException | None, when: dt.datetime | None = None) -> str:
    """Why a backtest or study stopped on a signal, with when.

    >>> interruption_reason(KeyboardInterrupt(), dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
    'interrupted at 2026-01-02T03:04:05Z: Ctrl-C (SIGINT) stopped its process'
    """
    at = (when or utcnow()).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(exc, KeyboardInterrupt):
        what = str(exc) or "Ctrl-C (SIGINT)"
    elif isinstance(exc, SystemExit):
        what = "a request to exit"
    else:
        what = f"{type(exc).__name__} ({exc})" if exc is not None and str(exc) else "a stop request"
    return f"interrupted at {at}: {what} stopped its process"


def end_backtest(engine: Engine, backtest_id: str, status: BacktestStatus, error: str | None, *,
                 now: dt.datetime | None = None, only_if_running: bool = True) -> bool:
    """End a backtest: set ``status`` with why and when, and count what ran from its stored steps.

    Only a ``running`` backtest is changed (unless ``only_if_running`` is False: then an ended
    one only gets its counts refreshed); returns whether its status changed. Its lease is dropped.
    """
    at = now or utcnow()
    with session_scope(engine) as s:
        agg = s.execute(
            select(func.count(), func.coalesce(func.sum(StepRow.cost_micro_usd), 0))
            .where(StepRow.backtest_id == backtest_id)
        ).one()
        changed = s.execute(
            update(BacktestRow)
            .where(BacktestRow.id == backtest_id, BacktestRow.status == BacktestStatus.RUNNING.value)
            .values(status=status.value, error=(error or "")[:4000] or None, finished_at=at,
                    steps_run=int(agg[0]), cost_micro_usd=int(agg[1]))
        ).rowcount  # type: ignore[attr-defined]
        if not changed and not only_if_running:
            s.execute(update(BacktestRow).where(BacktestRow.id == backtest_id)
                      .values(steps_run=int(agg[0]), cost_micro_usd=int(agg[1])))
        release_in(s, LeaseKind.BACKTEST, backtest_id)
    return bool(changed)


def write_steps(
    engine: Engine,
    backtest_id: str,
    steps: Sequence[StepRecord],
    *,
    workspace: str,
    workflow: str,
    version_id: str,
) -> None:
    """Insert steps and their calls (one transaction).

    Raises:
        StoreError: a step is not HISTORICAL.
    """
    with session_scope(engine) as s:
        for r in steps:
            if r.mode is not RunMode.HISTORICAL:
                raise StoreError(
                    f"expected HISTORICAL backtest steps, got a {r.mode.value} one. Live decisions "
                    "are stored with record_live_decision."
                )
            s.add(StepRow(
                backtest_id=backtest_id, step_index=r.index, t=r.t, mode=r.mode.value,
                status=r.status.value, decision_json=to_jsonable(r.decision),
                outcome_json=to_jsonable(r.outcome), score=r.score,
                cost_micro_usd=r.cost_micro_usd, error=r.error,
            ))
            for c in r.calls:
                s.add(_call_row(c, workspace=workspace, workflow=workflow, version_id=version_id,
                                run_kind="backtest", run_id=backtest_id))


def save_backtest(
    engine: Engine,
    result: Any,
    *,
    workspace: str,
    dataset: str = "",
    prices: PriceTable | None = None,
    dagster_run_id: str | None = None,
) -> str:
    """Store a finished :class:`~typestrict_pipeline.backtest.engine.BacktestResult`; returns its id."""
    card: RunCard = result.card
    rec = BacktestRecorder(
        engine, workspace=workspace, workflow=result.workflow, start=card.start, end=card.end,
        step=card.step, steps_planned=card.steps_planned, dataset=dataset,
        prices=prices or PriceTable(), dagster_run_id=dagster_run_id, batch=10**9,
    )
    for step in result.steps:
        rec.on_step(step)
    rec.finish(card)
    return rec.id


@dataclass(frozen=True)
class StoredBacktest:
    """A backtest as stored.

    Attributes:
        id: its id.
        workspace: workspace id.
        workflow: workflow name.
        version_id: the version that ran.
        mode: always HISTORICAL.
        status: running, completed, stopped or failed.
        dataset: the replayed data's label.
        steps_planned: steps in the range.
        steps_run: steps that ran.
        cost_micro_usd: total cost.
        mean_score: mean score (``None`` if nothing was scored).
        card: the run card (``None`` while running or if it failed before one existed).
        params: parameters it ran with.
        prompts: prompts it ran with.
        dagster_run_id: the Dagster run, if any.
        error: why it failed, if it did.
        created_at: when it started.
        finished_at: when it ended.
    """

    id: str
    workspace: str
    workflow: str
    version_id: str
    mode: RunMode
    status: BacktestStatus
    dataset: str
    steps_planned: int
    steps_run: int
    cost_micro_usd: int
    mean_score: float | None
    card: RunCard | None
    params: dict[str, Any]
    prompts: dict[str, Any]
    dagster_run_id: str | None
    error: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None


def _stored(row: BacktestRow) -> StoredBacktest:
    return StoredBacktest(
        id=row.id, workspace=row.workspace, workflow=row.workflow, version_id=row.version_id,
        mode=RunMode(row.mode), status=BacktestStatus(row.status), dataset=row.dataset,
        steps_planned=row.steps_planned, steps_run=row.steps_run,
        cost_micro_usd=int(row.cost_micro_usd), mean_score=row.mean_score,
        card=RunCard.from_json(row.card_json) if row.card_json else None,
        params=dict(row.params_json), prompts=dict(row.prompts_json),
        dagster_run_id=row.dagster_run_id, error=row.error, created_at=row.created_at,
        finished_at=row.finished_at,
    )


def load_backtest(engine: Engine, backtest_id: str) -> StoredBacktest:
    """One backtest by id.

    Raises:
        NotFoundError: no such backtest.
    """
    with session_scope(engine) as s:
        row = s.get(BacktestRow, backtest_id)
        if row is None:
            raise NotFoundError(f"expected a stored backtest, got unknown id {backtest_id!r}. "
                                "List them with `typestrict backtest list`.")
        return _stored(row)


def list_backtests(
    engine: Engine, *, workspace: str, workflow: str | None = None, limit: int = 50, offset: int = 0
) -> list[StoredBacktest]:
    """The newest backtests of a workspace (optionally of one workflow), newest first:
    ``limit`` of them after the ``offset`` newest."""
    with session_scope(engine) as s:
        q = select(BacktestRow).where(BacktestRow.workspace == workspace)
        if workflow is not None:
            q = q.where(BacktestRow.workflow == workflow)
        rows = s.scalars(q.order_by(BacktestRow.created_at.desc(), BacktestRow.id.desc())
                         .offset(offset).limit(limit)).all()
        return [_stored(r) for r in rows]


def stored_backtest_ids(engine: Engine, *, workspace: str, ids: list[str]) -> set[str]:
    """Which of ``ids`` the store holds for ``workspace`` (a launched backtest whose run has not
    recorded it yet is not among them)."""
    return set(rows_by_id(engine, BacktestRow.id, ids, lambda row: row.id, BacktestRow.workspace == workspace))


def count_backtests(engine: Engine, *, workspace: str) -> int:
    """How many backtests a workspace has in the store."""
    with session_scope(engine) as s:
        return int(s.scalar(select(func.count()).select_from(BacktestRow)
                            .where(BacktestRow.workspace == workspace)) or 0)


def last_completed_backtest(
    engine: Engine, *, workspace: str, workflow: str, version_id: str
) -> StoredBacktest | None:
    """The last completed backtest of a workflow version in a workspace (a study's USD estimate).

    Only ``completed`` backtests with at least one step count: a stopped or failed one did not
    show what a whole run costs.
    """
    with session_scope(engine) as s:
        row = s.scalars(
            select(BacktestRow)
            .where(
                BacktestRow.workspace == workspace,
                BacktestRow.workflow == workflow,
                BacktestRow.version_id == version_id,
                BacktestRow.status == BacktestStatus.COMPLETED.value,
                BacktestRow.steps_run > 0,
            )
            .order_by(BacktestRow.finished_at.desc(), BacktestRow.created_at.desc())
            .limit(1)
        ).first()
        return _stored(row) if row is not None else None


@dataclass(frozen=True)
class StoredStep:
    """A stored backtest step (always HISTORICAL)."""

    index: int
    t: dt.datetime
    status: StepStatus
    decision: Any
    outcome: Any
    score: float | None
    cost_micro_usd: int
    error: str | None
    mode: RunMode


def load_steps(engine: Engine, backtest_id: str) -> list[StoredStep]:
    """The stored steps of a backtest, in order."""
    with session_scope(engine) as s:
        rows = s.scalars(
            select(StepRow).where(StepRow.backtest_id == backtest_id).order_by(StepRow.step_index)
        ).all()
        return [StoredStep(r.step_index, r.t, StepStatus(r.status), r.decision_json,
                           r.outcome_json, r.score, int(r.cost_micro_usd), r.error, RunMode(r.mode))
                for r in rows]


# --- live decisions -------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredLiveDecision:
    """A stored live decision (always LIVE)."""

    id: str
    workspace: str
    workflow: str
    version_id: str
    as_of: dt.datetime
    status: StepStatus
    decision: Any
    error: str | None
    cost_micro_usd: int
    mode: RunMode
    created_at: dt.datetime


def record_live_decision(
    engine: Engine, live: LiveDecision, *, workspace: str, dagster_run_id: str | None = None
) -> str:
    """Store a live decision and its calls; returns its id.

    Raises:
        StoreError: the decision or one of its calls is not LIVE (a replayed decision is never
            stored as a live one).
    """
    if not isinstance(live, LiveDecision) or live.mode is not RunMode.LIVE:
        raise StoreError(
            f"expected a LIVE decision from run_live, got {type(live).__name__} in mode "
            f"{getattr(live, 'mode', '?')}. Backtest steps are HISTORICAL and stay in the backtest tables."
        )
    bad = [c for c in live.calls if c.mode is not RunMode.LIVE]
    if bad:
        raise StoreError(f"expected only LIVE calls in a live decision, got {len(bad)} "
                         f"{bad[0].mode.value} call(s). Meter live runs with RunMode.LIVE.")
    rid = _new_id()
    with session_scope(engine) as s:
        s.add(LiveDecisionRow(
            id=rid, workspace=workspace, workflow=live.workflow, version_id=live.version_id,
            mode=RunMode.LIVE.value, as_of=live.as_of, status=live.status.value,
            decision_json=to_jsonable(live.decision), error=live.error,
            cost_micro_usd=live.cost_micro_usd, params_json=to_jsonable(live.params),
            dagster_run_id=dagster_run_id,
        ))
        for c in live.calls:
            s.add(_call_row(c, workspace=workspace, workflow=live.workflow,
                            version_id=live.version_id, run_kind="live", run_id=rid))
    return rid


def live_decisions(
    engine: Engine, *, workspace: str, workflow: str, limit: int = 50
) -> list[StoredLiveDecision]:
    """The newest live decisions of a workflow (only ever LIVE records), newest first."""
    with session_scope(engine) as s:
        rows = s.scalars(
            select(LiveDecisionRow)
            .where(LiveDecisionRow.workspace == workspace, LiveDecisionRow.workflow == workflow,
                   LiveDecisionRow.mode == RunMode.LIVE.value)
            .order_by(LiveDecisionRow.created_at.desc())
            .limit(limit)
        ).all()
        out = []
        for r in rows:
            mode = RunMode(r.mode)
            if mode is not RunMode.LIVE:  # pragma: no cover - the check constraint forbids it
                raise StoreError(f"expected LIVE rows in the live table, got {mode}.")
            out.append(StoredLiveDecision(r.id, r.workspace, r.workflow, r.version_id, r.as_of,
                                          StepStatus(r.status), r.decision_json, r.error,
                                          int(r.cost_micro_usd), mode, r.created_at))
        return out


# --- versions -------------------------------------------------------------------------------


def activate_version(engine: Engine, *, workspace: str, workflow: Workflow,
                     within: Callable[[Session], None] | None = None) -> None:
    """Make ``workflow`` (a version) the active one of its name in ``workspace``.

    One active version per (workspace, workflow) is enforced by the primary key; concurrent
    activations end with exactly one of them active. ``within(session)``, when given, runs in
    the same transaction first (a promotion clears the parameters it replaces): both land or
    neither does.
    """
    for _ in range(5):
        try:
            with session_scope(engine) as s:
                if within is not None:
                    within(s)
                _remember_version(s, workflow)
                n = s.execute(
                    update(ActiveVersionRow)
                    .where(and_(ActiveVersionRow.workspace == workspace,
                                ActiveVersionRow.workflow == workflow.name))
                    .values(version_id=workflow.version_id, activated_at=utcnow())
                ).rowcount  # type: ignore[attr-defined]
                if n == 0:
                    s.add(ActiveVersionRow(workspace=workspace, workflow=workflow.name,
                                           version_id=workflow.version_id))
            return
        except IntegrityError:
            continue  # a concurrent activation inserted first (row or version): update instead
    raise StoreError(f"expected to activate {workflow.name}@{workflow.version_id}, got repeated "
                     "conflicts. Retry.")


def stored_version(
    engine: Engine, *, workflow: str, version_id: str
) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The parameters and prompts a stored version ran with (``None``: never stored)."""
    with session_scope(engine) as s:
        row = s.get(WorkflowVersionRow, (workflow, version_id))
        return (dict(row.params_json), dict(row.prompts_json)) if row is not None else None


def active_version_id(engine: Engine, *, workspace: str, workflow: str) -> str | None:
    """The version id activated in the store for ``workflow`` (``None``: the code's active one)."""
    with session_scope(engine) as s:
        row = s.get(ActiveVersionRow, (workspace, workflow))
        return row.version_id if row is not None else None


# --- usage ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRow:
    """Spend of one (day, workflow, mode).

    Attributes:
        day: UTC day the calls were made (``YYYY-MM-DD``), not the day a backtest replays.
        workflow: workflow name.
        mode: HISTORICAL or LIVE.
        calls: metered calls (retries and judge calls included).
        input_tokens: prompt tokens.
        output_tokens: completion tokens.
        cost_micro_usd: spend.
    """

    day: str
    workflow: str
    mode: RunMode
    calls: int
    input_tokens: int
    output_tokens: int
    cost_micro_usd: int


def usage(
    engine: Engine, *, workspace: str, since: dt.date | None = None, until: dt.date | None = None
) -> list[UsageRow]:
    """Workspace spend by day, workflow and mode (historical and live apart), oldest day first."""
    with session_scope(engine) as s:
        q = select(
            CallRow.day, CallRow.workflow, CallRow.mode, func.count(),
            func.coalesce(func.sum(CallRow.input_tokens), 0),
            func.coalesce(func.sum(CallRow.output_tokens), 0),
            func.coalesce(func.sum(CallRow.cost_micro_usd), 0),
        ).where(CallRow.workspace == workspace)
        if since is not None:
            q = q.where(CallRow.day >= since.isoformat())
        if until is not None:
            q = q.where(CallRow.day <= until.isoformat())
        q = q.group_by(CallRow.day, CallRow.workflow, CallRow.mode).order_by(
            CallRow.day, CallRow.workflow, CallRow.mode)
        return [UsageRow(str(d), str(w), RunMode(m), int(n), int(i), int(o), int(c))
                for d, w, m, n, i, o, c in s.execute(q).all()]
