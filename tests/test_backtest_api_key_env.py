"""``--api-key-env`` (and the endpoint resource's ``api_key_env``) names a variable that is set:
checked before anything is stored or called, instead of a stored backtest whose every step
failed on the missing key."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from assets.backtests import build_defs
from resources.backtests import EndpointBacktestModels
from resources.store import StoreResource
from tests.test_backtest_failed_steps import _completion, model_server
from typestrict_pipeline.backtest.store import list_backtests
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store

VAR = "TS_TEST_ENDPOINT_KEY"


def _argv(base: str, db: Path, env: str) -> list[str]:
    return ["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-02", "--model-url", base,
            "--model", "m", "--price-in", "1", "--price-out", "1", "--api-key-env", env,
            "--store", f"sqlite:///{db}", "--new-store"]


@pytest.mark.parametrize("env, value, said", [
    (VAR, None, f"expected the endpoint's key in the environment variable --api-key-env names, got {VAR} unset or "
                f"empty. Export it (export {VAR}=...) before running, or leave --api-key-env out"),
    (VAR, "", f"got {VAR} unset or empty"),
    ("MY KEY", None, "expected --api-key-env as an environment variable's name (letters, digits and _, not starting "
                     "with a digit), got 'MY KEY'"),
])
def test_a_key_variable_that_is_not_there_is_refused_before_the_store_or_any_call(
    env: str, value: str | None, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    calls: list[str] = []

    def answer(body: str) -> tuple[int, bytes]:
        calls.append(body)
        return _completion("0.5")

    db = tmp_path / "store.db"
    with model_server(answer) as base:
        assert main(_argv(base, db, env)) == 2
    assert said in capsys.readouterr().err
    assert calls == [] and not db.exists()


def test_a_set_key_variable_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "sk-test")
    with model_server(lambda body: _completion("0.5")) as base:
        assert main(_argv(base, tmp_path / "store.db", VAR)) == 0


def test_the_endpoint_resource_refuses_an_unset_key_variable_before_anything_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    calls: list[str] = []

    def answer(body: str) -> tuple[int, bytes]:
        calls.append(body)
        return _completion("0.5")

    with model_server(answer) as base:
        defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
            "store": StoreResource(url=url),
            "backtest_models": EndpointBacktestModels(base_url=base, model="m", api_key_env=VAR,
                                                      input_micro_usd_per_mtok=1, output_micro_usd_per_mtok=1)}))
        with dg.instance_for_test() as instance:
            result = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
                instance=instance, raise_on_error=False,
                run_config={"ops": {"backtest_seattle_rain": {"config": {"start": "2013-06-01", "end": "2013-06-01"}}}})
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert failure is not None and f"got {VAR} unset or empty" in (failure.description or "")
    engine = open_store(url)
    try:
        assert list_backtests(engine, workspace="demo") == []
    finally:
        engine.dispose()
    assert calls == []
