"""Dagster wiring of the lifecycles: deadlines, liveness, refusals (docs/lifecycle.md).

* ``lifecycle_sensor`` (every 30 s, on by default): decides whether a training's deadline has
  passed or a backtest, study or study run lost its process, and requests one ``lifecycle_job``
  run (run key: what is due), else skips with what it watched.
* ``lifecycle_job``: its op ``end_overdue_and_dead`` expires overdue trainings (their credit comes
  back once, operators are told) and marks dead backtests and studies ``interrupted`` (a study
  whose Dagster run ended without finishing it too), then checks ``ledger_balances``.
* ``verdict_refusal_sensor`` (a run failure sensor on ``verdict_job``): a verdict run that failed
  on the customer's predictions or data (not on our side) moves the training to ``failed`` with
  the product's message, in the store that run acted on; corrected predictions are then accepted.

The ``lifecycle_job`` run acts on the store its sensor read (run config and ``typestrict/store``
tag: ``resources.store.store_run_request``).

Every decision and write is in ``typestrict_pipeline.lifecycle``; this module only wires it.
"""

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any

import dagster as dg
from sqlalchemy import Engine, func, select

from assets.refund import verdict_job
from resources.refund import RefundTrainingsResource
from resources.store import StoreResource, store_of_run, store_run_request
from typestrict_pipeline.lifecycle.leases import LeaseKind, holders
from typestrict_pipeline.lifecycle.reaper import RUN_GONE, reap, run_gone_ends, waits_on_its_run
from typestrict_pipeline.lifecycle.tables import TrainingRow
from typestrict_pipeline.lifecycle.trainings import (
    OPEN_STATES,
    expire_due,
    ledger_balance,
    record_refusal,
)
from typestrict_pipeline.store import session_scope

LIFECYCLE_JOB = "lifecycle_job"
CUSTOMER_FIXABLE = frozenset({"PredictionsError", "TrainedOnError", "DatasetError", "NotEnoughDataError"})
"""The product's errors a customer fixes with other predictions or data (a verdict run failing
with any other error failed on our side: it is retried, flagged, and settled by its deadline)."""


def run_ended(instance: dg.DagsterInstance) -> Any:
    """``run_id -> status`` of a Dagster run that ended (None while it runs; ``RUN_GONE`` when
    the instance does not know it, which ends only a study waiting on it: ``run_gone_ends``)."""

    def ended(run_id: str) -> str | None:
        run = instance.get_run_by_id(run_id)
        if run is None:
            return RUN_GONE
        if not run.is_finished:
            return None
        return str(run.status.value)

    return ended


def _due(engine: Engine, now: dt.datetime, ended: Any) -> list[str]:
    """What the next lifecycle run would act on (read only): overdue trainings, dead holders."""
    from typestrict_pipeline.backtest.engine import BacktestStatus
    from typestrict_pipeline.backtest.tables import BacktestRow
    from typestrict_pipeline.study.tables import StudyRow, StudyState

    with session_scope(engine) as s:
        overdue = list(s.scalars(select(TrainingRow.training_id).where(
            TrainingRow.state.in_(OPEN_STATES), TrainingRow.deadline_at <= now).limit(200)))
        backtests = [str(i) for i in s.scalars(select(BacktestRow.id).where(
            BacktestRow.status == BacktestStatus.RUNNING.value))]
        studies = [(str(i), r, st) for i, r, st in s.execute(
            select(StudyRow.id, StudyRow.dagster_run_id, StudyRow.state).where(
                StudyRow.state.in_([StudyState.PENDING.value, StudyState.RUNNING.value]))).all()]
    due = [f"training:{t}" for t in overdue]
    leases = holders(engine, LeaseKind.BACKTEST, backtests) if backtests else {}
    due += [f"backtest:{b}" for b in backtests if b not in leases or not leases[b].alive(now)]
    study_leases = holders(engine, LeaseKind.STUDY, [i for i, _, _ in studies]) if studies else {}
    for sid, run_id, state in studies:
        held = study_leases.get(sid)
        if run_id and run_gone_ends(ended(run_id), state, run_id, held is not None) is not None:
            due.append(f"study:{sid}")
        elif held is None and waits_on_its_run(state, run_id):
            continue  # its run waits in the queue: it holds the study
        elif held is None or not held.alive(now):
            due.append(f"study:{sid}")
    return due


