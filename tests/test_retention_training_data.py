"""Retention removes what a training keeps of the customer's data, not only its model's files.

When a model's files expired, only ``<training>/model/`` was deleted: the training's copy of the
dataset (the customer's texts), the Jev copy, the predictions, the stated ids, the grouping look
and the pipeline's stored values (the dataset with its texts, both systems' per-row answers)
stayed for ever, and the quota stopped counting them. A training that ended without a model
(never charged: registered by its manifest, then expired) was never cleared at all. Now one rule
(:func:`~typestrict_pipeline.credits.models.sweep_retention`, run by ``typestrict credits
expire``, the ``retention_job`` and the demo) leaves only the manifest in the folder and the audit
in the store; the API still shows the training, its verdict and its audit, and the audit still
verifies.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import TRAINING_BODY, make_dataset, model_predictions, new_key
from typestrict_pipeline import verify_audit
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import (
    CreditLedger,
    ModelState,
    RetentionError,
    SettlementRequest,
    audit_bytes,
    get_model,
    settle_training,
    sweep_retention,
)
from typestrict_pipeline.credits.models import PIPELINE_VALUES, pipeline_value_roots
from typestrict_pipeline.lifecycle.trainings import expire_due, record_refusal, training_status
from typestrict_pipeline.refund.audit import build_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

DAY = dt.timedelta(days=1)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _values(storage: Path, training_id: str) -> list[Path]:
    """The pipeline's stored values of one training (as the IO manager lays them out)."""
    paths = [root / training_id for root in pipeline_value_roots(storage)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"pickled rows of " + training_id.encode())
    return paths


def _acme(store_url: str, tmp_path: Path) -> tuple[bytes, Path, dict[str, str]]:
    """A dataset's bytes, Jev's recorded predictions for it, and the header of a key of workspace
    ``acme`` holding one credit."""
    csv, jev = make_dataset(tmp_path, n=80)
    return csv, jev, {"Authorization": f"Bearer {new_key(store_url, 'acme', credits=1)}"}


def _client(store_url: str, home: Path, jev: Path) -> TestClient:
    """The API over ``home``, Jev read from ``jev``, with no rate limit."""
    return TestClient(create_app(store_url, home, jev_source={"kind": "file", "path": str(jev)}, rate_limit=None))


