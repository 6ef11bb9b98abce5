"""From data arrival to a scheduled re-run's result, under a real ``dagster-daemon`` (this machine).

A registered dataset ``seattle_live`` (Seattle rows known until 2012-04-01), a finished root
study on it (2 thresholds, 2 folds of 10 + 10 days, a 10-day holdout, min unseen steps 5), a
schedule every minute, and a daemon with ``TYPESTRICT_RERUN_SENSOR_INTERVAL_S=5`` on a SQLite
instance and store in a temporary folder. After the first tick skips, 10 days are appended with
``typestrict data append``; the script records when the append returned, when the daemon's
tick fired, when the run started and when it ended (Dagster's run stats).

Alternative measured in the same run: the same re-run done by hand right after an append, in
one process (``evaluate_due`` then ``execute_rerun``: what ``typestrict schedule tick --run``
does), i.e. the work itself without a daemon. Also timed: the per-tick freshness check on an
unchanged dataset (``read_csv_fresh``: one ``stat``) against re-reading the CSV every tick.

Run: ``.venv/bin/python -m bench.bench_reruns_arrival`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dagster as dg

from typestrict_pipeline.backtest.pit import PointInTimeTable, read_csv_fresh
from typestrict_pipeline.backtest.workflows.datasets import register_dataset
from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.processes import stop_process_group
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import (
    enable_schedule,
    evaluate_due,
    execute_rerun,
    recent_ticks,
)
from typestrict_pipeline.reruns.workspace import set_workspace, store_spend_source
from typestrict_pipeline.store import open_store, utcnow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CUT = dt.datetime(2012, 4, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def _wait(probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got is not None:
            return got
        time.sleep(0.5)
    raise RuntimeError("timed out")


def _prepare(home: Path, engine: Any, dataset: str) -> str:
    write_seattle_csv(home / f"{dataset}.csv", known_until=CUT)
    register_dataset(dataset, "seattle_rain", {"weather": home / f"{dataset}.csv"})
    root = scenario.create_seattle_study(engine, workspace=dataset, dataset=dataset, end=CUT,
                                         budget_micro_usd=1_000_000, min_unseen_steps=5)
    scenario.run(engine, root)
    set_workspace(engine, dataset, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    write_seattle_csv(home / f"{dataset}-april.csv", known_after=CUT, known_until=CUT + 10 * DAY)
    return root


def _append(env: dict[str, str], home: Path, dataset: str) -> float:
    subprocess.run([str(BIN / "typestrict"), "data", "append", dataset, str(home / f"{dataset}-april.csv")],
                   env=env, cwd=REPO, check=True, capture_output=True, timeout=120)
    return time.time()


def _daemon_run(home: Path, env: dict[str, str], engine: Any) -> dict[str, float]:
    instance = dg.DagsterInstance.get()
    root = _prepare(home, engine, "live_daemon")
    with (home / "daemon.log").open("wb") as out:
        proc = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-m", "typestrict_pipeline.definitions"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        sched = enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1m",
                                owner="ana@example.com", now=utcnow() - dt.timedelta(seconds=40))
        _wait(lambda: next((t for t in recent_ticks(engine, sched.id, 5) if t.source == "sensor"), None), 600)
        appended = _append(env, home, "live_daemon")
        fired = _wait(lambda: next((t for t in recent_ticks(engine, sched.id, 5) if t.outcome.value == "FIRED"), None),
                      600)
        def launched() -> dg.DagsterRun | None:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name="study_rerun_job"), limit=1)
            return runs[0] if runs else None

        run = _wait(launched, 600)
        _wait(lambda: True if (r := instance.get_run_by_id(run.run_id)) is not None and r.is_finished else None, 900)
        stats = instance.get_run_stats(run.run_id)
        assert stats.start_time is not None and stats.end_time is not None
        return {"fired": fired.at.timestamp() - appended, "queued": stats.start_time - fired.at.timestamp(),
                "run": stats.end_time - stats.start_time, "total": stats.end_time - appended}
    finally:
        stop_process_group(proc, timeout_s=60)


def _in_process(home: Path, env: dict[str, str], engine: Any) -> float:
    root = _prepare(home, engine, "live_direct")
    enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1m", owner="ana@example.com",
                    now=utcnow() - dt.timedelta(minutes=5))
    appended = _append(env, home, "live_direct")
    results, _ = evaluate_due(engine, scenario.port(engine), spend=store_spend_source(engine), source="cli")
    [key] = [r.run_key for r in results if r.run_key is not None]
    execute_rerun(engine, scenario.port(engine), key)
    return time.time() - appended


def _freshness(home: Path) -> tuple[float, float]:
    path = home / "seattle.csv"
    write_seattle_csv(path)
    read_csv_fresh(path, "weather")

    def per_call(fn: Any, n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - started) / n

    hit = statistics.median(per_call(lambda: read_csv_fresh(path, "weather"), 200) for _ in range(5))
    full = statistics.median(per_call(lambda: PointInTimeTable.from_csv(path, "weather"), 5) for _ in range(5))
    return hit, full


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, dagster_home = Path(tmp) / "home", Path(tmp) / "dagster_home"
        home.mkdir()
        dagster_home.mkdir()
        write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
        env = {**os.environ, "TYPESTRICT_HOME": str(home), "DAGSTER_HOME": str(dagster_home),
               "TYPESTRICT_STORE_URL": f"sqlite:///{home / 'store.db'}", "TYPESTRICT_RERUN_SENSOR_INTERVAL_S": "5",
               "TYPESTRICT_NOTIFY_TRANSPORT": "file"}
        env.pop("TYPESTRICT_DATASETS_DIR", None)
        os.environ.update({k: env[k] for k in ("TYPESTRICT_HOME", "DAGSTER_HOME", "TYPESTRICT_STORE_URL")})
        engine = open_store(env["TYPESTRICT_STORE_URL"])
        hit, full = _freshness(home)
        print(f"freshness check per tick, unchanged 1,461-row dataset: {hit * 1e6:.0f} us (stat); "
              f"re-reading the CSV every tick: {full * 1e3:.1f} ms ({full / hit:.0f}x)")
        direct = _in_process(home, env, engine)
        print(f"in one process (tick --run), append returned -> re-run result: {direct:.1f} s")
        d = _daemon_run(home, env, engine)
        print(f"under dagster-daemon (sensor every 5 s, cadence 1 min): append returned -> tick fired "
              f"{d['fired']:.1f} s; fired -> run started {d['queued']:.1f} s; run {d['run']:.1f} s; "
              f"append -> re-run result {d['total']:.1f} s")
        engine.dispose()


if __name__ == "__main__":
    main()
