"""Limits before work: the API refuses an oversized or slow request in O(the limit), and a study
form that plans too many candidates before building one.

Work is counted, not timed: the server's bytes read and parser events per connection
(``typestrict_pipeline.api.server.CONNECTIONS``) and the candidates built in this process
(``typestrict_pipeline.study.space.candidates_materialised``). The server is the real uvicorn
with the API's own options, in this process; requests are raw sockets (a client library would
refuse to send most of these). The timeouts are set short here; the assertions on them only
require that the connection ends, within a generous bound. The server's log (``server_log``)
holds no traceback and no error line, whatever was sent; a malformed request is answered by
the API's JSON 400, never uvicorn's plain text.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest

from typestrict_pipeline.api.server import CONNECTIONS, ConnectionRecord, RequestLimits
from typestrict_pipeline.study.space import candidates_materialised

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

MAX_BODY = 1024 * 1024
LIMITS = RequestLimits(max_header_bytes=16 * 1024, max_headers=100, header_timeout_s=1.0,
                       body_idle_timeout_s=1.0, body_timeout_s=3.0, max_body_bytes=MAX_BODY,
                       max_upload_bytes=MAX_BODY)
READ_SLACK = 512 * 1024  # what one read of the event loop may take beyond a bound (256 KiB per read)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("limits")
    url = f"sqlite:///{tmp / 'store.db'}"
    key = support.new_key(url, "limits", credits=1)
    # No rate limit: these tests send many requests with one key, and the bounds under test are
    # the server's.
    with support.ApiServer(url, tmp / "home", limits=LIMITS, max_body_bytes=MAX_BODY,
                           max_upload_bytes=MAX_BODY, rate_limit=None) as srv:
        srv.key = key
        yield srv


@pytest.fixture(scope="module")
def patient_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same server with timeouts no busy machine reaches: for the tests that send a body in
    many reads and count what it cost, where a 408 would answer instead."""
    tmp = tmp_path_factory.mktemp("patient")
    url = f"sqlite:///{tmp / 'store.db'}"
    key = support.new_key(url, "patient", credits=1)
    limits = dataclasses.replace(LIMITS, header_timeout_s=120.0, body_idle_timeout_s=120.0, body_timeout_s=300.0)
    with support.ApiServer(url, tmp / "home", limits=limits, max_body_bytes=MAX_BODY,
                           max_upload_bytes=MAX_BODY, rate_limit=None) as srv:
        srv.key = key
        yield srv


def _connect(server: Any) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    return sock


def _send_all(sock: socket.socket, chunks: Iterator[bytes]) -> int:
    """Send until the server stops reading (it closed); the bytes this client got out."""
    sent = 0
    try:
        for chunk in chunks:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:  # reset or broken pipe: the server closed the connection
        pass
    return sent


def _answer(sock: socket.socket) -> tuple[int, dict[str, Any], bytes]:
    """The status, headers and body of the one answer, read until the server closes."""
    data = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                break
            data += part
    except OSError:
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0].startswith("HTTP/") else 0
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return status, headers, body


def _newest() -> ConnectionRecord | None:
    """The newest connection record, or None (a marker for :func:`_record_after`)."""
    return CONNECTIONS[-1] if CONNECTIONS else None


