"""Studies in the store: the one-study lock, budget reservations under parallel runs, resume,
cancel, limits, legacy studies without cost (SQLite and the real PostgreSQL server)."""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from alembic import command
from sqlalchemy import text

from typestrict_pipeline.errors import ConflictError, LimitError
from typestrict_pipeline.store import create_store_engine, open_store, session_scope
from typestrict_pipeline.store.engine import alembic_config, migration_lock
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import FoldLayout, plan_folds
from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
from typestrict_pipeline.study.limits import StopLimit, StudyLimits
from typestrict_pipeline.study.runner import (
    SyntheticBackend,
    execute_run,
    plan_runs,
    run_study_local,
)
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunState, StudyRow, StudyState

UTC = dt.UTC


DEFAULT_LAST = repo.LastBacktest(1000, 100)


def _layout(n_folds: int = 2) -> FoldLayout:
    return plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
                      step=dt.timedelta(days=1), n_folds=n_folds, tune_steps=20, eval_steps=20,
                      holdout_steps=20)


def _create(engine, *, workflow: str = "wx", n: int = 4, limits: StudyLimits | None = None,
            last: repo.LastBacktest | None = DEFAULT_LAST) -> int:
    space = SearchSpace(grid={"skill": [0.5 + 0.01 * i for i in range(n)]})
    return repo.create_study(engine, workspace="demo", workflow=workflow, workflow_version="v1",
                             space=space, layout=_layout(), limits=limits or StudyLimits(n, 10_000),
                             last_backtest=last)


def test_study_without_limits_or_without_backtest_for_usd_is_refused(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    with pytest.raises(LimitError, match="expected Max candidates"):
        _create(engine, limits=StudyLimits(None, 100))
    with pytest.raises(LimitError, match=re.escape(
            "This version has no completed backtest in your workspace to estimate from. Run one, "
            "then try again, or leave the USD budget empty.")):
        _create(engine, limits=StudyLimits(4, 1000, 5_000), last=None)
    _create(engine, limits=StudyLimits(4, 1000, None), last=None)  # no USD budget: allowed


def test_second_study_on_a_workflow_is_refused_until_the_first_ends(store_url: str) -> None:
    engine = open_store(store_url)
    first = _create(engine)
    with pytest.raises(ConflictError, match=f"got study {first} .PENDING.. One study at a time per workflow"):
        _create(engine)
    _create(engine, workflow="other")  # another workflow is fine
    assert repo.cancel_study(engine, first) == StudyState.CANCELLED
    _create(engine)


def test_two_concurrent_starts_cannot_both_pass_on_postgres(pg_url: str) -> None:
    open_store(pg_url)
    barrier = threading.Barrier(8)
    results: list[object] = []

    def start() -> None:
        engine = create_store_engine(pg_url)
        barrier.wait()
        try:
            results.append(_create(engine))
        except ConflictError as exc:
            results.append(exc)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=start) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sum(isinstance(r, int) for r in results) == 1
    assert sum(isinstance(r, ConflictError) for r in results) == 7


def test_parallel_runs_never_overshoot_the_usd_budget_on_postgres(pg_url: str) -> None:
    engine = open_store(pg_url)
    # 10 micro-USD per step by the last backtest; each 20-step window reserves 200.
    sid = _create(engine, n=8, limits=StudyLimits(8, 100_000, budget_micro=2_500),
                  last=repo.LastBacktest(1000, 100))
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    backend = SyntheticBackend(cost_per_step=10)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda k: execute_run(create_store_engine(pg_url), k, backend), keys))
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None
        assert study.spend_micro is not None and study.spend_micro <= 2_500
        assert study.reserved_micro == 0 and study.steps_reserved == 0
        assert study.stop_limit == "Budget (USD)"
        ran = [r for r in results if r.status == "DONE"]
        assert study.spend_micro == sum(r.cost_micro for r in ran) == 200 * len(ran)
        assert len(ran) == 12  # 2_500 // 200
        cost_by_candidate = s.execute(text(
            "SELECT COALESCE(SUM(cost_micro), 0) FROM study_candidates WHERE study_id = :s"), {"s": sid}).scalar()
        assert cost_by_candidate == study.spend_micro


