"""A method a path does not take: the ``405``'s ``Allow`` names every method of that path (RFC
9110 §15.5.6), in the API and the console alike, and its message names them and the method sent.

Starlette answered with the methods of the first route declared at the path only: ``Allow: POST``
on ``/v1/trainings`` (which ``GET`` lists), ``Allow: PUT`` on ``/v1/files/{name}`` (which
``DELETE`` removes), ``Allow: GET`` on ``/v1/workspaces/{id}/budget`` (which ``PUT`` sets) and on
``/console/sign-in`` (whose form is ``POST``ed), and never ``HEAD``; a client that followed it
never found the other methods. A ``HEAD`` on a ``POST``-only path was said to be a ``GET``.
Probed on a real server (uvicorn, the API's protocol)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_api_support import ApiServer, settled_model

MODEL = "tr_methods"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, str]]:
    tmp: Path = tmp_path_factory.mktemp("methods")
    url, key, _ = settled_model(tmp, MODEL, seed=3, keep_if_loses=True)
    with ApiServer(url, tmp / "home", rate_limit=None) as server:
        yield server, key


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("DELETE", "/v1/trainings", "GET, HEAD, POST"),
    ("PATCH", "/v1/files/a.csv", "DELETE, PUT"),
    ("POST", "/v1/files/a.csv", "DELETE, PUT"),
    ("PATCH", "/v1/workspaces/ws/budget", "GET, HEAD, PUT"),
    ("PUT", f"/v1/models/{MODEL}", "GET, HEAD"),
    ("OPTIONS", "/v1/studies/1", "GET, HEAD"),
    ("GET", f"/v1/trainings/{MODEL}/cancel", "POST"),
])
def test_the_apis_405_allows_every_method_of_the_path(served: tuple[ApiServer, str], method: str, path: str,
                                                      allow: str) -> None:
    server, key = served
    with server.client(key) as c:
        r = c.request(method, path)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow
    shown = allow if "," not in allow else f"one of {allow}"
    assert r.json() == {"error": {"code": "method_not_allowed", "message": (
        f"expected {shown} for {path!r}, got {method}. See /v1/openapi.json")}}
    for one in allow.split(", "):  # each method it names is one the path takes (no 405)
        with server.client(key) as c:
            assert c.request(one, path).status_code != 405, (one, path)


def test_a_head_on_a_post_only_path_is_said_to_be_a_head(served: tuple[ApiServer, str]) -> None:
    server, key = served
    with server.client(key) as c:
        head = c.head(f"/v1/trainings/{MODEL}/cancel")
        get = c.get(f"/v1/trainings/{MODEL}/cancel")
    assert head.status_code == get.status_code == 405 and head.headers["allow"] == "POST"
    assert head.content == b""
    assert "got GET." in get.json()["error"]["message"]
    assert int(head.headers["content-length"]) == len(get.content) + 1  # "got HEAD." is one longer


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("PATCH", "/console/trainings", "GET, HEAD, POST"),
    ("DELETE", "/console/sign-in", "GET, HEAD, POST"),
    ("POST", "/console/trainings/new", "GET, HEAD"),
    ("GET", "/console/sign-out", "POST"),
])
def test_the_consoles_405_page_allows_every_method_of_the_path(served: tuple[ApiServer, str], method: str,
                                                               path: str, allow: str) -> None:
    server, _ = served
    with server.client() as c:
        r = c.request(method, path)
    assert r.status_code == 405 and r.headers["content-type"].startswith("text/html"), r.text[:500]
    assert r.headers["allow"] == allow
    shown = allow if "," not in allow else f"one of {allow}"
    assert f"expected {shown} for &#39;{path}&#39;, got {method}. Use the links of the console" in r.text
