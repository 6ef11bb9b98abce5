"""Dagster wiring for scheduled re-runs: the sensor and schedule that fire them, the re-run job,
the jobs that enable and cancel a schedule from the launchpad, and the lineage as metadata.

* ``study_rerun_sensor`` (running by default, every minute) evaluates every enabled re-run schedule whose cadence slot has come;
  it returns a ``RunRequest`` (run key = the lineage position, so a re-run is launched once
  however often the tick is evaluated) or a ``SkipReason`` with the product page's message,
  which the UI shows in the tick history. Its cursor is the last slot evaluated per schedule.
* ``study_rerun_schedule`` does the same on a fixed cron (every 15 minutes, stopped by default)
  for deployments that prefer a schedule; the store's per-slot claim keeps the two from
  evaluating a slot twice.
* ``study_rerun_job`` creates and runs the claimed re-run (idempotent on its run key), records
  the re-run's leaderboard and the lineage (``study_lineage``, one partition per lineage root)
  as metadata, and delivers the "winner changed" notification.
* ``enable_study_schedule_job`` / ``cancel_study_schedule_job``: the launchpad forms.
* ``notification_outbox_sensor`` retries notifications that could not be delivered.
"""

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import dagster as dg
from sqlalchemy import Engine

from assets.studies import partitions_name
from resources.failures import failure
from resources.reruns import RerunNotifierResource, RerunSettingsResource
from resources.store import StoreResource, store_run_request
from typestrict_pipeline import plots
from typestrict_pipeline.errors import InputError, NotFoundError
from typestrict_pipeline.reruns.decide import SkipKind
from typestrict_pipeline.reruns.lineage import (
    LineageEntry,
    LineageSummary,
    render_markdown,
    summarize,
)
from typestrict_pipeline.reruns.notify import outbox, transport_label
from typestrict_pipeline.reruns.service import (
    TickResult,
    cancel_schedule,
    enable_schedule,
    evaluate_due,
    execute_rerun,
    fail_claim,
    format_cursor,
    get_schedule,
    lineage_entries,
    lineage_hint,
    lineage_root_of,
    list_schedules,
    parse_cursor,
    schedules_stamp,
    tick_reason,
    timelines,
)
from typestrict_pipeline.reruns.tables import ScheduleState, TickOutcome
from typestrict_pipeline.reruns.timeline import format_when
from typestrict_pipeline.reruns.workspace import workspace_warning

LINEAGE_PARTITIONS = dg.DynamicPartitionsDefinition(name="study_lineages")
LINEAGE_KEY = dg.AssetKey(["study_lineage"])
NOTHING_DUE = "No re-run schedule is due"



class RerunRunConfig(dg.Config):
    """Which claimed re-run to execute (set by the sensor or the schedule)."""

    run_key: str


class EnableScheduleConfig(dg.Config):
    """Re-run on a schedule: the finished study to re-run from, a cadence, and who sets it up.

    ``min_unseen_steps`` only for a study created without "Min unseen steps for a re-run" (it is
    then stored on the study once); a study that has one uses it and a different value is refused.
    """

    study_id: str
    cadence: str = "1d"
    owner: str
    min_unseen_steps: int | None = None


class CancelScheduleConfig(dg.Config):
    """Which schedule to cancel, and who cancels it."""

    schedule_id: int
    by: str


def lineage_picture_markdown(entries: list[LineageEntry], summary: LineageSummary) -> str:
    """The winners' holdout scores over the re-runs, with the noise line, as a Markdown image."""
    png = plots.lineage_png(
        [e.seq for e in entries], [e.holdout_score for e in entries],
        [e.baseline_score for e in entries], [e.holdout_se for e in entries],
        noise_line=summary.noise_line_score,
    )
    return plots.png_markdown(png, "lineage over re-runs")


