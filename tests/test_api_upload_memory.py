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

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

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
