"""A study on the real engine (the registered ``seattle_rain`` workflow, its stand-in models on a
local HTTP server) whose model calls are admitted against its USD budget before they are made:
a budget a little above the estimate reaches the holdout, one below stops before the run that
would exceed it, and spend never passes the budget (docs/method/studies.md §5)."""

from __future__ import annotations

import datetime as dt

import pytest

from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.form import StudyForm, study_config
from typestrict_pipeline.study.runner import run_study_local
from typestrict_pipeline.study.service import create_study_from_config, study_backend
from typestrict_pipeline.study.tables import StudyState

UTC = dt.UTC
WORKFLOW = "seattle_rain"


def _form(workflow_budget: str | None) -> StudyForm:
    return StudyForm(workflow=WORKFLOW, start="2014-01-01", end="2015-12-31", tune_steps=30,
                     eval_steps=20, holdout_steps=30, folds=2, grid=["threshold=0.4,0.6"],
                     max_candidates=2, max_total_steps=100_000, budget_usd=workflow_budget)


def _backtested(engine) -> int:
    """The estimate of the study, from a completed backtest of the workflow's active version."""
    from typestrict_pipeline.backtest.service import run_and_store_backtest, standin_models
    from typestrict_pipeline.backtest.workflows import default_registry, load_dataset

    wf = default_registry().active(WORKFLOW)
    with standin_models(wf, latency_s=0.005) as models:
        run_and_store_backtest(engine, wf, workspace="demo", data=load_dataset("seattle_weather"),
                               dataset="seattle_weather", start=dt.datetime(2015, 1, 1, tzinfo=UTC),
                               end=dt.datetime(2015, 2, 28, tzinfo=UTC), step=dt.timedelta(days=1),
                               models=models, max_in_flight=8)
    sid = create_study_from_config(engine, study_config(_form("10")))
    with session_scope(engine) as s:
        est = repo.get_study(s, sid).estimate_micro
    repo.cancel_study(engine, sid)
    assert est is not None and est > 0
    return est


@pytest.mark.parametrize(("share", "holdout"), [(1.05, True), (0.9, False)])
def test_a_budget_near_the_estimate_is_spent_up_to_the_holdout_and_never_past_it(
        sqlite_url: str, share: float, holdout: bool) -> None:
    """Each model call in flight is held at its bound (about 4× what it costs), up to 8 at a
    time. A call that did not fit beside them cut the run at once: a budget 5% above the estimate
    ended "Budget reached" at about 80% spent, with no holdout. Now a call waits for those in
    flight to settle, so the study reaches its holdout; a budget below the estimate still stops
    before the run that would exceed it, and says so."""
    engine = open_store(sqlite_url)
    budget = int(_backtested(engine) * share)
    sid = create_study_from_config(engine, study_config(_form(f"{budget / 1e6:.6f}")))
    out = run_study_local(engine, sid, study_backend(engine, sid), max_workers=2)
    with session_scope(engine) as s:
        row = repo.get_study(s, sid)
        spend, reserved = row.spend_micro or 0, row.reserved_micro
    assert spend <= budget and reserved == 0, (spend, budget)
    if holdout:
        assert out.state == StudyState.FINISHED and out.holdout_score is not None, (out.state, spend, budget)
    else:
        assert out.state == StudyState.BUDGET_REACHED and out.holdout_score is None
        assert out.holdout_missing_reason is not None and "Budget (USD)" in out.holdout_missing_reason
    engine.dispose()
