"""The backtest engine against a real local model server: steps, scores, costs, concurrency, bad input."""

import datetime as dt
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from typestrict_pipeline.backtest import (
    BacktestStatus,
    CallKind,
    ModelPrice,
    Param,
    PointInTimeTable,
    PriceTable,
    RunMode,
    StepStatus,
    Workflow,
    run_backtest,
    run_live,
)
from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
from typestrict_pipeline.clients.standin import ChatRequest, Fault, StandinReply, StandinServer
from typestrict_pipeline.errors import InputError, LookAheadError

T0 = dt.datetime(2021, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
MODEL = "test-model"
PRICES = PriceTable(models={MODEL: ModelPrice(1_000_000, 2_000_000)}, tools={"lookup": 7})


def table(n: int = 120) -> PointInTimeTable:
    rng = np.random.default_rng(7)
    return PointInTimeTable(
        "series",
        event_time=[T0 + i * DAY for i in range(n)],
        known_time=[T0 + (i + 1) * DAY for i in range(n)],
        columns={"v": rng.normal(size=n).round(3)},
    )


def answer(request: ChatRequest) -> StandinReply:
    text = str(request.messages[-1]["content"])
    return StandinReply(text="up" if "+" in text else "down", prompt_tokens=100, completion_tokens=3)


@pytest.fixture
def server() -> Iterator[StandinServer]:
    with StandinServer(answer, latency_s=0.0, model_name=MODEL) as s:
        yield s


def client(server: StandinServer, **kw: Any) -> OpenAICompatibleClient:
    return OpenAICompatibleClient(server.base_url, MODEL, backoff_base_s=0.0, **kw)


def _decide(ctx: Any) -> Any:
    last = float(ctx.data["series"].last("v"))
    text = ctx.prompts["ask"].format(sign="+" if last >= 0 else "-")
    reply = ctx.models["m"].complete([{"role": "user", "content": text}])
    return reply.text


def _outcome(ctx: Any) -> Any:
    return "up" if float(ctx.data["series"].get("v", ctx.t)) >= 0 else "down"


def _score(decision: Any, happened: Any, ctx: Any) -> float:
    return 1.0 if decision == happened else 0.0


def model_workflow(**kw: Any) -> Workflow:
    base: dict[str, Any] = {
        "name": "sign_follow", "decide": _decide, "outcome": _outcome, "score": _score,
        "tables": ("series",), "horizon": DAY, "outcome_description": "the sign of the next value",
        "prompts": {"ask": "last sign {sign}: up or down?"}, "models": ("m",),
        "params": {"k": Param(3, "unused", minimum=1, maximum=10)},
    }
    base.update(kw)
    return Workflow(**base)


def run(server: StandinServer, wf: Workflow | None = None, **kw: Any) -> Any:
    args: dict[str, Any] = {"data": table(), "start": T0 + DAY, "end": T0 + 40 * DAY, "step": DAY,
                            "clients": {"m": client(server)}, "prices": PRICES}
    args.update(kw)
    return run_backtest(wf or model_workflow(), **args)


def test_a_backtest_scores_every_step_in_order_and_costs_every_call(server: StandinServer) -> None:
    result = run(server)
    card = result.card
    assert [s.index for s in result.steps] == list(range(40))
    assert [s.t for s in result.steps] == [T0 + (i + 1) * DAY for i in range(40)]
    assert card.steps_planned == card.steps_run == card.steps_ok == 40
    assert card.mode is RunMode.HISTORICAL and card.status is BacktestStatus.COMPLETED
    # 100 in, 3 out per call at $1 / $2 per 1M tokens = 100 + 6 micro-USD.
    assert all(s.cost_micro_usd == 106 for s in result.steps)
    assert card.cost_micro_usd == 40 * 106 and card.cost_per_step_micro_usd == 106
    assert card.input_tokens == 4000 and card.output_tokens == 120 and card.model_calls == 40
    scores = [s.score for s in result.steps]
    assert card.mean_score == pytest.approx(sum(scores) / 40)
    assert all(c.mode is RunMode.HISTORICAL and c.step_index == s.index
               for s in result.steps for c in s.calls)
    assert sum(b.steps for b in card.score_over_time) == 40
    text = card.to_text()
    assert "[HISTORICAL]" in text and "$0.0042 total, $0.0001 per step" in text


def test_every_request_carries_the_historical_mark_and_live_runs_the_live_one(server: StandinServer) -> None:
    run(server, end=T0 + 3 * DAY)
    assert {r.body["metadata"]["typestrict_mode"] for r in server.requests} == {"HISTORICAL"}
    live = run_live(model_workflow(), data=table(), as_of=T0 + 50 * DAY,
                    clients={"m": client(server)}, prices=PRICES)
    assert live.mode is RunMode.LIVE and all(c.mode is RunMode.LIVE for c in live.calls)
    assert server.requests[-1].body["metadata"]["typestrict_mode"] == "LIVE"
    assert live.decision in ("up", "down") and live.cost_micro_usd == 106


def test_the_request_mark_can_be_turned_off_but_the_records_stay_historical(server: StandinServer) -> None:
    result = run(server, end=T0 + 2 * DAY, mark_requests=False)
    assert all("metadata" not in r.body for r in server.requests)
    assert {c.mode for s in result.steps for c in s.calls} == {RunMode.HISTORICAL}


def test_concurrency_bounds_calls_in_flight() -> None:
    # Overlap is measured by the server (calls in flight), never by wall time: the suite runs on
    # a busy machine and a timing bound would fail there.
    latency, steps = 0.02, 64
    with StandinServer(answer, latency_s=latency, model_name=MODEL) as srv:
        result = run(srv, end=T0 + steps * DAY, max_in_flight=8)
        assert 2 <= srv.max_in_flight <= 8
    assert result.card.steps_ok == steps


def _stateful_decide(ctx: Any) -> Any:
    assert ctx.state is not None
    ctx.state["n"] = ctx.state.get("n", 0) + 1
    ctx.models["m"].complete([{"role": "user", "content": "+"}])
    return ctx.state["n"]


def test_a_stateful_workflow_runs_in_order_one_at_a_time(server: StandinServer) -> None:
    wf = model_workflow(name="counter", decide=_stateful_decide, stateful=True,
                        score=lambda d, o, c: float(d))
    result = run(server, wf, end=T0 + 12 * DAY, max_in_flight=8)
    assert [s.decision for s in result.steps] == list(range(1, 13))
    assert server.max_in_flight == 1


def _flaky(ctx: Any) -> Any:
    if ctx.step_index == 3:
        raise RuntimeError("the feed was down")
    if ctx.step_index == 5:
        return None
    return "up"


def test_a_failing_step_is_recorded_with_its_error_and_the_backtest_goes_on() -> None:
    wf = model_workflow(name="flaky", decide=_flaky, models=())
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 10 * DAY, step=DAY)
    s3, s5 = result.steps[3], result.steps[5]
    assert s3.status is StepStatus.FAILED and s3.score is None
    assert s3.error == "decide: RuntimeError: the feed was down"
    assert s5.status is StepStatus.FAILED
    assert s5.error is not None and "expected a decision from workflow 'flaky' at 2021-01-07T00:00:00Z, got None" in s5.error
    card = result.card
    assert card.steps_run == 10 and card.steps_failed == 2 and card.steps_ok == 8
    assert card.status is BacktestStatus.COMPLETED
    assert card.first_error == s3.error
    assert card.mean_score == pytest.approx(np.mean([s.score for s in result.steps if s.score is not None]))


