"""The studies' joint inference: its cost against the closed form and arch's plain SPA/StepM.

Run: ``.venv/bin/python -m bench.bench_study_inference``

1. The joint bootstrap on 64 candidates × 500 steps × 1,000 resamples (seed 0; own AR(1) 0.5,
   30% shared noise): ``inference.joint_inference`` (Politis–White block length, resamples from
   arch's public ``StationaryBootstrap``, the small-sample widening, SPA and StepM) against
   arch's own ``StepM`` + ``SPA`` (same block length, no widening; the same p-values without
   it), and against the closed form the leaderboard also computes (``stats.search_stats``:
   SEs, Adjusted, the luck line).
2. The whole leaderboard of a study of the demo's shape (12 candidates, 3 folds × (90 tune + 60
   eval) days, 120-day holdout, synthetic workflow, SQLite): ``load_leaderboard`` +
   ``render_markdown`` (reads the runs, closed form, joint bootstrap, PBO, holdout test),
   against the closed-form part alone on the same scores.
3. The ranking of a study of 10,000 candidates × 1,000 out-of-sample steps, 1,000 resamples
   (issue 24 item 4; seed 1; own AR(1) 0.5, 30% shared noise, candidate 0 ahead by 0.3 SD, the
   last one the benchmark): the luck line and the ranking
   (``search_stats``), SPA and StepM (``joint_inference``), PBO (``pbo_cscv``) and the
   decorrelation span, each case in a fresh process (its peak RSS is its own): the product as
   shipped (candidates in chunks of ``dependence.CANDIDATE_CHUNK``, CSCV's halves in slices of
   ``inference.PBO_COMBINATIONS``) against the same code in one pass (chunks as large as the
   study), and a digest of every number each printed (they must be equal). Targets: ≤ 30 s and
   ≤ 2 GB peak RSS.

Times are medians of 5 (3 for the 64 × 500 case) after one unmeasured warm-up call (so one-off
imports, e.g. arch and pandas, are not in the figures), wall clock and this process's CPU time
(the machine is shared: the CPU time is what the code costs, the wall time what a user waits on
a busy box); ratios are within one run. The load average is printed with the results.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import median_time


def _row(label: str, t: tuple[float, float], base: tuple[float, float], target: float | None) -> str:
    met = "" if target is None else (" (≤ {:g} s: {})".format(
        target, "met" if t[0] <= target else f"not met on the wall clock; CPU {'met' if t[1] <= target else 'not met'}"))
    return (f"| {label} | {t[0]:.3f} s | {t[1]:.3f} s | {t[0] / base[0]:.1f}× | "
            f"{t[1] / base[1]:.1f}× |{met}")


def _joint() -> None:
    from arch.bootstrap import SPA, StepM

    from typestrict_pipeline.study.calibration import SCENARIOS, _oos, simulate
    from typestrict_pipeline.study.inference import block_length, joint_inference
    from typestrict_pipeline.study.stats import search_stats

    m = simulate(np.random.default_rng(0), SCENARIOS[1], 64, 500)
    ids = [str(j) for j in range(64)]
    bench = m.mean(axis=1)
    oos = _oos(m)
    ours = median_time(lambda: joint_inference(m, ids, bench, benchmark_label="mean", seed=0,
                                                reps=1000, pvalue_type="upper"), 3,
                       warm_up=True)
    blen = max(1, round(block_length(m - bench[:, None])))

    def plain() -> None:
        s = StepM(-bench, -m, block_size=blen, reps=1000, seed=0)
        s.compute()
        spa = SPA(-bench, -m, block_size=blen, reps=1000, seed=0)
        spa.compute()

    arch_plain = median_time(plain, 3, warm_up=True)
    closed = median_time(lambda: search_stats(oos, {}), 3, warm_up=True)
    print("| 64 candidates × 500 steps × 1,000 resamples | wall | CPU | wall vs closed form "
          "| CPU vs closed form |")
    print("|---|---:|---:|---:|---:|")
    print(_row("closed form (search_stats: SEs, Adjusted, luck line)", closed, closed, None))
    print(_row("arch StepM + SPA as shipped (same block length)", arch_plain, closed, None))
    print(_row("joint_inference (block length, resamples, widening, SPA, StepM)", ours, closed, 2.0))


def _leaderboard() -> None:
    from sqlalchemy import select

    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
    from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
    from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
    from typestrict_pipeline.study.space import SearchSpace
    from typestrict_pipeline.study.stats import search_stats
    from typestrict_pipeline.study.tables import RunRow, WindowKind

    utc = dt.UTC
    tmp = Path(tempfile.mkdtemp(prefix="bench_study_inference_"))
    engine = open_store(f"sqlite:///{tmp / 'store.db'}")
    space = SearchSpace(grid={"skill": [0.5 + 0.002 * i for i in range(12)]})
    cfg = StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1", space=space,
        start=dt.datetime(2013, 1, 2, tzinfo=utc), end=dt.datetime(2015, 12, 31, tzinfo=utc),
        step=dt.timedelta(days=1), n_folds=3, tune_steps=90, eval_steps=60, holdout_steps=120,
        max_candidates=12, max_total_steps=100_000, backend={"backend": "synthetic"})
    sid = create_study_from_config(engine, cfg, last_backtest=repo.LastBacktest(30, 10))
    run_study_local(engine, sid, SyntheticBackend(), max_workers=2)
    from typestrict_pipeline.study import leaderboard

    def fresh_board() -> None:  # every read computes the ranking: none reused from the last read
        leaderboard._RANKINGS.clear()
        render_markdown(load_leaderboard(engine, sid))

    whole = median_time(fresh_board, 5, warm_up=True)
    oos: dict[str, dict[str, float]] = {}
    with session_scope(engine) as s:
        for r in s.execute(select(RunRow).where(RunRow.study_id == sid,
                                                RunRow.window == WindowKind.EVAL.value)).scalars():
            oos.setdefault(str(r.candidate_id), {}).update(
                {str(t): float(v) for t, v in (r.scores_json or [])})
    ins: dict[str, list[float]] = {}
    closed = median_time(lambda: search_stats(oos, ins), 5, warm_up=True)
    board = load_leaderboard(engine, sid)
    print()
    print("| Demo-shaped study (12 candidates × 180 eval steps) | wall | CPU | wall vs closed form "
          "| CPU vs closed form |")
    print("|---|---:|---:|---:|---:|")
    print(_row("closed form on the same scores", closed, closed, None))
    print(_row("whole leaderboard (store, closed form, bootstrap, PBO, holdout)", whole, closed, 1.0))
    print(f"(verdict: {board.verdict}; SPA p = "
          f"{board.joint.spa_pvalue if board.joint else float('nan'):.3f})")


SCALE_CANDIDATES = 10_000
SCALE_STEPS = 1_000


def ranking_at_scale(chunked: bool) -> dict[str, object]:
    """One case of section 3, in this process: wall, CPU, peak RSS and a digest of the numbers."""
    import hashlib
    import resource

    from typestrict_pipeline.study import dependence, inference
    from typestrict_pipeline.study.calibration import SCENARIOS, simulate
    from typestrict_pipeline.study.inference import decorrelation_span, joint_inference, pbo_cscv
    from typestrict_pipeline.study.stats import ScoreTable, search_stats

    k, t = SCALE_CANDIDATES, SCALE_STEPS
    m = simulate(np.random.default_rng(1), SCENARIOS[1], k, t, edge=0.3)
    if not chunked:
        dependence.CANDIDATE_CHUNK = k
        inference.PBO_COMBINATIONS = 1 << 20
    table = ScoreTable(tuple(f"{i:05d}" for i in range(t)), tuple(str(j) for j in range(k)), m,
                       np.full(k, t, dtype=np.int64))
    search_stats(ScoreTable(table.steps[:40], table.ids[:8], m[:40, :8].copy(),
                            np.full(8, 40, dtype=np.int64)), {})  # imports and caches: not timed
    started, cpu = time.perf_counter(), time.process_time()
    stats = search_stats(table, {})
    joint = joint_inference(m[:, :-1], list(table.ids[:-1]), m[:, -1], seed=0, reps=1000,
                            benchmark_label=f"candidate {k - 1} (the version's defaults)")
    pbo = pbo_cscv(m)
    span = decorrelation_span(m)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    numbers = repr((stats.rows, stats.luck_line, stats.rho_bar, joint.spa_pvalue,
                    joint.spa_pvalue_lower, joint.spa_pvalue_upper, joint.stepm, joint.line_95,
                    pbo, span))
    return {"wall": wall, "cpu": cpu, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "digest": hashlib.sha256(numbers.encode()).hexdigest()[:16],
            "spa": joint.spa_pvalue, "stepm": len(joint.stepm), "pbo": None if pbo is None else pbo.pbo,
            "luck_line": stats.luck_line, "span": span}


def _at_scale() -> None:
    import json
    import os
    import subprocess
    import sys

    print()
    print(f"| {SCALE_CANDIDATES:,} candidates × {SCALE_STEPS:,} steps × 1,000 resamples: luck line, "
          "SPA + StepM, PBO, span | wall | CPU | peak RSS | digest of every number | load |")
    print("|---|---:|---:|---:|---|---:|")
    for label, chunked in (("one pass (chunks as large as the study)", False),
                           ("as shipped: candidates in chunks, CSCV halves in slices", True)):
        code = ("import json, sys; from bench.bench_study_inference import ranking_at_scale; "
                f"print(json.dumps(ranking_at_scale({chunked})))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parent.parent)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {label} | {r['wall']:.1f} s | {r['cpu']:.1f} s | {r['peak_mb']:,.0f} MB | "
              f"`{r['digest']}` | {os.getloadavg()[0]:.2f} |")
    print(f"(SPA p = {r['spa']:.3f}, StepM {r['stepm']} candidates, PBO {r['pbo']}, luck line "
          f"{r['luck_line']:.4f}, span {r['span']}; targets: ≤ 30 s and ≤ 2,048 MB)")


def main() -> None:
    import os

    started = time.perf_counter()
    print(f"(load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)\n")
    _joint()
    _leaderboard()
    _at_scale()
    print(f"\n(load average after: {os.getloadavg()[0]:.2f}; this module took "
          f"{time.perf_counter() - started:.0f} s wall)")


if __name__ == "__main__":
    main()
