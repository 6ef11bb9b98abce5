"""Backtest concurrency efficiency against a local model server with 200 ms latency.

Run: ``.venv/bin/python -m bench.bench_backtest_concurrency``

The stand-in OpenAI-compatible server runs in its own process (``ThreadingHTTPServer``, 200 ms
per answer); the backtest calls it over real HTTP through the project's client, one model call
per step, metered. Efficiency = ideal time / actual time, where ideal = steps x 0.2 s / calls in
flight. The straightforward alternative is the sequential run (1 in flight), measured in the same
run; the speed-up is its per-step time over the concurrent one's.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from typing import Any

import numpy as np

from typestrict_pipeline.backtest import (
    ModelPrice,
    PointInTimeTable,
    PriceTable,
    Workflow,
    run_backtest,
)

LATENCY_S = 0.2
DAY = dt.timedelta(days=1)
T0 = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
MODEL = "standin-bench"
SERVER = (
    "import sys, time\n"
    "from typestrict_pipeline.clients.standin import StandinServer, StandinReply\n"
    f"s = StandinServer(lambda r: StandinReply(text='0.5'), latency_s={LATENCY_S}, model_name='{MODEL}').start()\n"
    "print(s.port, flush=True)\n"
    "sys.stdin.read()\n"
)


def _decide(ctx: Any) -> Any:
    reply = ctx.models["m"].complete([{"role": "user", "content": f"step {ctx.step_index}"}], max_tokens=4)
    return reply.text


def _outcome(ctx: Any) -> Any:
    return "0.5"


def _score(d: Any, o: Any, c: Any) -> float:
    return 1.0 if d == o else 0.0


def main() -> None:
    from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient

    n = 1200
    ev = np.datetime64("2000-01-01", "us") + np.arange(n) * np.timedelta64(86_400_000_000, "us")
    table = PointInTimeTable("x", event_time=ev, known_time=ev + np.timedelta64(86_400_000_000, "us"),
                             columns={"v": np.zeros(n)})
    wf = Workflow("bench_calls", decide=_decide, outcome=_outcome, score=_score, tables=("x",),
                  horizon=DAY, outcome_description="constant", models=("m",))
    prices = PriceTable(models={MODEL: ModelPrice(150_000, 600_000)})
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        client = OpenAICompatibleClient(f"http://127.0.0.1:{port}/v1", MODEL, timeout_s=30, max_attempts=1)
        print(f"stand-in server in its own process, {LATENCY_S * 1000:.0f} ms per answer; one metered model call per step")
        print(f"{'in flight':>9} {'steps':>6} {'ideal s':>8} {'actual s':>9} {'efficiency':>10} {'s/step':>8} {'speed-up':>9}")
        sequential_per_step = None
        for in_flight, steps in ((1, 40), (8, 320), (32, 1000)):
            start = T0 + DAY
            t0 = time.perf_counter()
            result = run_backtest(wf, data=table, start=start, end=start + (steps - 1) * DAY, step=DAY,
                                  clients={"m": client}, prices=prices, max_in_flight=in_flight)
            actual = time.perf_counter() - t0
            assert result.card.steps_ok == steps, result.card.first_error
            ideal = steps * LATENCY_S / in_flight
            per_step = actual / steps
            if sequential_per_step is None:
                sequential_per_step = per_step
            print(f"{in_flight:>9} {steps:>6} {ideal:>8.2f} {actual:>9.2f} {ideal / actual:>10.3f} "
                  f"{per_step:>8.4f} {sequential_per_step / per_step:>8.1f}x")
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
