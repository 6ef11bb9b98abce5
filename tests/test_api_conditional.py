"""Files served by a real API server (uvicorn, real HTTP): the audit, a retained model file and the
verifier are streamed from disk with the quoted SHA-256 of their bytes as ETag, a 304 with no body
for that ETag, a 200 for another; and reading them writes nothing to the store (a key), or at most
once a minute (a console session's idle clock), counted statement by statement."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

import typestrict_pipeline.verify_audit as verify_audit
from tests.test_api_support import ApiServer, settled_model
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.api.ratelimit import RateLimit
from typestrict_pipeline.console.sessions import sign_in
from typestrict_pipeline.console.web import COOKIE
from typestrict_pipeline.store import open_store

MODEL = "tr_served"
WEIGHTS = bytes(range(256)) * 300  # 76.8 kB: more than one chunk of the stream
WRITES = ("insert", "update", "delete", "replace")


class Served:
    def __init__(self, server: ApiServer, key: str, url: str, audit: bytes) -> None:
        self.server, self.key, self.url, self.audit = server, key, url, audit
        self.listeners: list[tuple[Engine, Any]] = []

    def client(self) -> httpx.Client:
        return self.server.client(self.key)

    def count_writes(self) -> list[str]:
        """Every INSERT/UPDATE/DELETE the server's own store engine sends from now on."""
        engine: Engine = self.server.app.state.ctx.engine
        seen: list[str] = []

        def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().split(" ", 1)[0].lower() in WRITES:
                seen.append(statement)

        event.listen(engine, "before_cursor_execute", note)
        self.listeners.append((engine, note))
        return seen


# a limit no test here reaches (the default's burst of 30 would answer 429), still applied
LIMIT = RateLimit(rate_per_s=1000.0, burst=1000)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("served")
    url, key, audit = settled_model(tmp, MODEL, seed=11, keep_if_loses=True, weights=WEIGHTS)
    with ApiServer(url, tmp / "home", rate_limit=LIMIT) as server:
        found = Served(server, key, url, audit)
        try:
            yield found
        finally:
            for engine_, note in found.listeners:
                event.remove(engine_, "before_cursor_execute", note)


def _check_conditional(c: httpx.Client, path: str, body: bytes) -> httpx.Response:
    sha = hashlib.sha256(body).hexdigest()
    first = c.get(path)
    assert first.status_code == 200 and first.content == body  # byte-identical to the file
    assert first.headers["etag"] == f'"{sha}"'
    assert first.headers["content-length"] == str(len(body))
    again = c.get(path, headers={"If-None-Match": f'"{sha}"'})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == f'"{sha}"'
    other = c.get(path, headers={"If-None-Match": f'"{hashlib.sha256(b"other").hexdigest()}"'})
    assert other.status_code == 200 and other.content == body
    # HEAD: the GET's status and headers (length, ETag) and no body; its 304 as the GET's
    head = c.head(path)
    assert head.status_code == 200 and head.content == b"", (head.status_code, head.content[:200])
    for name in ("etag", "content-length", "content-type", "content-disposition", "cache-control"):
        assert head.headers.get(name) == first.headers.get(name), name
    assert c.head(path, headers={"If-None-Match": f'"{sha}"'}).status_code == 304
    return first


