"""Messages a customer can act on, on a real server: JSON errors with the line and the column,
patterns as written, a 401 that says what is wrong (without telling which key ids exist),
duplicate keys refused, money as a JSON number or a decimal string read exactly, 415, 413 with the
limit and the size, DELETE for uploads, and the key commands that never print a secret nor write
to a home that is not the server's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from typestrict_pipeline.api.keys import create_api_key, revoke_api_key
from typestrict_pipeline.cli import main as cli_main
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("messages")
    url = f"sqlite:///{tmp / 'store.db'}"
    csv, jev = support.make_dataset(tmp)
    key = support.new_key(url, "acme", credits=2)
    # No rate limit: these tests send dozens of requests with one key back to back, and whether
    # the default bucket (10 a second) refilled in between depended on how busy the machine was
    # (a 429 instead of the answer under test with `-n 2`). The limit has its own tests.
    with support.ApiServer(url, tmp / "home", jev_source={"kind": "file", "path": str(jev)},
                           max_body_bytes=4_000, rate_limit=None) as server:
        with server.client(key) as c:
            assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        yield {"server": server, "key": key, "url": url, "tmp": tmp}


def _client(api: dict[str, Any], **headers: str) -> httpx.Client:
    return httpx.Client(base_url=api["server"].url, headers=headers, timeout=120)


def _error(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    message: str = body["error"]["message"]
    assert "Traceback" not in message
    return message


def test_a_truncated_body_is_located_by_line_and_column(api: dict[str, Any]) -> None:
    body = json.dumps(support.TRAINING_BODY, indent=2)
    cut = body[: body.index('"decisions"') + 20]
    with api["server"].client(api["key"]) as c:
        r = c.post("/v1/trainings", content=cut.encode(), headers=JSON)
    message = _error(r)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
    line = cut.count("\n") + 1
    assert message.startswith(f"request body, line {line}, column "), message
    assert "expected valid JSON, got invalid JSON" in message and "Fix the JSON syntax" in message
    assert "json decode error" not in message


def test_a_pattern_is_shown_as_written(api: dict[str, Any]) -> None:
    with api["server"].client(api["key"]) as c:
        r = c.put("/v1/files/-bad~name.csv", content=b"x")
    assert r.status_code == 422
    message = _error(r)
    assert "name (in the path): expected a string matching the pattern '^[A-Za-z0-9_-][A-Za-z0-9_.-]*$'" in message
    assert "got '-bad~name.csv'" in message


def test_a_duplicate_key_is_refused_at_the_edge_and_nothing_is_charged(api: dict[str, Any]) -> None:
    text = ('{"dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},\n'
            ' "decisions": [{"name": "sentiment", "question": "Positive?", "answer_column": "label",'
            ' "answers": ["yes", "no"]}],\n'
            ' "options": {"keep_if_loses": false},\n'
            ' "options": {"keep_if_loses": true}}')
    with api["server"].client(api["key"]) as c:
        before = c.get("/v1/workspaces/acme").json()["balance"]
        r = c.post("/v1/trainings", content=text.encode(), headers=JSON)
        assert c.get("/v1/workspaces/acme").json()["balance"] == before
        assert c.get("/v1/trainings").json() == []
    assert r.status_code == 422
    assert _error(r).startswith("request body, line 4, column 2: expected each key once in an object, "
                                "got the key 'options' twice")


def test_money_is_a_json_number_or_a_decimal_string_never_a_binary_float(api: dict[str, Any]) -> None:
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.workspace import set_workspace

    engine = open_store(api["url"])
    try:
        set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=1)
    finally:
        engine.dispose()
    with api["server"].client(api["key"]) as c:
        for sent, micro in ((0.05, 50_000), ("0.05", 50_000), (20, 20_000_000), ("1000000", 1_000_000_000_000),
                            (0.000001, 1)):
            r = c.put("/v1/workspaces/acme/budget", json={"budget_usd": sent})
            assert r.status_code == 200, (sent, r.text)
            assert r.json()["budget_micro_usd"] == micro, sent
        # 0.1 as a binary float, but not as written: more than 6 decimals, so refused.
        r = c.put("/v1/workspaces/acme/budget", content=b'{"budget_usd": 0.1000000000000000055511151231257827}',
                  headers=JSON)
        assert r.status_code == 422, r.text
        assert "at most 6 decimals" in _error(r)
        assert c.get("/v1/workspaces/acme/budget").json()["budget_micro_usd"] == 1  # unchanged
        # The study form takes it the same way.
        form = {"workflow": "wx", "start": "2012-01-01", "end": "2012-07-01", "tune_steps": 10,
                "eval_steps": 10, "holdout_steps": 10, "folds": 2, "grid": ["skill=0.5,0.6"],
                "max_candidates": 2, "max_total_steps": 1000, "synthetic": True}
        for budget in (0.05, "0.05"):
            r = c.post("/v1/studies/estimate", json={**form, "budget_usd": budget})
            assert r.status_code == 422 and "no completed backtest" in _error(r)  # a number, accepted as money


def test_a_wrong_content_type_is_415(api: dict[str, Any]) -> None:
    body = json.dumps(support.TRAINING_BODY).encode()
    with api["server"].client(api["key"]) as c:
        for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {}):
            r = c.post("/v1/trainings", content=body, headers=headers)
            assert r.status_code == 415, (headers, r.text)
            assert r.json()["error"]["code"] == "unsupported_media_type"
            assert "expected a JSON body with 'Content-Type: application/json'" in _error(r)
        assert c.post("/v1/studies/estimate", content=b"{}", headers={"content-type": "application/merge-patch+json"}
                      ).status_code == 422  # a JSON type: read, then validated


def test_a_too_large_body_says_the_limit_and_the_size(api: dict[str, Any]) -> None:
    body = json.dumps({"name": "x" * 5_000}).encode()
    with api["server"].client(api["key"]) as c:
        r = c.post("/v1/studies/estimate", content=body, headers=JSON)

        def chunks() -> Iterator[bytes]:
            for _ in range(10):
                yield b" " * 1_000

        streamed = c.post("/v1/studies/estimate", content=chunks(), headers=JSON)
    assert r.status_code == 413
    assert _error(r).startswith(f"expected a request body of at most 4,000 bytes, got {len(body):,} bytes "
                                "(its Content-Length)")
    assert streamed.status_code == 413
    assert "expected a request body of at most 4,000 bytes, got more: " in _error(streamed)


def test_an_upload_can_be_deleted(api: dict[str, Any]) -> None:
    with api["server"].client(api["key"]) as c:
        assert c.put("/v1/files/old.csv", content=b"a,b\n").status_code == 201
        assert c.delete("/v1/files/old.csv").status_code == 204
        assert "old.csv" not in [f["name"] for f in c.get("/v1/files").json()]
        again = c.delete("/v1/files/old.csv")
        assert again.status_code == 404 and "expected a file" in _error(again)


def test_a_401_says_what_is_wrong_and_never_which_ids_exist(api: dict[str, Any]) -> None:
    engine = open_store(api["url"])
    try:
        revoked = create_api_key(engine, "acme").key
        revoke_api_key(engine, revoked[4:20])
    finally:
        engine.dispose()
    key = api["key"]
    path = "/v1/workspaces/acme"
    seen: dict[str, str] = {}
    cases = {
        "missing": {},
        "scheme": {"Authorization": f"Basic {key}"},
        "tab": {"Authorization": f"Bearer\t{key}"},
        "bare key": {"Authorization": key},
        "empty": {"Authorization": "Bearer"},
        "malformed": {"Authorization": "Bearer not-a-key"},
        "unknown id": {"Authorization": f"Bearer tsk_{'0' * 16}_{key[21:]}"},
        "wrong secret": {"Authorization": f"Bearer {key[:21]}{'A' * 43 if not key.endswith('A' * 43) else 'B' * 43}"},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        "revoked id, wrong secret": {"Authorization": f"Bearer {revoked[:21]}{'C' * 43}"},
    }
    for name, headers in cases.items():
        with _client(api, **headers) as c:
            r = c.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", name
        seen[name] = _error(r)
        assert key[21:] not in r.text and revoked[21:] not in r.text, name
    assert "got no Authorization header" in seen["missing"]
    assert "expected the Bearer scheme" in seen["scheme"] and "'Basic'" in seen["scheme"]
    assert "got 'Bearer' followed by something other than one space" in seen["tab"]  # was "the 'another' scheme"
    assert "got no scheme (a value that is not a word)" in seen["bare key"]
    assert "expected an API key after 'Bearer '" in seen["empty"]
    assert "expected an API key of the form tsk_<16 hex>_<43 characters>, got a value of 9 characters" in seen["malformed"]
    assert "got one it does not know" in seen["unknown id"]
    assert "got a key revoked on" in seen["revoked"]
    # An existing id with a wrong secret reads exactly like an id that does not exist, revoked or not.
    assert seen["wrong secret"] == seen["unknown id"] == seen["revoked id, wrong secret"]
    assert len({seen[n] for n in ("missing", "scheme", "empty", "malformed", "unknown id", "revoked")}) == 6


def test_api_key_revoke_takes_an_id_or_a_key_and_never_prints_a_secret(
    api: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    url = api["url"]
    engine = open_store(url)
    try:
        one, two = create_api_key(engine, "acme").key, create_api_key(engine, "acme").key
    finally:
        engine.dispose()
    assert cli_main(["api-key", "revoke", one, "--store", url]) == 0
    out = capsys.readouterr()
    assert f"API key {one[4:20]} of workspace acme: revoked" in out.out and one[21:] not in out.out + out.err
    assert cli_main(["api-key", "revoke", two[4:20], "--store", url]) == 0
    capsys.readouterr()
    for bad in (two[:-1], "tsk_" + two[4:20] + "_short", two + "x"):
        assert cli_main(["api-key", "revoke", bad, "--store", url]) == 2
        err = capsys.readouterr().err
        assert f"got a value of {len(bad)} characters that is neither" in err
        assert two[21:30] not in err and two[21:] not in err
    assert cli_main(["api-key", "revoke", "tsk_" + "f" * 16 + "_" + "A" * 43, "--store", url]) == 2
    assert f"expected an API key with id {'f' * 16}, got none" in capsys.readouterr().err
    for k in (one, two):
        with _client(api, Authorization=f"Bearer {k}") as c:
            assert c.get("/v1/workspaces/acme").status_code == 401


def test_key_commands_refuse_a_home_that_is_not_the_servers(tmp_path: Path) -> None:
    """Run from another folder: no store is made there unless asked, and the message says why."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TYPESTRICT_HOME", "TYPESTRICT_STORE_URL")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # this checkout's code, from any folder
    cli = [sys.executable, "-m", "typestrict_pipeline.cli"]
    done = subprocess.run([*cli, "api-key", "create", "acme"], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert "expected the store of your server's home, got no store at " in done.stderr
    assert "(the default home, ./.typestrict of this folder" in done.stderr and "--new-store" in done.stderr
    assert not (elsewhere / ".typestrict").exists()
    for argv in (["credits", "grant", "acme", "1", "--reference", "x"], ["api-key", "list", "acme"],
                 ["api-key", "revoke", "0" * 16]):
        other = subprocess.run([*cli, *argv], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
        # a write says it would start a new store; a read (`list`) that there is none to read
        assert other.returncode == 2 and str(elsewhere / ".typestrict" / "store.db") in other.stderr, argv
    assert not (elsewhere / ".typestrict").exists()
    told = subprocess.run([*cli, "api-key", "create", "acme", "--new-store"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300)
    assert told.returncode == 0 and told.stdout.strip().splitlines()[-1].startswith("tsk_")
    engine = open_store(f"sqlite:///{elsewhere / '.typestrict' / 'store.db'}")
    try:
        assert CreditLedger(engine).balance("acme") == 0
    finally:
        engine.dispose()


def test_a_charset_other_than_utf8_is_415_and_utf8_is_read(api: dict[str, Any]) -> None:
    body = json.dumps({"name": "x"}).encode("utf-16")
    with api["server"].client(api["key"]) as c:
        for charset in ("utf-16", "latin-1", "UTF-32"):
            r = c.post("/v1/studies/estimate", content=body,
                       headers={"content-type": f"application/json; charset={charset}"})
            assert r.status_code == 415, (charset, r.text)
            message = _error(r)
            assert f"expected a JSON body encoded as UTF-8, got 'charset={charset}'" in message
            assert "Send the JSON as UTF-8" in message
        for charset in ("utf-8", "UTF-8", '"utf-8"'):
            r = c.post("/v1/studies/estimate", content=b"{}",
                       headers={"content-type": f"application/json; charset={charset}"})
            assert r.status_code == 422 and "workflow: expected a value" in _error(r), (charset, r.text)


def test_a_caller_without_a_valid_key_is_401_before_its_body_is_read(api: dict[str, Any]) -> None:
    """The key is checked first: a body that is not JSON, not UTF-8 or of another type is never
    looked at for a caller the API does not know (its answer is the 401, not the body's 415/422)."""
    bodies = [(b"{\"a\": 1, \"a\": 2}", JSON), (b"[1, 2", JSON), (b"\xff\xfe", JSON),
              (b"{}", {"content-type": "text/plain"}), (b"{}", {"content-type": "application/json; charset=utf-16"})]
    for auth in ({}, {"Authorization": "Bearer not-a-key"}):
        with _client(api, **auth) as c:
            for body, headers in bodies:
                r = c.post("/v1/studies/estimate", content=body, headers=headers)
                assert r.status_code == 401, (auth, body, r.text)
                assert "expected " in _error(r) and r.headers["www-authenticate"] == "Bearer"


def test_a_dataset_of_200000_columns_gets_a_short_422_listing_twenty(api: dict[str, Any]) -> None:
    names = [f"c{i}" for i in range(200_000)]
    wide = (",".join(names) + "\n" + ",".join("1" for _ in names) + "\n").encode()
    body = json.loads(json.dumps(support.TRAINING_BODY))
    body["dataset"]["path"] = "wide.csv"
    with api["server"].client(api["key"]) as c:
        assert c.put("/v1/files/wide.csv", content=wide).status_code == 201
        before = c.get("/v1/trainings").json()
        r = c.post("/v1/trainings", json=body)
        after = c.get("/v1/trainings").json()
    assert r.status_code == 422, r.text[:500]
    message = _error(r)
    assert "no such column; the file has ['c0', 'c1', " in message and "… and 199,980 more]" in message
    assert len(r.content) < 2_000 and after == before


@pytest.mark.parametrize(("method", "path", "body", "said"), [
    ("POST", "/v1/backtests", {"workflow": 1.5}, "workflow: expected a string, got 1.5."),
    ("POST", "/v1/datasets", {"name": None}, "name: expected a string, got null."),
    ("POST", "/v1/trainings", [], "(body): expected a JSON object, got []."),
    ("POST", "/v1/trainings", {"dataset": "reviews.csv"}, "dataset: expected a JSON object, got 'reviews.csv'."),
    # a training of this workspace (a missing one is a 404 before its body is checked)
    ("POST", "/v1/trainings/{training}/predictions", {"predictions": {}}, "predictions: expected a JSON array, got {}."),
    ("PUT", "/v1/workspaces/acme/budget", {"budget_usd": True},
     "budget_usd: expected a decimal number or a string, got true."),
    ("PUT", "/v1/workspaces/acme/budget", {"budget_usd": [0.5]},
     "budget_usd: expected a decimal number or a string, got [0.5]."),
])
def test_a_value_of_the_wrong_json_type_is_named_in_json_words(
        api: dict[str, Any], method: str, path: str, body: Any, said: str) -> None:
    """pydantic's own words reached the customer: "expected input should be a valid string, got
    Decimal('1.5')", "budget_usd.decimal: expected decimal input should be an integer, float,
    string or Decimal object, got True". Now the JSON type expected, the value as sent."""
    with api["server"].client(api["key"]) as c:
        if "{training}" in path:
            made = c.post("/v1/trainings", json=support.TRAINING_BODY)
            assert made.status_code == 201, made.text
            path = path.format(training=made.json()["id"])
        r = c.request(method, path, json=body)
    assert r.status_code == 422, r.text
    message = _error(r)
    assert message == f"{said} Fix the request (the schema is at /v1/openapi.json)", message


def test_a_compressed_body_is_415_and_nothing_is_stored(api: dict[str, Any]) -> None:
    """``Content-Encoding`` was ignored: a gzipped JSON body was refused as "not UTF-8 at byte 2",
    and a gzipped upload was stored compressed under its plain name (201). Now both are a 415
    that names the coding, and the upload is not stored; ``identity`` is the body as sent."""
    import gzip

    csv = b"id,text\nr1,a\n"
    with api["server"].client(api["key"]) as c:
        for coding in ("gzip", "br", "identity, gzip"):
            for method, path, body, headers in (
                    ("POST", "/v1/studies/estimate", b"{}", JSON),
                    ("PUT", "/v1/files/zipped.csv", csv, {})):
                r = c.request(method, path, content=gzip.compress(body),
                              headers={**headers, "content-encoding": coding})
                assert r.status_code == 415, (coding, path, r.text)
                assert r.json()["error"]["code"] == "unsupported_media_type"
                assert r.headers["accept-encoding"] == "identity"
                message = _error(r)
                assert message.startswith("expected a body sent as is (no Content-Encoding), got "
                                          f"'Content-Encoding: {coding.removeprefix('identity, ')}'. "
                                          "Send the body uncompressed"), message
        assert "zipped.csv" not in [f["name"] for f in c.get("/v1/files").json()]
        r = c.put("/v1/files/zipped.csv", content=csv, headers={"content-encoding": "identity"})
        assert r.status_code == 201 and r.json()["size"] == len(csv), r.text
        r = c.post("/v1/studies/estimate", content=b"{}", headers={**JSON, "content-encoding": "identity"})
        assert r.status_code == 422 and "workflow: expected a value" in _error(r), r.text
        assert c.delete("/v1/files/zipped.csv").status_code == 204


def test_two_authorization_headers_are_a_401_whatever_they_hold(api: dict[str, Any]) -> None:
    """A request with two ``Authorization`` headers was served as the first one's workspace (the
    known audit's fast path read the last): one of two keys picked. Now a 401 that says so, for
    two different keys, the same key twice, or a key and anything."""
    other = support.new_key(api["url"], "other")
    key = api["key"]
    with httpx.Client(base_url=api["server"].url, timeout=120) as c:
        for sent in ((key, other), (key, key), (key, "x"), ("x", key)):
            headers = [("authorization", f"Bearer {one}") for one in sent]
            for method, path, body in (("GET", "/v1/workspaces/acme", None), ("POST", "/v1/studies/estimate", {})):
                r = c.request(method, path, headers=[*headers, ("content-type", "application/json")],
                              content=None if body is None else json.dumps(body).encode())
                assert r.status_code == 401, (sent, path, r.text)
                assert _error(r) == ("expected one Authorization header, got 2. Send the key once, in one "
                                     "'Authorization: Bearer <API key>' header"), r.text
                assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/workspaces/acme", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_a_trailing_slash_is_no_route_and_never_a_redirect_to_the_host_sent(api: dict[str, Any]) -> None:
    """``GET /v1/trainings/`` (or ``PUT /v1/files/%2F``) was a 307 with no body to
    ``http://<the Host header sent>/v1/trainings``: an absolute URL of whatever host the client
    named, and a PUT sent on to a route that refuses it. Now the 404 of any address that is no
    route, in the one shape."""
    with api["server"].client(api["key"]) as c:
        for method, path, shown in (("GET", "/v1/trainings/", "/v1/trainings/"),
                                    ("PUT", "/v1/files/%2F", "/v1/files//"),
                                    ("GET", "/v1/models/", "/v1/models/")):
            r = c.request(method, path, headers={"Host": "evil.example"}, content=b"x" if method == "PUT" else None)
            assert r.status_code == 404 and "location" not in r.headers, (path, r.status_code, r.headers)
            assert _error(r) == f"expected a route of the API, got {shown!r}. See /v1/openapi.json"
        assert c.get("/v1/trainings").status_code == 200


@pytest.mark.parametrize(("key", "named"), [
    ("x[]", "x[]"),  # once read as a union member's tag: the message named no field
    ("str", "str"),
    ("", "''"),
    ("evil\u202e", "'evil\\u202e'"),  # escaped, never raw: U+202E would reorder the message
    ("a\x00b", "'a\\x00b'"),
    ("k" * 3000, "'kkkkkkkkkkkkkkkkkkkk… (3000 characters)'"),  # cut, never echoed whole
])
def test_a_key_the_request_made_up_is_named_escaped_and_cut_in_the_body_and_the_query(
        api: dict[str, Any], key: str, named: str) -> None:
    with _client(api, authorization=f"Bearer {api['key']}") as c:
        body = c.put("/v1/workspaces/acme/budget", headers=JSON,
                     content=json.dumps({"budget_usd": 1, key: 1}).encode())
        nested = c.post("/v1/trainings", headers=JSON, content=json.dumps(
            {"dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", key: "x"}},
             "decisions": [{"name": "a", "question": "q"}]}).encode())
        query = c.get("/v1/trainings", params={key: "1"})
    for r, where in ((body, named), (nested, f"dataset.columns.{named}"), (query, f"{named} (in the query)")):
        assert r.status_code == 422, r.text
        message = _error(r)
        assert message.startswith(f"{where}: expected "), message
        assert len(message) < 400 and message.isprintable(), message


@pytest.mark.parametrize(("path", "body", "named", "got"), [
    ("/v1/trainings", {**support.TRAINING_BODY, "decisions": [
        {**support.TRAINING_BODY["decisions"][0], "question": "Is it \u202egood?"}]},
     "decisions.0.question", "'Is it \\u202egood?'"),
    ("/v1/studies/estimate", {"workflow": "seattle_rain", "start": "2015-01-01", "end": "2016-12-31",
                              "tune_steps": 30, "eval_steps": 30, "holdout_steps": 30,
                              "grid": ["threshold=0.4", "lookback_days=3\x00"]},
     "grid.1", "'lookback_days=3\\x00'"),
    ("/v1/backtests", {"workflow": "seattle_rain", "start": "2015-01-01", "end": "2015-02-01",
                       "params": {"thres\u2066hold": 0.5}},
     "params.'thres\\u2066hold'", "'thres\\u2066hold'"),
])
def test_a_control_character_is_refused_at_its_own_field_showing_its_value(
        api: dict[str, Any], path: str, body: dict[str, Any], named: str, got: str) -> None:
    """The refusal said where the object holding the text was (``(body)``, ``decisions.0``) and
    showed that whole object, cut at 80 characters before the text was reached: "(body): expected
    grid[1] as text without control characters (...), found U+0000, got {'end': '2016-12-31',
    'eval_steps': 30, ...". Now the field's own place and its value."""
    with _client(api, authorization=f"Bearer {api['key']}") as c:
        r = c.post(path, headers=JSON, content=json.dumps(body).encode())
    assert r.status_code == 422, r.text
    message = _error(r)
    assert message.startswith(f"{named}: expected text without control characters ("), message
    assert f", got {got}. " in message, message


@pytest.mark.parametrize("types", [("application/json", "text/plain"), ("text/plain", "application/json"),
                                   ("application/json", "application/json")])
def test_two_content_type_headers_are_a_415_whichever_comes_first(api: dict[str, Any], types: tuple[str, str]) -> None:
    """A body's type sent twice was read from the first header: JSON then text was read as JSON,
    text then JSON refused; as for two Authorization headers or a repeated query parameter, which
    one is meant is not the server's to pick."""
    headers = [("authorization", f"Bearer {api['key']}"), *(("content-type", t) for t in types)]
    r = httpx.post(f"{api['server'].url}/v1/studies/estimate", headers=headers,
                   content=b'{"workflow": "seattle_rain"}', timeout=120)
    assert r.status_code == 415, r.text
    assert _error(r).startswith("expected one Content-Type header, got 2 ("), r.text
