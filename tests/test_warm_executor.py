"""The warm multiprocess executor: a launched study's steps fork from its run process.

What a user relies on: a study launched with the job's default executor runs every step in a
process of its own, forked from the run process (no cold interpreter, no forkserver start) only
while that process has no other thread (a fork copies only the calling thread), falls back to a
forkserver otherwise and says so, and either way finishes the study exactly as in process: same
winner, same holdout score, same spend. Interrupting the run process (what Terminate does) stops
the forked steps with it. The run executes in a plain child interpreter, as a run
process does, so no thread of the test runner's is in it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from assets.studies import study_job, study_run_config
from resources.executor import other_threads
from resources.store import StoreResource
from resources.studies import StudyRunnerResource
from typestrict_pipeline.heap import frozen_heap
from typestrict_pipeline.processes import process_alive
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyState

UTC = dt.UTC
TESTS = Path(__file__).resolve().parent

_RUN = textwrap.dedent("""
    import json, os, sys, threading
    import dagster as dg
    from assets.studies import study_run_config
    import study_job_helper as helper

    sid, extra_thread = int(sys.argv[1]), sys.argv[2] == "thread"
    forks = []  # live threads in the run process at each fork it makes
    os.register_at_fork(before=lambda: forks.append(threading.active_count()))
    stop = threading.Event()
    if extra_thread:  # e.g. a progress bar's poller
        threading.Thread(target=stop.wait, name="progress", daemon=True).start()
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(dg.reconstructable(helper.make_study_job), instance=instance,
                                run_config=study_run_config(sid))
        pids = sorted({int(e.event_specific_data.metadata["pid"].value) for e in result.all_events
                       if e.event_type_value == "STEP_WORKER_STARTED"})
        notes = [e.message for e in result.all_events if e.is_engine_event
                 and "Warm multiprocess executor" in (e.message or "")]
    stop.set()
    print(json.dumps({"success": result.success, "forks": forks, "pids": pids,
                      "run_pid": os.getpid(), "notes": notes}))
""")


def _config(n: int = 4) -> StudyConfig:
    return StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5 + 0.02 * i for i in range(n)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=n, max_total_steps=100_000,
        backend={"backend": "synthetic", "cost_per_step": 3},
    )


def _run_env(home: Path, url: str) -> dict[str, str]:
    """The environment of a run process on a fresh instance at ``home`` and the store ``url``."""
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {**os.environ, "DAGSTER_HOME": str(home), "STUDY_TEST_STORE_URL": url,
            "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}


def _launch(url: str, sid: int, tmp_path: Path, mode: str) -> dict[str, object]:
    env = _run_env(tmp_path / f"dagster_home_{mode}", url)
    done = subprocess.run([sys.executable, "-c", _RUN, str(sid), mode], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _finished(url: str, sid: int) -> tuple[object, ...]:
    board = load_leaderboard(open_store(url), sid)
    assert board.state == StudyState.FINISHED
    return (board.winner_candidate_id is not None, board.holdout_score, board.spend_micro,
            [(r.label, r.oos, r.in_sample) for r in board.rows])


def _in_process(tmp_path: Path) -> tuple[object, ...]:
    url = f"sqlite:///{tmp_path / 'reference.db'}"
    sid = create_study_from_config(open_store(url), _config(), last_backtest=LastBacktest(30, 10))
    with dg.instance_for_test() as instance:
        assert study_job.execute_in_process(
            run_config=study_run_config(sid), instance=instance,
            resources={"store": StoreResource(url=url), "study_runner": StudyRunnerResource()},
        ).success
    return _finished(url, sid)


@pytest.mark.parametrize("mode", ["alone", "thread"])
def test_a_launched_study_forks_its_steps_only_from_a_single_threaded_run_process(
        tmp_path: Path, mode: str) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    sid = create_study_from_config(open_store(url), _config(), last_backtest=LastBacktest(30, 10))
    out = _launch(url, sid, tmp_path, mode)
    assert out["success"] is True
    pids = out["pids"]
    assert isinstance(pids, list) and len(pids) == 4  # plan, 2 chunks, finalize: a process each
    assert out["run_pid"] not in pids
    notes = out["notes"]
    assert isinstance(notes, list) and len(notes) == 1
    forks = out["forks"]
    assert isinstance(forks, list)
    if mode == "alone":
        assert "steps fork from this run process" in notes[0]
        # Every step was forked while the run process had its main thread only.
        assert len(forks) >= 4 and set(forks) == {1}
    else:
        assert "other threads (progress)" in notes[0] and "forkserver" in notes[0]
        assert len(forks) < 4  # the forkserver forks the steps, not the run process
    assert _finished(url, sid) == _in_process(tmp_path)


def test_other_threads_names_the_threads_a_fork_would_not_copy() -> None:
    import threading

    stop = threading.Event()
    extra = threading.Thread(target=stop.wait, name="poller", daemon=True)
    extra.start()
    try:
        assert "poller" in other_threads()
        assert threading.current_thread().name not in other_threads()
    finally:
        stop.set()
        extra.join()
    assert "poller" not in other_threads()  # (other tests' servers may still run here)


def test_frozen_heap_collects_nothing_twice_and_loses_nothing() -> None:
    import gc
    import weakref

    class Node:
        pass

    def cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        return weakref.ref(a)

    gc.collect()
    base = gc.get_freeze_count()
    old = cycle()  # garbage that exists when the block is entered
    with frozen_heap():
        assert gc.get_freeze_count() > base
        with frozen_heap():  # nested: the outer entry's freeze stands
            pass
        assert gc.get_freeze_count() > base
        new = cycle()  # garbage made inside the block: collected inside it
        gc.collect()
        assert new() is None and old() is not None  # the old cycle is frozen, not scanned
    assert gc.get_freeze_count() == base
    gc.collect()
    assert old() is None  # after the block, the old garbage is collected like any other


_SLOW_RUN = textwrap.dedent("""
    import sys
    import dagster as dg
    from assets.studies import study_run_config
    import study_job_helper as helper

    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(dg.reconstructable(helper.make_study_job), instance=instance,
                                run_config=study_run_config(int(sys.argv[1])), raise_on_error=False)
    print("RUN", result.run_id, result.success, flush=True)
