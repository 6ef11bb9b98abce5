"""GET /v1/trainings/{id}/split reads the id column once, each id to the training list or the
held-out list: no list or set of every id beside them (at 100 million rows that was a second
read of the column and a set of every id)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import TRAINING_BODY, make_dataset, new_key
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.refund.sources import FileTexts, TextSource
from typestrict_pipeline.refund.trained_on import trained_on_sha256

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


def test_the_split_reads_each_id_once_and_gives_what_it_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=1)
    csv, _ = make_dataset(tmp_path, n=120, seed=3)
    home = tmp_path / "home"
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(url, home, jev_source=JEV)) as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=auth).status_code == 201
        created = c.post("/v1/trainings", json=json.loads(json.dumps(TRAINING_BODY)), headers=auth)
        assert created.status_code == 201, created.text
        tid = created.json()["id"]
        read: list[int] = []
        batches = FileTexts.batches

        def counted(self: FileTexts) -> Any:
            read.append(1)
            return batches(self)

        def whole(self: TextSource) -> Any:
            raise AssertionError("the whole id column asked for")

        with monkeypatch.context() as patch:
            patch.setattr(TextSource, "values", whole)
            patch.setattr(FileTexts, "batches", counted)
            before = len(read)
            split = c.get(f"/v1/trainings/{tid}/split", headers=auth)
        assert split.status_code == 200, split.text
        assert len(read) > before  # the ids (and, for a CSV, the test rows) read in batches
        # what the route gave before: the trainings service's split (every id listed, a set)
        view = c.app.state.ctx.trainings.split("acme", tid)  # type: ignore[attr-defined]
    got = split.json()
    every = [line.split(",")[0] for line in csv.decode().splitlines()[1:]]
    assert got["training_ids"] == list(view.training_ids)
    assert got["training_ids_sha256"] == view.training_ids_sha256 == trained_on_sha256(
        got["training_ids"])
    assert got["not_for_training"] == list(view.not_for_training)
    assert got["not_for_training"] == sorted(set(every) - set(got["training_ids"]))
    held = set(got["not_for_training"])
    for decision in got["decisions"]:
        assert set(decision["test_ids"]) | set(decision["excluded_ids"]) <= held
    assert 0 < len(held) < len(every)
