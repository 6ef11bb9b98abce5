"""An audit asked for again (the answer a real server gives from memory, before routing) is the
same answer as the first, and every check still holds on it: another workspace's key gets the
404 of a missing model, a revoked key is refused within the documented 10 seconds, the key's rate
limit counts it, a body over the limit is a 413, a Range request is a 206, If-None-Match a 304."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from tests.test_api_support import ApiServer, new_key, settled_model
from typestrict_pipeline.api.keys import revoke_api_key
from typestrict_pipeline.api.ratelimit import ManualClock, RateLimit
from typestrict_pipeline.store import open_store

MODEL = "tr_known"
AUDIT = f"/v1/models/{MODEL}/audit"
ROOMY = RateLimit(rate_per_s=1000.0, burst=1000)  # a limit these tests never reach, still applied


def _same(a: httpx.Response, b: httpx.Response) -> None:
    """Two answers equal in status, bytes and every header but the date."""
    assert (a.status_code, a.content) == (b.status_code, b.content)
    assert ({k: v for k, v in a.headers.items() if k != "date"}
            == {k: v for k, v in b.headers.items() if k != "date"})


@pytest.mark.parametrize("limit", [ROOMY, None], ids=["rate-limited", "no-limit"])
def test_an_audit_asked_again_is_the_same_answer(tmp_path: Path, limit: RateLimit | None) -> None:
    url, key, audit = settled_model(tmp_path, MODEL, seed=5, keep_if_loses=False)
    etag = f'"{hashlib.sha256(audit).hexdigest()}"'
    with ApiServer(url, tmp_path / "home", rate_limit=limit, clock=ManualClock()) as server, \
            server.client(key) as c:
        first, *again = (c.get(AUDIT) for _ in range(3))
        assert first.status_code == 200 and first.content == audit and first.headers["etag"] == etag
        assert first.headers["content-type"] == "application/json"
        assert first.headers["cache-control"] == "private, no-cache"
        assert first.headers["content-disposition"] == f'attachment; filename="{MODEL}.audit.json"'
        for later in again:
            _same(first, later)
        unchanged = [c.get(AUDIT, headers={"If-None-Match": tag}) for tag in (etag, f'W/{etag}', "*")]
        assert unchanged[0].status_code == 304 and unchanged[0].content == b""
        assert unchanged[0].headers["etag"] == etag
        for other in unchanged[1:]:
            _same(unchanged[0], other)
        _same(first, c.get(AUDIT, headers={"If-None-Match": '"another"'}))
        part = c.get(AUDIT, headers={"Range": "bytes=0-9"})
        assert part.status_code == 206 and part.content == audit[:10] and part.headers["etag"] == etag
        asked = c.get(AUDIT + "?download=1")  # known now, but a query is the route's: refused, as on a first ask
        assert asked.status_code == 422 and "expected no query parameter" in asked.text, asked.text


@pytest.mark.parametrize("limit", [ROOMY, None], ids=["rate-limited", "no-limit"])
def test_another_workspace_gets_the_404_of_a_missing_model(tmp_path: Path, limit: RateLimit | None) -> None:
    url, key, audit = settled_model(tmp_path, MODEL, seed=5, keep_if_loses=False)
    stranger = new_key(url, "other")
    with ApiServer(url, tmp_path / "home", rate_limit=limit, clock=ManualClock()) as server:
        with server.client(key) as c:
            assert [c.get(AUDIT).content for _ in range(2)] == [audit, audit]  # served, and again
        with server.client(stranger) as c:
            theirs = c.get(AUDIT)
            missing = c.get("/v1/models/tr_nothing/audit")
            assert c.get(AUDIT, headers={"If-None-Match": "*"}).status_code == 404  # no 304 either
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["error"]["code"] == missing.json()["error"]["code"]
        assert (theirs.json()["error"]["message"].replace(MODEL, "X")
                == missing.json()["error"]["message"].replace("tr_nothing", "X"))
        assert audit not in theirs.content


@pytest.mark.parametrize("limit", [ROOMY, None], ids=["rate-limited", "no-limit"])
def test_a_revoked_key_is_refused_within_ten_seconds(tmp_path: Path, limit: RateLimit | None) -> None:
    url, key, audit = settled_model(tmp_path, MODEL, seed=5, keep_if_loses=False)
    etag = f'"{hashlib.sha256(audit).hexdigest()}"'
    clock = ManualClock()
    with ApiServer(url, tmp_path / "home", rate_limit=limit, clock=clock) as server, \
            server.client(key) as c:
        assert [c.get(AUDIT).status_code for _ in range(3)] == [200] * 3
        engine = open_store(url)
        try:
            revoke_api_key(engine, key[4:20])
        finally:
            engine.dispose()
        clock.advance(10.0)  # docs/api.md: "a key revoked ... is refused within 10 seconds"
        for headers in ({}, {"If-None-Match": etag}):
            refused = c.get(AUDIT, headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
            assert "revoked" in refused.json()["error"]["message"]
            assert refused.headers["www-authenticate"] == "Bearer"


def test_the_keys_rate_limit_counts_an_audit_asked_again(tmp_path: Path) -> None:
    url, key, _ = settled_model(tmp_path, MODEL, seed=5, keep_if_loses=False)
    clock = ManualClock()
    with ApiServer(url, tmp_path / "home", rate_limit=RateLimit(rate_per_s=1.0, burst=3),
                   clock=clock) as server, server.client(key) as c:
        answers = [c.get(AUDIT) for _ in range(5)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
        assert answers[-1].headers["retry-after"] == "1"
        assert answers[-1].json()["error"]["code"] == "rate_limited"
        clock.advance(1.0)
        assert [c.get(AUDIT).status_code for _ in range(2)] == [200, 429]


def test_a_body_over_the_limit_is_refused_on_an_audit_asked_again(tmp_path: Path) -> None:
    url, key, audit = settled_model(tmp_path, MODEL, seed=5, keep_if_loses=False)
    with ApiServer(url, tmp_path / "home", rate_limit=ROOMY, clock=ManualClock(),
                   max_body_bytes=100) as server:
        with server.client(key) as c:
            assert [c.get(AUDIT).content for _ in range(2)] == [audit, audit]
        with server.client(key) as c:
            refused = c.request("GET", AUDIT, content=b"x" * 200)
            assert refused.status_code == 413 and refused.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("limit", [ROOMY, None], ids=["rate-limited", "no-limit"])
def test_an_audit_asked_with_two_keys_is_the_routes_401(tmp_path: Path, limit: RateLimit | None) -> None:
    """The answer from memory read the last ``Authorization`` header and the route the first: a
    request with another workspace's key first and the owner's last got the audit without a
    rate limit, and the owner's first got it with one. Now two headers are the route's 401,
    however the audit was asked before."""
    url, key, audit = settled_model(tmp_path, MODEL, seed=5, keep_if_loses=False)
    stranger = new_key(url, "other")
    with ApiServer(url, tmp_path / "home", rate_limit=limit, clock=ManualClock()) as server:
        with server.client(key) as c:
            assert [c.get(AUDIT).content for _ in range(2)] == [audit, audit]  # known now
        with httpx.Client(base_url=server.url, timeout=120) as anon:
            for sent in ((stranger, key), (key, stranger), (key, key)):
                r = anon.get(AUDIT, headers=[("authorization", f"Bearer {one}") for one in sent])
                assert r.status_code == 401, (sent, r.status_code)
                assert r.json()["error"]["message"].startswith("expected one Authorization header, got 2.")
