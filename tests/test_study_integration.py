"""Studies ↔ re-runs integration: the minimum set at creation, the baseline on the holdout,
the lineage under the leaderboard, deleting a study, promoted parameters in live runs."""

from __future__ import annotations

import datetime as dt

import pytest

from typestrict_pipeline.errors import LimitError
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyRow

UTC = dt.UTC
DAY = dt.timedelta(days=1)
LAST = repo.LastBacktest(30, 10)


def _config(**overrides: object) -> StudyConfig:
    base: dict[str, object] = dict(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.50, 0.60]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 6, 1, tzinfo=UTC),
        step=DAY, n_folds=2, tune_steps=10, eval_steps=10, holdout_steps=20,
        max_candidates=2, max_total_steps=100_000, budget_micro=1_000_000,
        backend={"backend": "synthetic", "cost_per_step": 3},
    )
    base.update(overrides)
    return StudyConfig(**base)  # type: ignore[arg-type]


def test_min_unseen_steps_is_set_when_the_study_is_created(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    with pytest.raises(LimitError, match="Min unseen steps for a re-run as a whole number ≥ 1, got 0"):
        create_study_from_config(engine, _config(min_unseen_steps=0), last_backtest=LAST)
    sid = create_study_from_config(engine, _config(min_unseen_steps=20), last_backtest=LAST)
    with session_scope(engine) as s:
        row = s.get(StudyRow, sid)
        assert row is not None and row.min_unseen_steps == 20
    # Set once: a later "set if missing" keeps the study's own value.
    assert repo.set_min_unseen_steps(engine, sid, 5) == 20


def test_the_baseline_is_scored_on_the_same_holdout_and_counts_against_the_budget(sqlite_url: str) -> None:
    from typestrict_pipeline.study.inference import holdout_standard_error
    from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
    from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
    from typestrict_pipeline.study.tables import RunRow

    engine = open_store(sqlite_url)
    backend = SyntheticBackend(cost_per_step=3)
    # 2 candidates × 2 folds × (10 + 10) steps = 80 steps, then 20 holdout steps twice.
    sid = create_study_from_config(engine, _config(budget_micro=3 * 120), last_backtest=LAST)
    out = run_study_local(engine, sid, backend, max_workers=2)
    assert out.holdout_score is not None and out.holdout_baseline is not None
    with session_scope(engine) as s:
        runs = {r.candidate_id: r for r in s.query(RunRow).filter(RunRow.study_id == sid,
                                                                    RunRow.window == "HOLDOUT")}
        base, won = runs[repo.BASELINE_CANDIDATE_ID], runs[out.winner_candidate_id or -1]
        b = {t: v for t, v in base.scores_json or []}
        w = {t: v for t, v in won.scores_json or []}
        assert sorted(b) == sorted(w) and len(b) == 20  # the same slice, step for step
        diffs = [w[t] - b[t] for t in sorted(w)]
        row = s.get(StudyRow, sid)
        assert row is not None and row.spend_micro == 3 * 120  # the baseline's run is costed
    assert out.holdout_baseline == pytest.approx(sum(b.values()) / 20)
    board = load_leaderboard(engine, sid)
    # The stored SE carries the persistence measured over the search's candidates.
    dep = board.joint.dependence if board.joint is not None else None
    assert out.holdout_diff_se == pytest.approx(holdout_standard_error(diffs, 1, dependence=dep))
    md = render_markdown(board)
    assert "| Baseline on the holdout | " in md and "winner − baseline" in md

    # A budget that covers the winner's holdout but not the baseline's: the two are reserved
    # together, so neither runs; the holdout is missing with the page's words (issue 3/7).
    sid2 = create_study_from_config(engine, _config(budget_micro=3 * 110, workflow="wy"),
                                    last_backtest=LAST)
    out2 = run_study_local(engine, sid2, backend, max_workers=2)
    assert out2.holdout_score is None and out2.holdout_baseline is None
    assert (out2.holdout_missing_reason or "").startswith(
        "The budget was reached before the winner's holdout run.")
    md2 = render_markdown(load_leaderboard(engine, sid2))
    assert "| Holdout | The budget was reached before the winner's holdout run." in md2
    assert "Budget reached (limit: Budget (USD))" in md2


def test_delete_study_refuses_one_in_flight_and_removes_its_rows(sqlite_url: str) -> None:
    from typestrict_pipeline.cli import main
    from typestrict_pipeline.errors import ConflictError, NotFoundError
    from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
    from typestrict_pipeline.study.tables import CandidateRow, LockRow, RunRow

    engine = open_store(sqlite_url)
    sid = create_study_from_config(engine, _config(), last_backtest=LAST)
    with pytest.raises(ConflictError, match="Cancel it first"):
        repo.delete_study(engine, sid)  # pending: in flight
    run_study_local(engine, sid, SyntheticBackend(cost_per_step=3), max_workers=2)
    assert main(["study", "delete", str(sid), "--store-url", sqlite_url]) == 0
    with session_scope(engine) as s:
        assert s.get(StudyRow, sid) is None
        assert s.query(CandidateRow).filter(CandidateRow.study_id == sid).count() == 0
        assert s.query(RunRow).filter(RunRow.study_id == sid).count() == 0
        assert s.query(LockRow).count() == 0
    with pytest.raises(NotFoundError, match=f"expected an existing study id, got {sid}"):
        repo.delete_study(engine, sid)
    # The workflow is free again: a new study on it can start.
    assert create_study_from_config(engine, _config(), last_backtest=LAST) != sid


def test_promoted_parameters_are_used_by_live_runs_and_later_backtests(sqlite_url: str) -> None:
    from typestrict_pipeline.backtest.service import active_workflow
    from typestrict_pipeline.study.promote import PromotionKind, promote_winner
    from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local

    engine = open_store(sqlite_url)
    before = active_workflow(engine, "seattle_rain", workspace="demo")
    assert before.default_params["threshold"] == 0.5
    # A parameters-only study of seattle_rain (synthetic scores: the threshold is the skill).
    backend = SyntheticBackend(skill=lambda p: float(p.get("threshold", 0.5)), cost_per_step=3)
    sid = create_study_from_config(engine, _config(
        workflow="seattle_rain", space=SearchSpace(grid={"threshold": [0.55, 0.7]})), last_backtest=LAST)
    run_study_local(engine, sid, backend, max_workers=2)
    res = promote_winner(engine, sid, backend)
    assert res.kind is PromotionKind.APPLIED_PARAMETERS and res.params == {"threshold": 0.7}
    live = active_workflow(engine, "seattle_rain", workspace="demo")
    assert live.default_params == {**before.default_params, "threshold": 0.7}
    assert live.resolve_params(None)["threshold"] == 0.7  # what a run without overrides uses
    assert live.version_id == before.variant(params={"threshold": 0.7}).version_id
    # Only in that workspace.
    assert active_workflow(engine, "seattle_rain", workspace="other").default_params["threshold"] == 0.5


def test_the_leaderboard_warns_when_the_lineages_best_is_within_noise(
        sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Both arms are worse than the baseline (the default configuration, 0.5) before and after
    the shift, so every d_j is below zero: the best is within noise and the panel says so."""
    from typestrict_pipeline.cli import main
    from typestrict_pipeline.reruns import scenario
    from typestrict_pipeline.reruns.lineage import WITHIN_NOISE_WARNING

    engine = open_store(sqlite_url)
    child = scenario.within_noise_lineage(engine)
    assert main(["study", "leaderboard", str(child), "--store-url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "Best expected of 2 under noise" in out and "(holdout − baseline)" in out
    from typestrict_pipeline.reruns.lineage import summarize
    from typestrict_pipeline.reruns.service import lineage_entries

    summary = summarize(lineage_entries(engine, str(child)))
    assert summary.within_noise and summary.statements[0].startswith(
        WITHIN_NOISE_WARNING.split("{")[0])
    for statement in summary.statements:
        assert statement in out
