"""The free text a backtest stores and sends to a model is bounded by one rule at every door:
a prompt (``--prompt``, ``--prompt-file``, the launchpad's ``prompts``) and a model name
(``--model``, the endpoint resource's ``model``), refused before anything is stored or called."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.backtests import build_defs
from resources.backtests import EndpointBacktestModels, StandinBacktestModels
from resources.store import StoreResource
from tests.test_backtest_failed_steps import ANSWERS, model_server
from typestrict_pipeline.backtest.store import list_backtests
from typestrict_pipeline.backtest.workflows import default_registry
from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.form import MAX_PROMPT_FILE_CHARS
from typestrict_pipeline.values import MAX_MODEL_NAME_CHARS, MAX_PROMPT_CHARS

RANGE = ["--start", "2013-06-01", "--end", "2013-06-03"]


def _stored(url: str) -> list[Any]:
    engine = open_store(url)
    try:
        return list_backtests(engine, workspace="demo")
    finally:
        engine.dispose()


def _run(defs: dg.Definitions, **config: Any) -> dg.ExecuteInProcessResult:
    with dg.instance_for_test() as instance:
        return defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
            instance=instance, raise_on_error=False,
            run_config={"ops": {"backtest_seattle_rain": {"config": {"start": "2013-06-01", "end": "2013-06-01",
                                                                     **config}}}})


def _failure(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    data = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert data is not None
    return data.description or ""


def test_a_prompt_has_one_bound_whatever_the_door() -> None:
    assert MAX_PROMPT_FILE_CHARS == MAX_PROMPT_CHARS
    wf = default_registry().active("seattle_rain")
    wf.variant(prompts={"forecast": "x" * MAX_PROMPT_CHARS})  # at the bound: taken
    with pytest.raises(InputError, match=f"expected a prompt for step 'forecast' of at most {MAX_PROMPT_CHARS:,} "
                                         f"characters, got {MAX_PROMPT_CHARS + 1:,} characters. Shorten the prompt."):
        wf.variant(prompts={"forecast": "x" * (MAX_PROMPT_CHARS + 1)})


def test_the_launchpads_prompt_over_the_bound_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
        "store": StoreResource(url=url), "backtest_models": StandinBacktestModels(latency_s=0.0)}))
    said = _failure(_run(defs, prompts={"forecast": "x" * (MAX_PROMPT_CHARS + 1)}))
    assert f"of at most {MAX_PROMPT_CHARS:,} characters, got {MAX_PROMPT_CHARS + 1:,} characters" in said
    assert _stored(url) == []


@pytest.mark.parametrize("model, got", [
    ("m" * (MAX_MODEL_NAME_CHARS + 1), "expected --model of at most 128 characters, got 129 characters"),
    ("gpt 4o", "expected --model without spaces, got 'gpt 4o'"),
    ("gpt\x1b[2J", "expected --model without control characters"),
])
def test_a_model_name_the_store_cannot_keep_is_refused_before_any_call(
    model: str, got: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def answer(body: str) -> tuple[int, bytes]:
        calls.append(body)
        return ANSWERS["a completion that is not a probability"](body)

    db = tmp_path / "store.db"
    with model_server(answer) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, "--model-url", base, "--model", model,
                     "--price-in", "1", "--price-out", "1", "--store", f"sqlite:///{db}", "--new-store"])
    assert code == 2
    assert got in capsys.readouterr().err
    assert calls == [] and not db.exists()


def test_the_endpoint_resources_model_name_is_checked_by_the_same_rule(tmp_path: Path) -> None:
    calls: list[str] = []

    def answer(body: str) -> tuple[int, bytes]:
        calls.append(json.loads(body)["model"])
        return ANSWERS["HTTP 500 to every call"](body)

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with model_server(answer) as base:
        defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
            "store": StoreResource(url=url),
            "backtest_models": EndpointBacktestModels(base_url=base, model="m" * 129, input_micro_usd_per_mtok=1,
                                                      output_micro_usd_per_mtok=1)}))
        said = _failure(_run(defs))
    assert "expected the model name of at most 128 characters, got 129 characters" in said
    assert calls == [] and _stored(url) == []
