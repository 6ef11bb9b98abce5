"""The console's web plumbing: the session cookie, CSRF, templates, security headers, errors.

* **Cookie.** ``typestrict_session`` (``__Host-typestrict_session`` when served over TLS, which
  also makes it ``Secure``), ``HttpOnly``, ``SameSite=Lax``, ``Path=/``, with ``Max-Age`` the
  session's remaining life. It holds the session token only, never the workspace key.
* **CSRF.** Every form carries ``csrf_token`` (HTMX requests send it as ``X-CSRF-Token``);
  every console ``POST`` is refused (403) without the session's token. The sign-in form, which
  has no session yet, carries a token matched against a short-lived ``typestrict_signin``
  cookie (double submit), so another site cannot sign a browser in to its own workspace.
* **The API reads the cookie too**, for ``GET`` and ``HEAD`` only
  (:func:`cookie_workspace`, called by ``api.deps.get_workspace`` when no ``Authorization``
  header is sent): the result page, its downloads and the leaderboard chart's data work in a
  browser; a write through ``/v1`` still needs the Bearer key, so the cookie can never be used
  for a cross-site write.
* **Headers.** Every console page is sent with a Content-Security-Policy that allows scripts
  and styles from this server only (no inline script, no ``eval``: Vega runs with its
  expression interpreter), ``frame-ancestors 'none'``, ``no-store`` caching and ``nosniff``.
* **Errors** on a console page are pages too (:class:`ConsoleRoute`): a missing session
  redirects to the sign-in page (HTMX requests get ``HX-Redirect``), the project's errors are
  shown with their message in the product's one shape and their status.
"""

from __future__ import annotations

import datetime as dt
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from typestrict_pipeline.api.errors import ApiError, status_for
from typestrict_pipeline.console.once import new_form_id
from typestrict_pipeline.console.sessions import ConsoleSession, csrf_matches, session_for
from typestrict_pipeline.errors import InputError, NotFoundError, TypeStrictError
from typestrict_pipeline.refund.metrics import GAIN_FORMULA
from typestrict_pipeline.study.tables import state_text

log = logging.getLogger("typestrict.console")

HERE = Path(__file__).resolve().parent
TEMPLATES = Jinja2Templates(directory=str(HERE / "templates"))
TEMPLATES.env.filters["study_state"] = state_text  # "Budget reached", as the leaderboard says it
TEMPLATES.env.globals["new_form_id"] = new_form_id  # a creating form's one-time id (console.once)
TEMPLATES.env.globals["GAIN_FORMULA"] = GAIN_FORMULA  # the refund page's G, as every surface writes it
PREFIX = "/console"
COOKIE = "typestrict_session"
COOKIE_TLS = "__Host-typestrict_session"
SIGNIN_COOKIE = "typestrict_signin"
SIGNIN_MAX_AGE = 3600
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SAFE_METHODS = frozenset({"GET", "HEAD"})
FORM_FIX = "Correct the field and submit the form again."
"""What a console form's refusal tells the person to do (``validation_message(..., fix=FORM_FIX)``;
the API's own words point to its schema, which a person at a form has no use for)."""


LINKS_FIX = "Use the links of the console"
"""What to do about a console address that is not one of its pages, or a query it does not take."""

FIND_ON_PAGES = {
    "study": "Check the address: the Backtests page lists this workspace's studies",
    "backtest": "Check the address: the Backtests page lists this workspace's backtests",
    "schedule": "Check the address: a study's page shows its schedule",
    "model": "Check the address: the Trainings page lists this workspace's trainings, and a "
             "judged one links its result",
}
"""How a person at the console finds a record's right address, by what was not found (the API's
404 names its list routes instead: :meth:`~typestrict_pipeline.errors.NotFoundError.at_door`)."""


def for_console(exc: TypeStrictError) -> str:
    """The text of a refusal as a console page shows it: a record not found in the workspace
    says where the console lists it (the API's words name routes a person at a page cannot use);
    any other refusal as raised.

    >>> for_console(NotFoundError.in_workspace("study", "9", "Check the id (GET /v1/studies lists them)"))
    "expected a study with id '9' in this workspace, got none. Check the address: the Backtests page lists this workspace's studies"
    >>> for_console(InputError("a date", "'x'", "Write 2026-01-01"))
    "expected a date, got 'x'. Write 2026-01-01."
    """
    if isinstance(exc, NotFoundError) and exc.what in FIND_ON_PAGES:
        return exc.at_door(FIND_ON_PAGES[exc.what])
    return str(exc)


