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

Transports: :class:`FileTransport` (the default: each message appended to a log file a user
reads without any mail server, ``${TYPESTRICT_HOME}/notifications.log``), :class:`SmtpTransport`
(email over SMTP, ``smtplib``) and :class:`WebhookTransport` (JSON ``POST``, ``urllib``), chosen
by configuration (:func:`transport_from_env`). :func:`outbox` lists every message with its state
and, for one not delivered yet, the reason.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import smtplib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Protocol

from sqlalchemy import Engine, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.errors import for_customers
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


class UndeliverableError(RuntimeError):
    """A message no transport can ever send (a header the e-mail library refuses): it is
    marked ``DEAD`` at once instead of being retried."""


def build_email(message: Outgoing, sender: str = "typestrict@localhost") -> EmailMessage:
    """The message as an e-mail, every header set through the standard library's
    ``email.policy.SMTP``, which refuses a header value holding a carriage return or a line
    feed: a recipient or subject can never add a header (``Bcc:``) or a body of its own.

    Raises:
        UndeliverableError: a header value the library refuses.

    >>> build_email(Outgoing("k:1", "k", "ana@example.com", "Hi", "Body"))["To"]
    'ana@example.com'
    >>> build_email(Outgoing("k:1", "k", "ana@example.com\\r\\nBcc: all@evil.example", "Hi", "Body"))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.reruns.notify.UndeliverableError: expected header values without line breaks, got one in 'To' ('ana@example.com\\r\\nBcc: all@evil.example'). The message is kept in the outbox as DEAD; fix the schedule's owner.
    """
    from email import policy

    mail = EmailMessage(policy=policy.SMTP)
    headers = (("From", sender), ("To", message.recipient), ("Subject", message.subject),
               ("Message-ID", message_id_header(message.message_id)), ("X-TypeStrict-Kind", message.kind))
    for name, value in headers:
        try:
            mail[name] = value
        except ValueError:
            raise UndeliverableError(
                f"expected header values without line breaks, got one in {name!r} ({value[:120]!r}). "
                "The message is kept in the outbox as DEAD; fix the schedule's owner.") from None
    mail.set_content(message.body)
    return mail


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
        mail = build_email(message, self.sender)
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout_seconds) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(mail)


@dataclass(frozen=True)
class FileTransport:
    """Appends each message to a text file (created with its folders), flushed to disk.

    The default transport: a person reads the file (``typestrict schedule outbox`` also lists
    the messages); no mail server is needed.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "n.log"
    >>> FileTransport(f).send(Outgoing("winner-changed:1", "k", "ana@example.com", "Hello", "Body"))
    >>> f.read_text().splitlines()[1:3]
    ['To: ana@example.com', 'Subject: Hello']
    """

    path: Path

    def send(self, message: Outgoing) -> None:
        mail = build_email(message)  # the headers as the e-mail library accepts them
        self.path.parent.mkdir(parents=True, exist_ok=True)
        block = (
            f"=== {utcnow().strftime('%Y-%m-%dT%H:%M:%SZ')} {mail['Message-ID']}\n"
            f"To: {mail['To']}\nSubject: {mail['Subject']}\n\n{message.body.rstrip()}\n\n"
        )
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())


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


EVERY_WORKSPACE = ""
"""The workspace of a choice made for every workspace's schedules (the operator's, from the CLI)."""


def notification_enabled(session: Session, user_id: str, kind: str, workspace_id: str) -> bool:
    """Whether ``user_id`` wants ``kind`` notifications about ``workspace_id``'s schedules: that
    workspace's choice, else the one made for every workspace, else on. ``user_id`` is matched
    as :func:`~typestrict_pipeline.values.person_id` (an owner stored as written is its person)."""
    from typestrict_pipeline.values import person_id

    for where in (workspace_id, EVERY_WORKSPACE):
        row = session.get(NotificationSetting, (where, person_id(user_id), kind))
        if row is not None:
            return bool(row.enabled)
    return True


