"""The production path: the same code on PostgreSQL and a distributed executor (celery + Redis).

One real run, nothing replaced: a Dagster instance on a fresh PostgreSQL database, the domain
store on a second one, Redis (127.0.0.1:6379) as broker and result backend, and a Celery worker
started here with the shipped ``deploy/celery.yaml`` (``dagster-celery worker start``, threads
pool, concurrency 2). The code location's own ``backtest_seattle_rain_job`` runs through
``celery_executor``; its step must run in the worker process (another PID, the worker's name in
the engine event) and its backtest must land in the PostgreSQL store. The worker is stopped by
its process group and the test checks that nothing of it is left. Every wait is bounded.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import redis
from dagster_celery import celery_executor
from sqlalchemy import create_engine

from typestrict_pipeline.backtest.engine import BacktestStatus
from typestrict_pipeline.backtest.store import list_backtests

JOB = "backtest_seattle_rain_job"
ASSET = "backtest_seattle_rain"
WORKSPACE = "celery_test"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
LOCK_KEY = "typestrict:celery-test-lock"
ROOT = Path(__file__).resolve().parent.parent
WORKER_YAML = ROOT / "deploy" / "celery.yaml"
WORKER_READY_S = 40.0
RUN_TIMEOUT_S = 45.0
STOP_TIMEOUT_S = 15.0


def celery_backtest_job() -> dg.JobDefinition:
    """The code location's backtest job with the celery executor (rebuilt in the worker too)."""
    from typestrict_pipeline.definitions import defs

    return dg.Definitions.merge(defs, dg.Definitions(executor=celery_executor)).resolve_job_def(JOB)


@pytest.fixture
def redis_db() -> Iterator[int]:
    """A Redis database nobody else uses, claimed atomically (SET NX) and flushed afterwards."""
    token = uuid.uuid4().hex
    for db in range(1, 16):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db, socket_timeout=5)
        try:
            claimed = client.set(LOCK_KEY, token, nx=True, ex=600)
        except redis.ConnectionError as exc:
            pytest.fail(f"Redis at {REDIS_HOST}:{REDIS_PORT} did not answer: {exc}. Start redis-server.")
        except redis.ResponseError:  # past the server's last database
            client.close()
            break
        if claimed and client.dbsize() == 1:
            try:
                yield db
            finally:
                client.flushdb()
                client.close()
            return
        if claimed:  # leftovers from someone else: not ours to use or to flush
            client.delete(LOCK_KEY)
        client.close()
    pytest.fail("expected a free Redis database among 1..15, got none. Flush stale test databases.")


