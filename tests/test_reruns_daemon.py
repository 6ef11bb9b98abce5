"""A real ``dagster-daemon`` sees rows appended to a registered dataset and fires the re-run by itself.

One short end-to-end test of what issue 12 found broken: a long-running daemon whose code server
had loaded the data kept skipping after new rows were appended. Here the daemon (and its code
server) run as real processes on a SQLite Dagster instance and a SQLite store in a temporary
folder; the test appends rows the documented way (``typestrict data append``) and polls until
a later tick fires and the daemon launches the re-run's run (the run itself is measured in
``bench/bench_reruns_arrival.py``). No wall-time assertion: every wait is a poll with a generous
timeout (the machine is shared).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
import pytest

from typestrict_pipeline.backtest.workflows.datasets import register_dataset
from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.processes import stop_process_group
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import (
    current_slot,
    enable_schedule,
    lineage_entries,
    recent_ticks,
)
from typestrict_pipeline.reruns.timeline import format_when
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store, utcnow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CUT = dt.datetime(2012, 4, 1, tzinfo=dt.UTC)  # the dataset is registered with rows known until here
DAY = dt.timedelta(days=1)
WS = "daemon"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, log: Path) -> T:
    """Poll ``probe`` every second until it returns something (else fail with the daemon's log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got is not None:
            return got
        time.sleep(1.0)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; daemon log tail:\n{tail}")


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
    home.mkdir()
    dagster_home.mkdir()
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    env = {
        "TYPESTRICT_HOME": str(home), "DAGSTER_HOME": str(dagster_home),
        "TYPESTRICT_STORE_URL": f"sqlite:///{home / 'store.db'}",
        "TYPESTRICT_RERUN_SENSOR_INTERVAL_S": "5", "TYPESTRICT_NOTIFY_TRANSPORT": "file",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    yield {"home": home, "dagster_home": dagster_home, "env": {**os.environ, **env}}


def start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-m", "typestrict_pipeline.definitions"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the daemon and what it started (its own process group), by its id."""
    stop_process_group(proc, timeout_s=60)


def sensor_ticks(instance: dg.DagsterInstance) -> list[Any]:
    """The study_rerun_sensor's ticks as the daemon stored them (the UI's tick history)."""
    states = [s for s in instance.all_instigator_state() if s.instigator_name == "study_rerun_sensor"]
    return [t for s in states for t in instance.get_ticks(s.instigator_origin_id, s.selector_id)]


@pytest.mark.slow
def test_daemon_sees_appended_rows_and_fires_the_next_tick_by_itself(deployment: dict[str, Any]) -> None:
    home: Path = deployment["home"]
    env: dict[str, str] = deployment["env"]
    log = home / "daemon.log"
    # The store and the Dagster instance's SQLite files are created here, before the daemon and
    # its code server start (two processes creating them at once can leave two schema heads).
    engine = open_store(env["TYPESTRICT_STORE_URL"])
    instance = dg.DagsterInstance.get()
    proc = start_daemon(env, log)  # starts while the root study is prepared below
    try:
        # A registered dataset, a finished root study on it (its holdout ends where the data
        # ends), a workspace with a subscription.
        write_seattle_csv(home / "until-april.csv", known_until=CUT)
        register_dataset("seattle_live", "seattle_rain", {"weather": home / "until-april.csv"})
        set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
        root = scenario.create_seattle_study(engine, workspace=WS, dataset="seattle_live", end=CUT,
                                             budget_micro_usd=1_000_000, min_unseen_steps=5)
        scenario.run(engine, root)
        write_seattle_csv(home / "april.csv", known_after=CUT, known_until=CUT + 10 * DAY)
        wait_for("the daemon's first sensor tick", lambda: sensor_ticks(instance) or None, 300, log)

        # A schedule every minute. Slots start at enabled_at + n minutes: enabling 40 s in the
        # past makes slot 0 due at once and slot 1 start 20 s later, after the append below
        # (a slower machine only waits for a later slot).
        schedule = enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1m",
                                   owner="ana@example.com", now=utcnow() - dt.timedelta(seconds=40))

        # 1. The daemon's code server reads the dataset and skips: nothing new after the holdout.
        first = wait_for("the schedule's first tick", lambda: next(
            (t for t in recent_ticks(engine, schedule.id, 20) if t.source == "sensor"), None), 180, log)
        assert first.message == "Not enough unseen data yet: 0 of 5 steps"

        # 2. Rows arrive the documented way, while the daemon keeps running.
        appended = subprocess.run(
            [str(BIN / "typestrict"), "data", "append", "seattle_live", str(home / "april.csv")],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert appended.returncode == 0, appended.stderr
        assert "10 rows added" in appended.stdout

        # 3. A later tick fires by itself; the run carries the reason and the lineage.
        def launched() -> dg.DagsterRun | None:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name="study_rerun_job"), limit=1)
            return runs[0] if runs else None

        run = wait_for("the re-run's Dagster run", launched, 240, log)
        assert run.tags["typestrict/reason"].startswith("Fired re-run #1: scored on 2012-04-0")
        assert "(5 of 10 unseen steps)" in run.tags["typestrict/reason"]
        assert run.tags["typestrict/lineage"] == root
        assert f"typestrict schedule lineage {root}" in run.tags["typestrict/open_lineage"]
        assert [e.seq for e in lineage_entries(engine, root)] == [0, 1]  # the claimed re-run #1
        # The tick history shows both: the skip with the page's reason (then which schedule and
        # when it is evaluated next, as every tick's reason says), and the tick that fired.
        slot = current_slot(schedule.enabled_at, 60, first.at)
        skipped = (f"Not enough unseen data yet: 0 of 5 steps (schedule {schedule.id}: study {root}, every 1m; "
                   f"next evaluation {format_when(schedule.enabled_at + (slot + 1) * dt.timedelta(minutes=1))})")
        reasons = [t.skip_reason for t in sensor_ticks(instance)]
        assert skipped in reasons, reasons
        wait_for("the fired tick in the tick history", lambda: next(
            (t for t in sensor_ticks(instance) if run.run_id in t.run_ids), None), 120, log)
    finally:
        stop(proc)
        engine.dispose()