def set_notification(engine: Engine, user_id: str, kind: str, enabled: bool,
                     workspace_id: str | None = None) -> None:
    """Turn one kind of notification on or off for a person: about one workspace's schedules
    (Settings → Notifications, ``PUT /v1/notifications/{person}``), or, with ``workspace_id``
    None, about every workspace's (``typestrict schedule notifications``), which replaces the
    choices workspaces made for that person.

    Raises:
        InputError: ``user_id`` is not one e-mail address, or an unknown ``kind``.
    """
    from typestrict_pipeline.values import PERSON, email

    user_id = email(user_id, PERSON)
    if kind not in KIND_TITLES:
        from typestrict_pipeline.errors import InputError

        raise InputError(f"one of {sorted(KIND_TITLES)}", repr(kind), "use a known notification kind")
    where = EVERY_WORKSPACE if workspace_id is None else workspace_id
    with session_scope(engine) as session:
        if workspace_id is None:
            session.execute(delete(NotificationSetting).where(
                NotificationSetting.user_id == user_id, NotificationSetting.kind == kind,
                NotificationSetting.workspace_id != EVERY_WORKSPACE))
        row = session.get(NotificationSetting, (where, user_id, kind), with_for_update=True)
        if row is None:
            session.add(NotificationSetting(workspace_id=where, user_id=user_id, kind=kind, enabled=enabled,
                                            updated_at=utcnow()))
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
            dead = attempts >= max_attempts or isinstance(exc, UndeliverableError)
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
    """Put a ``DEAD`` message back in the queue (attempts start again).

    Only a given-up message: a sent one put back was delivered a second time, and an id no
    message has was said to be back in the outbox.

    Raises:
        NotFoundError: no message has the id.
        InputError: the message is not ``DEAD`` (sent, or still in the queue).
    """
    from typestrict_pipeline.errors import InputError, NotFoundError

    with session_scope(engine) as session:
        row = session.get(OutboxMessage, message_id, with_for_update=True)
        if row is None:
            raise NotFoundError(f"expected an existing message id, got {message_id}. List them with "
                                "`typestrict schedule outbox`.")
        if row.state is not OutboxState.DEAD:
            got = (f"message {message_id} delivered at {row.sent_at.strftime('%Y-%m-%d %H:%M UTC')}"
                   if row.state is OutboxState.SENT and row.sent_at is not None
                   else f"message {message_id} {row.state.value.lower()} (still in the outbox)")
            raise InputError("a given-up message to put back in the outbox", got,
                             "nothing to requeue: a delivered message is never sent twice, a waiting one is "
                             "sent by the next delivery (typestrict schedule deliver)")
        row.state = OutboxState.PENDING
        row.attempts = 0
        row.next_attempt_at = now or utcnow()
        row.claimed_until = None


def transport_from_env(
    kind: str | None = None, environ: dict[str, str] | None = None
) -> FileTransport | SmtpTransport | WebhookTransport | None:
    """The transport the environment describes (None for ``none``: messages stay in the outbox).

    ``TYPESTRICT_NOTIFY_TRANSPORT`` = ``file`` | ``smtp`` | ``webhook`` | ``none``. Unset: ``smtp``
    when ``TYPESTRICT_SMTP_HOST`` is set, ``webhook`` when ``TYPESTRICT_NOTIFY_WEBHOOK`` is set,
    else ``file`` (``TYPESTRICT_NOTIFY_FILE``, default ``${TYPESTRICT_HOME}/notifications.log``):
    delivery works out of the box without a mail server. SMTP: ``TYPESTRICT_SMTP_HOST``,
    ``_PORT`` (25), ``_SENDER``, ``_USER``, ``_PASSWORD``, ``_STARTTLS`` (1/true/yes).

    >>> transport_from_env(environ={"TYPESTRICT_NOTIFY_TRANSPORT": "none"}) is None
    True
    >>> transport_from_env(environ={"TYPESTRICT_SMTP_HOST": "mail", "TYPESTRICT_SMTP_PORT": "2525"}).port
    2525
    >>> transport_from_env(environ={"TYPESTRICT_HOME": "/srv/ts"}).path
    PosixPath('/srv/ts/notifications.log')
    """
    from typestrict_pipeline.errors import InputError

    env = dict(os.environ) if environ is None else environ
    implied = ("smtp" if env.get("TYPESTRICT_SMTP_HOST")
               else "webhook" if env.get("TYPESTRICT_NOTIFY_WEBHOOK") else "file")
    chosen = (kind or env.get("TYPESTRICT_NOTIFY_TRANSPORT") or implied).lower()
    if chosen == "none":
        return None
    if chosen == "file":
        explicit = env.get("TYPESTRICT_NOTIFY_FILE")
        from typestrict_pipeline.store import typestrict_home

        return FileTransport(Path(explicit).resolve() if explicit else typestrict_home(env) / "notifications.log")
    if chosen == "webhook":
        url = env.get("TYPESTRICT_NOTIFY_WEBHOOK")
        if not url:
            raise InputError("a webhook URL in TYPESTRICT_NOTIFY_WEBHOOK", "none", "set it, or use the file transport")
        return WebhookTransport(url)
    if chosen != "smtp":
        raise InputError("TYPESTRICT_NOTIFY_TRANSPORT file, smtp, webhook or none", repr(chosen), "fix the variable")
    port = env.get("TYPESTRICT_SMTP_PORT", "25")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError("TYPESTRICT_SMTP_PORT between 1 and 65535", repr(port), "fix the variable")
    return SmtpTransport(
        host=env.get("TYPESTRICT_SMTP_HOST", "127.0.0.1"),
        port=int(port),
        sender=env.get("TYPESTRICT_SMTP_SENDER", "typestrict@localhost"),
        starttls=env.get("TYPESTRICT_SMTP_STARTTLS", "").lower() in ("1", "true", "yes"),
        username=env.get("TYPESTRICT_SMTP_USER"),
        password=env.get("TYPESTRICT_SMTP_PASSWORD"),
    )