def _group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process is in process group ``pgid`` (read from /proc).

    A zombie has already exited; whether the machine's init reaps it promptly is not ours to test.
    """
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            return True
    return False


def _stop_worker(proc: "subprocess.Popen[bytes]") -> None:
    """Warm shutdown (SIGTERM to the whole group), then SIGKILL; bounded; reaps the leader."""
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        if not _group_alive(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid):  # poll() reaps the leader
                break
            time.sleep(0.1)
    if proc.poll() is None:
        proc.wait(timeout=5)


def _wait_ready(proc: "subprocess.Popen[bytes]", log: Path, worker: str) -> None:
    deadline = time.monotonic() + WORKER_READY_S
    while time.monotonic() < deadline:
        text_ = log.read_text(errors="replace") if log.exists() else ""
        if f"{worker}@" in text_ and " ready." in text_:
            return
        if proc.poll() is not None:
            pytest.fail(f"expected a running celery worker, got exit code {proc.returncode}:\n{text_[-3000:]}")
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    pytest.fail(f"expected the celery worker ready within {WORKER_READY_S:.0f} s, got no 'ready.':\n{tail}")


def _execute_bounded(
    recon: Any, instance: dg.DagsterInstance, run_config: dict[str, Any], log: Path
) -> Any:
    """``dg.execute_job`` in a daemon thread, so a lost worker fails the test instead of hanging it."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = dg.execute_job(recon, instance=instance, run_config=run_config)
        except BaseException as exc:  # reported in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="celery-run", daemon=True)
    thread.start()
    thread.join(RUN_TIMEOUT_S)
    if thread.is_alive():
        tail = log.read_text(errors="replace")[-3000:]
        pytest.fail(f"expected the celery run to finish within {RUN_TIMEOUT_S:.0f} s, got no result; worker log:\n{tail}")
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.mark.slow
@pytest.mark.postgres
def test_the_backtest_job_runs_in_a_celery_worker_on_postgres_and_redis(
    pg_url: str, second_pg_url: str, redis_db: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(
        f"storage:\n  postgres:\n    postgres_url: \"{pg_url}\"\ntelemetry:\n  enabled: false\n"
    )
    assert pg_url.startswith("postgresql+psycopg2://")
    broker = f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}"
    settings = {
        "DAGSTER_HOME": str(dagster_home),
        "TYPESTRICT_HOME": str(tmp_path / "typestrict_home"),
        "TYPESTRICT_STORE_URL": second_pg_url,
        "DAGSTER_CELERY_BROKER_URL": broker,
        "DAGSTER_CELERY_BACKEND_URL": broker,
    }
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    for key in ("TYPESTRICT_BACKTEST_MODEL_URL", "DAGSTER_CELERY_BROKER_HOST"):
        monkeypatch.delenv(key, raising=False)

    recon = dg.reconstructable(celery_backtest_job)
    worker = f"ts-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **settings}
    # The worker rebuilds the job by importing this module by name: it needs the repo on its path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    log = tmp_path / "worker.log"
    command = [
        str(Path(sys.executable).parent / "dagster-celery"), "worker", "start",
        "-A", "dagster_celery.app", "-y", str(WORKER_YAML), "-n", worker, "-q", "dagster",
        "--", "--pool=threads", "--concurrency=2", "--without-gossip", "--without-mingle",
    ]

    instance = dg.DagsterInstance.get()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        _wait_ready(proc, log, worker)
        run_config = {
            "execution": {"config": {"broker": broker, "backend": broker}},
            "ops": {ASSET: {"config": {
                "workspace": WORKSPACE, "start": "2014-03-01", "end": "2014-03-08", "step": "1d",
                "max_in_flight": 2,
            }}},
        }
        result = _execute_bounded(recon, instance, run_config, log)
        worker_log = log.read_text(errors="replace")[-4000:]
        assert result.success, f"expected a successful run, got failure; worker log:\n{worker_log}"
        run_id = result.run_id

        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status is dg.DagsterRunStatus.SUCCESS
        assert run.tags["mode"] == "HISTORICAL" and run.tags["workflow"] == "seattle_rain"

        entries = instance.all_logs(run_id)
        events = [e.dagster_event for e in entries if e.dagster_event is not None]
        started = [e for e in events if e.event_type is dg.DagsterEventType.STEP_START]
        succeeded = [e for e in events if e.event_type is dg.DagsterEventType.STEP_SUCCESS]
        assert [e.step_key for e in started] == [ASSET]
        assert [e.step_key for e in succeeded] == [ASSET]
        delegated = [
            e for e in events
            if e.event_type is dg.DagsterEventType.ENGINE_EVENT
            and "in celery worker" in (e.message or "")
        ]
        assert [e.step_key for e in delegated] == [ASSET], f"engine events: {[e.message for e in delegated]}"
        meta = delegated[0].event_specific_data.metadata  # type: ignore[union-attr]
        assert str(meta["Celery worker"].value).startswith(f"{worker}@")
        test_pid = os.getpid()
        for event in started + succeeded:
            assert event.pid is not None and event.pid != test_pid
            # ... and that process belongs to the worker we started (still running here).
            assert os.getpgid(event.pid) == proc.pid, f"step pid {event.pid} is not in the worker's group"
        # The orchestrator (this process) submitted the step; the worker ran it.
        submitted = [e for e in events if "Submitting celery task" in (e.message or "")]
        assert [e.pid for e in submitted] == [test_pid]

        materialization = instance.get_latest_materialization_event(dg.AssetKey(ASSET))
        assert materialization is not None and materialization.run_id == run_id

        # The worker wrote the backtest to the PostgreSQL domain store, stamped with the run.
        engine = create_engine(second_pg_url)
        try:
            stored = list_backtests(engine, workspace=WORKSPACE)
        finally:
            engine.dispose()
        assert [(b.workflow, b.status, b.steps_run, b.dagster_run_id) for b in stored] == [
            ("seattle_rain", BacktestStatus.COMPLETED, 8, run_id)
        ]
    finally:
        _stop_worker(proc)
        instance.dispose()
    assert proc.returncode is not None
    assert not _group_alive(proc.pid), "expected no worker process left, got some in its group"
