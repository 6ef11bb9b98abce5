"""The customer API end to end on a real uvicorn server, over SQLite and the real PostgreSQL.

A customer creates a training through the API, reads its split before training, posts the
model's predictions (stating what it was trained on), the production ``training_sensor`` +
``verdict_job`` judge it, and the customer reads the verdict and the audit (byte-identical to
the file the pipeline wrote) and verifies it with the verifier the API serves.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.credits import CreditLedger, expire_models
from typestrict_pipeline.refund.trained_on import trained_on_sha256
from typestrict_pipeline.store import open_store

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


def _setup(tmp_path: Path, store_url: str, *, seed: int = 0) -> tuple[Path, bytes, dict[str, Any]]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    csv, jev = support.make_dataset(tmp_path, seed=seed)
    return home, csv, {"kind": "file", "path": str(jev)}


def _create(client: Any, csv: bytes, *, keep_if_loses: bool = False) -> str:
    assert client.put("/v1/files/reviews.csv", content=csv).status_code == 201
    body = json.loads(json.dumps(support.TRAINING_BODY))
    body["options"]["keep_if_loses"] = keep_if_loses
    r = client.post("/v1/trainings", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["state"] == "awaiting_predictions"
    tid: str = r.json()["id"]
    return tid


@pytest.mark.slow
def test_a_training_through_the_api_is_judged_and_its_audit_verifies(
    tmp_path: Path, store_url: str
) -> None:
    home, csv, jev = _setup(tmp_path, store_url)
    key = support.new_key(store_url, "acme", credits=2)
    with support.ApiServer(store_url, home, jev_source=jev) as server, server.client(key) as c:
        tid = _create(c, csv)
        assert c.get("/v1/workspaces/acme").json()["balance"] == 1  # one credit per training

        split = c.get(f"/v1/trainings/{tid}/split").json()
        train = split["training_ids"]
        assert split["training_ids_sha256"] == trained_on_sha256(train)
        decision = split["decisions"][0]
        assert decision["n_test"] == 40 and decision["n_train"] + decision["n_excluded"] == 160
        assert set(train).isdisjoint(decision["test_ids"])
        assert set(split["not_for_training"]) == set(decision["test_ids"]) | set(decision["excluded_ids"])

        # "Train" (a seeded good model), upload one model file, post the predictions.
        assert c.put(f"/v1/trainings/{tid}/model/weights.bin", content=b"\x00\x01weights").status_code == 201
        preds = support.model_predictions(csv, skill=0.97)
        r = c.post(f"/v1/trainings/{tid}/predictions",
                   json={"predictions": preds, "trained_on_sha256": split["training_ids_sha256"]})
        assert r.status_code == 202, r.text
        assert r.json()["state"] == "judging"
        assert json.loads((home / "trainings" / tid / "manifest.json").read_text())["training"][
            "trained_on_sha256"] == split["training_ids_sha256"]

        assert support.run_verdicts(home, store_url) == [tid]  # picked up like any training

        assert c.get(f"/v1/trainings/{tid}").json()["state"] == "settled"
        verdict = c.get(f"/v1/models/{tid}").json()
        assert verdict["verdict"] == "beats" and verdict["settling_decision"] == "sentiment"
        metrics = {m["metric"]: m for m in verdict["decisions"][0]["metrics"]}
        assert set(metrics) == {"macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"}
        assert metrics["macro_f1"]["model"] > metrics["macro_f1"]["jev"]

        audit = c.get(f"/v1/models/{tid}/audit")
        assert audit.status_code == 200
        assert audit.content == (home / "audits" / f"{tid}.json").read_bytes()
        assert hashlib.sha256(audit.content).hexdigest() == verdict["audit_sha256"]

        verifier = c.get("/verify_audit.py")
        (tmp_path / "verify_audit.py").write_bytes(verifier.content)
        (tmp_path / "audit.json").write_bytes(audit.content)
        done = subprocess.run([sys.executable, "verify_audit.py", "audit.json"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr

        files = c.get(f"/v1/models/{tid}/files").json()
        assert files["files"] == [{"name": "weights.bin", "size": 9}]
        assert c.get(f"/v1/models/{tid}/files/weights.bin").content == b"\x00\x01weights"

        # Retention: after the files expire, 410 with the date; the audit is still served, exactly.
        engine = open_store(store_url)
        try:
            expires = verdict["files_expire_at"]
            import datetime as dt

            expire_models(engine, now=dt.datetime.fromisoformat(expires) + dt.timedelta(seconds=1),
                          allowed_root=home / "trainings")
            ledger = [ln.kind.value for ln in CreditLedger(engine).lines("acme")]
        finally:
            engine.dispose()
        gone = c.get(f"/v1/models/{tid}/files")
        assert gone.status_code == 410
        assert gone.json()["error"]["code"] == "gone" and expires in gone.json()["error"]["message"]
        assert c.get(f"/v1/models/{tid}/files/weights.bin").status_code == 410
        assert c.get(f"/v1/models/{tid}/audit").content == audit.content
        assert ledger == ["grant", "spend", "settlement"]
        led = c.get("/v1/workspaces/acme/ledger").json()
        assert [ln["kind"] for ln in led] == ledger and led[-1]["verdict"] == "beats"


@pytest.mark.slow
def test_a_refunded_model_has_nothing_to_download_and_a_kept_one_does(
    tmp_path: Path, sqlite_url: str
) -> None:
    home, csv, jev = _setup(tmp_path, sqlite_url)
    key = support.new_key(sqlite_url, "acme", credits=2)
    with support.ApiServer(sqlite_url, home, jev_source=jev) as server, server.client(key) as c:
        refunded = _create(c, csv)
        kept = _create(c, csv, keep_if_loses=True)
        bad = support.model_predictions(csv, skill=0.3)
        for tid in (refunded, kept):
            assert c.post(f"/v1/trainings/{tid}/predictions", json={"predictions": bad}).status_code == 202
        assert sorted(support.run_verdicts(home, sqlite_url)) == sorted([refunded, kept])
        assert c.get(f"/v1/models/{refunded}").json()["verdict"] == "refund"
        nothing = c.get(f"/v1/models/{refunded}/files")
        assert nothing.status_code == 404 and nothing.json()["error"]["code"] == "not_delivered"
        assert c.get(f"/v1/models/{refunded}/audit").status_code == 200  # the audit is always there
        k = c.get(f"/v1/models/{kept}").json()
        assert k["verdict"] == "kept" and k["keep_if_loses"] and not k["refunds_credit"]
        assert c.get(f"/v1/models/{kept}/files").status_code == 200
        # one credit back for the refund, none for the kept model
        assert c.get("/v1/workspaces/acme").json()["balance"] == 1


def test_a_wrong_trained_on_digest_is_refused_with_the_split_to_use(tmp_path: Path, sqlite_url: str) -> None:
    home, csv, jev = _setup(tmp_path, sqlite_url)
    key = support.new_key(sqlite_url, "acme", credits=1)
    with support.ApiServer(sqlite_url, home, jev_source=jev) as server, server.client(key) as c:
        tid = _create(c, csv)
        split = c.get(f"/v1/trainings/{tid}/split").json()
        everything = split["training_ids"] + split["not_for_training"]  # trained on test rows too
        r = c.post(f"/v1/trainings/{tid}/predictions",
                   json={"predictions": support.model_predictions(csv, skill=0.9),
                         "trained_on_sha256": trained_on_sha256(everything)})
        assert r.status_code == 422
        message = r.json()["error"]["message"]
        assert split["training_ids_sha256"] in message and f"/v1/trainings/{tid}/split" in message
        assert not (home / "trainings" / tid / "manifest.json").exists()  # nothing handed over
        assert c.get(f"/v1/trainings/{tid}").json()["state"] == "awaiting_predictions"


def test_creating_a_training_refuses_what_the_pipeline_would_refuse(tmp_path: Path, sqlite_url: str) -> None:
    home, csv, jev = _setup(tmp_path, sqlite_url)
    key = support.new_key(sqlite_url, "acme", credits=0)
    with support.ApiServer(sqlite_url, home, jev_source=jev) as server, server.client(key) as c:
        c.put("/v1/files/reviews.csv", content=csv)
        body = json.loads(json.dumps(support.TRAINING_BODY))
        r = c.post("/v1/trainings", json=body)
        assert r.status_code == 402 and r.json()["error"]["code"] == "insufficient_credits"
        body["decisions"][0]["answer_column"] = "lable"
        r = c.post("/v1/trainings", json=body)
        assert r.status_code == 422 and "did you mean 'label'" in r.json()["error"]["message"]
        body["options"] = {"keep_if_lose": True}
        r = c.post("/v1/trainings", json=body)
        assert r.status_code == 422 and "keep_if_lose" in r.json()["error"]["message"]
        for bad in ("../reviews.csv", "/etc/passwd", "a/../../b.csv", "reviews.csv\\x"):
            body = json.loads(json.dumps(support.TRAINING_BODY))
            body["dataset"]["path"] = bad
            r = c.post("/v1/trainings", json=body)
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["error"]["code"] == "invalid_input"
        assert not list((home / "trainings").glob("tr_*")) if (home / "trainings").exists() else True
