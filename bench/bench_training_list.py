"""Listing a workspace's trainings (``GET /v1/trainings``, the console's Trainings page).

Every workspace's trainings are folders of one directory (``${TYPESTRICT_HOME}/trainings``), and
which workspace a folder belongs to is written in its manifest. What is timed (one process, this
machine, the median of 3 after a warm-up unless said):

* which trainings are one workspace's, beside 20,000 folders of other workspaces:
  ``TrainingStore.list_ids`` on a warm store (the owners read once and kept), its first call
  (every manifest read once), the way it worked before (every manifest read on every call,
  the same reader), and the **floor**: listing the directory's names alone (``os.scandir``);
* ``GET /v1/trainings`` of a workspace with 1,000 trainings, through the app in process: the
  default page (200) against all 1,000 at once (``?limit=1000``), the answer before paging.

The folders are copies of one real training made through the API (``TrainingStore.create``
over a 40-row dataset), each with its manifest's workspace rewritten; no lifecycle row is
needed to list them.

Run: ``.venv/bin/python -m bench.bench_training_list`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import summary
from bench.timing import median_time
from typestrict_pipeline.api.trainings import DRAFT_NAME, TrainingStore

BENCH = "bench_training_list"
OTHERS = 20_000
OWN = 1_000
JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


def _one_training(tmp: Path, url: str, key: str) -> tuple[str, Path]:
    """A real training of workspace "acme", made through the API; its id and the trainings dir."""
    from fastapi.testclient import TestClient

    from typestrict_pipeline.api.app import create_app

    rows = "".join(f"ex{i},review number {i},g{i // 4},{'yes' if i % 3 else 'no'}\n" for i in range(40))
    body = {"dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
            "decisions": [{"name": "sentiment", "question": "Is this review positive?",
                           "answer_column": "label", "answers": ["yes", "no"]}],
            "options": {"keep_if_loses": False}}
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(url, tmp / "home", jev_source=JEV, rate_limit=None)) as c:
        assert c.put("/v1/files/reviews.csv", content=("id,text,grp,label\n" + rows).encode(),
                     headers=auth).status_code == 201
        made = c.post("/v1/trainings", json=body, headers=auth)
        assert made.status_code == 201, made.text
    return str(made.json()["id"]), tmp / "home" / "trainings"


def _copies(root: Path, source: str, workspace: str, n: int, prefix: str) -> None:
    draft = json.loads((root / source / DRAFT_NAME).read_text(encoding="utf-8"))
    text = json.dumps({**draft, "workspace_id": workspace}, indent=2)
    for i in range(n):
        folder = root / f"tr_{prefix}{i:011d}"
        folder.mkdir()
        (folder / DRAFT_NAME).write_text(text, encoding="utf-8")


def _charged(url: str, workspace: str, training_ids: list[str]) -> None:
    """Each copy a training of ``workspace``: charged, its lifecycle row written (a draft no
    lifecycle row or ledger line knows is a creation that never committed: not listed)."""
    from typestrict_pipeline.credits.ledger import CreditLedger
    from typestrict_pipeline.lifecycle.trainings import start_training
    from typestrict_pipeline.store import open_store

    engine = open_store(url)
    try:
        CreditLedger(engine).grant(workspace, len(training_ids), reference=f"bench-{workspace}-copies")
        for tid in training_ids:
            start_training(engine, workspace, tid)
    finally:
        engine.dispose()


def _every_manifest(store: TrainingStore, workspace: str) -> list[str]:
    """How ``list_ids`` worked before: every folder's manifest read on every call."""
    return sorted(e.name for e in os.scandir(store.trainings_dir)
                  if not e.name.startswith(".") and e.is_dir() and (store._owner(e.name) or ("",))[0] == workspace)


def main() -> None:
    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.credits.ledger import CreditLedger
    from typestrict_pipeline.store import open_store

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "home").mkdir()
        url = f"sqlite:///{tmp / 'store.db'}"
        engine = open_store(url)
        key = create_api_key(engine, "acme").key
        CreditLedger(engine).grant("acme", 1, reference="bench")
        made, root = _one_training(tmp, url, key)
        _copies(root, made, "other", OTHERS, "o")
        store = TrainingStore(tmp / "home", engine, None)
        started = time.perf_counter()
        assert store.list_ids("acme") == [made]
        first = time.perf_counter() - started
        warm, _ = median_time(lambda: store.list_ids("acme"), warm_up=True)
        before, _ = median_time(lambda: _every_manifest(store, "acme"), warm_up=True)
        floor, _ = median_time(lambda: [e.name for e in os.scandir(root)], warm_up=True)
        summary.row(BENCH, f"a workspace's trainings beside {OTHERS:,} of other workspaces (list_ids)",
                    f"{warm * 1000:.0f} ms (its first call {first:.2f} s)",
                    alternative=f"every manifest read on every call (before) {before:.2f} s; the "
                                f"directory's names alone (the floor) {floor * 1000:.0f} ms",
                    ratio=f"{before / warm:.0f}x faster than before, {warm / floor:.1f}x the floor",
                    numbers={"warm_s": warm, "first_s": first, "before_s": before, "floor_s": floor})
        _pages(tmp, url, key, root, made)
        engine.dispose()


def _pages(tmp: Path, url: str, key: str, root: Path, made: str) -> None:
    from fastapi.testclient import TestClient

    from typestrict_pipeline.api.app import create_app

    _copies(root, made, "acme", OWN - 1, "a")
    _charged(url, "acme", [f"tr_a{i:011d}" for i in range(OWN - 1)])
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(url, tmp / "home", jev_source=JEV, rate_limit=None)) as c:
        def get(query: str) -> int:
            r = c.get(f"/v1/trainings{query}", headers=auth)
            assert r.status_code == 200, r.text
            return len(r.json())

        assert get("") == 200 and get("?limit=1000") == OWN
        page, _ = median_time(lambda: get(""), warm_up=True)
        whole, _ = median_time(lambda: get("?limit=1000"), warm_up=True)
    summary.row(BENCH, f"GET /v1/trainings of a workspace with {OWN:,} trainings, the default page (200)",
                f"{page:.2f} s", alternative=f"all {OWN:,} at once (the answer before paging) {whole:.2f} s",
                ratio=f"{whole / page:.1f}x less per answer",
                numbers={"page_s": page, "whole_s": whole})
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