def test_budget_below_the_estimate_stops_before_the_holdout_and_says_so(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    # 2 candidates × 2 folds × 2 windows × 20 steps = 160 steps + 2 × 20 holdout (winner and
    # baseline) = 200 steps at 10 µ$.
    sid = _create(engine, n=2, limits=StudyLimits(2, 100_000, budget_micro=1_700))
    out = run_study_local(engine, sid, SyntheticBackend(cost_per_step=10), max_workers=2)
    assert out.state == StudyState.BUDGET_REACHED
    assert out.holdout_score is None
    assert out.holdout_missing_reason is not None
    assert out.holdout_missing_reason == (
        "The budget was reached before the winner's holdout run. The ranking stands; the holdout "
        "score does not exist. Raise the budget and run the study again to get it.\n"
        "Limit reached: Budget (USD).")
    board = load_leaderboard(engine, sid)
    md = render_markdown(board)
    assert "Budget reached (limit: Budget (USD))" in md
    assert "$0.0016 of $0.0017 budget" in md
    assert "≈ $0.0020 for 2 candidates × 2 folds × 2 windows + the holdout" in md
    assert ("| Holdout | The budget was reached before the winner's holdout run. The ranking stands;"
            in md) and "|  | Limit reached: Budget (USD). |" in md
    assert "| Budget | $0.0017 is below the estimate $0.0020: the study stops before the run" in md
    assert board.run == 2 and board.winner_candidate_id is not None


@pytest.mark.parametrize("budget", [1_800, 1_850, 1_990])
def test_the_holdout_and_the_baseline_are_reserved_together(sqlite_url: str, budget: int) -> None:
    """Issue 3/7: the baseline's holdout run alone could be what the budget refused after the
    winner's ran. Now both are reserved at once: 1,600 µ$ of search leaves room for the winner's
    200 but not for both (400), so neither runs and the holdout is reported missing."""
    engine = open_store(sqlite_url)
    sid = _create(engine, n=2, limits=StudyLimits(2, 100_000, budget_micro=budget))
    out = run_study_local(engine, sid, SyntheticBackend(cost_per_step=10), max_workers=2)
    assert out.state == StudyState.BUDGET_REACHED and out.holdout_score is None
    assert out.holdout_missing_reason is not None
    assert out.holdout_missing_reason.startswith("The budget was reached before the winner's")
    assert out.holdout_baseline_missing_reason == (
        "the winner's holdout was not scored, so the baseline was not run")
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.spend_micro == 1_600 <= budget
        assert study.reserved_micro == 0 and study.steps_reserved == 0
        scored = s.execute(text("SELECT COUNT(*) FROM study_runs WHERE study_id = :s AND "
                                "window = 'HOLDOUT' AND steps_done > 0"), {"s": sid}).scalar()
    assert scored == 0
    enough = _create(engine, workflow="wx2", n=2, limits=StudyLimits(2, 100_000, budget_micro=2_000))
    both = run_study_local(engine, enough, SyntheticBackend(cost_per_step=10), max_workers=2)
    assert both.holdout_score is not None and both.holdout_baseline is not None


def test_max_total_steps_stops_the_study_and_keeps_what_ran(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _create(engine, n=4, limits=StudyLimits(4, 200))
    out = run_study_local(engine, sid, SyntheticBackend(), max_workers=1)
    assert out.state == StudyState.BUDGET_REACHED
    board = load_leaderboard(engine, sid)
    assert board.stop_limit == "Max total steps"
    assert board.run == 3  # 200 steps = 2.5 candidates: the third ran its first window(s)
    assert any(not r.complete for r in board.rows)
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.steps_used <= 200


def test_max_candidates_discards_the_rest_and_still_scores_the_holdout(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    space = SearchSpace(grid={"skill": [0.5, 0.6, 0.55, 0.52]})
    sid = repo.create_study(engine, workspace="demo", workflow="wx", workflow_version="v1",
                            space=space, layout=_layout(), limits=StudyLimits(2, 10_000))
    out = run_study_local(engine, sid, SyntheticBackend(), max_workers=2)
    assert out.state == StudyState.BUDGET_REACHED
    assert out.holdout_score is not None
    board = load_leaderboard(engine, sid)
    assert (board.planned, board.run, board.discarded) == (4, 2, 2)
    assert board.discard_reasons == {"not run: Max candidates reached": 2}
    assert board.stop_limit == "Max candidates"


def test_a_real_edge_wins_and_is_scored_on_the_holdout(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    space = SearchSpace(grid={"skill": [0.5, 0.5, 0.5, 0.6]}, random={"x": __import__(
        "typestrict_pipeline.study.space", fromlist=["RandomParam"]).RandomParam(0, 1)}, random_draws=2)
    sid = repo.create_study(engine, workspace="demo", workflow="wx", workflow_version="v1",
                            space=space, layout=_layout(), limits=StudyLimits(10, 10_000))
    out = run_study_local(engine, sid, SyntheticBackend(noise=0.05), max_workers=3)
    assert out.state == StudyState.FINISHED
    board = load_leaderboard(engine, sid)
    assert (board.planned, board.run, board.discarded) == (8, 4, 4)
    assert board.discard_reasons == {"duplicate": 4}
    winner = next(r for r in board.rows if r.candidate_id == board.winner_candidate_id)
    assert "skill=0.6" in winner.label and winner.rank == 1
    assert board.stats.found_nothing is False
    assert out.holdout_score == pytest.approx(0.6, abs=0.05)


def test_finished_runs_are_not_rerun_or_charged_twice(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _create(engine, n=2)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    backend = SyntheticBackend(cost_per_step=10)
    first = [execute_run(engine, k, backend) for k in keys[:3]]
    # A killed attempt: reserved, 5 steps (50 µ$) flushed as spent, never settled.
    killed = repo.reserve_run(engine, sid, keys[3].candidate_id, keys[3].fold, keys[3].window, keys[3].steps)
    assert isinstance(killed, repo.Reservation)
    assert repo.flush_progress(engine, killed.run_id, killed.attempt, 50, 5)
    again = [execute_run(engine, k, backend) for k in keys]
    assert [r.status for r in first] == ["DONE"] * 3
    assert [r.status for r in again[:3]] == ["ALREADY_DONE"] * 3
    assert all(r.status == "DONE" for r in again[3:])
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None
        # Every window once, plus what the killed attempt really spent before it died.
        assert study.spend_micro == 10 * sum(k.steps for k in keys) + 50
        assert study.steps_used == sum(k.steps for k in keys) + 5
        total_runs = s.execute(text("SELECT SUM(cost_micro) FROM study_runs WHERE study_id = :s"),
                               {"s": sid}).scalar()
        assert total_runs == study.spend_micro
        assert study.reserved_micro == 0 and study.steps_reserved == 0
    assert len(backend.calls) == len(keys)


def test_cancel_keeps_what_ran_and_frees_the_workflow(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _create(engine, n=2)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    backend = SyntheticBackend()
    execute_run(engine, keys[0], backend)
    execute_run(engine, keys[1], backend)
    repo.cancel_study(engine, sid)
    assert execute_run(engine, keys[2], backend).status == "REFUSED"
    from typestrict_pipeline.study.runner import finalize_study

    out = finalize_study(engine, sid, backend)
    assert out.state == StudyState.CANCELLED
    assert out.holdout_missing_reason == "The study was cancelled before the winner's holdout run."
    assert load_leaderboard(engine, sid).run == 1
    assert repo.active_study(engine, "demo", "wx") is None


def test_study_created_before_cost_tracking_shows_no_cost(store_url: str) -> None:
    engine = create_store_engine(store_url)
    cfg = alembic_config(engine)
    with migration_lock(), engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "studies_0001")
    layout = _layout().to_json()
    import json

    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO study_studies (workspace, workflow, workflow_version, state, space_json, "
            "layout_json, config_json, horizon_steps, holdout_start, holdout_end, max_candidates, "
            "max_total_steps, candidates_planned, steps_used, steps_reserved, created_at) VALUES "
            "('demo', 'old', 'v0', 'FINISHED', '{}', :layout, '{}', 1, '2012-11-11 00:00:00', "
            "'2012-12-01 00:00:00', 2, 100, 1, 80, 0, '2012-12-02 00:00:00')"), {"layout": json.dumps(layout)})
    engine = open_store(store_url)  # upgrade heads: studies_0002 adds cost columns
    with session_scope(engine) as s:
        old = s.query(StudyRow).one()
        assert old.cost_tracked is False and old.spend_micro is None
    board = load_leaderboard(engine, old.id)
    assert board.spend_micro is None
    md = render_markdown(board)
    assert "created before cost tracking; no cost is shown" in md
    assert "$0.00" not in md


def test_runs_costlier_than_estimated_top_up_or_stop_and_never_overshoot_on_postgres(pg_url: str) -> None:
    engine = open_store(pg_url)
    # The estimate says 5 µ$ per step; the runs really cost 13 per step (a pricier candidate).
    sid = _create(engine, n=6, limits=StudyLimits(6, 100_000, budget_micro=3_000),
                  last=repo.LastBacktest(5, 1))
    out_keys = plan_runs(engine, sid)
    repo.start_study(engine, sid)
    backend = SyntheticBackend(cost_per_step=13)
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda k: execute_run(create_store_engine(pg_url), k, backend), out_keys))
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.spend_micro is not None
        assert study.spend_micro <= 3_000
        assert study.stop_limit == "Budget (USD)"
        assert study.reserved_micro == 0
    done = [r for r in results if r.status == "DONE"]
    assert done and all(r.cost_micro == 13 * 20 for r in done)  # top-ups let whole runs finish
    assert any(r.status in ("CUT", "REFUSED") for r in results)


@pytest.mark.slow
def test_end_to_end_null_studies_flag_nothing_and_the_holdout_is_unbiased(sqlite_url: str) -> None:
    """Through the real runner and store: every candidate has the same true skill (0.5)."""
    engine = open_store(sqlite_url)
    flags = 0
    holdout_bias = []
    n_studies = 30
    for seed in range(n_studies):
        space = SearchSpace(grid={"x": list(range(8))})
        sid = repo.create_study(engine, workspace="demo", workflow=f"null{seed}",
                                workflow_version="v1", space=space, layout=_layout(3),
                                limits=StudyLimits(8, 100_000))
        out = run_study_local(engine, sid, SyntheticBackend(noise=0.1, common=0.3, seed=seed),
                              max_workers=2)
        board = load_leaderboard(engine, sid)
        flags += bool(board.stats.found_nothing)
        assert out.holdout_score is not None
        holdout_bias.append(out.holdout_score - 0.5)
    assert flags / n_studies >= 0.3  # ≈ 0.5 expected; 30 studies: a loose bound
    mean = sum(holdout_bias) / n_studies
    sd = (sum((b - mean) ** 2 for b in holdout_bias) / (n_studies - 1)) ** 0.5
    assert abs(mean) < 3 * sd / n_studies**0.5


def test_cancelling_a_running_study_stops_it_and_keeps_what_ran(pg_url: str) -> None:
    engine = open_store(pg_url)
    sid = _create(engine, n=6)
    backend = SyntheticBackend(sleep_s=0.01)  # ~0.2 s per window run
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(
        run_study_local(create_store_engine(pg_url), sid, backend, max_workers=2)))
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with session_scope(engine) as s:
            n_done = s.execute(text("SELECT COUNT(*) FROM study_runs WHERE study_id = :s AND "
                                    "state = 'DONE'"), {"s": sid}).scalar_one()
        if n_done >= 3:
            break
        time.sleep(0.02)
    assert repo.cancel_study(engine, sid) == StudyState.CANCELLED
    assert repo.active_study(engine, "demo", "wx") is None  # the workflow is free at once
    worker.join(timeout=60)
    out = outcome[0]
    assert out.state == StudyState.CANCELLED  # type: ignore[attr-defined]
    board = load_leaderboard(engine, sid)
    assert 1 <= board.run < 6
    assert board.holdout_missing_reason == "The study was cancelled before the winner's holdout run."
    assert "not run: study cancelled" in board.discard_reasons
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.reserved_micro == 0 and study.steps_reserved == 0


class _Exploding(SyntheticBackend):
    """A backend whose third window run raises, like a workflow bug."""

    def run_window(self, candidate, window, kind, *, seal_at, should_stop):
        if len(self.calls) == 2:
            self.calls.append((candidate.index, kind.value, "boom"))
            raise RuntimeError("the workflow broke")
        return super().run_window(candidate, window, kind, seal_at=seal_at, should_stop=should_stop)


def test_a_failed_run_marks_the_study_failed_releases_its_lock_and_resumes(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _create(engine, n=2)
    with pytest.raises(RuntimeError, match="the workflow broke"):
        run_study_local(engine, sid, _Exploding(), max_workers=1)
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == "FAILED"
        assert study.error == "RuntimeError: the workflow broke"
        assert study.reserved_micro == 0
    # No process works on a failed study: it holds the workflow no more (nothing is in flight).
    assert repo.active_study(engine, "demo", "wx") is None
    out = run_study_local(engine, sid, SyntheticBackend(), max_workers=1)  # resume: lock taken again
    assert out.state == StudyState.FINISHED and out.holdout_score is not None


def test_a_failed_study_resumes_only_while_no_other_study_took_its_workflow(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _create(engine, n=2)
    with pytest.raises(RuntimeError, match="the workflow broke"):
        run_study_local(engine, sid, _Exploding(), max_workers=1)
    other = _create(engine)  # the workflow is free
    with pytest.raises(ConflictError, match=f"got study {other} .*One study at a time per workflow"):
        run_study_local(engine, sid, SyntheticBackend(), max_workers=1)
    repo.cancel_study(engine, other)
    out = run_study_local(engine, sid, SyntheticBackend(), max_workers=1)
    assert out.state == StudyState.FINISHED


def _run_rows(engine) -> list[dict[str, object]]:
    """Every ``study_runs`` column as stored (the JSON as text; times as set or not)."""
    with engine.connect() as conn:
        res = conn.execute(text("SELECT *, CAST(scores_json AS TEXT) AS scores_text FROM study_runs "
                                "ORDER BY id"))
        rows = [dict(r._mapping) for r in res]
    for row in rows:
        row.pop("scores_json")
        assert row.pop("started_at") is not None
        row["finished"] = row.pop("finished_at") is not None
    return rows


def test_the_run_lifecycle_writes_these_exact_rows(store_url: str) -> None:
    """reserve → settle → re-reserve (killed and failed attempts) → refusal: every column of every
    row, pinned from the ORM implementation these functions had before they became Core."""
    engine = open_store(store_url)
    sid = _create(engine, n=2, limits=StudyLimits(2, 10_000, budget_micro=600),
                  last=repo.LastBacktest(10, 1))  # 10 µ$ per step: a 20-step window reserves 200
    repo.start_study(engine, sid)
    k = [(x.candidate_id, x.fold, x.window) for x in plan_runs(engine, sid)]
    day = [(dt.datetime(2012, 1, 1 + i, tzinfo=UTC).isoformat(), 0.5 + i / 2) for i in range(2)]
    a = repo.reserve_run(engine, sid, *k[0], 20, attempt="a1")
    assert a == repo.Reservation(1, "a1", 200, 20, 0)
    assert repo.settle_run(engine, a, cost_micro=200, steps_done=20, scores=day)
    assert repo.reserve_run(engine, sid, *k[0], 20) == repo.AlreadyDone(1)
    assert not repo.settle_run(engine, a, cost_micro=200, steps_done=20, scores=day)
    b = repo.reserve_run(engine, sid, *k[1], 20, attempt="b1")
    assert isinstance(b, repo.Reservation) and b.run_id == 2
    assert repo.flush_progress(engine, 2, "b1", 50, 5)  # then b1 is killed
    b2 = repo.reserve_run(engine, sid, *k[1], 20, attempt="b2")
    assert b2 == repo.Reservation(2, "b2", 200, 20, 50)
    assert not repo.settle_run(engine, b, cost_micro=10, steps_done=1, scores=day)
    assert repo.settle_run(engine, b2, cost_micro=80, steps_done=7, scores=(),
                           state=RunState.FAILED, error="boom")
    b3 = repo.reserve_run(engine, sid, *k[1], 20, attempt="b3", estimate_micro=200)
    assert b3 == repo.Reservation(2, "b3", 200, 20, 80)
    assert repo.settle_run(engine, b3, cost_micro=180, steps_done=10, scores=day[:1],
                           state=RunState.CUT)
    assert repo.reserve_run(engine, sid, *k[2], 20, attempt="c1") == repo.Reservation(3, "c1", 200, 20)
    assert [repo.extend_reservation(engine, 3, at, extra) for at, extra in
            (("c1", 10), ("zz", 10), ("c1", 50))] == [True, False, False]
    assert repo.flush_progress(engine, 3, "c1", 30, 3)  # then c1 is killed
    budget = repo.Refused(StopLimit.BUDGET_USD, StudyState.RUNNING)
    assert repo.reserve_run(engine, sid, *k[2], 20, attempt="c2") == budget  # 410 + 200 > 600
    assert repo.reserve_run(engine, sid, *k[3], 20, estimate_micro=0) == budget  # recorded
    common = {"study_id": sid, "candidate_id": k[0][0], "fold": 1}
    assert _run_rows(engine) == [
        {**common, "id": 1, "window": "TUNE", "state": "DONE", "attempt": "a1", "steps_planned": 20,
         "steps_done": 20, "error": None, "reserved_micro": 0, "cost_micro": 200, "finished": True,
         "scores_text": '[["2012-01-01T00:00:00+00:00", 0.5], ["2012-01-02T00:00:00+00:00", 1.0]]'},
        {**common, "id": 2, "window": "EVAL", "state": "CUT", "attempt": "b3", "steps_planned": 10,
         "steps_done": 10, "error": None, "reserved_micro": 0, "cost_micro": 180, "finished": True,
         "scores_text": '[["2012-01-01T00:00:00+00:00", 0.5]]'},
        {**common, "id": 3, "fold": 2, "window": "TUNE", "state": "FAILED", "attempt": "c1",
         "steps_planned": 20, "steps_done": 3, "error": "interrupted attempt released; ",
         "reserved_micro": 0, "cost_micro": 30, "finished": False, "scores_text": "null"},
    ]
    with engine.connect() as conn:
        assert conn.execute(text(
            "SELECT spend_micro, reserved_micro, steps_used, steps_reserved, stop_limit "
            "FROM study_studies WHERE id = :s"), {"s": sid}).one() == (410, 0, 45, 0, "Budget (USD)")
        assert conn.execute(text("SELECT id, cost_micro FROM study_candidates WHERE study_id = :s "
                                 "ORDER BY id"), {"s": sid}).all() == [(k[0][0], 410), (k[0][0] + 1, None)]


def test_every_way_a_study_ends_records_when(sqlite_url: str) -> None:
    """A study abandoned before any run started it (``abandon_unstarted``) is FAILED with the time
    it ended, as one whose run failed (``mark_failed``) or one cancelled: no ended study lacks
    ``finished_at``, and the workflow is free again."""
    engine = open_store(sqlite_url)
    before = dt.datetime.now(UTC) - dt.timedelta(seconds=1)
    abandoned = _create(engine, workflow="wx-abandoned")
    assert repo.abandon_unstarted(engine, abandoned, "its study_job run ended before starting it") is True
    failed = _create(engine, workflow="wx-failed")
    repo.mark_failed(engine, failed, "boom")
    cancelled = _create(engine, workflow="wx-cancelled")
    repo.cancel_study(engine, cancelled)
    after = dt.datetime.now(UTC) + dt.timedelta(seconds=1)
    with session_scope(engine) as s:
        rows = {sid: s.get(StudyRow, sid) for sid in (abandoned, failed, cancelled)}
        ended = {sid: (r.state, r.finished_at) for sid, r in rows.items() if r is not None}
    assert {sid: state for sid, (state, _) in ended.items()} == {
        abandoned: "FAILED", failed: "FAILED", cancelled: "CANCELLED"}
    for sid, (_, finished_at) in ended.items():
        assert finished_at is not None and before <= finished_at <= after, (sid, finished_at)
    assert repo.active_study(engine, "demo", "wx-abandoned") is None
    engine.dispose()


@pytest.mark.parametrize("way", ["admit", "check"])
def test_a_run_near_the_budget_takes_the_extension_it_needs_when_the_padded_one_does_not_fit(
        sqlite_url: str, way: str) -> None:
    """A run whose next call (or step) outgrows its reservation asks for more with room to spare
    (a quarter of its reservation), so it does not come back for every step. When the budget had
    room for what the call needs but not for the padding, the run was cut there, and the study
    with it ("Budget reached" with the holdout lost, on a budget the next step fitted in): it
    takes what it needs now, and still never a micro-dollar past the budget."""
    from typestrict_pipeline.study.runner import _Guard

    engine = open_store(sqlite_url)
    sid = _create(engine, n=2, limits=StudyLimits(2, 10_000, budget_micro=230),
                  last=repo.LastBacktest(10, 1))  # 10 µ$ a step: a 20-step window reserves 200
    repo.start_study(engine, sid)
    key = next(iter(plan_runs(engine, sid)))
    held = repo.reserve_run(engine, sid, key.candidate_id, key.fold, key.window, 20, attempt="a")
    assert isinstance(held, repo.Reservation) and held.reserved_micro == 200
    guard = _Guard(engine, held, per_step=10, enforce_cost=True)
    if way == "admit":  # calls reserved before they are made: 190 held, then one of at most 20
        assert guard.admit(150) and guard.admit(40)
        assert guard.admit(20)  # needs 10 more (210 ≤ 230); the padding of 50 would pass 230
        assert guard.reserved == 210 and not guard.cut
        for bound in (150, 40, 20):  # they cost what they could: nothing held is given back
            guard.settle(bound, bound)
        assert not guard.admit(30) and guard.cut  # 240 > 230, nothing in flight: refused
    else:  # steps priced as they finish: 19 started, 0 finished, one more at 11 µ$
        assert not guard.check(0, 19, 0, 11)  # 20 × 11 = 220: needs 20 more, 220 ≤ 230
        assert guard.reserved == 220 and not guard.cut
    with session_scope(engine) as s:
        row = s.get(StudyRow, sid)
        assert row is not None and (row.spend_micro or 0) + row.reserved_micro <= 230


def _guard_of_one_run(engine, budget: int):
    """A running study of 10 µ$ a step with ``budget``, and the guard of its first window run
    (20 steps: 200 µ$ reserved)."""
    from typestrict_pipeline.study.runner import _Guard

    sid = _create(engine, n=2, limits=StudyLimits(2, 10_000, budget_micro=budget),
                  last=repo.LastBacktest(10, 1))
    repo.start_study(engine, sid)
    key = next(iter(plan_runs(engine, sid)))
    held = repo.reserve_run(engine, sid, key.candidate_id, key.fold, key.window, 20, attempt="a")
    assert isinstance(held, repo.Reservation) and held.reserved_micro == 200
    return sid, _Guard(engine, held, per_step=10, enforce_cost=True)


def _study_money(engine, sid: int) -> int:
    with session_scope(engine) as s:
        row = s.get(StudyRow, sid)
        assert row is not None
        return (row.spend_micro or 0) + row.reserved_micro


def test_a_call_that_does_not_fit_beside_the_calls_in_flight_waits_for_them_to_settle(
        sqlite_url: str) -> None:
    """Each call in flight is held at its bound (a few times what it costs). A call that did not
    fit beside them cut the run at once, though their settlement frees most of what they hold: a
    study whose budget equalled its estimate stopped at about 80% of it. It waits for them now,
    and is refused only when nothing is in flight and it still does not fit."""
    engine = open_store(sqlite_url)
    sid, guard = _guard_of_one_run(engine, budget=200)  # the whole budget is this run's
    assert guard.admit(80) and guard.admit(80)  # 160 held of 200
    got: list[bool] = []
    late = threading.Thread(target=lambda: got.append(guard.admit(80)))  # 240 > 200: not yet
    late.start()
    while late.is_alive() and getattr(guard, "waiting", 0) == 0:  # it waits (before: refused)
        time.sleep(0.001)
    guard.settle(80, 20)  # the first call cost 20 of its 80: 20 spent + 80 held + 80 = 180
    late.join(timeout=30)
    assert got == [True] and not guard.cut
    guard.settle(80, 20)
    guard.settle(80, 20)  # 60 spent, nothing in flight
    assert guard.admit(140) and not guard.cut  # 200: fits exactly
    guard.settle(140, 140)
    assert not guard.admit(1) and guard.cut  # nothing in flight and no room: refused at once
    assert guard.call_spent == 200 and _study_money(engine, sid) <= 200
    engine.dispose()


def test_calls_in_parallel_spend_the_budget_up_to_one_call_and_never_past_it(sqlite_url: str) -> None:
    """Eight workers make calls held at 40 µ$ that cost 10 each until one is refused (real
    threads, waiting for each other's settlements): the run spends the budget to within one
    call's bound and never a micro-dollar past it, extending its reservation within the study's
    budget, and no worker is left waiting."""
    engine = open_store(sqlite_url)
    sid, guard = _guard_of_one_run(engine, budget=1_000)

    def worker() -> int:
        made = 0
        while guard.admit(40):
            made += 1
            guard.settle(40, 10)
        return made

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = sum(pool.map(lambda _: worker(), range(8)))
    assert guard.cut and guard.call_held == 0
    assert made * 10 == guard.call_spent
    assert 1_000 - 40 < guard.call_spent <= 1_000, guard.call_spent
    assert guard.reserved <= 1_000 and _study_money(engine, sid) <= 1_000
    engine.dispose()