class SignInRequired(Exception):
    """No live session: the request is sent to the sign-in page."""


class CsrfRefused(Exception):
    """A console ``POST`` without the session's CSRF token."""


def is_tls(request: Request) -> bool:
    """Whether the browser reached us over TLS (``https``, also behind a proxy that says so
    to uvicorn's ``--proxy-headers``)."""
    return request.url.scheme == "https"


def cookie_name(request: Request) -> str:
    """The session cookie's name for this request (``__Host-`` prefixed over TLS)."""
    return COOKIE_TLS if is_tls(request) else COOKIE


def _engine(request: Request) -> Any:
    return request.app.state.ctx.engine


def current_session(request: Request) -> ConsoleSession | None:
    """The request's live session, if its cookie names one (looked up once per request)."""
    if hasattr(request.state, "console_session"):
        found: ConsoleSession | None = request.state.console_session
        return found
    token = request.cookies.get(cookie_name(request))
    found = session_for(_engine(request), token) if token else None
    request.state.console_session = found
    request.state.console_token = token if found is not None else None
    return found


def require_session(request: Request) -> ConsoleSession:
    """The live session, or :class:`SignInRequired` (a FastAPI dependency). A page takes one token
    from its workspace's bucket, the one the API's requests with this cookie take
    (:func:`~typestrict_pipeline.api.deps.get_workspace`): a session's pages were never limited,
    so a signed-in browser could ask for them without end (150 at once: 150 pages, each a read of
    the store), past what its workspace may ask of the API.

    Raises:
        SignInRequired: no live session.
        ApiError: the 429 of a workspace over its limit (the console's page, with ``Retry-After``).
    """
    found = current_session(request)
    if found is None:
        raise SignInRequired()
    limiter = request.app.state.ctx.limiter
    if limiter is not None and not getattr(request.state, "console_limited", False):
        request.state.console_limited = True  # one token a request (a form's check asks again)
        limiter.check(f"workspace:{found.workspace_id}")
    return found


def cookie_workspace(request: Request) -> str | None:
    """The workspace of the request's session cookie, for a ``GET``/``HEAD`` of the API."""
    if request.method not in SAFE_METHODS:
        return None
    found = current_session(request)
    return None if found is None else found.workspace_id


async def read_form(request: Request) -> FormData:
    """The request's form (URL-encoded or multipart), read once and kept on the request.

    Raises:
        ApiError: a body that is no form (broken multipart, a field over the parser's limit):
            400 on the console's error page, saying what to do, never the API's JSON.
    """
    cached = getattr(request.state, "console_form", None)
    if isinstance(cached, FormData):
        return cached
    try:
        form = await request.form(max_files=64, max_fields=400)
    except (HTTPException, MultiPartException) as exc:
        detail = exc.detail if isinstance(exc, HTTPException) else exc.message
        raise ApiError(400, "bad_request",
                       "expected a form as the console's pages send it, got a body that cannot be "
                       f"read as one ({str(detail).rstrip('.')[:100]}). Reload the page and send "
                       "the form again from it") from None
    repeated = _repeated_field(form)
    if repeated is not None:
        raise ApiError(422, "invalid_input", repeated)
    request.state.console_form = form
    return form


BOX_FIELDS = frozenset({"rerun", "keep_if_loses", "trained_on", "enabled"})
"""The fields the console's forms read with :func:`form_box` (a box, or the model's "trained on"
digest box), which refuses one sent twice in the box's own words."""


SECRET_FIELDS = frozenset({"key", "csrf_token"})
"""The fields whose values a refusal never shows: the sign-in form's workspace key (never shown
again once made: a repeated ``key`` field's refusal showed 40 characters of each, 19 of them the
secret's) and a CSRF token."""
NOT_SHOWN = "(not shown)"


