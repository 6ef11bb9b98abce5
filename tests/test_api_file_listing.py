"""Listing a workspace's files never fails on a file it cannot size.

``GET /v1/files`` (and ``GET /v1/models/{id}/files``, the console's training form, the storage
quota's count) asked each listed path ``is_file()`` and then ``stat()``: a file deleted by
another request between the two, or an entry whose ``stat`` fails, made the listing a 500. Now
each entry is read once (``lstat``) and one that cannot be read is left out.

The entry here is real and deterministic: a file at the bottom of folders nested deeper than
the system's longest path (``PATH_MAX``, 4,096 bytes on Linux), made through folder descriptors;
every path-based ``stat`` of it fails (``ENAMETOOLONG``), as a vanished file's does (``ENOENT``).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi.testclient import TestClient

from tests.test_api_support import UNUSED_JEV, new_key
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.api.quota import stored_files, usage_of
from typestrict_pipeline.api.trainings import WorkspaceArea


def _too_deep(root: Path) -> None:
    """A file under folders whose path is longer than ``PATH_MAX`` (made by descriptors)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(20):  # 20 × 250 characters > 4,096 bytes
            os.mkdir("d" * 249, dir_fd=fd)
            deeper = os.open("d" * 249, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(os.open("lost.csv", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_file_that_cannot_be_sized_is_left_out_of_the_listing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    auth = {"Authorization": f"Bearer {new_key(url, 'acme')}"}
    home = tmp_path / "home"
    with TestClient(create_app(url, home, jev_source=UNUSED_JEV, rate_limit=None)) as c:
        assert c.put("/v1/files/a.csv", content=b"abc", headers=auth).status_code == 201
        root = WorkspaceArea(home, "acme").root
        _too_deep(root)
        os.symlink(root / "gone.csv", root / "dangling.csv")  # a name whose file is gone
        r = c.get("/v1/files", headers=auth)
        assert r.status_code == 200, r.text
        assert r.json() == [{"name": "a.csv", "size": 3}]
        assert c.get("/v1/workspaces/acme", headers=auth).json()["storage"]["files"] == 1
    assert stored_files(root) == [("a.csv", 3)]
    assert usage_of([root, tmp_path / "no-such-folder"]).files == 1
