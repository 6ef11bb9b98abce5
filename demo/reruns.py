"""Demo part: scheduled study re-runs skipping, then firing, as data arrive, on the demo's own
store and Dagster instance (``<root>/store.db``, ``<root>/dagster_home``), so that after
``make demo`` the Dagster UI and ``typestrict schedule status`` show the schedules, their runs
and their lineages.

A. Data added the documented way (a registered point-in-time dataset):

   1. ``demo_seattle_live`` is registered for ``seattle_rain`` with the Seattle rows known until
      2015-10-01; a small root study on it finishes (USD budget, min unseen steps 5).
   2. A schedule is enabled; ``study_rerun_sensor`` skips ("Not enough unseen data yet: 0 of 5
      steps"); 10 days are appended (``typestrict data append``); the next tick fires, and the
      run carries the reason and the lineage as tags.

B. A winner that changes (the synthetic regime-shift workflow, whose arrivals are recorded with
   ``record_data_end``): 7 new steps skip, 10 fire; the re-run's winner differs, so the owner
   gets "A scheduled study changes its winner", delivered to a file (the default transport: no
   mail server needed; ``<root>/notifications.log``, the default file).

What the part writes besides the store and the instance is under ``<root>/reruns``,
``<root>/datasets/demo_seattle_live`` and ``<root>/notifications.log`` (all replaced by the next
``make demo``); ``<root>/reruns/seattle-oct-11-20.csv`` is ten more days the README's reader
appends (``typestrict data append``).

The ticks are evaluated with a clock stepping through hourly slots that ended before now, so a
daemon started afterwards (``dagster dev``) goes on with the current slot. Each evaluation is
recorded as a tick of ``study_rerun_sensor`` on the demo's instance (``demo.ticks``), so the UI's
tick history shows the skips with their reasons and the fired ticks with their runs.
"""

import contextlib
import datetime as dt
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.sensor_definition import SensorExecutionData

