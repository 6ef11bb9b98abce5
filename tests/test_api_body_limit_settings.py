"""The server's body limits are the operator's settings: TYPESTRICT_MAX_UPLOAD_BYTES and
TYPESTRICT_MAX_BODY_BYTES, read when it starts, and the 413 names the one to raise.

The 413 told a customer to "ask the operator to raise the limit", but no server setting held
it: 256 MiB for an upload (a customer's 1-2 GB dataset could not be sent at all) and 16 MiB for a
JSON body (predictions of 2,000 test rows over 380 answers, 19.8 MB) were fixed in the code
(docs/api.md, "Uploads at customers' sizes").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_api_support import ApiServer, new_key


def test_the_operator_sets_the_upload_and_body_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPESTRICT_MAX_UPLOAD_BYTES", "4096")
    monkeypatch.setenv("TYPESTRICT_MAX_BODY_BYTES", "2048")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme")
    with ApiServer(url, tmp_path / "home", rate_limit=None) as server, server.client(key) as client:
        assert client.put("/v1/files/a.csv", content=b"x" * 4096).status_code == 201
        r = client.put("/v1/files/b.csv", content=b"x" * 4097)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["message"] == (
            "expected a request body of at most 4,096 bytes, got 4,097 bytes (its Content-Length). Send a "
            "smaller body (split the upload), or ask the operator to raise the server's TYPESTRICT_MAX_UPLOAD_BYTES")

        def chunked(n: int) -> Iterator[bytes]:
            yield b"x" * n

        r = client.put("/v1/files/c.csv", content=chunked(5000))  # no Content-Length: the server's own bound
        assert r.status_code == 413 and "TYPESTRICT_MAX_UPLOAD_BYTES" in r.json()["error"]["message"], r.text
        r = client.post("/v1/studies/estimate", content=b"{" + b" " * 2100 + b"}",
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 413, r.text
        assert r.json()["error"]["message"].endswith("ask the operator to raise the server's TYPESTRICT_MAX_BODY_BYTES")
        assert [f["name"] for f in client.get("/v1/files").json()] == ["a.csv"]


SETTINGS = ("TYPESTRICT_MAX_UPLOAD_BYTES", "TYPESTRICT_MAX_BODY_BYTES", "TYPESTRICT_BODY_TIMEOUT_S",
            "TYPESTRICT_WORKSPACE_MAX_BYTES",
            "TYPESTRICT_WORKSPACE_MAX_FILES", "TYPESTRICT_MAX_CSV_CELL_CHARS", "TYPESTRICT_MAX_JSONL_LINE_BYTES",
            "TYPESTRICT_MAX_DATA_FILE_BYTES")


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("value", ["2G", "0", "-1", "1e6", " 12", "1125899906842624", "٣"])
def test_a_bound_set_wrong_stops_the_server_as_it_starts_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, value: str) -> None:
    # Each was read as its default without a word: an operator who set TYPESTRICT_MAX_UPLOAD_BYTES=2G
    # to take a customer's 2 GB dataset kept 256 MiB, and a quota of "20GiB" stayed 10 GiB.
    from typestrict_pipeline.api.app import create_app
    from typestrict_pipeline.errors import InputError

    monkeypatch.setenv(setting, value)
    with pytest.raises(InputError) as refused:
        create_app(f"sqlite:///{tmp_path / 'store.db'}", tmp_path, jev_source={"kind": "file", "path": "j.jsonl"})
    said = str(refused.value)
    assert said.startswith(f"expected {setting} a whole number from 1 to 1,125,899,906,842,623 in ASCII digits, "
                           f"got {value!r}. Set it to a whole number such as "), said
    assert said.endswith("(the default), or unset it for the default."), said


def test_typestrict_api_with_a_bound_set_wrong_exits_2_before_it_serves(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    jev = tmp_path / "jev.jsonl"
    jev.write_text("", encoding="utf-8")
    env = {**os.environ, "TYPESTRICT_MAX_UPLOAD_BYTES": "2G"}
    done = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "api", "--home", str(tmp_path),
                           "--jev-source", json.dumps({"kind": "file", "path": str(jev)}), "--new-store", "--port", "1"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "expected TYPESTRICT_MAX_UPLOAD_BYTES a whole number from 1" in done.stderr, done.stderr
    assert "got '2G'" in done.stderr and "Traceback" not in done.stderr
    assert "serving" not in done.stdout + done.stderr


def test_an_empty_bound_is_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from typestrict_pipeline.files import bound_from_env

    monkeypatch.setenv("TYPESTRICT_MAX_BODY_BYTES", "")
    assert bound_from_env("TYPESTRICT_MAX_BODY_BYTES", 16) == 16


def test_the_operator_sets_how_long_a_body_may_take_and_the_408_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body that keeps coming but not fast enough ends at the whole-body deadline (300 s unless
    the operator sets TYPESTRICT_BODY_TIMEOUT_S): the 408 says so and names the setting. Before,
    the deadline was fixed in the code, so an operator who raised the upload limit to take a
    customer's 2 GB file still cut every upload slower than 7 MB/s, and the 408 said "Send the
    body at once"."""
    import contextlib
    import json
    import socket
    import time

    monkeypatch.setenv("TYPESTRICT_BODY_TIMEOUT_S", "2")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme")
    with ApiServer(url, tmp_path / "home", rate_limit=None) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        sock.sendall(b"PUT /v1/files/slow.csv HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key.encode()
                     + b"\r\nContent-Length: 100000\r\n\r\n")
        started, answer = time.monotonic(), b""
        sock.settimeout(0.25)
        while time.monotonic() - started < 60 and b"\r\n\r\n{" not in answer:
            with contextlib.suppress(OSError):  # (the server closed after answering: read what it said)
                sock.sendall(b"a,b\n")  # a few bytes every quarter second: never idle for 30 s
            try:
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
        sock.settimeout(10)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
        sock.close()
        waited = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:500]
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert error["message"] == (
        "expected the whole request body within 2 s, got it still arriving then. Send it faster or in "
        "smaller parts (split the upload), or ask the operator to raise the server's TYPESTRICT_BODY_TIMEOUT_S")
    assert 1.5 < waited < 30, waited
