"""A training's split is computed once and stored with it (``split.json.gz``,
``typestrict_pipeline/api/splits.py``): later views of ``GET /v1/trainings/{id}/split`` and of
the console's training page read the stored split instead of drawing it again (at 1,000,000 rows
that was 10–16 s on every view); a stored split is the one a fresh computation gives, and a
changed dataset, a damaged file or a body that is not the one its header names is computed
again, never served."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import TRAINING_BODY, make_dataset, new_key
from typestrict_pipeline.api import splits
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.api.schemas import SplitOut
from typestrict_pipeline.api.splits import SPLIT_NAME, compute_split, inputs_sha256, read_stored
from typestrict_pipeline.refund import holdout

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


@pytest.fixture
def made(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], str, str]]:
    """The real app (its lifespan entered), a training of 200 rows in groups of 4 made through
    ``POST /v1/trainings``, and the client signed in to the console with the same key."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=2)
    csv, _ = make_dataset(tmp_path, n=200, seed=7)
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(url, tmp_path / "home", jev_source=JEV, rate_limit=None)) as c:
        assert c.put("/v1/files/reviews.csv", content=csv, headers=auth).status_code == 201
        created = c.post("/v1/trainings", json=json.loads(json.dumps(TRAINING_BODY)), headers=auth)
        assert created.status_code == 201, created.text
        page = c.get("/console/sign-in").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token is not None
        assert c.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key},
                      follow_redirects=False).status_code == 303
        yield c, auth, str(created.json()["id"]), str(tmp_path / "home")


def _count_draws(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every split drawn from now on (``holdout._draw``, which every split of a dataset runs)."""
    drawn: list[str] = []
    draw = holdout._draw

    def counted(*args: Any, **kwargs: Any) -> Any:
        drawn.append(str(kwargs.get("decision")))
        return draw(*args, **kwargs)

    monkeypatch.setattr(holdout, "_draw", counted)
    return drawn


def test_later_views_of_the_split_read_the_stored_one(
    made: tuple[TestClient, dict[str, str], str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, auth, tid, _ = made
    drawn = _count_draws(monkeypatch)
    first = c.get(f"/v1/trainings/{tid}/split", headers=auth)
    assert first.status_code == 200, first.text
    assert drawn == ["sentiment"]  # the first view draws it (and stores it)
    again = [c.get(f"/v1/trainings/{tid}/split", headers=auth) for _ in range(2)]
    page = c.get(f"/console/trainings/{tid}")
    assert drawn == ["sentiment"], "the split was drawn again on a later view"
    assert [r.content for r in again] == [first.content] * 2  # byte for byte
    # ... and the bytes FastAPI's serialisation of the response model gives (what it answered
    # when the route returned the model itself)
    assert first.content == SplitOut.model_validate_json(first.content).model_dump_json().encode()
    assert first.headers["content-type"] == "application/json"
    split = first.json()
    assert page.status_code == 200
    assert f'id="n-train">{len(split["training_ids"])}<' in page.text
    assert f'id="n-held">{len(split["not_for_training"])}<' in page.text
    assert split["training_ids_sha256"] in page.text
    n_test = split["decisions"][0]["n_test"]
    assert f'<td class="n-test">{n_test}<' in page.text


def test_the_stored_split_is_a_fresh_one_and_a_changed_input_is_drawn_again(
    made: tuple[TestClient, dict[str, str], str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, auth, tid, home = made
    store = c.app.state.ctx.trainings  # type: ignore[attr-defined]
    folder = Path(home) / "trainings" / tid
    stored = folder / SPLIT_NAME

    def fresh() -> bytes:
        manifest = store.manifest("acme", tid)
        return compute_split(tid, manifest).model_dump_json().encode("utf-8")

    def digest() -> str:
        doc, _, _ = store._doc("acme", tid)
        return str(inputs_sha256(tid, doc, store.manifest("acme", tid).dataset.path))

    assert not stored.exists()  # nothing stored until the split is read
    first = c.get(f"/v1/trainings/{tid}/split", headers=auth)
    assert first.status_code == 200
    assert read_stored(stored, digest()) == fresh()
    assert json.loads(fresh()) == first.json()

    drawn = _count_draws(monkeypatch)
    # A changed input: the training's copy of its dataset, one answer changed. The stored split's
    # digest no longer matches: it is drawn again from the file as it is now, and stored again.
    data = folder / "dataset.csv"
    lines = data.read_text(encoding="utf-8").splitlines(keepends=True)
    head, _, label = lines[1].rpartition(",")
    lines[1] = head + "," + ("no\n" if label.strip() == "yes" else "yes\n")
    data.write_text("".join(lines), encoding="utf-8")
    changed = c.get(f"/v1/trainings/{tid}/split", headers=auth)
    assert drawn == ["sentiment"]
    assert changed.json() == json.loads(fresh()) != first.json()
    assert read_stored(stored, digest()) == fresh()
    drawn.clear()  # (fresh() draws too)

    # A damaged file (cut short) is never served: drawn again, and stored whole.
    whole = stored.read_bytes()
    stored.write_bytes(whole[: len(whole) // 2])
    assert c.get(f"/v1/trainings/{tid}/split", headers=auth).content == changed.content
    assert drawn == ["sentiment"] and stored.read_bytes() == whole

    # A whole file whose body is not the one its header names (its SHA-256) is not served either.
    header, _, body = gzip.decompress(whole).partition(b"\n")
    forged = body.replace(b'"n_test":', b'"n_test":1', 1)
    stored.write_bytes(gzip.compress(header + b"\n" + forged))
    assert c.get(f"/v1/trainings/{tid}/split", headers=auth).content == changed.content
    assert drawn == ["sentiment"] * 2
    # ... and a later view reads what was stored again.
    assert c.get(f"/v1/trainings/{tid}/split", headers=auth).content == changed.content
    assert drawn == ["sentiment"] * 2
    # A changed setting (the decisions' objects) or changed code of the split is a changed input.
    doc, _, _ = store._doc("acme", tid)
    path = store.manifest("acme", tid).dataset.path
    renamed = [{**d, "question": d["question"] + "?"} for d in doc["decisions"]]
    assert inputs_sha256(tid, {**doc, "decisions": renamed}, path) != digest()
    monkeypatch.setattr(splits, "code_sha256", lambda: "0" * 64)
    assert c.get(f"/v1/trainings/{tid}/split", headers=auth).content == changed.content
    assert drawn == ["sentiment"] * 3
