"""Dagster wiring for the credits area: settlement, retention, and the training sensor.

* ``credit_settlement`` (group ``refund``, ``trainings`` partitions, downstream of ``verdict`` and
  ``audit``): settles the training's verdict on the credit ledger, exactly once, records the
  model with its audit's exact bytes, and shows the balance and the training's ledger lines.
  It is part of ``verdict_job`` (which selects the whole ``refund`` group).
* ``retention_job`` / ``retention_schedule`` (daily 04:00 UTC): deletes the files of models whose
  retention has passed and marks them expired; the audits stay.
* ``training_sensor``: adds a ``trainings`` partition for each new manifest under
  ``${TYPESTRICT_HOME}/trainings/*/manifest.json`` and requests its ``verdict_job`` run once.

Every run requested here acts on the store its schedule or sensor read (run config and the
``typestrict/store`` tag: ``resources.store.store_run_request``). A partitioned job's request
with a run config of its own replaces the job's default config, so ``verdict_job``'s requests
carry its executor block (``VERDICT_JOB_EXECUTION``: in process) beside the store.

Every decision and write is in ``typestrict_pipeline.credits``; this module only wires it.
"""

import contextlib
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from assets.refund import VERDICT_JOB_EXECUTION
from resources.credits import CreditsResource
from resources.failures import failure
from resources.refund import RefundTrainingsResource
from resources.store import StoreResource, store_run_request
from typestrict_pipeline.credits import (
    CreditLedger,
    LedgerLine,
    SettledAuditError,
    SettlementRequest,
    decide,
    run_key,
    settle_training,
    settlement_reason,
    sweep_retention,
)
from typestrict_pipeline.credits.intake import (
    fingerprint,
    next_cursor,
    parse_refused,
    rerun_key,
    resubmitted,
    screen,
)
from typestrict_pipeline.credits.models import pipeline_value_roots
from typestrict_pipeline.errors import InputError, TypeStrictError
from typestrict_pipeline.lifecycle.trainings import judging_since, ledger_balance, submitted_ids
from typestrict_pipeline.refund.manifest import PredictionsFileSource
from typestrict_pipeline.refund.preflight import screen_training
from typestrict_pipeline.refund.rule import TrainingJudgement
from typestrict_pipeline.values import timestamp

GROUP = "refund"
VERDICT_JOB = "verdict_job"  # defined by assets/refund.py over AssetSelection.groups("refund")
MODEL_FILES_FOLDER = "model"
# Equal (by value) to assets.refund.trainings_partitions: one partition per training id.
PARTITIONS_NAME = "trainings"
trainings_partitions = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)


