"""The backtests' Dagster wiring, in process: launchpad config, HISTORICAL tags, run card metadata."""

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.backtests import backtest_usage, build_defs
from resources.backtests import BacktestModelsResource, StandinBacktestModels
from resources.store import StoreResource
from typestrict_pipeline.backtest import store as bs
from typestrict_pipeline.backtest.metering import RunMode
from typestrict_pipeline.store import open_store


@pytest.fixture
def defs(tmp_path: Path) -> dg.Definitions:
    return dg.Definitions.merge(build_defs(), dg.Definitions(resources={
        "store": StoreResource(url=f"sqlite:///{tmp_path / 'store.db'}"),
        "backtest_models": StandinBacktestModels(latency_s=0.002),
    }))


def _config(**kw: Any) -> dict[str, Any]:
    return {"ops": {"backtest_seattle_rain": {"config": kw}}}


Metadata = Mapping[str, dg.MetadataValue]


def _int(md: Metadata, key: str) -> int:
    value = md[key].value
    assert isinstance(value, int), f"{key}: expected an int, got {value!r}"
    return value


def _float(md: Metadata, key: str) -> float:
    value = md[key].value
    assert isinstance(value, float), f"{key}: expected a float, got {value!r}"
    return value


def _text(md: Metadata, key: str) -> str:
    value = md[key].value
    assert isinstance(value, str), f"{key}: expected text, got {value!r}"
    return value


def _json_object(md: Metadata, key: str) -> Mapping[str, Any]:
    value = md[key].value
    assert isinstance(value, Mapping), f"{key}: expected a JSON object, got {value!r}"
    return value


def _table(md: Metadata, key: str) -> dg.TableMetadataValue:
    value = md[key]
    assert isinstance(value, dg.TableMetadataValue), f"{key}: expected a table, got {value!r}"
    return value


def test_every_registered_workflow_has_a_backtest_job_a_live_job_and_a_schedule(defs: dg.Definitions) -> None:
    job = defs.resolve_job_def("backtest_seattle_rain_job")
    assert job.tags["mode"] == "HISTORICAL" and job.tags["workflow"] == "seattle_rain"
    assert defs.resolve_job_def("live_seattle_rain_job").tags["mode"] == "LIVE"
    schedule = defs.resolve_schedule_def("live_seattle_rain_schedule")
    assert schedule.default_status is dg.DefaultScheduleStatus.STOPPED


def test_the_backtest_job_stores_everything_and_shows_the_run_card(defs: dg.Definitions, tmp_path: Path) -> None:
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
            instance=instance,
            run_config=_config(start="2014-03-01", end="2014-03-31", step="1d",
                               params={"lookback_days": 3}, max_in_flight=4),
        )
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.tags["mode"] == "HISTORICAL"
    md = result.asset_materializations_for_node("backtest_seattle_rain")[0].metadata
    assert md["mode"].value == "HISTORICAL"
    assert md["time_range"].value == "2014-03-01T00:00:00Z .. 2014-03-31T00:00:00Z"
    assert md["steps_run"].value == 31 and md["steps_failed"].value == 0
    assert 0.0 <= _float(md, "mean_score") <= 1.0
    assert len(_table(md, "score_over_time").records) == 20
    assert _int(md, "cost_micro_usd") > 0 and _text(md, "cost_usd").startswith("$0.000")
    assert md["params"].value == {"lookback_days": 3, "threshold": 0.5}
    assert "[HISTORICAL]" in _text(md, "run_card")
    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        stored = bs.load_backtest(engine, _text(md, "backtest_id"))
        assert stored.dagster_run_id == result.run_id and stored.mode is RunMode.HISTORICAL
        assert stored.card is not None and stored.card.mean_score is not None
        assert round(stored.card.mean_score, 4) == md["mean_score"].value  # rounded in the UI
        assert len(bs.load_steps(engine, stored.id)) == 31
    finally:
        engine.dispose()


def test_a_bad_configuration_fails_the_run_with_the_message(defs: dg.Definitions) -> None:
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
            instance=instance, raise_on_error=False,
            run_config=_config(start="2011-01-01", end="2011-02-01"),
        )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert failure is not None
    assert "expected a time range inside the data of table 'weather'" in (failure.description or "")


