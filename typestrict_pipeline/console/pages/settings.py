"""Settings → Usage: spend by UTC day and by workflow (backtests, studies, live runs), each
study's spend and budget, and the workspace's usage budget this month.

The numbers are :func:`~typestrict_pipeline.usage.workspace_usage`'s, the same as
``GET /v1/workspaces/{id}/usage`` and ``typestrict usage``; the budget is
:func:`~typestrict_pipeline.reruns.workspace.workspace_status`'s, the one scheduled work obeys.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from typestrict_pipeline.api.deps import get_ctx
from typestrict_pipeline.console.sessions import ConsoleSession
from typestrict_pipeline.console.web import PREFIX, ConsoleRoute, render, require_session
from typestrict_pipeline.reruns.workspace import store_spend_source, workspace_status
from typestrict_pipeline.store import utcnow
from typestrict_pipeline.study.limits import format_usd
from typestrict_pipeline.usage import workspace_usage

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

Session = Annotated[ConsoleSession, Depends(require_session)]


@router.get("/settings/usage")
def usage_page(request: Request, session: Session) -> Response:
    """Settings → Usage."""
    ctx = get_ctx(request)
    ws = session.workspace_id
    u = workspace_usage(ctx.engine, ws)
    status = workspace_status(ctx.engine, ws, utcnow(), store_spend_source(ctx.engine))
    return render(request, "usage.html", {
        "by_day": u.by_day(), "by_workflow": list(u.by_workflow().values()), "total": u.totals(),
        "studies": u.studies, "status": status, "usd": format_usd,
    })
