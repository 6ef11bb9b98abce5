"""Cost of a re-run sensor tick with many enabled schedules (SQLite store, this machine).

N enabled schedules, a quarter of them hourly and the rest every 4 hours, all enabled at T0.
Ticks are timed at:

* ``nothing due``: half past the hour — every schedule was already evaluated in its cadence
  slot (the common case: the sensor runs every minute, cadences are hours or days) — one query;
* ``some due``: on the hours that are not multiples of 4 — the hourly quarter is evaluated once
  each (here: "Not enough unseen data yet"), slot claimed and tick recorded;
* ``all due``: every 4th hour — every schedule is evaluated once;
* ``naive``: the straightforward alternative, gathering and deciding every schedule's state on
  every tick, regardless of its cadence (no slot claimed, no tick recorded).

A due tick claims every due slot in one transaction and records every tick in one (not two
commits per schedule), and reads each workspace's subscription and spend once per tick.

Run: ``.venv/bin/python -m bench.bench_reruns_tick`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.summary import row
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState, decide_tick
from typestrict_pipeline.reruns.service import (
    enable_schedule,
    evaluate_due,
    list_schedules,
    tick_state,
)
from typestrict_pipeline.reruns.studies import record_data_end
from typestrict_pipeline.reruns.workspace import set_workspace, store_spend_source
from typestrict_pipeline.store import open_store

ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


def main(n: int = 40) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'store.db'}"
        engine = open_store(url)
        set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=10**12)
        workflow = scenario.backend(shift_at=ROOT_END)
        port = scenario.port(engine)
        started = time.perf_counter()
        for i in range(n):
            sid = scenario.create_root_study(engine, workspace="demo", root_end=ROOT_END, budget_micro_usd=10**6,
                                             min_unseen_steps=10, workflow=workflow)
            scenario.run(engine, sid)
            enable_schedule(engine, port, study_id=sid, cadence="1h" if i < n // 4 else "4h",
                            owner="bench@example.com", now=T0)
        setup = time.perf_counter() - started
        record_data_end(engine, "demo", scenario.WORKFLOW, ROOT_END + 3 * dt.timedelta(days=1))
        spend = store_spend_source(engine)
        timings: dict[str, list[float]] = {"nothing": [], "some": [], "all": [], "naive": []}
        cpu: dict[str, list[float]] = {k: [] for k in timings}

        def naive_tick(now: dt.datetime) -> None:
            for view in list_schedules(engine):
                state, _ = tick_state(engine, port, view, now=now, spend=spend)
                decide_tick(state)

        for hour in range(16):  # interleaved: each hour a due tick, an idle tick, a naive tick
            now = T0 + hour * dt.timedelta(hours=1)
            kind = "all" if hour % 4 == 0 else "some"
            t, c = time.perf_counter(), time.process_time()
            results, _ = evaluate_due(engine, port, now=now, spend=spend, source="bench")
            timings[kind].append(time.perf_counter() - t)
            cpu[kind].append(time.process_time() - c)
            assert len(results) == (n if hour % 4 == 0 else n // 4)
            for _ in range(3):
                t, c = time.perf_counter(), time.process_time()
                results, _ = evaluate_due(engine, port, now=now + dt.timedelta(minutes=30), spend=spend,
                                          source="bench")
                timings["nothing"].append(time.perf_counter() - t)
                cpu["nothing"].append(time.process_time() - c)
                assert results == []
            t, c = time.perf_counter(), time.process_time()
            naive_tick(now)
            timings["naive"].append(time.perf_counter() - t)
            cpu["naive"].append(time.process_time() - c)
    med = {k: statistics.median(v) for k, v in timings.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"setup: {n} root studies run and scheduled in {setup:.1f} s; load {os.getloadavg()[0]:.1f}")
    print(f"tick, N={n} schedules ({n // 4} hourly, {n - n // 4} every 4 h), SQLite, medians:")
    print(f"  nothing due: {med['nothing'] * 1000:.1f} ms; naive {med['naive'] * 1000:.0f} ms -> "
          f"ours {med['naive'] / med['nothing']:.0f}x faster")
    print(f"  some due ({n // 4}): {med['some'] * 1000:.0f} ms; naive {med['naive'] * 1000:.0f} ms -> "
          f"naive/ours {med['naive'] / med['some']:.2f}")
    print(f"  all due ({n}): {med['all'] * 1000:.0f} ms = {med['all'] / n * 1000:.1f} ms per schedule; naive "
          f"{med['naive'] * 1000:.0f} ms = {med['naive'] / n * 1000:.1f} ms per schedule -> "
          f"ours/naive {med['all'] / med['naive']:.2f}")
    print(f"  CPU (this process, steadier on a shared machine): nothing {mcpu['nothing'] * 1000:.1f} ms, "
          f"some {mcpu['some'] * 1000:.0f} ms, all {mcpu['all'] * 1000:.0f} ms, naive {mcpu['naive'] * 1000:.0f} ms "
          f"-> all due / naive {mcpu['all'] / mcpu['naive']:.2f}")
    name, naive = "bench_reruns_tick", f"naive tick (every schedule gathered and decided) {med['naive'] * 1000:.0f} ms"
    nums = {k + "_s": v for k, v in med.items()} | {k + "_cpu_s": v for k, v in mcpu.items()}
    row(name, f"re-run tick, {n} schedules, nothing due (SQLite)", f"{med['nothing'] * 1000:.1f} ms",
        alternative=naive, ratio=f"ours {med['naive'] / med['nothing']:.0f}x faster", numbers=nums)
    row(name, f"re-run tick, {n} schedules, {n // 4} due", f"{med['some'] * 1000:.0f} ms",
        alternative=naive, ratio=f"ours {med['naive'] / med['some']:.1f}x faster", numbers=nums)
    row(name, f"re-run tick, {n} schedules, all due (slots claimed, ticks recorded; CPU)",
        f"{mcpu['all'] * 1000:.0f} ms CPU ({med['all'] * 1000:.0f} ms wall)",
        alternative=f"naive tick {mcpu['naive'] * 1000:.0f} ms CPU ({med['naive'] * 1000:.0f} ms wall)",
        ratio=f"ours/naive {mcpu['all'] / mcpu['naive']:.2f} (CPU), {med['all'] / med['naive']:.2f} (wall)",
        target="all due: no slower than the naive tick (CPU)", ok=mcpu["all"] <= mcpu["naive"], numbers=nums)


if __name__ == "__main__":
    main()