@dg.sensor(
    job_name=LIFECYCLE_JOB,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Every 30 s: a training past its deadline, or a backtest/study whose process is gone, "
        "requests lifecycle_job (which ends them: expired with the credit back, or interrupted)."
    ),
)
def lifecycle_sensor(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.RunRequest | dg.SkipReason:
    now = dt.datetime.now(dt.UTC)
    with store.engine() as engine:
        due = _due(engine, now, run_ended(context.instance))
        with session_scope(engine) as s:
            open_trainings = s.scalar(select(func.count()).select_from(TrainingRow).where(
                TrainingRow.state.in_(OPEN_STATES))) or 0
    if not due:
        return dg.SkipReason(
            f"Nothing overdue or dead: {open_trainings} open training(s), every one before its "
            "deadline; every running backtest and study has a live process")
    key = hashlib.sha256("\n".join(sorted(due)).encode()).hexdigest()[:16]
    return store_run_request(store.resolved_url(), run_key=f"lifecycle:{key}",
                             tags={"typestrict/area": "lifecycle", "typestrict/due": ", ".join(due[:20])[:200]})


@dg.op(description="Expire overdue trainings (credit back, operators told); mark dead backtests "
                   "and studies interrupted; check that the ledger balances.")
def end_overdue_and_dead(context: dg.OpExecutionContext, store: StoreResource,
                         refund_trainings: RefundTrainingsResource) -> int:
    now = dt.datetime.now(dt.UTC)
    with store.engine() as engine:
        expired = expire_due(engine, now=now, trainings_dir=refund_trainings.trainings_dir())
        ended = reap(engine, now=now, run_ended=run_ended(context.instance))
        for e in expired:
            context.log.warning("training %s expired (was %s): %s; credit %s", e.training_id,
                                e.was.value, e.reason, "returned" if e.refunded else "never charged")
        for x in ended:
            context.log.warning("%s %s: %s", x.kind, x.object_id, x.why)
        balances = ledger_balance(engine)  # the same check as credit_settlement's ledger_balances
    context.add_output_metadata({
        "expired": ", ".join(e.training_id for e in expired) or "none",
        "interrupted": ", ".join(f"{x.kind} {x.object_id}" for x in ended) or "none",
        "ledger_balances": balances.describe(),
    })
    if not balances.balanced:
        raise dg.Failure(description=f"the ledger does not balance after these settlements: "
                                     f"{balances.describe()}. Look at the trainings named")
    return len(expired) + len(ended)


@dg.job(description="End what nothing else will: overdue trainings (expired, credit back) and "
                    "backtests/studies whose process died (interrupted).",
        tags={"typestrict/area": "lifecycle"})
def lifecycle_job() -> None:
    end_overdue_and_dead()


def customer_fixable(events: Sequence[Any]) -> str | None:
    """The product's message of a step failure the customer can fix, or None (ours)."""
    for event in events:
        data = getattr(event, "step_failure_data", None)
        user = getattr(data, "user_failure_data", None)
        meta = getattr(user, "metadata", None) or {}
        error = meta.get("error")
        cls = getattr(error, "value", error)
        if cls in CUSTOMER_FIXABLE and meta.get("system") != "jev":
            return str(getattr(user, "description", "") or "the verdict run refused its input")
    return None


@dg.run_failure_sensor(
    monitored_jobs=[verdict_job],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A verdict run that failed on the customer's predictions or data moves the "
                "training to failed (with the message); corrected predictions are then accepted.",
)
def verdict_refusal_sensor(context: dg.RunFailureSensorContext, store: StoreResource,
                           refund_trainings: RefundTrainingsResource) -> dg.SkipReason | None:
    training_id = context.dagster_run.tags.get("dagster/partition")
    message = customer_fixable(context.get_step_failure_events())
    if training_id is None or message is None:
        return dg.SkipReason("the run failed on our side: it is retried, flagged and settled by "
                             "its deadline")
    manifest = refund_trainings.load(training_id)
    # The refusal is recorded in the store the failed run acted on (its run config names it).
    with store_of_run(context.dagster_run.run_config, store).engine() as engine:
        record_refusal(engine, training_id, manifest.workspace_id, message)
    return None


def build_defs() -> dg.Definitions:
    """The lifecycle's sensors and job."""
    return dg.Definitions(jobs=[lifecycle_job], sensors=[lifecycle_sensor, verdict_refusal_sensor])
