"""A training holds no more decisions or answers than its audit may: the verifier's bounds.

The verifier refuses an audit of more than 32 decisions or of a decision with more than 256
answers as one "the product never writes" (exit 2, ``verify_audit.MAX_DECISIONS`` and
``MAX_ANSWERS``). The manifest set no bound on either, and the API allowed 50 decisions: a
training of 33 decisions (or of 300 answers, through a manifest) was charged, judged and settled,
and its audit was refused by the verifier the result page tells the customer to run. Now the
manifest, the one reader of every door's training (API, console, Dagster, ``typestrict split``),
refuses them before anything is read or charged, and the API's schema says the same 32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_api_support import UNUSED_JEV, ApiServer, new_key
from typestrict_pipeline import verify_audit
from typestrict_pipeline.errors import DatasetError, ManifestError
from typestrict_pipeline.refund import manifest as manifest_module
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.manifest import MAX_ANSWERS, MAX_DECISIONS, parse_manifest


def _doc(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"manifest_version": 1, "training_id": "t1", "workspace_id": "ws",
            "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text"}},
            "decisions": decisions,
            "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"}},
            "training": {"status": "failed", "reason": "not trained"}}


def _single(i: int, answers: int) -> dict[str, Any]:
    return {"name": f"d{i}", "question": "Which?", "answer_column": "label",
            "answers": [f"a{k}" for k in range(answers)]}


def test_the_bounds_are_the_verifiers() -> None:
    assert (MAX_DECISIONS, MAX_ANSWERS) == (verify_audit.MAX_DECISIONS, verify_audit.MAX_ANSWERS)
    assert manifest_module.MAX_DECISIONS == 32 and manifest_module.MAX_ANSWERS == 256


def test_a_manifest_of_more_decisions_or_answers_than_an_audit_holds_is_refused(tmp_path: Path) -> None:
    parse_manifest(_doc([_single(i, 2) for i in range(MAX_DECISIONS)]), source="m.json", base_dir=tmp_path)
    parse_manifest(_doc([_single(0, MAX_ANSWERS)]), source="m.json", base_dir=tmp_path)
    with pytest.raises(ManifestError) as refused:
        parse_manifest(_doc([_single(i, 2) for i in range(MAX_DECISIONS + 1)]), source="m.json",
                       base_dir=tmp_path)
    assert str(refused.value) == (
        "m.json, key 'decisions': expected at most 32 decisions (the most an audit holds, "
        "docs/audit-format.md), got 33. Split the decisions between trainings of their own.")
    with pytest.raises(ManifestError) as refused:
        parse_manifest(_doc([_single(0, 2), _single(1, 300)]), source="m.json", base_dir=tmp_path)
    assert str(refused.value).startswith(
        "m.json, key 'decisions[1].answers': expected at most 256 answers (the most an audit "
        "holds, docs/audit-format.md), got 300. Group the rarest answers")


def test_a_multiple_choice_example_of_more_options_than_an_audit_holds_is_refused(tmp_path: Path) -> None:
    rows = [("r1", "a", ["x", "y"], "x"), ("r2", "b", [f"o{k}" for k in range(257)], "o3")]
    (tmp_path / "data.csv").write_text("id,text,options,label\n" + "".join(
        f'{i},{t},"{json.dumps(o).replace(chr(34), chr(34) * 2)}",{a}\n' for i, t, o, a in rows))
    doc = _doc([{"name": "pick", "question": "Which?", "answer_column": "label", "options_column": "options"}])
    with pytest.raises(DatasetError) as refused:
        load_dataset(parse_manifest(doc, source="m.json", base_dir=tmp_path))
    assert str(refused.value).startswith(
        f"{tmp_path / 'data.csv'}, row 2, column 'options': expected at most 256 options (the most an audit holds")


def test_the_api_refuses_33_decisions_before_anything_is_read_or_charged(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=1)
    with ApiServer(url, tmp_path / "home", rate_limit=None, jev_source=UNUSED_JEV) as server, \
            server.client(key) as client:
        assert client.put("/v1/files/d.csv", content=b"id,text,label\nr1,a,a0\nr2,b,a1\n").status_code == 201
        body = {"dataset": {"path": "d.csv", "columns": {"id": "id", "text": "text", "group": None}},
                "decisions": [_single(i, 2) for i in range(MAX_DECISIONS + 1)]}
        r = client.post("/v1/trainings", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"].startswith("decisions: expected at most 32 items"), r.text
        assert client.get("/v1/trainings").json() == []
        assert client.get("/v1/workspaces/acme").json()["balance"] == 1
