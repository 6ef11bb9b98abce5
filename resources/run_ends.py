"""A run's end read by the daemon's run retries only once the run's row says the run ended.

Dagster writes a run's end (``RUN_FAILURE``, ``RUN_SUCCESS``, ``RUN_CANCELED``) to the event log
first and to the run's row after: two writes, on SQLite in two databases, on PostgreSQL two
statements. The daemon's run retries read new ends from the event log by cursor
(``get_logs_for_all_runs_by_log_id``), then the run's row: a row read in between still says
"started", the run is not retried, and the cursor has moved past its end for good. The product's
storages (:mod:`resources.sqlite_storage`, :mod:`resources.postgres_storage`) answer that read
only up to the first end whose run's row does not yet say so (:func:`settled_logs`); the rest
comes at the daemon's next read, a few seconds later.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dagster import DagsterEventType, EventLogEntry, RunsFilter
from dagster._core.storage.event_log.base import EventLogStorage
from dagster._core.storage.runs.base import RunStorage

__all__ = ["SETTLE_S", "SettledRunEnds", "settled_logs", "settled_prefix"]

SETTLE_S = 60.0
"""How long, at most, a run's end written to the event log is held back from cursor reads while
the run's row does not say the run ended (normally milliseconds)."""

_ENDS = frozenset({DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE,
                   DagsterEventType.RUN_CANCELED})


def settled_prefix(found: Mapping[int, EventLogEntry], ended: Callable[[set[str]], set[str]],
                   now: float) -> dict[int, EventLogEntry]:
    """The records of ``found`` (record id → entry) before the first run end whose run has not
    ended by ``ended`` (run ids → those whose rows say they ended), written less than
    :data:`SETTLE_S` before ``now``: a cursor moved past what this returns skips nothing.

    >>> import dagster as dg
    >>> def end(run_id, at):
    ...     event = dg.DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name="verdict_job")
    ...     return EventLogEntry(None, "ERROR", "", run_id, at, dagster_event=event)
    >>> found = {1: end("a", 100.0), 2: end("b", 100.0), 3: end("c", 100.0)}
    >>> sorted(settled_prefix(found, lambda ids: ids - {"b"}, now=101.0))
    [1]
    >>> sorted(settled_prefix(found, lambda ids: ids - {"b"}, now=100.0 + SETTLE_S))
    [1, 2, 3]
    """
    recent = {entry.run_id for entry in found.values()
              if entry.dagster_event_type in _ENDS and now - entry.timestamp < SETTLE_S}
    waiting = recent - ended(recent) if recent else set()
    kept: dict[int, EventLogEntry] = {}
    for record_id in sorted(found):
        entry = found[record_id]
        if (entry.dagster_event_type in _ENDS and entry.run_id in waiting
                and now - entry.timestamp < SETTLE_S):
            break
        kept[record_id] = entry
    return kept


def settled_logs(found: Mapping[int, EventLogEntry], runs: RunStorage) -> dict[int, EventLogEntry]:
    """:func:`settled_prefix` of ``found`` with the runs' rows read from ``runs`` now."""

    def ended(run_ids: Iterable[str]) -> set[str]:
        records = runs.get_run_records(RunsFilter(run_ids=list(run_ids)))
        return {r.dagster_run.run_id for r in records if r.dagster_run.is_finished}

    return settled_prefix(found, ended, now=time.time())


class SettledRunEnds(EventLogStorage):
    """Put before a Dagster event log in a class's bases (``class X(SettledRunEnds,
    SqliteEventLogStorage)``), with :attr:`_runs` set to the run storage: the daemon's cursor
    reads of run ends wait for the runs' rows (:func:`settled_logs`)."""

    _runs: RunStorage

    def get_logs_for_all_runs_by_log_id(
        self, after_cursor: int = -1, dagster_event_type: Any = None, limit: int | None = None,
    ) -> Mapping[int, EventLogEntry]:
        found = super().get_logs_for_all_runs_by_log_id(
            after_cursor=after_cursor, dagster_event_type=dagster_event_type, limit=limit)
        return settled_logs(found, self._runs)
