"""The console's **New training** form streams its dataset: the server never holds the file.

The form's upload (Starlette spools it to a temporary file) was read into memory whole and
handed to :meth:`TrainingStore.create` as bytes: a 200 MB CSV raised the server's peak RSS to
897 MB (docs/benchmarks.md, "Customers' data shapes through the API server"), where
``PUT /v1/files/{name}`` writes its body a piece at a time. Now the form's file is copied from
Starlette's spooled file into the workspace's ``.uploads`` folder a piece at a time (the API's
own :func:`~typestrict_pipeline.api.routes.files.stage_stream`), checked from there and moved
into the workspace's files once the training is made.

The test sends a 32 MB CSV (a few hundred rows of long texts) through the form to a real server
in this process, the file read from disk as it is sent, and reads the peak of Python's
allocations (``tracemalloc``, every thread) during the request: the file's size and more
before, a few MiB now. The stored file is the sent one, byte for byte; a refused upload of the
same file stores nothing, charges nothing and leaves no staged file.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.test_api_support import ApiServer, new_key
from tests.test_console_pages import JEV, TRAINING
from tests.test_console_storage_lock_wait import signed_in
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store

MiB = 1024 * 1024
ROWS = 320
TEXT_BYTES = 100_000


def _write_csv(path: Path) -> int:
    """``id,text,grp,label``: ``ROWS`` rows of distinct ~100 kB texts (some two-byte letters)."""
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz éü"
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write("id,text,grp,label\n")
        for i in range(ROWS):
            text = "".join(rng.choices(letters, k=TEXT_BYTES))
            out.write(f"r{i},review {i} {text},g{i // 4},{'yes' if i % 3 else 'no'}\n")
    return path.stat().st_size


def _balance(url: str) -> int:
    engine = open_store(url)
    try:
        return CreditLedger(engine).balance("acme")
    finally:
        engine.dispose()


def _peak(send: Callable[[], httpx.Response]) -> tuple[httpx.Response, int]:
    """``send()``'s response and the peak of Python's allocations (every thread) meanwhile."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        r = send()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return r, peak


def test_a_large_dataset_through_the_new_training_form_is_never_held_whole(tmp_path: Path) -> None:
    """A refused upload costs a few MiB whatever the file's size; a training made from an upload
    costs what a training of the same file already in the workspace's files costs (the checks
    read what they read of it either way) plus a bounded amount, not the file; it is stored as
    sent."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=3)
    home = tmp_path / "home"
    data = tmp_path / "reviews.csv"
    size = _write_csv(data)
    assert size > 30 * MiB
    files = home / "workspaces" / "acme" / "files"
    with ApiServer(url, home, jev_source=JEV, rate_limit=None) as server:
        client, csrf = signed_in(server.url, key, timeout=300)

        def upload(name: str) -> httpx.Response:
            with data.open("rb") as handle:  # read from disk as it is sent
                return client.post("/console/trainings", data={**TRAINING, "csrf_token": csrf},
                                   files={"dataset_file": (name, handle, "text/csv")})

        def from_files() -> httpx.Response:
            return client.post("/console/trainings", files={"none": ("", b"")},
                               data={**TRAINING, "dataset_name": "stored.csv", "csrf_token": csrf})

        r, refused = _peak(lambda: upload("reviews.txt"))  # refused on its name: nothing stored or charged
        assert r.status_code == 422 and "a dataset file ending in one of" in r.text, r.text[:2000]
        assert refused < 8 * MiB, f"{refused / MiB:.1f} MiB of Python allocations for a refused {size / MiB:.0f} MiB upload"
        assert not files.exists() or list(files.iterdir()) == []
        assert _balance(url) == 3
        with data.open("rb") as handle:
            put = client.put("/v1/files/stored.csv", content=handle, headers={"Authorization": f"Bearer {key}"})
        assert put.status_code == 201, put.text
        assert from_files().status_code == 303  # the first training's one-time costs, not measured
        r, through_form = _peak(lambda: upload("reviews.csv"))
        assert r.status_code == 303, r.text[:2000]
        assert (files / "reviews.csv").read_bytes() == data.read_bytes()  # stored as sent
        r, stored = _peak(from_files)
        assert r.status_code == 303, r.text[:2000]
        client.close()
    assert _balance(url) == 0
    assert through_form - stored < size / 4, (
        f"the form's upload: {through_form / MiB:.1f} MiB of Python allocations at the peak; the same "
        f"{size / MiB:.0f} MiB file from the workspace's files: {stored / MiB:.1f} MiB")
    assert list((home / "workspaces" / "acme" / ".uploads").iterdir()) == []
