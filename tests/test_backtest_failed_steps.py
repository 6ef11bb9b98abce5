"""A backtest whose every step failed ends ``failed`` (the engine's rule), not ``completed``.

The model endpoint is a real local HTTP server (answering 500, or garbage, to every call, or to
one day only); the backtest runs through ``typestrict backtest run`` in process, and the same
backtest is read back by ``backtest show``, by the API and the console's backtest page, and by
the study's USD estimate, all from the one store. The CLI keeps the operator's advice; a workspace
reads what it can do itself (``engine.for_workspace``): the model endpoint is the platform's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import html
import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.test_api_support import new_key
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.backtest.engine import (
    STEPS_FAILED_ADVICE,
    WORKSPACE_ADVICE,
    BacktestStatus,
    OnStepError,
    StepStatus,
    for_workspace,
    run_backtest,
)
from typestrict_pipeline.backtest.pit import PointInTimeTable
from typestrict_pipeline.backtest.store import last_completed_backtest
from typestrict_pipeline.backtest.workflow import Workflow
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here
RANGE = ["--start", "2013-06-01", "--end", "2013-06-03"]

Answer = Callable[[str], tuple[int, bytes]]


def _completion(text: str) -> tuple[int, bytes]:
    return 200, json.dumps({"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 1}}).encode()


ANSWERS: dict[str, Answer] = {
    "HTTP 500 to every call": lambda body: (500, b"internal error"),
    "a body that is not JSON": lambda body: (200, b"<html>gateway</html>"),
    "a completion that is not a probability": lambda body: _completion("I cannot help with that"),
}


@contextlib.contextmanager
def model_server(answer: Answer, *, paths: list[str] | None = None,
                 base_path: str = "/v1") -> Iterator[str]:
    """A real OpenAI-compatible endpoint on 127.0.0.1 answering ``answer(request body)``; its
    base URL (the server's root plus ``base_path``). A 5xx carries ``Retry-After: 0``, so the
    client's retries do not wait. ``paths``: each request's path (query included) is appended."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            if paths is not None:
                paths.append(self.path)
            status, payload = answer(body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status >= 500:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{base_path}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _endpoint(url: str) -> list[str]:
    return ["--model-url", url, "--model", "m", "--price-in", "1000000", "--price-out", "1000000"]


def workspace_reads(url: str, home: Path, backtest_id: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """What workspace ``demo`` reads of a backtest: ``GET /v1/backtests/{id}``, its item in
    ``GET /v1/backtests`` and the console's backtest page (signed in with the workspace's key;
    its text unescaped), all from the real app on the store ``url``."""
    key = new_key(url, "demo")
    with TestClient(create_app(url, home, jev_source=JEV)) as c:
        auth = {"Authorization": f"Bearer {key}"}
        one, listed = c.get(f"/v1/backtests/{backtest_id}", headers=auth), c.get("/v1/backtests", headers=auth)
        token = re.search(r'name="csrf_token" value="([^"]+)"', c.get("/console/sign-in").text)
        assert token is not None
        signed = c.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key}, follow_redirects=False)
        assert signed.status_code == 303, signed.text[:500]
        page = c.get(f"/console/backtests/{backtest_id}")
    assert one.status_code == 200 and listed.status_code == 200, (one.text, listed.text)
    assert page.status_code == 200, page.text[:3000]
    [item] = [b for b in listed.json() if b["id"] == backtest_id]
    return one.json(), item, html.unescape(page.text)


def assert_the_workspace_reads_what_it_can_do(api: dict[str, Any], item: dict[str, Any], page: str,
                                              operators: str) -> None:
    """The API's error and card, the list's item and the console's page give the workspace's
    advice, never the operator's (``operators``: a flag, an environment variable, the server)."""
    assert item["error"] == api["error"] and item["card"] == api["card"]
    assert api["error"] in page and api["card"] in page
    for seen in (api["error"], api["card"], page):
        assert WORKSPACE_ADVICE in seen, seen[:3000]
        assert operators not in seen and "--model-url" not in seen, seen[:3000]
        assert "TYPESTRICT_BACKTEST_MODEL_URL" not in seen, seen[:3000]


@pytest.mark.parametrize("what", list(ANSWERS))
def test_a_backtest_whose_every_step_failed_is_failed_with_why_everywhere_and_exits_1(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = ["--store", url, "--new-store"]
    with model_server(ANSWERS[what]) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), *store, "--json"])
    out = capsys.readouterr().out
    assert code == 1, out
    ran = json.loads(out)
    assert ran["status"] == "failed"
    assert ran["error"].startswith("expected at least one step of the backtest to run without failing, "
                                   "got every step that ran failed (3 of 3 planned; the first: decide: ")
    assert ran["error"].endswith(f"{STEPS_FAILED_ADVICE}; what ran is kept")  # the operator's advice
    assert ("Fix what the first error names (the model endpoint, its model name or key, the workflow) and run "
            "the backtest again; what ran is kept") in ran["error"]  # as before
    assert "status          failed (expected at least one step" in ran["card"] and STEPS_FAILED_ADVICE in ran["card"]

    assert main(["backtest", "show", ran["id"], "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["status"], shown["error"], shown["steps_run"]) == ("failed", ran["error"], 3)

    api, item, page = workspace_reads(url, tmp_path / "home", ran["id"])
    # the workspace reads the same expected and got, with the endpoint cut to its scheme and host,
    # and what it can do: the model endpoint is the platform's, not the workspace's to fix
    assert (api["state"], api["error"]) == ("failed", for_workspace(ran["error"]))
    assert api["error"].endswith(f"{WORKSPACE_ADVICE}; what ran is kept"), api["error"]
    assert base not in api["error"]  # (the CLI's names it when a call failed)
    assert_the_workspace_reads_what_it_can_do(api, item, page, STEPS_FAILED_ADVICE)

    engine = open_store(url)
    try:  # nothing to estimate a study's cost from: it never completed
        version = shown["version_id"]
        assert last_completed_backtest(engine, workspace="demo", workflow="seattle_rain", version_id=version) is None
    finally:
        engine.dispose()


def test_the_text_output_says_why_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"]
    with model_server(ANSWERS["HTTP 500 to every call"]) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), *store])
    captured = capsys.readouterr()
    assert code == 1
    assert "status          failed (expected at least one step" in captured.out
    found = re.search(r"backtest id\s+([0-9a-f]{32})", captured.out)
    assert found is not None
    assert (f"typestrict: backtest {found.group(1)} failed: expected at least one step of the backtest to "
            "run without failing, got every step that ran failed (3 of 3 planned; the first: decide: "
            "ModelClientError: ") in captured.err
    assert "HTTP 500 (internal error) on the last one" in captured.err


