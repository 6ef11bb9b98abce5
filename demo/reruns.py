"""Demo part: a scheduled study re-run skipping, then firing, as data arrive.

1. A root study (synthetic workflow whose best arm changes when the root's holdout starts)
   finishes with a USD budget and "Min unseen steps for a re-run" = 10.
2. A schedule is enabled from the launchpad job (``enable_study_schedule_job``), every hour.
3. Data arrive: 7 new steps, the Dagster sensor skips with the page's message and the counts;
   10 new steps, it fires one run request (its run key names the lineage position).
4. ``study_rerun_job`` runs the re-run: same search space plus the previous winner, scored on a new
   holdout; its winner differs, so the owner gets "A scheduled study changes its winner" by SMTP
   (a real local server started here).
5. The lineage panel and ``typestrict schedule status`` are printed.

Everything is under ``<root>/reruns`` (its own SQLite store); the sensor's ticks and runs are
recorded on the demo's Dagster instance (``$DAGSTER_HOME``, set by the refund part) so the UI
shows them, or on an ephemeral instance when the part runs alone.
"""

import datetime as dt
import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.sensor_definition import SensorExecutionData

from assets.reruns import enable_study_schedule_job, study_rerun_job, study_rerun_sensor
from demo.ticks import SensorTick
from resources.reruns import RerunNotifierResource, RerunSettingsResource
from resources.store import StoreResource
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import get_schedule, lineage_text, status_text
from typestrict_pipeline.reruns.sinks import LocalSmtpServer
from typestrict_pipeline.reruns.studies import StoreStudies, record_data_end
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.limits import format_usd

ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
OWNER = "ana@example.com"
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def run(root: Path) -> int:
    print("\n== Scheduled re-runs: skip, then fire as data arrive ==")
    folder = root / "reruns"
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'store.db'}"
    engine = open_store(url)
    set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)
    root_id = scenario.create_root_study(engine, workspace="demo", root_end=ROOT_END, budget_micro_usd=10_000,
                                         min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, root_id)
    facts = StoreStudies(engine).get(root_id)
    assert facts is not None
    print(f"1. root study {root_id} ({scenario.WORKFLOW}) finished: winner {facts.winner_label}, holdout score "
          f"{facts.holdout_score:.4f} on {facts.holdout_start.date()} – {(facts.holdout_end - DAY).date()}, "
          f"USD budget {format_usd(facts.budget_micro_usd)}, min unseen steps for a re-run 10")

    # the demo's Dagster home (set by the refund part) so the UI shows these ticks and runs
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    fired: list[SensorTick] = []
    with LocalSmtpServer() as smtp:
        def resources(now: dt.datetime) -> dict[str, object]:
            return {
                "store": StoreResource(url=url),
                "reruns": RerunSettingsResource(now=now.isoformat()),
                "reruns_notifier": RerunNotifierResource(transport="smtp", smtp_host=smtp.host,
                                                         smtp_port=smtp.port, sender="typestrict@localhost"),
            }

        def tick(now: dt.datetime, cursor: str | None) -> SensorExecutionData:
            recorded = SensorTick(instance, "study_rerun_sensor")
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources(now))
            data = study_rerun_sensor.evaluate_tick(ctx)
            if data.run_requests:
                fired.append(recorded)  # completed once its run is launched below
            else:
                recorded.skipped(data.skip_message, data.cursor)
            return data

        enabled = enable_study_schedule_job.execute_in_process(
            run_config={"ops": {"enable_study_schedule": {"config": {
                "study_id": root_id, "cadence": "1h", "owner": OWNER}}}, **QUIET},
            instance=instance, resources=resources(T0))
        schedule_id = enabled.output_for_node("enable_study_schedule")
        view = get_schedule(engine, schedule_id)
        print(f"2. schedule {schedule_id} enabled from the launchpad by {view.owner}: every {view.cadence}; "
              f"each re-run copies the budget {format_usd(view.budget_micro_usd)}")

        record_data_end(engine, "demo", scenario.WORKFLOW, ROOT_END + 7 * DAY)
        first = tick(T0, None)
        print(f"3. 7 new steps arrived; study_rerun_sensor skipped: \"{first.skip_message}\" (cursor {first.cursor})")

        record_data_end(engine, "demo", scenario.WORKFLOW, ROOT_END + 10 * DAY)
        second = tick(T0 + HOUR, first.cursor)
        request = (second.run_requests or [])[0]
        print(f"4. 10 new steps arrived; study_rerun_sensor fired: run key {request.run_key} (cursor {second.cursor})")
        same = tick(T0 + HOUR, second.cursor)
        print(f"   the same tick evaluated again: \"{same.skip_message}\" (the re-run is requested once)")

        result = study_rerun_job.execute_in_process(
            run_config={**request.run_config, **QUIET}, instance=instance,
            tags={**request.tags, **fired[-1].run_tags(request.run_key)}, resources=resources(T0 + HOUR))
        fired[-1].fired([result.run_id], [request.run_key], second.cursor)
        out = result.output_for_node("run_scheduled_rerun")
        print(f"5. study_rerun_job: re-run study {out['study_id']} {out['state']}, winner {out['winner']} "
              f"(changed: {out['winner_changed']}), notifications delivered: {out['delivered']}")
        third = tick(T0 + 2 * HOUR, second.cursor)
        print(f"   next tick: \"{third.skip_message}\"")
        mails = smtp.messages

    print("6. lineage panel (typestrict schedule lineage " + root_id + "):")
    print("   " + lineage_text(engine, root_id).replace("\n", "\n   "))
    for mail in mails:
        print(f"7. mail to {', '.join(mail.recipients)}: \"{mail.message['Subject']}\"")
    print("8. typestrict schedule status:")
    print("   " + status_text(engine, get_schedule(engine, schedule_id)).replace("\n", "\n   "))
    ok = (first.skip_message == "Not enough unseen data yet: 7 of 10 steps" and len(second.run_requests or []) == 1
          and out["winner_changed"] is True and len(mails) == 1)
    engine.dispose()
    return 0 if ok else 1
