"""Schema-driven fuzzing (schemathesis) of every operation of the published schema: no 5xx.

Each operation of ``/v1/openapi.json`` gets ``EXAMPLES`` generated requests (valid and invalid
bodies, paths and parameters, with a valid key of a workspace that has a file, a draft training
and credits) against a real uvicorn server. Hypothesis runs with ``derandomize=True`` (examples
are derived from the test itself, the same every run) and no example database. Then the
API-side cases of the hostile corpus: malformed JSON, wrong types, huge numbers, NUL bytes,
odd encodings, each answered with the one error shape and never a 5xx.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok

from typestrict_pipeline.values import control_character, spells_non_finite

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

EXAMPLES = 8


@pytest.mark.slow
def test_no_operation_answers_a_server_error(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    csv, jev = support.make_dataset(tmp_path, n=80)
    key = support.new_key(sqlite_url, "fuzz", credits=1000)
    # No rate limit: the fuzzer sends as fast as it can, and a 429 would hide what a route answers.
    with support.ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(jev)},
                           rate_limit=None) as server:
        headers = {"Authorization": f"Bearer {key}"}
        with server.client(key) as c:
            c.put("/v1/files/reviews.csv", content=csv)
            assert c.post("/v1/trainings", json=support.TRAINING_BODY).status_code == 201
            raw = c.get("/v1/openapi.json").json()
        schema = schemathesis.openapi.from_dict(raw)
        failures: list[str] = []
        operations = 0
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), result
            operation = result.ok()
            operations += 1

            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy())
            def fuzz(case: Any) -> None:
                response = case.call(base_url=server.url, headers=headers, timeout=120)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path}: {response.status_code} "
                                    f"{response.text[:200]}")
                elif response.status_code >= 400:
                    body = response.json()
                    if set(body) != {"error"}:
                        failures.append(f"{case.method} {case.formatted_path}: not the error shape {body}")

            fuzz()
        assert operations == len([m for p in raw["paths"].values() for m in p])
        assert not failures, "\n".join(failures[:20])


HOSTILE: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/trainings", {"content": b"{", "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/trainings", {"content": b"\xff\xfe\x00{}", "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/trainings", {"content": b"[]", "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/trainings", {"content": b"1e999999", "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/trainings", {"json": {"dataset": {"path": "a\x00b.csv", "columns": {"id": "id", "text": "t"}},
                                        "decisions": [{"name": "d", "question": "q", "answers": ["a", "b"]}]}}),
    ("POST", "/v1/trainings", {"json": {"dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text"}},
                                        "decisions": [{"name": "d" * 5000, "question": "q"}]}}),
    ("POST", "/v1/trainings", {"content": json.dumps({"a": [[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]}).encode(),
                               "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/trainings/tr_x/predictions", {"content": b'{"predictions": [{"id": "1", "decision": "d", '
                                                b'"probabilities": {"a": 1e400}}]}',
                                                "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/trainings/tr_x/predictions", {"content": b'{"predictions": [{"id": "1", "decision": "d", '
                                                b'"probabilities": {"a": NaN}}]}',
                                                "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/studies/estimate", {"json": {"workflow": "wx", "start": "not a date", "end": "2012-01-01",
                                               "tune_steps": 1, "eval_steps": 1, "holdout_steps": 1,
                                               "max_candidates": 1, "max_total_steps": 1, "synthetic": True}}),
    ("POST", "/v1/studies/estimate", {"json": {"workflow": "wx", "start": "2012-01-01", "end": "2012-01-02",
                                               "tune_steps": 99999, "eval_steps": 1, "holdout_steps": 1,
                                               "max_candidates": 1, "max_total_steps": 1, "synthetic": True}}),
    ("POST", "/v1/studies/estimate", {"json": {"workflow": "no-such-workflow", "start": "2012-01-01",
                                               "end": "2013-01-01", "tune_steps": 5, "eval_steps": 5,
                                               "holdout_steps": 5, "max_candidates": 1, "max_total_steps": 9}}),
    ("POST", "/v1/studies/estimate", {"json": {"workflow": "wx", "start": "2012-01-01", "end": "2013-01-01",
                                               "tune_steps": 5, "eval_steps": 5, "holdout_steps": 5,
                                               "grid": ["=", "x"], "max_candidates": 1, "max_total_steps": 9,
                                               "synthetic": True, "budget_usd": "NaN"}}),
    ("GET", "/v1/models/%00", {}),
    ("GET", "/v1/models/" + "a" * 5000, {}),
    ("GET", "/v1/trainings/..%2F..%2Fetc", {}),
    ("GET", "/v1/studies/-1", {}),
    ("GET", "/v1/studies/1e3", {}),
    ("GET", "/v1/workspaces/%F0%9F%92%A5", {}),
    ("PUT", "/v1/files/.hidden", {"content": b"x"}),
]


@pytest.mark.parametrize(("method", "path", "kwargs"), HOSTILE, ids=[f"{m} {p[:40]}" for m, p, _ in HOSTILE])
def test_hostile_requests_get_a_clear_error_never_a_5xx(
    tmp_path: Path, sqlite_url: str, method: str, path: str, kwargs: dict[str, Any], api: dict[str, Any]
) -> None:
    with httpx.Client(base_url=api["url"], headers={"Authorization": f"Bearer {api['key']}"}, timeout=120) as c:
        r = c.request(method, path, **kwargs)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and body["error"]["message"]
    assert "Traceback" not in r.text


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import create_study_from_config, study_backend
    from typestrict_pipeline.study.tables import StudyRow

    tmp = tmp_path_factory.mktemp("hostile")
    url = f"sqlite:///{tmp / 'store.db'}"
    key = support.new_key(url, "hostile", credits=5)
    engine = open_store(url)  # a finished study with a USD budget: what a schedule is enabled on
    sid = create_study_from_config(engine, study_config(StudyForm(**{**STUDY_FORM, "workflow": "wx-done"},
                                                                  workspace="hostile", min_unseen_steps=5)))
    run_study_local(engine, sid, study_backend(engine, sid))
    with session_scope(engine) as s:
        row = s.get(StudyRow, sid)
        assert row is not None
        row.budget_micro = 1_000_000
    engine.dispose()
    with support.ApiServer(url, tmp / "home", rate_limit=None) as server:  # every hostile request reaches its route
        yield {"url": server.url, "key": key, "study": sid}


STUDY_FORM: dict[str, Any] = {"workflow": "wx", "start": "2012-01-01", "end": "2012-12-01", "tune_steps": 20,
                              "eval_steps": 20, "holdout_steps": 20, "grid": ["skill=0.5,0.6"], "max_candidates": 2,
                              "max_total_steps": 1000, "synthetic": True}
# What a person types into the parsers' fields (typestrict_pipeline/values.py): numbers of every
# kind, digits of other scripts, units, offsets, control characters, and plain noise.
# Invisible format characters (bidirectional controls, zero-width ones, a tag) and the joiners.
INVISIBLE = ["\u202e", "\u2066", "\u2069", "\u200f", "\u061c", "\u200b", "\u2060", "\ufeff", "\U000e0041",
             "\u00ad", "\u200c", "\u200d"]
TYPED = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="0123456789.,-+eE_:TZ$dhmswy²٣５\x00\r\n ", max_size=30),
    st.sampled_from(["Infinity", "-Infinity", "NaN", "1e999999", "1e309", "9999999999999999999w", "²d",
                     "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00", "-inf:inf", "nan:1"]),
    # every spelling Python reads as a non-finite number, in any case and sign
    st.tuples(st.sampled_from(["", "+", "-", " "]), st.sampled_from(["nan", "inf", "infinity", "1e999"]),
              st.booleans()).map(lambda t: t[0] + (t[1].upper() if t[2] else t[1].capitalize())),
    st.text(alphabet=st.sampled_from([*INVISIBLE, "a", "b", " ", "="]), min_size=1, max_size=12),
    st.floats().map(repr), st.integers().map(str),
)
PARSED_FIELDS = ["budget_usd", "step", "start", "end", "random", "grid", "name", "workflow"]


@given(field=st.sampled_from(PARSED_FIELDS), value=TYPED)
@settings(max_examples=150, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_the_value_parsers_never_answer_a_server_error(api: dict[str, Any], field: str, value: str) -> None:
    body = {**STUDY_FORM, field: [f"skill={value}"] if field in ("random", "grid") else value}
    if field == "random":
        body["random_draws"] = 2
    with httpx.Client(base_url=api["url"], headers={"Authorization": f"Bearer {api['key']}"}, timeout=120) as c:
        r = c.post("/v1/studies/estimate", json=body)
    assert r.status_code < 500, (r.status_code, r.text)
    assert r.status_code == 200 or set(r.json()) == {"error"}
    if r.status_code == 200 and field in ("grid", "name", "workflow"):
        # what is taken may be stored: no control or invisible format character, no grid value
        # that is a number but not a finite one
        assert control_character(value) is None, value
        if field == "grid":
            assert not any(spells_non_finite(v.strip()) for v in value.split(",")), value


@given(cadence=TYPED, owner=TYPED | st.emails().map(lambda e: e + "\r\nBcc: all@evil.example"))
@settings(max_examples=100, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_the_schedule_parsers_never_answer_a_server_error_nor_take_a_header(
    api: dict[str, Any], cadence: str, owner: str
) -> None:
    with httpx.Client(base_url=api["url"], headers={"Authorization": f"Bearer {api['key']}"}, timeout=120) as c:
        r = c.post(f"/v1/studies/{api['study']}/schedule", json={"cadence": cadence, "owner": owner})
        if r.status_code == 201:  # a good pair: the schedule is kept only when both were good
            assert "\n" not in r.json()["owner"] and "\r" not in r.json()["owner"]
    assert r.status_code in (201, 404, 409, 422), (r.status_code, r.text)
