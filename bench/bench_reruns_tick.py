"""Cost of a re-run sensor tick with many enabled schedules (SQLite store, this machine).

Three ticks are timed for N enabled schedules:

* ``idle``: every schedule was already evaluated in this cadence slot (the common case: the
  sensor runs every minute, cadences are hours or days) — one query, nothing evaluated;
* ``due``: every schedule's slot has come; each is evaluated once (here: "Not enough unseen
  data yet"), ticks recorded;
* ``naive``: the straightforward alternative, gathering and deciding every schedule's state on
  every tick, regardless of its cadence.

Run: ``.venv/bin/python -m bench.bench_reruns_tick`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

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


def _timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(n: int = 40) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'store.db'}"
        engine = open_store(url)
        set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=10**12)
        workflow = scenario.backend(shift_at=ROOT_END)
        port = scenario.port(engine)
        started = time.perf_counter()
        for _ in range(n):
            sid = scenario.create_root_study(engine, workspace="demo", root_end=ROOT_END, budget_micro_usd=10**6,
                                             min_unseen_steps=10, workflow=workflow)
            scenario.run(engine, sid)
            enable_schedule(engine, port, study_id=sid, cadence="1h", owner="bench@example.com", now=T0)
        setup = time.perf_counter() - started
        record_data_end(engine, "demo", scenario.WORKFLOW, ROOT_END + 3 * dt.timedelta(days=1))
        spend = store_spend_source(engine)
        slot = [0]

        def due() -> None:
            now = T0 + slot[0] * dt.timedelta(hours=1)
            results, _ = evaluate_due(engine, port, now=now, spend=spend, source="bench")
            assert len(results) == n
            slot[0] += 1

        def idle() -> None:
            now = T0 + (slot[0] - 1) * dt.timedelta(hours=1) + dt.timedelta(minutes=30)
            results, _ = evaluate_due(engine, port, now=now, spend=spend, source="bench")
            assert results == []

        def naive() -> None:
            for view in list_schedules(engine):
                state, _ = tick_state(engine, port, view, now=T0, spend=spend)
                decide_tick(state)

        t_due = _timed(due, 5)
        t_idle = _timed(idle, 20)
        t_naive = _timed(naive, 5)
    print(f"setup: {n} root studies run and scheduled in {setup:.1f} s")
    print(f"tick, N={n} schedules, SQLite: idle {t_idle * 1000:.1f} ms; due (all evaluated once) "
          f"{t_due * 1000:.0f} ms = {t_due / n * 1000:.1f} ms per schedule; naive (evaluate all every tick) "
          f"{t_naive * 1000:.0f} ms")
    print(f"ratio naive / idle: {t_naive / t_idle:.0f}x (the sensor's common tick)")


if __name__ == "__main__":
    main()
