"""The backtests' store on SQLite and the real PostgreSQL: nothing historical reads back as live."""

import datetime as dt
import threading
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from typestrict_pipeline.backtest import (
    BacktestStatus,
    Param,
    PointInTimeTable,
    RunMode,
    StepStatus,
    Workflow,
    run_backtest,
    run_live,
)
from typestrict_pipeline.backtest import store as bs
from typestrict_pipeline.backtest.service import active_workflow
from typestrict_pipeline.backtest.workflow import WorkflowRegistry
from typestrict_pipeline.backtest.workflows.weather import DEMO_PRICES, WEATHER, weather_fixture
from typestrict_pipeline.errors import LookAheadError, StoreError
from typestrict_pipeline.store import open_store

T0 = dt.datetime(2021, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def table(n: int = 60) -> PointInTimeTable:
    return PointInTimeTable("series", event_time=[T0 + i * DAY for i in range(n)],
                            known_time=[T0 + (i + 1) * DAY for i in range(n)],
                            columns={"v": np.arange(n, dtype=float)})


def simple(name: str = "counter", **kw: Any) -> Workflow:
    args: dict[str, Any] = {
        "name": name, "decide": lambda c: {"last": float(c.data["series"].last("v"))},
        "outcome": lambda c: float(c.data["series"].last("v")),
        "score": lambda d, o, c: -abs(d["last"] - o), "tables": ("series",), "horizon": DAY,
        "outcome_description": "the next value", "params": {"k": Param(1)},
    }
    args.update(kw)
    return Workflow(**args)


@pytest.fixture
def engine(store_url: str) -> Any:
    eng = open_store(store_url)
    yield eng
    eng.dispose()


def test_a_backtest_round_trips_with_its_card_and_steps(engine: Any) -> None:
    wf = simple()
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 20 * DAY, step=DAY)
    bid = bs.save_backtest(engine, result, workspace="w1", dataset="toy")
    stored = bs.load_backtest(engine, bid)
    assert stored.mode is RunMode.HISTORICAL and stored.status is BacktestStatus.COMPLETED
    assert stored.card == result.card
    steps = bs.load_steps(engine, bid)
    assert [s.index for s in steps] == list(range(20))
    assert all(s.mode is RunMode.HISTORICAL and s.score == -1.0 for s in steps)
    assert steps[0].decision == {"last": 0.0} and steps[0].outcome == 1.0
    last = bs.last_completed_backtest(engine, workspace="w1", workflow="counter", version_id=wf.version_id)
    assert last is not None and last.id == bid and last.steps_run == 20
    assert bs.last_completed_backtest(engine, workspace="w2", workflow="counter",
                                      version_id=wf.version_id) is None


def test_historical_is_never_read_back_as_live(engine: Any) -> None:
    with weather_fixture(days=10) as fx:
        result = run_backtest(WEATHER, data=fx.data, start=fx.start, end=fx.end, step=fx.step,
                              clients=fx.clients, prices=fx.prices)
        bid = bs.save_backtest(engine, result, workspace="w", dataset="seattle_weather")
        live = run_live(WEATHER, data=fx.data, as_of=dt.datetime(2016, 1, 1, tzinfo=dt.UTC),
                        clients=fx.clients, prices=fx.prices)
    live_id = bs.record_live_decision(engine, live, workspace="w")
    got = bs.live_decisions(engine, workspace="w", workflow=WEATHER.name)
    assert [d.id for d in got] == [live_id] and got[0].mode is RunMode.LIVE
    assert bid not in {d.id for d in got}
    # The API refuses to store a replayed decision as live ...
    with pytest.raises(StoreError, match="expected a LIVE decision from run_live, got StepRecord"):
        bs.record_live_decision(engine, result.steps[0], workspace="w")  # type: ignore[arg-type]
    forged = type(live)(**{**live.__dict__, "mode": RunMode.HISTORICAL})
    with pytest.raises(StoreError, match="expected a LIVE decision"):
        bs.record_live_decision(engine, forged, workspace="w")
    mixed = type(live)(**{**live.__dict__, "calls": result.steps[0].calls})
    with pytest.raises(StoreError, match="expected only LIVE calls in a live decision, got 1 HISTORICAL"):
        bs.record_live_decision(engine, mixed, workspace="w")
    # ... and the database refuses it too, whatever the code does.
    now = "2026-01-01 00:00:00"
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO backtest_live_decisions (id, workspace, workflow, version_id, mode, as_of, "
            "status, cost_micro_usd, params_json, created_at) VALUES ('x', 'w', 'seattle_rain', 'v', "
            f"'HISTORICAL', '{now}', 'ok', 0, '{{}}', '{now}')"))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO backtest_steps (backtest_id, step_index, t, mode, status, score, "
            f"cost_micro_usd) VALUES ('{bid}', 999, '{now}', 'LIVE', 'ok', 1.0, 0)"))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO backtest_calls (workspace, workflow, version_id, mode, run_kind, run_id, "
            "kind, name, model, input_tokens, output_tokens, cost_micro_usd, latency_s, attempt, ok, "
            f"started_at, day) VALUES ('w', 'x', 'v', 'LIVE', 'backtest', '{bid}', 'model', 'm', 'm', "
            f"1, 1, 1, 0.1, 1, true, '{now}', '2026-01-01')"))
    # Usage shows both, apart.
    rows = bs.usage(engine, workspace="w")
    by_mode = {m: sum(r.cost_micro_usd for r in rows if r.mode is m) for m in RunMode}
    assert by_mode[RunMode.HISTORICAL] == result.card.cost_micro_usd > 0
    assert by_mode[RunMode.LIVE] == live.cost_micro_usd > 0
    assert {r.workflow for r in rows} == {WEATHER.name}
    assert sum(r.calls for r in rows if r.mode is RunMode.HISTORICAL) == 10


