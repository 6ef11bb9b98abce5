"""Studies on the real backtest engine (Seattle rain, stand-in model server), the holdout seal,
and promoting a winner through the evaluation gate."""

from __future__ import annotations

import datetime as dt

import pytest

from typestrict_pipeline.backtest.store import active_version_id
from typestrict_pipeline.errors import ConflictError
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.backends import EngineBackend, backend_from_config
from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
from typestrict_pipeline.study.promote import PromotionKind, promote_winner, workflow_params
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
from typestrict_pipeline.study.service import (
    StudyConfig,
    create_and_run_study,
    create_study_from_config,
    study_backend,
)
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyState

UTC = dt.UTC
ENGINE_BACKEND = {"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow",
                  "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_weather",
                                 "latency_s": 0.0}, "max_in_flight": 8}


def _weather_config(space: SearchSpace, **kw: object) -> StudyConfig:
    base: dict[str, object] = dict(
        workspace="demo", workflow="seattle_rain", workflow_version="vtest", space=space,
        start=dt.datetime(2013, 1, 2, tzinfo=UTC), end=dt.datetime(2013, 7, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=20, eval_steps=20, holdout_steps=20,
        max_candidates=4, max_total_steps=10_000, backend=ENGINE_BACKEND)
    base.update(kw)
    return StudyConfig(**base)  # type: ignore[arg-type]


def test_weather_study_on_the_engine_with_usd_budget_and_prompt_promotion(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    backend = backend_from_config(ENGINE_BACKEND)
    assert isinstance(backend, EngineBackend)
    prompt = backend.setup.workflow.prompts["forecast"]
    terse = prompt.replace(" Today: {today_mm:.1f} mm,", "")
    space = SearchSpace(grid={"threshold": [0.4, 0.6]}, prompts={"forecast": [prompt, terse]})
    cfg = _weather_config(space, budget_micro=1_000_000)
    out = create_and_run_study(engine, cfg, last_backtest=LastBacktest(cost_micro=3_000, steps=100))
    assert out.state == StudyState.FINISHED and out.holdout_score is not None
    board = load_leaderboard(engine, out.study_id)
    assert board.run == 4 and board.spend_micro is not None and 0 < board.spend_micro <= 1_000_000
    # The candidates' shares plus the baseline's holdout run make the study's spend.
    assert board.baseline_cost_micro is not None and board.baseline_cost_micro > 0
    assert sum(r.cost_micro or 0 for r in board.rows) + board.baseline_cost_micro == board.spend_micro
    md = render_markdown(board)
    assert "Holdout (the number to trust)" in md
    # Promote: the active version (threshold 0.5, the original prompt) is the gate's reference.
    winner = next(r for r in board.rows if r.candidate_id == board.winner_candidate_id)
    try:
        res = promote_winner(engine, out.study_id, study_backend(engine, out.study_id))
    except ConflictError as exc:
        assert "got lower" in str(exc)  # the gate may refuse: then nothing was activated
        assert active_version_id(engine, workspace="demo", workflow="seattle_rain") is None
        return
    # A winner whose prompt differs from the version's activates a version; else parameters.
    changed = winner.index % 2 == 0  # candidates: (0.4, original), (0.4, terse), (0.6, ...), ...
    assert res.kind == (PromotionKind.ACTIVATED_VERSION if changed else PromotionKind.APPLIED_PARAMETERS)
    if res.kind == PromotionKind.ACTIVATED_VERSION:
        assert active_version_id(engine, workspace="demo", workflow="seattle_rain") == res.version_id
    else:
        assert workflow_params(engine, "demo", "seattle_rain") == dict(res.params)


def test_candidates_the_workflow_rejects_are_discarded_with_the_reason(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    cfg = _weather_config(SearchSpace(grid={"threshold": [0.5, 1.5]}), max_candidates=2)
    sid = create_study_from_config(engine, cfg, last_backtest=LastBacktest(3_000, 100))
    board = load_leaderboard(engine, sid)
    assert (board.planned, board.discarded) == (2, 2)  # nothing ran yet
    assert board.discard_reasons["rejected by the workflow"] == 1
    (index, _, why), = board.discarded_candidates
    assert index == 2 and "expected a value in [0.0, 1.0], got 1.5" in why


def test_search_runs_cannot_read_the_holdout(sqlite_url: str) -> None:
    backend = backend_from_config(ENGINE_BACKEND)
    assert isinstance(backend, EngineBackend)
    seal = dt.datetime(2013, 6, 1, tzinfo=UTC)
    sealed = backend._data(seal)
    assert all(t.last_known < seal for t in sealed.values())
    assert any(t.last_known >= seal for t in backend.setup.data.values())


def _synthetic(space: SearchSpace) -> StudyConfig:
    return StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1", space=space,
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=20, eval_steps=30, holdout_steps=60,
        max_candidates=4, max_total_steps=10_000, backend={"backend": "synthetic", "noise": 0.05})


def test_parameters_only_winner_applies_its_parameters_when_the_gate_passes(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    out = create_and_run_study(engine, _synthetic(SearchSpace(grid={"skill": [0.55, 0.62]})))
    res = promote_winner(engine, out.study_id, study_backend(engine, out.study_id))
    assert res.kind == PromotionKind.APPLIED_PARAMETERS
    assert res.gate.passed and res.gate.active_score is not None
    assert workflow_params(engine, "demo", "wx") == {"skill": 0.62}
    assert "nothing to activate" in res.message


def test_gate_refuses_a_winner_worse_than_the_active_version(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    out = create_and_run_study(engine, _synthetic(SearchSpace(grid={"skill": [0.40, 0.42]})))
    with pytest.raises(ConflictError, match="expected the winner to beat the active version on the same window"):
        promote_winner(engine, out.study_id, study_backend(engine, out.study_id))
    assert workflow_params(engine, "demo", "wx") == {}


def test_promotion_needs_a_holdout_score(sqlite_url: str) -> None:
    """The budget (1,000 µ$ at 10 µ$ a step) covers exactly the first candidate's search (two
    folds of 20 + 30 steps), not the second's and not the winner's 60 holdout steps."""
    engine = open_store(sqlite_url)
    cfg = _synthetic(SearchSpace(grid={"skill": [0.5, 0.6]}))
    sid = create_study_from_config(engine, StudyConfig(**{**cfg.__dict__, "budget_micro": 1_000}),
                                   last_backtest=LastBacktest(10, 1))
    out = run_study_local(engine, sid, SyntheticBackend(noise=0.05))
    assert out.winner_candidate_id is not None and out.holdout_score is None
    with pytest.raises(ConflictError, match="expected a holdout score for the winner"):
        promote_winner(engine, sid, SyntheticBackend())


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize(("n", "budget"), [(2, 1_000), (3, 1_500)])
def test_a_study_its_budget_stops_runs_the_windows_one_process_would_however_many_workers(
        sqlite_url: str, workers: int, n: int, budget: int) -> None:
    """The page: a budget below the estimate stops the study "before the run that would exceed
    it", and "the candidates that ran are ranked, and a winner is picked from them". With four
    workers racing for 1,000 µ$, four chunks each reserved a tune window (800 µ$) and no eval
    window fitted: the study ended with no candidate ranked (CI, 2026-12-07). Such a study now
    runs its windows in plan order: the windows that run are the plan's longest prefix within
    the budget (10 µ$ a step: 200 µ$ a tune window, 300 an eval), whatever the worker count."""
    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study.runner import plan_runs
    from typestrict_pipeline.study.tables import RunRow, RunState

    engine = open_store(sqlite_url)
    cfg = _synthetic(SearchSpace(grid={"skill": [0.5, 0.6, 0.7][:n]}))
    sid = create_study_from_config(engine, StudyConfig(**{**cfg.__dict__, "budget_micro": budget}),
                                   last_backtest=LastBacktest(10, 1))
    expected, spent = set(), 0
    for key in plan_runs(engine, sid):
        if spent + 10 * key.steps > budget:
            break
        spent += 10 * key.steps
        expected.add((key.candidate_id, key.fold, key.window.value))
    out = run_study_local(engine, sid, SyntheticBackend(noise=0.05, sleep_s=0.001),
                          max_workers=workers)
    board = load_leaderboard(engine, sid)
    assert out.state == StudyState.BUDGET_REACHED and board.spend_micro == spent == budget
    with session_scope(engine) as s:
        done = {(r.candidate_id, r.fold, r.window) for r in s.query(RunRow).filter(
            RunRow.study_id == sid, RunRow.state == RunState.DONE.value)}
    assert done == expected
    first = min(board.rows, key=lambda r: r.index)
    assert first.complete and out.winner_candidate_id is not None


def test_the_ranking_is_computed_once_per_set_of_finished_search_runs(sqlite_url: str) -> None:
    """The finalize step reads the leaderboard twice (before and after the holdout): its ranking
    and bootstraps are reused while the finished search runs are the same, never when they change."""
    import typestrict_pipeline.study.leaderboard as leaderboard
    from typestrict_pipeline.study.repository import start_study
    from typestrict_pipeline.study.runner import execute_run, plan_runs

    engine = open_store(sqlite_url)
    sid = create_study_from_config(engine, _synthetic(SearchSpace(grid={"skill": [0.5, 0.55, 0.6]})))
    backend = SyntheticBackend(noise=0.05)
    start_study(engine, sid)
    keys = plan_runs(engine, sid)
    for key in keys[: len(keys) // 2]:
        execute_run(engine, key, backend)
    half = load_leaderboard(engine, sid)
    assert half.run > 0 and half.stats.rows
    assert load_leaderboard(engine, sid).stats is half.stats  # nothing finished since: reused
    for key in keys[len(keys) // 2:]:
        execute_run(engine, key, backend)
    full = load_leaderboard(engine, sid)
    assert full.stats is not half.stats and full.stats != half.stats
    leaderboard._RANKINGS.clear()
    fresh = load_leaderboard(engine, sid)
    assert fresh.to_json() == full.to_json()  # what was reused is what a fresh read computes


@pytest.mark.parametrize("budget", [100, 307])
def test_spend_never_exceeds_the_budget_even_when_the_estimate_is_far_too_low(
    sqlite_url: str, budget: int
) -> None:
    """Issue 3/7: the per-step estimate (0.1 µ$, from a backtest claiming 10 µ$ for 100 steps)
    is far below what a step costs on the engine (~12 µ$), with 8 steps in flight: the study
    spent 363 µ$ of a 100 µ$ budget. Each call is now reserved before it is made."""
    engine = open_store(sqlite_url)
    cfg = _weather_config(SearchSpace(grid={"threshold": [0.4, 0.6]}), n_folds=1, tune_steps=15,
                          eval_steps=15, holdout_steps=10, budget_micro=budget,
                          end=dt.datetime(2013, 4, 1, tzinfo=UTC))
    out = create_and_run_study(engine, cfg, last_backtest=LastBacktest(cost_micro=10, steps=100))
    board = load_leaderboard(engine, out.study_id)
    assert out.state == StudyState.BUDGET_REACHED
    assert board.spend_micro is not None and 0 < board.spend_micro <= budget


def _run_rows(engine: object, sid: int) -> tuple[int, int]:
    """The study's window runs and its spend (micro-USD)."""
    from sqlalchemy import func, select

    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study.tables import RunRow, StudyRow

    with session_scope(engine) as s:  # type: ignore[arg-type]
        runs = int(s.execute(select(func.count()).select_from(RunRow).where(RunRow.study_id == sid)).scalar_one())
        row = s.get(StudyRow, sid)
        assert row is not None
        return runs, int(row.spend_micro or 0)


def test_the_gate_reads_the_stored_baseline_run_with_the_numbers_a_new_run_gives(sqlite_url: str) -> None:
    """The gate compared the winner with the active version by running the studied version's
    defaults on the holdout again (unreserved, uncharged, unbounded in time). The study already
    ran and costed that run (its baseline): the gate now reads it, and on the engine's
    deterministic stand-in model its numbers are those the new run gives, to the last digit."""
    from typestrict_pipeline.study.promote import evaluation_gate
    from typestrict_pipeline.study.runner import CandidateSpec

    engine = open_store(sqlite_url)
    out = create_and_run_study(engine, _weather_config(SearchSpace(grid={"threshold": [0.3, 0.7]})),
                               last_backtest=LastBacktest(cost_micro=3_000, steps=100))
    assert out.state == StudyState.FINISHED and out.holdout_score is not None
    before = _run_rows(engine, out.study_id)
    stored = evaluation_gate(engine, out.study_id)  # no backend: nothing can be run
    assert _run_rows(engine, out.study_id) == before
    rerun = evaluation_gate(engine, out.study_id, study_backend(engine, out.study_id), CandidateSpec(0, 0, {}, {}))
    assert stored == rerun and stored.active_score is not None and stored.lower_bound is not None


def test_promoting_a_winner_calls_no_model_and_costs_nothing(sqlite_url: str) -> None:
    """Promotion through the stored baseline run: the backend runs no window (its calls are
    unchanged), the study's runs and spend are unchanged; the CLI's lazy backend is not even built."""
    engine = open_store(sqlite_url)
    backend = SyntheticBackend(noise=0.05)
    sid = create_study_from_config(engine, _synthetic(SearchSpace(grid={"skill": [0.55, 0.62]})))
    run_study_local(engine, sid, backend)
    calls, before = len(backend.calls), _run_rows(engine, sid)
    res = promote_winner(engine, sid, backend)
    assert res.gate.passed and res.kind == PromotionKind.APPLIED_PARAMETERS
    assert len(backend.calls) == calls and _run_rows(engine, sid) == before
    built: list[int] = []
    again = promote_winner(engine, sid, build_backend=lambda: built.append(1) or backend)  # type: ignore[func-returns-value]
    assert built == [] and again.gate == res.gate and len(backend.calls) == calls


def test_a_study_without_a_stored_baseline_run_needs_a_backend_to_promote(sqlite_url: str) -> None:
    """A study from before the baseline was scored (here: its baseline run removed) has nothing
    stored to compare with: without a backend (the API, the console) it is refused with how to
    promote it; with one (the CLI) the active version is run on the holdout, as before."""
    from sqlalchemy import delete

    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.tables import RunRow

    engine = open_store(sqlite_url)
    backend = SyntheticBackend(noise=0.05)
    sid = create_study_from_config(engine, _synthetic(SearchSpace(grid={"skill": [0.55, 0.62]})))
    run_study_local(engine, sid, backend)
    with session_scope(engine) as s:
        s.execute(delete(RunRow).where(RunRow.study_id == sid,
                                       RunRow.candidate_id == repo.BASELINE_CANDIDATE_ID))
    with pytest.raises(ConflictError, match=f"expected the baseline's holdout run of study {sid}"):
        promote_winner(engine, sid)
    assert workflow_params(engine, "demo", "wx") == {}
    calls = len(backend.calls)
    res = promote_winner(engine, sid, build_backend=lambda: backend)
    assert res.gate.passed and len(backend.calls) == calls + 1
    assert workflow_params(engine, "demo", "wx") == {"skill": 0.62}
