"""The page items of "Backtests and studies" the command line shows (issue 13, item 7 of "Why").

* ``typestrict usage`` includes what studies cost ("Settings → Usage shows it"), next to backtests
  and live runs, and its totals add up;
* the estimate line counts the candidates left after "Max candidates" (the leaderboard's), not
  those planned;
* the estimate's words say what it counts: the holdout twice (the winner's run and the
  baseline's), and the study really runs it twice.

Everything runs through ``typestrict`` on a real SQLite store in a private home, on the stand-in
model server (offline, deterministic).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from typestrict_pipeline.backtest.metering import format_usd as people_usd
from typestrict_pipeline.backtest.workflows import default_registry
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.limits import estimate_cost_micro, format_estimate
from typestrict_pipeline.study.service import lookup_last_backtest
from typestrict_pipeline.study.tables import RunRow, WindowKind

STUDY = ["study", "run", "seattle_rain", "--start", "2014-06-01", "--end", "2015-12-31", "--folds", "1",
         "--tune-steps", "10", "--eval-steps", "10", "--holdout-steps", "10",
         "--grid", "threshold=0.4,0.5,0.6", "--max-candidates", "2", "--max-total-steps", "1000",
         "--budget-usd", "1"]


@pytest.fixture(scope="module")
def studied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A backtest (the estimate's base), then a 3-candidate study capped at 2, in a private home,
    built once for the module; yields the study's first line."""
    home = tmp_path_factory.mktemp("pages-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYPESTRICT_HOME", str(home))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        mp.delenv("DAGSTER_HOME", raising=False)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-01-31",
                         "--new-store"]) == 0
            start = len(out.getvalue())
            assert main(STUDY) == 0
        yield out.getvalue()[start:].splitlines()[0]


def test_the_estimate_counts_the_candidates_left_after_max_candidates(studied: str) -> None:
    assert re.fullmatch(r"study 1: ≈ \$[0-9.]+ for 2 candidates × 1 fold × 2 windows "
                        r"\+ the holdout", studied), studied


def test_the_holdout_in_the_estimate_counts_the_winner_and_the_baseline(studied: str) -> None:
    engine = open_store()
    version = default_registry().active("seattle_rain").version_id
    last = lookup_last_backtest(engine, "demo", "seattle_rain", version)
    assert last is not None
    # 2 candidates × 1 fold × (10 tune + 10 eval) + 2 × 10 holdout steps
    expected = estimate_cost_micro(last.cost_micro, last.steps, 2 * 20 + 2 * 10)
    assert f"≈ {format_estimate(expected)} for" in studied
    with session_scope(engine) as s:
        assert repo.get_study(s, 1).estimate_micro == expected
        holdout_runs = s.execute(select(RunRow).where(RunRow.study_id == 1, RunRow.window == WindowKind.HOLDOUT.value)
                                 ).scalars().all()
    assert sorted(r.candidate_id == repo.BASELINE_CANDIDATE_ID for r in holdout_runs) == [False, True]


def test_usage_shows_what_studies_cost(studied: str, capsys: pytest.CaptureFixture[str]) -> None:
    engine = open_store()
    with session_scope(engine) as s:
        spend = repo.get_study(s, 1).spend_micro
    assert spend is not None and spend > 0
    assert main(["usage", "demo", "--json"]) == 0
    u = json.loads(capsys.readouterr().out)
    assert [(x["study_id"], x["spend_micro"]) for x in u["studies"]] == [(1, spend)]
    total = u["total"]
    assert total["studies_micro"] == spend and total["backtests_micro"] > 0
    assert total["historical_micro"] == total["backtests_micro"] + total["studies_micro"]
    assert sum(d["studies_micro"] for d in u["by_day"]) == spend
    assert u["by_workflow"]["seattle_rain"]["studies_micro"] == spend

    assert main(["usage", "demo"]) == 0
    text = capsys.readouterr().out
    assert "Studies" in text and f"studies {people_usd(spend)})" in text
    assert f"Total: HISTORICAL {people_usd(total['historical_micro'])}, LIVE" in text
