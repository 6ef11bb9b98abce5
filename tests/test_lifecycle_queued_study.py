"""A study the API created waits on its queued Dagster run, not on the API's process.

The API creates a study (``PENDING``), then queues its ``study_job`` run; the run waits in the
instance's queue (``max_concurrent_runs``) and outlives the server. Before, the server's process
held the study's lease while the run was queued, so a restart of the server (SIGTERM, a deploy)
made the reaper end the study ``INTERRUPTED`` ("its process ... is gone (killed, crashed or the
host restarted)") with its run still queued, and freed its workflow: a second study on the same
workflow was accepted, and whichever run started second failed. Now the study waits on its run:
it stays ``PENDING`` across the restart, keeps its workflow, and ends by itself only when its
run ends without starting it. A real ``typestrict api`` process, a real SIGTERM; no daemon, so
the run stays queued.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from assets.lifecycle import _due, run_ended
from typestrict_pipeline.api.studies import study_form_config
from typestrict_pipeline.lifecycle.leases import LeaseKind, holder
from typestrict_pipeline.lifecycle.reaper import reap
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.repository import WorkflowBusyError
from typestrict_pipeline.study.service import create_study_from_config
from typestrict_pipeline.study.tables import StudyRow

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 240.0  # a bound on every wait, never asserted as a duration
STUDY: dict[str, Any] = {
    "workflow": "seattle_rain", "start": "2013-06-01", "end": "2014-12-31", "tune_steps": 20,
    "eval_steps": 20, "holdout_steps": 20, "folds": 2, "grid": ["threshold=0.4,0.6"],
    "max_candidates": 2, "max_total_steps": 2000, "min_unseen_steps": 10,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _api(home: Path, store: str, log: Path) -> Iterator[str]:
    """``typestrict api`` in a process of its own; stopped with SIGTERM (a restart, a deploy)."""
    jev = home.parent / "jev.jsonl"
    jev.write_text('{"id": "x", "probs": {}}\n')
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TYPESTRICT_HOME": str(home),
           "DAGSTER_HOME": str(home / "dagster_home")}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "typestrict_pipeline.cli", "api", "--port", str(port), "--home", str(home),
             "--store", store, "--jev-source", json.dumps({"kind": "file", "path": str(jev)})],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                httpx.get(f"{url}/v1/health", timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the API did not start:\n" + log.read_text()[-3000:]
                time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("end", ["failed", "deleted"])
def test_a_study_whose_run_is_queued_outlives_a_restart_of_the_api_and_ends_with_its_run(
        tmp_path: Path, end: str) -> None:
    """Its run ends without starting it (failed), or an operator deletes the queued run from
    Dagster: the study ends by itself (a deleted run left it ``PENDING``, its workflow busy,
    until someone cancelled it)."""
    home = tmp_path / "home"
    store = f"sqlite:///{home / 'store.db'}"
    key = support.new_key(store, "acme")
    headers = {"Authorization": f"Bearer {key}"}
    log = tmp_path / "api.log"
    with _api(home, store, log) as url, httpx.Client(base_url=url, headers=headers, timeout=300) as c:
        created = c.post("/v1/studies", json=STUDY)
        assert created.status_code == 201, created.text
        study = created.json()
        assert study["state"] == "PENDING" and study["run_state"] == "queued"
    # The server was stopped (SIGTERM) with the study's run still in the queue.
    engine = open_store(store)
    try:
        assert reap(engine) == []  # what `typestrict study list` and a new study's creation do
        with session_scope(engine) as s:
            row = s.get(StudyRow, study["id"])
            assert row is not None and (row.state, row.error) == ("PENDING", None)
            assert row.dagster_run_id == study["run_id"]
        assert holder(engine, LeaseKind.STUDY, str(study["id"])) is None  # its run holds it, not a process
        with pytest.raises(WorkflowBusyError, match=f"got study {study['id']} \\(PENDING\\)"):
            create_study_from_config(engine, study_form_config(home, "acme", STUDY))  # still its workflow
        # Its run ends without starting it (here: failed by hand): the study ends by itself.
        with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
            now = dt.datetime.now(dt.UTC)
            assert _due(engine, now, run_ended(instance)) == []  # lifecycle_sensor: nothing to end
            run = instance.get_run_by_id(study["run_id"])
            assert run is not None
            if end == "failed":
                instance.report_run_failed(run)
            else:
                instance.delete_run(study["run_id"])
            assert _due(engine, now, run_ended(instance)) == [f"study:{study['id']}"]
            ended = reap(engine, run_ended=run_ended(instance))
        assert [(e.object_id, e.state) for e in ended] == [(str(study["id"]), "INTERRUPTED")]
        if end == "failed":
            assert f"its Dagster run {study['run_id']} ended FAILURE before the study did" in ended[0].why
        else:
            assert f"its queued Dagster run {study['run_id']} is no longer in Dagster's instance" in ended[0].why
        create_study_from_config(engine, study_form_config(home, "acme", STUDY))  # its workflow is free
    finally:
        engine.dispose()
