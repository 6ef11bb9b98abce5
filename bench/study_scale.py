"""A 10,000 × 8 study through ``study_job`` to its leaderboard: in process, and on Celery.

Not part of ``make bench`` (a full run takes tens of minutes): ``bench_study_celery`` runs it
behind its ``--scale`` flag:

    .venv/bin/python -m bench.bench_study_celery --scale in_process                # SQLite
    .venv/bin/python -m bench.bench_study_celery --scale celery --workers 2        # PostgreSQL + Redis
    .venv/bin/python -m bench.bench_study_celery --scale celery --candidates 2000

The study: ``--candidates`` (10,000) candidates of the synthetic workflow × 8 folds × (125 tune +
125 eval daily steps) + a 120-day holdout, i.e. 16 window runs a candidate + the winner's and the
baseline's holdout; each candidate's true skill rises by 0.1 from the first to the last. The run
is ``study_job`` with the default chunked fan-out: in process (``execute_in_process``, one chunk:
its steps run one after another), its instance and store on SQLite in a temporary folder; or on
the celery executor (``study_job_on(celery_executor)``, as ``bench_study_celery`` sets it up:
instance and store on fresh PostgreSQL databases, Redis broker and backend, ``--workers`` workers
from ``deploy/celery.yaml``, threads pool, concurrency 1, 2 chunks per worker). The wall time runs
from the launch to the run's end (plan, chunks, finalize: ranking, holdout, the leaderboard
materialization); then the leaderboard is read once more in this process (``load_leaderboard``)
and rendered, and that is timed on its own.

Peak memory: the high-water mark of every process of the run (``VmHWM`` in ``/proc``, read just
before it ends): this process (the run process in process; with Celery the orchestrating run
process) and each worker's process tree; and the highest sum of their resident sizes seen by a
sampler every 0.5 s. Load averages are printed at the start, every minute and at the end.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.scratch import scratch_databases

UTC = dt.UTC
FOLDS = 8
RUN_TIMEOUT_S = 4 * 3600.0


def study_config(n_candidates: int) -> Any:
    """The benchmark study (synthetic workflow, 8 folds × (125 + 125) daily steps, 120-day holdout)."""
    from typestrict_pipeline.study.service import StudyConfig
    from typestrict_pipeline.study.space import SearchSpace

    skills = [round(0.5 + 0.1 * i / max(1, n_candidates - 1), 9) for i in range(n_candidates)]
    return StudyConfig(
        workspace="bench", workflow="bench_scale", workflow_version="v1",
        space=SearchSpace(grid={"skill": skills}),
        start=dt.datetime(2010, 1, 1, tzinfo=UTC), end=dt.datetime(2016, 1, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=FOLDS, tune_steps=125, eval_steps=125,
        holdout_steps=120, max_candidates=n_candidates, max_total_steps=10**9,
        backend={"backend": "synthetic"})


def _proc_tree(root: int, skip: frozenset[int] = frozenset()) -> list[int]:
    """``root`` and its descendants (from /proc), without the trees of the pids in ``skip``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(c for c in children.get(pid, []) if c not in skip)
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Memory:
    """Peak RSS of a set of process trees: per process (VmHWM) and the sampled sum."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.hwm_kb: dict[str, int] = {}
        self.sum_peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _trees(self) -> dict[str, list[int]]:
        others = frozenset(self.roots.values())
        return {name: _proc_tree(root, others - {root}) for name, root in self.roots.items()}

    def _sample(self) -> None:
        last_load = 0.0
        while not self._stop.wait(0.5):
            total = 0
            for name, pids in self._trees().items():
                for pid in pids:
                    total += _status_kb(pid, "VmRSS")
                    hwm = _status_kb(pid, "VmHWM")
                    key = f"{name}|{pid}"
                    self.hwm_kb[key] = max(self.hwm_kb.get(key, 0), hwm)
            self.sum_peak_kb = max(self.sum_peak_kb, total)
            if time.monotonic() - last_load >= 60:
                last_load = time.monotonic()
                print(f"    [{time.strftime('%H:%M:%S', time.gmtime())} UTC] load "
                      f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}, RSS of the run's "
                      f"processes {total / 1024:,.0f} MB", flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for name, pids in self._trees().items():  # a last look at the high-water marks
            for pid in pids:
                key = f"{name}|{pid}"
                self.hwm_kb[key] = max(self.hwm_kb.get(key, 0), _status_kb(pid, "VmHWM"))


def _leaderboard_read(store_url: str, sid: int) -> tuple[float, int, str]:
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown

    engine = open_store(store_url)
    started = time.perf_counter()
    board = load_leaderboard(engine, sid)
    rendered = render_markdown(board)
    took = time.perf_counter() - started
    engine.dispose()
    return took, board.run, f"{board.verdict}; {len(rendered):,} characters of Markdown"


def _run(executor: str, store_url: str, sid: int, n_workers: int, broker: str | None) -> Any:
    import dagster as dg

    from assets.studies import study_run_config

    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    with dg.DagsterInstance.get() as instance:
        if executor == "in_process":
            from typestrict_pipeline.definitions import defs

            config: dict[str, Any] = {**study_run_config(sid, "chunk", 1), **quiet}
            return defs.resolve_job_def("study_job").execute_in_process(
                run_config=config, instance=instance)
        from bench.bench_study_celery import celery_study_job

        assert broker is not None
        config = {**study_run_config(sid, "chunk", 2 * n_workers),
                  "execution": {"config": {"broker": broker, "backend": broker}}, **quiet}
        return dg.execute_job(dg.reconstructable(celery_study_job), instance=instance,
                              run_config=config)


def measure(executor: str, n_candidates: int, n_workers: int) -> dict[str, Any]:
    """Create the study, run it through ``study_job``, read its leaderboard; print and return."""
    import subprocess
    import sys

    from sqlalchemy import func, select

    from bench.bench_study_celery import (
        REDIS_HOST,
        REDIS_PORT,
        ROOT,
        _claim_redis_db,
        _start_worker,
        _stop,
    )
    from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.service import create_study_from_config
    from typestrict_pipeline.study.tables import RunRow, StudyRow

    tmp = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    home = tmp / "dagster_home"
    home.mkdir()
    client = None
    workers: list[subprocess.Popen[bytes]] = []
    broker: str | None = None
    databases = contextlib.ExitStack()
    try:
        if executor == "in_process":
            write_instance_yaml(home, sqlite_instance_config(home))
            store_url = f"sqlite:///{tmp / 'store.db'}"
        else:
            inst_url, store_url = databases.enter_context(
                scratch_databases("bench_scale", "dagster", "store"))
            client, db = _claim_redis_db()
            broker = f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
            (home / "dagster.yaml").write_text(
                f'storage:\n  postgres:\n    postgres_url: "{inst_url}"\ntelemetry:\n  enabled: false\n')
        settings = {"DAGSTER_HOME": str(home), "TYPESTRICT_HOME": str(tmp),
                    "TYPESTRICT_STORE_URL": store_url}
        if broker is not None:
            settings |= {"DAGSTER_CELERY_BROKER_URL": broker, "DAGSTER_CELERY_BACKEND_URL": broker}
        os.environ.update(settings)
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
               "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))}
        for i in range(n_workers if executor == "celery" else 0):
            workers.append(_start_worker(f"bench-scale-{i}", env, tmp / f"worker{i}.log"))
        engine = open_store(store_url)
        started = time.perf_counter()
        sid = create_study_from_config(engine, study_config(n_candidates))
        created = time.perf_counter() - started
        load0 = os.getloadavg()
        print(f"  {executor}: study {sid} of {n_candidates:,} candidates × {FOLDS} folds created in "
              f"{created:.1f} s; load {'/'.join(f'{x:.1f}' for x in load0)} (2 cores)", flush=True)
        roots = {"run process (this one)": os.getpid()}
        roots |= {f"celery worker {i}": w.pid for i, w in enumerate(workers)}
        memory = Memory(roots)
        cpu0 = os.times()
        box: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: box.update(
            result=_run(executor, store_url, sid, n_workers, broker)), daemon=True)
        started = time.perf_counter()
        thread.start()
        thread.join(RUN_TIMEOUT_S)
        wall = time.perf_counter() - started
        memory.stop()
        cpu1 = os.times()
        load1 = os.getloadavg()
        if "result" not in box or not box["result"].success:
            raise RuntimeError("the study run failed or did not finish")
        with session_scope(engine) as s:
            study = s.get(StudyRow, sid)
            assert study is not None
            state = study.state
            n_runs = s.execute(select(RunRow.id).where(RunRow.study_id == sid,
                                                        RunRow.state == "DONE")).all()
            first, last = s.execute(select(func.min(RunRow.started_at), func.max(RunRow.finished_at))
                                    .where(RunRow.study_id == sid, RunRow.window != "HOLDOUT")).one()
            assert study.started_at is not None and study.finished_at is not None
            assert first is not None and last is not None
            search_s = (last - first).total_seconds()
            until_search = (first - study.started_at).total_seconds()
            after_search = (study.finished_at - last).total_seconds()
        read_s, ran, verdict = _leaderboard_read(store_url, sid)
        engine.dispose()
        hwm_mb: dict[str, tuple[int, float, float]] = {}  # root: (processes, largest, sum)
        for key, kb in memory.hwm_kb.items():
            name = key.split("|")[0]
            n, top, total = hwm_mb.get(name, (0, 0.0, 0.0))
            hwm_mb[name] = (n + 1, max(top, kb / 1024), total + kb / 1024)
        out = {"executor": executor, "candidates": n_candidates, "workers": n_workers,
               "wall": wall, "window_runs": len(n_runs), "rate": len(n_runs) / wall,
               "state": state, "read_s": read_s, "ran": ran, "verdict": verdict,
               "sum_peak_mb": memory.sum_peak_kb / 1024,
               "hwm_mb": hwm_mb,
               "cpu_user": cpu1.user - cpu0.user + cpu1.children_user - cpu0.children_user,
               "cpu_system": cpu1.system - cpu0.system, "load_start": load0, "load_end": load1}
        print(f"  {executor}{'' if executor == 'in_process' else f', {n_workers} workers'}: "
              f"{len(n_runs):,} window runs DONE, study {state}, in {wall:,.1f} s = "
              f"{len(n_runs) / wall:,.1f} window runs/s (plan → finalize and the leaderboard's "
              f"materialization); this process's CPU {out['cpu_user']:.0f} s user + "
              f"{out['cpu_system']:.0f} s system", flush=True)
        print(f"  of which: plan {until_search:.1f} s (study started → first window), search "
              f"{search_s:,.1f} s = {(len(n_runs) - 2) / search_s:,.1f} window runs/s (first "
              f"window's reservation → last search window's settlement), finalize up to the "
              f"study's end {after_search:.1f} s (then the leaderboard's materialization)")
        out |= {"search_s": search_s, "plan_s": until_search, "finalize_s": after_search}
        print(f"  leaderboard read again in this process: {read_s:.1f} s ({ran:,} candidates ran; "
              f"verdict {verdict!r})")
        print(f"  peak RSS: sum over the run's processes (sampled every 0.5 s) "
              f"{out['sum_peak_mb']:,.0f} MB; per process (VmHWM): "
              + "; ".join(f"{k}: {n} process(es), the largest {top:,.0f} MB, their sum {total:,.0f} MB"
                           for k, (n, top, total) in hwm_mb.items()))
        print(f"  load average start {'/'.join(f'{x:.1f}' for x in load0)}, end "
              f"{'/'.join(f'{x:.1f}' for x in load1)}", flush=True)
        return out
    finally:
        for proc in workers:
            _stop(proc)
        if client is not None:
            client.flushdb()
            client.close()
        databases.close()
        shutil.rmtree(tmp, ignore_errors=True)