def _repeated_field(form: FormData) -> str | None:
    """What is wrong when a form sends a text field more than once, else None: the last one was
    read (``budget_usd=1&budget_usd=1000000`` set a $1,000,000 budget), where the API refuses a
    key twice in a body and a page a repeated query parameter. Files may come several to a field
    (a model's files).

    >>> _repeated_field(FormData([("budget_usd", "1"), ("budget_usd", "1000000")]))
    "budget_usd: expected it once (a repeated field is ambiguous), got ['1', '1000000']. Correct the field and submit the form again."
    >>> _repeated_field(FormData([("key", "tsk_0123456789abcdef_secret"), ("key", "tsk_x")]))
    "key: expected it once (a repeated field is ambiguous), got ['(not shown)', '(not shown)']. Correct the field and submit the form again."
    >>> _repeated_field(FormData([("a", "1"), ("b", "1")])) is None
    True
    """
    from typestrict_pipeline.api.errors import validation_message

    for name in dict.fromkeys(form.keys()):
        values = form.getlist(name)
        if name in BOX_FIELDS:
            continue  # :func:`form_box` refuses a box sent twice, naming the box as the page does
        if len(values) > 1 and any(isinstance(v, str) for v in values):
            shown = [NOT_SHOWN if name in SECRET_FIELDS else v[:40] if isinstance(v, str) else "a file"
                     for v in values[:5]]
            return validation_message([{"loc": ("body", name), "input": shown,
                                        "msg": "It once (a repeated field is ambiguous)"}], fix=FORM_FIX)
    return None


def form_box(form: FormData, field: str, sent: Callable[[str], bool], expected: str,
             fix: str) -> str | None:
    """What a box (a checkbox) of a console form sends: its value when ticked (``sent`` accepts
    it), None when it was not sent; anything else (another value, twice, a file) is refused
    naming the field, never read as unticked. Every box of every form is read by it.

    >>> form_box(FormData([("enabled", "on")]), "enabled", lambda v: v == "on", "it ticked", "tick it")
    'on'
    >>> form_box(FormData([("enabled", "true")]), "enabled", lambda v: v == "on", "it ticked ('on') or not sent", "tick it")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: field 'enabled': expected it ticked ('on') or not sent, got 'true'. Tick it.
    """
    values = form.getlist(field)
    if not values:
        return None
    if len(values) == 1 and isinstance(values[0], str) and sent(values[0]):
        return values[0]
    got = ", ".join("a file" if not isinstance(v, str) else repr(v[:80]) for v in values)
    raise InputError(expected, got, fix, file=f"field {field!r}")


async def require_csrf(request: Request) -> ConsoleSession:
    """The live session of a ``POST`` that carries its CSRF token (form field or one
    ``X-CSRF-Token`` header; two headers are refused, whatever they hold); the session is looked
    up in the store off the event loop."""
    found = await run_in_threadpool(require_session, request)
    token = request.state.console_token
    headers = request.headers.getlist("x-csrf-token")
    if len(headers) > 1:  # one token, one header: two are not read as their first
        raise CsrfRefused()
    given = headers[0] if headers else None
    if given is None:
        value = (await read_form(request)).get("csrf_token")
        given = value if isinstance(value, str) else None
    if not csrf_matches(token, given):
        raise CsrfRefused()
    return found


def set_session_cookie(response: Response, request: Request, token: str, expires_at: dt.datetime) -> None:
    """Put the session token in the cookie (and clear the sign-in cookie)."""
    remaining = max(0, int((expires_at - dt.datetime.now(dt.UTC)).total_seconds()))
    response.set_cookie(cookie_name(request), token, max_age=remaining, path="/", secure=is_tls(request),
                        httponly=True, samesite="lax")
    response.delete_cookie(SIGNIN_COOKIE, path=PREFIX, secure=is_tls(request), httponly=True,
                           samesite="lax")


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(cookie_name(request), path="/", secure=is_tls(request), httponly=True,
                           samesite="lax")


def signin_token(request: Request) -> tuple[str, bool]:
    """The sign-in form's CSRF token: the browser's ``typestrict_signin`` cookie, or a new one
    (``True``: the response must set it)."""
    have = request.cookies.get(SIGNIN_COOKIE)
    if have and 20 <= len(have) <= 100:
        return have, False
    return secrets.token_urlsafe(32), True


def signin_matches(request: Request, given: str | None) -> bool:
    have = request.cookies.get(SIGNIN_COOKIE)
    if not have or not given or len(given) > 100:
        return False
    return hmac.compare_digest(have.encode("utf-8"), given.encode("utf-8", "replace"))


def set_signin_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(SIGNIN_COOKIE, token, max_age=SIGNIN_MAX_AGE, path=PREFIX, secure=is_tls(request),
                        httponly=True, samesite="lax")


def secure_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def render(request: Request, template: str, context: Mapping[str, Any] | None = None, *,
           status: int = 200, headers: Mapping[str, str] | None = None) -> HTMLResponse:
    """A console page: the template with the session (if any), its CSRF token and the nav."""
    found = current_session(request)
    ctx: dict[str, Any] = {"session": found, "csrf": found.csrf if found else None,
                           "workspace": found.workspace_id if found else None,
                           "path": request.url.path, **(context or {})}
    response = TEMPLATES.TemplateResponse(request, template, ctx, status_code=status,
                                          headers=dict(headers or {}))
    secure_headers(response)
    return response


