"""``/v1/backtests``: run a backtest (a Dagster run), list, read its run card and cost, cancel."""

from __future__ import annotations

import dataclasses

from fastapi import Depends

from typestrict_pipeline.api import backtests as core
from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.idempotency import idempotency_key
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.schemas import BacktestIn, BacktestOut, ErrorBody, WorkflowOut

router = api_router(tags=["backtests"], responses={
    401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}})

BacktestId = PathId


def _out(view: core.BacktestView) -> BacktestOut:
    return BacktestOut(**dataclasses.asdict(view))


@router.post("/backtests", status_code=202, response_model=BacktestOut,
             responses={409: {"model": ErrorBody}}, dependencies=[Depends(idempotency_key)])
def run_backtest(body: BacktestIn, ctx: Ctx, workspace: Workspace) -> BacktestOut:
    """Check the backtest (workflow, range against the data, step, parameters), then launch it as
    a ``backtest_<workflow>_job`` run on the Dagster instance; it is ``queued`` until the daemon
    starts it. Every model call is costed to the workspace."""
    req = core.BacktestRequest(workflow=body.workflow, start=body.start, end=body.end, step=body.step,
                               dataset=body.dataset, params=core.plain_params(body.params))
    return _out(core.launch_backtest(ctx.engine, ctx.settings.home, ctx.runs, workspace, req))


@router.get("/backtests", response_model=list[BacktestOut])
def list_backtests(ctx: Ctx, workspace: Workspace, page: ListPage) -> list[BacktestOut]:
    """The workspace's backtests, newest first (those waiting for their run first), a page at a
    time (``limit``, ``offset``; ``X-Total-Count`` and ``Link``). While the Dagster instance is
    unavailable, the store's backtests only, with the headers ``X-Queued-Backtests: unknown`` and
    ``X-Queued-Backtests-Reason`` saying why (the queued ones are known only to the instance),
    never a ``503``."""
    views, total, note = core.backtest_page(ctx.engine, ctx.runs, workspace, limit=page.limit,
                                            offset=page.offset)
    page.of(total)
    if note is not None:
        page.response.headers["X-Queued-Backtests"] = "unknown"
        page.response.headers["X-Queued-Backtests-Reason"] = note
    return [_out(v) for v in views]


@router.get("/backtests/workflows", response_model=list[WorkflowOut])
def list_workflows(workspace: Workspace) -> list[WorkflowOut]:
    """The workflows a backtest or a study may name, with their active version, the columns a
    dataset for each must have (per table, each with its kind) and their parameters."""
    return [WorkflowOut(**w) for w in core.workflows()]


@router.get("/backtests/{backtest_id}", response_model=BacktestOut)
def get_backtest(backtest_id: BacktestId, ctx: Ctx, workspace: Workspace) -> BacktestOut:
    """A backtest's state, run card and cost."""
    return _out(core.get_backtest(ctx.engine, ctx.runs, workspace, backtest_id))


@router.post("/backtests/{backtest_id}/cancel", response_model=BacktestOut)
def cancel_backtest(backtest_id: BacktestId, ctx: Ctx, workspace: Workspace) -> BacktestOut:
    """Cancel a queued or running backtest; what ran is kept (and costed)."""
    return _out(core.cancel_backtest(ctx.engine, ctx.runs, workspace, backtest_id))
