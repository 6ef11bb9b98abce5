"""API: latency and throughput of the audit and verdict endpoints under 50 and 200 concurrent clients,
against serving the same audit file with plain static servers, measured in the same run.

Setup (seeded, no network): one settled model whose audit has 2,000 test examples × 2 answers
(``synthetic_decision(seed=2026)``, B = 2,000 resamples, ~0.2 MB), recorded in a fresh SQLite
store through the credits core (``settle_training``), and one API key. Four servers, each in its
own process with one worker, on 127.0.0.1:

* ``typestrict api`` (FastAPI + uvicorn): ``GET /v1/models/{id}/audit`` and ``GET /v1/models/{id}``
  (the verdict, built from the audit), both authenticated by key;
* uvicorn + Starlette ``StaticFiles`` serving the audit file (the strongest plain alternative we
  have: same server, no auth, no store);
* Python's ``http.server`` (``ThreadingHTTPServer``) serving the same file.

Measuring starts once every server answers and its process has been idle for a second (``typestrict
api`` warms Dagster's instance in a thread after it starts answering: about 4 s of CPU that, before,
fell on the first case measured, the API's audit). The client is one asyncio process (httpx), ``REQUESTS`` requests per case at each concurrency,
after ``WARMUP`` requests; every response is checked (status 200, byte length). Each concurrency
runs ``ROUNDS`` rounds, the cases' order rotated each round (on a shared 2-core machine the case
that runs first, or while another session's burst lasts, is slowed the most: one fixed order
always charged that to the API's audit, measured first); a case's figure is its median round by
throughput. It prints every round's throughput, the median round's p50/p99 latency and
throughput per case, and the ratio to the faster static server.

Run: ``.venv/bin/python -m bench.bench_api_load``
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.credits import CreditLedger, SettlementRequest, settle_training
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.store import open_store

CONCURRENCY = (50, 200)
# make bench runs a reduced load (400 requests per case); TYPESTRICT_BENCH_FULL=1 the full 1,000
FULL = bool(os.environ.get("TYPESTRICT_BENCH_FULL"))
REQUESTS = 1000 if FULL else 400
WARMUP = 100 if FULL else 50
ROUNDS = 3
MODEL_ID = "tr_bench_api"
TIMEOUT_S = 20.0
"""A request unanswered after this long counts as failed. Python's ``http.server`` at 200
clients overflows its listen backlog; the kernel's SYN retries then stretch single requests to
over 100 s, and one case took 4 minutes of a ``make bench`` (2026-11-30, 22:56)."""

STATIC_APP = """
import sys
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
app = Starlette(routes=[Mount("/", StaticFiles(directory=sys.argv[1]))])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(url: str, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, headers=headers, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server at {url} did not start")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_idle(pids: list[int], *, quiet_s: float = 1.0, at_most_s: float = 60.0) -> float:
    """Wait until no process of ``pids`` used CPU for ``quiet_s`` (at most ``at_most_s``); the wait.

    ``typestrict api`` answers within a second of starting, then loads Dagster's instance and
    code location in a thread (``warm_runs``: about 4 s of CPU) so a first launch need not; a case
    measured during that would measure the warm-up, not the route.
    """
    started = time.monotonic()
    before = [_cpu_s(p) for p in pids]
    while time.monotonic() - started < at_most_s:
        time.sleep(quiet_s)
        now = [_cpu_s(p) for p in pids]
        if all(b2 - b1 < 0.02 for b1, b2 in zip(before, now, strict=True)):
            break
        before = now
    return time.monotonic() - started


def _prepare(folder: Path) -> tuple[str, str, int]:
    """A settled model with its audit in a fresh store; returns (store url, key, audit size)."""
    url = f"sqlite:///{folder / 'store.db'}"
    data = synthetic_decision(seed=2026, n=2000, n_answers=2, model_skill=0.8, jev_skill=0.6)
    judgement = judge([data], keep_if_loses=False)
    path = write_audit(folder / "static" / "audit.json",
                       build_audit(judgement, training_id=MODEL_ID, model_id=MODEL_ID, jev_id="jev"))
    engine = open_store(url)
    try:
        CreditLedger(engine).grant("bench", 1, reference="bench")
        settle_training(engine, SettlementRequest(
            workspace_id="bench", training_id=MODEL_ID, verdict=judgement.verdict, reason="bench",
            keep_if_loses=False, model_dir=folder / "model", audit_json=path.read_bytes()))
        key = create_api_key(engine, "bench").key
    finally:
        engine.dispose()
    return url, key, path.stat().st_size


async def _load(url: str, headers: dict[str, str], concurrency: int,
                size: int | None) -> tuple[float, float, float, dict[str, int]]:
    """(p50 ms, p99 ms, good responses/s, failed requests) of REQUESTS GETs by ``concurrency`` clients.

    A request that fails (connection reset or refused, no answer within ``TIMEOUT_S``, wrong
    status or length) is counted, not timed; throughput counts good responses only.
    """
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=TIMEOUT_S) as client:
        for _ in range(WARMUP // 10):
            await asyncio.gather(*(client.get(url) for _ in range(10)))
        latencies: list[float] = []
        failed: dict[str, int] = {}
        queue = iter(range(REQUESTS))

        async def worker() -> None:
            for _ in queue:
                t = time.perf_counter()
                try:
                    r = await client.get(url)
                except httpx.HTTPError as exc:
                    failed[type(exc).__name__] = failed.get(type(exc).__name__, 0) + 1
                    continue
                if r.status_code != 200 or (size is not None and len(r.content) != size):
                    why = f"HTTP {r.status_code}"
                    failed[why] = failed.get(why, 0) + 1
                    continue
                latencies.append(time.perf_counter() - t)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    q = statistics.quantiles(latencies, n=100)
    return q[49] * 1000, q[98] * 1000, len(latencies) / wall, failed


def _median_round(got: list[tuple[float, float, float, dict[str, int]]]
                  ) -> tuple[float, float, float, dict[str, int]]:
    """The round of median throughput (its latencies with it), with every round's failures."""
    p50, p99, rps, _ = sorted(got, key=lambda g: g[2])[len(got) // 2]
    failed: dict[str, int] = {}
    for g in got:
        for why, n in g[3].items():
            failed[why] = failed.get(why, 0) + n
    return p50, p99, rps, failed


def main() -> None:
    from bench.summary import row

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url, key, size = _prepare(folder)
        (folder / "static_app.py").write_text(STATIC_APP)
        ports = {name: _free_port() for name in ("api", "starlette", "http.server")}
        env = {**os.environ, "PYTHONPATH": str(folder)}
        procs = [
            subprocess.Popen([sys.executable, "-m", "typestrict_pipeline.cli", "api", "--store", url,
                              "--home", str(folder), "--port", str(ports["api"]), "--log-level", "warning",
                              "--jev-source", '{"kind": "file", "path": "jev-never-asked.jsonl"}',
                              "--new-store", "--rate-limit", "0"],  # raw throughput: no per-key limit
                             stdout=subprocess.DEVNULL),
            subprocess.Popen([sys.executable, "-c",
                              "import sys, uvicorn; port = int(sys.argv[2]); sys.argv = ['x', sys.argv[1]]; "
                              "import static_app; uvicorn.run(static_app.app, host='127.0.0.1', port=port, "
                              "log_level='warning', access_log=False)",
                              str(folder / "static"), str(ports["starlette"])], env=env, cwd=folder),
            subprocess.Popen([sys.executable, "-m", "http.server", str(ports["http.server"]), "--bind",
                              "127.0.0.1", "--directory", str(folder / "static")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        auth = {"Authorization": f"Bearer {key}"}
        api = f"http://127.0.0.1:{ports['api']}"
        cases = [
            ("API  GET /v1/models/{id}/audit", f"{api}/v1/models/{MODEL_ID}/audit", auth, size),
            ("API  GET /v1/models/{id} (verdict)", f"{api}/v1/models/{MODEL_ID}", auth, None),
            ("uvicorn+Starlette StaticFiles", f"http://127.0.0.1:{ports['starlette']}/audit.json", {}, size),
            ("python http.server (threading)", f"http://127.0.0.1:{ports['http.server']}/audit.json", {}, size),
        ]
        try:
            for _, u, h, _ in cases:
                _wait(u, h)
            waited = _wait_idle([p.pid for p in procs])
            print(f"API load: audit {size / 1e3:.0f} kB (2,000 examples x 2 answers, B = 2,000); "
                  f"{REQUESTS} requests per case and round after {WARMUP} warm-up; one server process each; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; measured once every "
                  f"server was idle ({waited:.1f} s after they answered)")
            for c in CONCURRENCY:
                rounds: dict[str, list[tuple[float, float, float, dict[str, int]]]] = {n: [] for n, *_ in cases}
                for r in range(ROUNDS):
                    for name, u, h, s in cases[r % len(cases):] + cases[:r % len(cases)]:
                        rounds[name].append(asyncio.run(_load(u, h, c, s)))
                results = {name: _median_round(got) for name, got in rounds.items()}
                best_static = max(results[n][2] for n, *_ in cases[2:])
                print(f"  {c} concurrent clients ({ROUNDS} rounds, order rotated; the median round):")
                for name, (p50, p99, rps, failed) in results.items():
                    each = "/".join(f"{g[2]:.0f}" for g in rounds[name])
                    print(f"    {name:<36} p50 {p50:8.1f} ms  p99 {p99:8.1f} ms  {rps:7.0f} req/s  "
                          f"({rps / best_static:.2f}x the faster static server; rounds {each} req/s)"
                          + (f"  failed: {failed}" if failed else ""))
                api_name = cases[0][0]
                p50, p99, rps, _ = results[api_name]
                row("bench_api_load", f"API GET audit, {c} concurrent clients, {REQUESTS} requests",
                    f"{rps:.0f} req/s (p50 {p50:.0f} ms, p99 {p99:.0f} ms; median of {ROUNDS} rounds)",
                    alternative=f"fastest static file server {best_static:.0f} req/s",
                    ratio=f"{rps / best_static:.2f}x its throughput",
                    numbers={"rps": rps, "p50_ms": p50, "p99_ms": p99, "static_rps": best_static,
                             **{f"rps_round_{i + 1}": g[2] for i, g in enumerate(rounds[api_name])}})
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
