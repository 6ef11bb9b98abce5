"""A backtest cancelled while it runs is ``cancelled`` in its run card too: the card stored and
the one the run returns (what ``backtest run`` prints and the API shows) said "stopped (stopped
by the caller (a limit was reached))" beside a row that said ``cancelled``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.backtest.engine import BacktestStatus
from typestrict_pipeline.backtest.service import parse_time, run_and_store_backtest, standin_models
from typestrict_pipeline.backtest.store import list_backtests
from typestrict_pipeline.backtest.workflows import default_registry, load_dataset
from typestrict_pipeline.cli import main
from typestrict_pipeline.lifecycle.reaper import cancel_backtest
from typestrict_pipeline.store import open_store


def test_a_cancelled_backtest_says_cancelled_in_its_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    wf = default_registry().active("seattle_rain")
    out: dict[str, Any] = {}

    def run() -> None:
        with standin_models(wf, latency_s=0.1) as models:
            out["result"] = run_and_store_backtest(
                engine, wf, workspace="demo", data=load_dataset("seattle_weather"), dataset="seattle_weather",
                start=parse_time("2013-06-01"), end=parse_time("2013-06-30"), step=parse_time("2013-01-02")
                - parse_time("2013-01-01"), models=models, max_in_flight=1)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not list_backtests(engine, workspace="demo"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [running] = list_backtests(engine, workspace="demo")
        time.sleep(0.3)
        ended = cancel_backtest(engine, running.id)
        assert ended.state == "cancelled"
    finally:
        thread.join(timeout=120)
    bid, result = out["result"]
    assert bid == running.id
    assert result.card.status is BacktestStatus.CANCELLED
    assert result.card.stop_reason == ended.why and 0 < result.card.steps_run < 30
    assert main(["backtest", "show", bid, "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "cancelled"
    assert f"status          cancelled ({ended.why})" in shown["card"]
    assert "a limit was reached" not in shown["card"]
    engine.dispose()