def transport_label(transport: Transport | None, *, customer: bool = False) -> str:
    """Where messages go, in words: the operator's (the file's path, the webhook's URL), or with
    ``customer`` as a workspace's console says it: the kind of delivery and, for email and a
    webhook, the host; never the server's paths, a URL's path or query (where a webhook's secret
    token usually is), a user or a password.

    >>> transport_label(SmtpTransport("mail", 25, "a@x")), transport_label(None)
    ('email over SMTP (mail:25)', 'nowhere: kept in the outbox (TYPESTRICT_NOTIFY_TRANSPORT=none)')
    >>> transport_label(WebhookTransport("https://hooks.example.com/services/T0/B0/s3cret"), customer=True)
    'a webhook (hooks.example.com)'
    >>> transport_label(FileTransport(Path("/srv/typestrict/home/notifications.log")), customer=True)
    'a file on the server (notifications.log)'
    >>> transport_label(None, customer=True)
    'nowhere: kept in the outbox (delivery is turned off on the server)'
    """
    if transport is None:
        return "nowhere: kept in the outbox " + (
            "(delivery is turned off on the server)" if customer else "(TYPESTRICT_NOTIFY_TRANSPORT=none)")
    if isinstance(transport, FileTransport):
        return f"a file on the server ({transport.path.name})" if customer else f"the file {transport.path}"
    if isinstance(transport, SmtpTransport):
        return f"email over SMTP ({transport.host}" + ("" if customer else f":{transport.port}") + ")"
    if isinstance(transport, WebhookTransport):
        host = urllib.parse.urlsplit(transport.url).hostname or "no host"
        return f"a webhook ({host if customer else transport.url})"
    return type(transport).__name__


@dataclass(frozen=True)
class OutboxEntry:
    """One message of the outbox as the CLI and the UI show it."""

    id: int
    state: OutboxState
    recipient: str
    subject: str
    attempts: int
    created_at: dt.datetime
    sent_at: dt.datetime | None
    next_attempt_at: dt.datetime | None
    last_error: str | None

    def line(self, *, customer: bool = False) -> str:
        """One line: id, state, recipient, subject, and why it is not delivered yet (``customer``:
        as a workspace sees it, the error :func:`for_customers` and no operator's command)."""
        head = f"#{self.id} {self.state.value:<7} {self.recipient}: {self.subject}"
        if self.state is OutboxState.SENT:
            when = self.sent_at.strftime("%Y-%m-%d %H:%M UTC") if self.sent_at else "?"
            return f"{head} (delivered {when})"
        error = for_customers(self.last_error) if customer and self.last_error else self.last_error
        why = f"not delivered yet after {self.attempts} attempt(s): {error}" if error else "waiting"
        if self.state is OutboxState.DEAD:
            again = ("the server's operator can send it again" if customer
                     else f"typestrict schedule deliver --requeue {self.id}")
            why = f"given up after {self.attempts} attempts: {error} ({again})"
        elif self.next_attempt_at is not None and self.last_error:
            why += f"; next attempt {self.next_attempt_at.strftime('%Y-%m-%d %H:%M UTC')}"
        return f"{head} ({why})"


def outbox(engine: Engine, *, undelivered_only: bool = False, limit: int = 50) -> list[OutboxEntry]:
    """The newest messages of the outbox (or only those not delivered), newest first."""
    q = select(OutboxMessage).order_by(OutboxMessage.id.desc()).limit(limit)
    if undelivered_only:
        q = q.where(OutboxMessage.state != OutboxState.SENT)
    with session_scope(engine) as session:
        return [
            OutboxEntry(r.id, r.state, r.recipient, r.subject, r.attempts, r.created_at, r.sent_at,
                        r.next_attempt_at, r.last_error)
            for r in session.execute(q).scalars().all()
        ]