def test_stop_on_step_error_keeps_what_ran() -> None:
    wf = model_workflow(name="flaky", decide=_flaky, models=())
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 10 * DAY, step=DAY,
                          on_step_error="stop", max_in_flight=1)
    assert result.card.status is BacktestStatus.STOPPED
    assert result.card.steps_run == 4 and result.steps[-1].status is StepStatus.FAILED
    assert result.card.stop_reason is not None and "on_step_error is 'stop'" in result.card.stop_reason


def test_should_stop_stops_before_the_next_step() -> None:
    seen: list[int] = []
    wf = model_workflow(name="plain", decide=lambda c: "up", models=())
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 30 * DAY, step=DAY,
                          max_in_flight=1, on_step=lambda r: seen.append(r.index),
                          should_stop=lambda: len(seen) >= 7)
    assert result.card.steps_run == 7 and result.card.status is BacktestStatus.STOPPED
    assert "a limit was reached" in (result.card.stop_reason or "")


def test_no_outcome_is_unscored_never_zero() -> None:
    wf = model_workflow(name="plain", decide=lambda c: "up", models=(), outcome=lambda c: None)
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 5 * DAY, step=DAY)
    assert {s.status for s in result.steps} == {StepStatus.UNSCORED}
    assert result.card.mean_score is None
    assert "n/a (no scored step)" in result.card.to_text()


