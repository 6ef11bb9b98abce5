"""Guessing keys at the console's sign-in form is limited as it is at the API: a refused sign-in
takes a token from its address's bucket, the one a refused API key takes, and one that finds none
is a ``429`` page with ``Retry-After``, not another guess checked against the store. The form
answered every guess (200 refused sign-ins in 6.5 s from one address, no ``429``), where the API
limits refused keys per address ("so guessing keys is limited too", docs/api.md). A right key
still signs in. The real application over HTTP, its buckets on a clock the test moves."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.test_console_pages import JEV, workspace_key
from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.ratelimit import ManualClock, RateLimit


@contextlib.contextmanager
def limited_app(sqlite_url: str, home: Path, burst: int) -> Iterator[
        tuple[asyncio.AbstractEventLoop, httpx.AsyncClient, ManualClock]]:
    """The real application with a limit of one request a second in bursts of ``burst``, its
    buckets on a clock the test moves: its event loop, an HTTP client of it, and the clock."""
    clock = ManualClock()
    app = create_app(sqlite_url, home, jev_source=JEV,
                     rate_limit=RateLimit(rate_per_s=1.0, burst=burst), clock=clock)
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                               base_url="http://console.test", follow_redirects=False)
    try:
        yield loop, client, clock
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


def test_refused_sign_ins_are_limited_per_address_with_the_apis_refused_keys(tmp_path: Path,
                                                                               sqlite_url: str) -> None:
    key = workspace_key(sqlite_url, "acme")
    with limited_app(sqlite_url, tmp_path / "home", burst=3) as (loop, client, clock):
        form = loop.run_until_complete(client.get("/console/sign-in")).text
        found = re.search(r'name="csrf_token" value="([^"]+)"', form)
        assert found is not None
        token = found.group(1)

        def sign_in(with_key: str) -> httpx.Response:
            return loop.run_until_complete(client.post("/console/sign-in", data={"csrf_token": token,
                                                                                   "key": with_key}))

        guesses = [sign_in(f"tsk_{i:016x}_" + "A" * 43) for i in range(5)]
        assert [r.status_code for r in guesses] == [401, 401, 401, 429, 429]
        limited = guesses[3]
        assert limited.headers["retry-after"] == "1"
        assert ("expected at most 3 refused sign-ins at once from this address, got more. Wait 1 s, then sign "
                "in again with the whole key (it starts with tsk_)") in limited.text
        api = loop.run_until_complete(client.get("/v1/trainings", headers={
            "Authorization": "Bearer tsk_0000000000000000_" + "B" * 43}))
        assert api.status_code == 429  # the same bucket as the API's refused keys
        clock.advance(1.0)
        assert sign_in("tsk_00000000000000ff_" + "A" * 43).status_code == 401  # a token is back
        assert sign_in("tsk_00000000000000fe_" + "A" * 43).status_code == 429  # and taken
        assert sign_in(key).status_code == 303  # a right key is no guess: it signs in
