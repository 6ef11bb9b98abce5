"""The demo's sensor ticks are recorded on its Dagster instance, where the UI looks for them
(tests/test_ui_browser.py checks the UI itself lists them)."""

from pathlib import Path

import dagster as dg
import pytest
from dagster._core.scheduler.instigation import TickStatus

from demo import reruns
from demo.ticks import SENSOR_TAG, SensorTick, sensor_selector_id
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml


def _instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dg.DagsterInstance:
    home = tmp_path / "dagster_home"
    write_instance_yaml(home, sqlite_instance_config(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return dg.DagsterInstance.get()


def test_a_recorded_tick_is_listed_under_its_sensor_with_its_reason_or_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    instance = _instance(tmp_path, monkeypatch)
    skip = SensorTick(instance, "training_sensor")
    skip.skipped("No new training manifests", cursor="c1")
    fired = SensorTick(instance, "training_sensor")
    assert fired.run_tags("verdict:t1") == {SENSOR_TAG: "training_sensor",
                                           "dagster/tick": str(fired.tick_id),
                                           "dagster/run_key": "verdict:t1"}
    fired.fired(["run-1"], ["verdict:t1"], cursor="c2")
    selector = sensor_selector_id("training_sensor")
    ticks = instance.get_ticks(selector, selector)
    assert [t.status for t in ticks] == [TickStatus.SUCCESS, TickStatus.SKIPPED]
    assert ticks[1].tick_data.skip_reason == "No new training manifests" and ticks[1].cursor == "c1"
    assert ticks[0].tick_data.run_ids == ["run-1"] and ticks[0].tick_data.run_keys == ["verdict:t1"]
    assert ticks[0].tick_data.end_timestamp is not None
    assert instance.get_ticks(selector, sensor_selector_id("study_rerun_sensor")) == []


@pytest.mark.slow
def test_the_reruns_demo_leaves_its_skips_and_its_fired_ticks_on_the_instance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    instance = _instance(tmp_path, monkeypatch)
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))  # the demo sets both; restored after
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    assert reruns.run(tmp_path) == 0
    assert "Not enough unseen data yet: 7 of 10 steps" in capsys.readouterr().out
    selector = sensor_selector_id("study_rerun_sensor")
    ticks = list(reversed(instance.get_ticks(selector, selector)))  # oldest first
    # Part A (rows appended to a registered dataset): skip, fire; part B: skip, fire, skip, skip.
    assert [t.status for t in ticks] == [TickStatus.SKIPPED, TickStatus.SUCCESS, TickStatus.SKIPPED,
                                         TickStatus.SUCCESS, TickStatus.SKIPPED, TickStatus.SKIPPED]
    # the product's message first, then which schedule and when it is evaluated next
    first, third = ticks[0].tick_data.skip_reason or "", ticks[2].tick_data.skip_reason or ""
    assert first.startswith("Not enough unseen data yet: 0 of 5 steps (schedule 1: ")
    assert third.startswith("Not enough unseen data yet: 7 of 10 steps (schedule 2: ")
    assert "Not due: Schedule 1 (study " in third  # every schedule, in one tick
    # every schedule's timeline is on the study_schedules asset, recorded as the daemon records it
    observed = instance.fetch_observations(dg.AssetKey("study_schedules"), limit=10).records
    seen = observed[0].asset_observation if observed else None
    assert seen is not None and "schedules" in seen.metadata
    [run_id] = ticks[3].tick_data.run_ids
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.job_name == "study_rerun_job"
    assert run.tags[SENSOR_TAG] == "study_rerun_sensor" and run.tags["dagster/run_key"]
    # The lineage the demo recorded can be materialized again from the UI: it is redrawn.
    from assets.reruns import study_lineage
    from resources.store import StoreResource

    root = instance.get_dynamic_partitions("study_lineages")[-1]  # part B's lineage
    store = StoreResource(url=f"sqlite:///{tmp_path / 'store.db'}")  # the demo's one store
    again = dg.materialize([study_lineage], partition_key=root, instance=instance,
                           resources={"store": store})
    [mat] = again.asset_materializations_for_node("study_lineage")
    assert str(mat.metadata["lineage_picture"].value).startswith("![lineage over re-runs](data:image/png;base64,")
    assert mat.metadata["k"].value == 2
    instance.add_dynamic_partitions("study_lineages", ["404"])
    missing = dg.materialize([study_lineage], partition_key="404", instance=instance,
                             resources={"store": store}, raise_on_error=False)
    [failure] = [e for e in missing.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    user = failure.step_failure_data.user_failure_data
    assert user is not None and "'404', which has no lineage" in (user.description or "")
