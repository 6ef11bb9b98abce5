"""A study's name has one bound by every door (``study run --name``, ``POST /v1/studies``):
the CLI took 201 to 256 characters the API refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import new_key
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.cli import main
from typestrict_pipeline.study.form import STUDY_NAME_MAX_CHARS

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here
FORM: dict[str, Any] = {
    "workflow": "seattle_rain", "start": "2013-01-01", "end": "2013-07-01", "tune_steps": 10,
    "eval_steps": 10, "holdout_steps": 10, "folds": 2, "grid": ["threshold=0.4,0.6"],
    "max_candidates": 2, "max_total_steps": 1000, "synthetic": True,
}


def test_a_study_name_over_the_apis_bound_is_refused_by_the_cli_before_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert STUDY_NAME_MAX_CHARS == 200
    db = tmp_path / "store.db"
    code = main(["study", "run", "seattle_rain", "--start", "2013-01-01", "--end", "2013-07-01",
                 "--tune-steps", "10", "--eval-steps", "10", "--holdout-steps", "10", "--grid", "threshold=0.4,0.6",
                 "--max-candidates", "2", "--max-total-steps", "1000", "--synthetic", "--name", "n" * 201,
                 "--store", f"sqlite:///{db}", "--new-store"])
    assert code == 2
    assert "expected a study name of at most 200 characters, got 201 characters" in capsys.readouterr().err
    assert not db.exists()


def test_the_api_takes_a_name_at_the_bound_and_refuses_one_over_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme")
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(url, tmp_path / "home", jev_source=JEV)) as c:
        over = c.post("/v1/studies/estimate", json={**FORM, "name": "n" * 201}, headers=auth)
        at = c.post("/v1/studies/estimate", json={**FORM, "name": "n" * 200}, headers=auth)
    assert over.status_code == 422 and "200" in over.text
    assert at.status_code == 200, at.text
