"""Settings → Usage and Settings → Notifications.

Settings → Usage: spend by UTC day and by workflow (backtests, studies, live runs), each
study's spend and budget, and the workspace's usage budget this month.

The numbers are :func:`~typestrict_pipeline.usage.workspace_usage`'s, the same as
``GET /v1/workspaces/{id}/usage`` and ``typestrict usage``; the budget is
:func:`~typestrict_pipeline.api.budgets.budget_view`'s (``GET /v1/workspaces/{id}/budget``), the
one scheduled work obeys, and is set as ``PUT`` sets it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from typestrict_pipeline.api.deps import get_ctx
from typestrict_pipeline.api.errors import validation_message
from typestrict_pipeline.api.schemas import BudgetIn
from typestrict_pipeline.console.paging import Pager, hrefs, requested
from typestrict_pipeline.console.sessions import ConsoleSession
from typestrict_pipeline.console.web import (
    FORM_FIX,
    PREFIX,
    ConsoleRoute,
    form_box,
    read_form,
    redirect,
    render,
    require_csrf,
    require_session,
)
from typestrict_pipeline.errors import TypeStrictError
from typestrict_pipeline.study.limits import format_usd, plain_usd
from typestrict_pipeline.usage import workspace_usage

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

Session = Annotated[ConsoleSession, Depends(require_session)]
Posted = Annotated[ConsoleSession, Depends(require_csrf)]


@router.get("/settings/usage")
def usage_page(request: Request, session: Session, studies: str | None = None) -> Response:
    """Settings → Usage: its Studies table :data:`~typestrict_pipeline.console.paging.PER_PAGE`
    a page, newest first (``?studies=N``)."""
    return _usage(request, session)


def _usage(request: Request, session: ConsoleSession, *, error: str | None = None, typed: str = "",
           saved: bool = False, status: int = 200) -> Response:
    from typestrict_pipeline.api.budgets import budget_view

    ctx = get_ctx(request)
    ws = session.workspace_id
    u = workspace_usage(ctx.engine, ws)
    pager = Pager.at(requested(request.query_params.get("studies"), "studies"), param="studies",
                     total=len(u.studies),
                     href=lambda n: f"{hrefs(f'{PREFIX}/settings/usage', request.query_params, 'studies', ('studies',))(n)}#studies-title")
    newest = u.studies[::-1]
    return render(request, "usage.html", {
        "by_day": u.by_day(), "by_workflow": list(u.by_workflow().values()), "total": u.totals(),
        "studies": newest[pager.offset:pager.last], "pager": pager, "budget": budget_view(ctx.engine, ws), "usd": format_usd, "plain_usd": plain_usd,
        "budget_error": error, "typed": typed, "saved": saved,
    }, status=status)


@router.get("/settings/usage/saved")
def usage_saved(request: Request, session: Session, studies: str | None = None) -> Response:
    """Settings → Usage after the budget was set."""
    return _usage(request, session, saved=True)


@router.post("/settings/usage/budget")
async def set_budget(request: Request, session: Posted) -> Response:
    """Set the monthly usage budget (``PUT /v1/workspaces/{id}/budget``), read exactly. The form
    is read on the event loop, the store's work (and the page) in the threadpool."""
    form = await read_form(request)
    return await run_in_threadpool(_set_budget, request, session, form)


def _set_budget(request: Request, session: ConsoleSession, form: FormData) -> Response:
    from typestrict_pipeline.api.budgets import set_budget as core_set
    from typestrict_pipeline.api.studies import money_text
    from typestrict_pipeline.study.limits import usd_to_micro

    value = form.get("budget_usd")
    typed = value.strip() if isinstance(value, str) else ""
    try:  # the API's own schema, then its reader: the whole value as typed, never a part of it
        body = BudgetIn.model_validate({"budget_usd": typed})
        core_set(get_ctx(request).engine, session.workspace_id, usd_to_micro(money_text(body.budget_usd)))
    except ValidationError as exc:
        return _usage(request, session, error=validation_message(exc.errors(), fix=FORM_FIX),
                      typed=typed[:200], status=422)
    except TypeStrictError as exc:
        from typestrict_pipeline.api.errors import status_for

        return _usage(request, session, error=str(exc), typed=typed[:200], status=status_for(exc)[0])
    return redirect(f"{PREFIX}/settings/usage/saved", request)


@router.get("/settings/notifications")
def notifications_page(request: Request, session: Session, saved: int = 0,
                       deliveries: str | None = None) -> Response:
    """Settings → Notifications: who gets "A scheduled study changes its winner", through what,
    on or off per person, and every delivery with its failures (``GET /v1/notifications``),
    :data:`~typestrict_pipeline.console.paging.PER_PAGE` a page, newest first (``?deliveries=N``)."""
    from typestrict_pipeline.api import notifications as core
    from typestrict_pipeline.reruns.notify import (
        TITLE_WINNER_CHANGED,
        transport_from_env,
        transport_label,
    )

    ctx = get_ctx(request)
    ws = session.workspace_id
    try:
        where = transport_label(transport_from_env(), customer=True)
    except TypeStrictError:  # the operator's setting is wrong: its message names server variables
        where = "nowhere yet: the server's delivery setting is not valid (its operator sees why)"
    pager = Pager.at(requested(deliveries, "deliveries"), param="deliveries",
                     total=core.count_deliveries(ctx.engine, ws),
                     href=hrefs(request.url.path, request.query_params, "deliveries", ("deliveries",)))
    return render(request, "notifications.html", {
        "title": TITLE_WINNER_CHANGED, "where": where, "settings": core.settings(ctx.engine, ws),
        "deliveries": core.deliveries(ctx.engine, ws, limit=pager.per_page, offset=pager.offset),
        "pager": pager, "saved": bool(saved)})


@router.post("/settings/notifications")
async def set_notification(request: Request, session: Posted) -> Response:
    """Turn the notification on or off for one schedule owner (``PUT /v1/notifications``). The
    form is read on the event loop, the store's work in the threadpool."""
    form = await read_form(request)
    return await run_in_threadpool(_set_notification, request, session, form)


def _set_notification(request: Request, session: ConsoleSession, form: FormData) -> Response:
    from typestrict_pipeline.api import notifications as core

    person = form.get("person")
    enabled = form_box(form, "enabled", lambda v: v == "on", "the box \"Send to …\" ticked ('on') or not sent",
                       "reload the page, tick or clear the box and save again") is not None
    core.set_setting(get_ctx(request).engine, session.workspace_id, person if isinstance(person, str) else "",
                     enabled)
    return redirect(f"{PREFIX}/settings/notifications?saved=1", request)
