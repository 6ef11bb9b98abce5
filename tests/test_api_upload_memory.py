"""An upload is written to disk a piece at a time: the server never holds the file.

``PUT /v1/files/{name}`` and ``PUT /v1/trainings/{id}/model/{name}`` read the whole body into
memory (its pieces in a list, then joined: twice the file) before storing it; a 200 MiB upload
raised the server's peak RSS by 410 MB, a 1 GiB one (upload limit raised) by 2.1 GB
(docs/api.md, "Uploads at customers' sizes"). Now each piece goes to a staged file under the
workspace's ``.uploads`` folder, checked against the quota and moved in place.

The test uploads 32 MiB to a real server in this process and reads the peak of Python's
allocations (``tracemalloc``, every thread): 64 MiB and more before, a few MiB now.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.test_api_support import ApiServer, new_key
from typestrict_pipeline.api.quota import StorageQuota

MiB = 1024 * 1024
SIZE = 32 * MiB


def _pieces(size: int, piece: int = 256 * 1024) -> Iterator[bytes]:
    block = bytes(range(256)) * (piece // 256)
    sent = 0
    while sent < size:
        out = block[: min(piece, size - sent)]
        sent += len(out)
        yield out


def test_an_upload_is_never_held_whole_by_the_server(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme")
    home = tmp_path / "home"
    quota = StorageQuota(max_bytes=40 * MiB)
    with ApiServer(url, home, rate_limit=None, storage_quota=quota) as server, server.client(key) as client:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            r = client.put("/v1/files/big.bin", content=_pieces(SIZE), headers={"Content-Length": str(SIZE)})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert r.status_code == 201, r.text
        assert r.json() == {"name": "big.bin", "size": SIZE}
        assert peak < 8 * MiB, f"{peak / MiB:.1f} MiB of Python allocations for a 32 MiB upload"
        stored = home / "workspaces" / "acme" / "files" / "big.bin"
        assert stored.read_bytes() == b"".join(_pieces(SIZE))
        # sent in chunks (no Content-Length): over the 40 MiB quota once received, refused
        # and nothing left; the staged files are neither listed nor counted
        r = client.put("/v1/files/more.bin", content=_pieces(SIZE))
        assert r.status_code == 409 and r.json()["error"]["code"] == "storage_quota", r.text
        # declared over the quota: refused on its Content-Length, before its body is read
        r = client.put("/v1/files/more.bin", content=_pieces(SIZE), headers={"Content-Length": str(SIZE)})
        assert r.status_code == 409 and r.json()["error"]["code"] == "storage_quota", r.text
        assert [f["name"] for f in client.get("/v1/files").json()] == ["big.bin"]
        assert client.get("/v1/workspaces/acme").json()["storage"]["bytes"] == SIZE
        # a model file for a training that does not exist: 404 before its body is read
        r = client.put("/v1/trainings/nope/model/w.bin", content=b"w" * 1000)
        assert r.status_code == 404, r.text
    assert list((home / "workspaces" / "acme" / ".uploads").iterdir()) == []


def test_a_file_left_by_a_killed_upload_goes_without_another_upload(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A server killed mid-upload leaves its staged file; the workspace may never upload again.
    # The server removes every workspace's staged files older than a day as it starts and then
    # every STALE_SWEEP_S (an hour; a fifth of a second here), and nothing else.
    from typestrict_pipeline.api import trainings

    monkeypatch.setattr(trainings, "STALE_SWEEP_S", 0.2)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    home = tmp_path / "home"
    staged = home / "workspaces" / "acme" / ".uploads"
    staged.mkdir(parents=True)
    stored = home / "workspaces" / "acme" / "files" / "kept.csv"
    stored.parent.mkdir()
    two_days_ago = time.time() - 2 * 86_400
    for path in (staged / "left-by-a-kill", staged / "in-progress", stored):
        path.write_bytes(b"x" * 10)
    for path in (staged / "left-by-a-kill", stored):
        os.utime(path, (two_days_ago, two_days_ago))
    (home / "workspaces" / "plain-file").write_text("not a workspace")  # neither followed nor removed

    def names() -> list[str]:
        return sorted(p.name for p in staged.iterdir())

    with ApiServer(url, home, rate_limit=None):
        assert _within(10.0, lambda: names() == ["in-progress"]), names()
        # a file that turns a day old while the server runs goes at the next sweep
        os.utime(staged / "in-progress", (two_days_ago, two_days_ago))
        assert _within(10.0, lambda: names() == []), names()
        assert stored.read_bytes() == b"x" * 10  # the workspace's own files are never swept
    assert (home / "workspaces" / "plain-file").read_text() == "not a workspace"


def _within(seconds: float, holds: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while not holds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