def test_the_audit_is_streamed_with_its_sha256_as_etag(served: Served) -> None:
    with served.client() as c:
        first = _check_conditional(c, f"/v1/models/{MODEL}/audit", served.audit)
        assert first.headers["cache-control"] == "private, no-cache"
        assert first.headers["content-type"] == "application/json"
        assert first.headers["content-disposition"] == f'attachment; filename="{MODEL}.audit.json"'
        # a served audit is answered without the store: the ETag still never lets a request past
        # the key, nor another workspace's key to the model
        sha = hashlib.sha256(served.audit).hexdigest()
        with httpx.Client(base_url=served.server.url) as anon:
            assert anon.get(f"/v1/models/{MODEL}/audit",
                            headers={"If-None-Match": f'"{sha}"'}).status_code == 401
            assert anon.head(f"/v1/models/{MODEL}/audit").status_code == 401
            wrong = served.key[:-4] + ("AAAA" if not served.key.endswith("AAAA") else "BBBB")
            assert anon.get(f"/v1/models/{MODEL}/audit",
                            headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
        engine = open_store(served.url)
        try:
            other = create_api_key(engine, "other").key
        finally:
            engine.dispose()
        with served.server.client(other) as o:
            assert o.get(f"/v1/models/{MODEL}/audit").status_code == 404
            assert o.get(f"/v1/models/{MODEL}/audit").status_code == 404  # its key now known


def test_a_model_file_and_the_verifier_carry_their_sha256(served: Served) -> None:
    with served.client() as c:
        first = _check_conditional(c, f"/v1/models/{MODEL}/files/weights.bin", WEIGHTS)
        assert first.headers["cache-control"] == "private, no-cache"
        assert first.headers["content-type"] == "application/octet-stream"
        assert first.headers["content-disposition"] == 'attachment; filename="weights.bin"'
        verifier = _check_conditional(c, "/verify_audit.py", Path(verify_audit.__file__).read_bytes())
        assert verifier.headers["cache-control"] == "no-cache"
        assert verifier.headers["content-type"] == "text/x-python; charset=utf-8"
        assert verifier.headers["content-disposition"] == 'attachment; filename="verify_audit.py"'


def test_reading_with_a_key_writes_nothing_to_the_store(served: Served) -> None:
    """20 audit GETs, 20 verdicts and 20 model files by key: no INSERT, UPDATE or DELETE."""
    writes = served.count_writes()
    with served.client() as c:
        for _ in range(20):
            assert c.get(f"/v1/models/{MODEL}/audit").status_code == 200
            assert c.get(f"/v1/models/{MODEL}").status_code == 200
            assert c.get(f"/v1/models/{MODEL}/files/weights.bin").status_code == 200
    assert writes == []


def test_a_console_session_reading_writes_at_most_once_a_minute(served: Served) -> None:
    """A signed-in browser's reads reset its session's idle clock: written at most once a minute
    (``console.sessions._TOUCH_EVERY``), so 20 audit GETs make one UPDATE, not 20."""
    engine = open_store(served.url)
    try:
        opened = sign_in(engine, served.key, now=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=90))
    finally:
        engine.dispose()
    assert opened is not None
    writes = served.count_writes()
    with httpx.Client(base_url=served.server.url, cookies={COOKIE: opened.token}) as browser:
        for _ in range(20):
            got = browser.get(f"/v1/models/{MODEL}/audit")
            assert got.status_code == 200 and got.content == served.audit
    assert len(writes) == 1 and writes[0].lower().lstrip().startswith("update console_sessions")


def test_another_store_with_the_same_model_id_serves_its_own_audit(
        served: Served, tmp_path: Path) -> None:
    """Two servers in one process, each on its own store, the same model id and workspace name:
    an audit one served is never what the other answers."""
    with served.client() as c:
        assert c.get(f"/v1/models/{MODEL}/audit").content == served.audit
    url, key, audit = settled_model(tmp_path, MODEL, seed=12, keep_if_loses=True, weights=WEIGHTS)
    assert audit != served.audit
    with ApiServer(url, tmp_path / "home", rate_limit=LIMIT) as other, other.client(key) as c:
        for _ in range(2):  # the first fills its cache, the second is answered from it
            got = c.get(f"/v1/models/{MODEL}/audit")
            assert got.status_code == 200 and got.content == audit
            assert got.headers["etag"] == f'"{hashlib.sha256(audit).hexdigest()}"'
    with served.client() as c:
        assert c.get(f"/v1/models/{MODEL}/audit").content == served.audit