def _record_after(before: ConnectionRecord | None) -> ConnectionRecord:
    """The record of the one connection made since ``before`` was the newest. ``CONNECTIONS``
    keeps only the last 256 records, so its length stops growing once the deque is full:
    compare the newest record itself, not the count."""
    deadline = time.monotonic() + 30
    while (not CONNECTIONS or CONNECTIONS[-1] is before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert CONNECTIONS and CONNECTIONS[-1] is not before, "the server recorded no new connection"
    return CONNECTIONS[-1]


def _refused_shape(body: bytes, code: str) -> str:
    answer = json.loads(body)
    assert set(answer) == {"error"} and answer["error"]["code"] == code, answer
    message: str = answer["error"]["message"]
    assert message.startswith("expected ")
    return message


def test_a_64_mib_header_line_is_refused_after_reading_its_first_kib(server: Any) -> None:
    before = _newest()
    sock = _connect(server)
    line = b"x" * (1024 * 1024)
    chunks = iter([b"GET /v1/openapi.json HTTP/1.1\r\nHost: t\r\nX-Big: ", *[line] * 64])
    sent = _send_all(sock, chunks)
    status, headers, body = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert status == 431 and headers.get("connection") == "close"
    assert "at most 16384 bytes" in _refused_shape(body, "request_header_too_large")
    assert record.refused == 431
    assert record.bytes_read <= LIMITS.max_header_bytes + READ_SLACK, record
    assert sent < 64 * 1024 * 1024  # the client could not push it all: nobody was reading


@pytest.mark.parametrize("count", [101, 4000, 100_000])
def test_too_many_headers_are_refused_after_the_hundredth(server: Any, count: int) -> None:
    before = _newest()
    sock = _connect(server)
    head = b"GET /v1/openapi.json HTTP/1.1\r\nHost: t\r\n" + b"".join(
        b"X-%d: v\r\n" % i for i in range(count)) + b"\r\n"
    _send_all(sock, iter([head[i:i + 4096] for i in range(0, len(head), 4096)]))
    status, _, body = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert status == 431 and record.refused == 431
    _refused_shape(body, "request_header_too_large")
    assert record.bytes_read <= LIMITS.max_header_bytes + READ_SLACK


def test_a_request_within_the_bounds_is_served(server: Any) -> None:
    head = {f"X-{i}": "v" * 100 for i in range(90)}
    r = httpx.get(f"{server.url}/v1/openapi.json", headers=head, timeout=60)
    assert r.status_code == 200 and r.json()["openapi"]


@pytest.mark.parametrize("prefix", [b"", b"GET /v1/openapi.json HTTP/1.1\r\nHost: t\r\n", b"G"],
                         ids=["nothing", "headers without their end", "one byte"])
def test_a_slow_client_is_cut_off_by_the_header_timeout(server: Any, prefix: bytes) -> None:
    before = _newest()
    sock = _connect(server)
    if prefix:
        sock.sendall(prefix)
    status, headers, body = _answer(sock)  # the server answers and closes by itself
    sock.close()
    assert status == 408 and headers.get("connection") == "close"
    assert "within 1 s" in _refused_shape(body, "request_timeout")
    assert _record_after(before).refused == 408


def test_a_body_that_stops_coming_is_cut_off(server: Any) -> None:
    before = _newest()
    sock = _connect(server)
    sock.sendall(b"POST /v1/studies/estimate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
                 + server.key.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\":")
    status, _, body = _answer(sock)
    sock.close()
    assert status == 408
    assert "keep coming" in _refused_shape(body, "request_timeout")
    assert _record_after(before).refused == 408


def test_a_console_form_whose_body_stops_coming_gets_a_page(server: Any) -> None:
    """The server's own refusal of a console address is a page a browser shows, not the API's
    JSON: a sign-in form whose body stopped coming got '{"error": ...}' in the browser."""
    sock = _connect(server)
    sock.sendall(b"POST /console/sign-in HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded"
                 b"\r\nContent-Length: 1000\r\n\r\nkey=tsk_")
    status, headers, body = _answer(sock)
    sock.close()
    assert status == 408 and headers.get("content-type") == "text/html; charset=utf-8", (headers, body[:200])
    page = body.decode()
    assert page.startswith("<!doctype html>") and "<h1>Request Timeout</h1>" in page, page
    assert "<p>expected " in page and "keep coming" in page and '<a href="/console">' in page
    assert "<script" not in page


def _assert_console_page(status: int, headers: dict[str, Any], body: bytes, expected: int, said: str) -> None:
    assert status == expected and headers.get("content-type") == "text/html; charset=utf-8", (headers, body[:200])
    page = body.decode()
    assert page.startswith("<!doctype html>") and f"<h1>{HTTPStatus(expected).phrase}</h1>" in page, page
    assert "<p>expected " in page and said in page and '<a href="/console">' in page and "<script" not in page


@pytest.mark.parametrize("line", [b"GET /console/studies?page=2 HTTP/1.1", b"GET http://t/%63onsole HTTP/1.1"],
                         ids=["origin form", "absolute form, percent-encoded"])
def test_a_console_request_whose_headers_are_refused_gets_a_page(server: Any, line: bytes) -> None:
    """Refused before its headers were whole (too many of them, or too slow), a console address
    got the API's JSON in the browser: its request line names the address, so it is a page."""
    sock = _connect(server)
    head = line + b"\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n"
    _send_all(sock, iter([head]))
    status, headers, body = _answer(sock)
    sock.close()
    _assert_console_page(status, headers, body, 431, "header lines")
    sock = _connect(server)
    sock.sendall(line + b"\r\nHost: t\r\n")  # and no end to the headers
    status, headers, body = _answer(sock)
    sock.close()
    _assert_console_page(status, headers, body, 408, "within 1 s")


def _chunked(total: int, size: int = 65536) -> Iterator[bytes]:
    yield b"%x\r\n" % size + b"[" + b" " * (size - 1) + b"\r\n"
    for _ in range(total // size - 1):
        yield b"%x\r\n" % size + b" " * size + b"\r\n"
    yield b"0\r\n\r\n"


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_a_body_over_the_limit_gets_the_same_413_and_is_not_read_to_its_end(server: Any, chunked: bool) -> None:
    before = _newest()
    total = 64 * 1024 * 1024
    sock = _connect(server)
    framing = b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % total
    head = (b"POST /v1/studies/estimate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + server.key.encode()
            + b"\r\nContent-Type: application/json\r\n" + framing + b"\r\n")
    body = _chunked(total) if chunked else iter([b" " * 65536] * (total // 65536))
    sent = _send_all(sock, iter([head, *body]))
    status, headers, answer = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert status == 413 and headers.get("connection") == "close"
    assert f"at most {MAX_BODY:,} bytes" in _refused_shape(answer, "payload_too_large")
    assert record.bytes_read <= MAX_BODY + READ_SLACK, record
    assert sent < total


@pytest.mark.parametrize("path", ["/console/trainings", "/console/settings/usage"])
def test_a_console_form_over_the_limit_gets_the_consoles_413_page(server: Any, path: str) -> None:
    """A browser's form or upload past the limit is told so on a console page (it got the API's
    JSON, which a person's browser shows as raw text), with the same words and connection: close."""
    total = MAX_BODY + 65536
    sock = _connect(server)
    head = (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            f"Content-Length: {total}\r\n\r\n").encode()
    _send_all(sock, iter([head, b" " * total]))
    status, headers, answer = _answer(sock)
    sock.close()
    assert status == 413 and headers.get("connection") == "close", answer[:300]
    assert headers.get("content-type", "").startswith("text/html"), headers
    page = answer.decode()
    assert "<h1" in page and f"expected a request body of at most {MAX_BODY:,} bytes" in page, page[:2000]
    assert "Traceback" not in page


THREE_GRIDS: dict[str, Any] = {"workflow": "wx", "start": "2012-01-01", "end": "2013-01-01", "tune_steps": 5, "eval_steps": 5,
               "holdout_steps": 5, "max_candidates": 2, "max_total_steps": 1000, "synthetic": True,
               "grid": [f"{name}=" + ",".join(str(i) for i in range(100)) for name in ("a", "b", "c")]}


@pytest.mark.parametrize("route", ["/v1/studies/estimate", "/v1/studies"])
def test_a_search_space_of_a_million_candidates_is_refused_before_one_is_built(server: Any, route: str) -> None:
    built = candidates_materialised()
    with server.client(server.key) as c:
        r = c.post(route, json=THREE_GRIDS)
        listed = c.get("/v1/studies")
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    assert "expected a search space of at most 100,000 planned candidates, got 1,000,000 (grid 100 × 100 × 100)" in message
    assert candidates_materialised() == built
    assert listed.json() == []


@pytest.mark.parametrize("space", [
    {"grid": [f"p{i}=" + ",".join(map(str, range(20))) for i in range(5)]},
    {"grid": [f"p{i}=" + ",".join(map(str, range(400))) for i in range(20)]},
    {"grid": ["a=" + ",".join(map(str, range(400)))], "random": ["r=0:1"], "random_draws": 1000},
], ids=["five 20-value grids", "twenty 400-value grids", "a grid times random draws"])
def test_other_spaces_too_large_are_refused_by_counting(server: Any, space: dict[str, Any]) -> None:
    built = candidates_materialised()
    with server.client(server.key) as c:
        r = c.post("/v1/studies/estimate", json={**THREE_GRIDS, **space})
    assert r.status_code == 422 and "planned candidates" in r.json()["error"]["message"], r.text
    assert candidates_materialised() == built


def test_the_cli_refuses_the_same_space_before_building_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from typestrict_pipeline.cli import main

    built = candidates_materialised()
    argv = ["study", "run", "wx", "--synthetic", "--start", "2012-01-01", "--end", "2013-01-01", "--tune-steps", "5",
            "--eval-steps", "5", "--holdout-steps", "5", "--max-candidates", "2", "--max-total-steps", "1000",
            "--store", f"sqlite:///{tmp_path / 'store.db'}"]
    grids: list[str] = THREE_GRIDS["grid"]
    for grid in grids:
        argv += ["--grid", grid]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "expected a search space of at most 100,000 planned candidates, got 1,000,000" in err
    assert "Traceback" not in err
    assert candidates_materialised() == built


# -- raw requests, and the server's log: no input leaves a traceback or an error line ---------

_CHUNKED = b"Transfer-Encoding: chunked\r\n"


_ESTIMATE_HEAD = "POST /v1/studies/estimate HTTP/1.1{eol}Host: t{eol}Authorization: Bearer {key}{eol}" \
                 "Content-Type: application/json{eol}"


def _estimate(server: Any, framing: bytes, eol: bytes = b"\r\n") -> bytes:
    """The head of a raw ``POST /v1/studies/estimate`` (a JSON route) with these framing headers,
    its lines ended by ``eol``."""
    return (_ESTIMATE_HEAD.format(eol=eol.decode(), key=server.key).encode() + framing.replace(b"\r\n", eol)
            + eol)


def _upload(server: Any, name: str, framing: bytes, body: bytes) -> bytes:
    """A raw ``PUT /v1/files/<name>``: the route writes the body as a file of the workspace."""
    key: str = server.key
    return (b"PUT /v1/files/" + name.encode() + b" HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
            + key.encode() + b"\r\n" + framing + b"\r\n" + body)


def _exchange(server: Any, request: bytes) -> tuple[int, dict[str, Any], bytes]:
    sock = _connect(server)
    _send_all(sock, iter([request]))
    answer = _answer(sock)
    sock.close()
    return answer


def _files(server: Any) -> list[str]:
    with server.client(server.key) as c:
        listed = c.get("/v1/files")
    assert listed.status_code == 200, listed.text
    return [f["name"] for f in listed.json()]


def _wait_read(before: ConnectionRecord | None, count: int) -> None:
    """Until the server has read ``count`` bytes on the connection made since ``before``."""
    record = _record_after(before)
    deadline = time.monotonic() + 60
    while record.bytes_read < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert record.bytes_read == count, record


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_log() -> Iterator[list[logging.LogRecord]]:
    """What the server logs during the test: uvicorn's loggers (they do not propagate to the root)
    and every other (the application's, asyncio's)."""
    handler = _Records()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _assert_quiet(server: Any, records: list[logging.LogRecord]) -> None:
    """Once every connection is closed and every request's task has ended, the log holds no
    traceback and no ERROR line (a warning such as uvicorn's "Invalid HTTP request" is fine)."""
    state = server.server.server_state
    deadline = time.monotonic() + 60
    while (state.connections or state.tasks) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not state.connections and not state.tasks, "the server is still busy with a request"
    text = "\n".join(logging.Formatter().format(record) for record in records)
    assert "Traceback" not in text, text
    assert not [r for r in records if r.levelno >= logging.ERROR or r.exc_info], text


# -- the head's end, wherever the reads split it ---------------------------------------------------

@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["CRLF", "bare LF"])
@pytest.mark.parametrize("split", [-1, -2, -3], ids=["before the last byte", "between the two line ends",
                                                     "before the blank line"])
def test_a_head_ended_across_two_reads_is_a_head_and_its_body_a_body(
        patient_server: Any, server_log: list[logging.LogRecord], eol: bytes, split: int) -> None:
    """A head whose blank line comes in two reads, then a 20 KiB body (more than the head bound):
    the body is read as a body, not counted as headers (which would be a 431)."""
    payload = json.dumps(THREE_GRIDS).encode().ljust(20 * 1024)
    head = _estimate(patient_server, b"Content-Length: %d\r\nConnection: close\r\n" % len(payload), eol)
    before = _newest()
    sock = _connect(patient_server)
    sock.sendall(head[:split])
    _wait_read(before, len(head[:split]))  # the server has read the first part on its own
    sock.sendall(head[split:] + payload)
    status, _, answer = _answer(sock)
    sock.close()
    assert status == 422, answer
    assert "planned candidates" in json.loads(answer)["error"]["message"]
    _assert_quiet(patient_server, server_log)


# -- a body that ends with its connection: no traceback --------------------------------------------

@pytest.mark.parametrize("framing,body", [
    (_CHUNKED, b"5\r\nhel"),
    (_CHUNKED, b"5\r\nhello\r\n"),
    (b"Content-Length: 100\r\n", b"a,b\n1,"),
], ids=["chunked, inside a chunk", "chunked, between chunks", "content-length"])
@pytest.mark.parametrize("route", ["json", "upload"])
def test_a_client_that_leaves_inside_its_body_leaves_no_traceback(
        patient_server: Any, server_log: list[logging.LogRecord], route: str, framing: bytes, body: bytes) -> None:
    before = _newest()
    name = f"left-{route}-{len(framing)}-{len(body)}.csv"
    head = _estimate(patient_server, framing) if route == "json" else _upload(patient_server, name, framing, b"")
    sock = _connect(patient_server)
    sock.sendall(head + body)
    _wait_read(before, len(head + body))  # the application is waiting for the rest
    sock.close()
    assert _record_after(before).refused is None
    _assert_quiet(patient_server, server_log)
    assert name not in _files(patient_server)


# -- malformed framing: the API's JSON 400, never uvicorn's plain text ----------------------------

_OPENAPI = b"GET /v1/openapi.json HTTP/1.1\r\nHost: t\r\n"
_CSV_CHUNKED = b"8\r\na,b\n1,2\n\r\n0\r\n\r\n"
_REQUEST_LINE = "a request line that is not 'METHOD /target HTTP/1.1'"
_HEADER_LINE = "a header line that is not 'Name: value'"
_CHUNK_LINE = "a chunk-size line that is not a size in hexadecimal followed by CRLF"
_LENGTH = "a Content-Length that is not a whole number of bytes"
_BOTH = "both a Content-Length and a Transfer-Encoding"
_CODING = "a Transfer-Encoding other than 'chunked'"

MALFORMED_HEADS: dict[str, tuple[bytes, str]] = {
    "request line: a word": (b"GARBAGE\r\n\r\n", _REQUEST_LINE),
    "request line: no version": (b"GET /v1/openapi.json\r\nHost: t\r\n\r\n", _REQUEST_LINE),
    "request line: a space in the target": (b"GET /v1/open api.json HTTP/1.1\r\nHost: t\r\n\r\n", _REQUEST_LINE),
    "request line: a NUL in the method": (b"G\x00T /v1/openapi.json HTTP/1.1\r\nHost: t\r\n\r\n", _REQUEST_LINE),
    "request line: a TLS handshake": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(32, 64)),
                                      _REQUEST_LINE),
    "no Host": (b"GET /v1/openapi.json HTTP/1.1\r\nAccept: */*\r\n\r\n", "an HTTP/1.1 request without a Host header"),
    "header name: a space": (_OPENAPI + b"Bad Name: v\r\n\r\n", _HEADER_LINE),
    "header name: a control character": (_OPENAPI + b"X-\x01: v\r\n\r\n", _HEADER_LINE),
    "header name: parentheses": (_OPENAPI + b"(x): v\r\n\r\n", _HEADER_LINE),
    "header name: empty": (_OPENAPI + b": v\r\n\r\n", _HEADER_LINE),
    "header line: no colon": (_OPENAPI + b"NoColon\r\n\r\n", _HEADER_LINE),
    "header value: a NUL": (_OPENAPI + b"X-A: a\x00b\r\n\r\n", _HEADER_LINE),
    "header line: folded first": (b"GET /v1/openapi.json HTTP/1.1\r\n folded\r\nHost: t\r\n\r\n", "starts with a space"),
}

MALFORMED_UPLOADS: dict[str, tuple[bytes, bytes, str]] = {  # framing headers, body, what the 400 names
    "chunk size: letters": (_CHUNKED, b"zz\r\nhello\r\n0\r\n\r\n", _CHUNK_LINE),
    "chunk size: letters after a good chunk": (_CHUNKED, b"5\r\nhello\r\nzz\r\n", _CHUNK_LINE),
    "chunk size: negative": (_CHUNKED, b"-1\r\nh\r\n0\r\n\r\n", _CHUNK_LINE),
    "chunk size: 0x": (_CHUNKED, b"0x5\r\nhello\r\n0\r\n\r\n", _CHUNK_LINE),
    "chunk size: two numbers": (_CHUNKED, b"5 5\r\nhello\r\n0\r\n\r\n", _CHUNK_LINE),
    "chunk size: an empty line": (_CHUNKED, b"\r\nhello\r\n0\r\n\r\n", _CHUNK_LINE),
    "chunk size: a bare line feed": (_CHUNKED, b"5\nhello\r\n0\r\n\r\n", _CHUNK_LINE),
    "chunk size: a 2 KiB extension": (_CHUNKED, b"5;" + b"x" * 2048 + b"\r\nhello\r\n0\r\n\r\n",
                                      "a chunk-size line longer than 1,024 bytes"),
    "chunk data: longer than its size": (_CHUNKED, b"3\r\nhello\r\n0\r\n\r\n", "a chunk whose data is not followed by CRLF"),
    "Content-Length: letters": (b"Content-Length: 1a\r\n", b"a,b\n1,2\n", _LENGTH),
    "Content-Length: a word": (b"Content-Length: eight\r\n", b"a,b\n1,2\n", _LENGTH),
    "Content-Length: negative": (b"Content-Length: -8\r\n", b"a,b\n1,2\n", _LENGTH),
    "Content-Length: 21 digits": (b"Content-Length: 1" + b"0" * 20 + b"\r\n", b"a,b\n1,2\n", _LENGTH),
    "Content-Length: two values": (b"Content-Length: 8, 9\r\n", b"a,b\n1,2\n", "two different Content-Length values"),
    "Content-Length: two headers": (b"Content-Length: 8\r\nContent-Length: 9\r\n", b"a,b\n1,2\n",
                                    "two different Content-Length values"),
    "both: Content-Length then chunked": (b"Content-Length: 8\r\n" + _CHUNKED, _CSV_CHUNKED, _BOTH),
    "both: chunked then Content-Length 0": (_CHUNKED + b"Content-Length: 0\r\n", _CSV_CHUNKED, _BOTH),
    "both: CHUNKED and Content-Length": (b"Transfer-Encoding: CHUNKED\r\nContent-Length: 8\r\n", _CSV_CHUNKED, _BOTH),
    "coding: gzip": (b"Transfer-Encoding: gzip\r\n", b"a,b\n1,2\n", _CODING),
    "coding: gzip, chunked": (b"Transfer-Encoding: gzip, chunked\r\n", _CSV_CHUNKED, _CODING),
    "coding: identity": (b"Transfer-Encoding: identity\r\n", b"a,b\n1,2\n", _CODING),
    "coding: chunked twice": (_CHUNKED + _CHUNKED, _CSV_CHUNKED, "more than one Transfer-Encoding header"),
}


def _assert_bad_request(status: int, headers: dict[str, Any], body: bytes, names: str) -> None:
    assert status == 400, (status, body)
    assert headers.get("content-type") == "application/json" and headers.get("connection") == "close"
    message = _refused_shape(body, "bad_request")
    assert message.startswith("expected a well-formed HTTP/1.1 request, got "), message
    assert names in message, message
    assert message.endswith(". Fix the request (an HTTP library or curl frames requests right)"), message


@pytest.mark.parametrize("case", list(MALFORMED_HEADS))
def test_a_malformed_head_is_the_apis_json_400(server: Any, server_log: list[logging.LogRecord], case: str) -> None:
    request, names = MALFORMED_HEADS[case]
    before = _newest()
    status, headers, body = _exchange(server, request)
    _assert_bad_request(status, headers, body, names)
    assert _record_after(before).refused == 400
    assert httpx.get(f"{server.url}/v1/openapi.json", timeout=60).status_code == 200  # the next connection
    _assert_quiet(server, server_log)


@pytest.mark.parametrize("case", list(MALFORMED_UPLOADS))
def test_a_malformed_body_framing_is_the_apis_json_400_and_writes_nothing(
        server: Any, server_log: list[logging.LogRecord], case: str) -> None:
    framing, payload, names = MALFORMED_UPLOADS[case]
    name = f"framing-{list(MALFORMED_UPLOADS).index(case)}.csv"
    before = _newest()
    status, headers, body = _exchange(server, _upload(server, name, framing, payload))
    _assert_bad_request(status, headers, body, names)
    assert _record_after(before).refused == 400
    assert name not in _files(server)  # the next connection is answered; nothing was written
    _assert_quiet(server, server_log)


def test_the_same_upload_well_framed_is_written(server: Any, server_log: list[logging.LogRecord]) -> None:
    """The control of the two tests above: their uploads, framed right, are written."""
    for name, framing, payload in [("framed-chunked.csv", _CHUNKED, _CSV_CHUNKED),
                                   ("framed-length.csv", b"Content-Length: 8\r\n", b"a,b\n1,2\n")]:
        status, _, body = _exchange(server, _upload(server, name, framing + b"Connection: close\r\n", payload))
        assert status == 201, body
        assert name in _files(server)
    _assert_quiet(server, server_log)


# -- chunked bodies: counted on the wire, each chunk's size checked before it is read ------------

_BEYOND = b"FFFFFFFFFFFFFFFFFFFF"  # 20 hexadecimal digits: 2^80 - 1 bytes


@pytest.mark.parametrize(("route", "body"), [
    ("json", _BEYOND + b"\r\n"),
    ("json", _BEYOND + b"\r\n" + b"x" * 1000),
    ("json", b"5\r\n[1, 2\r\n" + _BEYOND + b"\r\n"),
    ("json", b"1" + b"0" * 40 + b"\r\n"),
    ("json", b"%x\r\n" % (MAX_BODY - 4)),
    ("upload", _BEYOND + b";ext=1\r\n"),
    ("upload", b"4\r\na,b\n\r\n" + b"%X\r\n" % MAX_BODY),
], ids=["20 digits", "20 digits then data", "20 digits after a chunk", "41 digits", "just past the bound",
        "20 digits with an extension", "the bound after a chunk"])
def test_a_chunk_announced_beyond_the_body_bound_is_the_same_413_before_it_is_read(
        server: Any, server_log: list[logging.LogRecord], route: str, body: bytes) -> None:
    before = _newest()
    name = f"beyond-{len(body)}.csv"
    head = (_estimate(server, _CHUNKED) if route == "json"
            else _upload(server, name, _CHUNKED, b""))
    sock = _connect(server)
    sock.sendall(head + body)  # and keeps the connection open: the answer comes without more bytes
    status, headers, answer = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert status == 413 and headers.get("connection") == "close", answer
    message = _refused_shape(answer, "payload_too_large")
    assert f"expected a request body of at most {MAX_BODY:,} bytes (1 MiB), got more: a chunk " in message
    assert "announced after" in message
    assert record.refused == 413
    assert record.events <= 2  # the request, at most the one chunk before: the announced one was not read
    assert name not in _files(server)
    _assert_quiet(server, server_log)


def _tiny_chunks(count: int, extension: bytes = b"") -> Iterator[bytes]:
    """``count`` one-byte chunks of a JSON body (``[`` then spaces: it never ends), 4,096 a send."""
    yield b"1" + extension + b"\r\n[\r\n"
    chunk, left = b"1" + extension + b"\r\n \r\n", count - 1
    while left:
        yield chunk * min(left, 4096)
        left -= min(left, 4096)


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["CRLF head", "bare LF head"])
def test_300000_one_byte_chunks_are_refused_after_max_chunks_parser_events(
        patient_server: Any, server_log: list[logging.LogRecord], eol: bytes) -> None:
    before = _newest()
    count = 300_000
    sock = _connect(patient_server)
    _send_all(sock, iter([_estimate(patient_server, _CHUNKED, eol), *_tiny_chunks(count)]))
    status, headers, answer = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert status == 413 and headers.get("connection") == "close", answer
    message = _refused_shape(answer, "payload_too_large")
    assert message == (f"expected a chunked request body of at most {LIMITS.max_chunks:,} chunks, got more. "
                       "Send it in larger chunks, or with a Content-Length")
    assert record.refused == 413
    assert record.events <= LIMITS.max_chunks + 1  # the request and one event a chunk: not one more
    assert record.bytes_read <= 6 * LIMITS.max_chunks + READ_SLACK
    _assert_quiet(patient_server, server_log)


