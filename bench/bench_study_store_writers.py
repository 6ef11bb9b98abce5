"""The study store's hot paths under concurrent writers on PostgreSQL.

Run: ``.venv/bin/python -m bench.bench_study_store_writers`` (PostgreSQL at 127.0.0.1:5432,
trust, database ``test``; a scratch database is created and dropped).

Every window run of a study makes two committed transactions in the store, whatever the
executor: the reservation (``reserve_run``: a conditional UPDATE of the study row that keeps
spend + reservations within the budget and the step limit, plus the run row) and the settlement
(``settle_run``: move the reservation into spend, store the scores). Both take the study row's
lock, so they serialize per study. Measured here with the work itself removed (a window run of
30 steps with its 30 scores, nothing else), from 1, 8 and 32 writer threads, each with its own
connection (pool of 40), all on one study with a USD budget; and, for contrast, 32 writers
spread over 8 studies (8 workflows). Reported: window runs per second (reserve + settle) and
the median and 99th percentile of each transaction.

Then the same on one study with the windows reserved and settled a slice at a time, as a chunk
runs them since issue 24 (``reserve_slice`` for the next ``SLICE_MAX_WINDOWS`` = 32 windows in
plan order, one ``settle_runs`` for them), on a study of 4 × as many candidates (2,048 windows,
64 slices): the percentiles are then per slice, and the rate is still window runs per second.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import threading
import time
import uuid
from typing import Any

from bench.scratch import scratch_databases

UTC = dt.UTC
CANDIDATES = 64
FOLDS = 4


def _study(engine: Any, workflow: str, candidates: int = CANDIDATES) -> tuple[int, list[tuple[int, int, Any]]]:
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.limits import usd_to_micro
    from typestrict_pipeline.study.runner import plan_runs
    from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
    from typestrict_pipeline.study.space import SearchSpace

    cfg = StudyConfig(
        workspace="bench", workflow=workflow, workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5 + 0.0001 * i for i in range(candidates)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2013, 1, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=FOLDS, tune_steps=30, eval_steps=30, holdout_steps=30,
        max_candidates=candidates, max_total_steps=10**8, budget_micro=usd_to_micro("1000"),
        backend={"backend": "synthetic"},
    )
    sid = create_study_from_config(engine, cfg, last_backtest=repo.LastBacktest(30, 10))
    repo.start_study(engine, sid)
    keys = [(k.candidate_id, k.fold, k.window) for k in plan_runs(engine, sid)]
    return sid, keys


def _writers(engine: Any, jobs: list[tuple[int, int, int, Any]], n_threads: int) -> dict[str, Any]:
    from typestrict_pipeline.study import repository as repo

    scores = [((dt.datetime(2012, 1, 1, tzinfo=UTC) + dt.timedelta(days=i)).isoformat(), 0.5)
              for i in range(30)]
    reserve_s: list[float] = []
    settle_s: list[float] = []
    lock = threading.Lock()
    it = iter(jobs)
    barrier = threading.Barrier(n_threads)

    def worker() -> None:
        barrier.wait()
        while True:
            with lock:
                job = next(it, None)
            if job is None:
                return
            sid, cid, fold, window = job
            t0 = time.perf_counter()
            res = repo.reserve_run(engine, sid, cid, fold, window, 30, estimate_micro=300)
            t1 = time.perf_counter()
            assert isinstance(res, repo.Reservation), res
            repo.settle_run(engine, res, cost_micro=300, steps_done=30, scores=scores)
            t2 = time.perf_counter()
            with lock:
                reserve_s.append(t1 - t0)
                settle_s.append(t2 - t1)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started

    def q(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1000

    return {"runs": len(reserve_s), "wall": wall, "rate": len(reserve_s) / wall,
            "reserve_p50": statistics.median(reserve_s) * 1000, "reserve_p99": q(reserve_s, 0.99),
            "settle_p50": statistics.median(settle_s) * 1000, "settle_p99": q(settle_s, 0.99)}


def _slice_writers(engine: Any, jobs: list[tuple[int, int, int, Any]], n_threads: int) -> dict[str, Any]:
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.runner import SLICE_MAX_WINDOWS

    scores = [((dt.datetime(2012, 1, 1, tzinfo=UTC) + dt.timedelta(days=i)).isoformat(), 0.5)
              for i in range(30)]
    slices = [jobs[i:i + SLICE_MAX_WINDOWS] for i in range(0, len(jobs), SLICE_MAX_WINDOWS)]
    reserve_s: list[float] = []
    settle_s: list[float] = []
    lock = threading.Lock()
    it = iter(slices)
    barrier = threading.Barrier(n_threads)
    done = [0]

    def worker() -> None:
        barrier.wait()
        while True:
            with lock:
                piece = next(it, None)
            if piece is None:
                return
            sid = piece[0][0]
            t0 = time.perf_counter()
            held = repo.reserve_slice(engine, sid, [(cid, fold, window, 30, 300)
                                                    for _, cid, fold, window in piece],
                                      attempts=[uuid.uuid4().hex for _ in piece])
            t1 = time.perf_counter()
            assert isinstance(held, repo.SliceReservation) and len(held.runs) == len(piece), held
            repo.settle_runs(engine, [(r, repo.Settlement(300, 30, scores)) for r in held.runs
                                      if isinstance(r, repo.Reservation)])
            t2 = time.perf_counter()
            with lock:
                reserve_s.append(t1 - t0)
                settle_s.append(t2 - t1)
                done[0] += len(piece)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started

    def q(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1000

    return {"runs": done[0], "wall": wall, "rate": done[0] / wall,
            "reserve_p50": statistics.median(reserve_s) * 1000, "reserve_p99": q(reserve_s, 0.99),
            "settle_p50": statistics.median(settle_s) * 1000, "settle_p99": q(settle_s, 0.99)}


def main() -> None:
    from sqlalchemy import create_engine

    from typestrict_pipeline.store import open_store

    with scratch_databases("bench_writers", "store") as (url,):
        open_store(url).dispose()  # migrate once
        engine = create_engine(url, pool_size=40, max_overflow=0)
        print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores); one window run = reserve + settle "
              f"(30 steps, 30 scores), {CANDIDATES} candidates × {FOLDS} folds × 2 windows per study")
        n = 0
        for n_threads in (1, 8, 32):
            n += 1
            sid, keys = _study(engine, f"wf{n}")
            r = _writers(engine, [(sid, *k) for k in keys], n_threads)
            print(f"  1 study, {n_threads:2d} writers: {r['runs']} window runs in {r['wall']:.2f} s = "
                  f"{r['rate']:.0f} runs/s; reserve p50 {r['reserve_p50']:.1f} ms p99 {r['reserve_p99']:.1f} ms; "
                  f"settle p50 {r['settle_p50']:.1f} ms p99 {r['settle_p99']:.1f} ms (load {os.getloadavg()[0]:.1f})")
        jobs: list[tuple[int, int, int, Any]] = []
        per_study = []
        for _ in range(8):
            n += 1
            sid, keys = _study(engine, f"wf{n}")
            per_study.append([(sid, *k) for k in keys[: len(keys) // 8]])
        for i in range(max(len(p) for p in per_study)):  # interleave the studies' windows
            jobs.extend(p[i] for p in per_study if i < len(p))
        r = _writers(engine, jobs, 32)
        print(f"  8 studies, 32 writers: {r['runs']} window runs in {r['wall']:.2f} s = {r['rate']:.0f} runs/s; "
              f"reserve p50 {r['reserve_p50']:.1f} ms p99 {r['reserve_p99']:.1f} ms; settle p50 "
              f"{r['settle_p50']:.1f} ms p99 {r['settle_p99']:.1f} ms (load {os.getloadavg()[0]:.1f})")
        for n_threads in (1, 2, 8):
            n += 1
            sid, keys = _study(engine, f"wf{n}", 4 * CANDIDATES)  # 2,048 windows: 64 slices
            r = _slice_writers(engine, [(sid, *k) for k in keys], n_threads)
            print(f"  1 study, {n_threads:2d} writers, a slice of 32 windows at a time: {r['runs']} window runs "
                  f"in {r['wall']:.2f} s = {r['rate']:.0f} runs/s; reserve (a slice) p50 {r['reserve_p50']:.1f} ms "
                  f"p99 {r['reserve_p99']:.1f} ms; settle (a slice) p50 {r['settle_p50']:.1f} ms p99 "
                  f"{r['settle_p99']:.1f} ms (load {os.getloadavg()[0]:.1f})")
        engine.dispose()


if __name__ == "__main__":
    main()
