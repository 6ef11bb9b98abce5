"""Leases: which process works on an object now, and whether it still does.

A lease is one row of ``lifecycle_leases`` keyed by ``(kind, object_id)``: the holder's
:class:`~typestrict_pipeline.processes.ProcessIdentity` (host, boot, process id and start tick)
and its last heartbeat. Whether the holder lives is decided by

* the **process check** when the holder runs on this host: exact, immediate and safe against a
  reused process id (a process with the same id but another start tick, or a rebooted host, is
  another process): :func:`typestrict_pipeline.processes.identity_alive`;
* the **heartbeat** when it runs on another host: a holder whose heartbeat is older than
  ``stale_after`` (default :data:`STALE_AFTER`, four missed beats of :data:`HEARTBEAT_EVERY`) is
  dead.

A lease held by a dead process is taken over, never waited for: this is how a claim expires by
liveness, and how :mod:`typestrict_pipeline.lifecycle.reaper` finds backtests and studies whose
process died. The primary key makes a lease exclusive even when two processes race for it.

>>> import tempfile, pathlib
>>> from typestrict_pipeline.store import open_store
>>> engine = open_store(f"sqlite:///{pathlib.Path(tempfile.mkdtemp()) / 's.db'}")
>>> lease = acquire(engine, LeaseKind.SUBMISSION, "tr_1")
>>> lease is not None, acquire(engine, LeaseKind.SUBMISSION, "tr_1")  # held by a live process
(True, None)
>>> lease.release()
>>> holder(engine, LeaseKind.SUBMISSION, "tr_1") is None
True
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import secrets
import threading
from dataclasses import dataclass
from types import TracebackType

from sqlalchemy import Engine, delete, select, text, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from typestrict_pipeline.lifecycle.tables import LeaseRow
from typestrict_pipeline.processes import Liveness, ProcessIdentity, identity_alive, this_process
from typestrict_pipeline.store import session_scope, utcnow

__all__ = [
    "HEARTBEAT_EVERY",
    "STALE_AFTER",
    "Holder",
    "Lease",
    "LeaseKind",
    "acquire",
    "holder",
    "holders",
    "release_in",
    "release_mine_in",
    "take_in",
]

log = logging.getLogger("typestrict.lifecycle")

HEARTBEAT_EVERY = dt.timedelta(seconds=15)
"""How often a lease's holder writes its heartbeat."""

STALE_AFTER = dt.timedelta(seconds=60)
"""A holder on another host whose last heartbeat is older than this is dead (four missed beats)."""


class LeaseKind(enum.StrEnum):
    """What a lease is on.

    Attributes:
        BACKTEST: a backtest being run (held by the process that runs it).
        STUDY: a study being created or run (held by the process that drives it).
        SUBMISSION: a training's predictions being submitted (the claim that makes two
            submissions of one training go one at a time).
        RERUN: a scheduled re-run's lineage entry between its run's claim and the record of
            its study (held by that run's process; the study's own lease takes over then).
    """

    BACKTEST = "backtest"
    STUDY = "study"
    SUBMISSION = "submission"
    RERUN = "rerun"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, as stored.

    Attributes:
        kind: what the lease is on.
        object_id: the object's id.
        owner: the holding process.
        token: this holding's random token (a holder that lost its lease cannot write).
        acquired_at: when it was taken.
        heartbeat_at: the holder's last heartbeat.
    """

    kind: LeaseKind
    object_id: str
    owner: ProcessIdentity
    token: str
    acquired_at: dt.datetime
    heartbeat_at: dt.datetime

    def liveness(self, now: dt.datetime | None = None,
                 stale_after: dt.timedelta = STALE_AFTER) -> Liveness:
        """ALIVE or DEAD (never UNKNOWN): the process check, else the heartbeat's age."""
        found = identity_alive(self.owner)
        if found is not Liveness.UNKNOWN:
            return found
        at = now or utcnow()
        return Liveness.DEAD if at - self.heartbeat_at > stale_after else Liveness.ALIVE

    def alive(self, now: dt.datetime | None = None, stale_after: dt.timedelta = STALE_AFTER) -> bool:
        return self.liveness(now, stale_after) is Liveness.ALIVE

    def why_dead(self) -> str:
        """Why the holder counts as dead, in words (for the object's ``error``)."""
        beat = self.heartbeat_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if identity_alive(self.owner) is Liveness.UNKNOWN:
            return (f"no heartbeat from {self.owner.describe()} since {beat} (more than "
                    f"{int(STALE_AFTER.total_seconds())} s)")
        return f"its {self.owner.describe()} is gone (killed, crashed or the host restarted; last heartbeat {beat})"


def _holder(row: LeaseRow) -> Holder:
    return Holder(
        kind=LeaseKind(row.kind), object_id=row.object_id,
        owner=ProcessIdentity(row.host, row.boot_id, row.pid, row.start_ticks),
        token=row.token, acquired_at=row.acquired_at, heartbeat_at=row.heartbeat_at,
    )


