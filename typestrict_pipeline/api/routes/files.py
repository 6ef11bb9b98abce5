"""``/v1/files``: the workspace's own area (datasets are uploaded here, then referenced; deleted here)."""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import Annotated

from fastapi import Path, Request, Response
from starlette.concurrency import run_in_threadpool

from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import api_router, check_content_coding
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.schemas import ErrorBody, FileOut

router = api_router(tags=["files"], responses={401: {"model": ErrorBody}, 409: {"model": ErrorBody},
                                             422: {"model": ErrorBody}})

FileName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")]


async def read_body(request: Request) -> bytes:
    """The raw body (bounded by the server's upload limit), sent as is (:func:`check_content_coding`),
    and not a form: a ``multipart/form-data`` body (``curl -F file=@reviews.csv``) was stored
    whole, its boundary lines and part headers around the file, as the file itself; the dataset
    then failed later with a message about its first line. Refused (415) before it is read."""
    check_content_coding(request)
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media.startswith("multipart/"):
        raise ApiError(415, "unsupported_media_type",
                       f"expected the file's bytes as the whole request body, got a {media[:40]!r} form "
                       "(its boundaries and part headers would be stored as the file). Send the file "
                       "itself: curl -X PUT --data-binary @FILE (not -F)")
    chunks = [chunk async for chunk in request.stream()]
    return b"".join(chunks)


@router.put("/files/{name}", status_code=201, response_model=FileOut,
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def put_file(name: FileName, request: Request, ctx: Ctx, workspace: Workspace) -> FileOut:
    """Upload a file (e.g. a dataset) into the workspace's own area; replaces one of that name.
    Within the workspace's storage quota (409 ``storage_quota`` beyond it, nothing stored)."""
    data = await read_body(request)
    area = ctx.trainings.area(workspace)

    def store() -> FsPath:  # checked and stored under the workspace's storage lock, off the event loop
        with ctx.trainings.storage_lock(workspace):
            ctx.trainings.check_storage(workspace, files=1, size=len(data), replaces=[area.root / name])
            return area.save(name, data)

    path = await run_in_threadpool(store)
    return FileOut(name=path.name, size=len(data))


@router.get("/files", response_model=list[FileOut])
def list_files(ctx: Ctx, workspace: Workspace, page: ListPage) -> list[FileOut]:
    """The files of the workspace's own area, a page at a time (``limit``, ``offset``;
    ``X-Total-Count`` and ``Link``)."""
    files = ctx.trainings.area(workspace).listing()
    return [FileOut(name=n, size=s) for n, s in files[page.of(len(files))]]


@router.delete("/files/{name}", status_code=204, response_class=Response, responses={404: {"model": ErrorBody}})
def delete_file(name: FileName, ctx: Ctx, workspace: Workspace) -> Response:
    """Delete an uploaded file of the workspace's area (trainings and datasets made from it keep
    their own copy)."""
    ctx.trainings.area(workspace).delete(name)
    return Response(status_code=204)
