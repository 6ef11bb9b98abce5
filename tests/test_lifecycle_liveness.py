"""Liveness, not hope: a backtest, study or claim whose process died ends by itself (``interrupted``
with when and why), is never "in flight", can be cancelled, and a study resumes charging each
window once. Real processes killed with real signals; identities checked against reused ids.

Before: a backtest stopped or killed showed ``running 0/1460`` for good and every tick of its
workflow's re-run schedule skipped with "A study or backtest was in flight"; a server killed
during a submission left a claim that made every later submission a 409 for ever.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from typestrict_pipeline.backtest.engine import BacktestStatus
from typestrict_pipeline.backtest.service import run_and_store_backtest, standin_models
from typestrict_pipeline.backtest.store import load_backtest
from typestrict_pipeline.backtest.tables import BacktestRow
from typestrict_pipeline.backtest.workflows import default_registry, load_dataset
from typestrict_pipeline.errors import ConflictError
from typestrict_pipeline.lifecycle.leases import STALE_AFTER, LeaseKind, acquire, holder
from typestrict_pipeline.lifecycle.reaper import cancel_backtest, cancel_study, reap, workflow_busy
from typestrict_pipeline.processes import Liveness, identity_alive, identity_of, this_process
from typestrict_pipeline.reruns.studies import StoreStudies
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.backends import backend_from_config
from typestrict_pipeline.study.limits import usd_to_micro
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.runner import run_study_local
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunRow, RunState, StudyRow, StudyState

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 240.0  # a bound on every wait, never asserted as a duration
TYPESTRICT = str(Path(sys.executable).with_name("typestrict"))


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"{what}: the process exited {proc.returncode}: {out[-2000:]}")
        if ready():
            return
        time.sleep(0.2)
    raise AssertionError(f"waited {WAIT_S:.0f} s for {what}")


# ------------------------------------------------------------------------------------------------
# Process identity: a reused id, another boot, another host
# ------------------------------------------------------------------------------------------------


def test_a_dead_process_and_a_reused_id_are_dead_and_another_host_is_unknown() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = identity_of(child.pid)
    assert ident is not None and identity_alive(ident) is Liveness.ALIVE
    # The same id with another start tick is another process (what a reused id looks like).
    assert identity_alive(dataclasses.replace(ident, start_ticks=ident.start_ticks - 1)) is Liveness.DEAD
    assert identity_alive(dataclasses.replace(ident, boot_id="another-boot")) is Liveness.DEAD
    assert identity_alive(dataclasses.replace(ident, host="elsewhere")) is Liveness.UNKNOWN
    child.kill()
    child.wait()
    assert identity_alive(ident) is Liveness.DEAD


def test_a_lease_held_on_another_host_lives_by_its_heartbeat(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    far = dataclasses.replace(this_process(), host="elsewhere")
    lease = acquire(engine, LeaseKind.SUBMISSION, "tr_far", owner=far, heartbeat_every=None)
    assert lease is not None
    held = holder(engine, LeaseKind.SUBMISSION, "tr_far")
    assert held is not None
    assert held.alive(held.heartbeat_at + STALE_AFTER)  # a heartbeat this recent: alive
    assert not held.alive(held.heartbeat_at + STALE_AFTER + dt.timedelta(seconds=1))
    assert "no heartbeat from process" in held.why_dead()
    assert acquire(engine, LeaseKind.SUBMISSION, "tr_far", heartbeat_every=None) is None  # still fresh
    engine.dispose()


# ------------------------------------------------------------------------------------------------
# Backtests
# ------------------------------------------------------------------------------------------------


def _running(store: Path) -> bool:
    engine = open_store(f"sqlite:///{store}")
    try:
        with session_scope(engine) as s:
            return s.scalar(select(BacktestRow.id).where(BacktestRow.status == "running")) is not None
    finally:
        engine.dispose()


def test_a_killed_backtest_ends_interrupted_and_never_blocks_its_workflow(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``kill -9`` during ``typestrict backtest run``: the next look ends it ``interrupted`` with
    when and why, and the re-run schedule's "in flight" check says no (before: running for good,
    and every tick skipped with "A study or backtest was in flight")."""
    from typestrict_pipeline.cli import main

    store = tmp_path / "store.db"
    url = f"sqlite:///{store}"
    open_store(url).dispose()
    env = {**os.environ, "TYPESTRICT_STORE_URL": url, "TYPESTRICT_HOME": str(tmp_path)}
    proc = subprocess.Popen([TYPESTRICT, "backtest", "run", "seattle_rain", "--start", "2012-01-02",
                             "--end", "2015-12-31", "--standin-latency", "0.2", "--max-in-flight", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait("the backtest to start", lambda: _running(store), proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    engine = open_store(url)
    try:
        assert not StoreStudies(engine).workflow_in_flight("demo", "seattle_rain")
        assert main(["backtest", "list", "--workspace", "demo", "--store", url, "--json"]) == 0
        [row] = json.loads(capsys.readouterr().out)
        assert row["status"] == "interrupted"
        shown = load_backtest(engine, row["id"])
        assert shown.finished_at is not None and shown.error is not None
        assert shown.error.startswith("interrupted at 20") and f"process {proc.pid}" in shown.error
        assert "is gone" in shown.error
        assert holder(engine, LeaseKind.BACKTEST, row["id"]) is None
        with pytest.raises(ConflictError, match="interrupted"):
            cancel_backtest(engine, row["id"])
    finally:
        engine.dispose()


def test_a_running_backtest_is_cancelled_and_stops_before_its_next_step(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    workflow = default_registry().active("seattle_rain")
    data = dict(load_dataset("seattle_weather"))
    start = dt.datetime(2012, 1, 2, tzinfo=dt.UTC)
    out: dict[str, Any] = {}

    def run() -> None:
        with standin_models(workflow, latency_s=0.05) as models:
            out["id"], out["result"] = run_and_store_backtest(
                engine, workflow, workspace="demo", data=data, dataset="seattle_weather",
                start=start, end=start + dt.timedelta(days=400), step=dt.timedelta(days=1),
                models=models, max_in_flight=1)

    thread = threading.Thread(target=run)
    thread.start()

    def started() -> str | None:
        with session_scope(engine) as s:
            return s.scalar(select(BacktestRow.id))

    _wait("the backtest to start", lambda: started() is not None)
    bid = started()
    assert bid is not None
    assert workflow_busy(engine, "demo", "seattle_rain") == f"backtest {bid} (running)"
    ended = cancel_backtest(engine, bid)
    assert ended.state == "cancelled"
    thread.join(timeout=WAIT_S)
    assert not thread.is_alive()
    stored = load_backtest(engine, bid)
    assert stored.status is BacktestStatus.CANCELLED and stored.error is not None
    assert stored.error.startswith("cancelled at 20")
    assert 0 < stored.steps_run < 401  # it stopped: what ran is stored, the rest never started
    assert out["result"].card.steps_run == stored.steps_run
    assert workflow_busy(engine, "demo", "seattle_rain") is None
    engine.dispose()


# ------------------------------------------------------------------------------------------------
# Studies: killed, interrupted, cancelled, resumed (each window charged once)
# ------------------------------------------------------------------------------------------------

_STUDY_CHILD = textwrap.dedent("""
    import sys
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.backends import backend_from_config
    from typestrict_pipeline.study.runner import run_study_local
    engine = open_store(sys.argv[1])
    run_study_local(engine, int(sys.argv[2]),
                    backend_from_config({"backend": "synthetic", "cost_per_step": 7, "sleep_s": 0.05}),
                    max_workers=1)
""")


def _study(engine: Engine, n: int = 2) -> int:
    config = StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5 + 0.1 * i for i in range(n)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=dt.UTC), end=dt.datetime(2012, 12, 1, tzinfo=dt.UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=n, max_total_steps=100_000, budget_micro=usd_to_micro("1"),
        backend={"backend": "synthetic", "cost_per_step": 7})
    return create_study_from_config(engine, config, last_backtest=LastBacktest(70, 10))


def _runs(engine: Engine, sid: int) -> list[RunRow]:
    with session_scope(engine) as s:
        rows = list(s.scalars(select(RunRow).where(RunRow.study_id == sid)))
        s.expunge_all()
    return rows


def _stopped_holding_a_reservation(engine: Engine, sid: int, proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` (driving study ``sid``) is now stopped (SIGSTOP) while one of its windows
    is ``RESERVED``: looked at while the process is stopped, so no race; between two slices it is
    let go on to reserve the next."""
    if not any(r.state == RunState.RESERVED.value for r in _runs(engine, sid)):
        return False
    os.kill(proc.pid, signal.SIGSTOP)
    if any(r.state == RunState.RESERVED.value for r in _runs(engine, sid)):
        return True
    os.kill(proc.pid, signal.SIGCONT)
    return False


def test_a_killed_study_ends_interrupted_releases_its_workflow_and_resumes_charging_once(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    sid = _study(engine)
    proc = subprocess.Popen([sys.executable, "-c", _STUDY_CHILD, url, str(sid)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait("a window to finish", lambda: any(r.state == RunState.DONE.value for r in _runs(engine, sid)),
              proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    assert workflow_busy(engine, "demo", "wx") is None  # ended first: never "in flight"
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == StudyState.INTERRUPTED.value
        assert study.error is not None and f"process {proc.pid}" in study.error
        assert "re-execute its run to resume it" in study.error
        assert study.reserved_micro == 0 and study.steps_reserved == 0
    assert repo.active_study(engine, "demo", "wx") is None
    assert holder(engine, LeaseKind.STUDY, str(sid)) is None
    done_before = {r.id for r in _runs(engine, sid) if r.state == RunState.DONE.value}
    out = run_study_local(engine, sid, backend_from_config({"backend": "synthetic", "cost_per_step": 7}))
    assert out.state is StudyState.FINISHED
    after = {r.id: r for r in _runs(engine, sid)}
    assert all(after[i].state == RunState.DONE.value for i in done_before)  # kept, not re-run
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.spend_micro == sum(r.cost_micro or 0 for r in after.values())
    engine.dispose()


@pytest.mark.parametrize("then", ["cancelled", "another study"])
def test_a_study_killed_holding_reservations_is_never_in_flight_nor_left_holding_them(
        tmp_path: Path, then: str) -> None:
    """``kill -9`` during a study, then, before anything else looked, its cancel (as the API and
    the console cancel) or a new study on its workflow: the first is ``CANCELLED`` or
    ``INTERRUPTED`` with nothing reserved, the second is created. Before, a cancel left the killed
    process's window runs ``RESERVED``, their cost held on the study for good (nothing reaps a
    cancelled study), and a new study was refused: "got study 1 (RUNNING)", in flight."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    sid = _study(engine, n=4)
    proc = subprocess.Popen([sys.executable, "-c", _STUDY_CHILD, url, str(sid)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    try:
        _wait("a window reserved", lambda: _stopped_holding_a_reservation(engine, sid, proc), proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    assert any(r.state == RunState.RESERVED.value for r in _runs(engine, sid))  # what the kill left
    if then == "cancelled":
        ended = cancel_study(engine, sid)
        assert ended.state == "CANCELLED" and ended.why.endswith("(was Running)")
        active = None
    else:
        active = _study(engine)  # the workflow's lock is the dead study's: taken over, not refused
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None
        assert study.state == (StudyState.CANCELLED if then == "cancelled" else StudyState.INTERRUPTED).value
        assert study.reserved_micro == 0 and study.steps_reserved == 0
    assert [r.id for r in _runs(engine, sid) if r.state == RunState.RESERVED.value] == []
    assert holder(engine, LeaseKind.STUDY, str(sid)) is None
    assert repo.active_study(engine, "demo", "wx") == active
    engine.dispose()


def test_a_cancel_of_a_live_study_whose_process_then_dies_leaves_nothing_reserved(tmp_path: Path) -> None:
    """A study cancelled while its process is alive (stopped here, holding a window's
    reservation), then ``kill -9`` before that process settled the window: the cancel keeps the
    process's lease while a window is reserved, and once the process is gone the reaper gives
    the reservation back. Before, the cancel released the lease at once and nothing reaps a
    cancelled study: the window stayed ``RESERVED``, its cost held on the study for good."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    sid = _study(engine, n=4)
    proc = subprocess.Popen([sys.executable, "-c", _STUDY_CHILD, url, str(sid)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def reserved() -> list[RunRow]:
        return [r for r in _runs(engine, sid) if r.state == RunState.RESERVED.value]

    try:
        _wait("a window reserved", lambda: _stopped_holding_a_reservation(engine, sid, proc), proc)
        assert cancel_study(engine, sid).state == "CANCELLED"  # its process is alive (stopped)
        assert holder(engine, LeaseKind.STUDY, str(sid)) is not None  # kept: it holds a window
        reap(engine)
        assert reserved()  # a live process's reservation is its own to settle
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    assert reap(engine) == []  # nothing to end: the study ended CANCELLED ...
    assert reserved() == []  # ... and what its dead process held is given back
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == StudyState.CANCELLED.value
        assert study.reserved_micro == 0 and study.steps_reserved == 0
        assert study.spend_micro == sum(r.cost_micro or 0 for r in _runs(engine, sid))
    assert holder(engine, LeaseKind.STUDY, str(sid)) is None
    engine.dispose()


def test_study_cancel_works_on_every_study_that_has_not_ended(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    pending = _study(engine)
    assert cancel_study(engine, pending).state == "CANCELLED"
    interrupted = _study(engine)
    repo.interrupt_study(engine, interrupted, "interrupted at 2026-01-01T00:00:00Z: test")
    assert cancel_study(engine, interrupted).why.endswith("(was Interrupted)")
    with pytest.raises(ConflictError, match="has ended already"):
        cancel_study(engine, interrupted)
    assert reap(engine) == []
    engine.dispose()


# ------------------------------------------------------------------------------------------------
# A claim held by a killed server
# ------------------------------------------------------------------------------------------------

_SUBMIT_CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import typestrict_pipeline.api.trainings as trainings
    from typestrict_pipeline.store import open_store
    real = trainings.write_atomic
    def stuck(path, data, **kw):  # the server is killed while it writes the training's manifest
        if Path(path).name == "manifest.json":
            print("inside", flush=True)
            time.sleep(600)
        return real(path, data, **kw)
    trainings.write_atomic = stuck
    home, url, jev, tid, predictions = sys.argv[1:6]
    store = trainings.TrainingStore(Path(home), open_store(url), json.loads(jev))
    store.submit("acme", tid, Path(predictions).read_bytes(), None)
""")


def test_a_claim_held_by_a_killed_server_expires_with_its_process(tmp_path: Path, sqlite_url: str) -> None:
    import importlib.util

    from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
    from typestrict_pipeline.credits import CreditLedger
    from typestrict_pipeline.lifecycle.trainings import TrainingState

    spec = importlib.util.spec_from_file_location("api_support", Path(__file__).with_name("test_api_support.py"))
    assert spec is not None and spec.loader is not None
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    home = tmp_path / "home"
    csv, jev_file = support.make_dataset(tmp_path, seed=2)
    jev = {"kind": "file", "path": str(jev_file)}
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("acme", 1, reference="claims")
    store = TrainingStore(home, engine, jev)
    store.area("acme").save("reviews.csv", csv)
    body = support.TRAINING_BODY
    tid = store.create("acme", TrainingRequest(body["dataset"], body["decisions"], body["options"]))
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("".join(json.dumps(p) + "\n" for p in support.model_predictions(csv, skill=0.9)))
    proc = subprocess.Popen([sys.executable, "-c", _SUBMIT_CHILD, str(home), sqlite_url, json.dumps(jev), tid,
                             str(predictions)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.strip() == "inside", line + proc.stdout.read().decode()[-2000:]
        with pytest.raises(ConflictError, match="no other submission in progress"):
            store.submit("acme", tid, predictions.read_bytes(), None)  # its server is alive: wait
        os.kill(proc.pid, signal.SIGKILL)  # the server dies mid-submission
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    store.submit("acme", tid, predictions.read_bytes(), None)  # the claim died with its process
    assert store.view("acme", tid).state is TrainingState.JUDGING
    assert (home / "trainings" / tid / "manifest.json").is_file()
    assert holder(engine, LeaseKind.SUBMISSION, tid) is None
    engine.dispose()