def test_expiry_deletes_the_trainings_data_and_keeps_its_manifest_and_audit(store_url: str, tmp_path: Path) -> None:
    home, storage = tmp_path / "home", tmp_path / "dagster" / "storage"
    csv, jev, key = _acme(store_url, tmp_path)
    with _client(store_url, home, jev) as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=key).status_code == 201
        created = c.post("/v1/trainings", json=TRAINING_BODY, headers=key)
        assert created.status_code == 201, created.text
        tid = created.json()["id"]
        assert c.get(f"/v1/trainings/{tid}/split", headers=key).status_code == 200  # stores it
        assert c.put(f"/v1/trainings/{tid}/model/weights.bin", content=b"w" * 64, headers=key).status_code == 201
        sent = c.post(f"/v1/trainings/{tid}/predictions", headers=key,
                      json={"predictions": model_predictions(csv, skill=0.9)})
        assert sent.status_code == 202, sent.text
    folder = home / "trainings" / tid
    before = _files(folder)
    assert {"manifest.json", "grouping.json", "jev.jsonl", "predictions/model.jsonl",
            "model/weights.bin", "split.json.gz"} <= set(before) and any(n.startswith("dataset.") for n in before), before
    values, other = _values(storage, tid), _values(storage, "tr_someone_else")

    engine = open_store(store_url)
    try:
        judgement = judge([synthetic_decision(seed=1, n=300, n_answers=2, model_skill=0.8, jev_skill=0.6)],
                          keep_if_loses=True)  # delivered (beats or kept): its files can expire
        audit = json.dumps(build_audit(judgement, training_id=tid, model_id=tid, jev_id="jev")).encode()
        t0 = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
        settle_training(engine, SettlementRequest(
            workspace_id="acme", training_id=tid, verdict=judgement.verdict, reason="test",
            keep_if_loses=True, model_dir=folder / "model", audit_json=audit), now=t0)
        trainings = home / "trainings"
        early = sweep_retention(engine, now=t0 + 30 * DAY - dt.timedelta(seconds=1), trainings_dir=trainings,
                                value_roots=pipeline_value_roots(storage))
        assert early.expired == [] and _files(folder) == before and all(p.exists() for p in values)

        # An earlier sweep was interrupted between deletions: the model's files and one value are
        # gone, the record still says available. The next sweep finishes the job.
        for p in (folder / "model" / "weights.bin", values[0]):
            p.unlink()
        sweep = sweep_retention(engine, now=t0 + 30 * DAY, trainings_dir=trainings,
                                value_roots=pipeline_value_roots(storage))
        assert [m.model_id for m in sweep.expired] == [tid] and sweep.cleared == []
        assert _files(folder) == ["manifest.json"]  # only the training's definition: no row
        assert not any(p.exists() for p in values) and all(p.exists() for p in other)
        assert get_model(engine, tid).state is ModelState.EXPIRED
        assert audit_bytes(engine, tid) == audit
        # the operator's doors: the audit, verified from the store
        assert main(["verify", "--model", tid, "--store", store_url]) == 0
        assert main(["audit", tid, "-o", str(tmp_path / "audit.json"), "--store", store_url]) == 0
        assert (tmp_path / "audit.json").read_bytes() == audit
        again = sweep_retention(engine, now=t0 + 31 * DAY, trainings_dir=trainings,
                                value_roots=pipeline_value_roots(storage))
        assert again.expired == [] and again.cleared == [] and _files(folder) == ["manifest.json"]
    finally:
        engine.dispose()

    with _client(store_url, home, jev) as c:
        shown = c.get(f"/v1/trainings/{tid}", headers=key)
        assert shown.status_code == 200 and shown.json()["state"] == "settled", shown.text
        assert tid in [t["id"] for t in c.get("/v1/trainings", headers=key).json()]
        verdict = c.get(f"/v1/models/{tid}", headers=key)
        assert verdict.status_code == 200 and verdict.json()["files_state"] == "expired", verdict.text
        assert verdict.json()["group"] == "grp" and verdict.json()["decisions"], verdict.text
        served = c.get(f"/v1/models/{tid}/audit", headers=key)
        assert served.status_code == 200 and served.content == audit
        assert verify_audit.verify(json.loads(served.content)) == []
        assert c.get(f"/v1/models/{tid}/files", headers=key).status_code == 410
        split = c.get(f"/v1/trainings/{tid}/split", headers=key)  # was a 422 naming a server path
        assert split.status_code == 410 and split.json()["error"]["code"] == "gone", split.text
        said = split.json()["error"]["message"]
        assert said.startswith(f"expected the dataset of training {tid!r} to read its split, got none: "
                               "retention deleted the training's data on 2026-05-31T00:00:00+00:00 "
                               "(30 days after it ended)") and str(home) not in said, said
        usage = c.get("/v1/workspaces/acme", headers=key).json()["storage"]
        assert usage["files"] == 1 and usage["bytes"] == len(csv)  # the upload only


def test_a_training_that_ended_without_a_model_is_cleared_after_the_same_period(store_url: str, tmp_path: Path) -> None:
    """Never charged (registered by its manifest, its predictions refused, then its deadline):
    no model record, so nothing ever deleted its folder. Now it ends like a model's files, the
    retention period after it ended."""
    trainings, storage = tmp_path / "trainings", tmp_path / "storage"
    folder = trainings / "tr_hand"
    (folder / "predictions").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"workspace_id": "acme", "training_id": "tr_hand"}))
    (folder / "data.csv").write_text("id,text,label\nr1,the customer's words,yes\n")
    (folder / "predictions" / "model.jsonl").write_text('{"id": "r1"}\n')
    values = _values(storage, "tr_hand")
    engine = open_store(store_url)
    try:
        t0 = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
        assert record_refusal(engine, "tr_hand", "acme", "predictions refused", now=t0)
        ended = expire_due(engine, now=t0 + 8 * DAY, trainings_dir=trainings)
        assert [e.training_id for e in ended] == ["tr_hand"] and not ended[0].refunded
        end = training_status(engine, "tr_hand")
        assert end is not None and end.state.value == "expired"
        roots = pipeline_value_roots(storage)
        early = sweep_retention(engine, now=end.updated_at + 30 * DAY - dt.timedelta(seconds=1),
                                trainings_dir=trainings, value_roots=roots)
        assert early.cleared == [] and (folder / "data.csv").exists()
        sweep = sweep_retention(engine, now=end.updated_at + 30 * DAY, trainings_dir=trainings, value_roots=roots)
        assert sweep.cleared == ["tr_hand"] and sweep.expired == []
        assert _files(folder) == ["manifest.json"] and not any(p.exists() for p in values)
        again = sweep_retention(engine, now=end.updated_at + 40 * DAY, trainings_dir=trainings, value_roots=roots)
        assert again.cleared == []
    finally:
        engine.dispose()