def test_a_backtest_with_some_steps_failed_is_completed_with_them_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def one_bad_day(body: str) -> tuple[int, bytes]:
        return (500, b"internal error") if "2013-06-01" in body else _completion("0.70")

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with model_server(one_bad_day) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), "--store", url,
                     "--new-store", "--json"])
    ran = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (ran["status"], ran["error"]) == ("completed", None)
    assert "3 run of 3 planned: 2 scored, 0 unscored, 1 failed" in ran["card"]
    assert "first error     decide: ModelClientError:" in ran["card"]


# --- the engine's rule, on a workflow of the test's own -------------------------------------------

DAY = dt.timedelta(days=1)
T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
TABLE = PointInTimeTable("x", event_time=[T0 + i * DAY for i in range(10)],
                         known_time=[T0 + (i + 1) * DAY for i in range(10)], columns={"v": list(range(10))})


def _workflow(fails: Callable[[int], bool]) -> Workflow:
    def decide(ctx: Any) -> int:
        v = int(ctx.data["x"].last("v"))
        if fails(v):
            raise ValueError(f"no decision for {v}")
        return v

    return Workflow("flaky", decide=decide, outcome=lambda c: int(c.data["x"].last("v")),
                    score=lambda d, o, c: -abs(d - o), tables=("x",), horizon=DAY,
                    outcome_description="the next day's value")


@pytest.mark.parametrize("policy", list(OnStepError))
def test_every_step_failed_is_failed_whatever_the_policy(policy: OnStepError) -> None:
    result = run_backtest(_workflow(lambda v: True), data=TABLE, start=T0 + DAY, end=T0 + 5 * DAY, step=DAY,
                          on_step_error=policy, max_in_flight=1)
    card = result.card
    assert card.status is BacktestStatus.FAILED
    assert card.steps_failed == card.steps_run == (5 if policy is OnStepError.CONTINUE else 1)
    assert card.stop_reason is not None
    assert f"({card.steps_run} of 5 planned; the first: decide: ValueError: no decision for 0)" in card.stop_reason


