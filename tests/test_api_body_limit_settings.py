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
