"""The embedded default's Dagster storage: Dagster's SQLite storage, patient when a file is busy.

Dagster's SQLite storage opens its event-log databases with a 30-second busy timeout and its run
and schedule databases (``history/runs.db``, ``schedules/schedules.db``) with pysqlite's default
of 5 seconds. On a busy machine a writer can hold a database longer than that (the daemon's
threads, each run's process and the webserver all write ``runs.db``), and the write that gave up
is not always tried again: the daemon's run retries mark a run they failed to retry as never to
be retried (``dagster/will_retry: false``), so a ``kill -9``'d verdict run that should have been
retried stayed failed and its training unsettled. Measured: a write lock held on ``runs.db`` for
12 seconds right after run monitoring failed a killed run lost that run's retry.

:class:`PatientSqliteStorage` is Dagster's storage with the same 30 seconds on every database
(Dagster's own figure, :data:`BUSY_TIMEOUT_S`), in the same files, so an instance written before
keeps its history. Named in the instance configuration written by
:mod:`typestrict_pipeline.instance` (``storage: custom:``) and in ``deploy/dagster.yaml``.

**A run's end is read once its run says so.** Dagster writes a run's end (``RUN_FAILURE``,
``RUN_SUCCESS``, ``RUN_CANCELED``) to the event log first and to the run's row in ``runs.db``
after; on SQLite these are two databases. The daemon's run retries read new ends from the event
log by cursor, then the run's row: a row read in between still says "started", the run is not
retried, and the cursor has moved past it for good. On a busy machine the gap is seconds (a
busy ``runs.db``), and a ``kill -9``'d verdict run was left unretried with its failure recorded
and its retry flag set (seen in this project's suite under load). :class:`PatientSqliteEventLogStorage`
answers those cursor reads only up to the first end whose run's row does not yet say the run
ended (the rest the next time; the daemon reads every few seconds), and no longer than
:data:`~resources.run_ends.SETTLE_S` after the end was written, so a row that never follows
cannot hold the cursor back (:mod:`resources.run_ends`, shared with the PostgreSQL storage,
:mod:`resources.postgres_storage`).
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster._config import StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._serdes import ConfigurableClassData
from dagster._utils import mkdir_p
from sqlalchemy import Connection, create_engine
from sqlalchemy.pool import NullPool

from resources.run_ends import SETTLE_S, SettledRunEnds, settled_prefix

__all__ = ["BUSY_TIMEOUT_S", "SETTLE_S", "PatientSqliteEventLogStorage", "PatientSqliteRunStorage",
           "PatientSqliteScheduleStorage", "PatientSqliteStorage", "settled_prefix"]

BUSY_TIMEOUT_S: float = float(SQLITE_BUSY_TIMEOUT_SECONDS)
"""How long a write waits for a busy SQLite database before it fails: Dagster's figure for its
event-log databases (30 s), given here to its run and schedule databases too."""


@contextmanager
def _patient_connection(conn_string: str) -> Iterator[Connection]:
    engine = create_engine(conn_string, poolclass=NullPool, connect_args={"timeout": BUSY_TIMEOUT_S})
    with engine.connect() as conn, conn.begin():
        yield conn


class PatientSqliteRunStorage(SqliteRunStorage):
    """Dagster's SQLite run storage (``runs.db``) whose connections wait :data:`BUSY_TIMEOUT_S`."""

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with _patient_connection(self._conn_string) as conn:
            yield conn


class PatientSqliteScheduleStorage(SqliteScheduleStorage):
    """Dagster's SQLite schedule storage (``schedules.db``: ticks, cursors), patient likewise."""

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with _patient_connection(self._conn_string) as conn:
            yield conn


class PatientSqliteEventLogStorage(SettledRunEnds, SqliteEventLogStorage):
    """Dagster's SQLite event log whose cursor reads of run ends wait for the runs' rows
    (:class:`resources.run_ends.SettledRunEnds`)."""

    def __init__(self, base_dir: str, runs: SqliteRunStorage) -> None:
        super().__init__(base_dir)
        self._runs = runs


class PatientSqliteStorage(DagsterSqliteStorage):
    """Dagster's ``storage: sqlite`` (same files under ``base_dir``), every database patient, run
    ends read by cursor once their runs' rows say so.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     storage = PatientSqliteStorage.from_local(tmp)
    ...     kinds = [type(part).__name__ for part in (storage.run_storage,
    ...              storage.event_log_storage, storage.schedule_storage)]
    ...     storage.dispose()
    >>> kinds
    ['PatientSqliteRunStorage', 'PatientSqliteEventLogStorage', 'PatientSqliteScheduleStorage']
    """

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self.base_dir = base_dir
        # Dagster's layout (DagsterSqliteStorage): history/runs.db, history/runs/, schedules/.
        self._run_storage = PatientSqliteRunStorage.from_local(os.path.join(base_dir, "history", ""))
        self._event_log_storage = PatientSqliteEventLogStorage(
            os.path.join(base_dir, "history", "runs", ""), self._run_storage)
        self._schedule_storage = PatientSqliteScheduleStorage.from_local(
            os.path.join(base_dir, "schedules"))
        self._inst_data = inst_data
        # DagsterSqliteStorage.__init__ is not called (it would open Dagster's own run and schedule
        # storages first); this is all its base class's __init__ does.
        self._instance_weakref = None

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"base_dir": StringSource}

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData, config_value: dict[str, Any]
    ) -> "PatientSqliteStorage":
        return cls.from_local(inst_data=inst_data, **config_value)

    @classmethod
    def from_local(cls, base_dir: str, inst_data: ConfigurableClassData | None = None) -> "PatientSqliteStorage":
        mkdir_p(base_dir)
        return cls(base_dir, inst_data=inst_data)
