"""API: latency and throughput of the audit and verdict endpoints under 50 and 200 concurrent clients,
against serving the same audit file with plain static servers, measured in the same run.

Setup (seeded, no network): one settled model whose audit has 2,000 test examples × 2 answers
(``synthetic_decision(seed=2026)``, B = 2,000 resamples, ~0.35 MB), recorded in a fresh SQLite
store through the credits core (``settle_training``), and one API key. Four servers, each in its
own process with one worker, on 127.0.0.1:

* ``typestrict api`` (FastAPI + uvicorn): ``GET /v1/models/{id}/audit`` and ``GET /v1/models/{id}``
  (the verdict, built from the audit), both authenticated by key;
* uvicorn + Starlette ``StaticFiles`` serving the audit file (the strongest plain alternative we
  have: same server, no auth, no store);
* Python's ``http.server`` (``ThreadingHTTPServer``, HTTP/1.1 keep-alive: a thread per
  connection) serving the same file.

Measuring starts once every server answers and its process has been idle for a second (``typestrict
api`` warms Dagster's instance in a thread after it starts answering: about 4 s of CPU that, before,
fell on the first case measured, the API's audit).

The load generator is one asyncio process speaking plain HTTP/1.1 on keep-alive connections
(:func:`_load`: one request at a time per connection, a new connection when the server closes
one); every answer is checked (status 200, and for a file, its bytes equal to the audit's). It
costs about 0.2–0.4 ms of CPU per 346 kB answer. Until 2026-12-04 it was httpx, which cost about
5 ms of CPU per answer, 3–5 times any server's: the run then measured mostly how the 2 cores were
shared between httpx and the server, not the server (the API's audit cost its server 0.6 ms of CPU
then, StaticFiles 1.4–1.8 ms, yet the API came out at 0.76×).

Each concurrency runs ``ROUNDS`` rounds of ``REQUESTS`` requests per case (after ``WARMUP``), the
cases' order rotated each round (on a shared 2-core machine the case that runs while another
session's burst lasts is slowed the most). A case's figure is its median round by throughput,
with the slowest and fastest round beside it, and the server's CPU per answer read from
``/proc`` (what the server itself spent, which the machine's load does not change much). The
ratio is the API audit's median throughput over the fastest static server's median throughput;
the ratio of each round (the API against the fastest static server of that round) is printed
beside it, with its median and range. The load average is printed at the start of each round.

Run: ``.venv/bin/python -m bench.bench_api_load`` (``TYPESTRICT_BENCH_FULL=1``: more requests and
rounds)
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
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

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
REQUESTS = 3000 if FULL else 1000
WARMUP = 200 if FULL else 100
ROUNDS = 9 if FULL else 5
TARGET = 0.8
"""The API's audit against the fastest static server at 50 clients (issue 24, item 5)."""
MODEL_ID = "tr_bench_api"
TIMEOUT_S = 10.0
"""A request unanswered after this long counts as failed. Python's ``http.server`` spoke HTTP/1.0
here until 2026-12-04 (a new connection per request): at 200 clients it overflowed its listen
backlog of 5, and the kernel's SYN retries stretched single requests to over 100 s (one case took
4 minutes of a ``make bench``, 2026-11-30, 22:56). It now speaks HTTP/1.1 (``--protocol``), keeping
its connections like the other servers, a thread each."""

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


Outcome = tuple[float, float, float, dict[str, int], float, float]
"""(p50 ms, p99 ms, good answers/s, failed requests by reason, server CPU µs per answer, load average)."""


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes
               ) -> tuple[bytes, bytes, bool]:
    """One request on an open connection: (status, body, whether the server closes it after)."""
    writer.write(head)
    lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
    version, status = lines[0].split(b" ", 2)[:2]
    length, close = 0, version == b"HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    return status, await reader.readexactly(length), close