""")


def test_interrupting_the_run_process_stops_its_forked_steps(tmp_path: Path) -> None:
    # What Terminate does to a run the product's launcher started (SIGINT to the run process):
    # the executor forwards it to the forked steps, which stop; nothing is left running.
    import signal
    import time

    url = f"sqlite:///{tmp_path / 'store.db'}"
    slow = {"backend": "synthetic", "cost_per_step": 3, "sleep_s": 0.05}
    sid = create_study_from_config(open_store(url), dataclasses.replace(_config(), backend=slow))
    home = tmp_path / "dagster_home"
    env = _run_env(home, url)
    run = subprocess.Popen([sys.executable, "-c", _SLOW_RUN, str(sid)], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            deadline = time.monotonic() + 120
            pids: list[int] = []
            while time.monotonic() < deadline and len(pids) < 2:  # both chunk steps started
                for r in instance.get_runs():
                    pids = [int(str(e.dagster_event.engine_event_data.metadata["pid"].value))
                            for e in instance.all_logs(r.run_id)
                            if e.dagster_event is not None
                            and e.dagster_event.event_type_value == "STEP_WORKER_STARTED"
                            and (e.step_key or "").startswith("study_backtests")]
                time.sleep(0.1)
            assert len(pids) == 2, "the chunk steps did not start"
            (started,) = instance.get_runs()
            instance.report_run_canceling(started)  # as the launcher's terminate does first
            run.send_signal(signal.SIGINT)
            out, _ = run.communicate(timeout=120)
            assert "RUN" in out and out.split()[-1] == "False"
            (record,) = instance.get_runs()
            assert record.status == dg.DagsterRunStatus.CANCELED
            said = " ".join(e.message or "" for e in instance.all_logs(record.run_id))
            assert "forwarding to active child processes" in said
            assert "interrupted all active child processes" in said
        # the forked steps ended with the run (bounded wait: a zombie is reaped by init)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(process_alive(p) for p in pids):
            time.sleep(0.1)
        assert not any(process_alive(p) for p in pids)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


_LANE_RUN = textwrap.dedent("""
    import json, sys
    import dagster as dg
    import lane_job_helper as helper

    limit, wait = sys.argv[1] == "limit", sys.argv[2] == "wait"
    multi = {"max_concurrent": 2}
    if limit:
        multi["tag_concurrency_limits"] = [{"key": "lane", "value": "store", "limit": 1}]
    ops = {name: {"config": {"wait_for_company": wait}} for name in ("left", "right")}
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(dg.reconstructable(helper.make_lane_job), instance=instance,
                                run_config={"execution": {"config": {"multiprocess": multi}}, "ops": ops})
    print(json.dumps({"success": result.success}))
""")


@pytest.mark.parametrize("limited", [True, False])
def test_tag_concurrency_limits_hold_steps_that_share_a_tag_back(tmp_path: Path, limited: bool) -> None:
    # As in Dagster's multiprocess executor: a launchpad can cap how many steps with a tag run at
    # once (e.g. steps that write to one store), whatever max_concurrent allows.
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    env = {**_run_env(tmp_path / "dagster_home", f"sqlite:///{tmp_path / 'unused.db'}"), "LANE_TEST_DIR": str(lanes)}
    args = ["limit", "sleep"] if limited else ["free", "wait"]
    done = subprocess.run([sys.executable, "-c", _LANE_RUN, *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"success": True}
    span = {name: (float((lanes / f"{name}.start").read_text()), float((lanes / f"{name}.end").read_text()))
            for name in ("left", "right")}
    (_, a_end), (b_start, _) = sorted(span.values())  # the earlier start first
    if limited:
        assert a_end <= b_start  # one after the other
    else:
        assert b_start < a_end  # each waited for the other to start: they ran at once
