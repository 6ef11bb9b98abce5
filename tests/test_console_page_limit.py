"""A signed-in session's console pages take tokens from its workspace's bucket, the one the
API's requests with the same cookie take: past the burst a page is a ``429`` page with
``Retry-After``, as an API request is a ``429`` JSON. A session's pages were never limited (150
page loads at once: 150 answers, each a read of the store), while its ``/v1`` requests were. A
form's POST takes one token, not one for its session and one for its CSRF check. The real
application over HTTP, its buckets on a clock the test moves."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.test_api_probe_signin_limit import limited_app
from tests.test_console_pages import workspace_key


def test_a_sessions_pages_share_its_workspaces_limit_with_the_api(tmp_path: Path, sqlite_url: str) -> None:
    key = workspace_key(sqlite_url, "acme")
    with limited_app(sqlite_url, tmp_path / "home", burst=4) as (loop, client, clock):

        def run(request: object) -> httpx.Response:
            return loop.run_until_complete(request)  # type: ignore[arg-type]

        form = run(client.get("/console/sign-in")).text
        found = re.search(r'name="csrf_token" value="([^"]+)"', form)
        assert found is not None
        assert run(client.post("/console/sign-in", data={"csrf_token": found.group(1), "key": key})).status_code == 303
        pages = [run(client.get("/console/trainings")) for _ in range(4)]
        assert [p.status_code for p in pages] == [200, 200, 200, 200]
        token = re.search(r'name="csrf_token" value="([^"]+)"', pages[-1].text)
        assert token is not None
        limited = run(client.get("/console/trainings"))
        assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
        assert limited.headers["content-type"].startswith("text/html")
        assert "Too many requests" in limited.text and "Retry after 1 s" in limited.text
        assert run(client.get("/v1/trainings")).status_code == 429  # the cookie's API requests: one bucket
        clock.advance(1.0)
        assert run(client.get("/v1/trainings")).status_code == 200  # the token back, taken by the API
        assert run(client.get("/console/trainings")).status_code == 429
        clock.advance(1.0)  # one token: a form's POST takes it (its session and its CSRF check: one)
        posted = run(client.post("/console/settings/notifications", data={"csrf_token": token.group(1)}))
        assert posted.status_code != 429, posted.text
        assert run(client.get("/console/trainings")).status_code == 429  # and it was taken
