"""Dagster wiring for the backtests area: one backtest asset and one live asset per registered workflow.

For every workflow in ``typestrict_pipeline.backtest.workflows.default_registry()``:

* ``backtest_<workflow>`` (group ``backtests``): replays the workflow's active version over the
  configured time range and step (launchpad config :class:`BacktestConfig`), stores every step
  and call, and shows the run card as metadata. Its job ``backtest_<workflow>_job`` carries the
  run tags ``mode=HISTORICAL`` and ``workflow=<name>``; the asset also stamps ``mode=HISTORICAL``
  on whatever run materializes it, and refuses a run tagged ``LIVE``.
* ``live_decision_<workflow>``: one LIVE decision now (job ``live_<workflow>_job``, tags
  ``mode=LIVE``; schedule ``live_<workflow>_schedule``, daily, off by default; its run acts on
  the store the schedule read: run config and ``typestrict/store`` tag).

Plus ``backtest_usage`` (job ``backtest_usage_job``): a workspace's spend by day and by workflow,
historical and live apart.

All logic is in ``typestrict_pipeline.backtest``; this module only wires it.
"""

import datetime as dt
import json
from typing import Any

import dagster as dg

from resources.backtests import BacktestModels
from resources.failures import failure
from resources.store import StoreResource, store_run_request
from typestrict_pipeline import plots
from typestrict_pipeline.backtest.engine import RunCard, parse_step, short_of_complete
from typestrict_pipeline.backtest.metering import RunMode, format_usd
from typestrict_pipeline.backtest.pit import PointInTimeTable, format_time
from typestrict_pipeline.backtest.service import (
    active_workflow,
    parse_time,
    run_and_store_backtest,
    run_and_store_live,
)
from typestrict_pipeline.backtest.store import UsageRow, usage
from typestrict_pipeline.backtest.workflows import default_registry, load_dataset
from typestrict_pipeline.errors import TypeStrictError

GROUP = "backtests"
MODE_TAG = "mode"


class BacktestConfig(dg.Config):
    """A backtest's configuration (the launchpad).

    Attributes:
        workspace: the workspace the run and its spend belong to.
        dataset: a named dataset (``seattle_weather``) ...
        csv_path: ... or a CSV with ``event_time`` and ``known_time`` columns (then ``table``).
        table: the table name for ``csv_path``.
        start: first decision time (ISO 8601; a date means 00:00 UTC).
        end: last decision time; ``end - start`` must be a whole number of steps.
        step: step size: ``1d``, ``12h``, ``30m``, ``1w``.
        params: parameter overrides (the run's version changes accordingly).
        prompts: prompt overrides by step name.
        max_in_flight: steps and model calls in flight at once.
        retries: extra attempts per model call after a failure (each metered).
        on_step_error: ``continue`` or ``stop`` after a failed step.
        backtest_id: the id to store it under (the API names a backtest before its run
            starts, ``typestrict_pipeline/api/backtests.py``); empty means a new one.
    """

    workspace: str = "demo"
    dataset: str = "seattle_weather"
    csv_path: str | None = None
    table: str = "weather"
    start: str = "2015-01-01"
    end: str = "2015-12-31"
    step: str = "1d"
    params: dict[str, Any] = {}  # noqa: RUF012 - pydantic copies defaults
    prompts: dict[str, str] = {}  # noqa: RUF012 - pydantic copies defaults
    max_in_flight: int = 8
    retries: int = 0
    on_step_error: str = "continue"
    backtest_id: str | None = None


class LiveConfig(dg.Config):
    """A live run's configuration.

    Attributes:
        workspace: the workspace.
        dataset: the named dataset holding the latest data.
        as_of: decide as of this time (ISO 8601); empty means now.
    """

    workspace: str = "demo"
    dataset: str = "seattle_weather"
    as_of: str | None = None


class UsageConfig(dg.Config):
    """Which workspace's usage to show.

    Attributes:
        workspace: the workspace.
        since: first day (``YYYY-MM-DD``), optional.
    """

    workspace: str = "demo"
    since: str | None = None


def _stamp_mode(context: dg.AssetExecutionContext, mode: RunMode, workflow: str) -> None:
    """Tag the run with its mode; refuse a run already tagged with the other mode."""
    tags = context.run.tags
    if tags.get(MODE_TAG) not in (None, mode.value):
        raise failure(
            f"expected a run tagged {MODE_TAG}={mode.value}, got {MODE_TAG}={tags[MODE_TAG]}. "
            "Launch backtests from backtest_<workflow>_job and live runs from live_<workflow>_job."
        )
    if tags.get(MODE_TAG) != mode.value or tags.get("workflow") != workflow:
        context.instance.add_run_tags(context.run.run_id, {MODE_TAG: mode.value, "workflow": workflow})