def test_some_steps_failed_is_completed_or_stopped_as_before() -> None:
    flaky = _workflow(lambda v: v % 2 == 1)
    done = run_backtest(flaky, data=TABLE, start=T0 + DAY, end=T0 + 5 * DAY, step=DAY, max_in_flight=1)
    assert (done.card.status, done.card.stop_reason) == (BacktestStatus.COMPLETED, None)
    assert [s.status for s in done.steps].count(StepStatus.FAILED) == done.card.steps_failed == 2
    stopped = run_backtest(flaky, data=TABLE, start=T0 + DAY, end=T0 + 5 * DAY, step=DAY, max_in_flight=1,
                           on_step_error="stop")
    assert stopped.card.status is BacktestStatus.STOPPED and stopped.card.steps_run == 2


def _dagster_backtest(answer: Answer, url: str, config: dict[str, Any]) -> tuple[Any, Any]:
    """``backtest_seattle_rain_job`` in process against a real endpoint answering ``answer``, on
    the store ``url``: the run's failure data (``None`` if it succeeded) and the one stored backtest."""
    import dagster as dg

    from assets.backtests import build_defs
    from resources.backtests import EndpointBacktestModels
    from resources.store import StoreResource
    from typestrict_pipeline.backtest.store import list_backtests

    with model_server(answer) as base:
        defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
            "store": StoreResource(url=url),
            "backtest_models": EndpointBacktestModels(base_url=base, model="m", input_micro_usd_per_mtok=1,
                                                      output_micro_usd_per_mtok=1),
        }))
        with dg.instance_for_test() as instance:
            result = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
                instance=instance, raise_on_error=False,
                run_config={"ops": {"backtest_seattle_rain": {"config": config}}})
    failure = None if result.success else result.get_step_failure_events()[0].step_failure_data.user_failure_data
    engine = open_store(url)
    try:
        [stored] = list_backtests(engine, workspace="demo")
    finally:
        engine.dispose()
    return failure, stored


def test_the_dagster_run_of_a_failed_backtest_fails_with_why(tmp_path: Path) -> None:
    failure, stored = _dagster_backtest(ANSWERS["a body that is not JSON"], f"sqlite:///{tmp_path / 'store.db'}",
                                        {"start": "2013-06-01", "end": "2013-06-03"})
    assert failure is not None and "failed: expected at least one step of the backtest to run without failing" in (
        failure.description or "")
    assert stored.status is BacktestStatus.FAILED and stored.error is not None
    assert f"backtest {stored.id} failed: {stored.error}." == failure.description


def test_the_dagster_run_of_a_stopped_backtest_fails_with_why_and_what_ran(tmp_path: Path) -> None:
    # A step failed with on_step_error "stop": the backtest is stored `stopped` and `backtest run`
    # exits 1; the Dagster run fails with the same sentence (it was a success beside it before).
    def second_day_bad(body: str) -> tuple[int, bytes]:
        return (500, b"internal error") if "2013-06-02" in body else _completion("0.70")

    failure, stored = _dagster_backtest(second_day_bad, f"sqlite:///{tmp_path / 'store.db'}", {
        "start": "2013-06-01", "end": "2013-06-05", "on_step_error": "stop", "max_in_flight": 1})
    assert failure is not None and failure.description is not None
    assert stored.status is BacktestStatus.STOPPED and 2 <= stored.steps_run < 5
    assert failure.description.startswith(f"backtest {stored.id} stopped before its end: ")
    assert f"{stored.steps_run} of 5 planned steps ran and are kept" in failure.description
    assert "on_step_error: continue in the config" in failure.description
    assert failure.metadata["status"].value == "stopped"


@pytest.mark.parametrize(("retries", "said"), [(0, "got no answer: "), (1, "got no answer in 2 tries of the call: ")])
def test_the_first_error_tells_the_steps_tries_from_the_clients_attempts(
        retries: int, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It said "got 1 failed attempt(s), the last: …: expected a successful answer within 4
    # attempt(s)": two counts of different things, read as one that contradicts itself.
    with model_server(ANSWERS["HTTP 500 to every call"]) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), "--retries", str(retries),
                     "--store", f"sqlite:///{tmp_path / 'store.db'}", "--new-store", "--json"])
    ran = json.loads(capsys.readouterr().out)
    assert code == 1
    first = ran["error"].split("the first: ", 1)[1]
    assert first.startswith(f"decide: ModelClientError: expected an answer from model client 'forecaster', {said}"
                            ), first
    assert "within 4 attempt(s)" in first and "failed attempt(s)" not in first, first