def _lock_for_write(session: Session) -> None:
    """SQLite: take the database write lock first (a read-then-write never deadlocks)."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(text("UPDATE lifecycle_leases SET token = token WHERE 1 = 0"))


def take_in(
    session: Session,
    kind: LeaseKind,
    object_id: str,
    *,
    owner: ProcessIdentity | None = None,
    now: dt.datetime | None = None,
    stale_after: dt.timedelta = STALE_AFTER,
    force: bool = False,
) -> str | Holder:
    """Take the lease in the caller's transaction: the new token, or the live holder.

    A lease held by a dead process is taken over (a live one is not, even if it is ``owner``:
    two threads of one process exclude each other too); with ``force`` any lease is (a run that
    takes over a study from the process that created it). A concurrent taker
    makes the insert fail with an ``IntegrityError`` (the caller's transaction is then rolled
    back; :func:`acquire` retries and finds the winner).
    """
    me = owner or this_process()
    at = now or utcnow()
    _lock_for_write(session)
    row = session.execute(
        select(LeaseRow).where(LeaseRow.kind == kind.value, LeaseRow.object_id == object_id)
        .with_for_update()
    ).scalar_one_or_none()
    token = secrets.token_hex(8)
    values = {"host": me.host, "boot_id": me.boot_id, "pid": me.pid, "start_ticks": me.start_ticks,
              "token": token, "acquired_at": at, "heartbeat_at": at}
    if row is None:
        session.add(LeaseRow(kind=kind.value, object_id=object_id, **values))
        session.flush()
        return token
    held = _holder(row)
    if not force and held.alive(at, stale_after):
        return held
    session.execute(
        update(LeaseRow)
        .where(LeaseRow.kind == kind.value, LeaseRow.object_id == object_id,
               LeaseRow.token == held.token)
        .values(**values)
    )
    return token


def release_in(session: Session, kind: LeaseKind, object_id: str, token: str | None = None) -> None:
    """Drop the lease (only if still ``token``'s, when given), in the caller's transaction."""
    stmt = delete(LeaseRow).where(LeaseRow.kind == kind.value, LeaseRow.object_id == object_id)
    if token is not None:
        stmt = stmt.where(LeaseRow.token == token)
    session.execute(stmt)


def release_mine_in(session: Session, kind: LeaseKind, object_id: str,
                    owner: ProcessIdentity | None = None) -> bool:
    """Drop the lease if ``owner`` (default this process) holds it, in the caller's transaction;
    a lease another process took over meanwhile is left as it is. Returns whether it was dropped."""
    me = owner or this_process()
    stmt = delete(LeaseRow).where(
        LeaseRow.kind == kind.value, LeaseRow.object_id == object_id, LeaseRow.host == me.host,
        LeaseRow.boot_id == me.boot_id, LeaseRow.pid == me.pid, LeaseRow.start_ticks == me.start_ticks)
    return bool(session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def holder(engine: Engine, kind: LeaseKind, object_id: str) -> Holder | None:
    """Who holds the lease on ``(kind, object_id)`` (alive or not), or None."""
    with session_scope(engine) as session:
        row = session.get(LeaseRow, (kind.value, object_id))
        return None if row is None else _holder(row)


def holders(engine: Engine, kind: LeaseKind, object_ids: list[str] | None = None) -> dict[str, Holder]:
    """Every lease of ``kind`` (or of those objects), by object id."""
    with session_scope(engine) as session:
        stmt = select(LeaseRow).where(LeaseRow.kind == kind.value)
        if object_ids is not None:
            stmt = stmt.where(LeaseRow.object_id.in_(object_ids))
        return {r.object_id: _holder(r) for r in session.scalars(stmt)}


def acquire(
    engine: Engine,
    kind: LeaseKind,
    object_id: str,
    *,
    owner: ProcessIdentity | None = None,
    heartbeat_every: dt.timedelta | None = HEARTBEAT_EVERY,
    stale_after: dt.timedelta = STALE_AFTER,
) -> Lease | None:
    """Take the lease on ``(kind, object_id)`` in its own transaction; None while a live process
    holds it. The returned :class:`Lease` beats in a background thread until released."""
    for _ in range(3):
        try:
            with session_scope(engine) as session:
                got = take_in(session, kind, object_id, owner=owner, stale_after=stale_after)
        except IntegrityError:
            continue  # another taker inserted first: read the winner
        if isinstance(got, Holder):
            return None
        return Lease(engine, kind, object_id, got, heartbeat_every=heartbeat_every).start()
    return None


class Lease:
    """A lease this process holds: it beats every ``heartbeat_every`` until :meth:`release`.

    Use it as a context manager (released on exit). :meth:`beat` returns False once the lease
    was taken over (this process was taken for dead): the holder should stop working.
    """

    def __init__(self, engine: Engine, kind: LeaseKind, object_id: str, token: str, *,
                 heartbeat_every: dt.timedelta | None = HEARTBEAT_EVERY) -> None:
        self.engine = engine
        self.kind = kind
        self.object_id = object_id
        self.token = token
        self.heartbeat_every = heartbeat_every
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Lease:
        """Start the heartbeat thread (a daemon thread: it never keeps the process alive)."""
        if self.heartbeat_every is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.kind.value}",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        assert self.heartbeat_every is not None
        while not self._stop.wait(self.heartbeat_every.total_seconds()):
            try:
                if not self.beat():
                    return
            except SQLAlchemyError as exc:  # the store is unreachable: beat again next time
                log.warning("heartbeat of %s %s failed: %s", self.kind.value, self.object_id,
                            type(exc).__name__)

    def beat(self, now: dt.datetime | None = None) -> bool:
        """Write the heartbeat; False (and :attr:`lost`) when the lease is no longer ours."""
        with session_scope(self.engine) as session:
            done = session.execute(
                update(LeaseRow)
                .where(LeaseRow.kind == self.kind.value, LeaseRow.object_id == self.object_id,
                       LeaseRow.token == self.token)
                .values(heartbeat_at=now or utcnow())
            ).rowcount  # type: ignore[attr-defined]
        self.lost = not done
        return bool(done)

    def stop(self) -> None:
        """Stop beating (the row stays: for a release in the caller's own transaction)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def release(self) -> None:
        """Stop beating and drop the lease (if still ours)."""
        self.stop()
        with session_scope(self.engine) as session:
            release_in(session, self.kind, self.object_id, self.token)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