def _data(config: BacktestConfig | LiveConfig) -> tuple[dict[str, PointInTimeTable], str]:
    csv_path = getattr(config, "csv_path", None)
    if csv_path:
        table = PointInTimeTable.from_csv(csv_path, getattr(config, "table", "data"))
        return {table.name: table}, csv_path
    return dict(load_dataset(config.dataset)), config.dataset


def card_metadata(card: RunCard, backtest_id: str) -> dict[str, Any]:
    """The run card as materialization metadata."""
    per_step = card.cost_per_step_micro_usd
    buckets = [
        dg.TableRecord({"from": b.start.date().isoformat(), "to": b.end.date().isoformat(),
                        "steps": b.steps, "scored": b.scored,
                        "mean_score": plots.for_reading(b.mean_score) if b.mean_score is not None
                        else float("nan")})
        for b in card.score_over_time
    ]
    picture = plots.score_over_time_png(
        [b.start.date().isoformat() for b in card.score_over_time],
        [b.mean_score for b in card.score_over_time], mean_score=card.mean_score)
    return {
        "mode": card.mode.value,
        "status": card.status.value,
        "backtest_id": backtest_id,
        "workflow": card.workflow,
        "version_id": card.version_id,
        "time_range": f"{format_time(card.start)} .. {format_time(card.end)}",
        "step": str(card.step),
        "steps_planned": dg.MetadataValue.int(card.steps_planned),
        "steps_run": dg.MetadataValue.int(card.steps_run),
        "steps_failed": dg.MetadataValue.int(card.steps_failed),
        "steps_unscored": dg.MetadataValue.int(card.steps_unscored),
        "mean_score": (dg.MetadataValue.float(plots.for_reading(card.mean_score))
                       if card.mean_score is not None
                       else dg.MetadataValue.text("n/a (no scored step)")),
        "score_over_time": dg.MetadataValue.table(
            buckets,
            schema=dg.TableSchema(columns=[
                dg.TableColumn("from", "string"), dg.TableColumn("to", "string"),
                dg.TableColumn("steps", "int"), dg.TableColumn("scored", "int"),
                dg.TableColumn("mean_score", "float"),
            ]),
        ),
        "score_over_time_picture": dg.MetadataValue.md(plots.png_markdown(picture, "score over time")),
        "cost_usd": format_usd(card.cost_micro_usd),
        "cost_micro_usd": dg.MetadataValue.int(card.cost_micro_usd),
        "cost_per_step_usd": "n/a" if per_step is None else f"${per_step / 1e6:.6f}",
        "model_calls": dg.MetadataValue.int(card.model_calls),
        "judge_calls": dg.MetadataValue.int(card.judge_calls),
        "failed_calls": dg.MetadataValue.int(card.failed_calls),
        "params": dg.MetadataValue.json(dict(card.params)),
        "run_card": dg.MetadataValue.md("```\n" + card.to_text() + "\n```"),
    }


def _backtest_asset(name: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"backtest_{name}",
        group_name=GROUP,
        kinds={"python"},
        op_tags={MODE_TAG: RunMode.HISTORICAL.value},
        description=(
            f"A HISTORICAL backtest of workflow {name!r}: one decision per step with only what was "
            "knowable then, scored by what happened next, every model call costed. Configure the "
            "range, step and data in the launchpad."
        ),
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: BacktestConfig,
        store: StoreResource,
        backtest_models: BacktestModels,
    ) -> dg.MaterializeResult[Any]:
        _stamp_mode(context, RunMode.HISTORICAL, name)
        try:
            data, label = _data(config)
            with store.engine() as engine:
                workflow = active_workflow(engine, name, workspace=config.workspace)
                with backtest_models.open(workflow) as models:
                    backtest_id, result = run_and_store_backtest(
                        engine, workflow, workspace=config.workspace, data=data, dataset=label,
                        start=parse_time(config.start, "start"), end=parse_time(config.end, "end"),
                        step=parse_step(config.step), models=models, params=config.params,
                        prompts=config.prompts, max_in_flight=config.max_in_flight,
                        retries=config.retries, on_step_error=config.on_step_error,
                        dagster_run_id=context.run.run_id, backtest_id=config.backtest_id,
                    )
        except TypeStrictError as exc:
            raise failure(str(exc), error=type(exc).__name__) from None
        context.log.info("backtest %s:\n%s", backtest_id, result.card.to_text())
        short = short_of_complete(backtest_id, result.card, keep_going="on_step_error: continue in the config")
        if short is not None:
            # Stored ``failed``, ``stopped`` or ``cancelled``: the run fails with why, what ran and
            # what to do (``backtest run`` exits non-zero with the same sentence), never a success
            # beside a backtest that did not complete.
            raise failure(short,
                          {"backtest_id": backtest_id, "status": result.card.status.value,
                           "run_card": dg.MetadataValue.md("```\n" + result.card.to_text() + "\n```")},
                          error="Backtest" + result.card.status.value.capitalize())
        return dg.MaterializeResult(metadata=card_metadata(result.card, backtest_id))

    return _asset


