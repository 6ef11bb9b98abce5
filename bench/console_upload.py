"""A large CSV through the console's **New training** form, against a real server.

What is measured (docs/benchmarks.md, "Customers' data shapes through the API server"): a real
server (``typestrict api``, SQLite, a recorded Jev, started in its own process on a fresh home)
and a console client (``httpx``, signed in with a key) that sends the New training form with a
CSV of ``--rows`` rows (2,000 by default) of ``--text-kb`` kB multi-byte texts each (100 kB: a
200 MB file), the file read from disk as it is sent. Printed: the request's wall time, its
status, the server's RSS before the request and its peak RSS (``VmHWM``) after it. With
``--api``, the same file goes through ``PUT /v1/files/{name}`` then ``POST /v1/trainings`` on a
second fresh server (the path that streams), for comparison.

Not part of ``make bench``, which runs the ``bench_*`` modules (a run takes a minute and 400 MB of disk):

    .venv/bin/python -m bench.console_upload [--rows 2000] [--text-kb 100] [--api]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
FORM = {"col_id": "id", "col_text": "text", "col_group": "", "col_review_label": "",
        "decision-0-name": "sentiment", "decision-0-question": "Is it positive?",
        "decision-0-answer_column": "label", "decision-0-answers": "yes, no", "decision-0-options_column": ""}
API_BODY: dict[str, Any] = {"dataset": {"columns": {"id": "id", "text": "text"}},
            "decisions": [{"name": "sentiment", "question": "Is it positive?", "answer_column": "label",
                           "answers": ["yes", "no"]}]}


def write_dataset(path: Path, rows: int, text_kb: int) -> None:
    """``id,text,label``: each text distinct (seeded random letters, some of them two-byte)."""
    rng = random.Random(0)
    raw = text_kb * 1000 * 3 // 4 - 64
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write("id,text,label\n")
        for i in range(rows):
            text = base64.b64encode(rng.randbytes(raw)).decode().replace("+", "é").replace("/", "ü")
            out.write(f"r{i},row {i} {text},{'yes' if i % 3 else 'no'}\n")


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def served(folder: Path, rows: int) -> Iterator[tuple[str, int, str]]:
    """``typestrict api`` on a fresh home in ``folder``: its URL, its process id, a key (2 credits)."""
    home = folder / "home"
    folder.mkdir(parents=True)
    jev = folder / "jev.jsonl"
    with jev.open("w") as out:
        for i in range(rows):
            out.write(json.dumps({"id": f"r{i}", "decision": "sentiment",
                                  "probabilities": {"yes": 0.6, "no": 0.4}}) + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"sqlite:///{home / 'store.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "typestrict_pipeline.cli", "api", "--home", str(home), "--store", url,
         "--new-store", "--port", str(port), "--rate-limit", "0", "--log-level", "warning",
         "--jev-source", json.dumps({"kind": "file", "path": str(jev)})], cwd=ROOT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{base}/console/sign-in", timeout=5)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.3)
        from typestrict_pipeline.api.keys import create_api_key
        from typestrict_pipeline.credits import CreditLedger
        from typestrict_pipeline.store import open_store

        engine = open_store(url)
        try:
            key = create_api_key(engine, "bench", label="bench").key
            CreditLedger(engine).grant("bench", 2, reference="bench-console-upload")
        finally:
            engine.dispose()
        yield base, proc.pid, key
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _signed_in(base: str, key: str) -> tuple[httpx.Client, str]:
    c = httpx.Client(base_url=base, timeout=600, follow_redirects=False)
    token = re.search(r'name="csrf_token" value="([^"]+)"', c.get("/console/sign-in").text)
    assert token is not None
    assert c.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key}).status_code == 303
    csrf = re.search(r'data-csrf="([0-9a-f]{64})"', c.get("/console/trainings").text)
    assert csrf is not None
    return c, csrf.group(1)


def through_form(folder: Path, data: Path, rows: int) -> dict[str, float | int]:
    with served(folder / "form", rows) as (base, pid, key):
        client, csrf = _signed_in(base, key)
        rss = _status_mb(pid, "VmRSS")
        started = time.perf_counter()
        with data.open("rb") as handle:
            r = client.post("/console/trainings", data={**FORM, "csrf_token": csrf},
                            files={"dataset_file": (data.name, handle, "text/csv")})
        wall = time.perf_counter() - started
        client.close()
        return {"status": r.status_code, "wall_s": round(wall, 2), "rss_before_mb": round(rss),
                "peak_mb": round(_status_mb(pid, "VmHWM"))}


def through_api(folder: Path, data: Path, rows: int) -> dict[str, float | int]:
    with served(folder / "api", rows) as (base, pid, key):
        client = httpx.Client(base_url=base, timeout=600, headers={"Authorization": f"Bearer {key}"})
        rss = _status_mb(pid, "VmRSS")
        started = time.perf_counter()
        with data.open("rb") as handle:
            put = client.put(f"/v1/files/{data.name}", content=handle)
        body = {**API_BODY, "dataset": {**API_BODY["dataset"], "path": data.name}}
        r = client.post("/v1/trainings", json=body)
        wall = time.perf_counter() - started
        client.close()
        return {"status": r.status_code, "put_status": put.status_code, "wall_s": round(wall, 2),
                "rss_before_mb": round(rss), "peak_mb": round(_status_mb(pid, "VmHWM"))}


def main() -> None:
    parser = argparse.ArgumentParser(description="A large CSV through the console's New training form.")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--text-kb", type=int, default=100)
    parser.add_argument("--api", action="store_true", help="also PUT /v1/files + POST /v1/trainings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = folder / "reviews.csv"
        write_dataset(data, args.rows, args.text_kb)
        print(json.dumps({"file_mb": round(data.stat().st_size / 1e6, 1)}), flush=True)
        print(json.dumps({"console form": through_form(folder, data, args.rows)}), flush=True)
        if args.api:
            print(json.dumps({"API": through_api(folder, data, args.rows)}), flush=True)


if __name__ == "__main__":
    main()
