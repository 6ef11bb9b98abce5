"""``typestrict schedule ...`` in process: enable, skip reasons under the schedule, tick, lineage, workspace."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.sinks import LocalSmtpServer
from typestrict_pipeline.store import open_store

ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def _root(url: str, budget: int | None) -> str:
    engine = open_store(url)
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)
    sid = scenario.create_root_study(engine, workspace="demo", root_end=ROOT_END, budget_micro_usd=budget,
                                     min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, sid)
    return sid


def test_schedule_commands(sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    u = ["--url", sqlite_url]
    root = _root(sqlite_url, 1_000_000)
    no_budget = _root(sqlite_url.replace("store.db", "other.db"), None)
    assert main(["schedule", "workspace", "demo", "--subscription", "ACTIVE", "--budget-usd", "50", *u]) == 0
    assert "subscription ACTIVE; usage $0.0012 of $50.00" in capsys.readouterr().out

    assert main(["schedule", "enable", no_budget, "--owner", "ana@example.com",
                 "--url", sqlite_url.replace("store.db", "other.db")]) == 2
    assert "The root study has no USD budget" in capsys.readouterr().err

    assert main(["study", "schedule", "enable", root, "--cadence", "1h", "--owner", "ana@example.com",
                 "--store-url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "Schedule 1: re-run study 1 every 1h — ENABLED" in out and "set up by ana@example.com" in out

    assert main(["schedule", "data-arrived", "demo", scenario.WORKFLOW, "2015-02-08", *u]) == 0
    now = dt.datetime.now(dt.UTC)
    assert main(["schedule", "tick", "--now", now.isoformat(), *u]) == 0
    assert "schedule 1: skipped: Not enough unseen data yet: 7 of 10 steps" in capsys.readouterr().out
    assert main(["schedule", "status", *u]) == 0
    status = capsys.readouterr().out
    assert "  last decision: skipped at " in status and ": Not enough unseen data yet: 7 of 10 steps" in status
    # the timeline: when it is evaluated next, and what would make it fire
    assert "  next evaluation: " in status and "(every 1h)" in status
    assert ("  fires: needs 3 more steps (has 7 of 10); the data end at 2015-02-07; record arrivals: "
            f"typestrict schedule data-arrived demo {scenario.WORKFLOW} END") in status
    assert main(["schedule", "status", "--json", *u]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["timeline"]["next_evaluation_at"] is not None and shown["timeline"]["needed_steps"] == 3
    assert main(["study", "status", root, *u]) == 0  # the same, under `typestrict study`: by study id
    assert capsys.readouterr().out == status

    assert main(["schedule", "data-arrived", "demo", scenario.WORKFLOW, "2015-02-11", *u]) == 0
    with LocalSmtpServer() as smtp:
        monkeypatch.setenv("TYPESTRICT_NOTIFY_TRANSPORT", "smtp")
        monkeypatch.setenv("TYPESTRICT_SMTP_HOST", smtp.host)
        monkeypatch.setenv("TYPESTRICT_SMTP_PORT", str(smtp.port))
        assert main(["schedule", "tick", "--run", "--now", (now + dt.timedelta(hours=1)).isoformat(), *u]) == 0
        out = capsys.readouterr().out
        assert "schedule 1: fired:" in out and "winner arm=late (winner changed)" in out
        assert "notifications: 1 sent" in out
        assert [m.message["Subject"] for m in smtp.messages] == ["A scheduled study changes its winner"]

    assert main(["study", "lineage", root, *u]) == 0
    panel = capsys.readouterr().out
    assert "Lineage of study 1" in panel and "arm=steady" in panel and "arm=late" in panel
    assert "Best expected of 2 under noise" in panel

    # The study's leaderboard prints the lineage panel under it (the root and the re-run alike),
    # and both write a holdout the same way: its first and last step.
    from typestrict_pipeline.reruns.service import lineage_entries

    windows = {e.study_id: e.window for e in lineage_entries(open_store(sqlite_url), root)}
    for sid in (root, "2"):
        assert main(["study", "leaderboard", sid, "--store-url", sqlite_url]) == 0
        board = capsys.readouterr().out
        assert f" on {windows[sid]} (" in board, (windows[sid], board[:1500])
        assert board.index("| Rank | Candidate |") < board.index("Lineage of study 1")
        assert "holdout − baseline" in board and "Best expected of 2 under noise" in board
        assert "Winner changed" in board and "arm=late" in board
    assert main(["study", "leaderboard", root, "--json", "--store-url", sqlite_url]) == 0
    lineage = json.loads(capsys.readouterr().out)["lineage"]
    assert lineage["summary"]["k"] == 2 and len(lineage["entries"]) == 2

    assert main(["schedule", "notifications", "ana@example.com", "--off", *u]) == 0
    assert "'A scheduled study changes its winner' off" in capsys.readouterr().out
    assert main(["schedule", "cancel", "1", "--by", "bo@example.com", *u]) == 0
    assert "cancelled by bo@example.com" in capsys.readouterr().out


def test_deliver_requeues_only_a_given_up_message(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``schedule deliver --requeue ID`` puts back a message that was given up, and nothing else:
    a delivered one was sent a second time, and an id no message has was said to be "back in the
    outbox" (exit 0, a "wrote" line)."""
    from sqlalchemy import update

    from typestrict_pipeline.reruns.notify import KIND_WINNER_CHANGED, TITLE_WINNER_CHANGED, enqueue
    from typestrict_pipeline.reruns.tables import OutboxMessage, OutboxState
    from typestrict_pipeline.store import session_scope

    log = tmp_path / "notifications.log"
    monkeypatch.setenv("TYPESTRICT_NOTIFY_TRANSPORT", "file")
    monkeypatch.setenv("TYPESTRICT_NOTIFY_FILE", str(log))
    engine = open_store(sqlite_url)
    for key in ("winner-changed:1", "winner-changed:2"):
        enqueue(engine, dedupe_key=key, kind=KIND_WINNER_CHANGED, recipient="ana@example.com",
                subject=TITLE_WINNER_CHANGED, body=f"{key}.", now=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    with session_scope(engine) as s:
        s.execute(update(OutboxMessage).where(OutboxMessage.id == 2).values(state=OutboxState.DEAD, attempts=8))
    engine.dispose()
    u = ["--store", sqlite_url]
    assert main(["schedule", "deliver", *u]) == 0  # message 1 is delivered
    sent = log.read_bytes()
    assert sent.count(b"winner-changed:1.") == 1
    capsys.readouterr()
    assert main(["schedule", "deliver", "--requeue", "1", *u]) == 2
    err = capsys.readouterr().err
    assert "expected a given-up message to put back in the outbox, got message 1 delivered at 20" in err, err
    assert main(["schedule", "deliver", "--requeue", "99", *u]) == 2
    assert "expected an existing message id, got 99. List them with `typestrict schedule outbox`" in capsys.readouterr().err
    assert log.read_bytes() == sent  # nothing delivered twice
    assert main(["schedule", "deliver", "--requeue", "2", *u]) == 0
    assert "wrote the delivery of message(s) 2" in capsys.readouterr().out
    assert log.read_bytes().count(b"winner-changed:2.") == 1
