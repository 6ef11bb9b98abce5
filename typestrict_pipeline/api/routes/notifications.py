"""``/v1/notifications``: Settings → Notifications (who gets "A scheduled study changes its
winner", and every delivery or failure)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Path

from typestrict_pipeline.api import notifications as core
from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import api_router
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.schemas import (
    DeliveryOut,
    ErrorBody,
    NotificationSettingIn,
    NotificationSettingOut,
    NotificationsOut,
)

router = api_router(tags=["notifications"], responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})

Person = Annotated[str, Path(min_length=3, max_length=200)]


@router.get("/notifications", response_model=NotificationsOut)
def get_notifications(ctx: Ctx, workspace: Workspace, page: ListPage) -> NotificationsOut:
    """Each schedule owner's choice, and the workspace's notifications, delivered or not (why),
    newest first, a page at a time (``limit``, ``offset``; ``X-Total-Count`` and ``Link`` count
    the deliveries: docs/api.md, "Lists, a page at a time"). Before, the newest 100 and no older."""
    at = page.of(core.count_deliveries(ctx.engine, workspace))
    return NotificationsOut(
        settings=[NotificationSettingOut(**dataclasses.asdict(p)) for p in core.settings(ctx.engine, workspace)],
        deliveries=[DeliveryOut(**dataclasses.asdict(d)) for d in core.deliveries(
            ctx.engine, workspace, limit=at.stop - at.start, offset=at.start)] if at.stop > at.start else [],
    )


@router.put("/notifications/{person}", response_model=NotificationSettingOut)
def set_notification(person: Person, body: NotificationSettingIn, ctx: Ctx, workspace: Workspace) -> NotificationSettingOut:
    """Turn the notification on or off for a person who set up one of the workspace's schedules."""
    return NotificationSettingOut(**dataclasses.asdict(
        core.set_setting(ctx.engine, workspace, person, body.enabled, body.kind)))
