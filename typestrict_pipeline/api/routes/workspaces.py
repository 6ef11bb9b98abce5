"""``/v1/workspaces/{workspace_id}``: credit balance, ledger, usage and budget (Settings → Usage).

A key only sees its own workspace: any other workspace id is answered 404, like one that does not
exist.
"""

from __future__ import annotations

import dataclasses

from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.schemas import (
    BudgetIn,
    BudgetOut,
    ErrorBody,
    LedgerLineOut,
    SpendOut,
    StorageOut,
    StudySpendOut,
    UsageOut,
    UsageRowOut,
    WorkspaceOut,
)
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.errors import NotFoundError
from typestrict_pipeline.usage import DaySpend, workspace_usage

router = api_router(tags=["workspaces"], responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})

WorkspaceId = PathId


def _own(workspace_id: str, workspace: str) -> str:
    if workspace_id != workspace:
        raise NotFoundError(
            f"expected a workspace id this key belongs to, got {workspace_id[:200]!r}. A key sees "
            "only its own workspace; use that workspace's key"
        )
    return workspace


@router.get("/workspaces/{workspace_id}", response_model=WorkspaceOut)
def get_workspace(workspace_id: WorkspaceId, ctx: Ctx, workspace: Workspace) -> WorkspaceOut:
    """The credit balance, and what the workspace keeps against its storage quota (its files,
    datasets and model files: ``storage``)."""
    ws = _own(workspace_id, workspace)
    ledger = CreditLedger(ctx.engine)
    used, quota = ctx.trainings.storage_usage(ws), ctx.settings.storage_quota
    return WorkspaceOut(workspace_id=ws, balance=ledger.balance(ws), has_account=ledger.has_account(ws),
                        storage=StorageOut(files=used.files, bytes=used.size, max_files=quota.max_files,
                                           max_bytes=quota.max_bytes))


@router.get("/workspaces/{workspace_id}/ledger", response_model=list[LedgerLineOut])
def get_ledger(workspace_id: WorkspaceId, ctx: Ctx, workspace: Workspace, page: ListPage) -> list[LedgerLineOut]:
    """The ledger's entries, oldest first, a page at a time (``limit``, ``offset``;
    ``X-Total-Count`` and ``Link``): grants, a credit spent per training, settlements."""
    ws = _own(workspace_id, workspace)
    ledger = CreditLedger(ctx.engine)
    shown = page.of(ledger.count_lines(ws))
    return [
        LedgerLineOut(id=ln.id, kind=ln.kind.value, reference=ln.reference, training_id=ln.training_id,
                      amount=ln.amount, balance_after=ln.balance_after,
                      verdict=ln.verdict.value if ln.verdict else None, reason=ln.reason,
                      created_at=ln.created_at.isoformat(), audit_sha256=ln.audit_sha256)
        for ln in ledger.lines(ws, limit=shown.stop - shown.start, offset=shown.start)
    ]


def _spend(d: DaySpend) -> SpendOut:
    return SpendOut(key=d.day, backtests_micro_usd=d.backtests_micro, studies_micro_usd=d.studies_micro,
                    live_micro_usd=d.live_micro, historical_micro_usd=d.historical_micro, calls=d.calls)


@router.get("/workspaces/{workspace_id}/usage", response_model=UsageOut)
def get_usage(workspace_id: WorkspaceId, ctx: Ctx, workspace: Workspace) -> UsageOut:
    """Settings → Usage (the same numbers as ``typestrict usage``): spend by UTC day and by
    workflow, backtests and studies (HISTORICAL) and live runs (LIVE) apart."""
    ws = _own(workspace_id, workspace)
    u = workspace_usage(ctx.engine, ws)
    return UsageOut(
        workspace_id=ws,
        by_day=[_spend(d) for d in u.by_day()],
        by_workflow=[_spend(d) for d in u.by_workflow().values()],
        total=_spend(u.totals()),
        calls=[UsageRowOut(day=r.day, workflow=r.workflow, mode=r.mode.value, calls=r.calls,
                           input_tokens=r.input_tokens, output_tokens=r.output_tokens,
                           cost_micro_usd=r.cost_micro_usd) for r in u.calls],
        studies=[StudySpendOut(study_id=st.study_id, name=st.name, workflow=st.workflow, day=st.day,
                               state=st.state, spend_micro_usd=st.spend_micro,
                               budget_micro_usd=st.budget_micro, deleted=st.deleted)
                 for st in u.studies],
    )


@router.get("/workspaces/{workspace_id}/budget", response_model=BudgetOut)
def get_budget(workspace_id: WorkspaceId, ctx: Ctx, workspace: Workspace) -> BudgetOut:
    """The monthly usage budget, this month's spend (studies included) and whether it is
    exhausted (scheduled work then waits)."""
    from typestrict_pipeline.api.budgets import budget_view

    return BudgetOut(**dataclasses.asdict(budget_view(ctx.engine, _own(workspace_id, workspace))))


@router.put("/workspaces/{workspace_id}/budget", response_model=BudgetOut, responses={409: {"model": ErrorBody}})
def put_budget(workspace_id: WorkspaceId, body: BudgetIn, ctx: Ctx, workspace: Workspace) -> BudgetOut:
    """Set the monthly usage budget, in USD (a JSON number or a decimal string)."""
    from typestrict_pipeline.api.budgets import set_budget
    from typestrict_pipeline.api.studies import money_text
    from typestrict_pipeline.study.limits import usd_to_micro

    ws = _own(workspace_id, workspace)
    return BudgetOut(**dataclasses.asdict(set_budget(ctx.engine, ws, usd_to_micro(money_text(body.budget_usd)))))