def refused_input(message: str | None, inputs: Mapping[str, str]) -> str | None:
    """The id of the form's input a refusal names, to mark it ``aria-invalid`` and tie it to the
    refusal (``aria-describedby``): the place before its ``: expected`` (a field's name as the API
    names it, ``field 'name'`` as the core does, or the form's step and label), the longest of
    ``inputs`` (name or label → input id) it is or begins with; else a label of ``inputs`` the
    place quotes (``skill in "Grid"``), or the refusal does when it names no place. ``None`` when it names none of them (the refusal at the
    top of the form says why all the same).

    >>> form = {"start": "b-start", "budget_usd": "s-budget", "Study to re-run from": "schedule-study",
    ...         "step 1 (Data)": "dataset_file", "step 1 (Data), Id column": "col_id"}
    >>> refused_input("start: expected a value (it is required), got nothing. Correct the field.", form)
    'b-start'
    >>> refused_input("field 'budget_usd': expected a decimal number, got 'abc'. Type one.", form)
    's-budget'
    >>> refused_input("step 1 (Data), Id column: expected text, got ''. Name it.", form)
    'col_id'
    >>> refused_input('expected a study, got none. Pick one in the list "Study to re-run from".', form)
    'schedule-study'
    >>> refused_input("a line of 'Study to re-run from': expected NAME=V1, got 'x'. Write one.", form)
    'schedule-study'
    >>> refused_input("end: expected a date, got 'x'. Type one.", form) is None
    True
    """
    if not message:
        return None
    head, sep, _ = message.partition(": expected ")
    place = head.strip() if sep and not message.startswith("expected ") else ""
    named = re.fullmatch(r"field '([^']+)'(.*)", place)
    if named is not None:
        place = named.group(1) + named.group(2)
    found = [k for k in inputs if place and (place == k or place.startswith((f"{k},", f"{k} ", f"{k}.")))]
    if found:
        return inputs[max(found, key=len)]
    quoted = place or message  # a label the place (or a refusal naming no place) quotes
    for label, input_id in inputs.items():
        if f'"{label}"' in quoted or f"'{label}'" in quoted:
            return input_id
    return None


URL_SAFE = ":/%#?=@[]!$&'()*+,;"
"""What :class:`RedirectResponse` leaves unquoted in its ``Location`` (the rest, non-ASCII
characters included, is percent-encoded)."""


