"""A training whose split would leave no example to train on (one declared group, every text
the same, every unit needed for an answer's test examples) is refused at creation, through
``POST /v1/trainings`` and the console's New training form, before anything is stored or
charged; a training the split does handle is created. The rule is the split itself
(``refund.holdout.check_something_to_train_on``): the random datasets below are refused exactly
when ``training_mask(split_decisions(...))`` is empty."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import new_key
from tests.test_console_pages import TRAINING, Browser, running_app
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.errors import DatasetError, NotEnoughDataError
from typestrict_pipeline.refund.dataset import validate_dataset
from typestrict_pipeline.refund.holdout import (
    check_something_to_train_on,
    split_decisions,
    training_mask,
)
from typestrict_pipeline.refund.manifest import parse_manifest
from typestrict_pipeline.store import open_store

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


def _csv(rows: list[tuple[str, str, str]]) -> bytes:
    """``id,text,customer,label`` rows (text, customer, label) with ids r0, r1, ..."""
    return ("id,text,customer,label\n" + "".join(
        f"r{i},{t},{g},{a}\n" for i, (t, g, a) in enumerate(rows))).encode()


def _body(name: str, group: str | None) -> dict[str, Any]:
    return {"dataset": {"path": name, "columns": {"id": "id", "text": "text", "group": group}},
            "decisions": [{"name": "sentiment", "question": "Is it positive?",
                           "answer_column": "label", "answers": ["yes", "no"]}],
            "options": {"keep_if_loses": False}}


def _answer(i: int) -> str:
    return "yes" if i % 3 else "no"


REFUSED = {
    "one_group.csv": (
        _csv([(f"review {i}", "acme", _answer(i)) for i in range(120)]), "customer",
        "one_group.csv, column 'customer': expected at least 2 groups so some examples remain to "
        "train on, got 1 ('acme'): the test takes whole groups, so all 120 rows would be held out. "
        "Add examples of other groups, or declare no group column if the rows do not depend on "
        "each other."),
    "same_text.csv": (
        _csv([("Great  product" if i % 2 else "great product", "", _answer(i)) for i in range(120)]),
        None,
        "same_text.csv, column 'text': expected at least 2 distinct texts so some examples remain "
        "to train on, got 1: identical texts (compared after normalising Unicode, case and "
        "spacing) are held out together, so all 120 rows would be held out. Add examples with "
        "other texts."),
    "two_units.csv": (  # two texts, each only one answer: each is needed for its answer's test
        _csv([("good" if i % 2 else "bad", "", "yes" if i % 2 else "no") for i in range(120)]),
        None,
        "two_units.csv, column 'text': expected a split that leaves some examples to train on, "
        "got all 120 rows held out"),
}

CREATED = {
    # one declared group, and rows without a group value (each its own unit): those train
    "group_and_loose.csv": (_csv([(f"review {i}", "acme" if i < 60 else "", _answer(i))
                                  for i in range(120)]), "customer"),
    # three distinct texts, each with both answers: one is the test, two remain to train on
    "three_texts.csv": (_csv([(("good", "bad", "meh")[i % 3], "", "yes" if i % 5 else "no")
                              for i in range(120)]), None),
    # two groups, both answers in each
    "two_groups.csv": (_csv([(f"review {i}", f"c{i % 2}", _answer(i)) for i in range(120)]),
                       "customer"),
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], str, Path]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=5)
    with TestClient(create_app(url, tmp_path / "home", jev_source=JEV, rate_limit=None)) as c:
        yield c, {"Authorization": f"Bearer {key}"}, url, tmp_path / "home"


def _ledger(url: str) -> tuple[int, int, int]:
    engine = open_store(url)
    try:
        ledger = CreditLedger(engine)
        return ledger.balance("acme"), ledger.entries_total("acme"), len(ledger.lines("acme"))
    finally:
        engine.dispose()


def test_the_api_refuses_a_training_with_nothing_to_train_on_and_charges_nothing(
    api: tuple[TestClient, dict[str, str], str, Path],
) -> None:
    c, auth, url, home = api
    for name, (data, _, _) in REFUSED.items():
        assert c.put(f"/v1/files/{name}", content=data, headers=auth).status_code == 201
    files = c.get("/v1/files", headers=auth).json()
    before = _ledger(url)
    for name, (_, group, message) in REFUSED.items():
        refused = c.post("/v1/trainings", json=_body(name, group), headers=auth)
        assert refused.status_code == 422, (name, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "invalid_input"
        assert error["message"].startswith(message), (name, error["message"])
    assert _ledger(url) == before  # no charge, no ledger line
    assert c.get("/v1/trainings", headers=auth).json() == []
    trainings = home / "trainings"
    assert not trainings.exists() or list(trainings.iterdir()) == []  # nothing stored
    assert c.get("/v1/files", headers=auth).json() == files


def test_the_api_creates_a_training_the_split_handles(
    api: tuple[TestClient, dict[str, str], str, Path],
) -> None:
    c, auth, url, _ = api
    for name, (data, group) in CREATED.items():
        assert c.put(f"/v1/files/{name}", content=data, headers=auth).status_code == 201
        made = c.post("/v1/trainings", json=_body(name, group), headers=auth)
        assert made.status_code == 201, (name, made.text)
        split = c.get(f"/v1/trainings/{made.json()['id']}/split", headers=auth).json()
        assert split["training_ids"], name
    assert _ledger(url)[0] == 5 - len(CREATED)


def test_the_console_refuses_it_too(tmp_path: Path, sqlite_url: str) -> None:
    key = new_key(sqlite_url, "acme", credits=2)
    with running_app(sqlite_url, tmp_path / "home") as application:
        b = Browser(application, key)
        data, _, message = REFUSED["one_group.csv"]
        before = _ledger(sqlite_url)
        refused = b.form("/console/trainings", {**TRAINING, "col_group": "customer"},
                         files={"dataset_file": ("one_group.csv", data)})
        assert refused.status_code == 422, refused.text[:2000]
        shown = message.replace("'", "&#39;")
        assert shown[:120] in refused.text, refused.text[:3000]
        assert _ledger(sqlite_url) == before
        assert b.get("/v1/trainings").json() == []
        assert not (tmp_path / "home" / "workspaces" / "acme" / "files" / "one_group.csv").exists()
        b.close()


def _random_case(rng: random.Random) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """A small dataset with few groups, repeated texts, unlabeled rows, one or two decisions."""
    n = rng.randint(3, 40)
    groups = rng.choice([None, 1, 2, 3, 6])
    texts = rng.choice([1, 2, 3, 5, n])
    table: dict[str, list[Any]] = {
        "id": [f"r{i}" for i in range(n)],
        "text": [f"text {rng.randrange(texts)}" for _ in range(n)],
    }
    columns: dict[str, Any] = {"id": "id", "text": "text", "group": None}
    if groups is not None:
        table["grp"] = [f"g{rng.randrange(groups)}" if rng.random() > 0.1 else "" for _ in range(n)]
        columns["group"] = "grp"
    decisions = []
    for d in range(rng.choice([1, 1, 2])):
        column = f"label{d}"
        skew = rng.random()
        blank = rng.choice([0.15, 0.15, 0.5])  # two decisions may answer mostly different rows
        table[column] = ["" if rng.random() < blank else ("yes" if rng.random() < skew else "no")
                         for _ in range(n)]
        decisions.append({"name": f"d{d}", "question": "q?", "answer_column": column,
                          "answers": ["yes", "no"]})
    doc = {"manifest_version": 1, "training_id": "t", "workspace_id": "w",
           "dataset": {"path": "data.csv", "columns": columns}, "decisions": decisions,
           "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}},
           "training": {"status": "failed", "reason": "x"}}
    return table, doc


def test_two_decisions_whose_shared_rows_are_one_group_may_still_train() -> None:
    """Two decisions answering different rows but for one group: that group is the only unit a
    row answered in both can come from, yet it need not be held out by either decision (each
    has other units to draw its test from). The split decides; it is not refused on sight."""
    rng = random.Random(3)
    seen = set()
    for _ in range(60):
        g, a, b = rng.randint(1, 6), rng.randint(3, 40), rng.randint(3, 40)
        n = g + a + b
        table = {"id": [f"r{i}" for i in range(n)], "text": [f"t{i}" for i in range(n)],
                 "grp": ["G" if i < g else f"u{i}" for i in range(n)],
                 "l0": [rng.choice(["yes", "no"]) if i < g + a else "" for i in range(n)],
                 "l1": [rng.choice(["yes", "no"]) if i < g or i >= g + a else "" for i in range(n)]}
        doc = {"manifest_version": 1, "training_id": "t", "workspace_id": "w",
               "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
               "decisions": [{"name": f"d{k}", "question": "q?", "answer_column": f"l{k}",
                              "answers": ["yes", "no"]} for k in (0, 1)],
               "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}},
               "training": {"status": "failed", "reason": "x"}}
        try:
            dataset = validate_dataset(table, parse_manifest(doc, source="test"))
            empty = not training_mask(split_decisions(dataset)).any()
        except (DatasetError, NotEnoughDataError):
            continue
        try:
            check_something_to_train_on(dataset)
            refused = False
        except DatasetError:
            refused = True
        assert refused == empty, (g, a, b)
        seen.add(refused)
    assert seen == {True, False}


def test_the_refusal_is_exactly_an_empty_training_set_of_the_split() -> None:
    rng = random.Random(20261207)
    seen = {"refused": 0, "created": 0}
    for _ in range(400):
        table, doc = _random_case(rng)
        try:
            dataset = validate_dataset(table, parse_manifest(doc, source="test"))
        except (DatasetError, NotEnoughDataError):
            continue  # refused by the dataset's own checks (one answer only, ...)
        try:
            holdouts = split_decisions(dataset)
        except NotEnoughDataError:
            continue  # too few answers to hold out a test: the split's own refusal
        empty = not training_mask(holdouts).any()
        try:
            check_something_to_train_on(dataset)
            refused = False
        except DatasetError:
            refused = True
        assert refused == empty, (table, doc["decisions"])
        seen["refused" if refused else "created"] += 1
    assert seen["refused"] >= 50 and seen["created"] >= 50, seen
