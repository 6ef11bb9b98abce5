"""Backtests and studies whose process died are marked ``interrupted``; any that has not ended
can be cancelled; "in flight" is only ever said of a live one.

Every ``running`` backtest and every ``PENDING``/``RUNNING`` study holds a lease
(:mod:`typestrict_pipeline.lifecycle.leases`) naming its process. :func:`reap` looks at each:
a holder that is gone (its process id no longer names the process that took the lease, the host
rebooted, or its heartbeat is stale on another host) ends the object as ``interrupted`` with when
and why, in one conditional update, so two reapers end it once. Studies run by Dagster are also
ended when their Dagster run ended without finishing them (``run_ended``, asked by the Dagster
side: run monitoring fails a run whose process died).

Who calls it: :func:`workflow_busy` (so a dead backtest never blocks a schedule), the creation of
every study (so a dead study never refuses a new one on its workflow), every study cancel, the
commands that list and show backtests and studies, ``typestrict backtest cancel``, and the
``lifecycle_sensor`` in Dagster (every 30 s), so an object reaches its end within
a bounded time with nobody watching: one sensor interval after its process died (plus the
heartbeat's :data:`~typestrict_pipeline.lifecycle.leases.STALE_AFTER` for a process on another
host).

>>> import tempfile, pathlib
>>> from typestrict_pipeline.store import open_store
>>> engine = open_store(f"sqlite:///{pathlib.Path(tempfile.mkdtemp()) / 's.db'}")
>>> reap(engine), workflow_busy(engine, "demo", "seattle_rain")
([], None)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, select

from typestrict_pipeline.errors import ConflictError, NotFoundError
from typestrict_pipeline.lifecycle.leases import STALE_AFTER, LeaseKind, holders
from typestrict_pipeline.store import session_scope, utcnow

__all__ = [
    "NO_LEASE_GRACE",
    "RUN_GONE",
    "Ended",
    "RunEnded",
    "cancel_backtest",
    "cancel_study",
    "reap",
    "run_gone_ends",
    "waits_on_its_run",
    "workflow_busy",
]

RunEnded = Callable[[str], str | None]
"""``run_ended(dagster_run_id)``: the status of a Dagster run that ended (``FAILURE``,
``CANCELED``...), or None while it is queued or running; ``RUN_GONE`` when its instance does not know it."""

NO_LEASE_GRACE = dt.timedelta(seconds=60)
"""A running object without any lease (written before leases existed) is interrupted once it is
this old: no process can be shown to work on it."""


def waits_on_its_run(state: str, dagster_run_id: str | None) -> bool:
    """A ``PENDING`` study whose Dagster run was queued (:func:`~typestrict_pipeline.study.repository.await_run`):
    no process holds it while the run waits in the queue; it lives while the run has not ended.

    >>> waits_on_its_run("PENDING", "ab12"), waits_on_its_run("PENDING", None), waits_on_its_run("RUNNING", "ab12")
    (True, False, False)
    """
    return state == "PENDING" and bool(dagster_run_id)


RUN_GONE = "GONE"
"""What a ``run_ended`` callable says of a run its Dagster instance does not know (deleted by an
operator, or never in this instance): read as an end only for a study that waits on that run
(:func:`run_gone_ends`); a study a process drives may run in another instance (the CLI's)."""


def run_gone_ends(status: str | None, state: str, dagster_run_id: str | None, held: bool) -> str | None:
    """The end ``status`` means for a study: the run's end, ``RUN_GONE`` only for a study no
    process holds and that waits on that run (its queued run deleted: it would never start).

    >>> run_gone_ends("GONE", "PENDING", "ab12", False), run_gone_ends("GONE", "RUNNING", "ab12", True)
    ('GONE', None)
    >>> run_gone_ends("FAILURE", "RUNNING", "ab12", True), run_gone_ends(None, "PENDING", "ab12", False)
    ('FAILURE', None)
    """
    if status == RUN_GONE and (held or not waits_on_its_run(state, dagster_run_id)):
        return None
    return status


@dataclass(frozen=True)
class Ended:
    """An object the reaper (or a cancel) ended.

    Attributes:
        kind: ``backtest`` or ``study``.
        object_id: its id.
        state: its state now (``interrupted``, ``INTERRUPTED``, ``cancelled``...).
        why: when and why, as recorded on it.
    """

    kind: str
    object_id: str
    state: str
    why: str


def _stamp(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reap_backtests(engine: Engine, at: dt.datetime, workspace: str | None,
                    workflow: str | None) -> list[Ended]:
    from typestrict_pipeline.backtest.engine import BacktestStatus
    from typestrict_pipeline.backtest.store import end_backtest
    from typestrict_pipeline.backtest.tables import BacktestRow

    with session_scope(engine) as s:
        stmt = select(BacktestRow.id, BacktestRow.created_at).where(
            BacktestRow.status == BacktestStatus.RUNNING.value)
        if workspace is not None:
            stmt = stmt.where(BacktestRow.workspace == workspace)
        if workflow is not None:
            stmt = stmt.where(BacktestRow.workflow == workflow)
        running = [(str(i), c) for i, c in s.execute(stmt).all()]
    if not running:
        return []
    leases = holders(engine, LeaseKind.BACKTEST, [i for i, _ in running])
    out: list[Ended] = []
    for bid, created in running:
        held = leases.get(bid)
        if held is None:
            if at - created < NO_LEASE_GRACE:
                continue
            why = (f"interrupted at {_stamp(at)}: no process holds it (it was started before "
                   "liveness was recorded, or its process ended without writing its end)")
        elif held.alive(at, STALE_AFTER):
            continue
        else:
            why = f"interrupted at {_stamp(at)}: {held.why_dead()}"
        if end_backtest(engine, bid, BacktestStatus.INTERRUPTED, why, now=at):
            out.append(Ended("backtest", bid, BacktestStatus.INTERRUPTED.value, why))
    return out


def _reap_studies(engine: Engine, at: dt.datetime, workspace: str | None, workflow: str | None,
                  run_ended: RunEnded | None) -> list[Ended]:
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.tables import StudyRow, StudyState

    with session_scope(engine) as s:
        stmt = select(StudyRow.id, StudyRow.created_at, StudyRow.dagster_run_id, StudyRow.state).where(
            StudyRow.state.in_([StudyState.PENDING.value, StudyState.RUNNING.value]))
        if workspace is not None:
            stmt = stmt.where(StudyRow.workspace == workspace)
        if workflow is not None:
            stmt = stmt.where(StudyRow.workflow == workflow)
        live = [(int(i), c, r, st) for i, c, r, st in s.execute(stmt).all()]
    if not live:
        return []
    leases = holders(engine, LeaseKind.STUDY, [str(i) for i, _, _, _ in live])
    out: list[Ended] = []
    for sid, created, run_id, state in live:
        held = leases.get(str(sid))
        held_by_run = held is None and waits_on_its_run(state, run_id)  # ended only if its run ended
        why = None
        if run_id and run_ended is not None:
            status = run_gone_ends(run_ended(run_id), state, run_id, held is not None)
            if status == RUN_GONE:
                why = (f"interrupted at {_stamp(at)}: its queued Dagster run {run_id} is no longer in "
                       "Dagster's instance (deleted), so nothing will start the study (create it again)")
            elif status is not None:
                why = (f"interrupted at {_stamp(at)}: its Dagster run {run_id} ended {status} "
                       "before the study did (re-execute the run to resume it)")
        if why is None and held is None and not held_by_run and at - created >= NO_LEASE_GRACE:
            why = (f"interrupted at {_stamp(at)}: no process holds it (it was started before "
                   "liveness was recorded)")
        if why is None and held is not None and not held.alive(at, STALE_AFTER):
            why = f"interrupted at {_stamp(at)}: {held.why_dead()}; re-execute its run to resume it"
        if why is not None and repo.interrupt_study(engine, sid, why, now=at):
            out.append(Ended("study", str(sid), StudyState.INTERRUPTED.value, why))
    return out


def _release_ended(engine: Engine, at: dt.datetime, workspace: str | None,
                   workflow: str | None) -> None:
    """Window runs still ``RESERVED`` on a ``CANCELLED`` or ``FAILED`` study whose process is gone
    (it died, or ended on an error, after the cancel or the failure, before it settled them) are
    given back: a reservation never outlives the process holding it."""
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.tables import RunRow, RunState, StudyRow, StudyState

    with session_scope(engine) as s:
        stmt = (select(StudyRow.id).distinct().join(RunRow, RunRow.study_id == StudyRow.id)
                .where(StudyRow.state.in_([StudyState.CANCELLED.value, StudyState.FAILED.value]),
                       RunRow.state == RunState.RESERVED.value))
        if workspace is not None:
            stmt = stmt.where(StudyRow.workspace == workspace)
        if workflow is not None:
            stmt = stmt.where(StudyRow.workflow == workflow)
        held = [int(i) for i in s.scalars(stmt).all()]
    if not held:
        return
    leases = holders(engine, LeaseKind.STUDY, [str(i) for i in held])
    for sid in held:
        lease = leases.get(str(sid))
        if lease is None or not lease.alive(at, STALE_AFTER):
            repo.release_ended(engine, sid)


def reap(
    engine: Engine,
    *,
    now: dt.datetime | None = None,
    workspace: str | None = None,
    workflow: str | None = None,
    run_ended: RunEnded | None = None,
) -> list[Ended]:
    """End every running backtest and pending/running study whose process is gone (optionally of
    one workspace or workflow) as interrupted, with when and why; returns what it ended. Also
    gives back the reservations a cancelled or failed study's dead process left (:func:`_release_ended`)."""
    at = now or utcnow()
    ended = [*_reap_backtests(engine, at, workspace, workflow),
             *_reap_studies(engine, at, workspace, workflow, run_ended)]
    _release_ended(engine, at, workspace, workflow)
    return ended


def workflow_busy(
    engine: Engine,
    workspace: str,
    workflow: str,
    *,
    now: dt.datetime | None = None,
    run_ended: RunEnded | None = None,
) -> str | None:
    """What keeps the workflow busy (a live study or backtest), or None.

    Dead ones are ended first (:func:`reap`), so only a live process can make a workflow busy:
    a killed backtest never blocks a schedule.
    """
    from typestrict_pipeline.backtest.engine import BacktestStatus
    from typestrict_pipeline.backtest.tables import BacktestRow
    from typestrict_pipeline.study.tables import LockRow, StudyRow, StudyState

    reap(engine, now=now, workspace=workspace, workflow=workflow, run_ended=run_ended)
    with session_scope(engine) as s:
        lock = s.get(LockRow, (workspace, workflow))
        if lock is not None:
            study = s.get(StudyRow, lock.study_id)
            if study is not None and StudyState(study.state).in_flight:
                return f"study {study.id} ({StudyState(study.state).label})"
        bid = s.scalar(select(BacktestRow.id).where(
            BacktestRow.workspace == workspace, BacktestRow.workflow == workflow,
            BacktestRow.status == BacktestStatus.RUNNING.value).limit(1))
    return None if bid is None else f"backtest {bid} (running)"


def cancel_backtest(engine: Engine, backtest_id: str, *, workspace: str | None = None,
                    now: dt.datetime | None = None) -> Ended:
    """Cancel a backtest that has not ended: ``cancelled`` at once; a live process stops before
    its next step (it reads the status), what ran stays stored.

    Raises:
        NotFoundError: no such backtest (in ``workspace``, when given).
        ConflictError: it already ended (its status says how).
    """
    from typestrict_pipeline.backtest.engine import BacktestStatus
    from typestrict_pipeline.backtest.store import end_backtest, load_backtest

    at = now or utcnow()
    found = load_backtest(engine, backtest_id)
    if workspace is not None and found.workspace != workspace:
        raise NotFoundError(f"expected a stored backtest, got unknown id {backtest_id!r}. "
                            "List them with `typestrict backtest list`.")
    why = f"cancelled at {_stamp(at)} by a person"
    if end_backtest(engine, backtest_id, BacktestStatus.CANCELLED, why, now=at):
        return Ended("backtest", backtest_id, BacktestStatus.CANCELLED.value, why)
    now_status = load_backtest(engine, backtest_id)
    raise ConflictError(
        f"expected a running backtest to cancel, got backtest {backtest_id} "
        f"{now_status.status.value}" + (f" ({now_status.error})" if now_status.error else "")
        + ". It has ended already: nothing to cancel")


def cancel_study(engine: Engine, study_id: int, *, workspace: str | None = None,
                 now: dt.datetime | None = None) -> Ended:
    """Cancel a study that has not ended (pending, running, failed or interrupted).

    A pending or running study whose process is gone is ended ``INTERRUPTED`` first (its
    unspent reservations released), so a cancel never leaves window runs reserved for ever on
    a study nothing runs (a live process settles its own as it stops).

    Raises:
        NotFoundError: no such study (in ``workspace``, when given).
        ConflictError: it already ended.
    """
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.tables import StudyRow, StudyState

    at = now or utcnow()
    with session_scope(engine) as s:
        row = s.get(StudyRow, study_id)
        if row is None or (workspace is not None and row.workspace != workspace):
            raise NotFoundError(
                f"expected an existing study id, got {study_id}. "
                "List studies with `typestrict study list` and use one of their ids.")
        before, workspace_of, workflow = StudyState(row.state), row.workspace, row.workflow
    if before.in_flight:  # its process may be gone: ended INTERRUPTED first, reservations released
        reap(engine, now=at, workspace=workspace_of, workflow=workflow)
    state = repo.cancel_study(engine, study_id)
    if state is StudyState.CANCELLED and before is not StudyState.CANCELLED:
        return Ended("study", str(study_id), state.value,
                     f"cancelled at {_stamp(at)} by a person (was {before.label})")
    raise ConflictError(
        f"expected a study that has not ended to cancel, got study {study_id} {state.label}. "
        "It has ended already: nothing to cancel")