def test_reading_the_future_stops_the_backtest_with_a_clear_error() -> None:
    wf = model_workflow(name="peek", models=(),
                        decide=lambda c: float(c.data["series"].get("v", c.t + DAY)) > 0)
    with pytest.raises(LookAheadError, match=r"table 'series': expected a read of rows known at or before the step's time 2021-01-02T00:00:00Z") as info:
        run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 20 * DAY, step=DAY, max_in_flight=1)
    # The engine attaches the partial result to the exception as an ad-hoc attribute.
    partial = info.value.backtest_result  # type: ignore[attr-defined]
    assert partial.card.status is BacktestStatus.FAILED and partial.card.steps_run == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": T0 - 30 * DAY},
         r"expected a time range inside the data of table 'series': decisions from 2021-01-02T00:00:00Z \(when its first row is known\) to 2021-04-30T00:00:00Z \(the last time whose outcome, 1 day later, is known\), got 2020-12-02T00:00:00Z \.\. 2021-01-11T00:00:00Z"),
        ({"end": T0 + 200 * DAY}, r"expected a time range inside the data of table 'series'"),
        ({"step": dt.timedelta(days=4)},
         r"expected a step size that fits the time range a whole number of times \(2021-01-02T00:00:00Z \.\. 2021-01-11T00:00:00Z is 9 days\), got a step of 4 days: 2 steps and 1 day left over. End the range at 2021-01-10T00:00:00Z or 2021-01-14T00:00:00Z"),
        ({"step": dt.timedelta(days=6)}, r"got a step of 6 days: 1 step and 3 days left over\."),  # not "1 steps"
        ({"step": dt.timedelta(0)}, r"expected a positive step size \(for example 1 day\), got 0 seconds"),
        ({"end": T0}, r"expected a time range whose end is not before its start"),
        ({"start": dt.datetime(2021, 1, 2)}, r"expected start as a timezone-aware datetime"),
        ({"data": pd.DataFrame({"v": [1.0]})},
         r"expected point-in-time tables \(every row with the time it became known\), got DataFrame"),
        ({"data": {"series": pd.DataFrame({"v": [1.0]})}},
         r"expected table 'series' as a PointInTimeTable .* got DataFrame. Build it with PointInTimeTable.from_frame"),
        ({"data": {"other": table()}}, r"expected the tables workflow 'plain' reads \(series\), got tables \['other'\] \(missing: series\)"),
        ({"params": {"nope": 1}}, r"expected a parameter of workflow 'plain' \(k\), got 'nope'"),
        ({"params": {"k": 99}}, r"parameter 'k' of workflow 'plain': expected a value in \[1, 10\], got 99"),
        ({"on_step_error": "retry"}, r"expected on_step_error 'continue' or 'stop', got 'retry'"),
        ({"mode": RunMode.LIVE}, r"expected mode HISTORICAL \(a backtest replays the past\), got LIVE"),
    ],
)
def test_bad_input_gets_a_clear_message(kwargs: dict[str, Any], message: str) -> None:
    wf = model_workflow(name="plain", decide=lambda c: "up", models=())
    args: dict[str, Any] = {"data": table(), "start": T0 + DAY, "end": T0 + 10 * DAY, "step": DAY}
    args.update(kwargs)
    with pytest.raises(InputError, match=message):
        run_backtest(wf, **args)


def test_an_unpriced_model_is_refused_before_any_call(server: StandinServer) -> None:
    with pytest.raises(InputError, match=r"expected a price for model 'test-model' in the price table, got none"):
        run(server, prices=PriceTable())
    assert server.served == 0


def test_retries_by_the_client_and_by_the_meter_are_all_recorded(server: StandinServer) -> None:
    # The client retries a 500 by itself (2 attempts): one failed attempt, one billed answer.
    server.add_faults(Fault.server_error())
    result = run(server, end=T0 + DAY, clients={"m": client(server, max_attempts=2)}, max_in_flight=1)
    calls = result.steps[0].calls
    assert [(c.attempt, c.ok, c.cost_micro_usd) for c in calls] == [(1, False, 0), (2, True, 106)]
    # The client gives up at once (1 attempt); the meter retries: both attempts recorded.
    server.add_faults(Fault.server_error())
    result = run(server, end=T0 + DAY, clients={"m": client(server, max_attempts=1)}, retries=1,
                 max_in_flight=1)
    calls = result.steps[0].calls
    assert [(c.attempt, c.ok) for c in calls] == [(1, False), (2, True)]
    assert result.card.failed_calls == 1 and result.card.model_calls == 2


