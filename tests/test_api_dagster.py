"""An API customer's whole backtests path on the production wiring: a real ``dagster-daemon`` on
the product's instance, the code location from ``workspace.yaml``, the API on a real server.

The customer runs a backtest (a ``backtest_seattle_rain_job`` run), which gives the version a
cost per step, so the study form can estimate a USD budget; creates a study with a USD budget
(a ``study_job`` run, launched while the API server is then stopped: the run does not depend on
it); reads the finished study from a new server; and schedules its re-runs. Nothing runs in the
API's process: each run reports its own process. The daemon's environment names another store:
every run acts on the store the API gave it (its run config), not on the daemon's.

Every wait is bounded (generous: the machine is shared), never an assertion on time.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.processes import stop_process_group

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 900.0
WS = "acme"
STUDY: dict[str, Any] = {
    "workflow": "seattle_rain", "start": "2013-06-01", "end": "2014-12-31", "tune_steps": 20,
    "eval_steps": 20, "holdout_steps": 20, "folds": 2, "grid": ["threshold=0.4,0.6"],
    "max_candidates": 2, "max_total_steps": 2000, "min_unseen_steps": 10,
}


@dataclass
class World:
    home: Path
    store: str
    dagster_home: Path
    daemon: subprocess.Popen[bytes]
    log: Path

    def server(self) -> Any:
        return support.ApiServer(self.store, self.home, dagster_home=self.dagster_home)

    def wait(self, check: Any, what: str) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.daemon.poll() is None, "the daemon exited:\n" + self.log.read_text()[-3000:]
            found = check()
            if found:
                return found
            time.sleep(1.0)
        raise AssertionError(f"{what} not done after {WAIT_S:.0f} s; daemon log:\n" + self.log.read_text()[-3000:])


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    home, dagster_home = tmp_path / "home", tmp_path / "home" / "dagster_home"
    dagster_home.mkdir(parents=True)
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    dg.DagsterInstance.from_config(str(dagster_home)).dispose()  # storage made once, before two processes
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "TYPESTRICT_HOME": str(home),
           "TYPESTRICT_STORE_URL": f"sqlite:///{tmp_path / 'elsewhere' / 'store.db'}"}
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield World(home, f"sqlite:///{home / 'store.db'}", dagster_home, daemon, log)
    finally:
        stop_process_group(daemon, 60)


def _run(world: World, run_id: str) -> dg.DagsterRun:
    with dg.DagsterInstance.from_config(str(world.dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        return run


def _run_pids(world: World, run_id: str) -> set[int]:
    with dg.DagsterInstance.from_config(str(world.dagster_home)) as instance:
        return {e.dagster_event.pid for e in instance.all_logs(run_id)
                if e.dagster_event is not None and e.dagster_event.pid is not None}


@pytest.mark.slow
def test_an_api_customer_runs_a_backtest_gets_a_usd_budget_and_schedules_a_rerun(world: World) -> None:
    key = support.new_key(world.store, WS)
    with world.server() as server, server.client(key) as c:
        # No backtest yet: the form refuses a USD budget, with the page's words.
        refused = c.post("/v1/studies/estimate", json={**STUDY, "budget_usd": 0.05})
        assert refused.status_code == 422
        assert "Run a backtest first" in refused.json()["error"]["message"] or \
            "no completed backtest" in refused.json()["error"]["message"]
        started = c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2014-01-01",
                                                "end": "2014-01-31"})
        assert started.status_code == 202, started.text
        assert started.json()["state"] == "queued" and started.json()["steps_planned"] == 31
        backtest_id = started.json()["id"]
        assert [b["id"] for b in c.get("/v1/backtests").json()] == [backtest_id]
        done = world.wait(lambda: (lambda b: b if b["state"] not in ("queued", "running") else None)(
            c.get(f"/v1/backtests/{backtest_id}").json()), "the backtest")
    assert done["state"] == "completed", done
    assert done["mode"] == "HISTORICAL" and done["steps_run"] == 31 and done["cost_micro_usd"] > 0
    assert "HISTORICAL" in done["card"]
    run = world.wait(lambda: (lambda r: r if r.is_finished else None)(_run(world, done["run_id"])), "its run")
    assert run.job_name == "backtest_seattle_rain_job" and run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags["mode"] == "HISTORICAL"  # a replay of history is marked so (issue 3/7)
    assert os.getpid() not in _run_pids(world, run.run_id)  # run by the daemon's launcher, elsewhere

    with world.server() as server, server.client(key) as c:
        estimate = c.post("/v1/studies/estimate", json={**STUDY, "budget_usd": 0.05})
        assert estimate.status_code == 200, estimate.text
        assert estimate.json()["estimate_micro_usd"] > 0 and estimate.json()["text"].startswith("≈ $")
        created = c.post("/v1/studies", json={**STUDY, "budget_usd": 0.05})
        assert created.status_code == 201, created.text
        study = created.json()
        assert study["budget_micro_usd"] == 50_000 and study["state"] == "PENDING"
    # The server is gone: the study's run is the daemon's business.
    finished = world.wait(lambda: (lambda r: r if r.is_finished else None)(_run(world, study["run_id"])),
                          "the study's run")
    assert finished.status == dg.DagsterRunStatus.SUCCESS and finished.job_name == "study_job"
    assert finished.tags["mode"] == "HISTORICAL"
    assert os.getpid() not in _run_pids(world, finished.run_id)

    with world.server() as server, server.client(key) as c:
        read = c.get(f"/v1/studies/{study['id']}").json()
        assert read["state"] in ("FINISHED", "BUDGET_REACHED") and read["run_state"] == "succeeded"
        assert read["spend_micro_usd"] > 0 and read["run_id"] == study["run_id"]
        board = c.get(f"/v1/studies/{study['id']}/leaderboard").json()
        assert len(board["rows"]) == 2
        # The operator sets up the workspace's subscription; the customer schedules the re-run.
        from typestrict_pipeline.reruns.decide import SubscriptionState
        from typestrict_pipeline.reruns.workspace import set_workspace
        from typestrict_pipeline.store import open_store

        engine = open_store(world.store)
        try:
            set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=5_000_000)
        finally:
            engine.dispose()
        budget = c.put(f"/v1/workspaces/{WS}/budget", json={"budget_usd": 20})
        assert budget.status_code == 200 and budget.json()["budget_micro_usd"] == 20_000_000
        assert budget.json()["spent_micro_usd"] >= done["cost_micro_usd"] + read["spend_micro_usd"]
        scheduled = c.post(f"/v1/studies/{study['id']}/schedule",
                           json={"cadence": "1d", "owner": "ana@example.com"})
        assert scheduled.status_code == 201, scheduled.text
        assert scheduled.json()["state"] == "ENABLED" and scheduled.json()["min_unseen_steps"] == 10
        assert [s["id"] for s in c.get("/v1/schedules").json()["schedules"]] == [scheduled.json()["id"]]
        assert c.get("/v1/notifications").json()["settings"][0]["person"] == "ana@example.com"
    elsewhere = world.home.parent / "elsewhere" / "store.db"
    if elsewhere.exists():  # the daemon's own store got nothing of the runs
        import sqlite3

        conn = sqlite3.connect(elsewhere)
        try:
            tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for table in ("backtest_runs", "study_studies"):
                if table in tables:
                    assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
        finally:
            conn.close()


def test_a_backtest_is_checked_before_anything_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = f"sqlite:///{home / 'store.db'}"
    key = support.new_key(store, WS)
    with support.ApiServer(store, home) as server, server.client(key) as c:
        cases = [
            ({"workflow": "nope", "start": "2014-01-01", "end": "2014-01-31"}, "a registered workflow"),
            ({"workflow": "seattle_rain", "start": "2014-01-31", "end": "2014-01-01"}, "end is not before"),
            ({"workflow": "seattle_rain", "start": "2030-01-01", "end": "2030-01-31"}, "expected"),
            ({"workflow": "seattle_rain", "start": "2014-01-01", "end": "2014-01-31", "step": "1y"}, "step size"),
            ({"workflow": "seattle_rain", "start": "2014-01-01", "end": "2014-01-31", "dataset": "other"},
             "one this workspace registered"),
        ]
        for body, said in cases:
            r = c.post("/v1/backtests", json=body)
            assert r.status_code == 422, (body, r.text)
            assert said in r.json()["error"]["message"], (said, r.json())
        assert c.get("/v1/backtests").json() == []
        with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
            assert instance.get_runs() == []  # nothing was launched
        assert c.get("/v1/backtests/0123abcd").status_code == 404


def test_a_cancelled_backtest_leaves_the_queue_and_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = f"sqlite:///{home / 'store.db'}"
    key = support.new_key(store, WS)
    with support.ApiServer(store, home) as server, server.client(key) as c:
        started = c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2014-01-01",
                                                "end": "2014-01-10"}).json()
        cancelled = c.post(f"/v1/backtests/{started['id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        assert cancelled.json()["error"] == "cancelled before it started"
        with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
            run = instance.get_run_by_id(started["run_id"])
            assert run is not None and run.status == dg.DagsterRunStatus.CANCELED
        with httpx.Client(base_url=server.url, timeout=60) as anonymous:
            assert anonymous.get(f"/v1/backtests/{started['id']}").status_code == 401
