"""What the model was trained on: the gaps of issue 3/7, item 5, not covered elsewhere.

* A stated id that is an **excluded** row of the split (not a test row, and not an allowed
  training row either: a row of a tested group, or a row without an answer) is refused like a
  test row, with the count and the first offending ids in the order stated, each with the true
  reason (the message said "its group is tested" of an unanswered row of an untested group),
  through the API, in both forms (ids and their SHA-256); nothing is stored and nothing is
  charged.
* The manifest's ``training.trained_on.id_sha256_file`` (a file of the ids' SHA-256 under the
  audit's id domain) is accepted when every digest is an allowed training row, and refused (no
  verdict, no audit, no ledger line) when it holds a test row's digest.
* The audit records ``"attested"`` with the stated set's digest, which the standalone
  ``verify_audit.py`` rebuilds from the customer's digests and verifies; audits from before the
  attestation (formats 1 and 2, no ``trained_on``) still verify and claim nothing about it.

(The list forms, ``ids_file`` and a stated test row are in ``test_api.py`` and
``test_credits_chain.py``.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import dagster as dg

from typestrict_pipeline import verify_audit
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import split_decisions, training_ids
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.trained_on import id_sha256, ids_set_sha256
from typestrict_pipeline.refund.types import Role
from typestrict_pipeline.store import open_store


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"{name}_for_trained_on", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_support = _load("test_api_support")
chain = _load("test_credits_chain")
DATA = Path(__file__).parent / "data"


def _without_answers(csv: bytes) -> bytes:
    """The dataset with the last row of every group of four left without an answer: excluded
    from training, whether its group is tested or not."""
    lines = csv.decode().splitlines()
    for i in range(4, len(lines), 4):
        lines[i] = lines[i].rsplit(",", 1)[0] + ","
    return ("\n".join(lines) + "\n").encode()


def _group(row_id: str) -> int:
    """The group of a row of :func:`_without_answers`'s data (``exNNNN``, four to a group)."""
    return int(row_id.removeprefix("ex")) // 4


def test_a_stated_excluded_row_is_refused_with_the_count_and_ids_and_nothing_is_stored_or_charged(
        tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    labelled, jev = api_support.make_dataset(tmp_path, seed=0)
    csv = _without_answers(labelled)
    key = api_support.new_key(sqlite_url, "acme", credits=2)
    with (api_support.ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(jev)}) as server,
          server.client(key) as c):
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        made = c.post("/v1/trainings", json=api_support.TRAINING_BODY)
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        assert c.get("/v1/workspaces/acme").json()["balance"] == 1  # the training's credit
        split = c.get(f"/v1/trainings/{tid}/split").json()
        decision = split["decisions"][0]
        tested = {_group(i) for i in decision["test_ids"]}
        excluded = decision["excluded_ids"]
        assert not set(excluded) & (set(decision["test_ids"]) | set(split["training_ids"]))
        # two rows of tested groups (not test rows: unanswered), one unanswered row elsewhere
        stated_bad = [i for i in excluded if _group(i) in tested][:2] + [
            i for i in excluded if _group(i) not in tested][:1]
        assert len(stated_bad) == 3
        why = ["its group is tested", "its group is tested", "it has no answer"]
        some = split["training_ids"][:40]
        preds = api_support.model_predictions(labelled, skill=0.9)
        folder = home / "trainings" / tid
        before = sorted(p.name for p in folder.rglob("*") if p.is_file())
        for body in ({"trained_on_ids": [some[0], *stated_bad, *some[1:]]},
                     {"trained_on_id_sha256": [id_sha256(i) for i in [some[0], *stated_bad, *some[1:]]]}):
            r = c.post(f"/v1/trainings/{tid}/predictions", json={"predictions": preds, **body})
            assert r.status_code == 422, r.text
            message = r.json()["error"]["message"]
            assert "got 3 of the 43 stated ids that are not: " in message, message
            shown = message.split("that are not: ", 1)[1]
            positions = [shown.find(f"{i!r} (excluded from 'sentiment' ({w}))") for i, w in zip(stated_bad, why, strict=True)]
            assert -1 not in positions and positions == sorted(positions), message  # in stated order
            field = "trained_on_ids" if "trained_on_ids" in body else "trained_on_id_sha256"
            assert message.startswith(f"field '{field}': ") and "may have seen test rows" in message, message
            # nothing stored: no manifest, no stated ids, no staged file; nothing charged
            assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == before
            assert c.get(f"/v1/trainings/{tid}").json()["state"] == "awaiting_predictions"
            assert c.get("/v1/workspaces/acme").json()["balance"] == 1
    engine = open_store(sqlite_url)
    ledger = CreditLedger(engine)
    assert ledger.balance("acme") == ledger.entries_total("acme") == 1
    assert [line.amount for line in ledger.training_lines(tid)] == [-1]  # the creation's only
    engine.dispose()


