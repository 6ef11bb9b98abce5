"""A schedule's timeline: its next evaluation, its last decision with the reason, what would make
it fire, a schedule that can never fire saying so, ``data append`` saying when each schedule on the
dataset reads the new rows, and the sensor's tick and the ``study_schedules`` asset listing every
schedule (issue #26, "Schedules")."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from assets.reruns import SCHEDULES_KEY, study_rerun_sensor
from resources.reruns import RerunSettingsResource
from resources.store import StoreResource
from typestrict_pipeline.backtest.workflows.datasets import register_dataset
from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
from typestrict_pipeline.cli import main
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store

CUT = dt.datetime(2012, 3, 1, tzinfo=dt.UTC)  # the registered dataset's rows are known until then
BUILT_IN_END = dt.datetime(2015, 12, 30, tzinfo=dt.UTC)  # 2 steps before the built-in data end
DAY = dt.timedelta(days=1)
OWNER = "ana@example.com"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> str:
    """A store with an active workspace and the registered dataset ``live`` (known until CUT)."""
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    write_seattle_csv(tmp_path / "start.csv", known_until=CUT)
    register_dataset("live", "seattle_rain", {"weather": tmp_path / "start.csv"})
    engine = open_store(sqlite_url)
    set_workspace(engine, "w", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    engine.dispose()
    return sqlite_url


def _study(url: str, dataset: str, end: dt.datetime) -> str:
    engine = open_store(url)
    root = scenario.create_seattle_study(engine, workspace="w", dataset=dataset, end=end,
                                         budget_micro_usd=10**6, min_unseen_steps=5)
    scenario.run(engine, root)
    engine.dispose()
    return root


def test_status_and_data_append_say_when_a_schedule_reads_new_rows(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _study(store, "live", CUT)
    assert main(["schedule", "enable", root, "--cadence", "1h", "--owner", OWNER, "--store", store]) == 0
    enabled = capsys.readouterr()
    assert "  next evaluation: due now" in enabled.out  # its first slot starts when it is enabled
    assert ("  fires: needs 5 more steps (has 0 of 5); the data end at 2012-02-29; "
            "add rows: typestrict data append live FILE.csv") in enabled.out
    assert "never fire" not in enabled.out + enabled.err

    write_seattle_csv(tmp_path / "more.csv", known_after=CUT, known_until=CUT + 10 * DAY)
    assert main(["data", "append", "live", str(tmp_path / "more.csv"), "--store", store]) == 0
    out = capsys.readouterr().out
    assert "live/weather: 10 rows added" in out
    assert (f"  schedule 1 (re-runs study {root} every 1h) reads them at its next evaluation, due now "
            in out)
    assert "it fires at its next evaluation: 10 unseen steps, 5 needed" in out

    # The tick evaluates it (it fires); then the next evaluation is the next slot, an hour on.
    assert main(["schedule", "tick", "--store", store]) == 0
    assert "schedule 1: fired: Fired re-run #1" in capsys.readouterr().out
    assert main(["schedule", "status", "1", "--json", "--store", store]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    timeline = shown["timeline"]
    assert timeline["due_now"] is False and timeline["last_outcome"] == "FIRED"
    nxt = dt.datetime.fromisoformat(timeline["next_evaluation_at"])
    enabled_at = dt.datetime.fromisoformat(shown["enabled_at"])
    assert nxt == enabled_at + dt.timedelta(hours=1)

    write_seattle_csv(tmp_path / "later.csv", known_after=CUT + 10 * DAY, known_until=CUT + 12 * DAY)
    assert main(["data", "append", "live", str(tmp_path / "later.csv"), "--store", store, "--json"]) == 0
    appended = json.loads(capsys.readouterr().out)
    assert appended["added"] == 2 and [s["schedule_id"] for s in appended["schedules"]] == [1]
    assert appended["schedules"][0]["next_evaluation_at"] == timeline["next_evaluation_at"]


def test_a_schedule_that_can_never_fire_says_so_when_enabled_and_at_each_evaluation(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The built-in Seattle data end on 2015-12-31 and never grow: 2 unseen steps of the 5 needed.
    root = _study(store, "seattle_weather", BUILT_IN_END)
    assert main(["schedule", "enable", root, "--cadence", "1h", "--owner", OWNER, "--store", store]) == 0
    enabled = capsys.readouterr()
    never = ("It can never fire: its data, built-in dataset seattle_weather, end at 2015-12-31 and cannot "
             "grow, and it needs 3 more unseen steps (has 2 of 5)")
    assert f"typestrict: warning: schedule 1: {never}" in enabled.err
    assert f"  {never}" in enabled.out and "  fires: never fires: needs 3 more steps" in enabled.out
    assert main(["schedule", "tick", "--store", store]) == 0
    assert f"schedule 1: skipped: Not enough unseen data yet: 2 of 5 steps. {never}" in capsys.readouterr().out


def test_the_sensor_lists_every_schedule_and_records_their_timelines(
    store: str, capsys: pytest.CaptureFixture[str], ephemeral_instance: dg.DagsterInstance
) -> None:
    live, fixed = _study(store, "live", CUT), _study(store, "seattle_weather", BUILT_IN_END)
    for sid in (live, fixed):
        assert main(["schedule", "enable", sid, "--cadence", "1h", "--owner", OWNER, "--store", store]) == 0
    capsys.readouterr()
    instance = ephemeral_instance
    resources = {"store": StoreResource(url=store), "reruns": RerunSettingsResource()}
    first = study_rerun_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=resources))
    reason = first.skip_message or ""
    # every schedule's reason, in the tick's own text (no hovering, no second page)
    assert reason.startswith("Not enough unseen data yet: 0 of 5 steps (schedule 1: study")
    assert "Not enough unseen data yet: 2 of 5 steps. It can never fire" in reason
    assert reason.count("next evaluation 20") == 2
    [seen] = first.asset_events
    assert isinstance(seen, dg.AssetObservation) and seen.asset_key == SCHEDULES_KEY
    table = seen.metadata["schedules"]
    assert isinstance(table, dg.TableMetadataValue)
    rows = {r.data["schedule"]: r.data for r in table.records}
    assert set(rows) == {"1", "2"}
    assert str(rows["1"]["next evaluation"]).endswith("(every 1h)")
    assert str(rows["1"]["last decision"]).endswith("Not enough unseen data yet: 0 of 5 steps")
    assert str(rows["1"]["fires"]).startswith("needs 5 more steps (has 0 of 5)")
    assert str(rows["2"]["fires"]).startswith("It can never fire")
    # each schedule's row links its lineage: the study_lineage asset's partition of its root study
    assert [rows[k]["lineage"] for k in ("1", "2")] == [f"study_lineage, partition {live}",
                                                       f"study_lineage, partition {fixed}"]
    assert [rows[k]["study"] for k in ("1", "2")] == [live, fixed]
    assert isinstance(seen.metadata["schedule 1"], dg.TextMetadataValue)

    again = study_rerun_sensor.evaluate_tick(dg.build_sensor_context(
        instance=instance, resources=resources, cursor=first.cursor))
    assert (again.skip_message or "").startswith("No re-run schedule is due. Schedule 1 (study")
    assert "last: Not enough unseen data yet: 0 of 5 steps" in (again.skip_message or "")
    assert again.asset_events == []  # nothing changed: nothing recorded again


def test_the_leaderboard_and_the_lineage_name_the_same_holdout_days(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 26: the lineage said `2015-09-02 – 2015-12-30` where the leaderboard said
    # `→ 2015-12-31` for the same holdout. Both name its first and last day, inclusive.
    root = _study(store, "seattle_weather", BUILT_IN_END)  # its holdout: the 10 days before the end
    assert main(["schedule", "enable", root, "--cadence", "1h", "--owner", OWNER, "--store", store]) == 0
    capsys.readouterr()
    days = "2015-12-20 – 2015-12-29"
    assert main(["study", "leaderboard", root, "--store", store]) == 0
    leaderboard = capsys.readouterr().out
    assert f"for candidate #1 on {days} (10 steps)" in leaderboard and "→" not in leaderboard
    assert main(["schedule", "lineage", root, "--store", store]) == 0
    lineage = capsys.readouterr().out
    assert f"0  {root}  " in lineage and days in lineage and "→" not in lineage
    assert main(["schedule", "lineage", root, "--json", "--store", store]) == 0
    assert [e["window"] for e in json.loads(capsys.readouterr().out)["entries"]] == [days]
