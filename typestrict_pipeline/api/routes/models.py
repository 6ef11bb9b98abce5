"""``/v1/models``: the verdict, the audit (any time), the files (while retained), the result page."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path as FsPath
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from starlette.types import ASGIApp, Receive, Scope, Send

from typestrict_pipeline.api.app import ApiContext
from typestrict_pipeline.api.conditional import (
    PRIVATE,
    etag_matches,
    if_none_match,
    kept_bytes,
    serve_file,
)
from typestrict_pipeline.api.deps import Ctx, Workspace, _bearer, get_ctx, get_workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.keys import KeyState
from typestrict_pipeline.api.page import METRICS, render_result_page
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.pictures import result_pictures
from typestrict_pipeline.api.quota import stored_files
from typestrict_pipeline.api.ratelimit import KEY_CHECKED, RATE_CHECKED
from typestrict_pipeline.api.routes.files import FileName
from typestrict_pipeline.api.schemas import (
    DecisionVerdict,
    ErrorBody,
    FileOut,
    FilesOut,
    GroupingWarningOut,
    MetricPair,
    VerdictOut,
)
from typestrict_pipeline.credits import ModelState, audit_bytes
from typestrict_pipeline.credits.models import ModelInfo
from typestrict_pipeline.errors import InputError, NotFoundError
from typestrict_pipeline.files import write_atomic
from typestrict_pipeline.refund.dataset import unlabeled_from_split
from typestrict_pipeline.refund.grouping import resampling_lines_from_audit, resampling_sentence
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.reruns.timeline import format_when

router = api_router(tags=["models"], responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})

# The page runs no script and loads nothing: its pictures are data: URIs, its style inline.
PAGE_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; connect-src 'self'"
ModelId = PathId


_CACHE_BYTES = 64 * 1024 * 1024
_RAW: OrderedDict[str, bytes] = OrderedDict()
_PARSED: OrderedDict[str, dict[str, Any]] = OrderedDict()
_LOCK = threading.Lock()


def _audit_bytes(ctx: Ctx, info: ModelInfo) -> bytes:
    """The stored audit's exact bytes, cached by their SHA-256 (at most 64 MiB in all).

    A stored audit never changes (the first one recorded is final), so its digest names it; the
    bytes are checked against the digest before they are cached.
    """
    sha = info.audit_sha256
    with _LOCK:
        if sha is not None and sha in _RAW:
            _RAW.move_to_end(sha)
            return _RAW[sha]
    data = audit_bytes(ctx.engine, info.model_id)
    if sha is not None and hashlib.sha256(data).hexdigest() == sha and len(data) <= _CACHE_BYTES // 4:
        with _LOCK:
            _RAW[sha] = data
            while sum(len(v) for v in _RAW.values()) > _CACHE_BYTES:
                _RAW.popitem(last=False)
    return data


def _audit(ctx: Ctx, info: ModelInfo) -> dict[str, Any] | None:
    """The parsed audit (cached like its bytes, at most 64 parsed audits)."""
    sha = info.audit_sha256
    if sha is None:
        return None
    with _LOCK:
        if sha in _PARSED:
            _PARSED.move_to_end(sha)
            return _PARSED[sha]
    doc: dict[str, Any] = json.loads(_audit_bytes(ctx, info))
    with _LOCK:
        _PARSED[sha] = doc
        while len(_PARSED) > 64:
            _PARSED.popitem(last=False)
    return doc


def training_grouping(ctx: Ctx, info: ModelInfo) -> tuple[str | None, dict[str, Any] | None]:
    """The training's declared group column and the look for undeclared groups made at its
    creation (None when not looked at); ``(None, None)`` when its manifest cannot be read."""
    try:
        manifest = ctx.trainings.manifest(info.workspace_id, info.model_id)
        return manifest.dataset.columns.group, ctx.trainings.grouping(info.workspace_id, info.model_id)
    except (NotFoundError, InputError, OSError):  # a removed training folder: the audit still speaks
        return None, None


def _decision(d: dict[str, Any], split: Any = None, group: str | None = None) -> DecisionVerdict:
    report = d["report"]
    boot = report.get("bootstrap") or {}
    unit = str(boot.get("unit") or "example")
    n_units = boot.get("n_units", report.get("n"))
    n_unlabeled, unlabeled = unlabeled_from_split(split).get(d["name"], (None, None))
    model, jev = report["metrics"]["model"], report["metrics"]["jev"]
    return DecisionVerdict(
        name=d["name"], n=report["n"], beats=report["beats"], gain=report["gain"],
        q05=report["bootstrap"]["q05"], gain_is_real=report["gain_is_real"],
        nothing_collapses=report["nothing_collapses"],
        metrics=[MetricPair(metric=m, model=model.get(m), jev=jev.get(m),
                            delta=report["deltas"].get(m), margin=report["margins"].get(m, "n/a"))
                 for m in METRICS],
        n_unlabeled=n_unlabeled, unlabeled=unlabeled,
        unit=unit, n_units=n_units, resampled=resampling_sentence(unit, n_units, group),
    )


def _files_note(info: ModelInfo) -> str:
    if not info.delivered and info.verdict is Verdict.FAILED:
        return "Nothing to download: the training ended without a model to deliver, so its credit came back."
    if not info.delivered:
        return ("Nothing to download: the model did not beat Jev and was not kept, so its credit "
                "came back.")
    if info.state is ModelState.EXPIRED:
        return f"Its files expired on {format_when(info.expires_at)}; the audit stays."
    return (f"Its files can be downloaded until {format_when(info.expires_at)} "
            f"(kept {(info.expires_at - info.settled_at).days} days).")


@router.get("/models", response_model=list[VerdictOut])
def list_models(ctx: Ctx, workspace: Workspace, page: ListPage) -> list[VerdictOut]:
    """The workspace's models with their verdicts, oldest settlement first, a page at a time
    (``limit``, ``offset``; ``X-Total-Count`` and ``Link``)."""
    from typestrict_pipeline.credits import list_models as core_list

    models = core_list(ctx.engine, workspace)
    return [_verdict(ctx, m) for m in models[page.of(len(models))]]


def _verdict(ctx: Ctx, info: ModelInfo) -> VerdictOut:
    doc = _audit(ctx, info) or {}
    overall = doc.get("overall", {})
    group, scan = training_grouping(ctx, info)
    return VerdictOut(
        model_id=info.model_id, workspace_id=info.workspace_id, verdict=info.verdict.value,
        refunds_credit=info.verdict.refunds_credit,
        settling_decision=overall.get("settling_decision"), won=overall.get("won", 0),
        needed=overall.get("needed", 0), failure_reason=overall.get("failure_reason"),
        keep_if_loses=info.keep_if_loses, delivered=info.delivered, files_state=info.state.value,
        files_expire_at=info.expires_at.isoformat(), audit_sha256=info.audit_sha256,
        decisions=[_decision(d, doc.get("split"), group) for d in doc.get("decisions", [])],
        trained_on=(doc.get("trained_on") or {}).get("status"),
        trained_on_n_ids=(doc.get("trained_on") or {}).get("n_ids"),
        group=group, resampling_unit=resampling_lines_from_audit(doc, group),
        grouping_warnings=None if scan is None else [
            GroupingWarningOut(**w) for w in scan.get("warnings") or []],
    )


@router.get("/models/{model_id}", response_model=VerdictOut)
def get_verdict(model_id: ModelId, ctx: Ctx, workspace: Workspace) -> VerdictOut:
    """The verdict, the decision that settled it, and every decision's metrics beside Jev's."""
    return _verdict(ctx, ctx.trainings.model(workspace, model_id))


def _audit_file(ctx: Ctx, info: ModelInfo, sha: str) -> FsPath:
    """The audit as a file named by its SHA-256 under ``<home>/cache/audits`` (written once, from
    the store's bytes checked against the digest), so it is streamed from disk."""
    path = ctx.settings.home / "cache" / "audits" / f"{sha}.json"
    if not path.is_file():
        data = _audit_bytes(ctx, info)
        if hashlib.sha256(data).hexdigest() != sha:
            raise ApiError(500, "audit_mismatch", "expected the stored audit to match its SHA-256, "
                           "got other bytes. Report this: the audit was not served")
        write_atomic(path, data)
    return path


@router.head("/models/{model_id}/audit", include_in_schema=False)
@router.get("/models/{model_id}/audit", response_class=Response,
            responses={200: {"content": {"application/json": {}}},
                       304: {"description": "Not modified: the audit named by If-None-Match"}})
async def get_audit(
    model_id: ModelId,
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Response:
    """The audit file, byte-identical to the one settled (also after the files expired),
    streamed from disk. Its SHA-256, recorded at settlement, is in the `X-Audit-SHA256` header
    and is its ETag (a settled audit never changes): send it back in `If-None-Match` and an
    unchanged audit is a 304 with no body. Verify it with
    `python3 verify_audit.py --expect-sha256 SHA256 audit.json`. `HEAD` answers the same
    headers (ETag, length) with no body."""
    # A key checked in the last seconds and an audit served before: nothing to read from the
    # store, no trip to the thread pool. Otherwise the key, the model record and the file in one
    # trip (the store is read, never written); then the file is streamed by the event loop.
    known = _known_audit(request, model_id)
    if known is not None:
        sha, path = known
    else:
        info, found = await run_in_threadpool(_audit_lookup, request, credentials, model_id)
        if info.audit_sha256 is None or found is None:  # no audit: the store's message (a failed training)
            data = await run_in_threadpool(_audit_bytes, get_ctx(request), info)
            return Response(data, media_type="application/json", headers={
                "Content-Disposition": f'attachment; filename="{info.model_id}.audit.json"',
                "X-Audit-SHA256": ""})
        sha, path = info.audit_sha256, found
    try:
        stat = os.stat(path)  # a local file's metadata: microseconds, on the event loop
    except FileNotFoundError:  # the cache folder was emptied: write it again from the store
        _forget_audit(get_ctx(request), model_id)
        info, found = await run_in_threadpool(_audit_lookup, request, credentials, model_id)
        assert found is not None
        path, stat = found, os.stat(found)
    return _audit_response(model_id, sha, path, stat, if_none_match(request.headers))


def _audit_response(model_id: str, sha: str, path: FsPath, stat: os.stat_result,
                    if_none_match: str | None) -> Response:
    """The audit's answer: the file with its SHA-256 as ETag, or a 304 (:func:`serve_file`)."""
    return serve_file(path, if_none_match=if_none_match, sha256=sha, stat=stat,
                      media_type="application/json", cache_control=PRIVATE, headers={
                          "Content-Disposition": f'attachment; filename="{model_id}.audit.json"',
                          "X-Audit-SHA256": sha})


_MAX_KNOWN = 10_000
_KNOWN: OrderedDict[tuple[str, str, str], tuple[str, str, FsPath]] = OrderedDict()
"""(store URL, home, model id) -> (its workspace, its audit's SHA-256, the audit's file), for models
whose audit was served (by an app of that store and home: a process may hold several apps). A model
record is never deleted and a settled audit never changes, so neither goes stale."""


def _known_key(ctx: Ctx, model_id: str) -> tuple[str, str, str]:
    return ctx.settings.store_url, str(ctx.settings.home), model_id


def _known_audit(request: Request, model_id: str) -> tuple[str, FsPath] | None:
    """``(sha256, file)`` of an audit served before, when the request's key was verified in the
    last seconds and its workspace owns the model (its token is taken, as the dependency would);
    None for anything else (the slow path then answers, with the same errors as before)."""
    if len(request.headers.getlist("authorization")) != 1:  # none, or two: the route's 401
        return None
    ctx = get_ctx(request)
    with _LOCK:
        found = _KNOWN.get(_known_key(ctx, model_id))
    if found is None:
        return None
    scheme, _, value = (request.headers.get("authorization") or "").strip().partition(" ")
    checked = ctx.keys.check_known(value.strip()) if scheme.lower() == "bearer" else None
    if checked is None or checked.state is not KeyState.VALID or checked.workspace_id != found[0]:
        return None
    if ctx.limiter is not None and not request.scope.get("state", {}).get(RATE_CHECKED):
        ctx.limiter.check(f"key:{checked.key_id}")
    return found[1], found[2]


def _forget_audit(ctx: Ctx, model_id: str) -> None:
    with _LOCK:
        _KNOWN.pop(_known_key(ctx, model_id), None)
        _PREBUILT.pop(_known_key(ctx, model_id), None)


_AUDIT_PATH = re.compile(r"/v1/models/([^/]+)/audit")
RawHeaders = list[tuple[bytes, bytes]]
_PREBUILT: OrderedDict[tuple[str, str, str], tuple[tuple[int, int, str], RawHeaders, RawHeaders]] = OrderedDict()
"""(store URL, home, model id) -> ((size, mtime_ns, SHA-256) of the audit's file, the headers of
its 200, those of its 304): built once by :func:`_audit_response`, the route's own function, so
the two answers are the route's to the byte."""


class KnownAuditMiddleware:
    """``GET /v1/models/{id}/audit`` of an audit served before, by a key verified in the last
    seconds, answered before routing: the same checks as the route, in the same order, and the
    same bytes and headers, without FastAPI's routing, dependencies and response objects.

    It answers only when the route would answer 200 or 304 from memory: the key is valid
    (:meth:`KeyVerifier.check_known`: its digest compared in constant time with what the store
    said in the last ``ttl_s`` seconds, so a revoked key is refused within that bound, as
    everywhere), its workspace owns the model (the id maps to its workspace once the route
    served it), its token was taken (by :class:`RateLimitMiddleware`; with a limit and no token
    taken there, the route answers), no ``Range`` and no query, the file unchanged since (size, mtime, and the
    kept bytes checked against the SHA-256 when read). Anything else, errors included, is the
    route's. Added first, so it runs inside the body limit and the rate limit.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            match = _AUDIT_PATH.fullmatch(scope["path"])
            answer = None if match is None else _known_answer(scope, match.group(1))
            if answer is not None:
                status, headers, body = answer
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
        await self.app(scope, receive, send)


def _known_answer(scope: Scope, model_id: str) -> tuple[int, RawHeaders, bytes] | None:
    """(status, headers, body) of the audit route's answer when :class:`KnownAuditMiddleware`
    may give it (see there), else None."""
    ctx: ApiContext | None = getattr(getattr(scope.get("app"), "state", None), "ctx", None)
    if ctx is None:
        return None
    authorization = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            if authorization is not None:
                return None  # two: the route's 401 (api.deps.get_workspace)
            authorization = value
        elif name == b"range":
            return None
    if authorization is None or scope.get("query_string"):  # a query: the route's to check
        return None
    key = _known_key(ctx, model_id)
    with _LOCK:
        found = _KNOWN.get(key)
        prebuilt = _PREBUILT.get(key)
    if found is None:
        return None
    state = scope.get("state") or {}
    checked = state.get(KEY_CHECKED)
    if checked is None:
        if ctx.limiter is not None:
            return None  # the token was not taken: the route takes it (or answers 401 or 429)
        scheme, _, value = authorization.decode("latin-1").strip().partition(" ")
        checked = ctx.keys.check_known(value.strip()) if scheme.lower() == "bearer" else None
    if checked is None or checked.state is not KeyState.VALID or checked.workspace_id != found[0]:
        return None
    _, sha, path = found
    try:
        stat = os.stat(path)  # a local file's metadata: microseconds
    except OSError:
        return None
    identity = (stat.st_size, stat.st_mtime_ns, sha)
    if prebuilt is None or prebuilt[0] != identity:
        etag = f'"{sha}"'
        prebuilt = (identity, list(_audit_response(model_id, sha, path, stat, None).raw_headers),
                    list(_audit_response(model_id, sha, path, stat, etag).raw_headers))
        with _LOCK:
            _PREBUILT[key] = prebuilt
            _PREBUILT.move_to_end(key)
            while len(_PREBUILT) > _MAX_KNOWN:
                _PREBUILT.popitem(last=False)
    if etag_matches(if_none_match(scope["headers"]), f'"{sha}"'):  # every line of it
        return 304, prebuilt[2], b""
    body = kept_bytes(path, stat, sha)
    if body is None:
        return None  # not in memory (yet, or any more): the route reads it off the event loop
    return 200, prebuilt[1], body


def _audit_lookup(
    request: Request, credentials: HTTPAuthorizationCredentials | None, model_id: str
) -> tuple[ModelInfo, FsPath | None]:
    """The caller's workspace (401 otherwise), its model record, and the audit's file."""
    workspace = get_workspace(request, credentials)
    ctx = get_ctx(request)
    info = ctx.trainings.model(workspace, model_id)
    sha = info.audit_sha256
    if sha is None:
        return info, None
    path = _audit_file(ctx, info, sha)
    known = _known_key(ctx, info.model_id)
    with _LOCK:
        _KNOWN[known] = (info.workspace_id, sha, path)
        _KNOWN.move_to_end(known)
        while len(_KNOWN) > _MAX_KNOWN:
            _KNOWN.popitem(last=False)
    return info, path


def _retained(info: ModelInfo) -> FsPath:
    if not info.delivered:
        raise ApiError(404, "not_delivered",
                       f"expected a delivered model for {info.model_id!r}, got verdict "
                       f"{info.verdict.value!r}: nothing to download, the credit came back. "
                       "Start a new training (or use keep_if_loses to keep a model that loses)")
    if info.state is ModelState.EXPIRED:
        raise ApiError(410, "gone",
                       f"expected model files for {info.model_id!r}, got none: they expired on "
                       f"{info.expires_at.isoformat()}. Its audit is still at "
                       f"/v1/models/{info.model_id}/audit",
                       headers={"X-Expired-At": info.expires_at.isoformat()})
    return info.files_path


@router.get("/models/{model_id}/files", response_model=FilesOut,
            responses={410: {"model": ErrorBody}})
def list_model_files(model_id: ModelId, ctx: Ctx, workspace: Workspace) -> FilesOut:
    """The model's files while retained; 410 Gone with the expiry date afterwards."""
    info = ctx.trainings.model(workspace, model_id)
    root = _retained(info)
    files = stored_files(root)  # a file expired or removed while listed is left out
    return FilesOut(model_id=info.model_id, expires_at=info.expires_at.isoformat(),
                    files=[FileOut(name=n, size=s) for n, s in files])


@router.head("/models/{model_id}/files/{name}", include_in_schema=False)
@router.get("/models/{model_id}/files/{name}", response_class=FileResponse,
            responses={410: {"model": ErrorBody}, 200: {"content": {"application/octet-stream": {}}},
                       304: {"description": "Not modified: the file named by If-None-Match"}})
def get_model_file(model_id: ModelId, name: FileName, request: Request, ctx: Ctx,
                   workspace: Workspace) -> Response:
    """One file of the model, while retained, streamed from disk. Its ETag is the quoted SHA-256
    of its bytes: send it back in `If-None-Match` and an unchanged file is a 304 with no body.
    `HEAD` answers the same headers with no body."""
    info = ctx.trainings.model(workspace, model_id)
    root = _retained(info).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise ApiError(404, "not_found", f"expected a file {name!r} of model {model_id!r}, got none. "
                       f"List them with /v1/models/{model_id}/files")
    return serve_file(path, if_none_match=if_none_match(request.headers),
                      media_type="application/octet-stream", cache_control=PRIVATE, filename=name)


COMMAND_BASE_VARIABLE = "$TYPESTRICT_API_URL"
"""What the result page's ``curl`` commands start with when the server's address is not known."""


def page_base_url(request: Request, public_url: str | None) -> str | None:
    """The address the result page's links and commands name: the server's configured public URL
    (``TYPESTRICT_PUBLIC_URL``); else the request's own, only when its ``Host`` is the address the
    server is listening on (a local or direct server, the demo's); else None (the page then
    says ``$TYPESTRICT_API_URL``). Never a ``Host`` header alone: a request saying
    ``Host: evil.example`` must not put that host in a page's commands."""
    if public_url:
        return public_url
    server = request.scope.get("server")
    if not server or server[1] is None:
        return None
    host, port = str(server[0]), int(server[1])
    host = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}.get(request.url.scheme)
    listening = {f"{host}:{port}".lower()} | ({host.lower()} if port == default else set())
    said = request.headers.get("host", "").lower()
    return str(request.base_url).rstrip("/") if said in listening else None


@router.get("/models/{model_id}/page", response_class=HTMLResponse,
            responses={200: {"content": {"text/html": {}}}})
def get_result_page(model_id: ModelId, request: Request, ctx: Ctx, workspace: Workspace) -> HTMLResponse:
    """The result page: verdict, settling decision, metrics beside Jev, pictures, audit link."""
    info = ctx.trainings.model(workspace, model_id)
    doc = _audit(ctx, info) or {"decisions": [], "overall": {"verdict": info.verdict.value}}
    base = page_base_url(request, ctx.settings.public_url)
    group, scan = training_grouping(ctx, info)
    return HTMLResponse(
        render_result_page(doc, model_id=info.model_id, files_note=_files_note(info),
                           pictures=result_pictures(doc), base_url=base or "",
                           command_base=base or COMMAND_BASE_VARIABLE,
                           audit_sha256=info.audit_sha256, group_column=group,
                           grouping_warnings=[str(w.get("message")) for w in (scan or {}).get("warnings") or []]),
        headers={"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff"},
    )
