"""Console sessions: a workspace key exchanged for a cookie, and what a browser relies on.

The core (``console.sessions``) on both stores; the HTTP edge through the real application
(``create_app``, ASGI in process with httpx): the cookie's attributes (HttpOnly, SameSite,
Secure and the ``__Host-`` name over TLS), CSRF on every form, sign-out, expiry, a revoked key,
the key never in a URL, a page or a log, and the API's reads answering the cookie (the result
page and its download link, which answered 401 to a browser before) while its writes do not.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import select

from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.keys import create_api_key, revoke_api_key
from typestrict_pipeline.console.sessions import (
    SESSION_IDLE,
    SESSION_MAX_AGE,
    ConsoleSessionRow,
    csrf_token,
    session_for,
    sign_in,
    sign_out,
)
from typestrict_pipeline.store import open_store, session_scope

T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


# --- the core -----------------------------------------------------------------------------------


def test_a_key_opens_a_session_that_stores_only_the_tokens_digest(store_url: str) -> None:
    engine = open_store(store_url)
    key = create_api_key(engine, "acme").key
    opened = sign_in(engine, f"  {key}\n", now=T0)  # pasted with spaces around it
    assert opened is not None
    assert opened.session.workspace_id == "acme" and opened.session.expires_at == T0 + SESSION_MAX_AGE
    assert opened.session.csrf == csrf_token(opened.token) != opened.token
    with session_scope(engine) as s:
        [row] = s.scalars(select(ConsoleSessionRow)).all()
        stored = " ".join(str(getattr(row, c)) for c in ("token_sha256", "workspace_id", "key_id"))
    assert opened.token not in stored and key not in stored and key.split("_", 2)[2] not in stored
    found = session_for(engine, opened.token, now=T0 + dt.timedelta(minutes=5))
    assert found is not None and found.workspace_id == "acme"
    engine.dispose()


@pytest.mark.parametrize("key", ["", "tsk_nope", "Bearer x", "tsk_0123456789abcdef_" + "A" * 43, "x" * 5000])
def test_anything_but_a_valid_key_opens_nothing(sqlite_url: str, key: str) -> None:
    engine = open_store(sqlite_url)
    create_api_key(engine, "acme")
    assert sign_in(engine, key, now=T0) is None
    engine.dispose()


def test_a_session_ends_idle_at_its_age_at_sign_out_and_with_its_key(store_url: str) -> None:
    engine = open_store(store_url)
    made = create_api_key(engine, "acme")

    def fresh() -> str:
        opened = sign_in(engine, made.key, now=T0)
        assert opened is not None
        return opened.token

    idle = fresh()
    assert session_for(engine, idle, now=T0 + SESSION_IDLE - dt.timedelta(seconds=1)) is not None
    assert session_for(engine, idle, now=T0 + 2 * SESSION_IDLE - dt.timedelta(minutes=2)) is not None  # kept alive
    assert session_for(engine, idle, now=T0 + 4 * SESSION_IDLE) is None  # idle too long
    assert session_for(engine, idle, now=T0 + dt.timedelta(minutes=1)) is None  # and gone for good

    busy = fresh()
    at = T0
    while at + dt.timedelta(minutes=30) < T0 + SESSION_MAX_AGE:  # used every half hour
        at += dt.timedelta(minutes=30)
        assert session_for(engine, busy, now=at) is not None
    assert session_for(engine, busy, now=T0 + SESSION_MAX_AGE) is None  # a working day at most

    out = fresh()
    assert sign_out(engine, out) is True
    assert session_for(engine, out, now=T0) is None and sign_out(engine, out) is False

    revoked = fresh()
    revoke_api_key(engine, made.info.key_id)
    assert session_for(engine, revoked, now=T0) is None
    engine.dispose()


# --- the HTTP edge ------------------------------------------------------------------------------


class Browser:
    """A cookie-keeping client of the real app (ASGI in process), as a browser uses it."""

    def __init__(self, app: object, base: str) -> None:
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base,  # type: ignore[arg-type]
                                        follow_redirects=False)
        self.loop = asyncio.new_event_loop()

    def get(self, url: str, **kw: object) -> httpx.Response:
        return self.loop.run_until_complete(self.client.get(url, **kw))  # type: ignore[arg-type]

    def post(self, url: str, **kw: object) -> httpx.Response:
        return self.loop.run_until_complete(self.client.post(url, **kw))  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()

    def sign_in(self, key: str, next_url: str = "") -> httpx.Response:
        form = self.get("/console/sign-in")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        return self.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key, "next": next_url})

    def csrf(self, page: str = "/console/trainings") -> str:
        found = re.search(r'data-csrf="([0-9a-f]{64})"', self.get(page).text)
        assert found is not None
        return found.group(1)


@pytest.fixture
def served(tmp_path: Path, sqlite_url: str) -> Iterator[tuple[object, str]]:
    """The app on a fresh store (lifespan run), and a key of workspace ``acme``."""
    engine = open_store(sqlite_url)
    key = create_api_key(engine, "acme").key
    engine.dispose()
    app = create_app(sqlite_url, tmp_path / "home", jev_source=JEV)
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    try:
        yield app, key
    finally:
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


def _browser(served: tuple[object, str], base: str = "http://console.test") -> Browser:
    return Browser(served[0], base)


def test_signing_in_sets_an_httponly_samesite_cookie_that_holds_no_key(served: tuple[object, str]) -> None:
    b = _browser(served)
    key = served[1]
    r = b.sign_in(key, "/console/settings/usage")
    assert r.status_code == 303 and r.headers["location"] == "/console/settings/usage"
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("typestrict_session="))
    attrs = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path", "max-age"} <= attrs and "secure" not in attrs
    assert "samesite=lax" in cookie.lower() and "Max-Age=28" in cookie  # 8 hours, to the second
    assert key not in cookie and key[21:] not in cookie
    page = b.get("/console/settings/usage")
    assert page.status_code == 200 and key not in page.text
    assert page.headers["cache-control"] == "no-store"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "unsafe-eval" not in page.headers["content-security-policy"]
    b.close()


def test_over_tls_the_cookie_is_secure_and_host_prefixed(served: tuple[object, str]) -> None:
    b = _browser(served, "https://console.test")
    r = b.sign_in(served[1])
    cookie = next(c for c in r.headers.get_list("set-cookie") if "typestrict_session=" in c)
    assert cookie.startswith("__Host-typestrict_session=") and "; Secure" in cookie
    assert b.get("/console/trainings").status_code == 200
    b.close()


def test_a_wrong_key_is_refused_on_the_form_without_echoing_it(served: tuple[object, str]) -> None:
    b = _browser(served)
    wrong = served[1][:-4] + "AAAA"
    r = b.sign_in(wrong)
    assert r.status_code == 401 and "expected a valid, unrevoked workspace key" in r.text
    assert wrong not in r.text and wrong[21:] not in r.text
    assert not any("typestrict_session=" in c and "Max-Age=0" not in c for c in r.headers.get_list("set-cookie"))
    assert b.get("/console/trainings").status_code == 303
    b.close()


def test_every_form_needs_its_csrf_token(served: tuple[object, str]) -> None:
    b = _browser(served)
    b.sign_in(served[1])
    token = b.csrf()
    for bad in ({}, {"csrf_token": "0" * 64}, {"csrf_token": csrf_token("another session")}):
        r = b.post("/console/sign-out", data=bad)
        assert r.status_code == 403 and "CSRF" in r.text
    for pair in ((token, "0" * 64), ("0" * 64, token), (token, token)):  # one token, one header
        r = b.post("/console/sign-out", headers=[("X-CSRF-Token", pair[0]), ("X-CSRF-Token", pair[1])])
        assert r.status_code == 403 and "CSRF" in r.text, pair
    assert b.get("/console/trainings").status_code == 200  # still signed in
    r = b.post("/console/sign-out", headers={"X-CSRF-Token": token})  # HTMX sends it as a header
    assert r.status_code == 303 and r.headers["location"] == "/console/sign-in?signed_out=1"
    assert b.get("/console/trainings").status_code == 303  # the session is gone on the server too
    b.close()


def test_the_sign_in_form_has_its_own_token(served: tuple[object, str]) -> None:
    """Another site cannot post a key of its own to sign a visitor in (login CSRF)."""
    b = _browser(served)
    r = b.post("/console/sign-in", data={"csrf_token": "x" * 43, "key": served[1]})
    assert r.status_code == 403 and not any("typestrict_session=" in c for c in r.headers.get_list("set-cookie"))
    b.close()


def test_pages_send_a_signed_out_browser_to_the_sign_in_form(served: tuple[object, str]) -> None:
    b = _browser(served)
    r = b.get("/console/trainings?x=1")
    assert r.status_code == 303 and r.headers["location"] == "/console/sign-in?next=/console/trainings%3Fx%3D1"
    htmx = b.get("/console/trainings", headers={"HX-Request": "true"})
    assert htmx.status_code == 204 and htmx.headers["hx-redirect"].startswith("/console/sign-in")
    assert b.get("/").headers["location"] == "/console/"
    b.close()


def test_after_sign_in_only_a_console_path_is_followed(served: tuple[object, str]) -> None:
    b = _browser(served)
    r = b.sign_in(served[1], "//evil.example/steal")
    assert r.headers["location"] == "/console/trainings"
    b.close()


@pytest.mark.parametrize("target", ["/console/../v1/files", "/console/%2e%2e/v1/files", "/console/./../v1/files",
                                    "/console/studies/%2E%2E/%2E%2E/v1/workspaces/acme/usage"])
def test_a_next_path_that_climbs_out_of_the_console_is_not_followed(served: tuple[object, str], target: str) -> None:
    b = _browser(served)
    r = b.sign_in(served[1], target)
    assert r.status_code == 303 and r.headers["location"] == "/console/trainings"
    again = b.get(f"/console/sign-in?next={quote(target)}")  # signed in: straight to the page
    assert again.status_code == 303 and again.headers["location"] == "/console/trainings"
    b.close()


def test_the_apis_reads_answer_the_cookie_and_its_writes_do_not(served: tuple[object, str]) -> None:
    """The result page and its download link answered 401 to a browser (they needed a Bearer
    header): with the console's cookie they answer; a write still needs the key."""
    b = _browser(served)
    assert b.get("/v1/files").status_code == 401
    b.sign_in(served[1])
    assert b.get("/v1/files").status_code == 200
    assert b.get("/v1/workspaces/acme/usage").status_code == 200
    assert b.get("/v1/models/tr_none/page").status_code == 404  # authenticated: now "not found"
    assert b.get("/v1/models/tr_none/audit").status_code == 404
    write = b.loop.run_until_complete(b.client.put("/v1/files/x.csv", content=b"a,b\n"))
    assert write.status_code == 401  # no cross-site write through the cookie
    bad_header = b.get("/v1/files", headers={"Authorization": "Bearer nope"})
    assert bad_header.status_code == 401  # a header that is sent is the one that counts
    b.close()


