"""Workspace state: subscription, usage budget, and spend from live runs, backtests and studies."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from typestrict_pipeline.backtest.engine import run_backtest, run_live
from typestrict_pipeline.backtest.store import BacktestRecorder, record_live_decision
from typestrict_pipeline.backtest.workflows.weather import WEATHER, weather_fixture
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.studies import StoreStudies
from typestrict_pipeline.reruns.workspace import (
    set_workspace,
    store_spend_source,
    usage_period,
    workspace_status,
)
from typestrict_pipeline.store import open_store, utcnow


def test_a_new_workspace_needs_both_settings(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    with pytest.raises(InputError, match="subscription state and a usage budget"):
        set_workspace(engine, "w", subscription=SubscriptionState.ACTIVE)
    with pytest.raises(InputError, match="micro-USD"):
        set_workspace(engine, "w", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=-1)
    set_workspace(engine, "w", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=5)
    set_workspace(engine, "w", subscription=SubscriptionState.EXPIRED)
    status = workspace_status(engine, "w", utcnow(), lambda *_: 0)
    assert status is not None
    assert (status.subscription, status.usage_budget_micro_usd) == (SubscriptionState.EXPIRED, 5)
    assert workspace_status(engine, "nobody", utcnow(), lambda *_: 0) is None


def test_usage_period_is_the_utc_calendar_month() -> None:
    assert usage_period(dt.datetime(2024, 2, 29, 23, 59, tzinfo=dt.UTC)) == (dt.date(2024, 2, 1), dt.date(2024, 2, 29))
    # 00:30 on March 1st in UTC+2 is still February in UTC
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert usage_period(dt.datetime(2024, 3, 1, 0, 30, tzinfo=plus2))[0] == dt.date(2024, 2, 1)


def _now_well_inside_a_month(margin: dt.timedelta = dt.timedelta(minutes=2)) -> dt.datetime:
    """The time now, after waiting out the end of a UTC month if it is less than ``margin`` away.

    The test below records spend at the wall-clock time and reads the month containing ``now``;
    a run that straddled the end of a month would see part of it in the next one.
    """
    now = utcnow()
    _, last = usage_period(now)
    month_end = dt.datetime(last.year, last.month, last.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
    if month_end - now < margin:
        time.sleep((month_end - now).total_seconds() + 1)
        now = utcnow()
    return now


def test_spend_counts_live_runs_backtests_and_studies(store_url: str) -> None:
    engine = open_store(store_url)
    set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=10**9)
    spend = store_spend_source(engine)
    now = _now_well_inside_a_month()
    assert workspace_status(engine, "demo", now, spend).spent_micro_usd == 0  # type: ignore[union-attr]

    with weather_fixture(days=5) as fx:  # a real workflow, its stand-in model server, metered
        live = run_live(WEATHER, data=fx.data, as_of=fx.start, clients=fx.clients, prices=fx.prices)
        record_live_decision(engine, live, workspace="demo")
        end = fx.start + 2 * fx.step
        with BacktestRecorder(engine, workspace="demo", workflow=WEATHER, start=fx.start, end=end, step=fx.step,
                              steps_planned=3, dataset="seattle_weather", prices=fx.prices) as rec:
            # While a backtest of the workflow runs, scheduled re-runs see it in flight.
            assert StoreStudies(engine).workflow_in_flight("demo", WEATHER.name) is True
            result = run_backtest(WEATHER, data=fx.data, start=fx.start, end=end, step=fx.step,
                                  clients=fx.clients, prices=fx.prices, on_step=rec.on_step)
            rec.finish(result.card)
    assert live.cost_micro_usd > 0 and result.card.cost_micro_usd > 0
    after_runs = workspace_status(engine, "demo", now, spend).spent_micro_usd  # type: ignore[union-attr]
    assert after_runs == live.cost_micro_usd + result.card.cost_micro_usd

    workflow = scenario.backend(shift_at=dt.datetime(2015, 1, 22, tzinfo=dt.UTC))
    sid = scenario.create_root_study(engine, workspace="demo", root_end=dt.datetime(2015, 2, 1, tzinfo=dt.UTC),
                                     budget_micro_usd=10**6, min_unseen_steps=10, workflow=workflow)
    scenario.run(engine, sid)
    # 2 arms × 2 folds × (5 + 5) steps + 10 holdout steps for the winner and 10 for the baseline
    study_spend = 60 * workflow.cost_per_step
    assert workspace_status(engine, "demo", now, spend).spent_micro_usd == after_runs + study_spend  # type: ignore[union-attr]
    # Another workspace and another month see none of it.
    assert spend("other", *usage_period(now)) == 0
    assert spend("demo", dt.date(2000, 1, 1), dt.date(2000, 1, 31)) == 0
    assert StoreStudies(engine).workflow_in_flight("demo", WEATHER.name) is False
