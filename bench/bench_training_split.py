"""A training's split at customers' sizes: creating a training, then reading its split.

What is timed, through the real app in process (``fastapi.testclient``, a SQLite store, a
recorded Jev; one process; wall seconds of each request):

* ``POST /v1/trainings`` of a dataset of N rows (a CSV without a group column, about 50 bytes
  a row, answers yes/no; written straight into the workspace's files);
* ``GET /v1/trainings/{id}/split``: the first view, then the median of the later ones;
* the console's training page (``/console/trainings/{id}``): its first and later views;
* the check that the split leaves something to train on (``check_something_to_train_on``, run
  by every creation after the dataset is loaded) on the same rows without groups, in 1,000
  groups and in one group (refused), against the load it follows.

N is 1,000,000 by default (``--rows N`` for another size).

Run: ``.venv/bin/python -m bench.bench_training_split`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import summary

BENCH = "bench_training_split"
BODY: dict[str, Any] = {
    "dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", "group": None}},
    "decisions": [{"name": "sentiment", "question": "Is this review positive?",
                   "answer_column": "label", "answers": ["yes", "no"]}],
    "options": {"keep_if_loses": False},
}


def write_dataset(path: Path, rows: int) -> None:
    """``rows`` rows ``id,text,label``: distinct texts of about 40 bytes, two answers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        out.write("id,text,label\n")
        for start in range(0, rows, 100_000):
            out.write("".join(f"r{i:07d},review number {i} of a product we sold,{'yes' if i % 3 else 'no'}\n"
                              for i in range(start, min(rows, start + 100_000))))


def _timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    got = fn()
    return time.perf_counter() - started, got


def measure(rows: int, folder: Path, views: int = 3) -> dict[str, Any]:
    """Create one training of ``rows`` rows and read its split ``views`` times through each door."""
    from fastapi.testclient import TestClient

    from typestrict_pipeline.api.app import create_app
    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.credits.ledger import CreditLedger
    from typestrict_pipeline.store import open_store

    url = f"sqlite:///{folder / 'store.db'}"
    engine = open_store(url)
    key = create_api_key(engine, "acme").key
    CreditLedger(engine).grant("acme", 2, reference="bench")
    engine.dispose()
    home = folder / "home"
    data = home / "workspaces" / "acme" / "files" / "reviews.csv"
    write_dataset(data, rows)
    jev = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked
    auth = {"Authorization": f"Bearer {key}"}
    out: dict[str, Any] = {"rows": rows, "file_mb": data.stat().st_size / 1e6}
    with TestClient(create_app(url, home, jev_source=jev, rate_limit=None)) as c:
        out["create_s"], made = _timed(lambda: c.post("/v1/trainings", json=BODY, headers=auth))
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        api = [_timed(lambda: c.get(f"/v1/trainings/{tid}/split", headers=auth)) for _ in range(views)]
        assert all(r.status_code == 200 for _, r in api), api[0][1].text[:300]
        out["split_mb"] = len(api[0][1].content) / 1e6
        out["api_first_s"], out["api_later_s"] = api[0][0], statistics.median(t for t, _ in api[1:])
        page = c.get("/console/sign-in").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token is not None
        c.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key})
        pages = [_timed(lambda: c.get(f"/console/trainings/{tid}")) for _ in range(views)]
        assert all(r.status_code == 200 and 'id="n-train"' in r.text for _, r in pages)
        out["page_first_s"], out["page_later_s"] = pages[0][0], statistics.median(t for t, _ in pages[1:])
    return out


def measure_check(rows: int, folder: Path) -> dict[str, float]:
    """Seconds of ``load_dataset`` and of ``check_something_to_train_on`` after it, per shape."""
    from typestrict_pipeline.errors import DatasetError
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.holdout import check_something_to_train_on
    from typestrict_pipeline.refund.manifest import parse_manifest

    out: dict[str, float] = {}
    plain = folder / "plain.csv"
    write_dataset(plain, rows)
    for shape, groups in (("no_group", None), ("groups_1000", 1000), ("one_group", 1)):
        path = plain
        if groups is not None:
            path = folder / f"{shape}.csv"
            with plain.open(encoding="utf-8") as src, path.open("w", encoding="utf-8") as dst:
                dst.write("id,text,grp,label\n")
                next(src)
                for i, line in enumerate(src):
                    row_id, text, label = line.rstrip("\n").split(",")
                    dst.write(f"{row_id},{text},g{i % groups},{label}\n")
        manifest = parse_manifest({
            "manifest_version": 1, "training_id": "t", "workspace_id": "w",
            "dataset": {"path": str(path), "columns": {"id": "id", "text": "text",
                                                       "group": None if groups is None else "grp"}},
            "decisions": BODY["decisions"], "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}},
            "training": {"status": "failed", "reason": "bench"}}, source="bench")
        out[f"{shape}_load_s"], dataset = _timed(lambda m=manifest: load_dataset(m))
        started = time.perf_counter()
        try:
            check_something_to_train_on(dataset)
        except DatasetError:
            out[f"{shape}_refused"] = 1.0
        out[f"{shape}_check_s"] = time.perf_counter() - started
        del dataset
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_training_split")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        got = measure(args.rows, Path(tmp))
    rows = got["rows"]
    summary.row(BENCH, f"create a training, {rows:,} rows CSV ({got['file_mb']:.0f} MB)",
                f"{got['create_s']:.1f} s", numbers=got)
    summary.row(BENCH, f"GET /v1/trainings/{{id}}/split, {rows:,} rows ({got['split_mb']:.0f} MB)",
                f"first view {got['api_first_s']:.2f} s, later views {got['api_later_s']:.2f} s",
                numbers=got)
    summary.row(BENCH, f"console training page, {rows:,} rows",
                f"first view {got['page_first_s']:.2f} s, later views {got['page_later_s']:.2f} s",
                numbers=got)
    with tempfile.TemporaryDirectory() as tmp:
        check = measure_check(args.rows, Path(tmp))
    for shape, said in (("no_group", "no group"), ("groups_1000", "1,000 groups"),
                        ("one_group", "one group, refused")):
        summary.row(BENCH, f"something to train on? {rows:,} rows, {said}",
                    f"{check[f'{shape}_check_s']:.3f} s",
                    alternative=f"the load it follows {check[f'{shape}_load_s']:.1f} s",
                    ratio=f"{check[f'{shape}_check_s'] / check[f'{shape}_load_s']:.1%} of the load",
                    numbers=check)


if __name__ == "__main__":
    main()