def _judge_score(decision: Any, happened: Any, ctx: Any) -> float:
    verdict = ctx.models["judge"].complete([{"role": "user", "content": f"+ {decision} vs {happened}"}])
    return 1.0 if verdict.text == "up" else 0.0


def _tool_decide(ctx: Any) -> Any:
    ctx.tools["lookup"]("x")
    return "up"


def test_judge_and_tool_calls_are_metered(server: StandinServer) -> None:
    wf = model_workflow(name="judged", decide=_tool_decide, models=(), judges=("judge",),
                        tools=("lookup",), score=_judge_score)
    result = run(server, wf, end=T0 + 4 * DAY, clients={"judge": client(server)},
                 tools={"lookup": lambda q: q.upper()})
    card = result.card
    assert card.judge_calls == 4 and card.tool_calls == 4 and card.model_calls == 0
    assert card.cost_micro_usd == 4 * (106 + 7)
    assert {c.kind for s in result.steps for c in s.calls} == {CallKind.JUDGE, CallKind.TOOL}


def test_version_id_follows_code_prompts_and_defaults_and_is_stable_across_processes() -> None:
    wf = model_workflow()
    assert wf.variant(prompts={"ask": "other {sign}"}).version_id != wf.version_id
    assert wf.variant(params={"k": 4}).version_id != wf.version_id
    assert wf.variant(params={"k": 3}).version_id == wf.version_id
    assert model_workflow(decide=_flaky).version_id != wf.version_id
    code = ("from typestrict_pipeline.backtest.workflows.weather import WEATHER\n"
            "print(WEATHER.version_id)")
    ids = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() for _ in range(2)}
    from typestrict_pipeline.backtest.workflows.weather import WEATHER

    assert ids == {WEATHER.version_id}


def test_run_params_make_the_run_version() -> None:
    wf = model_workflow(name="plain", decide=lambda c: int(c.params["k"]), models=(),
                        score=lambda d, o, c: float(d))
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 3 * DAY, step=DAY,
                          params={"k": 5})
    assert result.card.params == {"k": 5} and result.card.mean_score == 5.0
    assert result.version_id == wf.variant(params={"k": 5}).version_id != wf.version_id


def test_steps_run_concurrently_in_threads_without_sharing_views() -> None:
    """Concurrent steps each see their own time: the decision echoes its view's row count."""
    barrier_hits: list[int] = []
    lock = threading.Lock()

    def decide(ctx: Any) -> Any:
        with lock:
            barrier_hits.append(ctx.step_index)
        time.sleep(0.001)
        return len(ctx.data["series"])

    wf = model_workflow(name="rows", decide=decide, models=(), score=lambda d, o, c: float(d))
    result = run_backtest(wf, data=table(), start=T0 + DAY, end=T0 + 60 * DAY, step=DAY,
                          max_in_flight=8)
    assert [s.decision for s in result.steps] == list(range(1, 61))


class _Wallet:
    """A CallGate with ``room`` micro-USD: admits a call only if its bound fits (issue 3/7)."""

    def __init__(self, room: int) -> None:
        self.room, self.held, self.spent, self.lock = room, 0, 0, threading.Lock()
        self.bounds: list[tuple[int, int]] = []

    def admit(self, bound: int) -> bool:
        with self.lock:
            if self.spent + self.held + bound > self.room:
                return False
            self.held += bound
            return True

    def settle(self, bound: int, cost: int) -> None:
        with self.lock:
            self.held -= bound
            self.spent += cost
            self.bounds.append((bound, cost))


def test_every_call_is_reserved_before_it_is_made_and_a_refused_call_is_not_made(
    server: StandinServer,
) -> None:
    """Reserve before calling: a call is admitted for the most it can cost before it is sent, so
    what a run spends never passes what it may spend; the refused call never reaches the model."""
    wallet = _Wallet(room=1_000)
    result = run(server, gate=wallet, max_in_flight=4)
    made = sum(1 for s in result.steps for c in s.calls if c.ok)
    assert made == len(server.requests) < 40  # the calls past the room were never sent
    assert wallet.spent == sum(s.cost_micro_usd for s in result.steps) <= 1_000
    assert all(cost <= bound for bound, cost in wallet.bounds)
    refused = [s for s in result.steps if s.status is StepStatus.FAILED]
    assert refused and all("was not made" in (s.error or "") for s in refused)