def test_chunk_framing_counts_toward_the_body_bound(patient_server: Any, server_log: list[logging.LogRecord]) -> None:
    """One-byte chunks with 1,000-byte extensions: 2 KiB of data, and the bound (1 MiB) reached by
    the framing alone, long before the chunk count."""
    before = _newest()
    sock = _connect(patient_server)
    extension = b";x=" + b"y" * 997
    sent = _send_all(sock, iter([_estimate(patient_server, _CHUNKED), *_tiny_chunks(8 * 4096, extension)]))
    status, _, answer = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert status == 413, answer
    message = _refused_shape(answer, "payload_too_large")
    assert f"at most {MAX_BODY:,} bytes (1 MiB), got more: " in message and "chunk framing included" in message
    assert record.bytes_read <= MAX_BODY + READ_SLACK, record
    assert record.events <= MAX_BODY // 1000 + 1  # every chunk the parser saw carried 1,000 bytes of framing
    assert sent < 8 * 4096 * 1006
    _assert_quiet(patient_server, server_log)


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["CRLF head", "bare LF head"])
def test_a_chunked_body_within_the_bounds_is_read_whatever_its_chunks(
        server: Any, server_log: list[logging.LogRecord], eol: bytes) -> None:
    """The control: the estimate's JSON in one-byte chunks (each with an extension), then a
    trailer, is read by the application, which answers it (here: a space too large to plan)."""
    payload = json.dumps(THREE_GRIDS).encode()
    body = b"".join(b"1;n=%d\r\n%c\r\n" % (i, byte) for i, byte in enumerate(payload)) + b"0\r\nX-T: 1\r\n\r\n"
    status, _, answer = _exchange(server, _estimate(server, _CHUNKED + b"Connection: close\r\n", eol) + body)
    assert status == 422, answer
    assert "planned candidates" in json.loads(answer)["error"]["message"]
    _assert_quiet(server, server_log)


