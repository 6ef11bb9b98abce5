"""Settings → Notifications through the API: where "A scheduled study changes its winner" goes,
and what was delivered or failed.

The notification goes to the person who set up a schedule (its ``owner``), unless that person
turned it off. Through the API a workspace sees and sets the choice of the people who own its
schedules, about its own schedules (the same person's choice in another workspace is that
workspace's), and the deliveries of its own lineages' notifications (with the reason one is not
delivered yet); nothing of another workspace.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, Select, select

from typestrict_pipeline.errors import NotFoundError
from typestrict_pipeline.reruns.notify import KIND_TITLES, KIND_WINNER_CHANGED
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.values import person_id


@dataclass(frozen=True)
class PersonSetting:
    """One person's choice for one kind of notification."""

    person: str
    kind: str
    title: str
    enabled: bool


@dataclass(frozen=True)
class Delivery:
    """One notification of the workspace: to whom, its state, and why it is not delivered yet."""

    id: int
    recipient: str
    subject: str
    state: str
    attempts: int
    created_at: str
    sent_at: str | None
    next_attempt_at: str | None
    last_error: str | None
    text: str


def people(engine: Engine, workspace: str) -> list[str]:
    """Who set up the workspace's schedules (the notification's recipients), sorted."""
    from typestrict_pipeline.reruns.tables import RerunSchedule

    with session_scope(engine) as s:  # one person however the case of their address was written
        return sorted({person_id(o) for o in s.execute(select(RerunSchedule.owner)
                                                       .where(RerunSchedule.workspace_id == workspace)).scalars()})


def settings(engine: Engine, workspace: str) -> list[PersonSetting]:
    """Each recipient's choice for every kind of notification (on unless turned off)."""
    from typestrict_pipeline.reruns.notify import notification_enabled

    with session_scope(engine) as s:
        return [PersonSetting(p, kind, title, notification_enabled(s, p, kind, workspace))
                for p in people(engine, workspace) for kind, title in KIND_TITLES.items()]


def set_setting(engine: Engine, workspace: str, person: str, enabled: bool,
                kind: str = KIND_WINNER_CHANGED) -> PersonSetting:
    """Turn a notification on or off for a person who set up one of the workspace's schedules,
    about this workspace's schedules only (another workspace's choice for the same person stays).

    Raises:
        NotFoundError: nobody of that address set up a schedule in this workspace.
        InputError: an unknown kind.
    """
    from typestrict_pipeline.reruns.notify import set_notification

    if person_id(person) not in people(engine, workspace):  # Ana@Example.com is ana@example.com
        raise NotFoundError(
            f"expected a person who set up a schedule in this workspace, got {person[:200]!r}. "
            "GET /v1/notifications lists them; the notification goes to a schedule's owner")
    set_notification(engine, person, kind, enabled, workspace_id=workspace)
    return PersonSetting(person_id(person), kind, KIND_TITLES[kind], enabled)


def _own_keys(workspace: str) -> Select[str]:
    """The outbox keys of the workspace's notifications (``winner-changed:<entry>``, one per entry
    of its studies' lineages), as a query the store answers: no list of ids is sent to it."""
    from sqlalchemy import String, cast, literal

    from typestrict_pipeline.reruns.tables import LineageRow
    from typestrict_pipeline.study.tables import StudyRow

    studies = select(cast(StudyRow.id, String)).where(StudyRow.workspace == workspace)
    return select(literal("winner-changed:", String) + cast(LineageRow.id, String)).where(
        LineageRow.lineage_root_id.in_(studies))


def count_deliveries(engine: Engine, workspace: str) -> int:
    """How many notifications the workspace has, delivered or not (the console's pages of them)."""
    from sqlalchemy import func

    from typestrict_pipeline.reruns.tables import OutboxMessage

    with session_scope(engine) as s:
        return int(s.execute(select(func.count()).select_from(OutboxMessage)
                             .where(OutboxMessage.dedupe_key.in_(_own_keys(workspace)))).scalar_one())


def deliveries(engine: Engine, workspace: str, limit: int = 100, offset: int = 0) -> list[Delivery]:
    """The workspace's notifications, newest first, delivered or not (with why not: the error
    without the server's paths or a webhook's URL beyond its host, :func:`errors.for_customers`):
    ``limit`` of them after the newest ``offset``."""
    from typestrict_pipeline.errors import for_customers
    from typestrict_pipeline.reruns.notify import OutboxEntry
    from typestrict_pipeline.reruns.tables import OutboxMessage

    with session_scope(engine) as s:
        rows = s.execute(select(OutboxMessage).where(OutboxMessage.dedupe_key.in_(_own_keys(workspace)))
                         .order_by(OutboxMessage.id.desc()).offset(offset).limit(limit)).scalars().all()
        out = []
        for r in rows:
            entry = OutboxEntry(r.id, r.state, r.recipient, r.subject, r.attempts, r.created_at, r.sent_at,
                                r.next_attempt_at, r.last_error)
            out.append(Delivery(
                id=r.id, recipient=r.recipient, subject=r.subject, state=r.state.value, attempts=r.attempts,
                created_at=r.created_at.isoformat(), sent_at=None if r.sent_at is None else r.sent_at.isoformat(),
                next_attempt_at=None if r.next_attempt_at is None else r.next_attempt_at.isoformat(),
                last_error=None if r.last_error is None else for_customers(r.last_error),
                text=entry.line(customer=True)))
        return out


__all__ = ["Delivery", "PersonSetting", "count_deliveries", "deliveries", "people", "set_setting", "settings"]
