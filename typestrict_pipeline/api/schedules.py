"""Re-run schedules through the API, scoped to the workspace: enable from a finished study, list
with the reason of the last skip, cancel (:mod:`typestrict_pipeline.reruns.service` holds the
rules; another workspace's schedule is "not found", like one that does not exist)."""

from __future__ import annotations

from sqlalchemy import Engine

from typestrict_pipeline.errors import NotFoundError
from typestrict_pipeline.reruns.service import ScheduleView
from typestrict_pipeline.values import row_id


def _not_found(schedule_id: object) -> NotFoundError:
    return NotFoundError.in_workspace(
        "schedule", schedule_id, "List them with GET /v1/schedules, and use this workspace's key")


def parse_schedule_id(text: str) -> int:
    """A schedule id from a URL segment (:func:`~typestrict_pipeline.values.row_id`, the one
    rule); anything else is "not found" (never another schedule).

    >>> parse_schedule_id("3")
    3
    """
    parsed = row_id(text)
    if parsed is None:
        raise _not_found(text)
    return parsed


def schedule_of(engine: Engine, workspace: str, schedule_id: int) -> ScheduleView:
    """The schedule if it belongs to ``workspace``."""
    from typestrict_pipeline.reruns.service import get_schedule

    try:
        view = get_schedule(engine, schedule_id)
    except NotFoundError:
        raise _not_found(schedule_id) from None
    if view.workspace_id != workspace:
        raise _not_found(schedule_id)
    return view


def schedules_of(engine: Engine, workspace: str) -> list[ScheduleView]:
    """The workspace's schedules, newest first."""
    from typestrict_pipeline.reruns.service import list_schedules

    return list_schedules(engine, workspace_id=workspace)


def cancel(engine: Engine, workspace: str, schedule_id: int, by: str) -> ScheduleView:
    """Cancel one of the workspace's schedules (a re-run already running finishes)."""
    from typestrict_pipeline.reruns.service import cancel_schedule

    schedule_of(engine, workspace, schedule_id)
    return cancel_schedule(engine, schedule_id, by=by)


__all__ = ["cancel", "parse_schedule_id", "schedule_of", "schedules_of"]
