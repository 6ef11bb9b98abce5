"""The notifier: stored outbox, real SMTP and webhook delivery to local servers, retries, once-only."""

from __future__ import annotations

import datetime as dt
import threading

from sqlalchemy import select

from typestrict_pipeline.reruns.notify import (
    KIND_WINNER_CHANGED,
    TITLE_WINNER_CHANGED,
    SmtpTransport,
    WebhookTransport,
    deliver_pending,
    enqueue,
    requeue,
)
from typestrict_pipeline.reruns.sinks import LocalSmtpServer, LocalWebhookServer
from typestrict_pipeline.reruns.tables import OutboxMessage, OutboxState
from typestrict_pipeline.store import open_store, session_scope

T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)


def _enqueue(engine, key: str = "winner-changed:1", to: str = "ana@example.com") -> bool:
    return enqueue(engine, dedupe_key=key, kind=KIND_WINNER_CHANGED, recipient=to,
                   subject=TITLE_WINNER_CHANGED, body="Re-run #1 picked arm=late.", now=T0)


def _states(engine) -> list[tuple[str, OutboxState, int]]:
    with session_scope(engine) as s:
        return [(m.dedupe_key, m.state, m.attempts) for m in s.execute(select(OutboxMessage).order_by(OutboxMessage.id)).scalars()]


def test_smtp_delivery_to_a_real_local_server(store_url: str) -> None:
    engine = open_store(store_url)
    assert _enqueue(engine) is True
    assert _enqueue(engine) is False  # the same event never queues twice
    with LocalSmtpServer() as server:
        transport = SmtpTransport(server.host, server.port, sender="typestrict@localhost")
        report = deliver_pending(engine, transport, now=T0)
        again = deliver_pending(engine, transport, now=T0 + dt.timedelta(hours=1))
        mails = server.messages
    assert len(report.sent) == 1 and again.sent == []
    assert len(mails) == 1 and mails[0].recipients == ["ana@example.com"]
    msg = mails[0].message
    assert msg["Subject"] == "A scheduled study changes its winner"
    assert msg["Message-ID"] == "<winner-changed.1@typestrict>"
    assert "arm=late" in msg.get_payload()
    assert _states(engine) == [("winner-changed:1", OutboxState.SENT, 1)]


def test_failed_delivery_is_kept_and_retried_with_backoff(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    _enqueue(engine)
    with LocalSmtpServer() as server:
        transport = SmtpTransport(server.host, server.port, sender="typestrict@localhost")
        server.fail_next(1)  # 451 temporary failure
        first = deliver_pending(engine, transport, now=T0)
        assert first.sent == [] and len(first.failed) == 1 and "451" in first.failed[0][1]
        assert _states(engine) == [("winner-changed:1", OutboxState.PENDING, 1)]
        too_early = deliver_pending(engine, transport, now=T0 + dt.timedelta(seconds=29))
        assert too_early.sent == [] and too_early.failed == []
        second = deliver_pending(engine, transport, now=T0 + dt.timedelta(seconds=30))
        assert len(second.sent) == 1
        assert len(server.messages) == 1
    assert _states(engine) == [("winner-changed:1", OutboxState.SENT, 2)]


def test_unreachable_server_then_dead_then_requeued(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    _enqueue(engine)
    with LocalSmtpServer() as probe:
        port = probe.port  # a port nobody listens on once closed
    down = SmtpTransport("127.0.0.1", port, sender="typestrict@localhost", timeout_seconds=2)
    at = T0
    for _ in range(3):
        deliver_pending(engine, down, now=at, max_attempts=3)
        at += dt.timedelta(hours=2)
    assert _states(engine) == [("winner-changed:1", OutboxState.DEAD, 3)]
    with session_scope(engine) as s:
        row = s.execute(select(OutboxMessage)).scalar_one()
        assert row.last_error and "Connection" in row.last_error
        mid = row.id
    requeue(engine, mid, now=at)
    with LocalSmtpServer() as server:
        report = deliver_pending(engine, SmtpTransport(server.host, server.port, "typestrict@localhost"), now=at)
        assert len(report.sent) == 1 and len(server.messages) == 1


def test_webhook_delivery_and_retry(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    _enqueue(engine)
    with LocalWebhookServer() as hook:
        hook.fail_next(1)
        transport = WebhookTransport(hook.url)
        first = deliver_pending(engine, transport, now=T0)
        assert first.sent == [] and "503" in first.failed[0][1]
        second = deliver_pending(engine, transport, now=T0 + dt.timedelta(minutes=1))
        assert len(second.sent) == 1
        received = hook.received
    assert len(received) == 1
    assert received[0]["subject"] == TITLE_WINNER_CHANGED and received[0]["recipient"] == "ana@example.com"


def test_concurrent_deliverers_send_each_message_once_on_postgres(pg_url: str) -> None:
    engine = open_store(pg_url)
    for i in range(30):
        _enqueue(engine, key=f"winner-changed:{i}", to=f"user{i}@example.com")
    with LocalSmtpServer() as server:
        barrier = threading.Barrier(4)

        def worker() -> None:
            transport = SmtpTransport(server.host, server.port, sender="typestrict@localhost")
            barrier.wait()
            deliver_pending(engine, transport, now=T0)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = sorted(m.message["Message-ID"] for m in server.messages)
    assert len(ids) == 30 and len(set(ids)) == 30
    assert {state for _, state, _ in _states(engine)} == {OutboxState.SENT}