def ledger_markdown(lines: list[LedgerLine]) -> str:
    """Ledger lines as a Markdown table (what the asset shows)."""
    rows = ["| # | time (UTC) | kind | amount | balance after | verdict | reason |",
            "|---:|---|---|---:|---:|---|---|"]
    for ln in lines:
        when = ln.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        verdict = ln.verdict.value if ln.verdict is not None else ""
        reason = ln.reason.replace("|", "\\|")
        rows.append(
            f"| {ln.id} | {when} | {ln.kind.value} | {ln.amount:+d} | {ln.balance_after} | "
            f"{verdict} | {reason} |"
        )
    return "\n".join(rows)


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"sql"},
    description=(
        "The verdict on the credit ledger, exactly once: refund/failed return the credit, "
        "beats/kept keep it spent. Records the model (files kept N days) with its audit."
    ),
    check_specs=[
        dg.AssetCheckSpec(
            "settled_verdict_matches",
            asset="credit_settlement",
            description="The ledger's settled verdict (the first one, final) equals this run's verdict.",
        ),
        dg.AssetCheckSpec(
            "ledger_balances",
            asset="credit_settlement",
            description="After this settlement: spends = settlements + open trainings, and every "
                        "open training has a deadline (docs/lifecycle.md).",
        ),
    ],
)
def credit_settlement(
    context: dg.AssetExecutionContext,
    verdict: TrainingJudgement,
    audit: str,
    store: StoreResource,
    credits: CreditsResource,
    refund_trainings: RefundTrainingsResource,
    # Bare on purpose: Dagster 1.13 accepts a single result object for an asset with check
    # specs only when the annotation IS MaterializeResult (op_definition._is_result_object_type);
    # MaterializeResult[Any] fails at import with "Expected Tuple annotation for multiple outputs".
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    training_id = context.partition_key
    manifest = refund_trainings.load(training_id)
    policy = credits.policy()
    audit_bytes = _read_audit(audit)
    n = len(verdict.decisions)
    request = SettlementRequest(
        workspace_id=manifest.workspace_id,
        training_id=training_id,
        verdict=verdict.verdict,
        reason=settlement_reason(
            verdict.verdict,
            won=verdict.won if n else None,
            decisions=n or None,
            needed=verdict.needed or None,
            failure_reason=verdict.failure_reason,
            retention_days=policy.days,
        ),
        keep_if_loses=manifest.options.keep_if_loses,
        model_dir=refund_trainings.trainings_dir() / training_id / MODEL_FILES_FOLDER,
        audit_json=audit_bytes,
    )
    with store.engine() as engine:
        try:
            result = settle_training(engine, request, policy=policy)
        except SettledAuditError as exc:  # the settled audit stands; this one is refused
            context.log.error("%s", exc)
            raise failure(str(exc), {"settled_audit_sha256": exc.settled,
                                     "refused_audit_sha256": exc.offered},
                          error=type(exc).__name__) from None
        ledger = CreditLedger(engine)
        balance = ledger.balance(manifest.workspace_id)
        total = ledger.entries_total(manifest.workspace_id)
        balances = ledger_balance(engine)
    s, model = result.settlement, result.model
    if s.newly_settled:
        context.log.info("settled %s: %s (balance %d)", training_id, s.verdict.value, balance)
    else:
        context.log.info("%s was already settled as %s; nothing moved", training_id, s.verdict.value)
    if s.verdict_changed:
        context.log.warning(
            "%s: this run's verdict is %s but the ledger settled %s first; the first is final "
            "(correct it with `typestrict credits adjust`)",
            training_id, s.requested_verdict.value, s.verdict.value,
        )
    metadata: dict[str, Any] = {
        "workspace_id": manifest.workspace_id,
        "verdict": s.verdict.value,
        "credit": "returned" if s.refunded else "stays spent",
        "balance": dg.MetadataValue.int(balance),
        "newly_settled": s.newly_settled,
        "charged_at_registration": s.spent_now,
        "ledger": dg.MetadataValue.md(ledger_markdown(list(s.lines))),
        "ledger_lines": dg.MetadataValue.text("\n".join(ln.describe() for ln in s.lines)),
        "model_id": model.model_id,
        "delivered": model.delivered,
        "model_state": model.state.value,
        "files_expire_at": model.expires_at.isoformat(),
        "audit_sha256": model.audit_sha256 or "",
    }
    check = dg.AssetCheckResult(
        check_name="settled_verdict_matches",
        passed=not s.verdict_changed and balance == total,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"ledger verdict {s.verdict.value}, this run's verdict {s.requested_verdict.value}; "
            f"balance {balance} = sum of entries {total}"
        ),
        metadata={"ledger_verdict": s.verdict.value, "run_verdict": s.requested_verdict.value},
    )
    balanced = dg.AssetCheckResult(
        check_name="ledger_balances",
        passed=balances.balanced,
        severity=dg.AssetCheckSeverity.ERROR,
        description=balances.describe(),
        metadata={"spends": balances.spends, "settlements": balances.settlements,
                  "open_trainings": len(balances.open_trainings)},
    )
    return dg.MaterializeResult(metadata=metadata, check_results=[check, balanced])


