"""Study records in the store: creation with its lock, reservations, settlement, cancel.

Every guarantee here is enforced by the database, not by the process:

* **one study at a time per workflow**: ``study_locks`` has the primary key
  ``(workspace, workflow)``; a second insert fails inside the database even when two starts
  race (the loser's transaction sees the unique violation after the winner commits);
* **spend never overshoots**: a run starts only after a conditional
  ``UPDATE study_studies SET reserved = reserved + est ... WHERE spend + reserved + est <= budget
  AND steps_used + steps_reserved + steps <= max_total_steps AND state = 'RUNNING' AND
  stop_limit IS NULL`` succeeded; the row lock taken by that UPDATE serializes parallel
  reservations; settlement moves the reservation into spend in one transaction;
* **idempotent re-execution**: ``study_runs`` is unique on (study, candidate, fold, window); a
  ``DONE`` row is returned as is, never re-run and never charged twice; a ``RESERVED`` row left
  by a killed attempt is released (its flushed partial cost stays: that money was spent) and
  reserved again.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Integer,
    Select,
    String,
    Text,
    bindparam,
    cast,
    column,
    delete,
    func,
    insert,
    select,
    text,
    tuple_,
    update,
    values,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.errors import ConflictError, LimitError, NotFoundError
from typestrict_pipeline.lifecycle.leases import LeaseKind, release_in, release_mine_in, take_in
from typestrict_pipeline.processes import ProcessIdentity, this_process
from typestrict_pipeline.store import session_scope, utcnow
from typestrict_pipeline.study.folds import FoldLayout
from typestrict_pipeline.study.limits import (
    NO_BACKTEST_MESSAGE,
    StopLimit,
    StudyLimits,
    estimate_cost_micro,
    study_total_steps,
)
from typestrict_pipeline.study.space import Candidate, Discarded, SearchSpace
from typestrict_pipeline.study.tables import (
    CandidateRow,
    CandidateState,
    DeletedStudyRow,
    LockRow,
    RunRow,
    RunState,
    StudyRow,
    StudyState,
    WindowKind,
)

HOLDOUT_FOLD = 0
BASELINE_CANDIDATE_ID = 0
"""``study_runs.candidate_id`` of the baseline's holdout run (no candidate row has id 0)."""


@dataclass(frozen=True)
class LastBacktest:
    """The last completed backtest of a workflow version in a workspace: what it cost, its steps."""

    cost_micro: int
    steps: int


@dataclass(frozen=True)
class Reservation:
    """A run admitted by the budget: run it, then :func:`settle_run` it with ``attempt``."""

    run_id: int
    attempt: str
    reserved_micro: int
    steps: int
    prior_cost_micro: int = 0
    """What earlier, interrupted attempts of this run already spent (kept, never re-charged):
    flushes and the settlement report ``prior_cost_micro + this attempt's cost``."""


@dataclass(frozen=True)
class AlreadyDone:
    """The run finished in an earlier attempt; its stored result is reused (never re-run)."""

    run_id: int


@dataclass(frozen=True)
class Refused:
    """No run: a limit was reached (``limit``) or the study is no longer running (``state``)."""

    limit: StopLimit | None
    state: StudyState


_WRITE_LOCK = text("UPDATE study_locks SET study_id = study_id WHERE 1 = 0")


def _write_lock(conn: Connection) -> None:
    """On SQLite, take the database write lock first so a read-then-write never deadlocks.

    (A no-op UPDATE starts a write transaction; PostgreSQL uses row locks instead.)
    """
    if conn.dialect.name == "sqlite":
        conn.execute(_WRITE_LOCK)


# The run lifecycle (reserve, extend, flush, settle) runs once or more per window run: its
# statements are SQLAlchemy Core, built once here with bound parameters, and executed on one
# connection transaction (no ORM entity loading, no unit-of-work flush): a reserve + settle
# pair takes about 8x less CPU than through the ORM on SQLite, 4x less on PostgreSQL.
_STUDIES = StudyRow.metadata.tables[StudyRow.__tablename__]
_RUNS = RunRow.metadata.tables[RunRow.__tablename__]
_CANDIDATES = CandidateRow.metadata.tables[CandidateRow.__tablename__]
_S = _STUDIES.c


@dataclass(frozen=True, slots=True)
class _HeldRun:
    """The columns of a ``study_runs`` row that the run lifecycle reads, under its row lock."""

    id: int
    study_id: int
    candidate_id: int
    state: str
    attempt: str
    steps_planned: int
    steps_done: int
    reserved_micro: int
    cost_micro: int | None
    error: str | None

    def owned_by(self, attempt: str) -> bool:
        """This attempt holds the run's reservation (it was not released or settled since)."""
        return self.attempt == attempt and self.state == RunState.RESERVED.value


_HELD_COLUMNS = [_RUNS.c[f.name] for f in fields(_HeldRun)]
_RUN_BY_KEY = select(*_HELD_COLUMNS).where(
    _RUNS.c.study_id == bindparam("study_id"),
    _RUNS.c.candidate_id == bindparam("candidate_id"),
    _RUNS.c.fold == bindparam("fold"),
    _RUNS.c.window == bindparam("window"),
).with_for_update()
_RUN_BY_ID = select(*_HELD_COLUMNS).where(_RUNS.c.id == bindparam("run_id")).with_for_update()
_INSERT_RUN = insert(_RUNS)
_UPDATE_RUN = update(_RUNS).where(_RUNS.c.id == bindparam("run_id"))
"""Sets the columns named by the execution's parameters (besides ``run_id``)."""

_EST = bindparam("est", type_=BigInteger)
_STEPS = bindparam("steps", type_=Integer)
_ADMITS = (
    _S.state == StudyState.RUNNING.value,
    _S.stop_limit.is_(None),
    _S.budget_micro.is_(None) | (_S.spend_micro + _S.reserved_micro + _EST <= _S.budget_micro),
)
"""A reservation of ``est`` more is admitted: study running, no limit hit, within the budget."""
_RESERVE = (
    update(_STUDIES)
    .where(_S.id == bindparam("sid"), *_ADMITS,
           _S.steps_used + _S.steps_reserved + _STEPS <= _S.max_total_steps)
    .values(reserved_micro=_S.reserved_micro + _EST, steps_reserved=_S.steps_reserved + _STEPS)
)
_EXTEND = (
    update(_STUDIES)
    .where(_S.id == bindparam("sid"), *_ADMITS)
    .values(reserved_micro=_S.reserved_micro + _EST)
)
_MOVE = (
    update(_STUDIES)
    .where(_S.id == bindparam("sid"))
    .values(
        spend_micro=_S.spend_micro + bindparam("d_cost", type_=BigInteger),
        reserved_micro=_S.reserved_micro - bindparam("freed_micro", type_=BigInteger),
        steps_used=_S.steps_used + bindparam("d_steps", type_=Integer),
        steps_reserved=_S.steps_reserved - bindparam("freed_steps", type_=Integer),
    )
)
"""Spend ``d_cost`` and ``d_steps``; give back ``freed_micro`` and ``freed_steps`` reserved."""
_CHARGE_CANDIDATE = (
    update(_CANDIDATES)
    .where(_CANDIDATES.c.id == bindparam("cid"))
    .values(cost_micro=func.coalesce(_CANDIDATES.c.cost_micro, 0)
            + bindparam("d_cost", type_=BigInteger))
)
_RECORD_STOP = (
    update(_STUDIES)
    .where(_S.id == bindparam("sid"), _S.stop_limit.is_(None))
    .values(stop_limit=bindparam("limit", type_=String))
)
_STUDY_COST_BASIS = select(_S.cost_per_step_num, _S.cost_per_step_den).where(
    _S.id == bindparam("sid"))
