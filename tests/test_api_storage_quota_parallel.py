"""The storage quota holds under parallel uploads: the check and the write are one step.

Before, each upload counted the workspace's files, then wrote its own: uploads sent together to
servers sharing the home (the workers of one deployment, here forked processes each serving the
real app) each saw the room free and together stored beyond the quota. Now the check and the
final rename happen under the workspace's storage lock (an ``flock`` in the workspace's folder),
so exactly as many uploads succeed as fit, the rest are 409 ``storage_quota``, and what is stored
stays within the quota.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests import test_api_support as support
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.api.quota import StorageQuota, stored_files
from typestrict_pipeline.api.trainings import WorkspaceArea

SIZE = 2_000_000
QUOTA = StorageQuota(max_bytes=3 * SIZE + 10, max_files=1000)  # room for 3 of the uploads
WORKERS = 10


def _worker(url: str, home: Path, key: str, i: int, start: Any, codes: Any) -> None:
    """One server process: the app on the shared home, one upload once every worker is ready;
    its status in ``codes[i]`` (left 0 if it failed before an answer)."""
    try:
        with TestClient(create_app(url, home, jev_source=support.UNUSED_JEV, rate_limit=None,
                                   storage_quota=QUOTA)) as c:
            c.get("/v1/files", headers={"Authorization": f"Bearer {key}"})  # warmed up
            start.wait(timeout=120)
            r = c.put(f"/v1/files/f{i}.csv", content=bytes([65 + i]) * SIZE,
                      headers={"Authorization": f"Bearer {key}"})
            codes[i] = r.status_code
    finally:
        os._exit(0)  # a forked child leaves without running the parent's exit handlers


def test_parallel_uploads_from_several_server_processes_stay_within_the_quota(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    home = tmp_path / "home"
    key = support.new_key(url, "acme")
    fork = multiprocessing.get_context("fork")
    for round_ in range(2):  # the area emptied between rounds
        start, codes = fork.Barrier(WORKERS), fork.Array("i", WORKERS)
        workers = [fork.Process(target=_worker, args=(url, home, key, i, start, codes)) for i in range(WORKERS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=180)
        got = sorted(codes[:])
        kept = stored_files(WorkspaceArea(home, "acme").root)
        assert sum(size for _, size in kept) <= QUOTA.max_bytes, (round_, got, kept)
        assert got == [201] * 3 + [409] * (WORKERS - 3) and len(kept) == 3, (round_, got, kept)
        for name, _ in kept:
            (WorkspaceArea(home, "acme").root / name).unlink()
