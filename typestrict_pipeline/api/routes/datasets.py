"""``/v1/datasets``: register a point-in-time dataset from the workspace's files, append rows."""

from __future__ import annotations

import dataclasses

from typestrict_pipeline.api import datasets as core
from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.schemas import AppendIn, DatasetIn, DatasetOut, ErrorBody, TableOut

router = api_router(tags=["datasets"], responses={
    401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}})

DatasetName = PathId


def _storage(ctx: Ctx, workspace: str) -> core.StorageCheck:
    """The workspace's storage quota, for what a dataset would store (``files``, ``size``);
    called under the workspace's :meth:`~typestrict_pipeline.api.trainings.TrainingStore.storage_lock`."""
    return lambda files, size: ctx.trainings.check_storage(workspace, files=files, size=size)


def _out(view: core.DatasetView, added: int | None = None) -> DatasetOut:
    return DatasetOut(name=view.name, workflow=view.workflow, registered_at=view.registered_at,
                      last_known=view.last_known, added=added,
                      tables=[TableOut(**{**dataclasses.asdict(t), "columns": list(t.columns)})
                              for t in view.tables])


@router.post("/datasets", status_code=201, response_model=DatasetOut, responses={409: {"model": ErrorBody}})
def register_dataset(body: DatasetIn, ctx: Ctx, workspace: Workspace) -> DatasetOut:
    """Register a dataset for a workflow: one workspace file per table it reads (``event_time``,
    ``known_time`` with a UTC offset, then the value columns). Backtests and studies of this
    workspace then name it as their ``dataset``. Its stored tables count against the
    workspace's storage quota (409 ``storage_quota`` beyond it, nothing stored)."""
    with ctx.trainings.storage_lock(workspace):  # the quota's check and the write, as one
        view = core.register(ctx.settings.home, workspace, body.name, body.workflow, body.tables,
                             max_bytes=ctx.settings.max_upload_bytes, storage=_storage(ctx, workspace))
    return _out(view)


@router.get("/datasets", response_model=list[DatasetOut])
def list_datasets(ctx: Ctx, workspace: Workspace, page: ListPage) -> list[DatasetOut]:
    """The workspace's datasets, by name, a page at a time (``limit``, ``offset``;
    ``X-Total-Count`` and ``Link``). The built-in ones, such as ``seattle_weather``, are not listed."""
    names = core.own_names(ctx.settings.home, workspace)
    return [_out(v) for v in core.list_for(ctx.settings.home, workspace, names[page.of(len(names))])]


@router.get("/datasets/{name}", response_model=DatasetOut)
def get_dataset(name: DatasetName, ctx: Ctx, workspace: Workspace) -> DatasetOut:
    """A dataset's tables, rows and up to when its data are known."""
    return _out(core.get(ctx.settings.home, workspace, name))


@router.post("/datasets/{name}/append", response_model=DatasetOut)
def append_rows(name: DatasetName, body: AppendIn, ctx: Ctx, workspace: Workspace) -> DatasetOut:
    """Add rows known after the table's last knowledge time (rows already known are never
    rewritten); schedules on this dataset see them at their next tick."""
    with ctx.trainings.storage_lock(workspace):  # the quota's check and the write, as one
        view, added = core.append(ctx.settings.home, workspace, name, body.file, body.table,
                                  max_bytes=ctx.settings.max_upload_bytes, storage=_storage(ctx, workspace))
    return _out(view, added)