def _read_audit(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise InputError(
            "the audit file the `audit` asset wrote", f"no file at {path}",
            "re-materialize `audit` for this partition, then `credit_settlement`",
        ) from exc


# ------------------------------------------------------------------------------------------------
# Retention
# ------------------------------------------------------------------------------------------------


class RetentionConfig(dg.Config):
    """``now``: the sweep's time as ISO 8601 with a zone (the schedule passes its tick time);
    empty means the current time."""

    now: str = ""


def parse_now(value: str) -> dt.datetime:
    """An aware UTC time from ISO 8601 with a zone, from 1900 to 2199 (empty: now), read as
    every time option is (:func:`typestrict_pipeline.values.timestamp`).

    Raises:
        InputError: (a ``ValueError``) no zone, not ISO 8601, not a calendar date, or outside
            those years.
    """
    if not value:
        return dt.datetime.now(dt.UTC)
    return timestamp(value, "now", zone=True, fix=(
        "write the sweep's time with its zone in ops.expire_model_files.config.now, e.g. "
        "2026-01-31T04:00:00+00:00; leave it empty to sweep as of now"))


@dg.op(description="Delete what trainings past their retention keep of the customer's data "
                   "(models expired; trainings ended without a model); manifests and audits stay.")
def expire_model_files(
    context: dg.OpExecutionContext,
    config: RetentionConfig,
    store: StoreResource,
    refund_trainings: RefundTrainingsResource,
    credits: CreditsResource,
) -> int:
    now = parse_now(config.now)
    storage = Path(context.instance.storage_directory())
    with store.engine() as engine:
        sweep = sweep_retention(engine, now=now, trainings_dir=refund_trainings.trainings_dir(),
                                value_roots=pipeline_value_roots(storage), policy=credits.policy())
    for info in sweep.expired:
        context.log.info("expired %s (%s): deleted %s and the training's data (manifest and audit kept)",
                         info.model_id, info.workspace_id, info.files_path)
    for tid in sweep.cleared:
        context.log.info("cleared %s (ended without a model): deleted its data (manifest kept)", tid)
    for name in sweep.orphans:
        context.log.info("removed %s: left by a creation whose process died before its charge", name)
    context.add_output_metadata(
        {"now": now.isoformat(), "expired": len(sweep.expired),
         "models": ", ".join(i.model_id for i in sweep.expired) or "none",
         "cleared": ", ".join(sweep.cleared) or "none", "orphans": ", ".join(sweep.orphans) or "none"}
    )
    return len(sweep.expired)


@dg.job(description="Retention sweep: expire model files past their retention; audits stay.")
def retention_job() -> None:
    expire_model_files()


@dg.schedule(
    job=retention_job,
    cron_schedule="0 4 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily at 04:00 UTC: expire model files whose retention has passed.",
)
def retention_schedule(context: dg.ScheduleEvaluationContext, store: StoreResource) -> dg.RunRequest:
    now = context.scheduled_execution_time.astimezone(dt.UTC)
    return store_run_request(
        store.resolved_url(),
        run_key=f"retention:{now.strftime('%Y-%m-%dT%H:%M')}",
        run_config={"ops": {"expire_model_files": {"config": {"now": now.isoformat()}}}},
        tags={"typestrict/area": "credits"},
    )


# ------------------------------------------------------------------------------------------------
# The training sensor
# ------------------------------------------------------------------------------------------------


def _training_files(refund_trainings: RefundTrainingsResource, training_id: str) -> list[Path]:
    """The files whose change means a refused training was corrected: its manifest, dataset and
    predictions files (those that can be read from the manifest)."""
    files = [refund_trainings.manifest_path(training_id)]
    with contextlib.suppress(TypeStrictError, OSError, ValueError):
        manifest = refund_trainings.load(training_id)
        files.append(manifest.dataset.path)
        for source in (manifest.jev, manifest.model):
            if isinstance(source, PredictionsFileSource):
                files.append(source.path)
    return files


def _screen(refund_trainings: RefundTrainingsResource, training_id: str) -> str | None:
    try:
        return screen_training(refund_trainings.load(training_id))
    except TypeStrictError as exc:
        return str(exc)


def _resubmissions(context: dg.SensorEvaluationContext, store: StoreResource,
                   known: Sequence[str]) -> list[dg.RunRequest]:
    """Judging trainings whose corrected predictions have no verdict run yet."""
    with store.engine() as engine:
        judging = judging_since(engine)
    if not judging:
        return []

    def last_run(tid: str) -> dt.datetime | None:
        records = context.instance.get_run_records(
            dg.RunsFilter(job_name=VERDICT_JOB, tags={"dagster/partition": tid}), limit=1)
        return records[0].create_timestamp if records else None

    url = store.resolved_url()
    return [store_run_request(url, run_key=rerun_key(tid, n), partition_key=tid, run_config=VERDICT_JOB_EXECUTION,
                              tags={"typestrict/training": tid, "typestrict/submission": str(n)})
            for tid, n in resubmitted(judging, partitions=known, last_run_created=last_run)]


@dg.sensor(
    job_name=VERDICT_JOB,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "New finished trainings: a manifest at <trainings>/<id>/manifest.json whose predictions "
        "fit its split adds partition <id> of `trainings` and requests its verdict_job run once "
        "(run key verdict:<id>); corrected predictions after a refusal get a run of their own."
    ),
)
def training_sensor(
    context: dg.SensorEvaluationContext, refund_trainings: RefundTrainingsResource,
    store: StoreResource,
) -> dg.SensorResult | dg.SkipReason:
    folder = refund_trainings.trainings_dir()
    ids = refund_trainings.training_ids()
    known = context.instance.get_dynamic_partitions(PARTITIONS_NAME)
    decision = decide(ids, known_partitions=known, cursor=context.cursor)
    with store.engine() as engine:  # submitted through the API or the CLI: checked there already;
        submitted = submitted_ids(engine, decision.new)  # its run's refusal makes it `failed`
    accepted, refused, messages = screen(
        decision.new, refused=parse_refused(context.cursor),
        fingerprints=lambda tid: fingerprint(_training_files(refund_trainings, tid)),
        check=lambda tid: None if tid in submitted else _screen(refund_trainings, tid))
    for tid, message in messages.items():
        context.log.warning("training %s refused before any run: %s", tid, message)
    cursor = next_cursor(context.cursor, requested=accepted, refused=refused, known_partitions=known)
    reruns = _resubmissions(context, store, known)
    url = store.resolved_url()  # every run acts on the store this tick read
    if not accepted and not reruns:
        if cursor != (context.cursor or ""):
            context.update_cursor(cursor)
        why = "; ".join(f"{t}: {m}" for t, m in messages.items())
        return dg.SkipReason(
            f"No new training manifests in {folder} ({len(ids)} registered, all requested already"
            + (f"; {len(refused)} refused until their files change" if refused else "") + ")"
            + (f". Refused now: {why}"[:4000] if why else ""))
    return dg.SensorResult(
        run_requests=[
            *[store_run_request(url, run_key=run_key(tid), partition_key=tid, run_config=VERDICT_JOB_EXECUTION,
                                tags={"typestrict/training": tid})
              for tid in accepted],
            *reruns,
        ],
        dynamic_partitions_requests=(
            [trainings_partitions.build_add_request(list(accepted))] if accepted else []),
        cursor=cursor,
    )


def build_defs() -> dg.Definitions:
    """The credits area's asset, job, schedule and sensor."""
    return dg.Definitions(
        assets=[credit_settlement],
        jobs=[retention_job],
        schedules=[retention_schedule],
        sensors=[training_sensor],
    )
