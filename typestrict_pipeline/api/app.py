"""The FastAPI application: :func:`create_app` wires the routers, auth, limits and errors.

* Versioned under ``/v1``; the OpenAPI schema is at ``/v1/openapi.json`` (docs at ``/v1/docs``).
* Every ``/v1`` route but the schema needs ``Authorization: Bearer <key>`` (``typestrict api-key
  create WORKSPACE``); every object is scoped to the key's workspace, and another workspace's
  object is answered exactly like a missing one (404).
* Request bodies are bounded (``max_body_bytes`` for JSON, ``max_upload_bytes`` for file
  uploads), checked on ``Content-Length`` and while reading, so a lying or chunked client cannot
  push more.
* Every error is ``{"error": {"code", "message"}}`` with the message the CLI prints; a bug is a
  500 with a generic message (the traceback goes to the server's log, never to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from typestrict_pipeline.api.errors import ApiError, error_body, status_for, validation_message
from typestrict_pipeline.api.jev import JEV_SOURCE_ENV, missing_jev_error, parse_jev_source
from typestrict_pipeline.api.keys import KeyVerifier
from typestrict_pipeline.api.quota import StorageQuota
from typestrict_pipeline.api.ratelimit import RateLimit, RateLimitMiddleware, TokenBuckets
from typestrict_pipeline.api.runs import DagsterRuns, dagster_home_for
from typestrict_pipeline.api.trainings import TrainingStore
from typestrict_pipeline.errors import TypeStrictError
from typestrict_pipeline.store import open_store

log = logging.getLogger("typestrict.api")

DEFAULT_MAX_BODY = 16 * 1024 * 1024
DEFAULT_MAX_UPLOAD = 256 * 1024 * 1024
DEFAULT_RATE_LIMIT = RateLimit()
UPLOAD_PREFIXES = ("/v1/files/", "/v1/trainings/")
CONSOLE_UPLOAD_PREFIX = "/console/trainings"  # the console's dataset and predictions forms


@dataclass
class ApiSettings:
    """What the server needs: the store, the home folder, Jev's source, the size limits."""

    store_url: str
    home: Path
    jev_source: Mapping[str, Any]
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD
    dagster_home: Path | None = None
    rate_limit: RateLimit | None = field(default_factory=RateLimit)
    storage_quota: StorageQuota = field(default_factory=StorageQuota)
    warm_runs: bool = False
    public_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ApiContext:
    """Shared by every request (``request.app.state.ctx``)."""

    settings: ApiSettings
    engine: Engine
    trainings: TrainingStore
    runs: DagsterRuns
    keys: KeyVerifier
    limiter: TokenBuckets | None = None


class _TooLarge(Exception):
    pass


MAX_BODY_ENV = "TYPESTRICT_MAX_BODY_BYTES"
MAX_UPLOAD_ENV = "TYPESTRICT_MAX_UPLOAD_BYTES"


def body_limits_from_env() -> tuple[int, int]:
    """The server's request body limits, ``(JSON body, upload)``: :data:`MAX_BODY_ENV` and
    :data:`MAX_UPLOAD_ENV` (positive whole numbers of bytes in ASCII digits, the rule of every
    ``TYPESTRICT_MAX_*`` bound), else 16 MiB and 256 MiB; read when a server starts.

    >>> body_limits_from_env()  # neither set
    (16777216, 268435456)
    """
    from typestrict_pipeline.files import bound_from_env

    return bound_from_env(MAX_BODY_ENV, DEFAULT_MAX_BODY), bound_from_env(MAX_UPLOAD_ENV, DEFAULT_MAX_UPLOAD)


BODY_TIMEOUT_ENV = "TYPESTRICT_BODY_TIMEOUT_S"
DEFAULT_BODY_TIMEOUT_S = 300


def body_timeout_from_env() -> int:
    """The seconds a request's whole body may take to arrive (:data:`BODY_TIMEOUT_ENV`, a positive
    whole number in ASCII digits, the rule of every bound; else 300): an operator who raises the
    upload limit raises this with it, since at 300 s a 256 MiB upload needs about 0.9 MB/s and a
    2 GiB one 7 MB/s. Read when a server starts.

    >>> body_timeout_from_env()  # not set
    300
    """
    from typestrict_pipeline.files import bound_from_env

    return bound_from_env(BODY_TIMEOUT_ENV, DEFAULT_BODY_TIMEOUT_S)


