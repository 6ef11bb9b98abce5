"""A workspace's usage budget through the API (Settings → Usage: "the budget").

The budget is the workspace's monthly USD limit on everything metered (backtests, studies, live
runs): scheduled work is refused once the month's spend reaches it ("Usage budget exhausted"),
and resumes by itself when it is raised or a new month starts
(:mod:`typestrict_pipeline.reruns.workspace`). A customer reads it and sets its amount; the
subscription itself is the operator's (``typestrict schedule workspace WS --subscription ACTIVE``),
so a workspace the operator never set up cannot be given a budget through the API.

Amounts are integer micro-USD; a budget is given as a JSON number or a decimal string and read
exactly (:func:`typestrict_pipeline.study.limits.usd_to_micro`, through ``Decimal``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import Engine

from typestrict_pipeline.errors import ConflictError


@dataclass(frozen=True)
class BudgetView:
    """The workspace's budget this month.

    Attributes:
        workspace_id: the workspace.
        subscription: ``ACTIVE``, ``EXPIRED``, or ``NOT_SET_UP`` (the operator never set one).
        budget_micro_usd: the monthly usage budget (None when not set up).
        spent_micro_usd: what the workspace spent this month (UTC), studies included.
        period_start: the month's first day; period_end: its last day (UTC, inclusive).
        exhausted: spend has reached the budget (scheduled work is refused).
        text: one line saying all that, as Settings → Usage shows it.
    """

    workspace_id: str
    subscription: str
    budget_micro_usd: int | None
    spent_micro_usd: int
    period_start: str
    period_end: str
    exhausted: bool
    text: str


def budget_view(engine: Engine, workspace: str, now: dt.datetime | None = None) -> BudgetView:
    """The workspace's budget and this month's spend."""
    from typestrict_pipeline.reruns.workspace import (
        store_spend_source,
        usage_period,
        workspace_status,
    )
    from typestrict_pipeline.store import utcnow
    from typestrict_pipeline.study.limits import format_usd

    at = now or utcnow()
    spend = store_spend_source(engine)
    status = workspace_status(engine, workspace, at, spend)
    first, last = usage_period(at)
    if status is None:
        spent = int(spend(workspace, first, last))
        return BudgetView(workspace, "NOT_SET_UP", None, spent, first.isoformat(), last.isoformat(), False,
                          f"No usage budget: the operator has not set up this workspace's subscription "
                          f"yet. Spent {format_usd(spent)} this month")  # no full stop: as the other text, a page adds it
    text = (f"{format_usd(status.spent_micro_usd)} of {format_usd(status.usage_budget_micro_usd)} spent "
            f"this month ({first.isoformat()} to {last.isoformat()}, UTC)")
    if status.usage_exhausted:
        text += "; the budget is exhausted: scheduled work waits until it is raised or the month ends"
    return BudgetView(workspace, status.subscription.value, status.usage_budget_micro_usd,
                      status.spent_micro_usd, first.isoformat(), last.isoformat(), status.usage_exhausted, text)


def set_budget(engine: Engine, workspace: str, budget_micro_usd: int,
               now: dt.datetime | None = None) -> BudgetView:
    """Set the workspace's monthly usage budget (its subscription must exist).

    Raises:
        ConflictError: the operator never set up the workspace's subscription.
    """
    from typestrict_pipeline.reruns.workspace import (
        set_workspace,
        store_spend_source,
        workspace_status,
    )
    from typestrict_pipeline.store import utcnow

    at = now or utcnow()
    if workspace_status(engine, workspace, at, store_spend_source(engine)) is None:
        raise ConflictError(
            f"expected workspace {workspace!r} to have a subscription, got none (never set up). Ask "
            f"the operator to run `typestrict schedule workspace {workspace} --subscription ACTIVE "
            "--budget-usd 50`, then set the budget here")
    set_workspace(engine, workspace, usage_budget_micro_usd=budget_micro_usd)
    return budget_view(engine, workspace, at)


__all__ = ["BudgetView", "budget_view", "set_budget"]