def redirect(url: str, request: Request | None = None) -> Response:
    """A 303 to ``url`` (an ``HX-Redirect`` for an HTMX request, which would swap it in), the URL
    percent-encoded in either header as ``Location`` is: a header holds ASCII only (a ``?next=``
    of ``/console/✓`` made the HTMX answer a 500, and ``/console/é`` a header in Latin-1).

    >>> redirect("/console/✓").headers["location"], redirect("/console/é?a=1").headers["location"]
    ('/console/%E2%9C%93', '/console/%C3%A9?a=1')
    """
    url = quote(url, safe=URL_SAFE)
    if request is not None and request.headers.get("hx-request") == "true":
        return secure_headers(Response(status_code=204, headers={"HX-Redirect": url}))
    return secure_headers(RedirectResponse(url, status_code=303))


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a console path of this server only, else the trainings. A
    path with a dot segment (``..`` or ``.``, percent-encoded or not) is refused: the browser
    would resolve ``/console/../v1/files`` to ``/v1/files``, out of the console.

    >>> safe_next("/console/backtests"), safe_next("//evil.example/x"), safe_next("https://x.y/")
    ('/console/backtests', '/console/trainings', '/console/trainings')
    >>> safe_next("/console/../v1/files"), safe_next("/console/%2e%2E/v1/files"), safe_next("/console/a.b?x=..")
    ('/console/trainings', '/console/trainings', '/console/a.b?x=..')
    """
    if (not value or not value.startswith(PREFIX + "/") or value.startswith("//") or "\\" in value
            or len(value) > 500 or any(ord(c) < 33 for c in value)
            or any(part in (".", "..") for part in unquote(re.split(r"[?#]", value)[0]).split("/"))):
        return PREFIX + "/trainings"
    return value


def return_to(request: Request) -> str:
    """The console page to come back to after signing in, when a request finds no live session:
    the page itself for a ``GET`` of a page; for an HTMX request (a polled state line, the
    estimate, "Add a decision"), the page the browser shows (``HX-Current-URL``), never the
    fragment; for a form's ``POST``, the page the form was on (``Referer``), never the ``POST``'s
    address, which is no page to open (405). Anything else: :func:`safe_next`'s default.

    >>> from starlette.requests import Request as R
    >>> def req(method, path, **headers):
    ...     return R({"type": "http", "method": method, "path": path, "query_string": b"",
    ...               "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]})
    >>> return_to(req("GET", "/console/studies/5/state", hx_request="true",
    ...               hx_current_url="http://h/console/studies/5?page=2"))
    '/console/studies/5?page=2'
    >>> return_to(req("POST", "/console/studies", referer="http://h/console/backtests"))
    '/console/backtests'
    >>> return_to(req("POST", "/console/studies")), return_to(req("GET", "/console/backtests"))
    ('/console/trainings', '/console/backtests')
    """
    if request.headers.get("hx-request") == "true":
        shown: str | None = request.headers.get("hx-current-url")
    elif request.method not in SAFE_METHODS:
        shown = request.headers.get("referer")
    else:
        return safe_next(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    if not shown:
        return safe_next(None)
    parts = urlsplit(shown)
    return safe_next(parts.path + (f"?{parts.query}" if parts.query else ""))


def error_page(request: Request, status: int, title: str, message: str,
               headers: Mapping[str, str] | None = None) -> HTMLResponse:
    return render(request, "error.html", {"title": title, "message": message}, status=status, headers=headers)


def is_console_path(path: str) -> bool:
    """Whether ``path`` is the console's (``/console`` and below), whose answers are pages.

    >>> is_console_path("/console"), is_console_path("/console/x"), is_console_path("/consoles"), is_console_path("/v1/x")
    (True, True, False, False)
    """
    return path == PREFIX or path.startswith(PREFIX + "/")


def not_a_page(request: Request, status: int = 404, headers: Mapping[str, str] | None = None) -> HTMLResponse:
    """The page of a console address that is none of its pages (404), or a method its page does
    not take (405, with its ``Allow``): what to do is to use the console's links, never to read
    the API's schema."""
    from typestrict_pipeline.api.app import one_of, sent_method

    path = request.url.path[:200]
    if status == 405:
        allowed = [m.strip() for m in (headers or {}).get("Allow", "").split(",") if m.strip()]
        return error_page(request, 405, "Not allowed", f"expected {one_of(allowed)} for "
                          f"{path!r}, got {sent_method(request)[:20]}. {LINKS_FIX}", headers)
    return error_page(request, 404, "Not found", f"expected a page of the console, got {path!r}. {LINKS_FIX}",
                      headers)


_TITLES = {400: "Bad request", 402: "No credit left", 403: "Refused", 404: "Not found",
           409: "Conflict", 410: "Gone", 413: "Too large", 422: "Cannot do that",
           429: "Too many requests", 503: "Store unavailable"}


class ConsoleRoute(APIRoute):
    """A route whose failures are console pages (see the module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        from typestrict_pipeline.api.edge import query_params, query_problem

        inner = super().get_route_handler()
        params = query_params(self.dependant)

        async def handler(request: Request) -> Response:
            problem = query_problem(request.query_params, params, fix=LINKS_FIX)
            if problem is not None:  # the page exists: its query is what is wrong
                return error_page(request, 422, _TITLES[422], problem)
            try:
                return await inner(request)
            except SignInRequired:
                return redirect(f"{PREFIX}/sign-in?next={quote(return_to(request), safe='/')}", request)
            except CsrfRefused:
                return error_page(request, 403, "Refused",
                                  "expected the form's CSRF token, got none or another session's. "
                                  "Reload the page and send the form again")
            except RequestValidationError:
                return not_a_page(request)
            except TypeStrictError as exc:
                status, _ = status_for(exc)
                return error_page(request, status, _TITLES.get(status, "Error"), for_console(exc),
                                  exc.headers if isinstance(exc, ApiError) else None)

        return handler


__all__ = ["PREFIX", "ConsoleRoute", "clear_session_cookie", "cookie_name", "cookie_workspace",
           "current_session", "error_page", "form_box", "is_console_path", "not_a_page", "read_form",
           "redirect", "refused_input", "render", "require_csrf", "require_session", "return_to", "safe_next", "secure_headers",
           "set_session_cookie", "set_signin_cookie", "signin_matches", "signin_token"]
