"""An upload is the file's bytes as the whole body; a form (``curl -F``) is refused, not stored.

``PUT /v1/files/reviews.csv`` with a ``multipart/form-data`` body (``curl -F file=@reviews.csv``,
a common slip for ``--data-binary``) answered 201 and stored the envelope (boundary lines, part
headers, then the file) as ``reviews.csv``; a training made from it failed later on its first
line. Both upload routes (files and model files) now refuse it with 415, and nothing is stored.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from tests.test_api_support import TRAINING_BODY, make_dataset, new_key
from typestrict_pipeline.api.app import create_app

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


def test_a_form_is_not_stored_as_the_uploaded_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    auth = {"Authorization": f"Bearer {new_key(url, 'acme', credits=1)}"}
    csv, _ = make_dataset(tmp_path, n=40)
    with TestClient(create_app(url, tmp_path / "home", jev_source=JEV, rate_limit=None)) as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=auth).status_code == 201
        tid = c.post("/v1/trainings", json=json.loads(json.dumps(TRAINING_BODY)), headers=auth).json()["id"]
        for path in ("/v1/files/other.csv", f"/v1/trainings/{tid}/model/w.bin"):
            r = c.put(path, files={"file": ("reviews.csv", csv)}, headers=auth)
            assert r.status_code == 415, r.text
            message = r.json()["error"]["message"]
            assert r.json()["error"]["code"] == "unsupported_media_type"
            assert message.startswith("expected the file's bytes as the whole request body, got a "
                                      "'multipart/form-data' form") and "--data-binary @FILE (not -F)" in message
        assert [f["name"] for f in c.get("/v1/files", headers=auth).json()] == ["reviews.csv"]
        assert not (tmp_path / "home" / "trainings" / tid / "model").exists()
        # the documented upload (curl --data-binary sends application/x-www-form-urlencoded) is one
        form_type = {"Content-Type": "application/x-www-form-urlencoded"}
        assert c.put("/v1/files/other.csv", content=csv, headers={**auth, **form_type}).status_code == 201
        assert c.put(f"/v1/trainings/{tid}/model/w.bin", content=b"w", headers=auth).status_code == 201
