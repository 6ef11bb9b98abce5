"""Every tick explains itself; workspace state is said where it matters; notifications work out of the box."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from assets.reruns import enable_study_schedule_job, study_rerun_job, study_rerun_sensor
from resources.reruns import RerunNotifierResource, RerunSettingsResource
from resources.store import StoreResource
from typestrict_pipeline.cli import main
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.notify import FileTransport, enqueue, outbox, transport_from_env
from typestrict_pipeline.reruns.service import enable_schedule, list_schedules
from typestrict_pipeline.reruns.studies import record_data_end
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store

WS = "demo"
ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def root_study(url: str, *, workspace: bool) -> str:
    engine = open_store(url)
    if workspace:
        set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    root = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=1_000_000,
                                      min_unseen_steps=10, workflow=scenario.backend(shift_at=ROOT_END - 10 * DAY))
    scenario.run(engine, root)
    engine.dispose()
    return root


def test_a_fired_tick_carries_its_reason_and_the_lineage_to_the_run(
        sqlite_url: str, tmp_path: Path, ephemeral_instance: dg.DagsterInstance) -> None:
    root = root_study(sqlite_url, workspace=True)
    engine = open_store(sqlite_url)
    sched = enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1h", owner="ana@example.com", now=T0)
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 12 * DAY)
    instance = ephemeral_instance
    resources = {"store": StoreResource(url=sqlite_url), "reruns": RerunSettingsResource(now=T0.isoformat())}
    data = study_rerun_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=resources))
    assert data.run_requests is not None and len(data.run_requests) == 1
    req = data.run_requests[0]
    reason = req.tags["typestrict/reason"]
    assert reason.startswith("Fired re-run #1: scored on 2015-02-")
    assert reason.endswith(f"Lineage: typestrict schedule lineage {root}, or the study_lineage asset, partition {root}")
    assert req.tags["typestrict/lineage"] == root and req.tags["typestrict/rerun"] == "1"
    assert req.tags["typestrict/schedule"] == str(sched.id)
    # The run keeps the tags; its log starts with the reason; its materializations link the lineage.
    log_file = tmp_path / "notifications.log"
    notifier = RerunNotifierResource(transport="file", file=str(log_file))
    result = study_rerun_job.execute_in_process(
        run_config={**req.run_config, **QUIET}, instance=instance,
        tags={**req.tags, "dagster/run_key": str(req.run_key)},
        resources={**resources, "reruns_notifier": notifier})
    assert result.success and result.dagster_run.tags["typestrict/reason"] == reason
    logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any(f"launched by study_rerun_sensor: {reason}" in m for m in logs)
    lineage = [m for m in result.asset_materializations_for_node("run_scheduled_rerun")
               if m.asset_key == dg.AssetKey(["study_lineage"])]
    assert lineage and lineage[0].partition == root
    # The winner changed: delivered to the notifications file without any mail server.
    assert "A scheduled study changes its winner" in log_file.read_text()
    assert result.output_for_node("run_scheduled_rerun")["delivered"] == 1
    engine.dispose()


def test_never_set_up_and_expired_are_told_apart(
        sqlite_url: str, capsys: pytest.CaptureFixture[str], ephemeral_instance: dg.DagsterInstance) -> None:
    root = root_study(sqlite_url, workspace=False)
    # `schedule enable` succeeds (the schedule resumes by itself) but warns, naming the command.
    assert main(["schedule", "enable", root, "--cadence", "1h", "--owner", "ana@example.com", "--url", sqlite_url]) == 0
    err = capsys.readouterr().err
    assert "workspace demo has no subscription yet (never set up)" in err
    assert "typestrict schedule workspace demo --subscription ACTIVE --budget-usd 50" in err
    assert main(["schedule", "status", "--url", sqlite_url]) == 0
    assert "workspace: workspace demo has no subscription yet (never set up)" in capsys.readouterr().out
    engine = open_store(sqlite_url)
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 12 * DAY)
    resources = {"store": StoreResource(url=sqlite_url), "reruns": RerunSettingsResource()}
    instance = ephemeral_instance
    first = study_rerun_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=resources))
    assert (first.skip_message or "").startswith(
        "Workspace subscription never set up: typestrict schedule workspace demo --subscription ACTIVE --budget-usd 50 sets it")
    set_workspace(engine, WS, subscription=SubscriptionState.EXPIRED, usage_budget_micro_usd=50_000_000)
    later = RerunSettingsResource(now=(dt.datetime.now(dt.UTC) + 2 * HOUR).isoformat())
    nxt = study_rerun_sensor.evaluate_tick(dg.build_sensor_context(
        instance=instance, cursor=first.cursor, resources={**resources, "reruns": later}))
    assert (nxt.skip_message or "").startswith("Workspace subscription expired")
    # The launchpad job says it too (a warning in the log, and the op's metadata).
    [sched] = list_schedules(engine)
    assert main(["schedule", "cancel", str(sched.id), "--by", "ana@example.com", "--url", sqlite_url]) == 0
    res = enable_study_schedule_job.execute_in_process(
        run_config={"ops": {"enable_study_schedule": {"config": {"study_id": root, "cadence": "1h",
                                                                 "owner": "ana@example.com"}}}, **QUIET},
        instance=instance, resources=resources)
    [output] = [e for e in res.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    assert "subscription expired" in str(output.event_specific_data.metadata["workspace"].value)  # type: ignore[union-attr]
    engine.dispose()


def test_notifications_default_to_a_file_and_undelivered_ones_say_why(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    for var in ("TYPESTRICT_NOTIFY_TRANSPORT", "TYPESTRICT_SMTP_HOST", "TYPESTRICT_NOTIFY_WEBHOOK",
                "TYPESTRICT_NOTIFY_FILE"):
        monkeypatch.delenv(var, raising=False)
    transport = transport_from_env()
    assert isinstance(transport, FileTransport) and transport.path == tmp_path / "notifications.log"
    engine = open_store(sqlite_url)
    enqueue(engine, dedupe_key="a", kind="study_winner_changed", recipient="ana@example.com", subject="One", body="b")
    assert main(["schedule", "deliver", "--url", sqlite_url]) == 0
    assert "Subject: One" in (tmp_path / "notifications.log").read_text()
    # SMTP by configuration: nothing listens on the port, so the message stays, with its reason.
    monkeypatch.setenv("TYPESTRICT_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("TYPESTRICT_SMTP_PORT", "9")
    enqueue(engine, dedupe_key="b", kind="study_winner_changed", recipient="ana@example.com", subject="Two", body="b")
    assert main(["schedule", "deliver", "--url", sqlite_url]) == 0
    capsys.readouterr()
    assert main(["schedule", "outbox", "--url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "Notifications are delivered to email over SMTP (127.0.0.1:9)" in out
    assert "SENT    ana@example.com: One (delivered" in out
    assert "PENDING ana@example.com: Two (not delivered yet after 1 attempt(s): ConnectionRefusedError" in out
    [waiting] = outbox(engine, undelivered_only=True)
    assert waiting.subject == "Two" and waiting.last_error is not None
    engine.dispose()
