"""``/v1/files``: the workspace's own area (datasets are uploaded here, then referenced; deleted here)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from pathlib import Path as FsPath
from typing import Annotated

from fastapi import Path, Request, Response
from starlette.concurrency import run_in_threadpool

from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import api_router, check_content_coding
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.schemas import ErrorBody, FileOut
from typestrict_pipeline.files import StagedFile

router = api_router(tags=["files"], responses={401: {"model": ErrorBody}, 409: {"model": ErrorBody},
                                             422: {"model": ErrorBody}})

FileName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")]


UPLOAD_PIECE_BYTES = 1024 * 1024
"""An upload is written to its staged file in pieces of this size: what the server holds of it."""


def declared_length(request: Request) -> int | None:
    """The body's ``Content-Length`` (the edge has checked it against the upload limit), or None
    for a chunked body."""
    raw = request.headers.get("content-length", "")
    return int(raw) if raw.isascii() and raw.isdigit() else None


async def staging_for(request: Request, ctx: Ctx, workspace: str, target: FsPath) -> FsPath:
    """The workspace's staging folder for an upload that will replace ``target``, once the
    workspace's storage quota has room for its declared ``Content-Length`` (409
    ``storage_quota`` before a byte of the body is read; a chunked body is checked on the bytes
    received, under the storage lock, by the caller)."""
    declared = declared_length(request)
    if declared is not None:
        await run_in_threadpool(ctx.trainings.check_storage, workspace, files=1, size=declared,
                                replaces=[target])
    return await run_in_threadpool(ctx.trainings.staging, workspace)


async def receive_upload(request: Request, staging: FsPath) -> StagedFile:
    """The raw body (bounded by the server's upload limit), sent as is (:func:`check_content_coding`),
    and not a form, written to a :class:`StagedFile` in ``staging`` a piece at a time
    (:data:`UPLOAD_PIECE_BYTES`, each in a worker thread): the server never holds the file, so a
    1 GiB upload costs what a 1 MiB one does (it held the body twice, as pieces and joined: a
    200 MiB upload raised the server's peak RSS by 410 MB). The caller commits or discards it.

    A ``multipart/form-data`` body (``curl -F file=@reviews.csv``) was stored whole, its boundary
    lines and part headers around the file, as the file itself; the dataset then failed later
    with a message about its first line. Refused (415) before it is read."""
    check_content_coding(request)
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media.startswith("multipart/"):
        raise ApiError(415, "unsupported_media_type",
                       f"expected the file's bytes as the whole request body, got a {media[:40]!r} form "
                       "(its boundaries and part headers would be stored as the file). Send the file "
                       "itself: curl -X PUT --data-binary @FILE (not -F)")
    return await stage_stream(request.stream(), staging)


async def stage_stream(chunks: AsyncIterable[bytes], staging: FsPath) -> StagedFile:
    """``chunks`` (a request's body, or a form's spooled file) written to a :class:`StagedFile`
    in ``staging`` a piece at a time (:data:`UPLOAD_PIECE_BYTES`, each in a worker thread): what
    the server holds of it is one piece, whatever the file's size. Removed if the stream fails;
    else the caller commits or discards it."""
    staged = await run_in_threadpool(StagedFile, staging)
    try:
        piece = bytearray()
        async for chunk in chunks:
            piece += chunk
            if len(piece) >= UPLOAD_PIECE_BYTES:
                await run_in_threadpool(staged.write, bytes(piece))
                piece.clear()
        if piece:
            await run_in_threadpool(staged.write, bytes(piece))
    except BaseException:
        staged.discard()
        raise
    return staged


@router.put("/files/{name}", status_code=201, response_model=FileOut,
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def put_file(name: FileName, request: Request, ctx: Ctx, workspace: Workspace) -> FileOut:
    """Upload a file (e.g. a dataset) into the workspace's own area; replaces one of that name.
    Within the workspace's storage quota (409 ``storage_quota`` beyond it, nothing stored): checked
    on the ``Content-Length`` before the body is read, and on the bytes received before they are
    moved in place."""
    area = ctx.trainings.area(workspace)
    target = area.root / name
    staging = await staging_for(request, ctx, workspace, target)
    with await receive_upload(request, staging) as staged:

        def store() -> FsPath:  # checked and stored under the workspace's storage lock, off the event loop
            with ctx.trainings.storage_lock(workspace):
                ctx.trainings.check_storage(workspace, files=1, size=staged.size, replaces=[target])
                return staged.commit(target)

        path = await run_in_threadpool(store)
    return FileOut(name=path.name, size=staged.size)


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
