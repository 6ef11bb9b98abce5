"""``Idempotency-Key`` on the routes that charge or spend (docs/api.md, "Retrying safely"): a
retried request is answered once, charged once; a refusal gives the key back; a key is the
workspace's own; two identical requests at once start one training and charge one credit."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import threading
from pathlib import Path
from typing import Any

import httpx
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from typestrict_pipeline.api.idempotency import (
    CLAIM_TIMEOUT,
    KEEP_FOR,
    Claim,
    claim,
    complete,
    fingerprint,
)
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import Base, open_store, utcnow

_spec = importlib.util.spec_from_file_location("test_api_support", Path(__file__).with_name("test_api_support.py"))
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

BODY = support.TRAINING_BODY
KEY = "retry-7f3a_0001"


def _balance(url: str, workspace: str = "acme") -> int:
    engine = open_store(url)
    try:
        return CreditLedger(engine).balance(workspace)
    finally:
        engine.dispose()


def _count(c: httpx.Client) -> int:
    r = c.get("/v1/trainings")
    assert r.status_code == 200, r.text
    return int(r.headers["X-Total-Count"])


def _server(tmp_path: Path, url: str) -> Any:
    """The API on ``url`` with a rate limit off (many requests in a row) and a Jev for the dataset."""
    _, jev = support.make_dataset(tmp_path, n=40)
    (tmp_path / "home").mkdir(exist_ok=True)
    return support.ApiServer(url, tmp_path / "home", rate_limit=None,
                             jev_source={"kind": "file", "path": str(jev)})


def _upload(tmp_path: Path, c: httpx.Client) -> None:
    csv, _ = support.make_dataset(tmp_path, n=40)
    assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201


def test_a_retried_training_is_answered_again_and_charged_once(tmp_path: Path, sqlite_url: str) -> None:
    key = support.new_key(sqlite_url, "acme", credits=5)
    with _server(tmp_path, sqlite_url) as server, server.client(key) as c:
        _upload(tmp_path, c)
        first = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY})
        assert first.status_code == 201, first.text
        assert "Idempotent-Replayed" not in first.headers
        # the answer was lost: the client retries, its JSON written another way (order, spaces)
        again = c.post("/v1/trainings", content=json.dumps(dict(reversed(BODY.items())), indent=2),
                       headers={"Idempotency-Key": KEY, "Content-Type": "application/json"})
        assert again.status_code == 201, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.content == first.content  # byte for byte
        assert _count(c) == 1
        assert _balance(sqlite_url) == 4  # one credit charged, once

        # the same key for another request: refused, nothing made
        other = c.post("/v1/trainings", json={**BODY, "options": {"keep_if_loses": True}},
                       headers={"Idempotency-Key": KEY})
        assert other.status_code == 422, other.text
        error = other.json()["error"]
        assert error["code"] == "idempotency_key_reused"
        assert "first used for (POST /v1/trainings, " in error["message"]
        assert "got POST /v1/trainings with another body. " in error["message"]
        assert "Use a new key for each new request" in error["message"]
        assert _count(c) == 1 and _balance(sqlite_url) == 4

        # without a key: a new training each time, as before
        assert c.post("/v1/trainings", json=BODY).status_code == 201
        assert _count(c) == 2 and _balance(sqlite_url) == 3


def test_a_key_is_the_workspace_s_own(tmp_path: Path, sqlite_url: str) -> None:
    acme = support.new_key(sqlite_url, "acme", credits=2)
    other = support.new_key(sqlite_url, "globex", credits=2)
    with _server(tmp_path, sqlite_url) as server, \
            server.client(acme) as a, server.client(other) as b:
        _upload(tmp_path, a)
        _upload(tmp_path, b)
        ra = a.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY})
        rb = b.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY})
        assert ra.status_code == rb.status_code == 201, (ra.text, rb.text)
        assert "Idempotent-Replayed" not in rb.headers
        assert ra.json()["id"] != rb.json()["id"] and rb.json()["workspace_id"] == "globex"
        assert _balance(sqlite_url, "acme") == _balance(sqlite_url, "globex") == 1


def test_a_refusal_gives_the_key_back_and_a_bad_key_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    key = support.new_key(sqlite_url, "acme", credits=0)
    with _server(tmp_path, sqlite_url) as server, server.client(key) as c:
        _upload(tmp_path, c)
        broke = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY})
        assert broke.status_code == 402, broke.text
        engine = open_store(sqlite_url)
        try:
            CreditLedger(engine).grant("acme", 1, reference="tests-topup")
        finally:
            engine.dispose()
        paid = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY})
        assert paid.status_code == 201 and "Idempotent-Replayed" not in paid.headers, paid.text
        assert _balance(sqlite_url) == 0 and _count(c) == 1

        for bad, said in (("a b", "got 'a b'"), ("k" * 65, "expected 1 to 64 characters"), ("", "empty")):
            r = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": bad})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
            assert said in r.json()["error"]["message"] and "Idempotency-Key" in r.json()["error"]["message"]
        twice = c.post("/v1/trainings", json=BODY, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
        assert twice.status_code == 422 and "got 2 Idempotency-Key headers" in twice.json()["error"]["message"]
        assert _count(c) == 1


def test_a_key_being_worked_on_is_a_409_and_a_dead_claim_is_taken_over(tmp_path: Path, sqlite_url: str) -> None:
    key = support.new_key(sqlite_url, "acme", credits=2)
    engine = open_store(sqlite_url)
    digest = fingerprint("POST", "/v1/trainings", json.loads(json.dumps(BODY)))
    try:
        with _server(tmp_path, sqlite_url) as server, server.client(key) as c:
            _upload(tmp_path, c)
            assert isinstance(claim(engine, "acme", "busy", "POST", "/v1/trainings", digest), Claim)
            busy = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": "busy"})
            assert busy.status_code == 409 and busy.headers["Retry-After"] == "1", busy.text
            assert busy.json()["error"]["code"] == "idempotency_key_in_use"
            assert "Retry after a moment" in busy.json()["error"]["message"]
            # a claim whose process died longer ago than the bound: the next request takes it over
            long_ago = utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=5)
            assert isinstance(claim(engine, "acme", "dead", "POST", "/v1/trainings", digest, now=long_ago), Claim)
            revived = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": "dead"})
            assert revived.status_code == 201, revived.text
            assert c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": "dead"}).headers[
                "Idempotent-Replayed"] == "true"
            assert _count(c) == 1 and _balance(sqlite_url) == 1
            # an answer stored more than 24 hours ago is forgotten: the key is a new request
            day_ago = utcnow() - KEEP_FOR - dt.timedelta(seconds=5)
            old = claim(engine, "acme", "yesterday", "POST", "/v1/trainings", digest, now=day_ago)
            assert isinstance(old, Claim)
            complete(engine, old, 201, b'{"id":"tr_old"}', {"content-type": "application/json"})
            fresh = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": "yesterday"})
            assert fresh.status_code == 201 and "Idempotent-Replayed" not in fresh.headers, fresh.text
            assert fresh.json()["id"] != "tr_old"
            assert _count(c) == 2 and _balance(sqlite_url) == 0
    finally:
        engine.dispose()


STUDY_FORM: dict[str, Any] = {
    "workflow": "wx", "start": "2012-01-01", "end": "2012-07-01", "tune_steps": 10,
    "eval_steps": 10, "holdout_steps": 10, "folds": 2, "grid": ["skill=0.5,0.6"],
    "max_candidates": 2, "max_total_steps": 1000, "synthetic": True,
}
BACKTEST = {"workflow": "seattle_rain", "start": "2014-01-01", "end": "2014-01-31"}


def test_a_retried_backtest_or_study_is_launched_once(tmp_path: Path, sqlite_url: str) -> None:
    key = support.new_key(sqlite_url, "acme", credits=0)
    with _server(tmp_path, sqlite_url) as server, server.client(key) as c:
        for path, body, status in (("/v1/backtests", BACKTEST, 202), ("/v1/studies", STUDY_FORM, 201)):
            one = {"Idempotency-Key": f"launch-{path[4:]}"}
            first = c.post(path, json=body, headers=one)
            assert first.status_code == status, first.text
            again = c.post(path, json=body, headers=one)
            assert again.status_code == status and again.headers["Idempotent-Replayed"] == "true", again.text
            assert again.content == first.content
            listed = c.get(path)
            assert listed.status_code == 200 and listed.headers["X-Total-Count"] == "1", listed.text
            # the key was first used for the backtest: a study with it is another request
        reused = c.post("/v1/studies", json=STUDY_FORM, headers={"Idempotency-Key": "launch-backtests"})
        assert reused.status_code == 422 and reused.json()["error"]["code"] == "idempotency_key_reused"
        assert "first used for (POST /v1/backtests, " in reused.json()["error"]["message"]


def test_the_three_charging_routes_document_the_header(tmp_path: Path, sqlite_url: str) -> None:
    with _server(tmp_path, sqlite_url) as server, server.client() as c:
        schema: dict[str, Any] = c.get("/v1/openapi.json").json()
    documented = {path for path, ops in schema["paths"].items() for op in ops.values()
                  if any(p.get("name") == "Idempotency-Key" and p.get("in") == "header"
                         for p in op.get("parameters", []))}
    assert documented == {"/v1/trainings", "/v1/backtests", "/v1/studies"}


def test_migration_matches_the_model(store_url: str) -> None:
    engine = open_store(store_url)
    try:
        with engine.connect() as conn:
            diff = [d for d in compare_metadata(MigrationContext.configure(conn), Base.metadata)
                    if "api_idempotency" in repr(d)]
        assert diff == [], diff
    finally:
        engine.dispose()


def test_two_identical_requests_at_once_start_one_training_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    key = support.new_key(pg_url, "acme", credits=5)
    with _server(tmp_path, pg_url) as server, server.client(key) as c:
        _upload(tmp_path, c)
        answers: list[httpx.Response] = []
        start = threading.Barrier(2)

        def send() -> None:
            with server.client(key) as own:
                start.wait()
                answers.append(own.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY}))

        threads = [threading.Thread(target=send) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        statuses = sorted(r.status_code for r in answers)
        assert statuses in ([201, 201], [201, 409]), [r.text for r in answers]
        if statuses == [201, 201]:
            assert answers[0].content == answers[1].content
            assert {r.headers.get("Idempotent-Replayed") for r in answers} == {None, "true"}
        assert _count(c) == 1
        assert _balance(pg_url) == 4  # one credit, charged once
        retry = c.post("/v1/trainings", json=BODY, headers={"Idempotency-Key": KEY})
        assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"
        assert _count(c) == 1 and _balance(pg_url) == 4
