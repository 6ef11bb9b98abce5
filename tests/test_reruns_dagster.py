"""The Dagster sensor and schedule that fire scheduled re-runs: every skip message, the firing case
(run key, cursor), the launchpad jobs, and the re-run job's lineage metadata."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import Engine, update

from assets.reruns import (
    LINEAGE_KEY,
    cancel_study_schedule_job,
    enable_study_schedule_job,
    rerun_run_config,
    study_rerun_job,
    study_rerun_schedule,
    study_rerun_sensor,
)
from resources.reruns import RerunNotifierResource, RerunSettingsResource
from resources.store import STORE_TAG, StoreResource, store_tags, with_store
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import enable_schedule, get_schedule, lineage_entries
from typestrict_pipeline.reruns.studies import record_data_end
from typestrict_pipeline.reruns.tables import LineageState, ScheduleState
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.tables import StudyRow

WS = "demo"
ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


@dataclass
class World:
    url: str
    engine: Engine
    root: str
    schedule_id: int
    instance: dg.DagsterInstance

    def resources(self, now: dt.datetime, **extra: Any) -> dict[str, Any]:
        return {"store": StoreResource(url=self.url), "reruns": RerunSettingsResource(now=now.isoformat()), **extra}

    def tick(self, now: dt.datetime, cursor: str | None = None) -> Any:
        ctx = dg.build_sensor_context(instance=self.instance, cursor=cursor, resources=self.resources(now))
        return study_rerun_sensor.evaluate_tick(ctx)

    def arrive(self, steps_after_root: int) -> None:
        record_data_end(self.engine, WS, scenario.WORKFLOW, ROOT_END + steps_after_root * DAY)


def _world(url: str, instance: dg.DagsterInstance, *, fail_from: dt.datetime | None = None,
           budget: int | None = 1_000_000) -> World:
    """A finished root study (holdout ends 2015-02-01, created an hour before T0), a schedule every
    hour from T0.

    The study's creation time is pinned: the usage budget counts a study's spend in the month it
    was created (UTC), and the ticks below evaluate at T0, whatever the day the suite runs on."""
    engine = open_store(url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)
    workflow.fail_from = fail_from
    root = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=budget,
                                      min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, root)
    with session_scope(engine) as s:  # the root study ran just before T0, so its spend is in T0's month
        s.execute(update(StudyRow).where(StudyRow.id == int(root)).values(created_at=T0 - HOUR))
    sched = enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1h", owner="ana@example.com", now=T0)
    return World(url, engine, root, sched.id, instance)


@pytest.fixture
def world(sqlite_url: str, ephemeral_instance: dg.DagsterInstance) -> Iterator[World]:
    yield _world(sqlite_url, ephemeral_instance)


def test_not_enough_unseen_data_with_the_real_counts(world: World) -> None:
    world.arrive(7)
    data = world.tick(T0)
    assert (data.skip_message or "").startswith("Not enough unseen data yet: 7 of 10 steps")
    assert data.run_requests == [] and data.cursor.split(";")[0] == f"{world.schedule_id}:0"
    # The same slot is not evaluated twice; the next slot is.
    assert (world.tick(T0 + 30 * dt.timedelta(minutes=1), cursor=data.cursor).skip_message or "").startswith("No re-run schedule is due")
    world.arrive(9)
    nxt = world.tick(T0 + HOUR, cursor=data.cursor)
    assert (nxt.skip_message or "").startswith("Not enough unseen data yet: 9 of 10 steps") and nxt.cursor.split(";")[0] == f"{world.schedule_id}:1"


def launched_job() -> dg.JobDefinition:
    """``study_rerun_job`` as the daemon launches it: the code location's, resources bound (so its
    run config may name the store the request carries)."""
    from typestrict_pipeline.definitions import defs

    return defs.resolve_job_def("study_rerun_job")


def test_fires_with_a_run_key_and_the_cursor(world: World) -> None:
    world.arrive(10)
    data = world.tick(T0)
    assert data.skip_message is None and len(data.run_requests) == 1
    req = data.run_requests[0]
    assert req.run_key == f"study-rerun:{world.root}:1"
    # The store the tick claimed the re-run in travels with the run (config and tag).
    assert req.run_config == with_store(rerun_run_config(req.run_key), world.url)
    assert req.tags[STORE_TAG] == store_tags(world.url)[STORE_TAG]
    assert req.tags["workflow"] == scenario.WORKFLOW and req.tags["typestrict/schedule"] == str(world.schedule_id)
    assert req.tags["mode"] == "HISTORICAL"  # the re-run's run is marked as a replay (issue 3/7)
    assert data.cursor.split(";")[0] == f"{world.schedule_id}:0"
    # Evaluating the same tick again (a retried daemon, a second evaluator) fires nothing new.
    assert (world.tick(T0).skip_message or "").startswith("No re-run schedule is due")
    # The daemon launches the run (a run carrying the run key exists, not finished yet) ...
    world.instance.create_run_for_job(launched_job(), run_config=req.run_config,
                                      tags={"dagster/run_key": req.run_key})
    # ... so at the next slot the workflow is in flight.
    nxt = world.tick(T0 + HOUR, cursor=data.cursor)
    assert (nxt.skip_message or "").startswith("A study or backtest was in flight") and nxt.run_requests == []
    assert get_schedule(world.engine, world.schedule_id).last_message == "A study or backtest was in flight"


def test_a_lost_run_request_is_asked_for_again_with_the_same_key(world: World) -> None:
    world.arrive(10)
    first = world.tick(T0)  # claimed in the store, but the daemon died before launching it
    later = world.tick(T0 + HOUR, cursor=first.cursor)
    assert [r.run_key for r in later.run_requests] == [first.run_requests[0].run_key]
    assert len(lineage_entries(world.engine, world.root)) == 2  # still one claimed re-run


def test_in_flight_when_another_study_runs_on_the_workflow(world: World) -> None:
    world.arrive(15)
    other = scenario.backend(shift_at=ROOT_END)
    scenario.create_root_study(world.engine, workspace=WS, root_end=ROOT_END + 5 * DAY, budget_micro_usd=None,
                               min_unseen_steps=5, workflow=other)  # created, holds the workflow's lock
    assert (world.tick(T0).skip_message or "").startswith("A study or backtest was in flight")


def test_previous_study_did_not_finish_then_reenable(sqlite_url: str, ephemeral_instance: dg.DagsterInstance) -> None:
    w = _world(sqlite_url, ephemeral_instance, fail_from=ROOT_END + DAY)  # the data source fails after the root's data
    w.arrive(10)
    fired = w.tick(T0)
    key = fired.run_requests[0].run_key
    with dg.instance_for_test() as instance:
        result = study_rerun_job.execute_in_process(
            run_config=rerun_run_config(key), instance=instance, raise_on_error=False,
            resources=w.resources(T0, reruns_notifier=RerunNotifierResource(transport="none")))
    assert not result.success
    assert [e.state for e in lineage_entries(w.engine, w.root)] == ["FINISHED", "FAILED"]
    assert (w.tick(T0 + HOUR).skip_message or "").startswith("The previous study in the lineage did not finish")
    # What to do: cancel the schedule and enable it again from a finished study.
    with dg.instance_for_test() as instance:
        cancel_study_schedule_job.execute_in_process(
            run_config={"ops": {"cancel_study_schedule": {"config": {"schedule_id": w.schedule_id, "by": "ana@example.com"}}}},
            instance=instance, resources=w.resources(T0 + HOUR))
        enabled = enable_study_schedule_job.execute_in_process(
            run_config={"ops": {"enable_study_schedule": {"config": {"study_id": w.root, "cadence": "1h", "owner": "ana@example.com"}}}},
            instance=instance, resources=w.resources(T0 + 2 * HOUR))
    new_id = enabled.output_for_node("enable_study_schedule")
    assert get_schedule(w.engine, w.schedule_id).state is ScheduleState.CANCELLED
    assert [e.state for e in lineage_entries(w.engine, w.root)] == ["FINISHED", "FAILED (set aside)"]
    again = w.tick(T0 + 2 * HOUR)
    assert again.run_requests[0].run_key == f"study-rerun:{w.root}:2"
    assert again.run_requests[0].tags["typestrict/schedule"] == str(new_id)


def test_root_study_has_no_usd_budget(world: World) -> None:
    world.arrive(10)
    with session_scope(world.engine) as s:  # the root study was edited and lost its USD budget
        s.execute(update(StudyRow).where(StudyRow.id == int(world.root)).values(budget_micro=None))
    assert (world.tick(T0).skip_message or "").startswith("The root study has no USD budget")


def test_root_study_deleted_turns_the_schedule_off(world: World) -> None:
    world.arrive(10)
    from typestrict_pipeline.cli import main

    assert main(["study", "delete", world.root, "--store-url", world.url]) == 0  # the product path
    assert (world.tick(T0).skip_message or "").startswith("The root study was deleted")
    assert get_schedule(world.engine, world.schedule_id).state is ScheduleState.OFF
    assert (world.tick(T0 + HOUR).skip_message or "").startswith("No re-run schedule is due")


def test_subscription_expired_then_resumes_by_itself(world: World) -> None:
    world.arrive(10)
    set_workspace(world.engine, WS, subscription=SubscriptionState.EXPIRED)
    first = world.tick(T0)
    assert (first.skip_message or "").startswith("Workspace subscription expired")
    set_workspace(world.engine, WS, subscription=SubscriptionState.ACTIVE)
    resumed = world.tick(T0 + HOUR, cursor=first.cursor)
    assert [r.run_key for r in resumed.run_requests] == [f"study-rerun:{world.root}:1"]


def test_usage_budget_exhausted_then_resumes_by_itself(world: World) -> None:
    world.arrive(10)
    set_workspace(world.engine, WS, usage_budget_micro_usd=1_000)  # the root study alone spent 1_000
    first = world.tick(T0)
    assert (first.skip_message or "").startswith("Workspace usage budget exhausted")
    set_workspace(world.engine, WS, usage_budget_micro_usd=50_000_000)
    assert len(world.tick(T0 + HOUR, cursor=first.cursor).run_requests) == 1


def test_the_dagster_schedule_skips_and_fires_too(world: World) -> None:
    world.arrive(7)
    ctx = dg.build_schedule_context(scheduled_execution_time=T0 + 15 * dt.timedelta(minutes=1),
                                    resources={"store": StoreResource(url=world.url), "reruns": RerunSettingsResource()})
    skip = study_rerun_schedule.evaluate_tick(ctx)
    assert (skip.skip_message or "").startswith("Not enough unseen data yet: 7 of 10 steps")
    world.arrive(10)
    ctx = dg.build_schedule_context(scheduled_execution_time=T0 + HOUR,
                                    resources={"store": StoreResource(url=world.url), "reruns": RerunSettingsResource()})
    fire = study_rerun_schedule.evaluate_tick(ctx)
    assert fire.run_requests is not None
    assert [r.run_key for r in fire.run_requests] == [f"study-rerun:{world.root}:1"]


def test_launchpad_refuses_a_study_without_usd_budget(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    workflow = scenario.backend(shift_at=ROOT_END)
    sid = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=None,
                                     min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, sid)
    with dg.instance_for_test() as instance:
        result = enable_study_schedule_job.execute_in_process(
            run_config={"ops": {"enable_study_schedule": {"config": {"study_id": sid, "owner": "ana@example.com"}}}},
            instance=instance, raise_on_error=False,
            resources={"store": StoreResource(url=sqlite_url), "reruns": RerunSettingsResource(now=T0.isoformat())})
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error  # type: ignore[union-attr]
    assert error is not None and error.cause is not None
    assert "The root study has no USD budget" in error.cause.message


def test_rerun_job_records_the_lineage_as_metadata(world: World) -> None:
    world.arrive(10)
    key = world.tick(T0).run_requests[0].run_key
    with dg.instance_for_test() as instance:
        res = world.resources(T0, reruns_notifier=RerunNotifierResource(transport="none"))
        result = study_rerun_job.execute_in_process(run_config=rerun_run_config(key), instance=instance, resources=res)
        assert result.success
        assert result.dagster_run.tags["mode"] == "HISTORICAL"  # a re-run replays history too
        out = result.output_for_node("run_scheduled_rerun")
        assert out["state"] == LineageState.FINISHED.value and out["winner_changed"] is True
        mats = {m.asset_key: m for m in result.asset_materializations_for_node("run_scheduled_rerun")}
        lineage = mats[LINEAGE_KEY]
        assert lineage.partition == world.root
        assert lineage.metadata["k"].value == 2
        md = str(lineage.metadata["lineage"].value)
        assert "| Winner changed |" in md and "arm=late" in md and "Best expected of 2 under noise" in md
        assert isinstance(lineage.metadata["best_expected_of_k_under_noise"].value, float)
        # Every study of the lineage gets its leaderboard again, with the lineage panel under it.
        boards = {m.partition: m for m in result.asset_materializations_for_node("run_scheduled_rerun")
                  if m.asset_key == dg.AssetKey(["study_leaderboard"])}
        assert set(boards) == {world.root, str(out["study_id"])}
        for board in boards.values():
            assert "Best expected of 2 under noise" in str(board.metadata["lineage"].value)
            assert "| Baseline on the holdout |" in str(board.metadata["header"].value)
            assert isinstance(board.metadata["best_expected_of_k_under_noise"].value, float)
        # The same run key again: nothing is created or run twice.
        again = study_rerun_job.execute_in_process(run_config=rerun_run_config(key), instance=instance, resources=res)
        assert again.output_for_node("run_scheduled_rerun")["study_id"] == out["study_id"]
    assert len(lineage_entries(world.engine, world.root)) == 2


def test_a_run_that_failed_before_starting_the_rerun_fails_the_claim(world: World) -> None:
    world.arrive(10)
    first = world.tick(T0)
    req = first.run_requests[0]
    run = world.instance.create_run_for_job(launched_job(), run_config=req.run_config,
                                            tags={"dagster/run_key": req.run_key})
    world.instance.report_run_failed(run)  # e.g. its code server could not start
    assert (world.tick(T0 + HOUR, cursor=first.cursor).skip_message or "").startswith("A study or backtest was in flight")
    assert [e.state for e in lineage_entries(world.engine, world.root)] == ["FINISHED", "FAILED"]
    nxt = world.tick(T0 + 2 * HOUR, cursor=f"{world.schedule_id}:1")
    assert (nxt.skip_message or "").startswith("The previous study in the lineage did not finish")


def test_outbox_sensor_delivers_and_keeps_failures(sqlite_url: str) -> None:
    from assets.reruns import notification_outbox_sensor
    from typestrict_pipeline.reruns.notify import KIND_WINNER_CHANGED, TITLE_WINNER_CHANGED, enqueue
    from typestrict_pipeline.reruns.sinks import LocalSmtpServer

    engine = open_store(sqlite_url)
    enqueue(engine, dedupe_key="winner-changed:9", kind=KIND_WINNER_CHANGED, recipient="ana@example.com",
            subject=TITLE_WINNER_CHANGED, body="b", now=T0 - HOUR)
    with LocalSmtpServer() as smtp:
        notifier = RerunNotifierResource(transport="smtp", smtp_host=smtp.host, smtp_port=smtp.port)
        ctx = dg.build_sensor_context(resources={"store": StoreResource(url=sqlite_url), "reruns_notifier": notifier})
        smtp.fail_next(1)
        first = notification_outbox_sensor.evaluate_tick(ctx)
        assert first.skip_message is not None
        assert first.skip_message.startswith(
            f"Delivered 0 notification(s) to email over SMTP (127.0.0.1:{smtp.port}); 1 will be retried; 0 given up. "
            f"Not delivered yet: #1 PENDING ana@example.com: {TITLE_WINNER_CHANGED} (not delivered yet after 1 "
            "attempt(s): SMTPDataError: (451")
        assert smtp.messages == []
    with session_scope(engine) as s:  # make the retry due now (the backoff is 30 s)
        from typestrict_pipeline.reruns.tables import OutboxMessage
        s.execute(update(OutboxMessage).values(next_attempt_at=T0 - HOUR))
    with LocalSmtpServer() as smtp:
        notifier = RerunNotifierResource(transport="smtp", smtp_host=smtp.host, smtp_port=smtp.port)
        ctx = dg.build_sensor_context(resources={"store": StoreResource(url=sqlite_url), "reruns_notifier": notifier})
        second = notification_outbox_sensor.evaluate_tick(ctx)
        assert second.skip_message == (f"Delivered 1 notification(s) to email over SMTP (127.0.0.1:{smtp.port}); "
                                       "0 will be retried; 0 given up")
        assert [m.message["Subject"] for m in smtp.messages] == [TITLE_WINNER_CHANGED]


def test_the_code_location_resolves_without_the_sensor_owners_beta_warning() -> None:
    """Binding resources to study_rerun_job must not re-create the sensor with ``owners``."""
    import warnings

    from assets.reruns import build_defs
    from resources.reruns import default_resources

    fresh = dg.Definitions.merge(build_defs(), dg.Definitions(
        resources={**default_resources(), "store": StoreResource()}))  # not cached by other tests
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.get_repository_def()
    assert not [w for w in caught if "owners" in str(w.message)]
