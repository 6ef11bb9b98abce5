"""Notifications through a stored outbox: nothing is lost when delivery fails, and it is retried.

* :func:`enqueue` writes the message in the same store as the event that caused it, keyed by a
  ``dedupe_key`` with a unique constraint, so an event notifies once however often it is
  processed.
* :func:`deliver_pending` claims due messages one by one with a conditional ``UPDATE`` (a lease:
  two deliverers never send the same message at the same time), sends each through a
  :class:`Transport`, then marks it ``SENT``; on failure it records the error and retries later
  with exponential backoff (30 s, 60 s, ... capped at 1 h), and after ``max_attempts`` marks it
  ``DEAD`` (kept and visible; :func:`requeue` puts it back).
* Delivery is at least once: a process that dies between sending and marking ``SENT`` sends the
  message again once its lease expires (the receiver sees the same ``Message-ID``).

Transports: :class:`SmtpTransport` (email over SMTP, ``smtplib``) and :class:`WebhookTransport`
(JSON ``POST``, ``urllib``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import smtplib
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Protocol

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.reruns.tables import NotificationSetting, OutboxMessage, OutboxState
from typestrict_pipeline.store import session_scope, utcnow

KIND_WINNER_CHANGED = "study_winner_changed"
TITLE_WINNER_CHANGED = "A scheduled study changes its winner"
KIND_TITLES = {KIND_WINNER_CHANGED: TITLE_WINNER_CHANGED}

BACKOFF_FIRST = dt.timedelta(seconds=30)
BACKOFF_CAP = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Outgoing:
    """One message handed to a transport."""

    message_id: str
    kind: str
    recipient: str
    subject: str
    body: str


class Transport(Protocol):
    """Sends one message or raises; it must not swallow a failure."""

    def send(self, message: Outgoing) -> None: ...


def message_id_header(key: str) -> str:
    """A valid ``Message-ID`` for an outbox key (the same key always gives the same id).

    >>> message_id_header("winner-changed:12")
    '<winner-changed.12@typestrict>'
    """
    return "<" + re.sub(r"[^A-Za-z0-9.\-]", ".", key) + "@typestrict>"


@dataclass(frozen=True)
class SmtpTransport:
    """Email over SMTP (``smtplib``); STARTTLS and login when configured."""

    host: str
    port: int
    sender: str
    timeout_seconds: float = 10.0
    starttls: bool = False
    username: str | None = None
    password: str | None = None

    def send(self, message: Outgoing) -> None:
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = message.recipient
        mail["Subject"] = message.subject
        mail["Message-ID"] = message_id_header(message.message_id)
        mail["X-TypeStrict-Kind"] = message.kind
        mail.set_content(message.body)
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout_seconds) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(mail)


@dataclass(frozen=True)
class WebhookTransport:
    """A JSON ``POST`` to a URL; any status other than 2xx is a failure."""

    url: str
    timeout_seconds: float = 10.0

    def send(self, message: Outgoing) -> None:
        payload = json.dumps(
            {
                "id": message.message_id,
                "kind": message.kind,
                "recipient": message.recipient,
                "subject": message.subject,
                "body": message.body,
            }
        ).encode()
        request = urllib.request.Request(
            self.url, data=payload, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
            status = int(response.status)
        if not 200 <= status < 300:
            raise RuntimeError(f"expected a 2xx answer from the webhook {self.url}, got {status}")


@dataclass
class DeliveryReport:
    """What one :func:`deliver_pending` call did."""

    sent: list[int] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)


def notification_enabled(session: Session, user_id: str, kind: str) -> bool:
    """Whether ``user_id`` wants ``kind`` notifications (on unless turned off)."""
    row = session.get(NotificationSetting, (user_id, kind))
    return True if row is None else bool(row.enabled)


def set_notification(engine: Engine, user_id: str, kind: str, enabled: bool) -> None:
    """Turn one kind of notification on or off for a person (Settings → Notifications)."""
    if kind not in KIND_TITLES:
        from typestrict_pipeline.errors import InputError

        raise InputError(f"one of {sorted(KIND_TITLES)}", repr(kind), "use a known notification kind")
    with session_scope(engine) as session:
        row = session.get(NotificationSetting, (user_id, kind), with_for_update=True)
        if row is None:
            session.add(NotificationSetting(user_id=user_id, kind=kind, enabled=enabled, updated_at=utcnow()))
        else:
            row.enabled = enabled
            row.updated_at = utcnow()


def enqueue(
    engine: Engine,
    *,
    dedupe_key: str,
    kind: str,
    recipient: str,
    subject: str,
    body: str,
    now: dt.datetime | None = None,
) -> bool:
    """Store a message for delivery; False when one with this ``dedupe_key`` already exists."""
    at = now or utcnow()
    try:
        with session_scope(engine) as session:
            session.add(
                OutboxMessage(
                    dedupe_key=dedupe_key,
                    kind=kind,
                    recipient=recipient,
                    subject=subject,
                    body=body,
                    state=OutboxState.PENDING,
                    attempts=0,
                    next_attempt_at=at,
                    created_at=at,
                )
            )
    except IntegrityError:
        return False
    return True


def backoff(attempts: int) -> dt.timedelta:
    """Wait before the next attempt after ``attempts`` failures: 30 s·2^(n−1), at most 1 h.

    >>> [int(backoff(n).total_seconds()) for n in (1, 2, 3, 9)]
    [30, 60, 120, 3600]
    """
    wait: dt.timedelta = BACKOFF_FIRST * (2 ** max(0, attempts - 1))
    return min(wait, BACKOFF_CAP)


def deliver_pending(
    engine: Engine,
    transport: Transport,
    *,
    now: dt.datetime | None = None,
    max_attempts: int = 8,
    lease: dt.timedelta = dt.timedelta(minutes=2),
    limit: int = 100,
) -> DeliveryReport:
    """Send every due message once; failures are kept for a later retry.

    Args:
        engine: the store holding the outbox.
        transport: how messages leave (SMTP, webhook).
        now: the current time (aware; default: now).
        max_attempts: after this many failed attempts a message is marked ``DEAD``.
        lease: how long a claimed message is reserved for this deliverer.
        limit: at most this many messages per call.

    Returns:
        Which messages were sent, failed (with the error), or given up.
    """
    at = now or utcnow()
    report = DeliveryReport()
    with session_scope(engine) as session:
        due = (
            session.execute(
                select(OutboxMessage.id)
                .where(OutboxMessage.state == OutboxState.PENDING)
                .where(OutboxMessage.next_attempt_at <= at)
                .where(or_(OutboxMessage.claimed_until.is_(None), OutboxMessage.claimed_until < at))
                .order_by(OutboxMessage.id)
                .limit(limit)
            )
            .scalars()
            .all()
        )
    for message_id in due:
        with session_scope(engine) as session:
            claimed = session.execute(  # type: ignore[attr-defined]
                update(OutboxMessage)
                .where(OutboxMessage.id == message_id)
                .where(OutboxMessage.state == OutboxState.PENDING)
                .where(or_(OutboxMessage.claimed_until.is_(None), OutboxMessage.claimed_until < at))
                .values(claimed_until=at + lease, attempts=OutboxMessage.attempts + 1)
            ).rowcount
            if claimed != 1:
                continue
            row = session.get(OutboxMessage, message_id)
            assert row is not None
            outgoing = Outgoing(str(row.dedupe_key), row.kind, row.recipient, row.subject, row.body)
            attempts = row.attempts
        try:
            transport.send(outgoing)
        except (OSError, smtplib.SMTPException, urllib.error.URLError, RuntimeError) as exc:
            error = f"{exc.__class__.__name__}: {exc}"
            dead = attempts >= max_attempts
            with session_scope(engine) as session:
                session.execute(
                    update(OutboxMessage)
                    .where(OutboxMessage.id == message_id)
                    .values(
                        state=OutboxState.DEAD if dead else OutboxState.PENDING,
                        next_attempt_at=at + backoff(attempts),
                        claimed_until=None,
                        last_error=error[:2000],
                    )
                )
            if dead:
                report.dead.append(message_id)
            else:
                report.failed.append((message_id, error))
            continue
        with session_scope(engine) as session:
            session.execute(
                update(OutboxMessage)
                .where(OutboxMessage.id == message_id)
                .values(state=OutboxState.SENT, sent_at=utcnow(), claimed_until=None, last_error=None)
            )
        report.sent.append(message_id)
    return report


def requeue(engine: Engine, message_id: int, now: dt.datetime | None = None) -> None:
    """Put a ``DEAD`` message back in the queue (attempts start again)."""
    with session_scope(engine) as session:
        session.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id == message_id)
            .values(state=OutboxState.PENDING, attempts=0, next_attempt_at=now or utcnow(), claimed_until=None)
        )


def transport_from_env(
    kind: str | None = None, environ: dict[str, str] | None = None
) -> SmtpTransport | WebhookTransport | None:
    """The transport the environment describes (None for ``none``: messages stay in the outbox).

    ``TYPESTRICT_NOTIFY_TRANSPORT`` = ``smtp`` (default) | ``webhook`` | ``none``;
    ``TYPESTRICT_SMTP_HOST`` (127.0.0.1), ``_PORT`` (25), ``_SENDER``, ``_USER``, ``_PASSWORD``,
    ``_STARTTLS`` (1/true/yes); ``TYPESTRICT_NOTIFY_WEBHOOK``.

    >>> transport_from_env(environ={"TYPESTRICT_NOTIFY_TRANSPORT": "none"}) is None
    True
    >>> transport_from_env(environ={"TYPESTRICT_SMTP_PORT": "2525"}).port
    2525
    """
    import os

    from typestrict_pipeline.errors import InputError

    env = dict(os.environ) if environ is None else environ
    chosen = (kind or env.get("TYPESTRICT_NOTIFY_TRANSPORT") or "smtp").lower()
    if chosen == "none":
        return None
    if chosen == "webhook":
        url = env.get("TYPESTRICT_NOTIFY_WEBHOOK")
        if not url:
            raise InputError("a webhook URL in TYPESTRICT_NOTIFY_WEBHOOK", "none", "set it, or use the smtp transport")
        return WebhookTransport(url)
    if chosen != "smtp":
        raise InputError("TYPESTRICT_NOTIFY_TRANSPORT smtp, webhook or none", repr(chosen), "fix the variable")
    return SmtpTransport(
        host=env.get("TYPESTRICT_SMTP_HOST", "127.0.0.1"),
        port=int(env.get("TYPESTRICT_SMTP_PORT", "25")),
        sender=env.get("TYPESTRICT_SMTP_SENDER", "typestrict@localhost"),
        starttls=env.get("TYPESTRICT_SMTP_STARTTLS", "").lower() in ("1", "true", "yes"),
        username=env.get("TYPESTRICT_SMTP_USER"),
        password=env.get("TYPESTRICT_SMTP_PASSWORD"),
    )