def check_bound_settings() -> None:
    """Read every bound an operator sets in the environment (the body limits and timeout, the storage quota,
    ``TYPESTRICT_MAX_CSV_CELL_CHARS``, ``TYPESTRICT_MAX_JSONL_LINE_BYTES``,
    ``TYPESTRICT_MAX_DATA_FILE_BYTES``) once, as the server starts: a value set wrong
    (``files.bound_from_env``) stops it there with the setting's name, never a customer's request
    later with a message about the server's environment.

    >>> check_bound_settings()  # none set wrong
    """
    from typestrict_pipeline.api.quota import StorageQuota
    from typestrict_pipeline.files import max_data_file_bytes, max_jsonl_line_bytes
    from typestrict_pipeline.refund.table import max_csv_cell_chars

    body_limits_from_env()
    body_timeout_from_env()
    StorageQuota.from_env()
    max_csv_cell_chars()
    max_jsonl_line_bytes()
    max_data_file_bytes()


def is_upload(method: str, path: str) -> bool:
    """Whether a request sends a file (its body bounded by the upload limit, not the JSON one).

    >>> is_upload("PUT", "/v1/files/a.csv"), is_upload("POST", "/v1/studies")
    (True, False)
    """
    return ((method == "PUT" and path.startswith(UPLOAD_PREFIXES))
            or (method == "POST" and path.startswith(CONSOLE_UPLOAD_PREFIX)))


def body_limit(method: str, path: str, max_body: int, max_upload: int) -> int:
    """The largest body a request may send: ``max_upload`` for a file upload, else ``max_body``
    (the rule of :class:`BodyLimitMiddleware` and of the server's chunked-body bound).

    >>> body_limit("PUT", "/v1/files/a.csv", 10, 99), body_limit("POST", "/v1/studies", 10, 99)
    (99, 10)
    """
    return max_upload if is_upload(method, path) else max_body


def limit_setting(method: str, path: str) -> str:
    """The setting an operator raises for the limit of this request's body."""
    return MAX_UPLOAD_ENV if is_upload(method, path) else MAX_BODY_ENV


