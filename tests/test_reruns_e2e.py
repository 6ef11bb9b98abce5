"""End to end on the real PostgreSQL server: a root study finishes, a schedule is enabled from the
launchpad, data arrive below the minimum (skip, with the counts), then enough (a re-run fires
once, its windows are new, the lineage has two entries, the owner is notified once by real SMTP);
and the store's once-only guarantees under truly concurrent evaluators."""

from __future__ import annotations

import datetime as dt
import threading

import dagster as dg
import pytest
from sqlalchemy import func, select

from assets.reruns import enable_study_schedule_job, study_rerun_job, study_rerun_sensor
from resources.reruns import RerunNotifierResource, RerunSettingsResource
from resources.store import StoreResource
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import (
    RerunRecord,
    TickResult,
    enable_schedule,
    evaluate_schedule,
    execute_rerun,
    lineage_entries,
)
from typestrict_pipeline.reruns.sinks import LocalSmtpServer
from typestrict_pipeline.reruns.studies import record_data_end
from typestrict_pipeline.reruns.tables import LineageRow, OutboxMessage
from typestrict_pipeline.reruns.workspace import set_workspace, store_spend_source
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.folds import FoldLayout
from typestrict_pipeline.study.tables import StudyRow

WS = "demo"
ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
OWNER = "ana@example.com"


@pytest.mark.slow
def test_end_to_end_skip_then_fire_once_then_notify_once(pg_url: str) -> None:
    engine = open_store(pg_url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)
    root = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=1_000_000,
                                      min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, root)

    with LocalSmtpServer() as smtp, dg.instance_for_test() as instance:
        def resources(now: dt.datetime) -> dict[str, object]:
            return {
                "store": StoreResource(url=pg_url),
                "reruns": RerunSettingsResource(now=now.isoformat()),
                "reruns_notifier": RerunNotifierResource(transport="smtp", smtp_host=smtp.host, smtp_port=smtp.port,
                                                         sender="typestrict@localhost"),
            }

        def tick(now: dt.datetime, cursor: str | None):  # -> dagster SensorExecutionData (not exported)
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources(now))
            return study_rerun_sensor.evaluate_tick(ctx)

        enabled = enable_study_schedule_job.execute_in_process(
            run_config={"ops": {"enable_study_schedule": {"config": {"study_id": root, "cadence": "1h", "owner": OWNER}}}},
            instance=instance, resources=resources(T0))
        schedule_id = enabled.output_for_node("enable_study_schedule")

        record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 7 * DAY)  # 7 new steps: below the minimum
        first = tick(T0, None)
        assert (first.skip_message or "").startswith("Not enough unseen data yet: 7 of 10 steps")
        assert first.run_requests == []

        record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 12 * DAY)  # 12 new steps: enough
        second = tick(T0 + HOUR, first.cursor)
        assert len(second.run_requests) == 1
        request = second.run_requests[0]
        assert request.run_key == f"study-rerun:{root}:1"
        assert tick(T0 + HOUR + 5 * dt.timedelta(minutes=1), second.cursor).run_requests == []  # same slot: once

        run = study_rerun_job.execute_in_process(run_config=request.run_config, instance=instance,
                                                 tags={**request.tags, "dagster/run_key": request.run_key},
                                                 resources=resources(T0 + HOUR))
        assert run.success
        out = run.output_for_node("run_scheduled_rerun")
        assert out["winner_changed"] is True and out["notified"] is True and out["delivered"] == 1

        third = tick(T0 + 2 * HOUR, second.cursor)  # nothing new since the re-run's holdout
        assert (third.skip_message or "").startswith("Not enough unseen data yet: 0 of 10 steps")

        again = study_rerun_job.execute_in_process(run_config=request.run_config, instance=instance,
                                                   resources=resources(T0 + 2 * HOUR))
        assert again.output_for_node("run_scheduled_rerun")["study_id"] == out["study_id"]
        mails = smtp.messages

    # The re-run's windows: its holdout is new; its folds may learn from the previous holdout.
    with session_scope(engine) as s:
        root_row = s.get(StudyRow, int(root))
        child = s.get(StudyRow, int(out["study_id"]))
        assert root_row is not None and child is not None
        assert s.execute(select(func.count()).select_from(StudyRow)).scalar_one() == 2  # ran once
        assert child.holdout_start >= root_row.holdout_end
        assert (child.holdout_start, child.holdout_end) == (ROOT_END + 2 * DAY, ROOT_END + 12 * DAY)
        layout = FoldLayout.from_json(child.layout_json)
        assert layout.folds[-1].eval.end <= child.holdout_start - layout.embargo_steps * DAY
        assert layout.folds[-1].eval.start < root_row.holdout_end  # learns from the spent holdout
        assert child.budget_micro == root_row.budget_micro
    entries = lineage_entries(engine, root)
    assert [(e.seq, e.winner, e.winner_changed) for e in entries] == [(0, "arm=steady", None), (1, "arm=late", True)]
    assert len(mails) == 1 and mails[0].recipients == [OWNER]
    assert mails[0].message["Subject"] == "A scheduled study changes its winner"
    assert schedule_id >= 1


def test_concurrent_evaluators_claim_once_and_run_once_on_postgres(pg_url: str) -> None:
    engine = open_store(pg_url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)
    root = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=1_000_000,
                                      min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, root)
    port = scenario.port(engine)
    sched = enable_schedule(engine, port, study_id=root, cadence="1h", owner=OWNER, now=T0)
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 10 * DAY)
    spend = store_spend_source(engine)

    n = 6
    barrier = threading.Barrier(n)
    results: list[TickResult | None] = []
    lock = threading.Lock()

    def evaluator() -> None:
        barrier.wait()
        r = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="race", slot=0)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=evaluator) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fired = [r for r in results if r is not None]
    assert len(fired) == 1  # the slot is evaluated once
    key = fired[0].run_key
    assert key is not None  # the one evaluation that took the slot fired

    barrier2 = threading.Barrier(3)
    records: list[RerunRecord] = []

    def runner() -> None:
        barrier2.wait()
        rec = execute_rerun(engine, port, key)
        with lock:
            records.append(rec)

    threads = [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with session_scope(engine) as s:
        assert s.execute(select(func.count()).select_from(StudyRow)).scalar_one() == 2  # one re-run study
        assert s.execute(select(func.count()).select_from(LineageRow)).scalar_one() == 2
        assert s.execute(select(func.count()).select_from(OutboxMessage)).scalar_one() == 1
    assert sum(1 for r in records if r.notified) == 1
