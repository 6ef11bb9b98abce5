"""Resources of the reruns area: the re-run settings (key ``reruns``) and the notifier (``reruns_notifier``).

Nothing is read at import. Settings left empty are read from the environment when a run or a
tick uses the resource:

* ``TYPESTRICT_NOTIFY_TRANSPORT`` (``smtp`` default, ``webhook``, or ``none`` to keep messages
  in the outbox), ``TYPESTRICT_SMTP_HOST`` / ``_PORT`` / ``_SENDER`` / ``_USER`` /
  ``_PASSWORD`` / ``_STARTTLS``, ``TYPESTRICT_NOTIFY_WEBHOOK``.

Test implementations are the same classes pointed at real local servers
(:class:`typestrict_pipeline.reruns.sinks.LocalSmtpServer`, ``LocalWebhookServer``), and a fixed
clock (``now``) so a test or the demo can step through cadence slots.
"""

import datetime as dt
import os
from typing import Any

import dagster as dg
from sqlalchemy import Engine

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.reruns.notify import (
    DeliveryReport,
    SmtpTransport,
    Transport,
    WebhookTransport,
    deliver_pending,
)
from typestrict_pipeline.reruns.studies import StoreStudies
from typestrict_pipeline.reruns.workspace import SpendSource, store_spend_source
from typestrict_pipeline.store import utcnow


class RerunSettingsResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """How ticks and re-runs see the world.

    Attributes:
        now: a fixed current time (ISO 8601, aware) for tests and the demo; None: the real clock.
        max_workers: threads of the in-process study runner used by a re-run.
    """

    now: str | None = None
    max_workers: int = 2

    def current_time(self) -> dt.datetime:
        """The current time (aware UTC)."""
        if self.now is None:
            return utcnow()
        t = dt.datetime.fromisoformat(self.now)
        if t.tzinfo is None:
            raise InputError("an aware ISO time for reruns.now", repr(self.now), "add +00:00")
        return t.astimezone(dt.UTC)

    def studies(self, engine: Engine) -> StoreStudies:
        """The studies port on ``engine`` (each study runs on the backend it stores)."""
        return StoreStudies(engine, max_workers=self.max_workers)

    def spend(self, engine: Engine) -> SpendSource:
        """Workspace spend: usage records of live runs and backtests, plus studies' spend."""
        return store_spend_source(engine)


class RerunNotifierResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Delivers the outbox through SMTP or a webhook.

    Attributes:
        transport: ``smtp``, ``webhook`` or ``none`` (keep in the outbox); None: from the environment.
        smtp_host, smtp_port, sender, smtp_user, smtp_password, smtp_starttls: SMTP settings.
        webhook_url: the webhook endpoint.
        max_attempts: attempts before a message is marked ``DEAD``.
    """

    transport: str | None = None
    smtp_host: str | None = None
    smtp_port: int | None = None
    sender: str | None = None
    smtp_user: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool | None = None
    webhook_url: str | None = None
    max_attempts: int = 8

    def kind(self) -> str:
        """The transport in use."""
        kind = (self.transport or os.environ.get("TYPESTRICT_NOTIFY_TRANSPORT") or "smtp").lower()
        if kind not in ("smtp", "webhook", "none"):
            raise InputError("transport smtp, webhook or none", repr(kind), "fix TYPESTRICT_NOTIFY_TRANSPORT")
        return kind

    def build_transport(self) -> Transport | None:
        """The configured transport (None for ``none``)."""
        kind = self.kind()
        if kind == "none":
            return None
        if kind == "webhook":
            url = self.webhook_url or os.environ.get("TYPESTRICT_NOTIFY_WEBHOOK")
            if not url:
                raise InputError("a webhook URL", "none", "set TYPESTRICT_NOTIFY_WEBHOOK or webhook_url")
            return WebhookTransport(url)
        env = os.environ
        return SmtpTransport(
            host=self.smtp_host or env.get("TYPESTRICT_SMTP_HOST", "127.0.0.1"),
            port=int(self.smtp_port or env.get("TYPESTRICT_SMTP_PORT", "25")),
            sender=self.sender or env.get("TYPESTRICT_SMTP_SENDER", "typestrict@localhost"),
            starttls=bool(self.smtp_starttls if self.smtp_starttls is not None
                          else env.get("TYPESTRICT_SMTP_STARTTLS", "") in ("1", "true", "yes")),
            username=self.smtp_user or env.get("TYPESTRICT_SMTP_USER"),
            password=self.smtp_password or env.get("TYPESTRICT_SMTP_PASSWORD"),
        )

    def deliver(self, engine: Engine, now: dt.datetime | None = None) -> DeliveryReport:
        """Send what is due in the outbox (failures stay queued and are retried later)."""
        transport = self.build_transport()
        if transport is None:
            return DeliveryReport()
        return deliver_pending(engine, transport, now=now, max_attempts=self.max_attempts)


def default_resources() -> dict[str, Any]:
    """``reruns`` (settings, real clock) and ``reruns_notifier`` (from the environment)."""
    return {"reruns": RerunSettingsResource(), "reruns_notifier": RerunNotifierResource()}
