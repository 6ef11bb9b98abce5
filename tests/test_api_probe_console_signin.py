"""The sign-in form never shows the key it was sent. A form whose ``key`` field came twice was
refused as ambiguous (right) with the first 40 characters of each value on the page ("got
['tsk_0123456789abcdef_F14lupDoFCFNCyXANLp', …]"): 19 characters of the secret, which the
product otherwise never shows again once it is made. Now the refusal names the field and says
the values are not shown; so for a CSRF token. The real application over HTTP, as
``test_console_pages.py`` drives it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from tests.test_console_pages import running_app, workspace_key


def test_a_key_sent_twice_is_refused_without_showing_it(tmp_path: Path, sqlite_url: str) -> None:
    key = workspace_key(sqlite_url, "acme")
    secret = key.rsplit("_", 1)[1]
    with running_app(sqlite_url, tmp_path / "home") as app:
        loop = asyncio.new_event_loop()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
                                   base_url="http://console.test", follow_redirects=False)
        try:
            form = loop.run_until_complete(client.get("/console/sign-in")).text
            token = re.search(r'name="csrf_token" value="([^"]+)"', form)
            assert token is not None
            for data in ({"csrf_token": token.group(1), "key": [key, key]},
                         {"csrf_token": [token.group(1), token.group(1)], "key": key},
                         {"csrf_token": token.group(1), "key": [key, "tsk_" + "a" * 100_000]}):
                r = loop.run_until_complete(client.post("/console/sign-in", data=data))
                assert r.status_code == 422, r.text[:2000]
                field = "key" if isinstance(data["key"], list) else "csrf_token"
                assert (f"{field}: expected it once (a repeated field is ambiguous), got [&#39;(not shown)&#39;, "
                        "&#39;(not shown)&#39;]. Correct the field and submit the form again.") in r.text
                assert secret[:6] not in r.text and key[:20] not in r.text and token.group(1)[:12] not in r.text
            signed_in = loop.run_until_complete(client.post("/console/sign-in", data={
                "csrf_token": token.group(1), "key": key}))
            assert signed_in.status_code == 303  # the form itself still signs in
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()
