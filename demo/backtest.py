"""The backtest part of `make demo`: "will it rain in Seattle tomorrow?" replayed over 2012-2015.

1. A local Dagster instance under ``<root>/dagster_home`` (SQLite), ``TYPESTRICT_HOME=<root>``
   (the domain store is ``<root>/store.db``).
2. The real data: Seattle daily weather 2012-2015 (NOAA), bundled in the vega_datasets wheel.
3. The model: the stand-in forecaster (a fixed logistic rule, not a language model) behind the
   stand-in OpenAI-compatible server, 20 ms per answer, called through the real HTTP client and
   priced per token ($0.15 / $0.60 per 1M tokens, illustrative).
4. ``backtest_seattle_rain_job`` runs in process: 1,460 daily steps, 16 model calls in flight,
   every step stored, the run tagged ``mode=HISTORICAL``. Its run card is printed.
5. One LIVE decision (``live_seattle_rain_job``) and the workspace's usage, historical and live
   apart.
"""

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import dagster as dg

from assets.backtests import backtest_usage, build_defs
from demo.runs import execute
from resources.backtests import StandinBacktestModels
from resources.store import StoreResource
from typestrict_pipeline.backtest.engine import RunCard
from typestrict_pipeline.backtest.store import list_backtests
from typestrict_pipeline.backtest.workflows.weather import load_seattle_weather
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.store import default_store_url, open_store

WORKFLOW = "seattle_rain"
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def run(root: Path) -> int:
    """Run one backtest and one live decision through Dagster; print the run card. Returns 0 on success."""
    print("\n=== Backtest: will it rain in Seattle tomorrow? (real NOAA data 2012-2015) ===")
    dagster_home = root / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    os.environ["TYPESTRICT_HOME"] = str(root)
    if not (dagster_home / "dagster.yaml").exists():
        write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
        "store": StoreResource(),
        "backtest_models": StandinBacktestModels(latency_s=0.02),
    }))
    instance = dg.DagsterInstance.get()
    started = time.perf_counter()
    job = defs.resolve_job_def(f"backtest_{WORKFLOW}_job")
    config = {"start": "2012-01-02", "end": "2015-12-31", "step": "1d", "max_in_flight": 16}
    result = execute(
        job, instance=instance, raise_on_error=False,
        run_config={**QUIET, "ops": {f"backtest_{WORKFLOW}": {"config": config}}},
    )
    if not result.success:
        print("  the backtest run failed:", result.get_step_failure_events()[:1])
        return 1
    run = instance.get_run_by_id(result.run_id)
    if run is None:
        print(f"  the backtest run {result.run_id} is missing from the Dagster instance")
        return 1
    tags = run.tags
    engine = open_store(default_store_url())
    try:
        stored = list_backtests(engine, workspace="demo", workflow=WORKFLOW, limit=1)[0]
    finally:
        engine.dispose()
    card: RunCard | None = stored.card
    assert card is not None
    print(card.to_text())
    print(f"  backtest id     {stored.id}; Dagster run {result.run_id[:8]} tagged "
          f"mode={tags.get('mode')} ({time.perf_counter() - started:.1f} s with Dagster)")

    rain = load_seattle_weather().view(card.end + dt.timedelta(days=1)).column("precipitation") > 0
    nxt, today = rain[1:], rain[:-1]  # decision days 2012-01-01 .. 2015-12-30 -> the next day
    print(f"  for reference   on the same {len(nxt)} days, always 'dry' scores "
          f"{float((~nxt).mean()):.4f} and 'same as today' {float((nxt == today).mean()):.4f}")

    live = execute(
        defs.resolve_job_def(f"live_{WORKFLOW}_job"), instance=instance, raise_on_error=False,
        run_config={**QUIET, "ops": {f"live_decision_{WORKFLOW}": {"config": {"as_of": "2016-01-01"}}}},
    )
    if not live.success:
        print("  the live run failed")
        return 1
    md = live.asset_materializations_for_node(f"live_decision_{WORKFLOW}")[0].metadata
    print(f"\nLive decision (mode={md['mode'].value}) as of {md['as_of'].value}: "
          f"{md['decision'].value} for {md['cost_usd'].value}")

    usage = dg.materialize([backtest_usage], instance=instance, resources={"store": StoreResource()},
                           run_config=QUIET)
    umd = usage.asset_materializations_for_node("backtest_usage")[0].metadata
    print(f"Workspace usage: HISTORICAL {umd['historical_usd'].value}, LIVE {umd['live_usd'].value} "
          "(typestrict usage demo shows it by day and workflow)")
    return 0