def test_the_key_never_reaches_the_servers_log(tmp_path: Path, sqlite_url: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A real uvicorn server with its access log on, at debug level: the key is in no line."""
    import socket
    import threading
    import time

    import uvicorn

    engine = open_store(sqlite_url)
    key = create_api_key(engine, "acme").key
    engine.dispose()
    caplog.set_level(logging.DEBUG)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(sqlite_url, tmp_path / "home", jev_source=JEV),
                                           log_config=None, log_level="debug", access_log=True))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.05)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        for typed in (key[:-3] + "AAA", key):
            with httpx.Client(base_url=base, timeout=60) as c:
                form = c.get("/console/sign-in")
                token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
                assert token is not None
                c.post("/console/sign-in", data={"csrf_token": token.group(1), "key": typed})
                c.get("/console/trainings")
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
    assert "POST /console/sign-in" in caplog.text  # the access log was captured
    assert key[21:] not in caplog.text and key[21:-3] not in caplog.text


@pytest.mark.parametrize("target", ["/console/studies/✓", "/console/é", "/console/a\u2028b"])
def test_a_next_path_outside_latin1_is_followed_percent_encoded_also_by_htmx(
        served: tuple[object, str], target: str) -> None:
    """A signed-in browser's HTMX request for ``/console/sign-in?next=/console/studies/✓`` was a
    500 (the ``HX-Redirect`` header cannot hold ``✓``), and ``/console/é`` went out as a Latin-1
    byte. Now either header holds the path percent-encoded, as ``Location`` always did."""
    b = _browser(served)
    assert b.sign_in(served[1]).status_code == 303
    plain = b.get(f"/console/sign-in?next={quote(target)}")
    htmx = b.get(f"/console/sign-in?next={quote(target)}", headers={"HX-Request": "true"})
    assert plain.status_code == 303 and plain.headers["location"] == quote(target)
    assert htmx.status_code == 204 and htmx.headers["hx-redirect"] == quote(target), htmx.text[:300]
    b.close()
