"""The API's refusals of a training's fields name the request's JSON fields and the API's routes,
never the manifest's keys nor the CLI's options: a wrong ``trained_on_sha256`` said
``request, key 'training.trained_on_sha256'`` and "training.trained_on in the manifest", stated
ids said ``key 'training.trained_on.ids_file'`` (a file the customer never wrote), and a refused
``POST /v1/trainings`` said ``key 'decisions[0].answers'``. One rule (``refund.trained_on``,
``refund.manifest``), spelled in each door's words; the manifest's own words are unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_api_support import (
    TRAINING_BODY,
    ApiServer,
    make_dataset,
    model_predictions,
    new_key,
)
from typestrict_pipeline.refund.manifest import ManifestKeyError, parse_manifest
from typestrict_pipeline.refund.trained_on import id_sha256

NOT_API_WORDS = ("key '", "manifest", "training.trained_on", "ids_file", "id_sha256_file", "--", "request,")


def _api_words(message: str) -> str:
    for word in NOT_API_WORDS:
        assert word not in message, (word, message)
    return message


def test_trained_on_and_field_refusals_are_said_in_the_apis_fields(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    csv, jev = make_dataset(tmp_path, seed=0)
    key = new_key(sqlite_url, "acme", credits=2)
    with (ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(jev)}) as server,
          server.client(key) as c):
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        made = c.post("/v1/trainings", json=TRAINING_BODY)
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        test_id = c.get(f"/v1/trainings/{tid}/split").json()["decisions"][0]["test_ids"][0]
        preds = model_predictions(csv, skill=0.9)
        for stated, said in (
                ({"trained_on_sha256": "0" * 64},
                 "field 'trained_on_sha256': expected the SHA-256 of the 160 training rows of training"),
                ({"trained_on_ids": [test_id]},
                 "field 'trained_on_ids': expected ids from the 160 training rows of the split"),
                ({"trained_on_id_sha256": [id_sha256(test_id)]},
                 "field 'trained_on_id_sha256': expected ids from the 160 training rows of the split")):
            r = c.post(f"/v1/trainings/{tid}/predictions", json={"predictions": preds, **stated})
            assert r.status_code == 422, r.text
            message = _api_words(r.json()["error"]["message"])
            assert message.startswith(said), message
            assert f"GET /v1/trainings/{tid}/split lists as training_ids" in message, message
        digest = c.post(f"/v1/trainings/{tid}/predictions",
                        json={"predictions": preds, "trained_on_sha256": "0" * 64}).json()["error"]["message"]
        assert "states those ids instead (trained_on_ids, or their SHA-256 in trained_on_id_sha256)" in digest
        assert c.get(f"/v1/trainings/{tid}").json()["state"] == "awaiting_predictions"

        decision = TRAINING_BODY["decisions"][0]
        for body, said in (
                ({**TRAINING_BODY, "decisions": [{**decision, "answers": ["yes", "yes"]}]},
                 "field 'decisions.0.answers': expected each answer listed once"),
                ({**TRAINING_BODY, "decisions": [decision, decision]},
                 "field 'decisions': expected unique decision names"),
                ({**TRAINING_BODY, "dataset": {**TRAINING_BODY["dataset"], "columns": {"id": "id", "text": "id"}}},
                 "field 'dataset.columns': expected different columns for the id and the text")):
            r = c.post("/v1/trainings", json=body)
            assert r.status_code == 422, r.text
            message = _api_words(r.json()["error"]["message"])
            assert message.startswith(said), message
        # the dataset's refusals (one rule with the manifest's): the training's fields, not "the manifest"
        for body, said in (
                ({**TRAINING_BODY, "decisions": [{**decision, "answers": [decision["answers"][0], "other"]}]},
                 "or add the answer to the decision's answers (decisions[].answers)"),
                ({**TRAINING_BODY, "decisions": [{**decision, "answer_column": "lable"}]},
                 "Rename the column in the file or fix the name the training gives it (did you mean 'label'?)")):
            r = c.post("/v1/trainings", json=body)
            assert r.status_code == 422, r.text
            message = _api_words(r.json()["error"]["message"])
            assert said in message, message
        assert c.get("/v1/workspaces/acme").json()["balance"] == 1  # only the first training's credit


def test_a_manifest_file_still_names_its_keys() -> None:
    """The same rule read from a manifest file keeps the manifest's words."""
    doc = {"manifest_version": 1, "training_id": "t", "workspace_id": "w",
           "dataset": {"path": "d.csv", "columns": {"id": "id", "text": "text", "group": None}},
           "decisions": [{"name": "s", "question": "q?", "answer_column": "a", "answers": ["x", "x"]}],
           "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}, "model": {"kind": "file", "path": "m.jsonl"}},
           "training": {"status": "succeeded"}}
    with pytest.raises(ManifestKeyError, match=r"^m.json, key 'decisions\[0\].answers': expected each answer"):
        parse_manifest(doc, source="m.json")