def test_a_file_kept_in_memory_answers_as_the_disk_does(tmp_path: Path) -> None:
    """A small file is sent from memory after its first read: a range is still a 206 of the right
    bytes, and a file replaced on disk (same size, new bytes) is served
    new, with its new ETag, never the kept bytes."""
    first, second = bytes(range(256)) * 40, bytes(reversed(range(256))) * 40
    url, key, _ = settled_model(tmp_path, "tr_kept", seed=5, keep_if_loses=True, weights=first)
    path = "/v1/models/tr_kept/files/weights.bin"
    with ApiServer(url, tmp_path / "home", rate_limit=LIMIT) as server, server.client(key) as c:
        for _ in range(2):  # read from disk, then from memory: the same answer
            got = c.get(path)
            assert got.status_code == 200 and got.content == first
            assert got.headers["etag"] == f'"{hashlib.sha256(first).hexdigest()}"'
            part = c.get(path, headers={"Range": "bytes=10-19"})
            assert part.status_code == 206 and part.content == first[10:20]
        copies = [p for p in tmp_path.rglob("weights.bin") if p.read_bytes() == first]
        assert copies
        for copy in copies:
            copy.write_bytes(second)
            stat = copy.stat()
            os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        got = c.get(path)
        assert got.status_code == 200 and got.content == second
        assert got.headers["etag"] == f'"{hashlib.sha256(second).hexdigest()}"'


@pytest.mark.parametrize("path", [f"/v1/models/{MODEL}/audit", f"/v1/models/{MODEL}/files/weights.bin",
                                  "/verify_audit.py"])
def test_a_range_that_cannot_be_served_is_refused_in_the_apis_shape(served: Served, path: str) -> None:
    """A bad ``Range`` was answered in Starlette's plain text ("Malformed range header.", "Range
    header: start must be less than end", a 416 with an empty body). Now the API's JSON error
    that says what was expected and what to do; a range of another unit is ignored (RFC 9110),
    and a good range is still a 206."""
    with served.client() as c:
        whole = c.get(path)
        size = len(whole.content)
        for sent in ("bytes=10-5", "bytes=a-b", "bytes=,", "bytes=0-0bytes=1-1"):
            r = c.get(path, headers={"Range": sent})
            assert r.status_code == 400 and r.headers["content-type"] == "application/json", (sent, r.text)
            assert r.json() == {"error": {"code": "invalid_range", "message": (
                f"expected a Range of bytes of the file (e.g. 'bytes=0-1023'), got {sent!r}. Fix the "
                "header, or send none to get the whole file")}}
        for sent in (f"bytes={size}-", "bytes=99999999999-99999999999"):
            r = c.get(path, headers={"Range": sent})
            assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{size}", (sent, r.text)
            assert r.json() == {"error": {"code": "range_not_satisfiable", "message": (
                f"expected a Range within the file's {size:,} bytes (the first is byte 0), got {sent!r}. "
                f"Ask for bytes before {size:,}, or send no Range to get the whole file")}}
        for sent in ("items=0-5", "garbage"):
            r = c.get(path, headers={"Range": sent})
            assert r.status_code == 200 and r.content == whole.content, sent
        part = c.get(path, headers={"Range": "bytes=3-7"})
        assert part.status_code == 206 and part.content == whole.content[3:8]
        assert part.headers["content-range"] == f"bytes 3-7/{size}"


@pytest.mark.parametrize("path", ["/v1/trainings", f"/v1/models/{MODEL}", "/v1/workspaces/ws", "/v1/studies",
                                  "/v1/openapi.json", "/console/sign-in", "/v1/no-such-route",
                                  "/v1/trainings?limt=1"])
def test_every_address_that_answers_get_answers_head(served: Served, path: str) -> None:
    """HEAD is the GET's status and headers with no body (RFC 9110 §9.3.2), on every list,
    resource, page and error, not only on the served files: it was a 405 everywhere else."""
    with served.client() as c:
        got, head = c.get(path), c.head(path)
    assert head.status_code == got.status_code and head.content == b"", (path, head.status_code, head.text[:300])
    for name in ("content-type", "content-length", "x-total-count", "link", "etag", "cache-control"):
        assert head.headers.get(name) == got.headers.get(name), (path, name)


def test_head_on_an_address_that_takes_no_get_is_its_405(served: Served) -> None:
    with served.client() as c:
        r = c.head(f"/v1/trainings/{MODEL}/predictions")
    assert r.status_code == 405 and r.content == b"" and "GET" not in r.headers.get("allow", ""), r.headers
