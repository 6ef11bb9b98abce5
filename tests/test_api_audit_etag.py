"""GET /v1/models/{id}/audit: streamed from disk, named by its SHA-256 (ETag), 304 when unchanged,
and served while another process holds the store's write lock (a read takes none)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

from fastapi.testclient import TestClient

from tests.test_api_support import settled_model
from typestrict_pipeline.api.app import create_app

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here
MODEL = "tr_etag"


def _settled(tmp_path: Path) -> tuple[str, str, bytes]:
    return settled_model(tmp_path, MODEL, seed=7, keep_if_loses=False)


def test_the_audit_is_named_by_its_digest_and_not_sent_again(tmp_path: Path) -> None:
    url, key, audit = _settled(tmp_path)
    home = tmp_path / "home"
    app = create_app(url, home, jev_source=JEV)
    auth = {"Authorization": f"Bearer {key}"}
    sha = hashlib.sha256(audit).hexdigest()
    with TestClient(app) as c:
        first = c.get(f"/v1/models/{MODEL}/audit", headers=auth)
        assert first.status_code == 200 and first.content == audit
        assert first.headers["etag"] == f'"{sha}"' and first.headers["x-audit-sha256"] == sha
        assert (home / "cache" / "audits" / f"{sha}.json").read_bytes() == audit  # on disk
        again = c.get(f"/v1/models/{MODEL}/audit", headers={**auth, "If-None-Match": f'"{sha}"'})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == f'"{sha}"'
        weak_list = c.get(f"/v1/models/{MODEL}/audit",
                          headers={**auth, "If-None-Match": f'"other", W/"{sha}"'})
        assert weak_list.status_code == 304
        other = c.get(f"/v1/models/{MODEL}/audit", headers={**auth, "If-None-Match": '"other"'})
        assert other.status_code == 200 and other.content == audit
        # the ETag never lets a request past the key: no key, 401 whatever If-None-Match says
        assert c.get(f"/v1/models/{MODEL}/audit", headers={"If-None-Match": f'"{sha}"'}
                     ).status_code == 401


def test_the_audit_is_served_while_a_writer_holds_the_store(tmp_path: Path) -> None:
    url, key, audit = _settled(tmp_path)
    app = create_app(url, tmp_path / "home", jev_source=JEV)
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(app) as c:
        assert c.get(f"/v1/models/{MODEL}/audit", headers=auth).status_code == 200
        writer = sqlite3.connect(tmp_path / "store.db", timeout=1)
        try:
            writer.execute("BEGIN IMMEDIATE")  # the write lock, held by another connection
            started = time.monotonic()
            verdict = c.get(f"/v1/models/{MODEL}", headers=auth)
            got = c.get(f"/v1/models/{MODEL}/audit", headers=auth)
            waited = time.monotonic() - started
        finally:
            writer.rollback()
            writer.close()
    assert verdict.status_code == 200 and got.status_code == 200 and got.content == audit
    # A read that waited for the lock would take the busy timeout, 30 s; 20 s leaves a busy machine room.
    assert waited < 20, f"a read waited {waited:.1f} s for the write lock (busy timeout 30 s)"
