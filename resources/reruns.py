"""Resources of the reruns area: the re-run settings (key ``reruns``) and the notifier (``reruns_notifier``).

Nothing is read at import. Settings left empty are read from the environment when a run or a
tick uses the resource:

* ``TYPESTRICT_NOTIFY_TRANSPORT``: ``file`` (the default: ``TYPESTRICT_NOTIFY_FILE``, else
  ``${TYPESTRICT_HOME}/notifications.log``; no mail server needed), ``smtp`` (implied when
  ``TYPESTRICT_SMTP_HOST`` is set), ``webhook`` (implied by ``TYPESTRICT_NOTIFY_WEBHOOK``), or
  ``none`` to keep messages in the outbox; ``TYPESTRICT_SMTP_HOST`` / ``_PORT`` / ``_SENDER`` /
  ``_USER`` / ``_PASSWORD`` / ``_STARTTLS``.

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
    Transport,
    deliver_pending,
    transport_from_env,
)
from typestrict_pipeline.reruns.studies import StoreStudies
from typestrict_pipeline.reruns.workspace import SpendSource, store_spend_source
from typestrict_pipeline.store import utcnow


class RerunSettingsResource(dg.ConfigurableResource["RerunSettingsResource"]):
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


class RerunNotifierResource(dg.ConfigurableResource["RerunNotifierResource"]):
    """Delivers the outbox through SMTP or a webhook.

    Attributes:
        transport: ``file``, ``smtp``, ``webhook`` or ``none`` (keep in the outbox); None: from the
            environment (``file`` unless SMTP or a webhook is configured there).
        file: the notifications file of the ``file`` transport (default
            ``${TYPESTRICT_HOME}/notifications.log``).
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
    file: str | None = None
    max_attempts: int = 8

    def build_transport(self) -> Transport | None:
        """The configured transport (None for ``none``): fields set here override the environment."""
        env = dict(os.environ)
        overrides = {
            "TYPESTRICT_NOTIFY_TRANSPORT": self.transport,
            "TYPESTRICT_SMTP_HOST": self.smtp_host,
            "TYPESTRICT_SMTP_PORT": None if self.smtp_port is None else str(self.smtp_port),
            "TYPESTRICT_SMTP_SENDER": self.sender,
            "TYPESTRICT_SMTP_USER": self.smtp_user,
            "TYPESTRICT_SMTP_PASSWORD": self.smtp_password,
            "TYPESTRICT_SMTP_STARTTLS": None if self.smtp_starttls is None else str(self.smtp_starttls).lower(),
            "TYPESTRICT_NOTIFY_WEBHOOK": self.webhook_url,
            "TYPESTRICT_NOTIFY_FILE": self.file,
        }
        env.update({k: v for k, v in overrides.items() if v is not None})
        return transport_from_env(environ=env)

    def deliver(self, engine: Engine, now: dt.datetime | None = None) -> DeliveryReport:
        """Send what is due in the outbox (failures stay queued and are retried later)."""
        transport = self.build_transport()
        if transport is None:
            return DeliveryReport()
        return deliver_pending(engine, transport, now=now, max_attempts=self.max_attempts)


def default_resources() -> dict[str, Any]:
    """``reruns`` (settings, real clock) and ``reruns_notifier`` (from the environment)."""
    return {"reruns": RerunSettingsResource(), "reruns_notifier": RerunNotifierResource()}