def _live_asset(name: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"live_decision_{name}",
        group_name=GROUP,
        kinds={"python"},
        op_tags={MODE_TAG: RunMode.LIVE.value},
        description=f"A LIVE decision of workflow {name!r}'s active version, with everything known now.",
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: LiveConfig,
        store: StoreResource,
        backtest_models: BacktestModels,
    ) -> dg.MaterializeResult[Any]:
        _stamp_mode(context, RunMode.LIVE, name)
        try:
            data, _label = _data(config)
            as_of = parse_time(config.as_of, "as_of") if config.as_of else None
            with store.engine() as engine:
                workflow = active_workflow(engine, name, workspace=config.workspace)
                with backtest_models.open(workflow) as models:
                    live_id, live = run_and_store_live(
                        engine, workflow, workspace=config.workspace, data=data, models=models,
                        as_of=as_of, dagster_run_id=context.run.run_id,
                    )
        except TypeStrictError as exc:
            raise failure(str(exc), error=type(exc).__name__) from None
        return dg.MaterializeResult(metadata={
            "mode": live.mode.value,
            "live_decision_id": live_id,
            "workflow": live.workflow,
            "version_id": live.version_id,
            "as_of": format_time(live.as_of),
            "status": live.status.value,
            "decision": dg.MetadataValue.json(json.loads(json.dumps(live.decision, default=str))),
            "error": live.error or "",
            "cost_usd": format_usd(live.cost_micro_usd),
        })

    return _asset


def usage_markdown(rows: list[UsageRow]) -> str:
    """Usage rows as a Markdown table, with totals by mode."""
    out = ["| day (UTC) | workflow | mode | calls | tokens in | tokens out | cost |",
           "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.day} | {r.workflow} | {r.mode.value} | {r.calls} | {r.input_tokens} | "
                   f"{r.output_tokens} | {format_usd(r.cost_micro_usd)} |")
    for mode in RunMode:
        total = sum(r.cost_micro_usd for r in rows if r.mode is mode)
        out.append(f"| total | | {mode.value} | | | | {format_usd(total)} |")
    return "\n".join(out)


@dg.asset(
    name="backtest_usage",
    group_name=GROUP,
    kinds={"sql"},
    description="A workspace's model spend by day and by workflow, historical and live apart.",
)
def backtest_usage(context: dg.AssetExecutionContext, config: UsageConfig, store: StoreResource) -> dg.MaterializeResult[Any]:
    since = dt.date.fromisoformat(config.since) if config.since else None
    with store.engine() as engine:
        rows = usage(engine, workspace=config.workspace, since=since)
    by_mode = {m.value: sum(r.cost_micro_usd for r in rows if r.mode is m) for m in RunMode}
    return dg.MaterializeResult(metadata={
        "workspace": config.workspace,
        "historical_usd": format_usd(by_mode[RunMode.HISTORICAL.value]),
        "live_usd": format_usd(by_mode[RunMode.LIVE.value]),
        "historical_micro_usd": dg.MetadataValue.int(by_mode[RunMode.HISTORICAL.value]),
        "live_micro_usd": dg.MetadataValue.int(by_mode[RunMode.LIVE.value]),
        "usage": dg.MetadataValue.md(usage_markdown(rows)),
    })


def _live_schedule(name: str, live_job: Any) -> dg.ScheduleDefinition:
    """``live_<name>_schedule``: daily at 00:05 UTC, off by default; its run acts on the store
    the schedule read (run config and ``typestrict/store`` tag)."""

    @dg.schedule(
        name=f"live_{name}_schedule", job=live_job, cron_schedule="5 0 * * *",
        execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Daily at 00:05 UTC: one LIVE decision of {name!r} (off by default).",
    )
    def _schedule(context: dg.ScheduleEvaluationContext, store: StoreResource) -> dg.RunRequest:
        return store_run_request(store.resolved_url(), run_key=None)

    return _schedule


def build_defs() -> dg.Definitions:
    """Assets, jobs and schedules for every registered workflow, plus the usage asset."""
    assets: list[Any] = [backtest_usage]
    jobs: list[Any] = [dg.define_asset_job("backtest_usage_job", selection=[backtest_usage])]
    schedules: list[Any] = []
    for name in default_registry().names():
        bt, live = _backtest_asset(name), _live_asset(name)
        assets += [bt, live]
        jobs.append(dg.define_asset_job(
            f"backtest_{name}_job", selection=[bt],
            tags={MODE_TAG: RunMode.HISTORICAL.value, "workflow": name},
            description=f"Backtest {name!r} (HISTORICAL).",
        ))
        live_job = dg.define_asset_job(
            f"live_{name}_job", selection=[live],
            tags={MODE_TAG: RunMode.LIVE.value, "workflow": name},
            description=f"Decide {name!r} now (LIVE).",
        )
        jobs.append(live_job)
        schedules.append(_live_schedule(name, live_job))
    return dg.Definitions(assets=assets, jobs=jobs, schedules=schedules)