def test_a_step_without_a_score_cannot_be_ok_in_the_database(engine: Any) -> None:
    result = run_backtest(simple(), data=table(), start=T0 + DAY, end=T0 + 2 * DAY, step=DAY)
    bid = bs.save_backtest(engine, result, workspace="w")
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text("INSERT INTO backtest_steps (backtest_id, step_index, t, mode, status, "
                          f"cost_micro_usd) VALUES ('{bid}', 50, '2026-01-01 00:00:00', "
                          "'HISTORICAL', 'ok', 0)"))


def _peek_at_5(ctx: Any) -> Any:
    if ctx.step_index == 5:
        return ctx.data["series"].get("v", ctx.t + DAY)
    return {"last": float(ctx.data["series"].last("v"))}


def test_the_recorder_keeps_every_finished_step_when_the_run_fails(engine: Any) -> None:
    wf = simple(name="peeker", decide=_peek_at_5)
    with pytest.raises(LookAheadError), bs.BacktestRecorder(
        engine, workspace="w", workflow=wf, start=T0 + DAY, end=T0 + 20 * DAY, step=DAY,
        steps_planned=20, dataset="toy", prices=DEMO_PRICES, batch=2,
    ) as rec:
        result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 20 * DAY, step=DAY,
                              max_in_flight=1, on_step=rec.on_step)
        rec.finish(result.card)
    stored = bs.load_backtest(engine, rec.id)
    assert stored.status is BacktestStatus.FAILED
    assert stored.error is not None and stored.error.startswith("LookAheadError: table 'series'")
    assert stored.steps_run == 5 and len(bs.load_steps(engine, rec.id)) == 5


def test_a_failed_step_is_stored_with_its_error(engine: Any) -> None:
    def decide(ctx: Any) -> Any:
        if ctx.step_index == 2:
            raise ValueError("bad row")
        return {"last": 1.0}

    result = run_backtest(simple(name="flaky", decide=decide), data=table(), start=T0 + DAY,
                          end=T0 + 4 * DAY, step=DAY)
    bid = bs.save_backtest(engine, result, workspace="w")
    steps = bs.load_steps(engine, bid)
    assert steps[2].status is StepStatus.FAILED and steps[2].score is None
    assert steps[2].error == "decide: ValueError: bad row"
    card = bs.load_backtest(engine, bid).card
    assert card is not None and card.steps_failed == 1


def test_concurrent_activations_leave_exactly_one_active_version(engine: Any) -> None:
    reg = WorkflowRegistry()
    base = simple(fixture=lambda: None)
    reg.register(base)
    variants = [base.variant(params={"k": k}) for k in range(2, 10)]
    barrier = threading.Barrier(len(variants))
    errors: list[BaseException] = []

    def activate(wf: Workflow) -> None:
        try:
            barrier.wait()
            bs.activate_version(engine, workspace="w", workflow=wf)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=activate, args=(v,)) for v in variants]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT version_id FROM backtest_active_versions "
                                 "WHERE workspace = 'w' AND workflow = 'counter'")).all()
    assert len(rows) == 1 and rows[0][0] in {v.version_id for v in variants}
    # The active version is rebuilt from code plus its stored parameters.
    active = active_workflow(engine, "counter", workspace="w", registry=reg)
    assert active.version_id == rows[0][0]
    assert active_workflow(engine, "counter", workspace="other", registry=reg).version_id == base.version_id
