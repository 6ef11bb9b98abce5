"""Request headers the API read one of, or read too late, probed on a real server (uvicorn, the
API's protocol):

* a JSON body whose ``Content-Type`` has two ``charset`` parameters
  (``charset=utf-8;charset=latin-1``) was read as UTF-8, the first picked: now a ``415`` naming
  the one that is not UTF-8, as a single ``charset=latin-1`` is;
* a JSON route's ``415`` (``text/plain``, ``charset=latin-1``) was decided after the whole body
  had arrived: the server waited for it (up to the body deadline), held it (up to 16 MiB) and
  even asked for it (``100 Continue``); now it answers on the request's head, before one byte of
  the body is sent;
* two ``Range`` headers on a served file were answered with the first one's bytes: now a ``400
  invalid_range`` saying to send the ranges in one header.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_api_support import ApiServer, settled_model

MODEL = "tr_headers"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, str]]:
    tmp: Path = tmp_path_factory.mktemp("headers")
    url, key, _ = settled_model(tmp, MODEL, seed=5, keep_if_loses=True, weights=b"w" * 100)
    with ApiServer(url, tmp / "home", rate_limit=None) as server:
        yield server, key


def test_a_second_charset_that_is_not_utf8_is_refused(served: tuple[ApiServer, str]) -> None:
    server, key = served
    with server.client(key) as c:
        r = c.post("/v1/studies/estimate", content=b'{"workflow": "x"}',
                   headers={"Content-Type": "application/json; charset=utf-8; charset=latin-1"})
        same = c.post("/v1/studies/estimate", content=b'{"workflow": "x"}',
                      headers={"Content-Type": "application/json; charset=latin-1"})
        twice_utf8 = c.post("/v1/studies/estimate", content=b'{"workflow": "x"}',
                            headers={"Content-Type": "application/json; charset=utf-8; charset=UTF-8"})
    assert r.status_code == 415, r.text
    assert r.json() == same.json() == {"error": {"code": "unsupported_media_type", "message": (
        "expected a JSON body encoded as UTF-8, got 'charset=latin-1' in its Content-Type. Send the JSON "
        "as UTF-8, with 'Content-Type: application/json' (or '; charset=utf-8')")}}
    assert twice_utf8.status_code == 422  # read as JSON: the schema's refusal of the body


def _answer_to_head(server: ApiServer, head: str) -> bytes:
    """The server's first bytes after the request's head alone (the body announced, never sent)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(head.encode())
        try:
            return s.recv(4096)
        except TimeoutError:
            return b"(no answer within 5 s: the server waits for the body)"


@pytest.mark.parametrize(("content_type", "expect"), [
    ("text/plain", ""),
    ("application/json; charset=latin-1", ""),
    ("text/plain", "Expect: 100-continue\r\n"),
])
def test_a_json_routes_415_is_answered_before_the_body_is_sent(served: tuple[ApiServer, str], content_type: str,
                                                                expect: str) -> None:
    server, key = served
    got = _answer_to_head(server, (
        f"POST /v1/studies/estimate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: 1000000\r\n{expect}\r\n"))
    assert got.startswith(b"HTTP/1.1 415 "), got[:300]
    assert b"unsupported_media_type" in got and b"100 Continue" not in got


def test_a_body_without_its_head_saying_so_keeps_its_answers(served: tuple[ApiServer, str]) -> None:
    """No body announced: the schema's "expected a value" as before; JSON as sent: read."""
    server, key = served
    with server.client(key) as c:
        empty = c.post("/v1/studies/estimate", headers={"Content-Type": "text/plain"})
        sent = c.post("/v1/studies/estimate", json={"workflow": "x"})
    assert empty.status_code == 422 and "(body): expected a value" in empty.json()["error"]["message"]
    assert sent.status_code == 422 and sent.json()["error"]["message"].startswith("start: expected a value")


@pytest.mark.parametrize("path", [f"/v1/models/{MODEL}/audit", f"/v1/models/{MODEL}/files/weights.bin"])
def test_two_range_headers_are_refused_not_the_first_served(served: tuple[ApiServer, str], path: str) -> None:
    server, key = served
    with server.client(key) as c:
        two = c.get(path, headers=[("Range", "bytes=0-1"), ("Range", "bytes=2-3")])
        one = c.get(path, headers={"Range": "bytes=2-3"})
    assert two.status_code == 400, (two.status_code, two.headers)
    assert two.json() == {"error": {"code": "invalid_range", "message": (
        "expected one Range header, got 2 ('bytes=0-1', 'bytes=2-3'). Send the ranges in one header "
        "('bytes=0-99,200-299'), or none to get the whole file")}}
    assert one.status_code == 206 and one.headers["content-range"].startswith("bytes 2-3/")