# -- a request to upgrade: HTTP, within the bounds -------------------------------------------------

_UPGRADE = b"Connection: Upgrade, close\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" \
           b"Sec-WebSocket-Version: 13\r\n"


def test_a_request_to_upgrade_to_a_websocket_is_served_as_http_within_the_bounds(
        server: Any, server_log: list[logging.LogRecord]) -> None:
    """The API has no WebSocket route: asked to upgrade, the server answers as HTTP, in JSON, and
    the bounds still hold (a chunk announced beyond the body bound is the same 413). Handed to a
    WebSocket protocol, the request was a plain-text 403 from outside the bounded protocol."""
    status, headers, body = _exchange(server, _OPENAPI + _UPGRADE + b"\r\n")
    assert status == 200 and headers.get("content-type") == "application/json"
    assert json.loads(body)["openapi"]
    before = _newest()
    status, headers, body = _exchange(server, _estimate(server, _CHUNKED + _UPGRADE) + _BEYOND + b"\r\n")
    assert status == 413 and headers.get("content-type") == "application/json", body
    _refused_shape(body, "payload_too_large")
    assert _record_after(before).refused == 413
    _assert_quiet(server, server_log)


# -- every request on a connection: the same bounds for the second, pipelined or not ------------------

def _read_to_close(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server sends until it closes the connection, and whether it did (False: the
    socket's timeout ended the read instead)."""
    data = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                return data, True
            data += part
    except TimeoutError:
        return data, False
    except OSError:  # reset: the server closed with bytes of ours unread
        return data, True


def _split_answers(data: bytes) -> tuple[list[tuple[int, dict[str, str], bytes]], bytes]:
    """The complete answers at the start of ``data`` (each framed by its Content-Length), and what
    is left after them."""
    answers: list[tuple[int, dict[str, str], bytes]] = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        length = int(headers.get("content-length", "0"))
        if len(rest) < length:
            break
        answers.append((int(lines[0].split()[1]), headers, rest[:length]))
        data = rest[length:]
    return answers, data


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """The next ``count`` answers on a connection the server keeps open."""
    data = b""
    answers: list[tuple[int, dict[str, str], bytes]] = []
    while len(answers) < count:
        part = sock.recv(65536)
        assert part, f"the server closed the connection after {answers}"
        data += part
        answers, rest = _split_answers(data)
    assert len(answers) == count and not rest, (answers, rest)
    return answers


def _trailer(fields: int, size: int = 1) -> bytes:
    """A chunked JSON body (the estimate's, so it is answered 422) and a trailer of ``fields``
    fields of ``size`` bytes of value each."""
    payload = json.dumps(THREE_GRIDS).encode()
    return (b"%x\r\n" % len(payload) + payload + b"\r\n0\r\n"
            + b"".join(b"X-T%d: %s\r\n" % (i, b"v" * size) for i in range(fields)) + b"\r\n")


def _served(server: Any) -> list[tuple[bytes, int]]:
    """Requests within every bound, each with the status it is answered: a GET, a JSON body with a
    Content-Length, a chunked one with a trailer (the estimates: 422, a space too large)."""
    payload = json.dumps(THREE_GRIDS).encode()
    return [(_OPENAPI + b"\r\n", 200),
            (_estimate(server, b"Content-Length: %d\r\n" % len(payload)) + payload, 422),
            (_estimate(server, _CHUNKED) + _trailer(3), 422)]


_PIPELINED_REFUSALS: dict[str, tuple[int, str, str]] = {  # status, code, what the message says
    "too many headers": (431, "request_header_too_large", "at most 100 header lines"),
    "a 1 MiB header line": (431, "request_header_too_large", "at most 16384 bytes"),
    "a chunk announced past the bound": (413, "payload_too_large", "announced after 22 bytes of the body"),
    "Content-Length and Transfer-Encoding": (400, "bad_request", _BOTH),
    "a trailer of 101 fields": (431, "request_header_too_large", "at most 100 trailer fields"),
}


def _refused_request(server: Any, case: str) -> bytes:
    if case == "too many headers":
        return _OPENAPI + b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n"
    if case == "a 1 MiB header line":
        return _OPENAPI + b"X-Big: " + b"x" * (1024 * 1024) + b"\r\n\r\n"
    if case == "a chunk announced past the bound":
        return _estimate(server, _CHUNKED) + _BEYOND + b"\r\n"
    if case == "Content-Length and Transfer-Encoding":
        return _estimate(server, b"Content-Length: 8\r\n" + _CHUNKED) + b"8\r\n[1, 2, 3\r\n0\r\n\r\n"
    assert case == "a trailer of 101 fields"
    return _estimate(server, _CHUNKED) + _trailer(101)


@pytest.mark.parametrize("served", [1, 3], ids=["second request", "fourth request"])
@pytest.mark.parametrize("together", [True, False], ids=["in the same read", "after the answers"])
@pytest.mark.parametrize("case", list(_PIPELINED_REFUSALS))
def test_a_request_after_others_on_the_connection_is_bounded_as_if_alone(
        server: Any, server_log: list[logging.LogRecord], case: str, together: bool, served: int) -> None:
    """Requests within the bounds, then one past a bound on the same kept-open connection, sent
    with them (pipelined: in one read of the server's) or after their answers: the first ones are
    answered, the last gets the refusal it gets alone, and the connection is closed after it."""
    status, code, message = _PIPELINED_REFUSALS[case]
    refused = _refused_request(server, case)
    alone = _exchange(server, refused)
    assert alone[0] == status and message in _refused_shape(alone[2], code), alone

    requests = _served(server)[:served]
    before = _newest()
    sock = _connect(server)
    if together:
        _send_all(sock, iter([b"".join(request for request, _ in requests) + refused]))
        data, closed = _read_to_close(sock)
        answers, rest = _split_answers(data)
    else:
        sock.sendall(b"".join(request for request, _ in requests))
        first = _read_answers(sock, served)
        _send_all(sock, iter([refused]))
        data, closed = _read_to_close(sock)
        answers, rest = _split_answers(data)
        answers = first + answers
    sock.close()
    record = _record_after(before)
    assert [answer[0] for answer in answers] == [expected for _, expected in requests] + [status], answers
    assert not rest and closed  # the refusal is the last answer, and the server closed the connection
    last = answers[-1]
    assert last[1].get("connection") == "close" and last[1].get("content-type") == "application/json"
    assert last[2] == alone[2]  # the same refusal, word for word
    assert record.refused == status
    assert record.bytes_read <= sum(len(request) for request, _ in requests) + LIMITS.max_header_bytes + READ_SLACK
    _assert_quiet(server, server_log)


# -- a chunked body's trailer: the header bounds -------------------------------------------------------

@pytest.mark.parametrize("fields,size,status", [
    (100, 1, 422), (101, 1, 431), (4000, 1, 431), (1, 16 * 1024, 431), (1, 64 * 1024 * 1024, 431),
], ids=["100 fields", "101 fields", "4,000 fields", "a 16 KiB field", "a 64 MiB field"])
def test_a_chunked_bodys_trailer_is_bounded_as_headers_are(
        patient_server: Any, server_log: list[logging.LogRecord], fields: int, size: int, status: int) -> None:
    """Trailer fields after the last chunk: at most 100 lines and 16 KiB, counted on the wire as
    they arrive; past either, the 431 of headers past their bounds, and the connection closes."""
    before = _newest()
    head = _estimate(patient_server, _CHUNKED + b"Connection: close\r\n")
    payload = json.dumps(THREE_GRIDS).encode()
    body = b"%x\r\n" % len(payload) + payload + b"\r\n0\r\n"
    if size > 1024 * 1024:
        trailer = iter([b"X-T: ", *[b"v" * (1024 * 1024)] * (size // (1024 * 1024)), b"\r\n\r\n"])
    else:
        trailer = iter([b"".join(b"X-T%d: %s\r\n" % (i, b"v" * size) for i in range(fields)) + b"\r\n"])
    sock = _connect(patient_server)
    sent = _send_all(sock, iter([head + body, *trailer]))
    answer, headers, text = _answer(sock)
    sock.close()
    record = _record_after(before)
    assert answer == status, text
    if status == 422:
        assert "planned candidates" in json.loads(text)["error"]["message"]
    else:
        message = _refused_shape(text, "request_header_too_large")
        assert "trailer" in message and headers.get("connection") == "close"
        assert record.refused == 431
        assert record.bytes_read <= len(head + body) + LIMITS.max_header_bytes + READ_SLACK, record
        if size > 1024 * 1024:
            assert sent < size  # the client could not push it all: nobody was reading
    _assert_quiet(patient_server, server_log)


# -- a slow second request: the header timeout of a first ---------------------------------------------

def test_a_second_request_left_unfinished_in_the_same_read_gets_the_header_timeout(
        server: Any, server_log: list[logging.LogRecord]) -> None:
    """A request, and the start of a second one with it, then nothing: the first is answered, the
    second gets the 408 a first request's unfinished head gets (not the keep-alive's silent close)."""
    before = _newest()
    sock = _connect(server)
    sock.sendall(_OPENAPI + b"\r\n" + _OPENAPI + b"X-Slow: ")
    data, closed = _read_to_close(sock)
    sock.close()
    answers, rest = _split_answers(data)
    assert [answer[0] for answer in answers] == [200, 408] and not rest and closed, answers
    assert "within 1 s" in _refused_shape(answers[1][2], "request_timeout")
    assert _record_after(before).refused == 408
    _assert_quiet(server, server_log)


def test_a_second_request_sent_byte_by_byte_is_cut_off_by_the_header_timeout(
        server: Any, server_log: list[logging.LogRecord]) -> None:
    """A request and the first byte of a second one in one read, then the second's head a byte at
    a time: the header timeout (1 s here) ends it with the 408 long before its head is whole.
    Nothing is timed: the head is 4 KiB, a byte every 20 ms (80 s), and the test stops sending as
    soon as the server has answered."""
    second = _OPENAPI + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 90) for i in range(40)) + b"\r\n"
    before = _newest()
    sock = _connect(server)
    sock.sendall(_OPENAPI + b"\r\n" + second[:1])
    assert [answer[0] for answer in _read_answers(sock, 1)] == [200]
    sent = 1
    for byte in second[1:]:
        readable, _, _ = select.select([sock], [], [], 0.02)
        if readable:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        sent += 1
    data, closed = _read_to_close(sock)
    sock.close()
    answers, rest = _split_answers(data)
    assert [answer[0] for answer in answers] == [408] and not rest and closed, data
    assert "within 1 s" in _refused_shape(answers[0][2], "request_timeout")
    assert sent < len(second)
    record = _record_after(before)
    assert record.refused == 408 and record.bytes_read <= len(_OPENAPI) + 2 + sent  # (the last sent may be unread)
    _assert_quiet(server, server_log)


# -- a JSON body: the caller first, then the body, decoded off the event loop -------------------


def test_a_json_body_from_a_caller_without_a_key_is_refused_before_it_is_read(server: Any) -> None:
    """The 401 comes while the body is still on its way: the server read the head and at most
    one read's worth of the body, and decoded none of it (the old edge waited for the whole body,
    decoded it, and only then checked the key)."""
    declared = 900 * 1024
    for auth in (b"", b"Authorization: Bearer tsk_" + b"0" * 16 + b"_" + b"A" * 43 + b"\r\n"):
        before = _newest()
        sock = _connect(server)
        head = (b"POST /v1/studies/estimate HTTP/1.1\r\nHost: t\r\n" + auth
                + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % declared)
        sock.sendall(head + b"[" + b"{}," * 300)  # the rest never comes
        status, headers, answer = _answer(sock)
        sock.close()
        record = _record_after(before)
        assert status == 401 and headers.get("connection") == "close", answer
        assert "expected " in _refused_shape(answer, "unauthorized")
        assert record.bytes_read < 64 * 1024, record


@pytest.fixture(scope="module")
def big_body_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two workspaces on a server taking JSON bodies of the default 16 MiB."""
    tmp = tmp_path_factory.mktemp("bigbody")
    url = f"sqlite:///{tmp / 'store.db'}"
    keys = {name: support.new_key(url, name) for name in ("loud", "quiet")}
    limits = dataclasses.replace(LIMITS, header_timeout_s=120.0, body_idle_timeout_s=120.0, body_timeout_s=300.0,
                                 max_body_bytes=16 * 1024 * 1024)
    with support.ApiServer(url, tmp / "home", limits=limits, rate_limit=None) as srv:
        srv.keys = keys
        yield srv


def test_json_bodies_that_take_seconds_to_decode_do_not_hold_up_another_workspace(
        big_body_server: Any) -> None:
    """A million empty objects (3 MB, within the limit) take about a second to decode strictly.
    Three such bodies at once: they are decoded in worker threads (two at a time), so the other
    workspace's request is answered first, while they are still being decoded (on the event loop,
    it waited for the decoding to end)."""
    body = b"[" + b",".join([b"{}"] * 1_000_000) + b"]"
    order: list[str] = []
    sent = threading.Barrier(4)

    def loud() -> None:
        sock = _connect(big_body_server)
        sock.sendall(b"POST /v1/studies/estimate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
                     + big_body_server.keys["loud"].encode() + b"\r\nContent-Type: application/json\r\n"
                     + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        sent.wait(120)
        status, _, answer = _answer(sock)
        sock.close()
        order.append(f"loud {status} {answer[:200]!r}")

    threads = [threading.Thread(target=loud) for _ in range(3)]
    for thread in threads:
        thread.start()
    sent.wait(120)
    with big_body_server.client(big_body_server.keys["quiet"]) as c:
        r = c.get("/v1/files")
    order.append(f"quiet {r.status_code}")
    for thread in threads:
        thread.join(300)
    assert order[0] == "quiet 200", order
    assert len(order) == 4 and all(o.startswith("loud 422") and "expected" in o for o in order[1:]), order


def test_a_dataset_that_expands_past_the_upload_limit_is_refused_before_it_is_read(
        tmp_path: Path, server_log: list[logging.LogRecord]) -> None:
    """A 13 kB ``.csv.bz2`` (or an 18 kB Parquet file of one value on every row) held 100 MB of
    rows, and creating a training read every one: seconds of work and a gigabyte of memory from a
    request of a few kilobytes. Now a training's dataset holds at most the server's upload limit
    once decompressed, counted before it is read; nothing is charged. A small archive is a
    dataset as before."""
    import bz2
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    url = f"sqlite:///{tmp_path / 'store.db'}"
    csv, jev = support.make_dataset(tmp_path)
    key = support.new_key(url, "acme", credits=1)
    lines = csv.decode().splitlines()
    padded = "\n".join([lines[0]] + [line.replace("review number", "review " + "a" * 8_000 + " number")
                                     for line in lines[1:]]) + "\n"  # 1.6 MB of rows
    rows = [line.split(",") for line in padded.splitlines()[1:]]
    table = pa.table({name: [r[i] for r in rows] for i, name in enumerate(lines[0].split(","))})
    pq.write_table(table, tmp_path / "big.parquet", compression="zstd")
    files = {"big.csv.gz": gzip.compress(padded.encode()), "big.csv.bz2": bz2.compress(padded.encode()),
             "big.parquet": (tmp_path / "big.parquet").read_bytes(), "small.csv.gz": gzip.compress(csv)}
    assert all(len(data) < 100_000 for data in files.values()) and len(padded) > MAX_BODY
    with support.ApiServer(url, tmp_path / "home", jev_source={"kind": "file", "path": str(jev)},
                           max_upload_bytes=MAX_BODY, rate_limit=None) as srv, srv.client(key) as c:
        for name, data in files.items():
            assert c.put(f"/v1/files/{name}", content=data).status_code == 201, name
        for name in ("big.csv.gz", "big.csv.bz2", "big.parquet"):
            body = json.loads(json.dumps(support.TRAINING_BODY))
            body["dataset"]["path"] = name
            r = c.post("/v1/trainings", json=body)
            assert r.status_code == 422, (name, r.text)
            assert r.json()["error"]["message"] == (
                f"{name}: expected a dataset of at most {MAX_BODY:,} bytes once decompressed (the "
                f"server's upload limit), got more from a file of {len(files[name]):,} bytes. Send a "
                "smaller dataset, or split it into trainings of their own."), r.text
            assert c.get("/v1/trainings").json() == [] and c.get("/v1/workspaces/acme").json()["balance"] == 1
        body = json.loads(json.dumps(support.TRAINING_BODY))
        body["dataset"]["path"] = "small.csv.gz"
        made = c.post("/v1/trainings", json=body)
        assert made.status_code == 201, made.text
        assert c.get("/v1/workspaces/acme").json()["balance"] == 0
        _assert_quiet(srv, server_log)


def test_a_study_refused_because_another_is_in_flight_writes_no_candidate_first(tmp_path: Path) -> None:
    """While a study of the workflow was in flight, each ``POST /v1/studies`` of a 60,000-candidate
    space (a body of 2 KB) inserted its 60,000 candidate rows, then met the workflow's lock and
    rolled them back: about 10 s of the server's work for a 409. Counted: the statements inserting
    candidate rows that the server's process runs."""
    from sqlalchemy import Engine, event

    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = support.new_key(url, "busy", credits=1)
    small = {**THREE_GRIDS, "grid": ["a=1"]}
    large = {**THREE_GRIDS, "grid": ["a=" + ",".join(map(str, range(300))), "b=" + ",".join(map(str, range(200)))]}
    inserted: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO STUDY_CANDIDATES"):
            inserted.append(statement[:60])

    with support.ApiServer(url, tmp_path / "home", rate_limit=None) as srv, srv.client(key) as c:
        first = c.post("/v1/studies", json=small)
        assert first.status_code == 201, first.text
        event.listen(Engine, "before_cursor_execute", count)
        try:
            r = c.post("/v1/studies", json=large)
        finally:
            event.remove(Engine, "before_cursor_execute", count)
    assert r.status_code == 409, r.text
    assert f"got study {first.json()['id']} (" in r.json()["error"]["message"]
    assert inserted == [], f"{len(inserted)} inserts of candidate rows"
