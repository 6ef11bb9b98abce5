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

from tests.test_api_support import TRAINING_BODY, make_dataset, model_predictions, new_key
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


def test_a_trainings_folder_counts_its_dataset_copy_predictions_and_model_files(tmp_path: Path) -> None:
    """A training's copy of its dataset, its predictions and its stated ids were not counted
    (only its model files were): a workspace could keep any number of dataset copies. Now the
    training's whole folder counts, checked before the charge (creation) and before the hand-over
    (predictions); nothing is stored or charged beyond the quota."""
    from typestrict_pipeline.api.quota import usage_of

    csv, _ = make_dataset(tmp_path, n=80)
    body = json.loads(json.dumps(TRAINING_BODY))
    home = tmp_path / "home"
    client, url, a, _ = _client(tmp_path, StorageQuota(max_bytes=2 * len(csv) - 1, max_files=10))
    with client as c:  # room for the upload, not for the training's copy of it
        assert c.put("/v1/files/reviews.csv", content=csv, headers=a).status_code == 201
        said = _refusal(c.post("/v1/trainings", json=body, headers=a))
        assert f"got {len(csv):,} bytes in 1 file stored and " in said, said
        assert not (home / "trainings").exists() or not [p for p in (home / "trainings").iterdir()
                                                         if not p.name.startswith(".")]
    client, _, a, _ = _client(tmp_path, StorageQuota(max_bytes=100 * len(csv), max_files=10))
    with client as c:
        created = c.post("/v1/trainings", json=body, headers=a)
        assert created.status_code == 201, created.text
        tid = created.json()["id"]
        assert c.put("/v1/files/filler.bin", content=b"f" * 20_000, headers=a).status_code == 201
        kept = c.app.state.ctx.trainings.storage_usage("acme")  # type: ignore[attr-defined]
    folder = home / "trainings" / tid
    assert kept == usage_of([home / "workspaces" / "acme" / "files", folder]) and kept.size > 2 * len(csv)
    predictions = [json.dumps(r) for r in model_predictions(csv, skill=0.9)]
    client, _, a, _ = _client(tmp_path, StorageQuota(max_bytes=kept.size + 100, max_files=10))
    with client as c:  # room for 100 bytes more: not for the predictions
        sent = {"predictions": [json.loads(r) for r in predictions]}
        said = _refusal(c.post(f"/v1/trainings/{tid}/predictions", json=sent, headers=a))
        assert f"got {kept.size:,} bytes in {kept.files} files stored" in said, said
        assert c.get(f"/v1/trainings/{tid}", headers=a).json()["state"] == "awaiting_predictions"
        assert not (folder / "predictions").exists() or not list((folder / "predictions").iterdir())
        assert c.delete("/v1/files/filler.bin", headers=a).status_code == 204  # frees its room
        accepted = c.post(f"/v1/trainings/{tid}/predictions", json=sent, headers=a)
        assert accepted.status_code == 202, accepted.text
    engine = open_store(url)
    try:
        # three keys of 2 credits each (one per server); one training charged, the refused one not
        assert CreditLedger(engine).balance("acme") == 3 * 2 - 1
    finally:
        engine.dispose()


def test_model_files_count_against_the_quota_and_nothing_is_stored_beyond_it(tmp_path: Path) -> None:
    csv, _ = make_dataset(tmp_path, n=80)
    client, _, a, _ = _client(tmp_path, StorageQuota(max_bytes=10 * len(csv), max_files=10))
    with client as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=a).status_code == 201
        created = c.post("/v1/trainings", json=json.loads(json.dumps(TRAINING_BODY)), headers=a)
        assert created.status_code == 201, created.text
        tid = created.json()["id"]
        kept = c.app.state.ctx.trainings.storage_usage("acme")  # type: ignore[attr-defined]
    client, _, a, _ = _client(tmp_path, StorageQuota(max_bytes=kept.size + 100, max_files=10))
    with client as c:
        assert c.put(f"/v1/trainings/{tid}/model/w.bin", content=b"w" * 60, headers=a).status_code == 201
        said = _refusal(c.put(f"/v1/trainings/{tid}/model/v.bin", content=b"v" * 60, headers=a))
        assert f"got {kept.size + 60:,} bytes in {kept.files + 1} files stored" in said
        folder = tmp_path / "home" / "trainings" / tid / "model"
        assert sorted(p.name for p in folder.iterdir()) == ["w.bin"]
        assert c.get(f"/v1/trainings/{tid}", headers=a).json()["state"] == "awaiting_predictions"


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


def test_a_trainings_folder_stops_counting_when_its_models_files_expire(tmp_path: Path, sqlite_url: str) -> None:
    """Retention ends what the server keeps for the workspace: once the model's files expire, its
    training's folder no longer counts (what is left of it is the product's record)."""
    from typestrict_pipeline.api.quota import usage_of
    from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
    from typestrict_pipeline.credits import SettlementRequest, settle_training
    from typestrict_pipeline.credits.models import expire_models
    from typestrict_pipeline.refund.audit import build_audit
    from typestrict_pipeline.refund.rule import judge
    from typestrict_pipeline.refund.synthetic import synthetic_decision

    home = tmp_path / "home"
    csv, jev = make_dataset(tmp_path, n=80)
    engine = open_store(sqlite_url)
    try:
        CreditLedger(engine).grant("acme", 1, reference="tests")
        store = TrainingStore(home, engine, {"kind": "file", "path": str(jev)},
                              quota=StorageQuota(max_bytes=10**9, max_files=100))
        store.area("acme").save("reviews.csv", csv)
        tid = store.create("acme", TrainingRequest(dataset=TRAINING_BODY["dataset"],
                                                   decisions=TRAINING_BODY["decisions"],
                                                   options=TRAINING_BODY["options"]))
        files, folder = home / "workspaces" / "acme" / "files", home / "trainings" / tid
        assert store.storage_usage("acme") == usage_of([files, folder])
        judgement = judge([synthetic_decision(seed=1, n=300, n_answers=2, model_skill=0.8, jev_skill=0.6)],
                          keep_if_loses=False)
        audit = json.dumps(build_audit(judgement, training_id=tid, model_id=tid, jev_id="jev")).encode()
        settle_training(engine, SettlementRequest(
            workspace_id="acme", training_id=tid, verdict=judgement.verdict, reason="test",
            keep_if_loses=False, model_dir=folder / "model", audit_json=audit))
        assert store.storage_usage("acme") == usage_of([files, folder])  # retained: counted
        expire_models(engine, now=dt.datetime.now(dt.UTC) + dt.timedelta(days=3650), allowed_root=home / "trainings")
        assert store.storage_usage("acme") == usage_of([files])
    finally:
        engine.dispose()
