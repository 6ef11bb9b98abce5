"""``typestrict backtest run`` exits by how its backtest ended (``docs/cli.md``, "Exit codes"):
0 only when every planned step ran; ``stopped`` (``--on-step-error stop`` after a failed step)
exits 1 with why on stderr; a backtest cancelled from another command while it ran exits 3.
Before, both exited 0, as if the backtest had completed.

Real components: the CLI's ``main`` in process, a real local model server (``model_server``)
failing one day, the stand-in model server, ``typestrict backtest cancel`` from the main thread
while the run's ``main`` runs in another.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_backtest_failed_steps import _completion, _endpoint, model_server
from typestrict_pipeline.backtest.store import list_backtests
from typestrict_pipeline.cli import main
from typestrict_pipeline.cli.common import EXIT_CANCELLED
from typestrict_pipeline.store import open_store

RANGE = ["--start", "2013-06-01", "--end", "2013-06-05"]


def _one_bad_day(body: str) -> tuple[int, bytes]:  # the prompt of the step at 2013-06-03
    return (500, b"internal error") if "2013-06-02" in body else _completion("0.70")


def test_a_completed_backtest_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"]
    with model_server(_one_bad_day) as base:  # one step failed, the others ran: completed
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), *store, "--json"])
    captured = capsys.readouterr()
    assert (code, json.loads(captured.out)["status"], json.loads(captured.out)["error"]) == (0, "completed", None)
    assert captured.err == ""


def test_a_backtest_stopped_on_a_step_error_exits_1_with_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"]
    with model_server(_one_bad_day) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), *store,
                     "--on-step-error", "stop", "--max-in-flight", "1"])
    captured = capsys.readouterr()
    assert code == 1
    assert "status          stopped (step 2 at 2013-06-03T00:00:00Z failed and on_step_error is 'stop')" \
        in captured.out
    assert ("stopped before its end: step 2 at 2013-06-03T00:00:00Z failed and on_step_error is 'stop' "
            "(the first error: decide: ModelClientError: ") in captured.err
    assert "3 of 5 planned steps ran and are kept. Fix what the error names and run the backtest again, " \
           "or pass --on-step-error continue" in captured.err

    with model_server(_one_bad_day) as base:
        code = main(["backtest", "run", "seattle_rain", *RANGE, *_endpoint(base), *store,
                     "--on-step-error", "stop", "--max-in-flight", "1", "--json"])
    ran = json.loads(capsys.readouterr().out)
    assert (code, ran["status"]) == (1, "stopped")
    assert ran["error"] == "step 2 at 2013-06-03T00:00:00Z failed and on_step_error is 'stop'"


def test_a_backtest_cancelled_from_another_command_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    out: dict[str, Any] = {}

    def run() -> None:
        out["code"] = main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-07-30",
                            "--standin-latency", "0.1", "--max-in-flight", "1", "--store", url, "--new-store"])

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        running: list[Any] = []
        while not running:
            assert time.monotonic() < deadline, "the backtest never started"
            time.sleep(0.1)
            if (tmp_path / "store.db").exists():
                eng = open_store(url)
                try:
                    running = list_backtests(eng, workspace="demo")
                finally:
                    eng.dispose()
        time.sleep(0.3)
        assert main(["backtest", "cancel", running[0].id, "--store", url]) == 0
    finally:
        thread.join(timeout=120)
    assert out["code"] == EXIT_CANCELLED == 3
    captured = capsys.readouterr()
    bid = running[0].id
    assert f"backtest {bid}: cancelled (cancelled at " in captured.out  # what `backtest cancel` said
    assert "status          cancelled (cancelled at " in captured.out  # the run's card
    assert captured.err.startswith(f"typestrict: backtest {bid} was cancelled while it ran (cancelled at ")
    assert "by a person); " in captured.err
    assert "of 60 planned steps ran and are kept. Run the backtest again for a complete one." in captured.err