class BodyLimitMiddleware:
    """Refuse a request body above its limit with 413, by ``Content-Length`` or while reading."""

    def __init__(self, app: ASGIApp, max_body: int, max_upload: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_upload = max_upload

    def _limit(self, scope: Scope) -> int:
        return body_limit(str(scope.get("method", "")), str(scope.get("path", "")), self.max_body, self.max_upload)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        # Whether the request has a body still to come: an answer sent before it was read says
        # "connection: close" (the server closes rather than drain it, BoundedH11Protocol), so a
        # client never reuses a connection the server is about to close.
        body_pending = any(
            (name == b"content-length" and value.strip() not in (b"", b"0"))
            or (name == b"transfer-encoding" and b"chunked" in value.lower())
            for name, value in scope.get("headers", []))
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = limit + 1
                if declared > limit:
                    await _send_413(scope, send, limit, f"{declared:,} bytes (its Content-Length)")
                    return
        seen = 0
        started = False
        refused = False

        async def counting_receive() -> Message:
            # Past the limit (a chunked body, or one longer than it said), the 413 goes out at
            # once and the application sees the client gone: however it reads the body (a
            # framework may turn a reading error into a 400), the answer is this 413.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            nonlocal body_pending
            message = await receive()
            if message["type"] == "http.request":
                if not message.get("more_body", False):
                    body_pending = False
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = True
                    if not started:
                        await _send_413(scope, send, limit, f"more: {seen:,} bytes had arrived when it "
                                        "was stopped")
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 was the answer
            if message["type"] == "http.response.start":
                started = True
                if body_pending:
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started and not refused:
                await _send_413(scope, send, limit, f"more: {seen:,} bytes had arrived when it was stopped")


class HeadMiddleware:
    """``HEAD`` on every address that answers ``GET`` (RFC 9110 §9.3.2: the same status and
    headers, no body): a route that declares ``HEAD`` itself (the served files, the verifier)
    answers it as it does; any other is asked ``GET`` and its body dropped. It was a ``405`` on
    every list, page and resource but those."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD" or _declares_head(scope):
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_ASKED: True}, receive, headers_only)


SHUTDOWN_MESSAGE = (
    "expected an answer before the server stopped, got the server stopping first (an operator's "
    "Ctrl-C, SIGTERM or a deploy, past its grace for requests in flight). The request may have been "
    "carried out or not: once the server is back, send it again with the same Idempotency-Key "
    "header, or look first (GET the list of what it creates)")
"""The ``503 shutting_down`` of a request cut by the server's own shutdown (:class:`ShutdownMiddleware`)."""
SHUTDOWN_PAGE_MESSAGE = (
    "expected an answer before the server stopped, got the server stopping first (a restart by its "
    "operator). What you sent may have been carried out or not: once the console is back, look for it "
    "(Trainings, Backtests) before sending it again")
"""The console's words for the same (a console address)."""


class ShutdownMiddleware:
    """A request still in flight when the server's shutdown grace ends (``typestrict api``'s
    ``GRACEFUL_SHUTDOWN_S``) is cancelled by uvicorn, which answered it with a plain-text ``500
    Internal Server Error``: the API's error shape instead, ``503 shutting_down`` with
    ``Retry-After`` (a console address: the console's plain page), and no traceback in the log.
    The work a thread was doing for it may still finish: the message says to look before
    sending the request again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if started:
                raise  # half an answer is out: uvicorn closes the connection
            with contextlib.suppress(Exception):
                await _send_shutdown(scope, send)
            # Answered: the request's task ends here, as uvicorn's shutdown waits for it to,
            # without "Exception in ASGI application" and a traceback in the server's log.


async def _send_shutdown(scope: Scope, send: Send) -> None:
    from typestrict_pipeline.console.web import is_console_path

    if is_console_path(str(scope.get("path", ""))):
        from typestrict_pipeline.api.server import error_page_bytes

        body, kind = error_page_bytes(503, SHUTDOWN_PAGE_MESSAGE), b"text/html; charset=utf-8"
    else:
        body, kind = json.dumps(error_body("shutting_down", SHUTDOWN_MESSAGE)).encode(), b"application/json"
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"10"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


ROUTE_METHODS = ("DELETE", "GET", "PATCH", "POST", "PUT")
"""The methods the application's routes are declared with (``HEAD`` is :class:`HeadMiddleware`'s)."""

HEAD_ASKED = "typestrict.head"
"""The scope key :class:`HeadMiddleware` sets on the ``GET`` a ``HEAD`` stands for, so that an
answer naming the request's method (the ``405``) names the one the client sent."""


def sent_method(request: Request) -> str:
    """The method the client sent (``HEAD`` where :class:`HeadMiddleware` asked ``GET`` for it)."""
    return "HEAD" if request.scope.get(HEAD_ASKED) else request.method


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the application takes at the request's path, sorted, with
    ``HEAD`` wherever ``GET`` is (:class:`HeadMiddleware`): the ``Allow`` of a ``405`` (RFC 9110
    §15.5.6). Starlette's ``Allow`` named the methods of the first route of that path only
    (``POST`` on ``/v1/trainings``, which ``GET`` lists; ``PUT`` on ``/v1/files/{name}``, which
    ``DELETE`` removes)."""
    from starlette.routing import Match, Mount

    routes = [route for route in getattr(request.app.router, "routes", ()) if not isinstance(route, Mount)]
    methods = {method for method in ROUTE_METHODS  # asked per method: routers nest (FastAPI's own)
               if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def _declares_head(scope: Scope) -> bool:
    """Whether a route of the application takes ``HEAD`` at the request's path itself."""
    from starlette.routing import Match

    app = scope.get("app")
    routes = getattr(getattr(app, "router", None), "routes", ())
    return any(route.matches(scope)[0] is Match.FULL for route in routes)


def too_large_message(limit: int, got: str, setting: str = MAX_BODY_ENV) -> str:
    """The 413's message: the limit, the size, and the server's setting of that limit.

    >>> too_large_message(16 * 1024 * 1024, "20,000,000 bytes (its Content-Length)")
    "expected a request body of at most 16,777,216 bytes (16 MiB), got 20,000,000 bytes (its Content-Length). Send a smaller body (split the upload), or ask the operator to raise the server's TYPESTRICT_MAX_BODY_BYTES"
    """
    mib = f" ({limit / 1024 / 1024:g} MiB)" if limit >= 1024 * 1024 else ""
    return (f"expected a request body of at most {limit:,} bytes{mib}, got {got}. Send a smaller body "
            f"(split the upload), or ask the operator to raise the server's {setting}")


