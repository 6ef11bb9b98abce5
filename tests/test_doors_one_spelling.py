"""One spelling and one number per concept on the CLI and the console (the real app in process,
a real store; the CLI through ``main``).

* A backtest's cost: the console's run card and Backtests tab wrote ``$0.0123`` and
  ``typestrict backtest list`` / ``show`` wrote ``$0.012345`` for the same backtest (two formatters:
  ``study.limits.format_usd`` and ``backtest.metering.format_usd``). Now one rule (the pages show
  no backtest's decimals; the one Settings → Usage and the leaderboard's Cost already wrote).
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.test_console_pages import Browser, _tiny_backtest, app  # noqa: F401  (the fixture)
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store


def _stored_backtest(url: str, cost_micro_usd: int) -> str:
    """A finished backtest of workspace ``acme`` that cost ``cost_micro_usd``: its id."""
    from typestrict_pipeline.backtest.store import save_backtest

    result = _tiny_backtest("priced")
    result = dataclasses.replace(result, card=dataclasses.replace(result.card, cost_micro_usd=cost_micro_usd))
    engine = open_store(url)
    try:
        return save_backtest(engine, result, workspace="acme")
    finally:
        engine.dispose()


def test_a_backtests_cost_reads_the_same_on_the_console_and_the_cli(
        app: tuple[object, str, str], sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    bid = _stored_backtest(sqlite_url, 12_345)
    b = Browser(app[0], app[1])
    card = b.get(f"/console/backtests/{bid}").text
    listed = b.get("/console/backtests").text
    b.close()
    shown = re.search(r'id="backtest-cost">([^<]*)<', card)
    assert shown is not None and shown.group(1) == "$0.0123"
    assert f'data-backtest="{bid}"' in listed and "<td>$0.0123</td>" in listed
    assert "$0.012345" not in card + listed  # the card's text too (its "cost" line)
    assert main(["backtest", "list", "--workspace", "acme", "--store-url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "$0.0123" in out and "$0.012345" not in out, out
    assert main(["backtest", "show", bid, "--store-url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "cost            $0.0123 total" in out and "$0.012345" not in out, out


def test_the_cost_rule_is_one_function() -> None:
    from typestrict_pipeline.backtest.metering import format_usd as backtest_usd
    from typestrict_pipeline.study.limits import format_usd

    for micro in (0, 5, 99, 100, 12_345, 999_999, 1_000_000, 2_500_000, 1_234_567_890, -5, -12_345):
        assert backtest_usd(micro) == format_usd(micro)