from assets.reruns import enable_study_schedule_job, study_rerun_job, study_rerun_sensor
from demo.runs import execute
from demo.ticks import SensorTick
from resources.reruns import RerunNotifierResource, RerunSettingsResource
from resources.store import StoreResource
from typestrict_pipeline.backtest.workflows.datasets import (
    append_rows,
    datasets_dir,
    is_registered,
    register_dataset,
)
from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import get_schedule, lineage_text, status_text
from typestrict_pipeline.reruns.studies import StoreStudies, record_data_end
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import default_store_url, open_store, utcnow
from typestrict_pipeline.study.limits import format_usd

ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
SEATTLE_CUT = dt.datetime(2015, 10, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
OWNER = "ana@example.com"
DATASET = "demo_seattle_live"
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


class _Demo:
    """The shared store and instance, and a sensor evaluated at chosen times."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = default_store_url()
        self.engine = open_store(self.url)
        self.instance = dg.DagsterInstance.get()
        # the default file transport's own place (${TYPESTRICT_HOME}/notifications.log), where the
        # daemon of `make ui` and `typestrict schedule deliver` deliver too
        self.notifications = root / "notifications.log"
        self.fired: list[SensorTick] = []

    def resources(self, now: dt.datetime) -> dict[str, object]:
        return {
            "store": StoreResource(url=self.url),
            "reruns": RerunSettingsResource(now=now.isoformat()),
            "reruns_notifier": RerunNotifierResource(transport="file", file=str(self.notifications)),
        }

    def tick(self, now: dt.datetime, cursor: str | None) -> SensorExecutionData:
        recorded = SensorTick(self.instance, "study_rerun_sensor")
        ctx = dg.build_sensor_context(instance=self.instance, cursor=cursor, resources=self.resources(now))
        data = study_rerun_sensor.evaluate_tick(ctx)
        for event in data.asset_events:  # the study_schedules overview, as the daemon records it
            self.instance.report_runless_asset_event(event)
        if data.run_requests:
            self.fired.append(recorded)  # completed once its run is launched (run_request)
        else:
            recorded.skipped(data.skip_message, data.cursor)
        return data

    def enable(self, study_id: str, now: dt.datetime) -> int:
        enabled = execute(
            enable_study_schedule_job,
            run_config={"ops": {"enable_study_schedule": {"config": {
                "study_id": study_id, "cadence": "1h", "owner": OWNER}}}, **QUIET},
            instance=self.instance, resources=self.resources(now))
        schedule_id: int = enabled.output_for_node("enable_study_schedule")
        return schedule_id

    def run_request(self, request: dg.RunRequest, now: dt.datetime, cursor: str | None) -> dict[str, Any]:
        tick = self.fired[-1]
        result = execute(
            study_rerun_job,
            run_config={**request.run_config, **QUIET}, instance=self.instance,
            tags={**request.tags, **tick.run_tags(request.run_key)}, resources=self.resources(now))
        tick.fired([result.run_id], [request.run_key], cursor)
        out: dict[str, Any] = result.output_for_node("run_scheduled_rerun")
        return out


@contextlib.contextmanager
def _home(root: Path) -> Iterator[None]:
    """``TYPESTRICT_HOME=<root>``, ``DAGSTER_HOME=<root>/dagster_home`` and no
    ``TYPESTRICT_STORE_URL`` while the part runs (what ``python -m demo`` sets already; a test
    running the part alone gets its environment back afterwards)."""
    dagster_home = root / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    if not (dagster_home / "dagster.yaml").exists():
        write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    wanted = {"TYPESTRICT_HOME": str(root), "DAGSTER_HOME": str(dagster_home), "TYPESTRICT_STORE_URL": None}
    saved = {k: os.environ.get(k) for k in wanted}
    try:
        for key, value in wanted.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _part_a(demo: _Demo, t0: dt.datetime) -> bool:
    print("A. Data added the documented way: a registered dataset, a schedule, rows appended")
    data = demo.root / "reruns"
    write_seattle_csv(data / "seattle-until-2015-10.csv", known_until=SEATTLE_CUT)
    if is_registered(DATASET):  # the demo's own dataset from an earlier run of this part alone
        shutil.rmtree(datasets_dir() / DATASET)
    register_dataset(DATASET, "seattle_rain", {"weather": data / "seattle-until-2015-10.csv"})
    root_id = scenario.create_seattle_study(demo.engine, workspace="demo", dataset=DATASET, end=SEATTLE_CUT,
                                            budget_micro_usd=1_000_000, min_unseen_steps=5)
    scenario.run(demo.engine, root_id)
    facts = StoreStudies(demo.engine).get(root_id)
    assert facts is not None
    print(f"  1. typestrict data register {DATASET} --workflow seattle_rain --table weather=...: rows known "
          f"until {SEATTLE_CUT.date()}; root study {root_id} on it finished, winner {facts.winner_label}")
    schedule_id = demo.enable(root_id, t0)
    first = demo.tick(t0, None)
    print(f"  2. schedule {schedule_id} enabled; study_rerun_sensor skipped: \"{first.skip_message}\"")
    write_seattle_csv(data / "seattle-oct-1-10.csv", known_after=SEATTLE_CUT, known_until=SEATTLE_CUT + 10 * DAY)
    added = append_rows(DATASET, "weather", data / "seattle-oct-1-10.csv")
    print(f"  3. typestrict data append {DATASET} seattle-oct-1-10.csv: {added.added} row{'' if added.added == 1 else 's'} added")
    # ten more days, left for the README's reader to append (the demo does not)
    write_seattle_csv(data / "seattle-oct-11-20.csv", known_after=SEATTLE_CUT + 10 * DAY,
                      known_until=SEATTLE_CUT + 20 * DAY)
    second = demo.tick(t0 + HOUR, first.cursor)
    requests = second.run_requests or []
    if len(requests) != 1:
        print(f"  the next tick did not fire: {second.skip_message}")
        return False
    print(f"  4. the next tick fired: run tags typestrict/reason = \"{requests[0].tags['typestrict/reason']}\"")
    out = demo.run_request(requests[0], t0 + HOUR, second.cursor)
    print(f"  5. study_rerun_job: re-run study {out['study_id']} {out['state']}, winner {out['winner']}")
    print("     " + lineage_text(demo.engine, root_id).replace("\n", "\n     "))
    said = first.skip_message or ""  # the product's message, then which schedule and when next
    return said.startswith("Not enough unseen data yet: 0 of 5 steps (schedule ") and out["state"] == "FINISHED"


def _part_b(demo: _Demo, t0: dt.datetime) -> tuple[bool, int]:
    print("\nB. A winner that changes, and its notification")
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)
    root_id = scenario.create_root_study(demo.engine, workspace="demo", root_end=ROOT_END, budget_micro_usd=10_000,
                                         min_unseen_steps=10, workflow=workflow)
    scenario.run(demo.engine, root_id)
    facts = StoreStudies(demo.engine).get(root_id)
    assert facts is not None and facts.holdout_score is not None
    print(f"  1. root study {root_id} ({scenario.WORKFLOW}) finished: winner {facts.winner_label}, holdout score "
          f"{facts.holdout_score:.4f} on {facts.holdout_start.date()} – {(facts.holdout_end - DAY).date()}, "
          f"USD budget {format_usd(facts.budget_micro_usd or 0)}, min unseen steps for a re-run 10")
    schedule_id = demo.enable(root_id, t0)
    view = get_schedule(demo.engine, schedule_id)
    print(f"  2. schedule {schedule_id} enabled from the launchpad by {view.owner}: every {view.cadence}; "
          f"each re-run copies the budget {format_usd(view.budget_micro_usd)}")
    record_data_end(demo.engine, "demo", scenario.WORKFLOW, ROOT_END + 7 * DAY)
    first = demo.tick(t0, None)
    print(f"  3. 7 new steps arrived; study_rerun_sensor skipped: \"{first.skip_message}\"")
    record_data_end(demo.engine, "demo", scenario.WORKFLOW, ROOT_END + 10 * DAY)
    second = demo.tick(t0 + HOUR, first.cursor)
    request = (second.run_requests or [])[0]
    print(f"  4. 10 new steps arrived; study_rerun_sensor fired: run key {request.run_key}")
    same = demo.tick(t0 + HOUR, second.cursor)
    print(f"     the same tick evaluated again: \"{same.skip_message}\" (the re-run is requested once)")
    out = demo.run_request(request, t0 + HOUR, second.cursor)
    print(f"  5. study_rerun_job: re-run study {out['study_id']} {out['state']}, winner {out['winner']} "
          f"(changed: {out['winner_changed']}), notifications delivered: {out['delivered']}")
    third = demo.tick(t0 + 2 * HOUR, second.cursor)
    print(f"     next tick: \"{third.skip_message}\"")
    print("  6. lineage panel (typestrict schedule lineage " + root_id + "):")
    print("     " + lineage_text(demo.engine, root_id).replace("\n", "\n     "))
    ok = ((first.skip_message or "").startswith("Not enough unseen data yet: 7 of 10 steps (schedule ")
          and len(second.run_requests or []) == 1
          and out["winner_changed"] is True and out["delivered"] == 1)
    return ok, schedule_id


def run(root: Path) -> int:
    print("\n== Scheduled re-runs: skip, then fire as data arrive ==")
    with _home(root):
        return _run(root)


def _run(root: Path) -> int:
    demo = _Demo(root)
    set_workspace(demo.engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    # Hourly slots that ended before now: a daemon started later goes on with the current slot.
    t0 = utcnow().replace(minute=0, second=0, microsecond=0) - 3 * HOUR
    ok_a = _part_a(demo, t0)
    ok_b, schedule_id = _part_b(demo, t0)
    if demo.notifications.exists():
        subjects = [line for line in demo.notifications.read_text().splitlines() if line.startswith("Subject: ")]
        print(f"  7. {demo.notifications} (the default notification sink) holds: {subjects}")
    print("  8. typestrict schedule status (TYPESTRICT_HOME=" + str(root) + "):")
    print("     " + status_text(demo.engine, get_schedule(demo.engine, schedule_id)).replace("\n", "\n     "))
    print("  `make ui` shows the sensor's ticks, the re-runs' runs (tags typestrict/reason, typestrict/lineage) "
          "and the study_lineage asset; `typestrict schedule status` and `typestrict data show` the same here")
    demo.engine.dispose()
    return 0 if ok_a and ok_b else 1
