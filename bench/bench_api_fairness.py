"""API: one noisy workspace cannot starve another (per-key token buckets), against no limit.

Setup (seeded, no network): a fresh SQLite store with two workspaces, ``noisy`` and ``quiet``, each
with one settled model (its verdict built from a 2,000-example audit, as in
``bench_api_load``) and one API key. ``typestrict api`` runs in its own process (one worker) on
127.0.0.1, twice: with the product's default limit (10 requests a second per key, bursts of 30)
and with ``--rate-limit 0`` (no limit: the alternative, measured in the same run).

Each case lasts ``SECONDS``: the noisy workspace floods ``GET /v1/models/{id}`` (its verdict) from
``FLOOD`` concurrent connections, as fast as they are answered, while the quiet workspace asks for
its own verdict at most ``QUIET_PER_S`` times a second (one at a time; a turn missed while waiting
for an answer is skipped, not made up in a burst). A third case, the quiet workspace alone, is the
floor. For each: the quiet workspace's answers (all must be 200), their p50 and p99 latency, and
what the flood got (200s, 429s). Every response is checked, none is dropped from the counts.

Run: ``.venv/bin/python -m bench.bench_api_fairness``
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.credits import CreditLedger, SettlementRequest, settle_training
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.store import open_store

FULL = bool(os.environ.get("TYPESTRICT_BENCH_FULL"))
SECONDS = 30.0 if FULL else 10.0
FLOOD = 64
QUIET_PER_S = 5.0
TIMEOUT_S = 30.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _prepare(folder: Path) -> tuple[str, dict[str, str]]:
    """A store with a settled model and a key per workspace; (store url, workspace -> key)."""
    url = f"sqlite:///{folder / 'store.db'}"
    engine = open_store(url)
    keys = {}
    try:
        for i, ws in enumerate(("noisy", "quiet")):
            data = synthetic_decision(seed=2026 + i, n=2000, n_answers=2, model_skill=0.8, jev_skill=0.6)
            judgement = judge([data], keep_if_loses=False)
            model = f"tr_{ws}"
            path = write_audit(folder / f"{ws}.audit.json",
                               build_audit(judgement, training_id=model, model_id=model, jev_id="jev"))
            CreditLedger(engine).grant(ws, 1, reference=f"bench-{ws}")
            settle_training(engine, SettlementRequest(
                workspace_id=ws, training_id=model, verdict=judgement.verdict, reason="bench",
                keep_if_loses=False, model_dir=folder / f"model-{ws}", audit_json=path.read_bytes()))
            keys[ws] = create_api_key(engine, ws).key
    finally:
        engine.dispose()
    return url, keys


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(folder: Path, url: str, limit: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "typestrict_pipeline.cli", "api", "--store", url, "--home", str(folder),
         "--port", str(port), "--log-level", "warning",
         "--jev-source", '{"kind": "file", "path": "jev-never-asked.jsonl"}', *limit],
        stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/v1/openapi.json", timeout=5).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit("typestrict api did not start")


async def _case(base: str, keys: dict[str, str], flood: bool) -> dict[str, Any]:
    """One case: the quiet workspace's latencies and failures, the flood's statuses."""
    statuses: dict[int | str, int] = {}
    quiet_ms: list[float] = []
    quiet_bad: dict[int | str, int] = {}
    end = time.monotonic() + SECONDS

    async def flooder(client: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            try:
                r = await client.get(f"{base}/v1/models/tr_noisy")
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] = statuses.get(type(exc).__name__, 0) + 1

    async def quiet(client: httpx.AsyncClient) -> None:
        next_at = time.monotonic()
        while next_at < end:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            t = time.perf_counter()
            try:
                r = await client.get(f"{base}/v1/models/tr_quiet")
                if r.status_code == 200:
                    quiet_ms.append((time.perf_counter() - t) * 1000)
                else:
                    quiet_bad[r.status_code] = quiet_bad.get(r.status_code, 0) + 1
            except httpx.HTTPError as exc:
                quiet_bad[type(exc).__name__] = quiet_bad.get(type(exc).__name__, 0) + 1
            # A quiet client: never more than QUIET_PER_S a second, so a slow answer makes it
            # skip its missed turns (it does not catch up in a burst).
            next_at = max(next_at + 1.0 / QUIET_PER_S, time.monotonic())

    limits = httpx.Limits(max_connections=FLOOD, max_keepalive_connections=FLOOD)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {keys['noisy']}"}, limits=limits,
                                 timeout=TIMEOUT_S) as noisy, \
            httpx.AsyncClient(headers={"Authorization": f"Bearer {keys['quiet']}"}, timeout=TIMEOUT_S) as calm:
        tasks = [quiet(calm)] + ([flooder(noisy) for _ in range(FLOOD)] if flood else [])
        await asyncio.gather(*tasks)
    q = statistics.quantiles(quiet_ms, n=100) if len(quiet_ms) >= 2 else [float("nan")] * 99
    return {"quiet_ok": len(quiet_ms), "quiet_bad": quiet_bad, "p50": q[49], "p99": q[98], "flood": statuses}


def main() -> None:
    from bench.summary import row

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url, keys = _prepare(folder)
        results: dict[str, dict[str, Any]] = {}
        for name, limit, flood in (("quiet alone (limit on)", [], False),
                                   ("with the per-key limit", [], True),
                                   ("without a limit", ["--rate-limit", "0"], True)):
            proc, base = _serve(folder, url, limit)
            try:
                cpu = _cpu_seconds(proc.pid)
                results[name] = asyncio.run(_case(base, keys, flood))
                results[name]["server_cpu_s"] = _cpu_seconds(proc.pid) - cpu
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        expected = int(SECONDS * QUIET_PER_S)
        print(f"API fairness: {SECONDS:.0f} s per case; the noisy workspace floods from {FLOOD} connections, "
              f"the quiet one asks {QUIET_PER_S:g} times a second (~{expected} requests); one server process; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for name, r in results.items():
            print(f"  {name:<26} quiet: {r['quiet_ok']} answered 200"
                  + (f", NOT answered: {r['quiet_bad']}" if r["quiet_bad"] else "")
                  + f", p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms; flood got {r['flood'] or '-'}; "
                  f"server CPU {r['server_cpu_s']:.1f} s")
        on, off, alone = (results["with the per-key limit"], results["without a limit"],
                          results["quiet alone (limit on)"])
        row("bench_api_fairness", f"quiet workspace's p99 while another floods ({FLOOD} connections)",
            f"{on['p99']:.0f} ms, {on['quiet_ok']} of {on['quiet_ok'] + sum(on['quiet_bad'].values())} answered "
            f"(flood: {on['flood'].get(200, 0)} x 200, {on['flood'].get(429, 0)} x 429)",
            alternative=f"no limit: {off['p99']:.0f} ms, {off['quiet_ok']} answered (flood: "
                        f"{off['flood'].get(200, 0)} x 200); alone: {alone['p99']:.0f} ms",
            ratio=f"{off['p99'] / on['p99']:.1f}x lower p99 than without a limit" if on["p99"] > 0 else "",
            target="every quiet request answered 200", ok=not on["quiet_bad"],
            numbers={"p99_ms": on["p99"], "p99_no_limit_ms": off["p99"], "p99_alone_ms": alone["p99"],
                     "server_cpu_s": on["server_cpu_s"], "server_cpu_no_limit_s": off["server_cpu_s"],
                     "flood_200": on["flood"].get(200, 0), "flood_429": on["flood"].get(429, 0)})


if __name__ == "__main__":
    main()