def test_a_cancelled_training_is_cleared_with_its_failed_record(store_url: str, tmp_path: Path) -> None:
    """A cancelled (or expired) charged training is settled ``failed`` with a record whose files
    expire 30 days after the cancel: its dataset copy goes then, not only its (empty) model folder."""
    home = tmp_path / "home"
    csv, jev, key = _acme(store_url, tmp_path)
    with _client(store_url, home, jev) as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=key).status_code == 201
        tid = c.post("/v1/trainings", json=TRAINING_BODY, headers=key).json()["id"]
        assert c.post(f"/v1/trainings/{tid}/cancel", headers=key).status_code == 200
    folder = home / "trainings" / tid
    assert any(n.startswith("dataset.") for n in _files(folder))
    engine = open_store(store_url)
    try:
        assert CreditLedger(engine).balance("acme") == 1
        info = get_model(engine, tid)
        sweep = sweep_retention(engine, now=info.expires_at, trainings_dir=home / "trainings")
        assert [m.model_id for m in sweep.expired] == [tid]
        assert _files(folder) == ["api-draft.json"]  # the draft is its definition: no row
    finally:
        engine.dispose()


def test_the_pipeline_values_are_the_assets_partitioned_by_training() -> None:
    """The names retention deletes under the Dagster storage are exactly the assets stored per
    training: a new per-training asset must be added to ``PIPELINE_VALUES``."""
    from typestrict_pipeline.definitions import defs

    partitioned = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()
                   if (p := defs.resolve_asset_graph().get(key).partitions_def) is not None
                   and getattr(p, "name", None) == "trainings"}
    assert partitioned == set(PIPELINE_VALUES)


