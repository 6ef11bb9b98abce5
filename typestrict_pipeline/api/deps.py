"""Dependencies every route shares: the context (store, trainings) and the caller's workspace."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from typestrict_pipeline.api.app import ApiContext
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.keys import workspace_for_key

_bearer = HTTPBearer(auto_error=False, description="An API key: `typestrict api-key create WORKSPACE`")


def get_ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


def get_workspace(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The workspace of the request's API key; 401 (one message, whatever was wrong) otherwise."""
    ctx = get_ctx(request)
    workspace = None
    if credentials is not None and credentials.scheme.lower() == "bearer":
        workspace = workspace_for_key(ctx.engine, credentials.credentials)
    elif "authorization" not in request.headers:  # a browser: the console's cookie, reads only
        from typestrict_pipeline.console.web import cookie_workspace

        workspace = cookie_workspace(request)
    if workspace is None:
        raise ApiError(
            401, "unauthorized",
            "expected 'Authorization: Bearer <API key>' with a valid, unrevoked key, got none. "
            "Create one with `typestrict api-key create WORKSPACE`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return workspace


Ctx = Annotated[ApiContext, Depends(get_ctx)]
Workspace = Annotated[str, Depends(get_workspace)]
