"""Dependencies every route shares: the context (store, trainings) and the caller's workspace."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from typestrict_pipeline.api.app import ApiContext
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.keys import KeyState, KeyVerifier
from typestrict_pipeline.api.ratelimit import RATE_CHECKED

_bearer = HTTPBearer(auto_error=False, description="An API key: `typestrict api-key create WORKSPACE`")


def get_ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


MAKE_ONE = "An operator creates one with `typestrict api-key create WORKSPACE`"


def _scheme_shown(scheme: str) -> str:
    """A refused scheme in words, never echoing what may be a key.

    >>> _scheme_shown("Basic"), _scheme_shown("Bearer\ttsk_1"), _scheme_shown("tsk_1")
    ("the 'Basic' scheme", "'Bearer' followed by something other than one space", 'no scheme (a value that is not a word)')
    """
    if scheme.isascii() and scheme.isalnum():
        return f"the {scheme[:20]!r} scheme"
    if scheme[:6].lower() == "bearer":
        return "'Bearer' followed by something other than one space"
    return "no scheme (a value that is not a word)"


def auth_failure(keys: KeyVerifier, header: str | None) -> tuple[tuple[str, str] | None, ApiError | None]:
    """``(workspace, key id)`` of an ``Authorization`` header, or the 401 that says what is wrong with it:
    no header, another scheme, no key after ``Bearer``, a value that is not a key, a key this
    server does not know (unknown id and wrong secret are one answer: telling them apart would
    tell a caller which ids exist), or a revoked key (said only to the holder of the whole key).
    Nothing sent is ever echoed: only its scheme, or its length."""
    if header is None:
        return None, _unauthorized(
            "expected an 'Authorization: Bearer <API key>' header, got no Authorization header. "
            f"Send your workspace's key in it. {MAKE_ONE}")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None, _unauthorized(
            f"expected the Bearer scheme ('Authorization: Bearer tsk_…'), got {_scheme_shown(scheme)}. "
            "Send the key as a Bearer token")
    key = value.strip()
    if not key:
        return None, _unauthorized("expected an API key after 'Bearer ', got nothing. Send the whole key")
    checked = keys.check(key)
    if checked.state is KeyState.VALID:
        assert checked.workspace_id is not None and checked.key_id is not None
        return (checked.workspace_id, checked.key_id), None
    if checked.state is KeyState.MALFORMED:
        return None, _unauthorized(
            f"expected an API key of the form tsk_<16 hex>_<43 characters>, got a value of {len(key)} "
            "characters that is not one. Send the whole key, as it was printed when it was made")
    if checked.state is KeyState.REVOKED:
        when = checked.revoked_at.date().isoformat() if checked.revoked_at else "earlier"
        return None, _unauthorized(
            f"expected an unrevoked API key, got a key revoked on {when}. Use another key of the "
            f"workspace. {MAKE_ONE}")
    return None, _unauthorized(
        "expected an API key this server issued, got one it does not know (mistyped, or made "
        f"on another store). Check the key and the server. {MAKE_ONE}")


WORKSPACE_CHECKED = "typestrict.workspace"
"""Scope key set by :func:`authenticate`: the request's workspace, its key checked and its token taken."""


def authenticate(request: Request) -> str:
    """:func:`get_workspace` run before the route reads its body (a JSON route's edge,
    :class:`~typestrict_pipeline.api.edge.StrictJsonRoute`): the workspace is kept on the request,
    so the route's own dependency neither checks the key again nor takes a second token.

    Raises:
        ApiError: the 401 or the 429 of :func:`get_workspace`.
    """
    workspace = get_workspace(request, None)
    request.scope.setdefault("state", {})[WORKSPACE_CHECKED] = workspace
    return workspace


def get_workspace(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The workspace of the request's API key; a 401 saying what is wrong otherwise
    (:func:`auth_failure`). A browser without the header may use the console's session cookie
    for reads. Every request then takes a token from its key's bucket (a refused one from its
    address's): a 429 when there is none (:mod:`typestrict_pipeline.api.ratelimit`). A request
    checked by :func:`authenticate` already is not checked twice. The header comes once: two are
    a 401, whatever they hold (the fast paths that read it before, in
    :class:`~typestrict_pipeline.api.ratelimit.RateLimitMiddleware` and the known audit's, leave
    such a request to this one)."""
    checked = request.scope.get("state", {}).get(WORKSPACE_CHECKED)
    if isinstance(checked, str):
        return checked
    ctx = get_ctx(request)
    sent = request.headers.getlist("authorization")
    if len(sent) > 1:  # two keys (or one twice): which one would be the caller's is not ours to pick
        _limit(ctx, f"addr:{request.client.host if request.client else '?'}")
        raise _unauthorized(
            f"expected one Authorization header, got {len(sent)}. Send the key once, in one "
            "'Authorization: Bearer <API key>' header")
    header = sent[0] if sent else None
    if header is None:  # a browser: the console's cookie, reads only
        from typestrict_pipeline.console.web import cookie_workspace

        found = cookie_workspace(request)
        if found is not None:
            _limit(ctx, f"workspace:{found}")
            return found
    who, failure = auth_failure(ctx.keys, header)
    if failure is not None:
        _limit(ctx, f"addr:{request.client.host if request.client else '?'}")
        raise failure
    assert who is not None
    if not request.scope.get("state", {}).get(RATE_CHECKED):  # else the middleware took its token
        _limit(ctx, f"key:{who[1]}")
    return who[0]


def _limit(ctx: ApiContext, bucket: str) -> None:
    if ctx.limiter is not None:
        ctx.limiter.check(bucket)


Ctx = Annotated[ApiContext, Depends(get_ctx)]
Workspace = Annotated[str, Depends(get_workspace)]
