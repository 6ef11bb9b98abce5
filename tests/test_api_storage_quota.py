"""Each workspace's storage quota: what it keeps through the API (uploads, datasets, model files)
is counted and bounded, checked before anything is stored or charged.

A workspace could store any number of files of up to 256 MiB each (the per-request upload limit
was the only bound): ``PUT /v1/files/a1``, ``a2``, … filled the server's disk for every
workspace. Now the files kept plus the request's, minus those it replaces, must stay within the
server's ``TYPESTRICT_WORKSPACE_MAX_BYTES`` and ``TYPESTRICT_WORKSPACE_MAX_FILES``; beyond them
the request is a 409 ``storage_quota`` saying the quota, the usage and what to do, and nothing
is stored. A deleted file frees its room at once; another workspace's usage is not this one's.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import TRAINING_BODY, make_dataset, new_key
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.api.quota import StorageQuota
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


def _client(tmp_path: Path, quota: StorageQuota | None) -> tuple[TestClient, str, dict[str, str], dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    a = {"Authorization": f"Bearer {new_key(url, 'acme', credits=2)}"}
    b = {"Authorization": f"Bearer {new_key(url, 'other')}"}
    app = create_app(url, tmp_path / "home", jev_source=JEV, rate_limit=None, storage_quota=quota)
    return TestClient(app), url, a, b


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[TestClient, str, dict[str, str], dict[str, str]]]:
    client, url, a, b = _client(tmp_path, StorageQuota(max_bytes=1000, max_files=3))
    with client:
        yield client, url, a, b


def _names(c: TestClient, auth: dict[str, str]) -> dict[str, int]:
    return {f["name"]: f["size"] for f in c.get("/v1/files", headers=auth).json()}


def _refusal(r: Any) -> str:
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert set(r.json()) == {"error"} and error["code"] == "storage_quota", r.text
    return str(error["message"])


def test_uploads_stop_at_the_workspaces_quota_and_a_deletion_frees_room(small: Any) -> None:
    c, _, a, b = small
    assert c.put("/v1/files/a.csv", content=b"a" * 400, headers=a).status_code == 201
    assert c.put("/v1/files/b.csv", content=b"b" * 400, headers=a).status_code == 201
    said = _refusal(c.put("/v1/files/c.csv", content=b"c" * 300, headers=a))
    assert said == (
        "expected the workspace's stored files to stay within its storage quota of 1,000 bytes in "
        "at most 3 files, got 800 bytes in 2 files stored and 300 bytes in 1 file more in this "
        "request. Nothing was stored or charged: delete files the workspace no longer needs "
        "(DELETE /v1/files/{name}), or ask the operator to raise TYPESTRICT_WORKSPACE_MAX_BYTES")
    assert _names(c, a) == {"a.csv": 400, "b.csv": 400}
    # replacing a file counts the new bytes only, not both
    assert c.put("/v1/files/a.csv", content=b"A" * 590, headers=a).status_code == 201
    assert "replacing 590 bytes in 1 file" in _refusal(c.put("/v1/files/a.csv", content=b"A" * 601, headers=a))
    assert _names(c, a) == {"a.csv": 590, "b.csv": 400}
    # another workspace has its own quota
    assert c.put("/v1/files/c.csv", content=b"x" * 900, headers=b).status_code == 201
    # a deletion lowers the usage at once
    assert c.delete("/v1/files/b.csv", headers=a).status_code == 204
    assert c.put("/v1/files/c.csv", content=b"c" * 300, headers=a).status_code == 201
    assert _names(c, a) == {"a.csv": 590, "c.csv": 300}
    # the workspace reads its usage and quota before it runs into it
    assert c.get("/v1/workspaces/acme", headers=a).json()["storage"] == {
        "files": 2, "bytes": 890, "max_files": 3, "max_bytes": 1000}
    assert c.get("/v1/workspaces/other", headers=b).json()["storage"]["bytes"] == 900


def test_the_count_of_files_is_bounded_too(small: Any) -> None:
    c, _, a, _ = small
    for name in ("1.csv", "2.csv", "3.csv"):
        assert c.put(f"/v1/files/{name}", content=b"x", headers=a).status_code == 201
    said = _refusal(c.put("/v1/files/4.csv", content=b"x", headers=a))
    assert "got 3 bytes in 3 files stored and 1 byte in 1 file more" in said
    assert said.endswith("ask the operator to raise TYPESTRICT_WORKSPACE_MAX_FILES")
    assert c.put("/v1/files/3.csv", content=b"y", headers=a).status_code == 201  # a replacement adds none
    assert sorted(_names(c, a)) == ["1.csv", "2.csv", "3.csv"]


def test_model_files_count_against_the_quota_and_nothing_is_stored_beyond_it(tmp_path: Path) -> None:
    csv, _ = make_dataset(tmp_path, n=80)
    client, url, a, _ = _client(tmp_path, StorageQuota(max_bytes=len(csv) + 100, max_files=10))
    with client as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=a).status_code == 201
        created = c.post("/v1/trainings", json=json.loads(json.dumps(TRAINING_BODY)), headers=a)
        assert created.status_code == 201, created.text
        tid = created.json()["id"]
        assert c.put(f"/v1/trainings/{tid}/model/w.bin", content=b"w" * 60, headers=a).status_code == 201
        said = _refusal(c.put(f"/v1/trainings/{tid}/model/v.bin", content=b"v" * 60, headers=a))
        assert f"got {len(csv) + 60:,} bytes in 2 files stored" in said
        folder = tmp_path / "home" / "trainings" / tid / "model"
        assert sorted(p.name for p in folder.iterdir()) == ["w.bin"]
        assert c.get(f"/v1/trainings/{tid}", headers=a).json()["state"] == "awaiting_predictions"
        # the training's own copy of its dataset is not counted (each costs a credit): the
        # workspace's upload can be deleted and the room reused
        assert c.delete("/v1/files/reviews.csv", headers=a).status_code == 204
        assert c.put(f"/v1/trainings/{tid}/model/v.bin", content=b"v" * 60, headers=a).status_code == 201
    engine = open_store(url)
    try:
        assert CreditLedger(engine).balance("acme") == 1  # one training charged, nothing else
    finally:
        engine.dispose()


def test_a_dataset_is_counted_as_the_rows_it_stores_before_it_is_registered(tmp_path: Path) -> None:
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    write_seattle_csv(tmp_path / "weather.csv", known_until=dt.datetime(2012, 3, 1, tzinfo=dt.UTC))
    weather = (tmp_path / "weather.csv").read_bytes()
    client, _, a, _ = _client(tmp_path, StorageQuota(max_bytes=2 * len(weather) - 1, max_files=10))
    with client as c:
        assert c.put("/v1/files/weather.csv", content=weather, headers=a).status_code == 201
        body = {"name": "live", "workflow": "seattle_rain", "tables": {"weather": "weather.csv"}}
        said = _refusal(c.post("/v1/datasets", json=body, headers=a))
        assert f"got {len(weather):,} bytes in 1 file stored and {len(weather):,} bytes in 2 files more" in said
        assert c.get("/v1/datasets/live", headers=a).status_code == 404
        assert c.get("/v1/datasets", headers=a).json() == []


def test_the_servers_settings_set_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPESTRICT_WORKSPACE_MAX_FILES", "1")
    monkeypatch.setenv("TYPESTRICT_WORKSPACE_MAX_BYTES", "50")
    client, _, a, _ = _client(tmp_path, None)
    with client as c:
        assert c.put("/v1/files/1.csv", content=b"x", headers=a).status_code == 201
        said = _refusal(c.put("/v1/files/2.csv", content=b"x" * 50, headers=a))
        assert "quota of 50 bytes in at most 1 file" in said
        assert said.endswith("TYPESTRICT_WORKSPACE_MAX_BYTES and TYPESTRICT_WORKSPACE_MAX_FILES")
    assert StorageQuota() == StorageQuota(10 * 1024**3, 10_000)


def test_the_consoles_training_form_is_refused_before_it_stores_or_charges(tmp_path: Path) -> None:
    import asyncio
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_console_pages_for_quota",
                                                  Path(__file__).with_name("test_console_pages.py"))
    assert spec is not None and spec.loader is not None
    pages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pages)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=2)
    csv = pages.CSV.encode()
    app = create_app(url, tmp_path / "home", jev_source=JEV, rate_limit=None,
                     storage_quota=StorageQuota(max_bytes=len(csv) + 10, max_files=5))
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    b = pages.Browser(app, key)
    try:
        auth = {"Authorization": f"Bearer {key}"}
        put = b.loop.run_until_complete(b.client.put("/v1/files/old.csv", content=b"x" * 20, headers=auth))
        assert put.status_code == 201
        r = b.form("/console/trainings", pages.TRAINING, files={"dataset_file": ("reviews.csv", csv)})
        assert r.status_code == 409, r.text[:2000]
        assert "storage quota" in r.text and "TYPESTRICT_WORKSPACE_MAX_BYTES" in r.text
        assert sorted(p.name for p in (tmp_path / "home" / "workspaces" / "acme" / "files").iterdir()) == ["old.csv"]
        assert not (tmp_path / "home" / "trainings").exists() or not any(
            p for p in (tmp_path / "home" / "trainings").iterdir() if not p.name.startswith("."))
        engine = open_store(url)
        try:
            assert CreditLedger(engine).balance("acme") == 2
        finally:
            engine.dispose()
    finally:
        b.close()
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()
