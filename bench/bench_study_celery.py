"""The chunked 64 × 4 study on the celery executor, 1 and 2 workers, against in process.

Run: ``.venv/bin/python -m bench.bench_study_celery`` (needs PostgreSQL at 127.0.0.1:5432,
trust, database ``test``; Redis at 127.0.0.1:6379).

With ``--scale in_process|celery`` it runs instead the 10,000 × 8 study through ``study_job`` to
its leaderboard (``--candidates N`` for fewer, ``--workers`` for Celery's; see
``bench/study_scale.py``): tens of minutes, so never in ``make bench``, which runs this module
without flags.

The production path on one machine: a Dagster instance on a fresh PostgreSQL database, the
domain store on a second one, Redis as broker and result backend (a Redis database claimed with
SET NX and flushed afterwards), and Celery workers started with the shipped
``deploy/celery.yaml`` (``dagster-celery worker start``, one process each, threads pool,
concurrency 1). The study is ``bench_study_walltime``'s (64 candidates × 4 folds, trivial
workflow, 26,940 steps), chunked two per worker. Each celery run follows an in-process run of
the same study on the same databases (the reference; interleaved because the machine is
shared), and its ratio is to that reference.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.scratch import scratch_databases

ROOT = Path(__file__).resolve().parent.parent
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
LOCK_KEY = "typestrict:bench-celery-lock"
RUN_TIMEOUT_S = 1800.0


def celery_study_job() -> Any:
    """``study_job`` on the celery executor with the environment's resources (rebuilt in workers)."""
    import dagster as dg
    from dagster_celery import celery_executor

    from assets.studies import study_job_on
    from resources import default_resources

    return dg.Definitions(jobs=[study_job_on(celery_executor)],
                          resources=default_resources()).resolve_job_def("study_job")


def _claim_redis_db() -> tuple[Any, int]:
    import redis

    token = uuid.uuid4().hex
    for db in range(1, 16):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db, socket_timeout=5)
        if client.set(LOCK_KEY, token, nx=True, ex=3600) and client.dbsize() == 1:
            return client, db
        client.close()
    raise RuntimeError("expected a free Redis database among 1..15, got none")


def _start_worker(name: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    command = [str(Path(sys.executable).parent / "dagster-celery"), "worker", "start",
               "-A", "dagster_celery.app", "-y", str(ROOT / "deploy" / "celery.yaml"), "-n", name,
               "-q", "dagster", "--", "--pool=threads", "--concurrency=1", "--without-gossip",
               "--without-mingle"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if f"{name}@" in text and " ready." in text:
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"the celery worker exited:\n{text[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError("the celery worker was not ready within 120 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            continue


def celery_study(url: str, broker: str, chunks: int) -> tuple[float, float, int]:
    """(wall, work, Dagster steps) of the study on the celery executor."""
    import dagster as dg

    from assets.studies import study_run_config
    from bench.bench_study_walltime import BACKEND, _config, _work_seconds
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.service import create_study_from_config

    engine = open_store(url)
    sid = create_study_from_config(engine, _config(BACKEND))
    config = {**study_run_config(sid, "chunk", chunks),
              "execution": {"config": {"broker": broker, "backend": broker}},
              "loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    box: dict[str, Any] = {}

    def target() -> None:
        with dg.DagsterInstance.get() as instance:
            box["result"] = dg.execute_job(dg.reconstructable(celery_study_job), instance=instance,
                                           run_config=config)

    started = time.perf_counter()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(RUN_TIMEOUT_S)
    wall = time.perf_counter() - started
    if "result" not in box or not box["result"].success:
        raise RuntimeError("the celery study run failed or did not finish")
    result = box["result"]
    n = len({e.step_key for e in result.all_events
             if e.step_key and e.step_key.startswith("study_backtests")})
    work = _work_seconds(engine, sid)
    engine.dispose()
    return wall, work, n


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.bench_study_celery")
    parser.add_argument("--scale", choices=("in_process", "celery"), default=None,
                        help="run the 10,000 x 8 study through study_job instead (bench/study_scale.py)")
    parser.add_argument("--candidates", type=int, default=10_000, help="with --scale")
    parser.add_argument("--workers", type=int, default=2, help="with --scale celery")
    args = parser.parse_args(argv)
    if args.scale is not None:
        from bench.study_scale import measure

        measure(args.scale, args.candidates, args.workers)
        return
    with scratch_databases("bench_celery", "dagster", "store") as (inst_url, store_url):
        _compare(inst_url, store_url)


def _compare(inst_url: str, store_url: str) -> None:
    """Celery with 1 and 2 workers against the in-process reference, on these databases."""
    from bench.bench_study_walltime import dagster_study
    from bench.summary import row

    tag = uuid.uuid4().hex[:10]
    client, db = _claim_redis_db()
    broker = f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
    tmp = Path(tempfile.mkdtemp(prefix="bench_celery_"))
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(f'storage:\n  postgres:\n    postgres_url: "{inst_url}"\n'
                                       "telemetry:\n  enabled: false\n")
    settings = {"DAGSTER_HOME": str(home), "TYPESTRICT_HOME": str(tmp), "TYPESTRICT_STORE_URL": store_url,
                "DAGSTER_CELERY_BROKER_URL": broker, "DAGSTER_CELERY_BACKEND_URL": broker}
    os.environ.update(settings)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))}
    workers: list[subprocess.Popen[bytes]] = []
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores); instance and store on "
              f"PostgreSQL, broker Redis db {db}")
        for n_workers in (1, 2):
            while len(workers) < n_workers:
                i = len(workers)
                workers.append(_start_worker(f"bench-{tag}-{i}", env, tmp / f"worker{i}.log"))
            ref_wall, ref_work, _, ref_n = dagster_study(store_url, "in_process", "chunk")
            wall, work, n = celery_study(store_url, broker, 2 * n_workers)
            share = max(0.0, 1.0 - work / (wall * n_workers))
            print(f"  in process, {ref_n} chunks (reference): {ref_wall:6.1f} s wall, work {ref_work:.1f} s, "
                  f"orchestration {max(0.0, 1 - ref_work / ref_wall):.0%}")
            print(f"  celery, {n_workers} worker(s), {n} chunks: {wall:6.1f} s wall, work {work:.1f} s, "
                  f"orchestration {share:.0%}")
            print(f"  -> ratio {wall / ref_wall:.2f}× the in-process reference (load {os.getloadavg()[0]:.1f})")
            row("bench_study_celery", f"64 x 4 study on celery, {n_workers} worker(s), {n} chunks (PostgreSQL, Redis)",
                f"{wall:.1f} s wall (orchestration {share:.0%})",
                alternative=f"in process, {ref_n} chunks {ref_wall:.1f} s", ratio=f"{wall / ref_wall:.2f}x in process",
                target="<= 2x in process" if n_workers == 2 else "", ok=wall <= 2 * ref_wall if n_workers == 2 else None,
                numbers={"wall": wall, "work": work, "ref_wall": ref_wall, "ref_work": ref_work})
    finally:
        for proc in workers:
            _stop(proc)
        client.flushdb()
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
