"""A backtest whose model endpoint does not answer ends ``failed`` by itself, quickly.

The engine's fail-fast rule (``engine.EndpointWatch``): 3 steps in a row that failed on the way to
an endpoint that never answered in this backtest (connection refused, no answer within the
timeout), or 10 in a row once it had answered, end the backtest ``failed`` with the endpoint, the
transport error, the steps tried and what to check. Before, every one of the 30 planned steps was
tried (4 attempts of 30 s each against a silent port: about 1.5 h for a year of days).

Real components only: a closed port (bound, then closed), a port that listens and never accepts,
and a real HTTP server (``model_server``) that answers two calls and then goes silent. The
timeout and attempts are the documented settings ``TYPESTRICT_MODEL_TIMEOUT_S`` and
``TYPESTRICT_MODEL_ATTEMPTS``, set low to keep the tests fast. The CLI says what the operator
checks (the model URL, the server); the workspace's API and console what the workspace can do.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_backtest_failed_steps import (
    _completion,
    _endpoint,
    assert_the_workspace_reads_what_it_can_do,
    model_server,
    workspace_reads,
)
from typestrict_pipeline.backtest.engine import (
    ENDPOINT_GONE_ADVICE,
    UNREACHABLE_STEPS,
    UNREACHABLE_STEPS_AFTER_ANSWER,
    WORKSPACE_ADVICE,
    for_workspace,
)
from typestrict_pipeline.cli import main

RANGE = ["--start", "2013-06-01", "--end", "2013-06-30"]  # 30 steps planned
ONE_AT_A_TIME = ["--max-in-flight", "1"]  # steps in order: the counts are exact


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed: a connection to it is refused


@contextlib.contextmanager
def _silent_port() -> Iterator[int]:
    """A port that listens and never accepts: connections complete in the kernel, nothing answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


def _run(tmp_path: Path, base: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object], str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    code = main(["backtest", "run", "seattle_rain", *RANGE, *ONE_AT_A_TIME, *_endpoint(base),
                 "--store", url, "--new-store", "--json"])
    return code, json.loads(capsys.readouterr().out), url


def test_a_closed_port_ends_the_backtest_failed_after_3_steps_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TYPESTRICT_MODEL_ATTEMPTS", "2")  # a retry per call still happens
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    code, ran, url = _run(tmp_path, base, capsys)
    assert code == 1
    assert ran["status"] == "failed"
    error = str(ran["error"])
    assert error.startswith(f"expected the model endpoint {base}/chat/completions to answer, got connection "
                            "failed (")
    assert ("on every attempt of 3 steps in a row (it has not answered once in this backtest), so the backtest "
            "stopped after 3 of 30 planned steps") in error
    # the operator's advice, as the CLI has always said it
    assert error.endswith(
        "instead of calling it for each. Check the model URL (--model-url; TYPESTRICT_BACKTEST_MODEL_URL for runs "
        "launched from the API or Dagster) and that the model server runs and is reachable from here, then run the "
        "backtest again; nothing was charged for calls that never reached it, and what ran is kept"), error
    assert ENDPOINT_GONE_ADVICE in error and ENDPOINT_GONE_ADVICE in str(ran["card"])

    assert main(["backtest", "show", str(ran["id"]), "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["status"], shown["error"]) == ("failed", error)
    assert (shown["steps_run"], shown["steps_planned"], shown["cost_micro_usd"]) == (UNREACHABLE_STEPS, 30, 0)

    api, item, page = workspace_reads(url, tmp_path / "home", str(ran["id"]))
    # the workspace reads the same expected and got, with the endpoint cut to its scheme and host,
    # and what it can do: it cannot set --model-url or an environment variable of the server
    assert (api["state"], api["error"]) == ("failed", for_workspace(error))
    assert "http://127.0.0.1 to answer" in api["error"] and base not in api["error"]
    assert (f"{WORKSPACE_ADVICE}; nothing was charged for calls that never reached it, and what ran is kept"
            ) in api["error"], api["error"]
    assert_the_workspace_reads_what_it_can_do(api, item, page, ENDPOINT_GONE_ADVICE)


def test_a_port_that_never_answers_ends_the_backtest_on_the_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TYPESTRICT_MODEL_TIMEOUT_S", "0.2")
    monkeypatch.setenv("TYPESTRICT_MODEL_ATTEMPTS", "1")
    with _silent_port() as port:
        code, ran, _url = _run(tmp_path, f"http://127.0.0.1:{port}/v1", capsys)
    assert code == 1 and ran["status"] == "failed"
    assert "got no answer within the 0.2 s timeout on every attempt of 3 steps in a row" in str(ran["error"])
    assert "3 run of 30 planned: 0 scored, 0 unscored, 3 failed" in str(ran["card"])


def test_an_endpoint_that_answered_then_went_silent_ends_after_10_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TYPESTRICT_MODEL_TIMEOUT_S", "0.2")
    monkeypatch.setenv("TYPESTRICT_MODEL_ATTEMPTS", "1")
    answered = 2
    calls = iter(range(10**6))
    release = threading.Event()

    def two_then_silence(body: str) -> tuple[int, bytes]:
        if next(calls) < answered:
            return _completion("0.70")
        release.wait(10)  # silent until the test ends
        return 500, b"gone"

    try:
        with model_server(two_then_silence) as base:
            code, ran, _url = _run(tmp_path, base, capsys)
            release.set()
    finally:
        release.set()
    assert code == 1 and ran["status"] == "failed"
    assert (f"on every attempt of {UNREACHABLE_STEPS_AFTER_ANSWER} steps in a row (after answering earlier "
            f"steps of this backtest), so the backtest stopped after {answered + UNREACHABLE_STEPS_AFTER_ANSWER} "
            "of 30 planned steps") in str(ran["error"])
    assert "12 run of 30 planned: 2 scored, 0 unscored, 10 failed" in str(ran["card"])


def test_the_dagster_run_against_a_closed_port_fails_with_the_stored_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster as dg

    from assets.backtests import build_defs
    from resources.backtests import EndpointBacktestModels
    from resources.store import StoreResource
    from typestrict_pipeline.backtest.engine import BacktestStatus
    from typestrict_pipeline.backtest.store import list_backtests
    from typestrict_pipeline.store import open_store

    monkeypatch.setenv("TYPESTRICT_MODEL_ATTEMPTS", "1")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
        "store": StoreResource(url=url),
        "backtest_models": EndpointBacktestModels(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="m",
                                                  input_micro_usd_per_mtok=1, output_micro_usd_per_mtok=1),
    }))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
            instance=instance, raise_on_error=False,
            run_config={"ops": {"backtest_seattle_rain": {"config": {
                "start": "2013-06-01", "end": "2013-06-30", "max_in_flight": 1}}}})
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    engine = open_store(url)
    try:
        [stored] = list_backtests(engine, workspace="demo")
    finally:
        engine.dispose()
    assert stored.status is BacktestStatus.FAILED and stored.steps_run == UNREACHABLE_STEPS
    assert stored.error is not None and "to answer, got connection failed" in stored.error
    assert failure is not None and failure.description == f"backtest {stored.id} failed: {stored.error}."


