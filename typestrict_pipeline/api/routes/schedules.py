"""``/v1/schedules``: the workspace's re-run schedules, each with the reason of its last skip; cancel.

A schedule is enabled from its study: ``POST /v1/studies/{id}/schedule``.
"""

from __future__ import annotations

from typestrict_pipeline.api import schedules as core
from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.routes.studies import schedule_out
from typestrict_pipeline.api.schemas import ErrorBody, ScheduleCancelIn, ScheduleOut, SchedulesOut

router = api_router(tags=["schedules"], responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})

ScheduleId = PathId


@router.get("/schedules", response_model=SchedulesOut)
def list_schedules(ctx: Ctx, workspace: Workspace) -> SchedulesOut:
    """Every schedule of the workspace, newest first, with why its last tick skipped."""
    return SchedulesOut(schedules=[schedule_out(ctx, v) for v in core.schedules_of(ctx.engine, workspace)])


@router.get("/schedules/{schedule_id}", response_model=ScheduleOut)
def get_schedule(schedule_id: ScheduleId, ctx: Ctx, workspace: Workspace) -> ScheduleOut:
    """One schedule and the reason of its last skip."""
    return schedule_out(ctx, core.schedule_of(ctx.engine, workspace, core.parse_schedule_id(schedule_id)))


@router.post("/schedules/{schedule_id}/cancel", response_model=ScheduleOut)
def cancel_schedule(schedule_id: ScheduleId, body: ScheduleCancelIn, ctx: Ctx, workspace: Workspace) -> ScheduleOut:
    """Cancel a schedule: no new re-run starts (one already running finishes)."""
    return schedule_out(ctx, core.cancel(ctx.engine, workspace, core.parse_schedule_id(schedule_id), body.by))