def lineage_materialization(engine: Engine, study_id: str) -> dg.AssetMaterialization:
    """The lineage panel of ``study_id``'s lineage as a materialization of ``study_lineage``."""
    root = lineage_root_of(engine, study_id)
    entries = lineage_entries(engine, root)
    summary = summarize(entries)
    metadata: dict[str, Any] = {
        "lineage": dg.MetadataValue.md(render_markdown(entries)),
        "lineage_picture": dg.MetadataValue.md(lineage_picture_markdown(list(entries), summary)),
        "k": dg.MetadataValue.int(summary.k),
        "scale": summary.scale,
    }
    if summary.noise_line is not None:
        metadata["best_expected_of_k_under_noise"] = dg.MetadataValue.float(
            plots.for_reading(summary.noise_line))
        metadata["within_noise"] = dg.MetadataValue.bool(bool(summary.within_noise))
    else:
        metadata["best_expected_of_k_under_noise"] = dg.MetadataValue.text(f"n/a: {summary.missing_reason}")
    metadata["persistence"] = summary.persistence
    metadata["statements"] = dg.MetadataValue.md("\n\n".join(summary.statements))
    return dg.AssetMaterialization(asset_key=LINEAGE_KEY, partition=root, metadata=metadata)


@dg.asset(
    key=LINEAGE_KEY,
    group_name="studies",
    partitions_def=LINEAGE_PARTITIONS,
    kinds={"python"},
    description="The lineage panel of a scheduled study (one partition per root study): every "
    "re-run with the window it was scored on, its winner, its holdout score, whether the winner "
    "changed, and the best expected of k under noise. study_rerun_job records it after each "
    "re-run; materializing a partition here redraws it from the store (it runs nothing).",
)
def study_lineage(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult[None]:
    root: str = context.partition_key
    with store.engine() as engine:
        if not lineage_entries(engine, root):
            raise failure(f"expected the id of a study with scheduled re-runs, got "
                             f"{root!r}, which has no lineage in the store. Pick a partition "
                             "study_rerun_job added, with the store it used.")
        recorded = lineage_materialization(engine, root)
    return dg.MaterializeResult(metadata=dict(recorded.metadata))


@dg.op(tags={"area": "reruns"})
def run_scheduled_rerun(
    context: dg.OpExecutionContext,
    config: RerunRunConfig,
    store: StoreResource,
    reruns: RerunSettingsResource,
    reruns_notifier: RerunNotifierResource,
) -> dict[str, Any]:
    """Create and run the claimed re-run, record the lineage, deliver notifications."""
    reason = context.run.tags.get(REASON_TAG)
    if reason:
        context.log.info(f"launched by study_rerun_sensor: {reason}")
    with store.engine() as engine:
        record = execute_rerun(engine, reruns.studies(engine), config.run_key, now=reruns.current_time())
        context.log.info(f"re-run {config.run_key}: {record.detail}")
        if record.study_id is not None:
            root = lineage_root_of(engine, record.study_id)
            context.instance.add_dynamic_partitions(partitions_name(LINEAGE_PARTITIONS), [root])
            lineage = lineage_materialization(engine, record.study_id)
            context.log_event(lineage)
            _record_leaderboards(context, engine, record.study_id)
        report = reruns_notifier.deliver(engine, now=reruns.current_time())
    for message_id, error in report.failed:
        context.log.warning(f"notification {message_id} not delivered yet (kept, will retry): {error}")
    with store.engine() as engine:
        recent = outbox(engine, limit=5)
    context.add_output_metadata({
        "reason": context.run.tags.get(REASON_TAG, "launched by hand"),
        "lineage": lineage_hint(lineage_root_of_key(config.run_key)),
        "notifications": dg.MetadataValue.md(
            f"Delivered to {transport_label(reruns_notifier.build_transport())}\n\n"
            + ("\n".join(f"- {e.line()}" for e in recent) or "- the outbox is empty")),
    })
    return {
        "run_key": record.run_key, "state": record.state.value, "study_id": record.study_id,
        "winner": record.winner, "winner_changed": record.winner_changed,
        "notified": record.notified, "delivered": len(report.sent),
    }


def _record_leaderboards(context: dg.OpExecutionContext, engine: Engine, study_id: str) -> None:
    """Every study of the lineage gets a fresh leaderboard materialization with the lineage
    panel under it (the re-run is an ordinary study; older ones' panels gain the new row)."""
    from assets.studies import STUDY_PARTITIONS, leaderboard_materialization

    ids = [int(e.study_id) for e in lineage_entries(engine, study_id) if e.study_id is not None]
    context.instance.add_dynamic_partitions(partitions_name(STUDY_PARTITIONS), [str(i) for i in ids])
    for sid in ids:
        with contextlib.suppress(NotFoundError):  # a study of the lineage that was deleted
            context.log_event(leaderboard_materialization(engine, sid))


@dg.op(tags={"area": "reruns"})
def enable_study_schedule(
    context: dg.OpExecutionContext, config: EnableScheduleConfig, store: StoreResource, reruns: RerunSettingsResource
) -> int:
    """Enable re-runs of a finished study (refused, with the reason, without a USD budget)."""
    with store.engine() as engine:
        view = enable_schedule(
            engine, reruns.studies(engine), study_id=config.study_id, cadence=config.cadence,
            owner=config.owner, min_unseen_steps=config.min_unseen_steps, now=reruns.current_time(),
        )
        warning = workspace_warning(engine, view.workspace_id, reruns.current_time(), reruns.spend(engine))
    context.log.info(f"schedule {view.id}: re-run study {view.root_study_id} every {view.cadence}, set up by {view.owner}")
    if warning is not None:
        context.log.warning(warning)
    context.add_output_metadata({"workspace": warning or "subscription active, usage budget left"})
    return view.id


@dg.op(tags={"area": "reruns"})
def cancel_study_schedule(context: dg.OpExecutionContext, config: CancelScheduleConfig, store: StoreResource) -> str:
    """Cancel a re-run schedule."""
    with store.engine() as engine:
        view = cancel_schedule(engine, config.schedule_id, by=config.by)
    context.log.info(f"schedule {view.id}: {view.state.value}")
    return view.state.value


# One op whose study runner has its own thread pool: run it in the run's process (the default
# multiprocess executor would spawn a second interpreter for the one step: 10-35 s on a busy
# 2-core machine, measured in bench/bench_reruns_arrival.py).
RERUN_JOB_TAGS = {"area": "reruns", "mode": "HISTORICAL"}
"""A re-run replays history like every study: its runs are marked HISTORICAL (the page)."""


@dg.job(tags=RERUN_JOB_TAGS, executor_def=dg.in_process_executor,
        description="Create and run one scheduled re-run (launched by study_rerun_sensor).")
def study_rerun_job() -> None:
    run_scheduled_rerun()


@dg.job(tags={"area": "reruns"}, description="Re-run a finished study on a schedule (fill in the launchpad).")
def enable_study_schedule_job() -> None:
    enable_study_schedule()


@dg.job(tags={"area": "reruns"}, description="Cancel a re-run schedule.")
def cancel_study_schedule_job() -> None:
    cancel_study_schedule()


def lineage_root_of_key(run_key: str) -> str:
    """The lineage root named in a re-run's run key (``study-rerun:<root>:<seq>``).

    >>> lineage_root_of_key("study-rerun:12:3")
    '12'
    """
    return run_key.split(":")[1] if run_key.count(":") >= 2 else run_key


def rerun_run_config(run_key: str) -> dict[str, Any]:
    """The run config of ``study_rerun_job`` for one claimed re-run."""
    return {"ops": {"run_scheduled_rerun": {"config": {"run_key": run_key}}}}


REASON_TAG = "typestrict/reason"
LINEAGE_TAG = "typestrict/lineage"


def rerun_tags(workflow_id: str, schedule_id: int, lineage_root_id: str, run_key: str, reason: str) -> dict[str, str]:
    """The tags a re-run's Dagster run carries: why it was launched (the tick's message; a
    Dagster 1.13 run has no free-text description, so the reason is a tag) and which lineage
    it extends, with how to open it.

    >>> rerun_tags("wx", 3, "12", "study-rerun:12:1", "Fired re-run #1: ...")["typestrict/lineage"]
    '12'
    """
    return {
        **RERUN_JOB_TAGS,
        "workflow": workflow_id,
        "typestrict/schedule": str(schedule_id),
        LINEAGE_TAG: lineage_root_id,
        "typestrict/rerun": run_key.rsplit(":", 1)[-1],
        REASON_TAG: reason[:900],
        "typestrict/open_lineage": lineage_hint(lineage_root_id),
    }


def _already_launched(engine: Engine, instance: dg.DagsterInstance | None, run_key: str) -> bool:
    """Whether a Dagster run carries ``run_key``; a run that ended without starting the re-run
    (failed or canceled while the claim is still pending) fails the claim."""
    if instance is None:
        return False
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/run_key": run_key}), limit=1)
    if not runs:
        return False
    run = runs[0]
    if run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
        fail_claim(engine, run_key, f"the Dagster run {run.run_id} ended {run.status.value} before the re-run started")
    return True


def _requests_and_skips(
    engine: Engine, results: list[TickResult], instance: dg.DagsterInstance | None, store_url: str
) -> tuple[list[dg.RunRequest], str | None]:
    """Run requests for fired ticks, and one skip message for the others. Each request carries
    ``store_url`` (the store the tick claimed its re-run in) in its run config and its
    ``typestrict/store`` tag, so the re-run acts on that store (resources/store.py).

    A tick that found its own claimed re-run still waiting (in flight) asks for it again only
    when no Dagster run carries its run key (the request was lost); otherwise it is a skip.
    """
    requests: list[dg.RunRequest] = []
    skipped: list[TickResult] = []
    for r in results:
        if r.run_key is None or (r.kind is SkipKind.IN_FLIGHT and _already_launched(engine, instance, r.run_key)):
            skipped.append(r)
            continue
        view = get_schedule(engine, r.schedule_id)
        requests.append(store_run_request(
            store_url, run_key=r.run_key, run_config=rerun_run_config(r.run_key),
            tags=rerun_tags(view.workflow_id, r.schedule_id, view.lineage_root_id, r.run_key, r.message)))
    if not skipped:
        return requests, None
    if len(skipped) == 1 and len(results) == 1:
        return requests, skipped[0].message
    return requests, "; ".join(f"schedule {r.schedule_id}: {r.message}" for r in skipped)


def _instance(context: dg.SensorEvaluationContext | dg.ScheduleEvaluationContext) -> dg.DagsterInstance | None:
    try:
        return context.instance
    except Exception:  # a context built without an instance (a unit test): nothing was launched
        return None


def sensor_interval_seconds(environ: Mapping[str, str] | None = None) -> int:
    """How often the daemon evaluates ``study_rerun_sensor``: ``TYPESTRICT_RERUN_SENSOR_INTERVAL_S``
    (5..3600 seconds), default 60. Read when the code location loads (a sensor's interval is
    part of its definition). A schedule still fires at most once per cadence slot.

    >>> sensor_interval_seconds({}), sensor_interval_seconds({"TYPESTRICT_RERUN_SENSOR_INTERVAL_S": "5"})
    (60, 5)
    """
    env = os.environ if environ is None else environ
    text = env.get("TYPESTRICT_RERUN_SENSOR_INTERVAL_S", "60").strip()
    if not text.isdigit() or not 5 <= int(text) <= 3600:
        raise InputError("TYPESTRICT_RERUN_SENSOR_INTERVAL_S between 5 and 3600 (seconds)", repr(text),
                         "fix or unset the variable (default 60)")
    return int(text)


SCHEDULES_KEY = dg.AssetKey(["study_schedules"])
study_schedules = dg.AssetSpec(
    SCHEDULES_KEY,
    group_name="studies",
    kinds={"python"},
    description="Every re-run schedule, one row each: its next evaluation, its last decision with "
    "the reason, what would make it fire (or that it never can), its lineage. Observed by "
    "study_rerun_sensor whenever a schedule is enabled, cancelled or evaluated.",
)


def _split_cursor(cursor: str | None) -> tuple[str | None, str]:
    """The sensor's cursor: ``"<slots>;<stamp>"`` (the slots alone in older cursors)."""
    if not cursor:
        return None, ""
    slots, _, stamp = cursor.partition(";")
    return slots or None, stamp


def schedules_observation(engine: Engine, reruns: RerunSettingsResource) -> dg.AssetObservation:
    """The ``study_schedules`` observation: every schedule's timeline as native metadata (a table,
    and one line per enabled schedule), which the UI shows as it is."""
    now = reruns.current_time()
    port, spend = reruns.studies(engine), reruns.spend(engine)
    rows = timelines(engine, port, list_schedules(engine)[:200], now=now, spend=spend)
    schema = dg.TableSchema(columns=[dg.TableColumn(name, "string") for name in (
        "schedule", "study", "workflow", "every", "state", "next evaluation", "last decision",
        "fires", "lineage")])
    records = []
    metadata: dict[str, Any] = {"as of": dg.MetadataValue.text(format_when(now))}
    for view, tl in rows:
        o = tl.outlook
        fires = "" if o is None else (o.never_fires or o.would)
        records.append(dg.TableRecord({
            "schedule": str(view.id), "study": view.root_study_id, "workflow": view.workflow_id,
            "every": view.cadence, "state": view.state.value, "next evaluation": tl.next_evaluation_text(),
            "last decision": tl.last_decision_text(), "fires": fires,
            "lineage": f"study_lineage, partition {view.lineage_root_id}",
        }))
        if view.state is ScheduleState.ENABLED:
            metadata[f"schedule {view.id}"] = dg.MetadataValue.text(
                f"re-runs study {view.root_study_id} every {view.cadence}; next evaluation: "
                f"{tl.next_evaluation_text()}; last decision: {tl.last_decision_text()}; fires: {fires}")
    metadata["schedules"] = dg.MetadataValue.table(records=records, schema=schema)
    return dg.AssetObservation(asset_key=SCHEDULES_KEY, metadata=metadata)


@dg.sensor(
    # Targeted by name, not by the job object: Dagster re-creates a sensor that holds a job
    # needing resources and, in 1.13, warns "BetaWarning: Parameter `owners`" when it does.
    job_name="study_rerun_job",
    minimum_interval_seconds=sensor_interval_seconds(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Fires a scheduled study re-run when enough unseen steps have arrived; otherwise "
    "skips with the reason (Why was my scheduled study skipped?). Each tick's reason lists every "
    "schedule with its next evaluation; the study_schedules asset shows their timelines.",
)
def study_rerun_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, reruns: RerunSettingsResource
) -> dg.SensorResult:
    slots_text, stamp = _split_cursor(context.cursor)
    events: list[dg.AssetObservation] = []
    with store.engine() as engine:
        now = reruns.current_time()
        results, slots = evaluate_due(
            engine, reruns.studies(engine), now=now, spend=reruns.spend(engine),
            source="sensor", cursor=parse_cursor(slots_text),
        )
        requests, _ = _requests_and_skips(engine, results, _instance(context), store.resolved_url())
        views = list_schedules(engine)
        reason = tick_reason(views, results, now=now)
        new_stamp = schedules_stamp(views)
        if new_stamp != stamp:  # a schedule was enabled, cancelled or evaluated: record them again
            events.append(schedules_observation(engine, reruns))
    cursor = f"{format_cursor(slots)};{new_stamp}"
    for r in results:
        if r.outcome is TickOutcome.FIRED:
            context.log.info(f"schedule {r.schedule_id}: {r.message}")
    if requests:
        context.log.info(reason)
        return dg.SensorResult(run_requests=requests, cursor=cursor, asset_events=events)
    return dg.SensorResult(skip_reason=dg.SkipReason(reason), cursor=cursor, asset_events=events)


@dg.schedule(
    job_name="study_rerun_job",
    cron_schedule="*/15 * * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="The same evaluation as study_rerun_sensor on a fixed cron (use one or the other; "
    "the store never evaluates a schedule's slot twice).",
)
def study_rerun_schedule(
    context: dg.ScheduleEvaluationContext, store: StoreResource, reruns: RerunSettingsResource
) -> dg.SkipReason | list[dg.RunRequest]:
    now = context.scheduled_execution_time if reruns.now is None else reruns.current_time()
    with store.engine() as engine:
        results, _ = evaluate_due(engine, reruns.studies(engine), now=now, spend=reruns.spend(engine), source="schedule")
        requests, _skip = _requests_and_skips(engine, results, _instance(context), store.resolved_url())
        reason = tick_reason(list_schedules(engine), results, now=now)
    if requests:
        return requests
    return dg.SkipReason(reason)


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Delivers notifications left in the outbox (retries with backoff).",
)
def notification_outbox_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, reruns_notifier: RerunNotifierResource
) -> dg.SkipReason:
    with store.engine() as engine:
        report = reruns_notifier.deliver(engine)
        waiting = outbox(engine, undelivered_only=True, limit=5)
    where = transport_label(reruns_notifier.build_transport())
    text = (f"Delivered {len(report.sent)} notification(s) to {where}; {len(report.failed)} will be retried; "
            f"{len(report.dead)} given up")
    if waiting:
        text += ". Not delivered yet: " + "; ".join(e.line() for e in waiting)
    return dg.SkipReason(text)


def build_defs() -> dg.Definitions:
    return dg.Definitions(
        assets=[study_lineage, study_schedules],
        jobs=[study_rerun_job, enable_study_schedule_job, cancel_study_schedule_job],
        sensors=[study_rerun_sensor, notification_outbox_sensor],
        schedules=[study_rerun_schedule],
    )
