"""Rate limits per key, on a real server, counted (never timed): the server's token buckets run on
a clock the test moves, so every count is exact whatever the machine's speed.

One noisy workspace sends many requests at once; a quiet one keeps working: the noisy key gets
exactly its burst, then 429s with Retry-After, and every quiet request is answered. Time given back
to the clock gives the noisy key exactly that many requests again.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from typestrict_pipeline.api.ratelimit import ManualClock, RateLimit

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

LIMIT = RateLimit(rate_per_s=2.0, burst=5)


def _statuses(server: Any, key: str, workspace: str, n: int, workers: int = 8) -> list[tuple[int, str | None]]:
    """``n`` requests of ``key`` on ``workers`` threads: each one's status and Retry-After."""
    def one(_: int) -> tuple[int, str | None]:
        with server.client(key) as c:
            r = c.get(f"/v1/workspaces/{workspace}")
            return r.status_code, r.headers.get("retry-after")

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(n)))


def test_one_noisy_workspace_cannot_starve_another(tmp_path: Path, sqlite_url: str) -> None:
    noisy_key = support.new_key(sqlite_url, "noisy")
    quiet_key = support.new_key(sqlite_url, "quiet")
    clock = ManualClock()
    with support.ApiServer(sqlite_url, tmp_path / "home", rate_limit=LIMIT, clock=clock) as server:
        with ThreadPoolExecutor(2) as pool:  # both at once: the flood and the quiet workspace's work
            flood = pool.submit(_statuses, server, noisy_key, "noisy", 60)
            quiet = pool.submit(_statuses, server, quiet_key, "quiet", 5, 1)
            noisy_answers, quiet_answers = flood.result(), quiet.result()
        assert [s for s, _ in quiet_answers] == [200] * 5  # every quiet request answered
        assert sum(1 for s, _ in noisy_answers if s == 200) == LIMIT.burst  # exactly its burst ...
        refused = [(s, after) for s, after in noisy_answers if s != 200]
        assert len(refused) == 60 - LIMIT.burst and {s for s, _ in refused} == {429}  # ... the rest 429
        assert {after for _, after in refused} == {"1"}  # one token back in 0.5 s: retry after 1 s
        with server.client(noisy_key) as c:
            r = c.get("/v1/workspaces/noisy")
            assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
            assert r.json()["error"]["message"].startswith(
                "expected at most 2 requests a second per key (bursts of 5), got more from this key. Retry after 1 s")
        clock.advance(1.5)  # 3 tokens back in every bucket
        again = _statuses(server, noisy_key, "noisy", 10)
        assert sum(1 for s, _ in again if s == 200) == 3
        # The quiet workspace's bucket never paid for the flood: its 3 tokens are its own.
        assert [s for s, _ in _statuses(server, quiet_key, "quiet", 4, 1)] == [200, 200, 200, 429]


def test_each_key_has_its_own_bucket_and_refused_keys_are_limited_by_address(
    tmp_path: Path, sqlite_url: str
) -> None:
    first = support.new_key(sqlite_url, "acme")
    second = support.new_key(sqlite_url, "acme")
    clock = ManualClock()
    with support.ApiServer(sqlite_url, tmp_path / "home", rate_limit=LIMIT, clock=clock) as server:
        for key in (first, second):
            with server.client(key) as c:
                assert [c.get("/v1/workspaces/acme").status_code for _ in range(7)] == [200] * 5 + [429] * 2
        forged = first[:21] + ("A" * 43 if not first.endswith("A" * 43) else "B" * 43)
        with server.client(forged) as c:  # a wrong secret for a known id: the address's bucket, not the key's
            assert [c.get("/v1/workspaces/acme").status_code for _ in range(7)] == [401] * 5 + [429] * 2
        clock.advance(10)
        with server.client(first) as c:
            assert c.get("/v1/workspaces/acme").status_code == 200


def test_the_limit_can_be_turned_off(tmp_path: Path, sqlite_url: str) -> None:
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home", rate_limit=None, clock=ManualClock()) as server, \
            server.client(key) as c:
        assert {c.get("/v1/workspaces/acme").status_code for _ in range(30)} == {200}