_STUDY_LIMITS = select(_S.state, _S.stop_limit, _S.steps_used, _S.steps_reserved,
                       _S.max_total_steps).where(_S.id == bindparam("sid"))
_STUDY_STATE = select(_S.state, _S.stop_limit).where(_S.id == bindparam("sid"))


class WorkflowBusyError(ConflictError):
    """A second study on a workflow whose study is in flight: the page's sentence, then how to
    cancel the one in flight on its own line: the operator's command (``typestrict study cancel
    N``) by default; :meth:`for_workspace` words it for a workspace's doors (the API, the
    console), which cannot run the operator's command."""

    def __init__(self, workspace: str, workflow: str, other: int | None, state: str) -> None:
        self.workspace, self.workflow, self.other, self.state = workspace, workflow, other, state
        super().__init__(self._text(f"typestrict study cancel {other if other is not None else 'STUDY_ID'}"))

    def _text(self, cancel: str) -> str:
        who = f"study {self.other} ({self.state})" if self.other is not None else "another study"
        return (
            f"expected no study in flight on workflow {self.workflow!r} in workspace {self.workspace!r}, "
            f"got {who}. {ONE_AT_A_TIME}\n"
            f"To cancel it: {cancel}"
        )

    def for_workspace(self) -> str:
        """The message as the API and the console say it: cancel through them.

        >>> print(WorkflowBusyError("acme", "rain", 4, "RUNNING").for_workspace())
        expected no study in flight on workflow 'rain' in workspace 'acme', got study 4 (RUNNING). One study at a time per workflow; cancel the running one or wait for it to finish.
        To cancel it: POST /v1/studies/4/cancel, or the button "Cancel the study" on /console/studies/4
        """
        if self.other is None:
            return self._text("cancel the study in flight on this workflow (GET /v1/studies lists them)")
        return self._text(f'POST /v1/studies/{self.other}/cancel, or the button "Cancel the study" on '
                          f"/console/studies/{self.other}")


ONE_AT_A_TIME = ("One study at a time per workflow; cancel the running one or wait for it to "
                 "finish.")
"""The page's words; the command that cancels goes on its own line after them."""


def screen_candidates(
    space: SearchSpace, validate: Callable[[Candidate], str | None] | None
) -> tuple[list[Candidate], list[Discarded]]:
    """The space's candidates the workflow accepts, and those discarded (duplicates, and those
    ``validate`` rejects, with why): what creating a study stores and what its estimate counts.

    Raises:
        LimitError: the workflow accepts none of them.

    >>> space = SearchSpace(grid={"k": [1, 2, 2]})
    >>> kept, dropped = screen_candidates(space, lambda c: None if c.params["k"] < 2 else "too big")
    >>> [c.params for c in kept], [d.reason for d in dropped]
    ([{'k': 1}], ['duplicate of candidate 2', 'rejected by the workflow: too big'])
    """
    kept, dropped = space.expand()
    if validate is None:
        return kept, dropped
    accepted: list[Candidate] = []
    for cand in kept:
        why = validate(cand)
        if why is None:
            accepted.append(cand)
        else:
            dropped.append(Discarded(cand, f"rejected by the workflow: {why}"))
    if not accepted:
        raise LimitError(
            f"expected at least one candidate the workflow accepts, got none of "
            f"{len(dropped)} ({dropped[0].reason if dropped else 'empty space'}). Fix the "
            "search space."
        )
    return accepted, dropped


def create_study(
    engine: Engine,
    *,
    workspace: str,
    workflow: str,
    workflow_version: str,
    space: SearchSpace,
    layout: FoldLayout,
    limits: StudyLimits,
    config: Mapping[str, Any] | None = None,
    last_backtest: LastBacktest | None = None,
    name: str | None = None,
    validate: Callable[[Candidate], str | None] | None = None,
    min_unseen_steps: int | None = None,
    owner: ProcessIdentity | None = None,
) -> int:
    """Create a study in state ``PENDING`` and take its workflow's lock, atomically.

    The creating process (``owner``, default this one) holds the study's lease until a run takes
    it over (:func:`start_study`); if it dies first, the reaper marks the study ``INTERRUPTED``.
    A study of the workflow whose process is gone never refuses this one: it is ended first.

    Candidates beyond ``max_candidates`` (in run order) are recorded as discarded with the
    reason ``not run: Max candidates reached``; duplicates as ``duplicate of candidate N``.

    Args:
        engine: the store.
        workspace: workspace id.
        workflow: workflow id.
        workflow_version: the version whose candidates are tried.
        space: what to try.
        layout: folds and holdout.
        limits: max candidates and max total steps (required), USD budget (optional).
        config: anything the runner needs to replay (data name, step, horizon, clients).
        last_backtest: cost and steps of this version's last completed backtest in this
            workspace, or ``None`` when it has none.
        name: optional display name.
        validate: ``validate(candidate) -> None`` when the workflow accepts the candidate, else
            the reason; rejected candidates are discarded (``rejected by the workflow: …``)
            instead of failing the study later.
        min_unseen_steps: "Min unseen steps for a re-run" (a whole number ≥ 1), or ``None``
            when the study is not meant to be re-run on a schedule.

    Returns:
        The new study's id.

    Raises:
        LimitError: a required limit is missing, or a USD budget was set for a version that
            has never been backtested in this workspace (the page's message).
        ConflictError: a study is already in flight on this workflow (its process is alive).
    """
    limits.validate()
    check_min_unseen_steps(min_unseen_steps)
    kept, dropped = screen_candidates(space, validate)
    assert limits.max_candidates is not None
    admitted = kept[: limits.max_candidates]
    cut = kept[limits.max_candidates :]
    total_steps = study_total_steps(
        len(admitted), layout.search_steps_per_candidate, layout.holdout.steps
    )
    estimate = None
    if last_backtest is not None and last_backtest.steps > 0:
        estimate = estimate_cost_micro(last_backtest.cost_micro, last_backtest.steps, total_steps)
    if limits.budget_micro is not None and estimate is None:
        raise LimitError(
            f"expected a completed backtest of workflow {workflow!r} version "
            f"{workflow_version!r} in workspace {workspace!r} to estimate the USD budget from, "
            f"got none. {NO_BACKTEST_MESSAGE}"
        )
    cfg = dict(config or {})
    # Liveness, not hope: a study of the workflow whose process died is ended first (INTERRUPTED,
    # its lock and reservations released), so only a live one makes this one wait.
    from typestrict_pipeline.lifecycle.reaper import reap

    reap(engine, workspace=workspace, workflow=workflow)
    _refuse_in_flight(engine, workspace, workflow)
    with session_scope(engine) as s:
        study = StudyRow(
            workspace=workspace,
            workflow=workflow,
            workflow_version=workflow_version,
            name=name,
            state=StudyState.PENDING.value,
            space_json=space.to_json(),
            layout_json=layout.to_json(),
            config_json=cfg,
            horizon_steps=layout.horizon_steps,
            holdout_start=layout.holdout.start,
            holdout_end=layout.holdout.end,
            max_candidates=limits.max_candidates,
            max_total_steps=limits.max_total_steps,
            candidates_planned=len(kept) + len(dropped),
            steps_used=0,
            steps_reserved=0,
            cost_tracked=True,
            spend_micro=0,
            reserved_micro=0,
            budget_micro=limits.budget_micro,
            estimate_micro=estimate,
            cost_per_step_num=None if last_backtest is None else last_backtest.cost_micro,
            cost_per_step_den=None if last_backtest is None else last_backtest.steps,
            min_unseen_steps=min_unseen_steps,
            created_at=utcnow(),
        )
        s.add(study)
        s.flush()
        rows: list[CandidateRow] = []
        for cand in admitted:
            rows.append(_candidate_row(study.id, cand, CandidateState.PLANNED, None))
        for cand in cut:
            rows.append(_candidate_row(study.id, cand, CandidateState.DISCARDED,
                                       f"not run: {StopLimit.MAX_CANDIDATES.value} reached"))
        for d in dropped:
            rows.append(_candidate_row(study.id, d.candidate, CandidateState.DISCARDED, d.reason))
        s.add_all(rows)
        s.add(LockRow(workspace=workspace, workflow=workflow, study_id=study.id, created_at=utcnow()))
        try:
            s.flush()
            # The creating process holds it until a run takes it over (liveness, not hope).
            take_in(s, LeaseKind.STUDY, str(study.id), owner=owner)
        except IntegrityError:
            s.rollback()
            raise _busy(s, workspace, workflow) or WorkflowBusyError(workspace, workflow, None,
                                                                     "in flight") from None
        return study.id


