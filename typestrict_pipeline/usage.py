"""A workspace's spend as "Settings → Usage" shows it: backtests, live runs and studies.

Three sources, never counted twice:

* **backtests** (HISTORICAL) and **live decisions** (LIVE): every metered call
  (:func:`typestrict_pipeline.backtest.store.usage`), on the UTC day of the call;
* **studies** (HISTORICAL): each study's recorded spend (``study_studies.spend_micro``), on the
  UTC day the study was created — the same rule as the workspace's usage budget
  (``typestrict_pipeline.reruns.workspace.store_spend_source``). A study's window runs are
  metered by the study, not stored as plain backtests. Studies created before cost tracking
  have no spend to show and are listed as "not tracked", never as $0.

Spend is history: deleting or cancelling never changes what was spent. A deleted study's spend
stays under its id, marked deleted (``study_deleted``), in every total.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine, select

from typestrict_pipeline.backtest.metering import RunMode
from typestrict_pipeline.backtest.store import UsageRow, usage
from typestrict_pipeline.store import session_scope


@dataclass(frozen=True)
class StudySpend:
    """One study's spend. ``spend_micro`` is ``None`` when the study predates cost tracking."""

    study_id: int
    name: str | None
    workflow: str
    day: str
    state: str
    spend_micro: int | None
    budget_micro: int | None
    deleted: bool = False


@dataclass(frozen=True)
class DaySpend:
    """One UTC day: backtests, studies and live runs apart, and the metered calls."""

    day: str
    backtests_micro: int
    studies_micro: int
    live_micro: int
    calls: int

    @property
    def historical_micro(self) -> int:
        """Backtests plus studies: everything replayed on history."""
        return self.backtests_micro + self.studies_micro


@dataclass(frozen=True)
class WorkspaceUsage:
    """Everything ``typestrict usage`` prints."""

    workspace: str
    calls: tuple[UsageRow, ...]
    studies: tuple[StudySpend, ...]

    def by_day(self) -> list[DaySpend]:
        """Spend per UTC day, oldest first.

        >>> u = WorkspaceUsage("w", (UsageRow("2015-01-02", "rain", RunMode.LIVE, 1, 10, 2, 5),),
        ...                    (StudySpend(1, None, "rain", "2015-01-02", "completed", 7, None),))
        >>> u.by_day()
        [DaySpend(day='2015-01-02', backtests_micro=0, studies_micro=7, live_micro=5, calls=1)]
        """
        days: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for r in self.calls:
            slot = days[r.day]
            slot[0 if r.mode is RunMode.HISTORICAL else 2] += r.cost_micro_usd
            slot[3] += r.calls
        for s in self.studies:
            days[s.day][1] += s.spend_micro or 0
        return [DaySpend(d, *days[d]) for d in sorted(days)]

    def by_workflow(self) -> dict[str, DaySpend]:
        """Spend per workflow (``day`` holds the workflow's name), sorted by name.

        >>> u = WorkspaceUsage("w", (UsageRow("2015-01-02", "rain", RunMode.HISTORICAL, 2, 10, 2, 5),),
        ...                    (StudySpend(1, None, "rain", "2015-01-03", "completed", 7, None),))
        >>> u.by_workflow()["rain"]
        DaySpend(day='rain', backtests_micro=5, studies_micro=7, live_micro=0, calls=2)
        """
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for r in self.calls:
            slot = out[r.workflow]
            slot[0 if r.mode is RunMode.HISTORICAL else 2] += r.cost_micro_usd
            slot[3] += r.calls
        for s in self.studies:
            out[s.workflow][1] += s.spend_micro or 0
        return {w: DaySpend(w, *out[w]) for w in sorted(out)}

    def totals(self) -> DaySpend:
        """The whole period (``day`` is ``"total"``); studies without tracked cost count 0.

        >>> u = WorkspaceUsage("w", (), (StudySpend(1, None, "rain", "2015-01-03", "completed", None, None),
        ...                              StudySpend(2, None, "rain", "2015-01-04", "completed", 9, 10)))
        >>> t = u.totals()
        >>> (t.studies_micro, t.historical_micro)
        (9, 9)
        """
        days = self.by_day()
        return DaySpend("total", sum(d.backtests_micro for d in days), sum(d.studies_micro for d in days),
                        sum(d.live_micro for d in days), sum(d.calls for d in days))


def workspace_usage(engine: Engine, workspace: str, *, since: dt.date | None = None,
                    until: dt.date | None = None) -> WorkspaceUsage:
    """A workspace's usage from ``since`` to ``until`` (UTC days, both included)."""
    from typestrict_pipeline.study.tables import DeletedStudyRow, StudyRow

    calls = usage(engine, workspace=workspace, since=since, until=until)
    studies: list[StudySpend] = []
    with session_scope(engine) as s:
        # the columns shown, not the rows (a study's JSON columns cost 0.1 ms a row to read: 10,000 studies took 1.6 s)
        q = select(StudyRow.id, StudyRow.name, StudyRow.workflow, StudyRow.created_at, StudyRow.state,
                   StudyRow.spend_micro, StudyRow.cost_tracked, StudyRow.budget_micro
                   ).where(StudyRow.workspace == workspace).order_by(StudyRow.id)
        if since is not None:
            q = q.where(StudyRow.created_at >= dt.datetime(since.year, since.month, since.day, tzinfo=dt.UTC))
        if until is not None:
            end = dt.datetime(until.year, until.month, until.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
            q = q.where(StudyRow.created_at < end)
        for row in s.execute(q):
            studies.append(StudySpend(
                study_id=row.id, name=row.name, workflow=row.workflow,
                day=row.created_at.astimezone(dt.UTC).date().isoformat(), state=row.state,
                spend_micro=(row.spend_micro or 0) if row.cost_tracked else None,
                budget_micro=row.budget_micro,
            ))
        gone = select(DeletedStudyRow).where(DeletedStudyRow.workspace == workspace)
        if since is not None:
            gone = gone.where(DeletedStudyRow.created_at >= dt.datetime(
                since.year, since.month, since.day, tzinfo=dt.UTC))
        if until is not None:
            gone = gone.where(DeletedStudyRow.created_at < dt.datetime(
                until.year, until.month, until.day, tzinfo=dt.UTC) + dt.timedelta(days=1))
        for dead in s.execute(gone).scalars():
            studies.append(StudySpend(
                study_id=dead.study_id, name=dead.name, workflow=dead.workflow,
                day=dead.created_at.astimezone(dt.UTC).date().isoformat(), state=DELETED,
                spend_micro=(dead.spend_micro or 0) if dead.cost_tracked else None,
                budget_micro=dead.budget_micro, deleted=True,
            ))
    studies.sort(key=lambda st: st.study_id)
    return WorkspaceUsage(workspace, tuple(calls), tuple(studies))


DELETED = "deleted"
"""How Usage marks a deleted study's line (its spend stays counted)."""
