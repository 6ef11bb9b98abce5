"""A verdict through the production path: ``training_sensor`` under a real ``dagster-daemon``.

Nothing replaced: the shipped instance settings (``sqlite_instance_config``: the run queue and
its limits), the code location from ``workspace.yaml``, a training folder with a manifest, a
credit on the ledger. The daemon's sensor must request the training's ``verdict_job`` run, the
queue must launch it, and the run must succeed with its steps executed in the run's own
process (the job's in-process executor: one process for the whole chain, not one per step).
The first launch starts the product's warm run server (``resources/launcher.py``) and goes the
default way; the next training's run must be a fork of that server, its chain in that fork.
Every wait is bounded (the machine is shared: generous limits, never an assertion on time).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from resources.launcher import RUN_PROCESS_TAG
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.processes import stop_process_group
from typestrict_pipeline.store import open_store

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
DONE = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


def _wait_for_run(instance: dg.DagsterInstance, daemon: subprocess.Popen[bytes], log: Path,
                  training: str) -> dg.DagsterRun:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        assert daemon.poll() is None, "the daemon exited:\n" + log.read_text()[-3000:]
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="verdict_job",
                                                       tags={"dagster/partition": training}))
        if runs and runs[0].status in DONE:
            return runs[0]
        time.sleep(0.5)
    raise AssertionError(f"no finished verdict_job run after {RUN_TIMEOUT_S:.0f} s; daemon log:\n"
                         + log.read_text()[-3000:])


@pytest.mark.slow
def test_a_sensor_launched_verdict_runs_in_one_process_under_the_daemon(tmp_path: Path) -> None:
    home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
    dagster_home.mkdir(parents=True)
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    store_url = f"sqlite:///{home / 'store.db'}"
    support.make_training(home / "trainings", "tr_daemon", model_skill=0.95, jev_skill=0.55, seed=21)
    engine = open_store(store_url)
    CreditLedger(engine).grant("tests", 5, reference="daemon-test")
    engine.dispose()
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "TYPESTRICT_HOME": str(home),
           "TYPESTRICT_STORE_URL": store_url}
    # Create the instance's SQLite storage here first: two processes creating it at once race
    # on its schema stamp (UNIQUE constraint failed: alembic_version).
    dg.DagsterInstance.from_config(str(dagster_home)).dispose()
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            run = _wait_for_run(instance, daemon, log, "tr_daemon")
            logs = instance.all_logs(run.run_id)
            # The next training's run is a fork of the warm run server the first launch started.
            support.make_training(home / "trainings", "tr_warm", model_skill=0.95, jev_skill=0.55, seed=22)
            warm = _wait_for_run(instance, daemon, log, "tr_warm")
            warm_logs = instance.all_logs(warm.run_id)
    finally:
        stop_process_group(daemon, STOP_TIMEOUT_S)
    assert run.status == dg.DagsterRunStatus.SUCCESS, [e.message for e in logs if e.message][-20:]
    assert run.tags["typestrict/training"] == "tr_daemon" and run.tags["dagster/partition"] == "tr_daemon"
    assert run.tags["dagster/run_key"] == "verdict:tr_daemon"  # requested by training_sensor
    engine_text = " ".join(e.message or "" for e in logs if e.is_dagster_event and not e.step_key)
    assert "Executing steps in process" in engine_text  # the job's executor: in process
    step_pids = {e.dagster_event.pid for e in logs
                 if e.step_key and e.dagster_event is not None and e.dagster_event.pid is not None}
    assert len(step_pids) == 1 and daemon.pid not in step_pids and os.getpid() not in step_pids
    steps = {e.step_key for e in logs if e.step_key}
    assert {"verdict", "audit", "credit_settlement"} <= steps, steps  # the whole chain, in that one process
    assert RUN_PROCESS_TAG not in run.tags  # the first run: launched the default way
    assert warm.status == dg.DagsterRunStatus.SUCCESS, [e.message for e in warm_logs if e.message][-20:]
    forked = json.loads(warm.tags[RUN_PROCESS_TAG])["pid"]
    assert any("forked from the warm run server" in (e.message or "") for e in warm_logs)
    assert {e.dagster_event.pid for e in warm_logs if e.step_key and e.dagster_event is not None
            and e.dagster_event.pid is not None} == {forked}