async def _load(url: str, headers: dict[str, str], concurrency: int, expect: bytes | None,
                pid: int) -> Outcome:
    """REQUESTS GETs of ``url`` by ``concurrency`` connections, after WARMUP; the server's CPU
    is read from ``pid``.

    A request that fails (connection reset or refused, no answer within ``TIMEOUT_S``, wrong
    status or bytes) is counted, not timed; throughput counts good responses only.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = (f"GET {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
    latencies: list[float] = []
    failed: dict[str, int] = {}

    async def worker(queue: Iterator[int], timed: bool) -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for _ in queue:
            started = time.perf_counter()
            try:
                if conn is None:
                    conn = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 22), TIMEOUT_S)
                status, body, close = await asyncio.wait_for(_get(*conn, head), TIMEOUT_S)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError) as exc:
                failed[type(exc).__name__] = failed.get(type(exc).__name__, 0) + int(timed)
                if conn is not None:
                    conn[1].close()
                conn = None
                continue
            if close:
                conn[1].close()
                conn = None
            if status != b"200" or (expect is not None and body != expect):
                why = f"HTTP {status.decode()}" if status != b"200" else "other bytes"
                failed[why] = failed.get(why, 0) + int(timed)
                continue
            if timed:
                latencies.append(time.perf_counter() - started)
        if conn is not None:
            conn[1].close()

    warm = iter(range(WARMUP))
    await asyncio.gather(*(worker(warm, False) for _ in range(min(concurrency, 10))))
    load = os.getloadavg()[0]
    cpu = _cpu_s(pid)
    queue = iter(range(REQUESTS))
    started = time.perf_counter()
    await asyncio.gather(*(worker(queue, True) for _ in range(concurrency)))
    wall = time.perf_counter() - started
    cpu_us = (_cpu_s(pid) - cpu) * 1e6 / max(1, len(latencies))
    q = statistics.quantiles(latencies, n=100)
    return q[49] * 1000, q[98] * 1000, len(latencies) / wall, failed, cpu_us, load


def _median_round(got: list[Outcome]) -> Outcome:
    """The round of median throughput (its latencies and CPU with it), with every round's failures."""
    p50, p99, rps, _, cpu_us, load = sorted(got, key=lambda g: g[2])[len(got) // 2]
    failed: dict[str, int] = {}
    for g in got:
        for why, n in g[3].items():
            failed[why] = failed.get(why, 0) + n
    return p50, p99, rps, failed, cpu_us, load


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
                              "127.0.0.1", "--directory", str(folder / "static"), "--protocol", "HTTP/1.1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        auth = {"Authorization": f"Bearer {key}"}
        api = f"http://127.0.0.1:{ports['api']}"
        audit = (folder / "static" / "audit.json").read_bytes()
        api_pid, starlette_pid, http_server_pid = (p.pid for p in procs)
        cases: list[tuple[str, str, dict[str, str], bytes | None, int]] = [
            ("API  GET /v1/models/{id}/audit", f"{api}/v1/models/{MODEL_ID}/audit", auth, audit, api_pid),
            ("API  GET /v1/models/{id} (verdict)", f"{api}/v1/models/{MODEL_ID}", auth, None, api_pid),
            ("uvicorn+Starlette StaticFiles", f"http://127.0.0.1:{ports['starlette']}/audit.json", {}, audit,
             starlette_pid),
            ("python http.server (threading)", f"http://127.0.0.1:{ports['http.server']}/audit.json", {}, audit,
             http_server_pid),
        ]
        statics = [name for name, *_ in cases[2:]]
        try:
            for _, u, h, _, _ in cases:
                _wait(u, h)
            waited = _wait_idle([p.pid for p in procs])
            print(f"API load: audit {size / 1e3:.0f} kB (2,000 examples x 2 answers, B = 2,000); "
                  f"{REQUESTS} requests per case and round after {WARMUP} warm-up; one server process each; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; measured once every "
                  f"server was idle ({waited:.1f} s after they answered)")
            for c in CONCURRENCY:
                rounds: dict[str, list[Outcome]] = {n: [] for n, *_ in cases}
                started = time.monotonic()
                for r in range(ROUNDS):
                    for name, u, h, body, pid in cases[r % len(cases):] + cases[:r % len(cases)]:
                        rounds[name].append(asyncio.run(_load(u, h, c, body, pid)))
                took = time.monotonic() - started
                results = {name: _median_round(got) for name, got in rounds.items()}
                best_name = max(statics, key=lambda n: results[n][2])
                best_static = results[best_name][2]
                loads = [g[5] for got in rounds.values() for g in got]
                print(f"  {c} concurrent clients ({ROUNDS} rounds in {took:.0f} s, order rotated; the median "
                      f"round, [slowest-fastest]; load average {min(loads):.1f}-{max(loads):.1f}):")
                for name, (p50, p99, rps, failed, _, _) in results.items():
                    each = sorted(g[2] for g in rounds[name])
                    cpus = statistics.median(g[4] for g in rounds[name])
                    print(f"    {name:<36} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  {rps:6.0f} req/s "
                          f"[{each[0]:.0f}-{each[-1]:.0f}]  server CPU {cpus:5.0f} us/answer  "
                          f"{rps / best_static:.2f}x the fastest static server"
                          + (f"  failed: {failed}" if failed else ""))
                api_name = cases[0][0]
                paired = sorted(rounds[api_name][i][2] / max(rounds[n][i][2] for n in statics)
                                for i in range(ROUNDS))
                p50, p99, rps, _, _, _ = results[api_name]
                cpu_us = statistics.median(g[4] for g in rounds[api_name])
                ratio = rps / best_static
                print(f"    API audit / fastest static server: {ratio:.2f}x (medians); round by round "
                      f"{'/'.join(f'{x:.2f}' for x in paired)} (median {statistics.median(paired):.2f}x)")
                target = TARGET if c == 50 else None
                row("bench_api_load", f"API GET audit, {c} concurrent clients, {REQUESTS} requests x {ROUNDS} rounds",
                    f"{rps:.0f} req/s (p50 {p50:.0f} ms, p99 {p99:.0f} ms; median round, rounds "
                    f"{min(g[2] for g in rounds[api_name]):.0f}-{max(g[2] for g in rounds[api_name]):.0f}; "
                    f"server CPU {cpu_us:.0f} us/answer)",
                    alternative=f"fastest static file server ({best_name.split(' (')[0]}) {best_static:.0f} req/s",
                    ratio=f"{ratio:.2f}x its throughput (rounds {paired[0]:.2f}-{paired[-1]:.2f}x)",
                    target="" if target is None else f">= {target}x the fastest static server",
                    ok=None if target is None else ratio >= target,
                    numbers={"rps": rps, "p50_ms": p50, "p99_ms": p99, "static_rps": best_static,
                             "server_cpu_us": cpu_us, "ratio": ratio,
                             "ratio_round_median": statistics.median(paired),
                             **{f"rps_round_{i + 1}": g[2] for i, g in enumerate(rounds[api_name])}})
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