def test_a_study_window_against_a_closed_port_fails_with_why_instead_of_being_cut() -> None:
    import datetime as dt

    from typestrict_pipeline.backtest.workflows import default_registry, load_dataset
    from typestrict_pipeline.backtest.workflows.weather import DEMO_PRICES
    from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
    from typestrict_pipeline.errors import EndpointUnreachableError
    from typestrict_pipeline.study.backends import EngineBackend, WorkflowSetup
    from typestrict_pipeline.study.folds import Window
    from typestrict_pipeline.study.runner import CandidateSpec
    from typestrict_pipeline.study.tables import WindowKind

    wf = default_registry().active("seattle_rain")
    client = OpenAICompatibleClient(f"http://127.0.0.1:{_closed_port()}/v1", "m", max_attempts=1)
    [model] = DEMO_PRICES.models
    client.model = model  # priced as the demo's model
    backend = EngineBackend(WorkflowSetup(workflow=wf, data=load_dataset("seattle_weather"),
                                          clients={"forecaster": client}, prices=DEMO_PRICES), max_in_flight=1)
    start = dt.datetime(2013, 6, 1, tzinfo=dt.UTC)
    with pytest.raises(EndpointUnreachableError) as caught:
        backend.run_window(CandidateSpec(1, 0, {}, {}), Window(start, start + dt.timedelta(days=20), 20),
                           WindowKind.TUNE, seal_at=None, should_stop=lambda cost, steps: False)
    assert "to answer, got connection failed" in str(caught.value)
    assert "so the backtest stopped after 3 of 20 planned steps" in str(caught.value)


def test_an_endpoint_that_answers_500_is_an_answer_and_every_step_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An HTTP answer (here 500 to every call) is the endpoint being there: never counted by the
    fail-fast rule, so all 30 steps run and the backtest is failed by "every step that ran failed"."""
    with model_server(lambda body: (500, b"internal error")) as base:
        code, ran, _url = _run(tmp_path, base, capsys)
    assert code == 1 and ran["status"] == "failed"
    assert str(ran["error"]).startswith("expected at least one step of the backtest to run without failing, got "
                                        "every step that ran failed (30 of 30 planned;")