def _refuse_in_flight(engine: Engine, workspace: str, workflow: str) -> None:
    """Refuse a study while another holds its workflow's lock, before its rows are written: up to
    100,000 candidate rows were inserted (seconds of work for a body of a few hundred bytes) and
    rolled back at the lock's insert, for every request made while a study was in flight. The
    lock's insert stays the atomic check (a study created between the two is refused there).

    Raises:
        WorkflowBusyError: a study holds the lock.
    """
    with session_scope(engine) as s:
        busy = _busy(s, workspace, workflow)
    if busy is not None:
        raise busy


def _busy(s: Session, workspace: str, workflow: str) -> WorkflowBusyError | None:
    """The refusal naming the study that holds the workflow's lock (and its state), or None."""
    other = s.execute(
        select(LockRow.study_id).where(LockRow.workspace == workspace, LockRow.workflow == workflow)
    ).scalar_one_or_none()
    if other is None:
        return None
    st = s.get(StudyRow, other)
    return WorkflowBusyError(workspace, workflow, other, st.state if st is not None else "in flight")


def check_min_unseen_steps(value: int | None) -> None:
    """Refuse a "Min unseen steps for a re-run" that is not ``None`` or a whole number ≥ 1.

    >>> check_min_unseen_steps(20), check_min_unseen_steps(None)
    (None, None)
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LimitError(f"expected Min unseen steps for a re-run as a whole number ≥ 1, got "
                         f"{value!r}. Set it to e.g. 20, or leave it out.")


def set_min_unseen_steps(engine: Engine, study_id: int, steps: int) -> int:
    """Set a study's "Min unseen steps for a re-run" when it has none yet; returns the stored value.

    For studies created before the setting existed (or without it). A study that already has
    one keeps it: the stored value is returned and the caller compares.
    """
    check_min_unseen_steps(steps)
    with session_scope(engine) as s:
        s.execute(update(StudyRow).where(StudyRow.id == study_id,
                                         StudyRow.min_unseen_steps.is_(None))
                  .values(min_unseen_steps=steps))
        stored = get_study(s, study_id).min_unseen_steps
        assert stored is not None
        return int(stored)


def _candidate_row(study_id: int, cand: Any, state: CandidateState, reason: str | None) -> CandidateRow:
    return CandidateRow(
        study_id=study_id,
        idx=cand.index,
        key=cand.key,
        label=cand.label,
        origin=cand.origin,
        params_json=dict(cand.params),
        prompts_json=dict(cand.prompts),
        state=state.value,
        discard_reason=reason,
        cost_micro=None,
    )


def get_study(session: Session, study_id: int) -> StudyRow:
    """The study row, or a :class:`NotFoundError` naming the id."""
    row = session.get(StudyRow, study_id)
    if row is None:
        raise _study_not_found(study_id)
    return row


def candidate_number(engine: Engine, candidate_id: int | None) -> str | None:
    """How every surface names a candidate, ``"#N"`` (its number in its study), for a store row
    id; ``None`` for none. The row id itself never leaves the store.

    >>> from typestrict_pipeline.store import open_store
    >>> candidate_number(open_store("sqlite://"), None) is None
    True
    """
    if candidate_id is None:
        return None
    with session_scope(engine) as s:
        row = s.get(CandidateRow, candidate_id)
        return None if row is None else f"#{row.idx}"


def _study_not_found(study_id: int) -> NotFoundError:
    return NotFoundError(
        f"expected an existing study id, got {study_id}. "
        "List studies with `typestrict study list` and use one of their ids."
    )


_RESUMABLE = [StudyState.PENDING.value, StudyState.RUNNING.value, StudyState.FAILED.value,
              StudyState.INTERRUPTED.value]


def start_study(engine: Engine, study_id: int, dagster_run_id: str | None = None, *,
                owner: ProcessIdentity | None = None) -> None:
    """Move a ``PENDING``, ``FAILED`` or ``INTERRUPTED`` study to ``RUNNING`` (a re-execution
    resumes it); the driving process (``owner``, default this one) takes its lease.

    A ``FAILED`` or ``INTERRUPTED`` study released its workflow's lock: it is taken again.

    Raises:
        ConflictError: the study ended, or another study took the workflow meanwhile.
    """
    with session_scope(engine) as s:
        _write_lock(s.connection())
        study = get_study(s, study_id)
        state = StudyState(study.state)
        if state.is_terminal:
            raise ConflictError(
                f"expected a pending or interrupted study, got study {study_id} in state "
                f"{state.label}. Create a new study to run again."
            )
        lock = s.get(LockRow, (study.workspace, study.workflow))
        if lock is None:
            s.add(LockRow(workspace=study.workspace, workflow=study.workflow, study_id=study.id,
                          created_at=utcnow()))
            try:
                s.flush()
            except IntegrityError:
                s.rollback()
                lock = s.get(LockRow, (study.workspace, study.workflow))
        if lock is not None and lock.study_id != study.id:
            other = s.get(StudyRow, lock.study_id)
            raise WorkflowBusyError(study.workspace, study.workflow, lock.study_id,
                                    other.state if other is not None else "in flight")
        s.execute(
            update(StudyRow)
            .where(StudyRow.id == study_id, StudyRow.state.in_(_RESUMABLE))
            .values(
                state=StudyState.RUNNING.value,
                started_at=study.started_at or utcnow(),
                dagster_run_id=dagster_run_id or study.dagster_run_id,
                error=None,
                finished_at=None,
            )
        )
        take_in(s, LeaseKind.STUDY, str(study_id), owner=owner or this_process(),
                force=True)  # the new driver takes over whoever held it


def await_run(engine: Engine, study_id: int, dagster_run_id: str) -> bool:
    """A ``PENDING`` study whose Dagster run is queued waits on that run, not on the process that
    created it: the run's id is recorded on the study and the creating process's lease dropped.

    The API (and the console) create a study, then queue its ``study_job`` run; the run outlives
    the server. Before, the server's process kept the study's lease while the run waited in the
    queue (``max_concurrent_runs``), so a restart of the server (a deploy) made the reaper end
    the study ``INTERRUPTED`` ("its process is gone") and free its workflow for another study,
    whose run then made the queued one fail. Now the reaper ends a waiting study only when its
    run has ended without starting it (``docs/lifecycle.md``, "Studies"). A run that started
    meanwhile (the study ``RUNNING``, its lease the run's) is left as it is.

    Returns:
        Whether the study now waits on ``dagster_run_id``.
    """
    with session_scope(engine) as s:
        _write_lock(s.connection())
        waiting = s.execute(
            update(StudyRow)
            .where(StudyRow.id == study_id, StudyRow.state == StudyState.PENDING.value,
                   StudyRow.dagster_run_id.is_(None))
            .values(dagster_run_id=dagster_run_id)
        ).rowcount  # type: ignore[attr-defined]
        if waiting:
            release_mine_in(s, LeaseKind.STUDY, str(study_id))
        return bool(waiting)


def abandon_unstarted(engine: Engine, study_id: int, reason: str) -> bool:
    """Mark a study that no run ever started (still ``PENDING``) as ``FAILED`` with ``reason``
    and when (``finished_at``, as :func:`mark_failed`), and release its workflow's lock; do
    nothing to a study a run started. Whoever launched the run calls it when the run ended: a
    run that could not reach the store cannot release the lock itself, and nothing else would. Re-executing the run later takes the lock again
    (:func:`start_study`).

    Returns:
        Whether the study was abandoned.
    """
    with session_scope(engine) as s:
        _write_lock(s.connection())
        res = s.execute(
            update(StudyRow)
            .where(StudyRow.id == study_id, StudyRow.state == StudyState.PENDING.value)
            .values(state=StudyState.FAILED.value, error=reason[:4000], finished_at=utcnow())
        )
        if not res.rowcount:  # type: ignore[attr-defined]
            return False
        study = get_study(s, study_id)
        _release_lock(s, study)
        release_in(s, LeaseKind.STUDY, str(study_id))
        return True


def mark_failed(engine: Engine, study_id: int, error: str) -> None:
    """Record that the study's run failed. Its workflow's lock is released (a failed study blocks
    nothing); a re-execution takes the lock again and resumes it.

    Its lease is released too, unless a window of it is still ``RESERVED`` (a slice whose store
    write failed, or another step still running): then, as for a cancel, the lease stays with
    the process that holds the reservation, and once that process is gone the reaper gives the
    unspent reservation back (:func:`release_ended`). Before, the lease went at once and nothing
    ever released such a window: a study ``FAILED`` on a dropped store connection kept its
    slice's windows reserved (their steps and estimated cost) for good."""
    with session_scope(engine) as s:
        study = s.get(StudyRow, study_id)
        changed = s.execute(
            update(StudyRow)
            .where(StudyRow.id == study_id, StudyRow.state.in_(["PENDING", "RUNNING"]))
            .values(state=StudyState.FAILED.value, error=error[:4000], finished_at=utcnow())
        ).rowcount  # type: ignore[attr-defined]
        if changed and study is not None:
            _release_lock(s, study)
            if s.scalar(select(_RUNS.c.id).where(
                    _RUNS.c.study_id == study_id, _RUNS.c.state == RunState.RESERVED.value).limit(1)) is None:
                release_in(s, LeaseKind.STUDY, str(study_id))


def interrupt_study(engine: Engine, study_id: int, why: str, *,
                    now: dt.datetime | None = None) -> bool:
    """A ``PENDING`` or ``RUNNING`` study whose driving process is gone becomes ``INTERRUPTED``:
    ``why`` (with when) recorded, its lock, lease and unspent reservations released (what its runs
    spent stays spent). Returns whether it changed."""
    at = now or utcnow()
    with engine.begin() as conn:
        _write_lock(conn)
        changed = conn.execute(
            update(_STUDIES)
            .where(_S.id == study_id, _S.state.in_([StudyState.PENDING.value,
                                                     StudyState.RUNNING.value]))
            .values(state=StudyState.INTERRUPTED.value, error=why[:4000], finished_at=at)
        ).rowcount
        if not changed:
            return False
        held = conn.execute(select(*_HELD_COLUMNS).where(
            _RUNS.c.study_id == study_id, _RUNS.c.state == RunState.RESERVED.value)).all()
        for row in held:
            _release(conn, _HeldRun(*row))
    with session_scope(engine) as s:
        study = s.get(StudyRow, study_id)
        if study is not None:
            _release_lock(s, study)
        release_in(s, LeaseKind.STUDY, str(study_id))
    return True


def cancel_study(engine: Engine, study_id: int) -> StudyState:
    """Cancel a study: no new run starts; runs in flight stop at their next step; what ran stays.

    Returns the state after the call (``CANCELLED``, or the terminal state it already had).
    """
    with session_scope(engine) as s:
        study = get_study(s, study_id)
        res = s.execute(
            update(StudyRow)
            .where(StudyRow.id == study_id, StudyRow.state.in_(_RESUMABLE))
            .values(state=StudyState.CANCELLED.value, finished_at=utcnow())
        )
        if res.rowcount:  # type: ignore[attr-defined]
            _release_lock(s, study)
            # A process settling reserved windows keeps its lease until it ends them (it
            # releases it at its finish); if it dies first, the reaper sees the lease dead and
            # gives the reservations back (release_ended). Nothing reserved: released now.
            if s.scalar(select(_RUNS.c.id).where(
                    _RUNS.c.study_id == study_id, _RUNS.c.state == RunState.RESERVED.value).limit(1)) is None:
                release_in(s, LeaseKind.STUDY, str(study_id))
            return StudyState.CANCELLED
        return StudyState(study.state)


_ENDED_HOLDING = (StudyState.CANCELLED.value, StudyState.FAILED.value)
"""The states in which a study's window runs may still be ``RESERVED`` by a process that has not
settled them yet: a cancel, or a failure, while a window ran (:func:`release_ended`)."""


def release_ended(engine: Engine, study_id: int) -> int:
    """Give back what a ``CANCELLED`` or ``FAILED`` study's window runs still hold (``RESERVED``:
    their cost and steps) and release its lease; for a study whose process died (or ended on an
    error) after the cancel or the failure, before it settled the windows it was running (the
    reaper calls it once that process is gone). Returns how many runs were released (0: neither
    cancelled nor failed, or nothing held).
    """
    with engine.begin() as conn:
        _write_lock(conn)
        state = conn.scalar(select(_S.state).where(_S.id == study_id))
        if state not in _ENDED_HOLDING:
            return 0
        held = conn.execute(select(*_HELD_COLUMNS).where(
            _RUNS.c.study_id == study_id, _RUNS.c.state == RunState.RESERVED.value)).all()
        for row in held:
            _release(conn, _HeldRun(*row))
    with session_scope(engine) as s:
        release_in(s, LeaseKind.STUDY, str(study_id))
    return len(held)


def delete_study(engine: Engine, study_id: int) -> None:
    """Delete a study with its candidates and runs (the Studies section's *Delete*).

    A study in flight (``PENDING`` or ``RUNNING``) is refused: cancel it first. A ``FAILED``
    study's workflow lock is released with it. Parameters a promotion already applied to the
    workflow stay applied (deleting the study does not change the configuration). A schedule
    re-running this study turns itself off at its next tick ("The root study was deleted").
    What it spent stays (``study_deleted``, in the same transaction): Usage shows it under its
    id, marked deleted, and the workspace's usage budget keeps counting it.

    Raises:
        NotFoundError: no such study.
        ConflictError: the study is in flight.
    """
    with session_scope(engine) as s:
        _write_lock(s.connection())
        study = s.execute(select(StudyRow).where(StudyRow.id == study_id).with_for_update()
                          ).scalar_one_or_none()
        if study is None:
            get_study(s, study_id)  # raises the NotFoundError naming the id
            return
        if study.state in (StudyState.PENDING.value, StudyState.RUNNING.value):
            raise ConflictError(
                f"expected a study that is not in flight, got study {study_id} in state "
                f"{StudyState(study.state).label}. Cancel it first (typestrict study cancel "
                f"{study_id}), then delete it."
            )
        _release_lock(s, study)
        s.add(DeletedStudyRow(
            study_id=study.id, workspace=study.workspace, workflow=study.workflow,
            name=study.name, state=study.state, created_at=study.created_at,
            deleted_at=utcnow(), cost_tracked=bool(study.cost_tracked),
            spend_micro=study.spend_micro, budget_micro=study.budget_micro))
        s.execute(delete(RunRow).where(RunRow.study_id == study_id))
        s.execute(delete(CandidateRow).where(CandidateRow.study_id == study_id))
        s.delete(study)


def _release_lock(s: Session, study: StudyRow) -> None:
    lock = s.get(LockRow, (study.workspace, study.workflow))
    if lock is not None and lock.study_id == study.id:
        s.delete(lock)


def run_estimate_micro(study: StudyRow, steps: int) -> int:
    """Estimated cost of a run of ``steps`` steps (0 when the study has no cost basis)."""
    return _estimate_micro(study.cost_per_step_num, study.cost_per_step_den, steps)


def _estimate_micro(num: int | None, den: int | None, steps: int) -> int:
    if num is None or not den:
        return 0
    return estimate_cost_micro(num, den, steps)


def _study_estimate(conn: Connection, study_id: int, steps: int) -> int:
    """:func:`run_estimate_micro` from the study's cost basis, or the study's NotFoundError."""
    row = conn.execute(_STUDY_COST_BASIS, {"sid": study_id}).one_or_none()
    if row is None:
        raise _study_not_found(study_id)
    num, den = row
    return _estimate_micro(num, den, steps)


def _held_run(conn: Connection, stmt: Select[Any], params: Mapping[str, Any]) -> _HeldRun | None:
    """The run row ``stmt`` selects, locked (``FOR UPDATE``; SQLite: under the write lock)."""
    row = conn.execute(stmt, params).one_or_none()
    return None if row is None else _HeldRun(*row)


def _run_by_id(conn: Connection, run_id: int) -> _HeldRun:
    """The run ``run_id``, locked; ``NoResultFound`` when there is none."""
    return _HeldRun(*conn.execute(_RUN_BY_ID, {"run_id": run_id}).one())


def reserve_run(
    engine: Engine,
    study_id: int,
    candidate_id: int,
    fold: int,
    window: WindowKind,
    steps: int,
    *,
    attempt: str | None = None,
    estimate_micro: int | None = None,
) -> Reservation | AlreadyDone | Refused:
    """Reserve a run's estimated cost and steps before it starts, or say why it may not start.

    The first limit that refuses a run is recorded as the study's ``stop_limit`` and no run
    starts after it (runs already in flight finish and are kept). ``estimate_micro`` is the
    run's estimate when the caller already knows it (:func:`run_estimate_micro`).
    """
    attempt = attempt or uuid.uuid4().hex
    key = {"study_id": study_id, "candidate_id": candidate_id, "fold": fold,
           "window": window.value}
    with engine.begin() as conn:
        _write_lock(conn)
        existing = _held_run(conn, _RUN_BY_KEY, key)
        if existing is not None and existing.state == RunState.DONE.value:
            return AlreadyDone(existing.id)
        est = _study_estimate(conn, study_id, steps) if estimate_micro is None else estimate_micro
        if existing is not None:
            # A previous attempt was killed (RESERVED) or failed/cut: release what it still holds.
            _release(conn, existing)
        if not conn.execute(_RESERVE, {"sid": study_id, "est": est, "steps": steps}).rowcount:
            return _refusal(conn, study_id, steps)
        return _hold(conn, key, existing, attempt, est, steps)


def reserve_runs_together(
    engine: Engine,
    study_id: int,
    runs: Sequence[tuple[int, int, WindowKind, int]],
    *,
    attempt: str | None = None,
) -> list[Reservation | AlreadyDone] | Refused:
    """Reserve several runs at once: all of them are admitted, or none.

    The winner's holdout and the baseline's run on the same slice are reserved together (the
    page's "the holdout" is both): either both run, or the holdout is reported missing; the
    baseline is never what the budget refuses after the winner's holdout ran.

    Args:
        engine: the store.
        study_id: the study.
        runs: ``(candidate_id, fold, window, steps)`` of each run, in the order they will run.
        attempt: the attempt id (default: a new one); each run's attempt is ``attempt-i``.

    Returns:
        One :class:`Reservation` (or :class:`AlreadyDone`, for a run an earlier attempt
        finished) per run, in order; or :class:`Refused` when the study cannot admit them all
        (the limit is recorded, as by :func:`reserve_run`).
    """
    attempt = attempt or uuid.uuid4().hex
    with engine.begin() as conn:
        _write_lock(conn)
        plan: list[tuple[dict[str, Any], _HeldRun | None, int, int]] = []
        for candidate_id, fold, window, steps in runs:
            key = {"study_id": study_id, "candidate_id": candidate_id, "fold": fold,
                   "window": window.value}
            existing = _held_run(conn, _RUN_BY_KEY, key)
            plan.append((key, existing, steps, _study_estimate(conn, study_id, steps)))
        todo = [item for item in plan if item[1] is None or item[1].state != RunState.DONE.value]
        for _, existing, _, _ in todo:
            if existing is not None:
                _release(conn, existing)
        est = sum(item[3] for item in todo)
        steps_needed = sum(item[2] for item in todo)
        if todo and not conn.execute(_RESERVE, {"sid": study_id, "est": est,
                                                "steps": steps_needed}).rowcount:
            return _refusal(conn, study_id, steps_needed)
        out: list[Reservation | AlreadyDone] = []
        for i, (key, existing, steps, each) in enumerate(plan):
            if existing is not None and existing.state == RunState.DONE.value:
                out.append(AlreadyDone(existing.id))
            else:
                out.append(_hold(conn, key, existing, f"{attempt}-{i}", each, steps))
        return out


def _refusal(conn: Connection, study_id: int, steps: int) -> Refused:
    """Why the conditional UPDATE admitted no run; a limit is recorded if none was yet."""
    row = conn.execute(_STUDY_LIMITS, {"sid": study_id}).one_or_none()
    if row is None:
        raise _study_not_found(study_id)
    state_value, stop_limit, steps_used, steps_reserved, max_total_steps = row
    state = StudyState(state_value)
    if state != StudyState.RUNNING:
        return Refused(None, state)
    if stop_limit is not None:
        return Refused(StopLimit(stop_limit), state)
    assert max_total_steps is not None
    if steps_used + steps_reserved + steps > max_total_steps:
        limit = StopLimit.MAX_TOTAL_STEPS
    else:
        limit = StopLimit.BUDGET_USD
    conn.execute(_RECORD_STOP, {"sid": study_id, "limit": limit.value})
    recorded = conn.execute(_STUDY_STATE, {"sid": study_id}).one()[1]
    return Refused(StopLimit(recorded or limit.value), state)


def _held_values(attempt: str, est: int, steps: int, prior: int) -> dict[str, Any]:
    """The columns of an admitted run's row (besides its key)."""
    return {
        "state": RunState.RESERVED.value, "attempt": attempt, "steps_planned": steps,
        "steps_done": 0, "reserved_micro": est, "cost_micro": prior, "scores_json": None,
        "error": None, "started_at": utcnow(), "finished_at": None,
    }


def _hold(conn: Connection, key: Mapping[str, Any], existing: _HeldRun | None, attempt: str,
          est: int, steps: int) -> Reservation:
    """Write the admitted run's row (a new one, or the earlier attempt's); keep its spent cost."""
    prior = 0 if existing is None else existing.cost_micro or 0
    values = _held_values(attempt, est, steps, prior)
    if existing is None:
        inserted = conn.execute(_INSERT_RUN, {**key, **values}).inserted_primary_key
        assert inserted is not None
        run_id = int(inserted[0])
    else:
        run_id = existing.id
        conn.execute(_UPDATE_RUN, {"run_id": run_id, **values})
    return Reservation(run_id, attempt, est, steps, prior)


@dataclass(frozen=True)
class SliceReservation:
    """What :func:`reserve_slice` admitted: one entry per window of the slice's admitted prefix."""

    runs: tuple[Reservation | AlreadyDone, ...]
    """In the slice's order: a :class:`Reservation` to run, or :class:`AlreadyDone` (an earlier
    attempt finished it). Shorter than the slice when only a prefix fitted the limits."""
    fresh: frozenset[int] = frozenset()
    """The run rows this reservation inserted (no earlier attempt): :func:`release_unstarted`
    deletes them, so a window released before it started leaves no row, as if never reserved."""


_STUDY_HEADROOM = select(_S.state, _S.stop_limit, _S.spend_micro, _S.reserved_micro,
                         _S.budget_micro, _S.steps_used, _S.steps_reserved,
                         _S.max_total_steps).where(_S.id == bindparam("sid")).with_for_update()


def reserve_slice(
    engine: Engine,
    study_id: int,
    runs: Sequence[tuple[int, int, WindowKind, int, int]],
    *,
    attempts: Sequence[str],
) -> SliceReservation | Refused:
    """Reserve the next windows of a chunk at once: one transaction, one update of the study row.

    Each window keeps its own run row, idempotency key and attempt (``attempts[i]``), exactly as
    :func:`reserve_run` would give it: a finished window is :class:`AlreadyDone` (never re-run,
    never charged again), a window an interrupted attempt left ``RESERVED`` is released first
    (what it flushed stays spent). The windows still to run are reserved together, their summed
    estimate and steps, by the same conditional UPDATE as one window's (within the budget and
    the step limit, study running, no limit hit). When they do not all fit, the longest prefix
    of the slice that fits is reserved instead; when not even its first window fits, nothing is
    and the limit is recorded as :func:`reserve_run` records it. So windows run in the same
    order and the budget is never passed, whatever the slice's length.

    Args:
        engine: the store.
        study_id: the study.
        runs: ``(candidate_id, fold, window, steps, estimate_micro)`` of each window, in the
            order they will run.
        attempts: each window's attempt id (same length as ``runs``).

    Returns:
        The admitted prefix (:class:`SliceReservation`), or :class:`Refused` when not even the
        first window to run was admitted.
    """
    if len(attempts) != len(runs) or not runs:
        raise ValueError(f"expected one attempt per window of a non-empty slice, got "
                         f"{len(attempts)} attempts for {len(runs)} windows")
    with engine.begin() as conn:
        _write_lock(conn)
        plan = _slice_plan(conn, study_id, runs)
        admitted = _admit_slice(conn, study_id, plan)
        if isinstance(admitted, Refused):
            return admitted
        return _hold_slice(conn, plan[:admitted], attempts)


@dataclass(frozen=True)
class _SliceItem:
    """One window of a slice: its run row's key, the row it already has (if any), its steps
    and its estimate."""

    key: dict[str, Any]
    existing: _HeldRun | None
    steps: int
    est: int

    @property
    def done(self) -> bool:
        """Finished by an earlier attempt: reported, never run or charged again."""
        return self.existing is not None and self.existing.state == RunState.DONE.value


def _slice_plan(conn: Connection, study_id: int,
                runs: Sequence[tuple[int, int, WindowKind, int, int]]) -> list[_SliceItem]:
    """The slice's windows with the rows they already have, those rows locked. One statement
    for all of them (one round trip, not one per window: under load each round trip is a
    context switch on both sides)."""
    found: dict[tuple[int, int, str], _HeldRun] = {}
    for row in conn.execute(
            select(*_HELD_COLUMNS, _RUNS.c.fold, _RUNS.c.window).where(
                _RUNS.c.study_id == study_id,
                tuple_(_RUNS.c.candidate_id, _RUNS.c.fold, _RUNS.c.window).in_(
                    sorted({(c, f, w.value) for c, f, w, _, _ in runs})))
            .order_by(_RUNS.c.id).with_for_update()):
        found[(row.candidate_id, row.fold, row.window)] = _HeldRun(*row[:len(_HELD_COLUMNS)])
    return [_SliceItem({"study_id": study_id, "candidate_id": candidate_id, "fold": fold,
                        "window": window.value},
                       found.get((candidate_id, fold, window.value)), steps, est)
            for candidate_id, fold, window, steps, est in runs]


def _admit_slice(conn: Connection, study_id: int, plan: Sequence[_SliceItem]) -> int | Refused:
    """Release what interrupted attempts left reserved, then reserve the windows still to run
    (all of them, else the longest prefix that fits); how many of ``plan`` are admitted, or
    :class:`Refused` (the limit recorded) when not even the first window to run fits."""
    for item in plan:
        if item.existing is not None and not item.done:
            _release(conn, item.existing)
    todo = [item for item in plan if not item.done]
    if not todo:
        return len(plan)
    est = sum(item.est for item in todo)
    steps_needed = sum(item.steps for item in todo)
    if conn.execute(_RESERVE, {"sid": study_id, "est": est, "steps": steps_needed}).rowcount:
        return len(plan)
    admitted, est, steps_needed = _fitting_prefix(conn, study_id, plan)
    first_todo = next(i for i, item in enumerate(plan) if not item.done)
    if admitted == 0:
        return _refusal(conn, study_id, plan[first_todo].steps)
    # Only finished windows fit before the first refused one: they are reported; the next
    # slice starts at that window and records the limit.
    if admitted > first_todo and not conn.execute(_RESERVE, {
            "sid": study_id, "est": est, "steps": steps_needed}).rowcount:
        return _refusal(conn, study_id, plan[first_todo].steps)
    return admitted


def _hold_slice(conn: Connection, admitted: Sequence[_SliceItem],
                attempts: Sequence[str]) -> SliceReservation:
    """The admitted windows' reservations: a finished one :class:`AlreadyDone`, an existing
    row held again for its attempt, the new rows in one INSERT ... RETURNING."""
    out: list[Reservation | AlreadyDone | None] = []
    new_rows: list[tuple[int, dict[str, Any]]] = []  # (position in out, the row's values)
    for i, item in enumerate(admitted):
        if item.existing is not None and item.done:
            out.append(AlreadyDone(item.existing.id))
        elif item.existing is not None:
            out.append(_hold(conn, item.key, item.existing, attempts[i], item.est, item.steps))
        else:
            new_rows.append((len(out), {**item.key,
                                        **_held_values(attempts[i], item.est, item.steps, 0)}))
            out.append(None)
    fresh: set[int] = set()
    if new_rows:  # ids come back in the rows' order
        ids = conn.execute(insert(_RUNS).returning(_RUNS.c.id, sort_by_parameter_order=True),
                           [values for _, values in new_rows]).scalars().all()
        for (pos, values), run_id in zip(new_rows, ids, strict=True):
            out[pos] = Reservation(int(run_id), values["attempt"], values["reserved_micro"],
                                   values["steps_planned"], 0)
            fresh.add(int(run_id))
    return SliceReservation(tuple(r for r in out if r is not None), frozenset(fresh))


def _fitting_prefix(conn: Connection, study_id: int,
                    plan: Sequence[_SliceItem]) -> tuple[int, int, int]:
    """How many windows of the slice fit what the study has left (under its row lock), with
    their summed estimate and steps; 0 when the study admits none."""
    row = conn.execute(_STUDY_HEADROOM, {"sid": study_id}).one_or_none()
    if row is None:
        raise _study_not_found(study_id)
    state, stop_limit, spend, reserved, budget, used, steps_reserved, max_steps = row
    if state != StudyState.RUNNING.value or stop_limit is not None:
        return 0, 0, 0
    fits = est = steps = 0
    for item in plan:
        if not item.done:
            if budget is not None and spend + reserved + est + item.est > budget:
                break
            if max_steps is not None and used + steps_reserved + steps + item.steps > max_steps:
                break
            est += item.est
            steps += item.steps
        fits += 1
    return fits, est, steps


def study_refusal(engine: Engine, study_id: int) -> Refused | None:
    """Why no further run of the study may start now (cancelled, ended, a limit recorded), or
    ``None`` while it runs: one read, no lock (a window reserved in a slice asks before it
    starts, so a cancel or a limit stops the rest of the slice at once)."""
    with engine.connect() as conn:
        row = conn.execute(_STUDY_STATE, {"sid": study_id}).one_or_none()
    if row is None:
        raise _study_not_found(study_id)
    state = StudyState(row[0])
    if state != StudyState.RUNNING:
        return Refused(None, state)
    if row[1] is not None:
        return Refused(StopLimit(row[1]), state)
    return None


def release_unstarted(engine: Engine, reservations: Sequence[Reservation],
                      fresh: frozenset[int] = frozenset()) -> None:
    """Give back the reservations of a slice's windows that never started (one transaction).

    A row the slice inserted (``fresh``) is deleted: the window is unrun, as if never reserved.
    A row an earlier attempt left is released as an interrupted attempt (``FAILED``, what it
    spent kept). Rows this attempt no longer owns are left alone.
    """
    if not reservations:
        return
    with engine.begin() as conn:
        _write_lock(conn)
        for res in sorted(reservations, key=lambda r: r.run_id):
            run = _run_by_id(conn, res.run_id)
            if not run.owned_by(res.attempt):
                continue
            if run.id in fresh and not run.cost_micro and run.steps_done == 0:
                _move_study(conn, run, 0, 0, run.reserved_micro, run.steps_planned)
                conn.execute(delete(_RUNS).where(_RUNS.c.id == run.id))
            else:
                _release(conn, run)


def extend_reservation(engine: Engine, run_id: int, attempt: str, extra_micro: int) -> bool:
    """Reserve ``extra_micro`` more for a running run whose real cost outgrows its estimate.

    The same conditional UPDATE as :func:`reserve_run` (within the budget, study running, no
    limit hit yet); ``False`` means the run must stop before its next step.
    """
    with engine.begin() as conn:
        _write_lock(conn)
        run = _run_by_id(conn, run_id)
        if not run.owned_by(attempt):
            return False
        if not conn.execute(_EXTEND, {"sid": run.study_id, "est": extra_micro}).rowcount:
            return False
        conn.execute(_UPDATE_RUN, {"run_id": run.id,
                                   "reserved_micro": run.reserved_micro + extra_micro})
        return True


def _release(conn: Connection, run: _HeldRun) -> None:
    """Give back what a RESERVED run still holds (its remaining reservation and steps)."""
    if run.state != RunState.RESERVED.value:
        return
    _move_study(conn, run, 0, 0, run.reserved_micro, run.steps_planned - run.steps_done)
    conn.execute(_UPDATE_RUN, {
        "run_id": run.id, "reserved_micro": 0, "state": RunState.FAILED.value,
        "error": (run.error or "") + "interrupted attempt released; ",
    })


def _move_study(conn: Connection, run: _HeldRun, d_cost: int, d_steps: int, freed_micro: int,
                freed_steps: int) -> None:
    """One UPDATE of the run's study: ``d_cost`` and ``d_steps`` spent, ``freed_*`` given back."""
    conn.execute(_MOVE, {"sid": run.study_id, "d_cost": d_cost, "d_steps": d_steps,
                         "freed_micro": freed_micro, "freed_steps": freed_steps})


def _charge_candidate(conn: Connection, run: _HeldRun, d_cost: int) -> None:
    conn.execute(_CHARGE_CANDIDATE, {"cid": run.candidate_id, "d_cost": d_cost})


def flush_progress(engine: Engine, run_id: int, attempt: str, cost_micro: int, steps: int) -> bool:
    """Record a running run's cost and steps so far (moved from reserved to spent).

    Called while the run executes so that a killed run's spending is not lost. Returns
    ``False`` when this attempt no longer owns the run (it was released), or the study was
    cancelled, so the caller stops.
    """
    with engine.begin() as conn:
        _write_lock(conn)
        run = _run_by_id(conn, run_id)
        if not run.owned_by(attempt):
            return False
        _move(conn, run, cost_micro - (run.cost_micro or 0), steps - run.steps_done)
        study = conn.execute(_STUDY_STATE, {"sid": run.study_id}).one_or_none()
        return study is not None and study[0] == StudyState.RUNNING.value


def _move(conn: Connection, run: _HeldRun, d_cost: int, d_steps: int) -> None:
    """Move ``d_cost`` from the run's reservation into spend (study, candidate, run)."""
    if d_cost == 0 and d_steps == 0:
        return
    from_reserved = min(max(d_cost, 0), run.reserved_micro)
    from_steps = min(max(d_steps, 0), run.steps_planned - run.steps_done)
    _move_study(conn, run, d_cost, d_steps, from_reserved, from_steps)
    _charge_candidate(conn, run, d_cost)
    conn.execute(_UPDATE_RUN, {
        "run_id": run.id, "reserved_micro": run.reserved_micro - from_reserved,
        "cost_micro": (run.cost_micro or 0) + d_cost, "steps_done": run.steps_done + d_steps,
    })


@dataclass(frozen=True)
class Settlement:
    """How one reserved run ended: its real cost and steps (this attempt's, plus what earlier
    attempts spent), its scores, its state."""

    cost_micro: int
    steps_done: int
    scores: Sequence[tuple[str, float]]
    state: RunState = RunState.DONE
    error: str | None = None
    started_at: dt.datetime | None = None
    """When the window really started (a slice reserves its windows before the first starts);
    ``None`` keeps the row's, the time of its reservation."""
    finished_at: dt.datetime | None = None
    """When the window really ended (a slice settles its windows together, every few seconds);
    ``None`` is the time of this settlement."""


def settle_run(
    engine: Engine,
    reservation: Reservation,
    *,
    cost_micro: int,
    steps_done: int,
    scores: Sequence[tuple[str, float]],
    state: RunState = RunState.DONE,
    error: str | None = None,
) -> bool:
    """Finish a run: add its real cost to the study and its candidate, release the rest.

    Returns ``False`` (and records nothing) when this attempt no longer owns the run.
    """
    return settle_runs(engine, [(reservation, Settlement(cost_micro, steps_done, scores, state,
                                                         error))])[0]


def settle_runs(engine: Engine, items: Sequence[tuple[Reservation, Settlement]]) -> list[bool]:
    """Finish several runs in one transaction (a slice's finished windows): each as
    :func:`settle_run` would, with one update of the study row for all of them.

    Returns, per run, whether it was recorded (``False``: this attempt no longer owns it).
    """
    if not items:
        return []
    out: list[bool] = []
    with engine.begin() as conn:
        _write_lock(conn)
        held = {r.id: r for r in (
            _HeldRun(*row) for row in conn.execute(
                select(*_HELD_COLUMNS).where(_RUNS.c.id.in_(sorted({res.run_id for res, _ in items})))
                .order_by(_RUNS.c.id).with_for_update()))}
        d_cost = d_steps = freed_micro = freed_steps = 0
        by_candidate: dict[int, int] = {}
        updates: list[dict[str, Any]] = []
        for reservation, how in items:
            run = held.get(reservation.run_id)
            if run is None or not run.owned_by(reservation.attempt):
                out.append(False)
                continue
            # What was flushed is spent: a settlement never lowers it.
            flushed = run.cost_micro or 0
            cost_micro = max(how.cost_micro, flushed)
            steps_done = max(how.steps_done, run.steps_done)
            # The real cost into spend, the whole remaining reservation given back.
            d_cost += cost_micro - flushed
            d_steps += steps_done - run.steps_done
            freed_micro += run.reserved_micro
            freed_steps += run.steps_planned - run.steps_done
            by_candidate[run.candidate_id] = by_candidate.get(run.candidate_id, 0) + cost_micro - flushed
            update_row = {
                "run_id": run.id, "cost_micro": cost_micro, "steps_done": steps_done,
                "reserved_micro": 0, "steps_planned": steps_done, "state": how.state.value,
                "scores_json": [[t, float(v)] for t, v in how.scores], "error": how.error,
                "finished_at": how.finished_at or utcnow(),
            }
            if how.started_at is not None:
                update_row["started_at"] = how.started_at
            updates.append(update_row)
            held[run.id] = _HeldRun(run.id, run.study_id, run.candidate_id, how.state.value,
                                    run.attempt, steps_done, steps_done, 0, cost_micro, how.error)
            out.append(True)
        if updates:
            study_id = next(iter(held.values())).study_id
            conn.execute(_MOVE, {"sid": study_id, "d_cost": d_cost, "d_steps": d_steps,
                                 "freed_micro": freed_micro, "freed_steps": freed_steps})
            for cid in sorted(by_candidate):
                conn.execute(_CHARGE_CANDIDATE, {"cid": cid, "d_cost": by_candidate[cid]})
            for timed in (True, False):  # one statement for the rows of each set of columns
                group = [u for u in updates if ("started_at" in u) == timed]
                if conn.dialect.name == "postgresql" and len(group) > 1:
                    conn.execute(_settled_rows(conn, group, timed))
                elif group:
                    conn.execute(_UPDATE_RUN, group)
        return out


def _settled_rows(conn: Connection, updates: Sequence[Mapping[str, Any]], timed: bool) -> Any:
    """One ``UPDATE study_runs ... FROM (VALUES ...)`` for a slice's settled rows (PostgreSQL:
    psycopg2 sends an executemany as one round trip per row). The scores are serialized by the
    column's own JSON processor and cast back, so the stored text is what one row's UPDATE
    stores."""
    json_type = _RUNS.c.scores_json.type
    to_json = json_type.bind_processor(conn.dialect)
    stamp = _RUNS.c.finished_at.type
    rows = values(
        column("run_id", Integer), column("cost_micro", BigInteger),
        column("steps_done", Integer), column("state", String), column("scores", Text),
        column("error", Text), column("finished_at", stamp), column("started_at", stamp),
        name="settled",
    ).data([(u["run_id"], u["cost_micro"], u["steps_done"], u["state"],
             to_json(u["scores_json"]) if to_json is not None else u["scores_json"],
             u["error"], u["finished_at"], u.get("started_at", u["finished_at"]))
            for u in updates])
    changes: dict[str, Any] = {
        "cost_micro": rows.c.cost_micro, "steps_done": rows.c.steps_done, "reserved_micro": 0,
        "steps_planned": rows.c.steps_done, "state": rows.c.state,
        "scores_json": cast(rows.c.scores, json_type), "error": rows.c.error,
        "finished_at": rows.c.finished_at}
    if timed:
        changes["started_at"] = rows.c.started_at
    return update(_RUNS).where(_RUNS.c.id == rows.c.run_id).values(changes)


def record_stop(engine: Engine, study_id: int, limit: StopLimit = StopLimit.BUDGET_USD) -> None:
    """Record that a limit stopped the study (the first one recorded wins); no run starts after."""
    with engine.begin() as conn:
        conn.execute(_RECORD_STOP, {"sid": study_id, "limit": limit.value})


def finish_study(
    engine: Engine,
    study_id: int,
    *,
    winner_candidate_id: int | None,
    holdout_score: float | None,
    holdout_se: float | None,
    holdout_missing_reason: str | None,
    holdout_baseline: float | None = None,
    holdout_diff_se: float | None = None,
    holdout_baseline_missing_reason: str | None = None,
) -> StudyState:
    """Record the winner and holdout, set the final state and release the workflow's lock.

    The final state is ``BUDGET_REACHED`` when a limit stopped the study (or cut planned
    candidates), ``CANCELLED`` when it was cancelled, else ``FINISHED``.
    """
    with session_scope(engine) as s:
        study = get_study(s, study_id)
        state = StudyState(study.state)
        cut = s.execute(
            select(CandidateRow.id).where(
                CandidateRow.study_id == study_id,
                CandidateRow.discard_reason.like("not run:%"),
            )
        ).first()
        if state == StudyState.CANCELLED:
            final = StudyState.CANCELLED
        elif study.stop_limit is not None or cut is not None:
            final = StudyState.BUDGET_REACHED
            if study.stop_limit is None:
                study.stop_limit = StopLimit.MAX_CANDIDATES.value
        else:
            final = StudyState.FINISHED
        study.state = final.value
        study.winner_candidate_id = winner_candidate_id
        study.holdout_score = holdout_score
        study.holdout_se = holdout_se
        study.holdout_missing_reason = holdout_missing_reason
        study.holdout_baseline = holdout_baseline
        study.holdout_diff_se = holdout_diff_se
        study.holdout_baseline_missing_reason = holdout_baseline_missing_reason
        study.finished_at = utcnow()
        _release_lock(s, study)
        release_in(s, LeaseKind.STUDY, str(study_id))
        return final


def active_study(engine: Engine, workspace: str, workflow: str) -> int | None:
    """The id of the study in flight on a workflow, or ``None``."""
    with session_scope(engine) as s:
        lock = s.get(LockRow, (workspace, workflow))
        return None if lock is None else lock.study_id


__all__ = [
    "AlreadyDone",
    "LastBacktest",
    "Refused",
    "Reservation",
    "Settlement",
    "SliceReservation",
    "active_study",
    "await_run",
    "cancel_study",
    "create_study",
    "delete_study",
    "extend_reservation",
    "finish_study",
    "flush_progress",
    "get_study",
    "interrupt_study",
    "mark_failed",
    "record_stop",
    "release_ended",
    "release_unstarted",
    "reserve_run",
    "reserve_runs_together",
    "reserve_slice",
    "screen_candidates",
    "set_min_unseen_steps",
    "settle_run",
    "settle_runs",
    "start_study",
    "study_refusal",
]
