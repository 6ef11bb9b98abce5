"""Which trainings are left unsettled too long (a killed run, a run that keeps failing).

A training is *settled* once its ``credit_settlement`` partition is materialized. One that is not,
while no run of it is queued or running and its first run started more than
:data:`UNSETTLED_AFTER` ago, is flagged; the ``unsettled_trainings_sensor`` records the flag as an
observation on its ``credit_settlement`` partition and names it in its tick.

>>> import datetime as dt
>>> now = dt.datetime(2026, 1, 2, 12, tzinfo=dt.UTC)
>>> runs = {"t1": [RunSummary("FAILURE", now - dt.timedelta(hours=3))],
...         "t2": [RunSummary("SUCCESS", now - dt.timedelta(hours=5))],
...         "t3": [RunSummary("STARTED", now - dt.timedelta(hours=9))]}
>>> [u.training_id for u in find_unsettled(["t1", "t2", "t3"], settled={"t2"}, runs=runs, now=now)]
['t1']
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["UNSETTLED_AFTER", "RunSummary", "Unsettled", "find_unsettled"]

UNSETTLED_AFTER = dt.timedelta(hours=2)
"""How long after its first run a training may stay unsettled before it is flagged."""

_ACTIVE = frozenset({"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"})


@dataclass(frozen=True)
class RunSummary:
    """One run of a training's verdict job: its status (Dagster's name) and creation time (UTC)."""

    status: str
    created: dt.datetime


@dataclass(frozen=True)
class Unsettled:
    """A training flagged as unsettled.

    Attributes:
        training_id: the training.
        waiting: time since its first run was created.
        last_status: the status of its latest run.
        runs: how many runs it had.
    """

    training_id: str
    waiting: dt.timedelta
    last_status: str
    runs: int

    def describe(self) -> str:
        """One line: ``tr_1: unsettled for 3.0 h after 2 runs (last FAILURE)``."""
        hours = self.waiting.total_seconds() / 3600
        return (
            f"{self.training_id}: unsettled for {hours:.1f} h after {self.runs} run(s) "
            f"(last {self.last_status})"
        )


def find_unsettled(
    trainings: Iterable[str],
    *,
    settled: set[str],
    runs: Mapping[str, Sequence[RunSummary]],
    now: dt.datetime,
    after: dt.timedelta = UNSETTLED_AFTER,
) -> list[Unsettled]:
    """The trainings not settled ``after`` their first run, with no run queued or running.

    Trainings with no run at all are left to the training sensor (it requests one).
    """
    out: list[Unsettled] = []
    for tid in sorted(trainings):
        history = sorted(runs.get(tid, ()), key=lambda r: r.created)
        if tid in settled or not history:
            continue
        if any(r.status in _ACTIVE for r in history):
            continue
        waiting = now - history[0].created
        if waiting >= after:
            out.append(Unsettled(tid, waiting, history[-1].status, len(history)))
    return out