def test_the_cli_sweep_reaches_the_same_rule(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``typestrict credits expire`` deletes the training's data and its values under
    ``$DAGSTER_HOME/storage`` (the default of ``--dagster-storage``), and clears a training that
    ended without a model, saying each."""
    trainings, dagster_home = tmp_path / "trainings", tmp_path / "dagster"
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    for tid in ("tr_model", "tr_hand"):
        (trainings / tid / "model").mkdir(parents=True)
        (trainings / tid / "manifest.json").write_text("{}")
        (trainings / tid / "dataset.csv").write_text("id,text\nr1,the customer's words\n")
    values = _values(dagster_home / "storage", "tr_model") + _values(dagster_home / "storage", "tr_hand")
    engine = open_store(sqlite_url)
    try:
        t0 = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
        CreditLedger(engine).grant("acme", 1, reference="g", now=t0)
        settle_training(engine, SettlementRequest("acme", "tr_model", Verdict.BEATS, "beats", keep_if_loses=False,
                                                  model_dir=trainings / "tr_model" / "model", audit_json=b"{}"),
                        now=t0)
        record_refusal(engine, "tr_hand", "acme", "refused", now=t0)
        expire_due(engine, now=t0 + 8 * DAY, trainings_dir=trainings)
    finally:
        engine.dispose()
    assert main(["credits", "expire", "--now", "2026-07-01T00:00:00Z", "--trainings-dir", str(trainings),
                 "--url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "expired tr_model: deleted" in out and "cleared tr_hand (ended without a model)" in out, out
    assert "1 model(s) expired, 1 ended training(s) cleared" in out, out
    for tid in ("tr_model", "tr_hand"):
        assert _files(trainings / tid) == ["manifest.json"]
    assert not any(p.exists() for p in values)


def _pinned(path: Path) -> Callable[[], None]:
    """Make the file ``path`` undeletable (root: the immutable flag; others: its folder read-only)
    and return what undoes it."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
        # a failure, never a skip: this machine and CI run as root on a file system with the flag
        assert done.returncode == 0, f"expected chattr +i to pin {path}, got {done.stderr.strip()}"

        def undo() -> None:
            subprocess.run(["chattr", "-i", str(path)], check=True)

        return undo
    path.parent.chmod(0o500)
    return lambda: path.parent.chmod(0o700)


def test_a_deletion_that_fails_stops_no_other_and_the_next_sweep_finishes(sqlite_url: str, tmp_path: Path) -> None:
    """A file that cannot be deleted now (permissions, a mount) raised a bare OSError that ended
    the sweep: the trainings after it kept their data. Now the others expire, the sweep fails
    naming the one left (``RetentionError``), and the next sweep finishes it."""
    trainings = tmp_path / "trainings"
    engine = open_store(sqlite_url)
    t0 = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    undo = None
    try:
        CreditLedger(engine).grant("acme", 2, reference="g", now=t0)
        for tid in ("tr_a", "tr_b"):
            (trainings / tid / "predictions").mkdir(parents=True)
            (trainings / tid / "manifest.json").write_text("{}")
            (trainings / tid / "predictions" / "model.jsonl").write_text('{"id": "r1"}\n')
            settle_training(engine, SettlementRequest("acme", tid, Verdict.BEATS, "beats", keep_if_loses=False,
                                                      model_dir=trainings / tid / "model", audit_json=b"{}"), now=t0)
        undo = _pinned(trainings / "tr_a" / "predictions" / "model.jsonl")
        with pytest.raises(RetentionError, match=r"tr_a: expected to delete its files, got .* run the sweep "
                                                 r"again, it finishes the job") as err:
            sweep_retention(engine, now=t0 + 30 * DAY, trainings_dir=trainings)
        assert [m.model_id for m in err.value.expired] == ["tr_b"]
        assert _files(trainings / "tr_b") == ["manifest.json"]
        assert get_model(engine, "tr_a").state is ModelState.AVAILABLE
        undo()
        undo = None
        again = sweep_retention(engine, now=t0 + 30 * DAY, trainings_dir=trainings)
        assert [m.model_id for m in again.expired] == ["tr_a"] and _files(trainings / "tr_a") == ["manifest.json"]
    finally:
        if undo is not None:
            undo()
        engine.dispose()


def test_what_a_dead_creation_left_is_removed_after_a_day(store_url: str, tmp_path: Path) -> None:
    """A server killed while creating a training left its staging folder (the dataset's copy), or
    the draft folder moved in before the charge committed: no lifecycle row, no record, no ledger
    line, so no sweep ever removed them. Now the sweep removes them once a day old (a creation in
    flight is seconds old), and never a draft that was charged."""
    home = tmp_path / "home"
    trainings = home / "trainings"
    csv, jev, key = _acme(store_url, tmp_path)
    with _client(store_url, home, jev) as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=key).status_code == 201
        charged = c.post("/v1/trainings", json=TRAINING_BODY, headers=key).json()["id"]
    dead = trainings / "tr_0000dead0000dead"  # a copy of a real draft, as a dead creation leaves it
    staged = trainings / ".staging-tr_00001eft00001eft"
    for leftover in (dead, staged):
        leftover.mkdir()
        for f in (trainings / charged).iterdir():
            (leftover / f.name).write_bytes(f.read_bytes())
    t0 = dt.datetime.now(dt.UTC)
    for folder in (dead, staged, trainings / charged):
        os.utime(folder, (t0.timestamp(), t0.timestamp()))
    engine = open_store(store_url)
    try:
        early = sweep_retention(engine, now=t0 + DAY - dt.timedelta(seconds=1), trainings_dir=trainings)
        assert early.orphans == [] and dead.exists() and staged.exists()
        sweep = sweep_retention(engine, now=t0 + DAY, trainings_dir=trainings)
        assert sweep.orphans == sorted([dead.name, staged.name]) and sweep.expired == []
        assert not dead.exists() and not staged.exists()
        assert any(n.startswith("dataset.") for n in _files(trainings / charged))  # charged: its own clock
        assert sweep_retention(engine, now=t0 + 2 * DAY, trainings_dir=trainings).orphans == []
    finally:
        engine.dispose()


def test_credits_expire_refuses_a_dagster_storage_that_is_not_a_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A typo or a file was taken without a word, and Dagster's stored copies of the customer's
    # data were then never deleted.
    afile = tmp_path / "storage.txt"
    afile.write_text("x")
    for given, said in ((tmp_path / "nope", "which does not exist"), (afile, "a file")):
        assert main(["credits", "expire", "--url", f"sqlite:///{tmp_path / 's.db'}", "--new-store",
                     "--dagster-storage", str(given)]) == 2
        err = capsys.readouterr().err
        assert f"argument --dagster-storage: expected the Dagster instance's storage folder (${{DAGSTER_HOME}}/storage), got '{given}', {said}. Check the path" in err, err
        assert not (tmp_path / "s.db").exists()
