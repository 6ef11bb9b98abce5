"""A console form whose store write waits does not stop the server.

The sign-in, settings and backtests/studies forms were ``async def`` routes that checked keys and
wrote to the store on the event loop: while one waited for the store (another process holding
SQLite's write lock, up to its 30 s busy timeout; a slow PostgreSQL), the whole server answered
nothing. Now each reads its form on the loop and does the store's work in the threadpool, as the
trainings forms do (``tests/test_console_storage_lock_wait.py``). Here the test holds the real
store's write lock (``BEGIN IMMEDIATE`` on the SQLite file), a form is posted to a real served app
(uvicorn in a thread), another request is answered within a second, then the lock is released
and the form completes."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.test_api_support import ApiServer, new_key


def _sign_in_form(url: str) -> tuple[httpx.Client, str]:
    """A fresh browser at the sign-in form: its client (with the form's cookie) and token."""
    c = httpx.Client(base_url=url, timeout=120, follow_redirects=False)
    token = re.search(r'name="csrf_token" value="([^"]+)"', c.get("/console/sign-in").text)
    assert token is not None
    return c, token.group(1)


def _signed_in(url: str, key: str) -> tuple[httpx.Client, str]:
    c, token = _sign_in_form(url)
    assert c.post("/console/sign-in", data={"csrf_token": token, "key": key}).status_code == 303
    csrf = re.search(r'data-csrf="([0-9a-f]{64})"', c.get("/console/settings/usage").text)
    assert csrf is not None
    return c, csrf.group(1)


@pytest.mark.parametrize("form", ["sign-in", "settings: budget"])
def test_another_request_is_answered_while_a_form_waits_for_the_store(
        tmp_path: Path, sqlite_url: str, form: str) -> None:
    from typestrict_pipeline.cli import main

    key = new_key(sqlite_url, "acme")
    # a workspace whose operator set up its subscription: its budget can be set
    assert main(["schedule", "workspace", "acme", "--subscription", "ACTIVE", "--budget-usd", "50",
                 "--url", sqlite_url]) == 0
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    with ApiServer(sqlite_url, tmp_path / "home", rate_limit=None) as server:
        if form == "sign-in":
            poster, token = _sign_in_form(server.url)
            fields = ("/console/sign-in", {"csrf_token": token, "key": key})
        else:
            poster, csrf = _signed_in(server.url, key)
            fields = ("/console/settings/usage/budget", {"csrf_token": csrf, "budget_usd": "12.50"})

        def send(c: httpx.Client) -> httpx.Response:
            return c.post(fields[0], data=fields[1])
        done: dict[str, httpx.Response] = {}
        holder = sqlite3.connect(db, isolation_level=None, timeout=0)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the store's write lock, as another process holds it
            thread = threading.Thread(target=lambda: done.setdefault("r", send(poster)), daemon=True)
            thread.start()
            time.sleep(1.0)  # the form reaches the store and waits for its write lock
            assert thread.is_alive() and "r" not in done, f"{form}: the form did not wait for the store"
            # A server blocked by the waiting form answers nothing until the form gives up (the
            # store's busy timeout, 30 s): an answer within 20 s, the form still waiting, is the
            # behaviour. How fast is not asserted (a busy machine is slow, not blocked).
            other = httpx.Client(base_url=server.url, timeout=20.0)
            try:
                answered = other.get("/console/sign-in")
            except httpx.TimeoutException:
                pytest.fail(f"{form}: no answer to another request in 20 s while the form waits for the store")
            finally:
                other.close()
            assert answered.status_code == 200, (form, answered.status_code)
            assert thread.is_alive() and "r" not in done, f"{form}: the form finished while the store was locked"
        finally:
            holder.rollback()
            holder.close()
        thread.join(timeout=120)
        poster.close()
    assert not thread.is_alive()
    assert done["r"].status_code == 303, (form, done["r"].text[:2000])