async def _send_413(scope: Scope, send: Send, limit: int, got: str) -> None:
    """The 413: the API's error shape, or for a console address (a form or an upload sent from a
    browser) the console's page saying the same."""
    from typestrict_pipeline.console.web import error_page, is_console_path

    message = too_large_message(limit, got, limit_setting(str(scope.get("method", "")), str(scope.get("path", ""))))
    if is_console_path(str(scope.get("path", ""))):
        page = error_page(Request(scope), 413, "Too large", message)
        content_type, body = page.headers["content-type"].encode(), bytes(page.body)
        extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in page.headers.items()
                 if k not in ("content-type", "content-length")]
    else:
        content_type, body, extra = b"application/json", json.dumps(error_body("payload_too_large", message)).encode(), []
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", content_type), *extra,
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})  # the rest of the body is never read
    await send({"type": "http.response.body", "body": body})


def _error_response(status: int, code: str, message: str,
                    headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=dict(headers or {}))


def one_of(methods: list[str]) -> str:
    """The methods a path takes, as a ``405`` says them.

    >>> one_of(["GET", "HEAD", "POST"]), one_of(["POST"]), one_of([])
    ('one of GET, HEAD, POST', 'POST', 'another method')
    """
    if not methods:
        return "another method"
    return methods[0] if len(methods) == 1 else f"one of {', '.join(methods)}"


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(TypeStrictError)
    async def _ours(request: Request, exc: TypeStrictError) -> JSONResponse:
        status, code = status_for(exc)
        headers = exc.headers if isinstance(exc, ApiError) else None
        return _error_response(status, code, str(exc), headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(422, "invalid_input", validation_message(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        from typestrict_pipeline.console.web import is_console_path, not_a_page

        headers = dict(exc.headers or {})
        allowed: list[str] = []
        if exc.status_code == 405:  # every method of the path, not the first route's only
            allowed = allowed_methods(request) or [m.strip() for m in headers.get("Allow", "").split(",") if m.strip()]
            if allowed:
                headers["Allow"] = ", ".join(allowed)
        if exc.status_code in (404, 405) and is_console_path(request.url.path):  # a person's browser
            return not_a_page(request, exc.status_code, headers)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = {
            404: f"expected a route of the API, got {request.url.path[:200]!r}. See /v1/openapi.json",
            405: f"expected {one_of(allowed)} for {request.url.path[:200]!r}, got {sent_method(request)[:20]}. "
                 "See /v1/openapi.json",
        }.get(exc.status_code, str(exc.detail))
        return _error_response(exc.status_code, code, message, headers)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # The body ended with the connection: the client left, or the server refused the request
        # and closed it (a 413 or 408 of BoundedH11Protocol or BodyLimitMiddleware). No one reads
        # this answer, and it is no bug: nothing to log.
        return _error_response(400, "request_incomplete",
                               "expected the whole request body, got the connection closed before its end. "
                               "Send the request again")

    @app.exception_handler(SQLAlchemyError)
    async def _store(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        from typestrict_pipeline.store import store_failure

        log.warning("store error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        failure = store_failure(exc)
        if failure.transient:  # busy or unreachable: the same request can succeed later
            return _error_response(503, "store_unavailable", failure.message, {"Retry-After": "1"})
        if failure.kind == "read_only":
            return _error_response(503, "store_read_only", failure.message)
        if failure.kind == "value":  # a value the database refused: the request must change
            return _error_response(422, "invalid_input", failure.message)
        log.error("store refused %s %s", request.method, request.url.path, exc_info=exc)
        return _error_response(500, "internal", failure.message)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error_response(500, "internal",
                               "expected to answer, got an internal error. It is logged on the "
                               "server; retry, and tell the operator if it persists")


async def _sweep_uploads_hourly(home: Path) -> None:
    """Remove the stale staged uploads of every workspace under ``home`` now and every
    :data:`~typestrict_pipeline.api.trainings.STALE_SWEEP_S` until cancelled (the server's
    shutdown), in a worker thread (:func:`~typestrict_pipeline.api.trainings.sweep_stale_uploads`).
    A sweep that fails is logged and tried again at the next hour; it never stops the server."""
    from starlette.concurrency import run_in_threadpool

    from typestrict_pipeline.api.trainings import STALE_SWEEP_S, sweep_stale_uploads

    while True:
        try:
            removed = await run_in_threadpool(sweep_stale_uploads, home)
        except Exception:  # a bug: logged, the server keeps answering
            logging.getLogger(__name__).exception("sweeping the stale staged uploads failed")
        else:
            if removed:
                logging.getLogger(__name__).info("removed %d staged upload(s) older than a day", removed)
        await asyncio.sleep(STALE_SWEEP_S)


def create_app(
    store_url: str,
    home: str | Path,
    *,
    jev_source: Mapping[str, Any] | None,
    max_body_bytes: int | None = None,
    max_upload_bytes: int | None = None,
    dagster_home: str | Path | None = None,
    rate_limit: RateLimit | None = DEFAULT_RATE_LIMIT,
    clock: Callable[[], float] = time.monotonic,
    warm_runs: bool = False,
    storage_quota: StorageQuota | None = None,
    public_url: str | None = None,
) -> FastAPI:
    """The customer API on the store at ``store_url`` and the files under ``home``.

    Args:
        store_url: the domain store (SQLite or PostgreSQL); its schema is upgraded on start.
        home: ``TYPESTRICT_HOME`` (trainings, audits, workspaces' files).
        jev_source: the manifest ``predictions.jev`` object used for trainings created here
            (required: a server without Jev does not start, :func:`~typestrict_pipeline.api.jev.missing_jev_error`).
        max_body_bytes: largest JSON body (default :data:`MAX_BODY_ENV`, else 16 MiB).
        max_upload_bytes: largest uploaded file (``PUT /v1/files/{name}``, model files; default
            :data:`MAX_UPLOAD_ENV`, else 256 MiB).
        dagster_home: the Dagster instance studies and backtests are launched on (default
            ``DAGSTER_HOME``, else ``<home>/dagster_home``: :mod:`typestrict_pipeline.api.runs`).
        rate_limit: every key's token bucket (None: no limit); see
            :mod:`typestrict_pipeline.api.ratelimit`.
        clock: the buckets' clock (seconds, monotonic).
        warm_runs: load the Dagster instance and the code location in a thread as the server
            starts (``typestrict api`` does), so the first launched study does not wait for it.
        storage_quota: what each workspace may keep (:mod:`typestrict_pipeline.api.quota`);
            None: ``TYPESTRICT_WORKSPACE_MAX_BYTES`` and ``TYPESTRICT_WORKSPACE_MAX_FILES``, else
            the defaults.
        public_url: the address customers reach the server at (``https://api.example.com``),
            which the result page's links and ``curl`` commands name; None:
            ``TYPESTRICT_PUBLIC_URL``, else none (the page names the request's address only when
            it is the one the server listens on, never a ``Host`` header alone).

    Raises:
        InputError: ``public_url`` is not an http(s) base URL.
    """
    from typestrict_pipeline.api.routes import (
        backtests,
        datasets,
        files,
        models,
        notifications,
        schedules,
        studies,
        trainings,
        verifier,
        workspaces,
    )

    if jev_source is None:
        raise missing_jev_error(Path(home).resolve())
    resolved = Path(home).resolve()
    check_bound_settings()
    body_from_env, upload_from_env = body_limits_from_env()
    max_body_bytes = body_from_env if max_body_bytes is None else max_body_bytes
    max_upload_bytes = upload_from_env if max_upload_bytes is None else max_upload_bytes
    settings = ApiSettings(store_url=store_url, home=resolved, jev_source=jev_source,
                           max_body_bytes=max_body_bytes, max_upload_bytes=max_upload_bytes,
                           dagster_home=Path(dagster_home).resolve() if dagster_home else dagster_home_for(resolved),
                           rate_limit=rate_limit, warm_runs=warm_runs,
                           storage_quota=storage_quota if storage_quota is not None else StorageQuota.from_env(),
                           public_url=public_url_setting(public_url))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = open_store(settings.store_url)
        assert settings.dagster_home is not None
        runs = DagsterRuns(settings.dagster_home, settings.store_url)
        if settings.warm_runs:
            threading.Thread(target=runs.warm, name="warm-dagster-runs", daemon=True).start()
        limiter = None if settings.rate_limit is None else TokenBuckets(settings.rate_limit, clock=clock)
        trainings = TrainingStore(settings.home, engine, jev_source, max_dataset_bytes=settings.max_upload_bytes,
                                  quota=settings.storage_quota)
        app.state.ctx = ApiContext(settings, engine, trainings, runs, KeyVerifier(engine, clock=clock), limiter)
        sweeping = asyncio.create_task(_sweep_uploads_hourly(settings.home), name="sweep-stale-uploads")
        try:
            yield
        finally:
            sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeping
            runs.close()
            engine.dispose()

    app = FastAPI(
        title="TypeStrict API", version="1", lifespan=lifespan,
        openapi_url="/v1/openapi.json", docs_url="/v1/docs", redoc_url=None,
        # A path with a trailing '/' (or an id of '%2F') is not a route: its 404 says so. Starlette
        # would answer a 307 to an absolute URL built from the request's Host header, with no body.
        redirect_slashes=False,
        description="Trainings, splits, verdicts and audits against Jev; credits and usage; studies. "
                    "Authenticate with `Authorization: Bearer <key>` (typestrict api-key create).",
    )
    _install_handlers(app)
    for module in (trainings, models, files, workspaces, backtests, datasets, studies, schedules,
                   notifications):
        app.include_router(module.router, prefix="/v1")
    app.include_router(verifier.router)
    from typestrict_pipeline.console import install as install_console

    install_console(app)
    app.add_middleware(models.KnownAuditMiddleware)  # innermost: inside both limits
    app.add_middleware(BodyLimitMiddleware, max_body=max_body_bytes, max_upload=max_upload_bytes)
    app.add_middleware(RateLimitMiddleware)  # a refused request costs nothing more
    app.add_middleware(HeadMiddleware)  # a HEAD is the GET it stands for, everywhere
    app.add_middleware(ShutdownMiddleware)  # outermost: a request the shutdown cut is answered in our words
    return app


def app_from_env() -> FastAPI:
    """The app configured from the environment, for ``uvicorn --factory`` and ``--workers N``.

    ``TYPESTRICT_STORE_URL`` (else the SQLite file under ``TYPESTRICT_HOME``), ``TYPESTRICT_HOME``,
    ``TYPESTRICT_API_JEV_SOURCE`` (the manifest ``predictions.jev`` object, as JSON) and
    ``TYPESTRICT_API_RATE_LIMIT`` (``RATE/BURST``, e.g. ``20/60``; ``off`` for none).
    """
    import os

    from typestrict_pipeline.store import default_store_url, typestrict_home

    raw = os.environ.get(JEV_SOURCE_ENV)
    jev = parse_jev_source(raw, what=JEV_SOURCE_ENV) if raw else None
    return create_app(default_store_url(), typestrict_home(), jev_source=jev,
                      rate_limit=rate_limit_from_text(os.environ.get(RATE_LIMIT_ENV, "")), warm_runs=True)


RATE_LIMIT_ENV = "TYPESTRICT_API_RATE_LIMIT"
PUBLIC_URL_ENV = "TYPESTRICT_PUBLIC_URL"


def public_url_setting(given: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The server's public base URL: ``given``, else :data:`PUBLIC_URL_ENV`, else None; checked
    (an http(s) URL with a host), without its trailing ``/``.

    >>> public_url_setting("https://api.example.com/", {}), public_url_setting(None, {})
    ('https://api.example.com', None)
    >>> public_url_setting(None, {"TYPESTRICT_PUBLIC_URL": "api.example.com"})
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected TYPESTRICT_PUBLIC_URL as an http:// or https:// base URL with a host (and a port from 1 to 65535, if any), got 'api.example.com'. Write the address customers reach the API at, e.g. https://api.example.com.
    """
    import os

    from typestrict_pipeline import values

    value = given if given is not None else (os.environ if environ is None else environ).get(PUBLIC_URL_ENV)
    if not value:
        return None
    checked = values.base_url(value, PUBLIC_URL_ENV,
                              fix="write the address customers reach the API at, e.g. https://api.example.com")
    return checked.rstrip("/")


def rate_limit_from_text(text: str) -> RateLimit | None:
    """``RATE/BURST`` (``20/60``) as a :class:`RateLimit`; ``off`` as None; empty as the default.

    >>> rate_limit_from_text("5/10"), rate_limit_from_text("off"), rate_limit_from_text("") == RateLimit()
    (RateLimit(rate_per_s=5.0, burst=10), None, True)
    """
    if not text:
        return RateLimit()
    if text == "off":
        return None
    rate, _, burst = text.partition("/")
    return RateLimit(rate_per_s=float(rate), burst=int(burst))