def test_the_id_sha256_file_form_is_attested_or_refused_and_the_audit_verifies(
        tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    trainings = home / "trainings"
    honest, cheat = (chain.support.make_training(trainings, name, model_skill=0.95, jev_skill=0.5, seed=1)
                     for name in ("honest", "cheat"))
    for path in (honest, cheat):  # every group's last row unanswered: some excluded rows in tested groups
        data = path.parent / "data.csv"
        data.write_bytes(_without_answers(data.read_bytes()))
    fifty = [id_sha256(i) for i in sorted(training_ids(split_decisions(load_dataset(
        load_manifest(honest, data_root=home)))))[:50]]
    theirs = split_decisions(load_dataset(load_manifest(cheat, data_root=home)))  # seeded by the id
    tests = [r.id for r in theirs[0].rows if r.role is Role.TEST]
    excluded = [r.id for r in theirs[0].rows
                if r.role is Role.EXCLUDED and _group(r.id) in {_group(t) for t in tests}]
    assert tests and excluded
    allowed = sorted(training_ids(theirs))
    # the honest file: each digest once and one twice, CRLF line ends; the set is 50 ids
    (honest.parent / "trained_on.sha256").write_bytes(("\r\n".join([*fifty, fifty[0]]) + "\r\n").encode())
    stated = [*(id_sha256(i) for i in allowed[:10]), id_sha256(tests[0]), id_sha256(excluded[0]), "ab" * 32]
    (cheat.parent / "trained_on.sha256").write_text("\n".join(stated) + "\n")
    for path in (honest, cheat):
        doc = json.loads(path.read_text())
        doc["training"]["trained_on"] = {"id_sha256_file": "trained_on.sha256"}
        path.write_text(json.dumps(doc))
    engine = open_store(sqlite_url)
    ledger = CreditLedger(engine)
    ledger.grant("tests", 2, reference="welcome")
    job = chain._defs(home, sqlite_url).resolve_job_def("verdict_job")
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("trainings", ["honest", "cheat"])
        assert job.execute_in_process(partition_key="honest", instance=instance).success
        refused = job.execute_in_process(partition_key="cheat", instance=instance, raise_on_error=False)
        assert not refused.success
        [failure] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
        said = str(failure.step_failure_data.user_failure_data.description)
    assert "key 'training.trained_on.id_sha256_file'" in said, said
    assert "got 3 of the 13 stated ids that are not: " in said
    assert f"{tests[0]!r} (a test row of 'sentiment')" in said
    assert f"{excluded[0]!r} (excluded from 'sentiment' (its group is tested))" in said
    assert "abababababababab… (no id of the dataset has this SHA-256)" in said
    assert not (home / "audits" / "cheat.json").exists() and ledger.training_lines("cheat") == []

    audit_file = home / "audits" / "honest.json"
    audit = json.loads(audit_file.read_bytes())
    assert audit["trained_on"] == {"status": "attested", "n_ids": 50, "ids_sha256": ids_set_sha256(fifty)}
    # the customer rebuilds the digest with the standalone verifier from their own digests
    assert verify_audit.trained_on_sha256(list(reversed(fifty))) == audit["trained_on"]["ids_sha256"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert verify_audit.main([str(audit_file)]) == 0
    assert "trained on 50 attested id(s)" in out.getvalue()
    tampered = tmp_path / "tampered.json"  # the attestation is bound: another count differs
    tampered.write_text(json.dumps({**audit, "trained_on": {**audit["trained_on"], "n_ids": 49}}))
    with contextlib.redirect_stdout(io.StringIO()):
        assert verify_audit.main([str(tampered)]) == verify_audit.EXIT_DIFFERS
    engine.dispose()


def test_an_audit_from_before_the_attestation_still_verifies_and_claims_nothing_about_it() -> None:
    old = sorted((DATA / "audit_v1").glob("*.json")) + sorted((DATA / "audit_v2").glob("*.json"))
    assert old
    for path in old:
        assert "trained_on" not in json.loads(path.read_bytes())
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert verify_audit.main([str(path)]) == 0, path
        said = out.getvalue()
        assert "verify_audit: OK" in said and "attested" not in said and "not stated" not in said


def test_an_audit_of_a_training_that_stated_nothing_says_not_stated_and_that_is_bound(
        tmp_path: Path) -> None:
    """Issue 3/7, item 5: a customer who states nothing is judged, and the audit records
    ``"not stated"`` (no count, no digest); ``verify_audit.py`` says so, and an audit edited to
    claim an attestation it never had no longer verifies."""
    from typestrict_pipeline.refund.audit import audit_bytes, build_audit
    from typestrict_pipeline.refund.rule import judge
    from typestrict_pipeline.refund.synthetic import synthetic_decision

    audit = json.loads(audit_bytes(build_audit(
        judge([synthetic_decision(seed=73, n=12, n_answers=2, name="spam")], keep_if_loses=False),
        training_id="tr_ns", model_id="mdl_ns", jev_id="jev-1")))
    assert audit["trained_on"] == {"status": "not stated", "n_ids": None, "ids_sha256": None}
    path = tmp_path / "not_stated.json"
    path.write_text(json.dumps(audit))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert verify_audit.main([str(path)]) == 0
    assert "verify_audit: OK" in out.getvalue() and "; training set not stated" in out.getvalue()
    claimed = dict(audit, trained_on={"status": "attested", "n_ids": 50,
                                      "ids_sha256": ids_set_sha256([id_sha256("ex0001")])})
    path.write_text(json.dumps(claimed))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert verify_audit.main([str(path)]) != 0