def test_a_backtest_in_a_run_tagged_live_is_refused(defs: dg.Definitions) -> None:
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
            instance=instance, raise_on_error=False, tags={"mode": "LIVE"},
            run_config=_config(start="2014-03-01", end="2014-03-02"),
        )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert failure is not None and "expected a run tagged mode=HISTORICAL, got mode=LIVE" in (failure.description or "")


def test_live_run_and_usage_keep_historical_and_live_apart(defs: dg.Definitions) -> None:
    with dg.instance_for_test() as instance:
        bt = defs.resolve_job_def("backtest_seattle_rain_job").execute_in_process(
            instance=instance, run_config=_config(start="2014-03-01", end="2014-03-10"))
        live = defs.resolve_job_def("live_seattle_rain_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"live_decision_seattle_rain": {"config": {"as_of": "2016-01-01"}}}})
        assert bt.success and live.success
        live_run = instance.get_run_by_id(live.run_id)
        assert live_run is not None and live_run.tags["mode"] == "LIVE"
        usage = defs.resolve_job_def("backtest_usage_job").execute_in_process(instance=instance)
    lmd = live.asset_materializations_for_node("live_decision_seattle_rain")[0].metadata
    assert lmd["mode"].value == "LIVE" and set(_json_object(lmd, "decision")) == {"p_rain", "rain"}
    cost = bt.asset_materializations_for_node("backtest_seattle_rain")[0].metadata["cost_micro_usd"].value
    umd = usage.asset_materializations_for_node("backtest_usage")[0].metadata
    assert umd["historical_micro_usd"].value == cost
    assert umd["live_micro_usd"].value == 11
    assert "| LIVE |" in _text(umd, "usage") and "| HISTORICAL |" in _text(umd, "usage")


def test_the_default_models_resource_uses_the_stand_in_without_an_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TYPESTRICT_BACKTEST_MODEL_URL", raising=False)
    from typestrict_pipeline.backtest.workflows.weather import WEATHER

    with BacktestModelsResource(standin_latency_s=0.0).open(WEATHER) as setup:
        assert set(setup.clients) == {"forecaster"} and "standin-forecaster" in setup.prices.models
    monkeypatch.setenv("TYPESTRICT_BACKTEST_MODEL_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(dg.Failure, match="TYPESTRICT_BACKTEST_MODEL, TYPESTRICT_BACKTEST_PRICE_IN"), \
            BacktestModelsResource().open(WEATHER):
        pass
    # A price in dollars (or not a whole number) is refused naming the variable, before any call:
    # int("0.15") was a bare ValueError, and "1_000" a price of 1,000.
    monkeypatch.setenv("TYPESTRICT_BACKTEST_MODEL", "m")
    monkeypatch.setenv("TYPESTRICT_BACKTEST_PRICE_OUT", "600000")
    for price in ("0.15", "1_000", "1e30", "-1"):
        monkeypatch.setenv("TYPESTRICT_BACKTEST_PRICE_IN", price)
        with pytest.raises(dg.Failure, match=r"expected TYPESTRICT_BACKTEST_PRICE_IN \(a price in micro-USD per "
                                             r"1M tokens\).* got '" + re.escape(price) + r"'\. Write micro-USD"), \
                BacktestModelsResource().open(WEATHER):
            pass


def test_a_workflow_without_a_stand_in_says_what_to_do_where_its_models_are_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CLI chooses a backtest's models with --model-url; a run Dagster starts (the launchpad,
    # the API) takes them from the code location's environment, where no flag exists to pass.
    import dataclasses

    from typestrict_pipeline.backtest.service import standin_models
    from typestrict_pipeline.backtest.workflows.weather import WEATHER
    from typestrict_pipeline.errors import InputError

    monkeypatch.delenv("TYPESTRICT_BACKTEST_MODEL_URL", raising=False)
    unstood = dataclasses.replace(WEATHER, name="no_stand_in")
    with pytest.raises(InputError, match="Pass --model-url for a real"), standin_models(unstood):
        pass
    with pytest.raises(InputError) as raised, BacktestModelsResource().open(unstood):
        pass
    said = str(raised.value)
    assert "TYPESTRICT_BACKTEST_MODEL_URL" in said and "--model-url" not in said, said


def test_usage_asset_alone(tmp_path: Path) -> None:
    result = dg.materialize([backtest_usage], resources={
        "store": StoreResource(url=f"sqlite:///{tmp_path / 's.db'}")})
    md = result.asset_materializations_for_node("backtest_usage")[0].metadata
    assert md["historical_usd"].value == "$0.00" and md["live_usd"].value == "$0.00"
