"""Sign in with a workspace key, sign out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.datastructures import FormData

from typestrict_pipeline.console.sessions import (
    SESSION_IDLE,
    SESSION_MAX_AGE,
    sign_in,
    sign_out,
)
from typestrict_pipeline.console.web import (
    PREFIX,
    ConsoleRoute,
    clear_session_cookie,
    current_session,
    read_form,
    redirect,
    render,
    require_csrf,
    safe_next,
    set_session_cookie,
    set_signin_cookie,
    signin_matches,
    signin_token,
)

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

REFUSED = ("expected a valid, unrevoked workspace key, got a key that is not one. Check that you "
           "pasted the whole key (it starts with tsk_), or ask your operator for a new one")
SIGNIN_EXPIRED = ("expected the sign-in form's token, got none or an old one (the form was open "
                  "too long, or cookies are off). Sign in again from this form")


def _form(request: Request, *, next_url: str, error: str | None = None, notice: str | None = None,
          status: int = 200) -> Response:
    token, fresh = signin_token(request)
    response = render(request, "sign_in.html", {
        "signin_csrf": token, "next": next_url, "error": error, "notice": notice,
        "idle_hours": int(SESSION_IDLE.total_seconds() // 3600),
        "max_hours": int(SESSION_MAX_AGE.total_seconds() // 3600)}, status=status)
    if fresh or error:
        set_signin_cookie(response, request, token)
    return response


@router.get("/sign-in")
def sign_in_page(request: Request, next: str | None = None, signed_out: int = 0) -> Response:
    """The sign-in form (a signed-in browser goes straight on)."""
    if current_session(request) is not None:
        return redirect(safe_next(next), request)
    notice = "You are signed out." if signed_out else (
        "Sign in to see that page." if next else None)
    return _form(request, next_url=safe_next(next), notice=notice)


@router.post("/sign-in")
async def sign_in_post(request: Request) -> Response:
    """Exchange the key for a session cookie; the key goes nowhere else. The form is read on the
    event loop, the key's check and the session's write in the threadpool."""
    form = await read_form(request)
    return await run_in_threadpool(_sign_in, request, form)


def _sign_in(request: Request, form: FormData) -> Response:
    next_url = safe_next(str(form.get("next") or ""))
    given = form.get("csrf_token")
    if not signin_matches(request, given if isinstance(given, str) else None):
        return _form(request, next_url=next_url, error=SIGNIN_EXPIRED, status=403)
    key = form.get("key")
    opened = sign_in(request.app.state.ctx.engine, key) if isinstance(key, str) else None
    if opened is None:
        wait = _refused_sign_in_wait(request)
        if wait is not None:
            response = _form(request, next_url=next_url, status=429, error=(
                f"expected at most {wait[1]} refused sign-ins at once from this address, got more. Wait "
                f"{wait[0]} s, then sign in again with the whole key (it starts with tsk_)"))
            response.headers["Retry-After"] = str(wait[0])
            return response
        return _form(request, next_url=next_url, error=REFUSED, status=401)
    response = redirect(next_url)
    set_session_cookie(response, request, opened.token, opened.session.expires_at)
    return response


def _refused_sign_in_wait(request: Request) -> tuple[int, int] | None:
    """A refused sign-in takes a token from its address's bucket, the one the API's refused keys
    take (:func:`~typestrict_pipeline.api.deps.get_workspace`), so guessing keys is limited at
    both doors alike (this form answered every guess, 200 in 6.5 s from one address, each a
    read of the store): None when one was left, else the whole seconds until one is back and
    the bucket's size."""
    from typestrict_pipeline.api.errors import ApiError

    limiter = request.app.state.ctx.limiter
    if limiter is None:
        return None
    try:
        limiter.check(f"addr:{request.client.host if request.client else '?'}")
    except ApiError as refused:
        return int(refused.headers.get("Retry-After", "1")), limiter.limit.burst
    return None


@router.post("/sign-out")
async def sign_out_post(request: Request) -> Response:
    """End the session (everywhere this cookie is) and forget the cookie. A session that has
    ended already (idle, expired, signed out in another tab) is signed out: the browser goes
    to the sign-in page saying so, not through a sign-in that comes back to this ``POST``."""
    if await run_in_threadpool(current_session, request) is not None:
        await require_csrf(request)
        await run_in_threadpool(sign_out, request.app.state.ctx.engine, request.state.console_token)
    response = redirect(f"{PREFIX}/sign-in?signed_out=1")
    clear_session_cookie(response, request)
    return response


@router.get("")
@router.get("/")
def home(request: Request) -> Response:
    """The console's front door: the trainings (or the sign-in form)."""
    return redirect(f"{PREFIX}/trainings")
