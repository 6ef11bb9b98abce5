"""A workspace's subscription state and usage budget, and what it spent this period.

* A workspace has a subscription state (``ACTIVE`` or ``EXPIRED``) and a usage budget in integer
  micro-USD per calendar month (UTC). Scheduled work is refused while the subscription is
  expired or the month's spend has reached the budget; nothing else is changed, so the schedule
  resumes by itself once the workspace is restored (renewed, budget raised, or a new month).
* Spend is every metered run of the workspace in the period: live runs, backtests and studies
  (a study's runs are backtests, metered ``HISTORICAL``). It is read from the backtest engine's
  usage records (by workspace, day, workflow and mode) through a :class:`SpendSource`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, select

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.tables import Workspace
from typestrict_pipeline.store import session_scope, utcnow

#: ``(workspace_id, first_day, last_day_inclusive) -> micro-USD spent``.
SpendSource = Callable[[str, dt.date, dt.date], int]


@dataclass(frozen=True)
class WorkspaceStatus:
    """A workspace's state now.

    Attributes:
        workspace_id: the workspace.
        subscription: its subscription state.
        usage_budget_micro_usd: its budget for the period.
        spent_micro_usd: what it spent in the period.
        period: first and last day (inclusive, UTC) of the period.
    """

    workspace_id: str
    subscription: SubscriptionState
    usage_budget_micro_usd: int
    spent_micro_usd: int
    period: tuple[dt.date, dt.date]

    @property
    def usage_exhausted(self) -> bool:
        """Spend has reached the budget."""
        return self.spent_micro_usd >= self.usage_budget_micro_usd


def usage_period(now: dt.datetime) -> tuple[dt.date, dt.date]:
    """The calendar month (UTC) containing ``now``: first and last day, inclusive.

    >>> usage_period(dt.datetime(2026, 2, 14, 23, 0, tzinfo=dt.UTC))
    (datetime.date(2026, 2, 1), datetime.date(2026, 2, 28))
    >>> usage_period(dt.datetime(2026, 12, 31, tzinfo=dt.UTC))[1]
    datetime.date(2026, 12, 31)
    """
    day = now.astimezone(dt.UTC).date()
    first = day.replace(day=1)
    nxt = first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)
    return first, nxt - dt.timedelta(days=1)


def set_workspace(
    engine: Engine,
    workspace_id: str,
    *,
    subscription: SubscriptionState | None = None,
    usage_budget_micro_usd: int | None = None,
) -> None:
    """Create or update a workspace's subscription state and usage budget.

    A new workspace needs both; an existing one changes only what is given.

    Raises:
        InputError: a new workspace without both values, or a negative budget.
    """
    if usage_budget_micro_usd is not None and (
        not isinstance(usage_budget_micro_usd, int) or usage_budget_micro_usd < 0
    ):
        raise InputError(
            "a usage budget in whole micro-USD ≥ 0", repr(usage_budget_micro_usd), "give e.g. 50_000_000 for $50"
        )
    with session_scope(engine) as session:
        row = session.get(Workspace, workspace_id, with_for_update=True)
        if row is None:
            if subscription is None or usage_budget_micro_usd is None:
                raise InputError(
                    f"a subscription state and a usage budget for the new workspace {workspace_id!r}",
                    f"subscription={subscription}, budget={usage_budget_micro_usd}",
                    "give both (e.g. --subscription ACTIVE --budget-usd 50)",
                )
            session.add(
                Workspace(
                    workspace_id=workspace_id,
                    subscription=subscription,
                    usage_budget_micro_usd=usage_budget_micro_usd,
                    updated_at=utcnow(),
                )
            )
            return
        if subscription is not None:
            row.subscription = subscription
        if usage_budget_micro_usd is not None:
            row.usage_budget_micro_usd = usage_budget_micro_usd
        row.updated_at = utcnow()


def workspace_status(
    engine: Engine, workspace_id: str, now: dt.datetime, spend: SpendSource
) -> WorkspaceStatus | None:
    """The workspace's state now, or ``None`` when it has no record.

    Args:
        engine: the store.
        workspace_id: the workspace.
        now: the current time (aware).
        spend: where spend comes from (the backtest engine's usage records).
    """
    with session_scope(engine) as session:
        row = session.execute(select(Workspace).where(Workspace.workspace_id == workspace_id)).scalar_one_or_none()
        if row is None:
            return None
        subscription, budget = row.subscription, row.usage_budget_micro_usd
    first, last = usage_period(now)
    return WorkspaceStatus(
        workspace_id=workspace_id,
        subscription=subscription,
        usage_budget_micro_usd=budget,
        spent_micro_usd=int(spend(workspace_id, first, last)),
        period=(first, last),
    )


def store_spend_source(engine: Engine) -> SpendSource:
    """Spend from the store: the backtest engine's usage records plus the studies' spend.

    * live runs and backtests: ``typestrict_pipeline.backtest.store.usage`` (every metered call
      by workspace, day, workflow and mode, ``LIVE`` and ``HISTORICAL``);
    * studies: each study's recorded spend (``study_studies.spend_micro``), counted on the day
      the study was created (a study's window runs are metered by the studies area, not stored
      as plain backtests, so nothing is counted twice), deleted studies included
      (``study_deleted``: deleting a study never gives its spend back).
    """
    from sqlalchemy import func

    from typestrict_pipeline.backtest.store import usage
    from typestrict_pipeline.study.tables import DeletedStudyRow, StudyRow

    def spend(workspace_id: str, first: dt.date, last: dt.date) -> int:
        runs = sum(row.cost_micro_usd for row in usage(engine, workspace=workspace_id, since=first, until=last))
        start = dt.datetime(first.year, first.month, first.day, tzinfo=dt.UTC)
        end = dt.datetime(last.year, last.month, last.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
        with session_scope(engine) as session:
            studies = 0
            for table in (StudyRow, DeletedStudyRow):  # a deleted study's spend stays spent
                studies += int(session.execute(
                    select(func.coalesce(func.sum(table.spend_micro), 0)).where(
                        table.workspace == workspace_id,
                        table.created_at >= start,
                        table.created_at < end,
                    )
                ).scalar_one() or 0)
        return int(runs) + studies

    return spend


@dataclass(frozen=True)
class WorkspaceWords:
    """How a door says what fixes a workspace's scheduled work (:func:`workspace_warning`): the
    CLI the operator's command; the API and the console that the subscription is the operator's,
    and where the customer raises the usage budget themselves. ``{workspace}``: the workspace.
    """

    set_up: str
    """What sets up a workspace never set up."""
    renew: str
    """What renews an expired subscription."""
    raise_budget: str
    """What raises an exhausted usage budget."""


CLI_WORKSPACE = WorkspaceWords(
    set_up="typestrict schedule workspace {workspace} --subscription ACTIVE --budget-usd 50",
    renew="typestrict schedule workspace {workspace} --subscription ACTIVE",
    raise_budget="typestrict schedule workspace {workspace} --budget-usd N")
API_WORKSPACE = WorkspaceWords(
    set_up="the operator sets one up", renew="the operator renews it",
    raise_budget="PUT /v1/workspaces/{workspace}/budget")
CONSOLE_WORKSPACE = WorkspaceWords(
    set_up="the operator sets one up", renew="the operator renews it",
    raise_budget="Settings → Usage, Budget")


def workspace_warning(engine: Engine, workspace_id: str, now: dt.datetime, spend: SpendSource, *,
                      words: WorkspaceWords = CLI_WORKSPACE) -> str | None:
    """Why scheduled work of a workspace would be refused now, naming what fixes it in the door's
    ``words`` (the operator's command by default); None when its subscription is active and its
    usage budget not exhausted.

    "Never set up" (no record) and "expired" are told apart.
    """
    from typestrict_pipeline.study.limits import format_usd

    status = workspace_status(engine, workspace_id, now, spend)
    if status is None:
        return (f"workspace {workspace_id} has no subscription yet (never set up): every tick will skip with "
                f"\"Workspace subscription never set up\" until one is set: "
                f"{words.set_up.format(workspace=workspace_id)}")
    if status.subscription is not SubscriptionState.ACTIVE:
        return (f"workspace {workspace_id}'s subscription expired: every tick will skip with \"Workspace "
                f"subscription expired\" until it is renewed: {words.renew.format(workspace=workspace_id)}")
    if status.usage_exhausted:
        return (f"workspace {workspace_id}'s usage budget is exhausted ({format_usd(status.spent_micro_usd)} of "
                f"{format_usd(status.usage_budget_micro_usd)} this month): every tick will skip with \"Usage budget "
                f"exhausted\" until it is raised: {words.raise_budget.format(workspace=workspace_id)}")
    return None
