"""``If-None-Match`` sent on two header lines is one list (RFC 9110 §5.3: a list field's lines are
combined), on every served file: the audit (through its route and through the known audit's fast
path), a model's files and the verifier. The routes read the first line only and the fast path the
last, so ``"x"`` then the file's ETag was a ``200`` with the whole file from one and a ``304``
from the other, depending on the lines' order. Probed on a real server (uvicorn, the API's
protocol)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_api_support import ApiServer, settled_model

MODEL = "tr_conditional"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, str]]:
    tmp: Path = tmp_path_factory.mktemp("conditional")
    url, key, _ = settled_model(tmp, MODEL, seed=9, keep_if_loses=True, weights=b"w" * 64)
    with ApiServer(url, tmp / "home", rate_limit=None) as server:
        yield server, key


@pytest.mark.parametrize("path", [f"/v1/models/{MODEL}/audit", f"/v1/models/{MODEL}/files/weights.bin",
                                  "/verify_audit.py"])
def test_if_none_match_on_two_lines_is_one_list(served: tuple[ApiServer, str], path: str) -> None:
    server, key = served
    with server.client(key) as c:
        etag = c.get(path).headers["etag"]
        for _ in range(2):  # the audit: its route first, then the fast path of an audit served before
            for lines in ([("If-None-Match", '"x"'), ("If-None-Match", etag)],
                          [("If-None-Match", etag), ("If-None-Match", '"x"')],
                          [("If-None-Match", '"x"'), ("If-None-Match", f'"y", W/{etag}')]):
                r = c.get(path, headers=lines)
                assert r.status_code == 304 and r.content == b"", (path, lines, r.status_code)
                assert r.headers["etag"] == etag
            other = c.get(path, headers=[("If-None-Match", '"x"'), ("If-None-Match", '"y"')])
            assert other.status_code == 200 and other.headers["etag"] == etag
