"""A chunk's windows reserved and settled a slice at a time: the budget is never passed, each
window is run and charged once, and the ledger balances after a crash, a kill or a cancel inside
a slice (SQLite and the real PostgreSQL server)."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest
from sqlalchemy import select, text

from typestrict_pipeline.progress import Progress
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.limits import StopLimit, StudyLimits
from typestrict_pipeline.study.runner import (
    SEARCH_PROGRESS,
    SLICE_MAX_WINDOWS,
    SyntheticBackend,
    execute_chunk,
    plan_runs,
    run_study_local,
    search_progress,
)
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunRow, RunState, StudyState

UTC = dt.UTC
STEPS = 20  # every window: 20 daily steps
LAST = repo.LastBacktest(10, 1)  # the estimate: 10 µ$ a step, 200 a window


def _create(engine: Any, n: int, budget: int | None = None) -> int:
    layout = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=UTC),
                        end=dt.datetime(2012, 12, 1, tzinfo=UTC), step=dt.timedelta(days=1),
                        n_folds=2, tune_steps=STEPS, eval_steps=STEPS, holdout_steps=STEPS)
    space = SearchSpace(grid={"skill": [0.5 + 0.001 * i for i in range(n)]})
    return repo.create_study(engine, workspace="demo", workflow="wx", workflow_version="v1",
                             space=space, layout=layout,
                             limits=StudyLimits(n, 10**7, budget_micro=budget), last_backtest=LAST)


def _ledger(engine: Any, sid: int) -> dict[str, Any]:
    """The study's money and steps, and every run row's state, as stored."""
    with engine.connect() as conn:
        spend, reserved, used, steps_reserved, stop = conn.execute(text(
            "SELECT spend_micro, reserved_micro, steps_used, steps_reserved, stop_limit "
            "FROM study_studies WHERE id = :s"), {"s": sid}).one()
        runs = conn.execute(text("SELECT candidate_id, fold, \"window\", state, cost_micro, "
                                 "steps_done FROM study_runs WHERE study_id = :s ORDER BY id"),
                            {"s": sid}).all()
        charged = conn.execute(text("SELECT COALESCE(SUM(cost_micro), 0) FROM study_candidates "
                                    "WHERE study_id = :s"), {"s": sid}).scalar_one()
    return {"spend": spend, "reserved": reserved, "used": used, "steps_reserved": steps_reserved,
            "stop": stop, "runs": [tuple(r) for r in runs], "charged": charged,
            "run_cost": sum(r[4] or 0 for r in runs), "run_steps": sum(r[5] for r in runs),
            # the baseline's holdout run (candidate 0) has no candidate row to charge
            "candidates_cost": sum(r[4] or 0 for r in runs if r[0] != repo.BASELINE_CANDIDATE_ID)}


def _balanced(ledger: dict[str, Any]) -> None:
    """Nothing is left reserved, and the study's spend is its runs' and its candidates' costs."""
    assert ledger["reserved"] == 0 and ledger["steps_reserved"] == 0
    assert ledger["spend"] == ledger["run_cost"]
    assert ledger["charged"] == ledger["candidates_cost"]
    assert ledger["used"] == ledger["run_steps"]
    assert not [r for r in ledger["runs"] if r[3] == "RESERVED"]


class _Crashing(SyntheticBackend):
    """Raises ``exc`` when its ``at``-th window starts (counting from 1), once."""

    def __init__(self, at: int, exc: BaseException, **kw: Any) -> None:
        super().__init__(**kw)
        self.at, self.exc, self.fired = at, exc, False

    def run_window(self, candidate, window, kind, *, seal_at, should_stop):
        if not self.fired and len(self.calls) + 1 == self.at:
            self.fired = True
            self.calls.append((candidate.index, kind.value, "crash"))
            raise self.exc
        return super().run_window(candidate, window, kind, seal_at=seal_at, should_stop=should_stop)


class _Killed(BaseException):
    """The process dies here: nothing after this point runs (no handler catches it)."""


def test_a_slice_takes_the_prefix_that_fits_and_the_next_one_records_the_limit(store_url: str) -> None:
    engine = open_store(store_url)
    sid = _create(engine, n=2, budget=700)  # 3 windows of 200 fit, not 4
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)[:5]
    runs = [(k.candidate_id, k.fold, k.window, k.steps, 200) for k in keys]
    held = repo.reserve_slice(engine, sid, runs, attempts=[f"a{i}" for i in range(5)])
    assert isinstance(held, repo.SliceReservation)
    assert [r.attempt for r in held.runs if isinstance(r, repo.Reservation)] == ["a0", "a1", "a2"]
    assert _ledger(engine, sid)["reserved"] == 600 and _ledger(engine, sid)["stop"] is None
    # Settled for less than reserved: the money comes back, and the 4th window fits now.
    assert repo.settle_runs(engine, [(r, repo.Settlement(100, STEPS, ())) for r in held.runs
                                     if isinstance(r, repo.Reservation)]) == [True] * 3
    again = repo.reserve_slice(engine, sid, runs, attempts=[f"b{i}" for i in range(5)])
    assert isinstance(again, repo.SliceReservation)
    assert [type(r).__name__ for r in again.runs] == ["AlreadyDone"] * 3 + ["Reservation"] * 2
    sixth = plan_runs(engine, sid)[5]
    after_done = repo.reserve_slice(  # a done window, then one that cannot fit (300 + 400 held)
        engine, sid, [runs[0], (sixth.candidate_id, sixth.fold, sixth.window, sixth.steps, 200)],
        attempts=["c0", "c1"])
    assert after_done == repo.SliceReservation((repo.AlreadyDone(1),))  # no limit recorded yet
    assert _ledger(engine, sid)["stop"] is None
    last = repo.reserve_slice(engine, sid, [(sixth.candidate_id, sixth.fold, sixth.window,
                                             sixth.steps, 200)], attempts=["d0"])
    assert last == repo.Refused(StopLimit.BUDGET_USD, StudyState.RUNNING)
    assert _ledger(engine, sid)["stop"] == StopLimit.BUDGET_USD.value


def test_a_budget_that_runs_out_inside_a_slice_is_never_passed_and_balances(store_url: str) -> None:
    engine = open_store(store_url)
    budget = 50 * 1_000  # a slice may hold 1/50 of it: 5 windows of 200 estimated
    sid = _create(engine, n=60, budget=budget)  # 240 windows, far more than the budget buys
    backend = SyntheticBackend(cost_per_step=15)  # 300 a window: half as much again as estimated
    out = run_study_local(engine, sid, backend, max_workers=1)
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    assert out.state == StudyState.BUDGET_REACHED and ledger["stop"] == StopLimit.BUDGET_USD.value
    assert budget - 300 < ledger["spend"] <= budget  # used up to the last window that could fit
    # One chunk, in plan order: every window up to the stop is done once; a CUT one (the
    # budget ran out inside it) is last; no window after it has a row.
    search = [r for r in ledger["runs"] if r[2] != "HOLDOUT"]
    planned = [(k.candidate_id, k.fold, k.window.value) for k in plan_runs(engine, sid)]
    assert [r[:3] for r in search] == planned[: len(search)]
    assert all(r[3] == "DONE" for r in search[:-1]) and search[-1][3] in ("DONE", "CUT")
    assert len(backend.calls) == len(search)


def test_a_crash_inside_a_slice_settles_what_ran_and_the_resume_runs_the_rest_once(
        store_url: str) -> None:
    engine = open_store(store_url)
    sid = _create(engine, n=4)  # 16 windows: one slice
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    assert len(keys) <= SLICE_MAX_WINDOWS
    crashing = _Crashing(5, RuntimeError("the workflow broke"))
    with pytest.raises(RuntimeError, match="the workflow broke"):
        execute_chunk(engine, keys, crashing, attempt="first")
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    # The 4 windows before it are settled, the crashed one is FAILED, the rest have no row.
    assert [r[3] for r in ledger["runs"]] == ["DONE"] * 4 + ["FAILED"]
    assert ledger["spend"] == 4 * STEPS * 10
    again = SyntheticBackend()
    results = execute_chunk(engine, keys, again, attempt="second")
    assert [r.status for r in results] == ["ALREADY_DONE"] * 4 + ["DONE"] * (len(keys) - 4)
    assert len(again.calls) == len(keys) - 4  # settled windows are never run again
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    assert [r[3] for r in ledger["runs"]] == ["DONE"] * len(keys)
    assert ledger["spend"] == len(keys) * STEPS * 10  # each window charged once


def test_a_kill_inside_a_slice_leaves_reservations_that_the_resume_releases_and_balances(
        store_url: str) -> None:
    engine = open_store(store_url)
    sid = _create(engine, n=4, budget=10**6)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    with pytest.raises(_Killed):  # the process dies at the start of the 6th window
        execute_chunk(engine, keys, _Crashing(6, _Killed()), attempt="killed")
    # As a kill leaves it: the slice's windows are reserved (the 5 that ran were not settled
    # yet: they took less than a second), nothing is spent, nothing is lost from the budget.
    ledger = _ledger(engine, sid)
    assert ledger["reserved"] == len(keys) * STEPS * 10 and ledger["spend"] == 0
    assert {r[3] for r in ledger["runs"]} == {"RESERVED"}
    resumed = SyntheticBackend()
    results = execute_chunk(engine, keys, resumed, attempt="resumed")
    assert [r.status for r in results] == ["DONE"] * len(keys)
    assert len(resumed.calls) == len(keys)  # nothing was settled: every window runs again, once
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    assert ledger["spend"] == len(keys) * STEPS * 10


def test_a_killed_slice_is_released_when_the_study_is_interrupted(store_url: str) -> None:
    engine = open_store(store_url)
    sid = _create(engine, n=4, budget=10**6)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    with pytest.raises(_Killed):
        execute_chunk(engine, keys, _Crashing(3, _Killed()), attempt="killed")
    assert repo.interrupt_study(engine, sid, "its run process died")
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    assert {r[3] for r in ledger["runs"]} == {"FAILED"} and ledger["spend"] == 0
    out = run_study_local(engine, sid, SyntheticBackend(), max_workers=2)  # resumes
    assert out.state == StudyState.FINISHED
    _balanced(_ledger(engine, sid))


def test_a_cancel_inside_a_slice_stops_its_next_window_and_gives_the_rest_back(
        store_url: str) -> None:
    engine = open_store(store_url)
    sid = _create(engine, n=4, budget=10**6)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)

    class _Cancelling(SyntheticBackend):
        def run_window(self, candidate, window, kind, *, seal_at, should_stop):
            out = super().run_window(candidate, window, kind, seal_at=seal_at,
                                     should_stop=should_stop)
            if len(self.calls) == 2:
                repo.cancel_study(engine, sid)  # someone cancels while the 2nd window ends
            return out

    backend = _Cancelling()
    results = execute_chunk(engine, keys, backend, attempt="a")
    assert [r.status for r in results] == ["DONE", "DONE", "REFUSED"]
    assert results[-1].detail == "Cancelled"
    assert len(backend.calls) == 2
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    assert [r[3] for r in ledger["runs"]] == ["DONE", "DONE"]  # the unstarted rows are gone


def test_windows_settled_together_are_stored_as_one_settlement_stores_them(store_url: str) -> None:
    engine = open_store(store_url)
    sid = _create(engine, n=2, budget=10**6)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)[:3]
    held = repo.reserve_slice(engine, sid, [(k.candidate_id, k.fold, k.window, k.steps, 200)
                                            for k in keys], attempts=["a", "b", "c"])
    assert isinstance(held, repo.SliceReservation)
    a, b, c = (r for r in held.runs if isinstance(r, repo.Reservation))
    day = [(dt.datetime(2012, 1, 1 + i, tzinfo=UTC).isoformat(), 0.25 + i) for i in range(2)]
    assert repo.settle_run(engine, a, cost_micro=150, steps_done=STEPS, scores=day)
    began = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)  # when the window really started
    ended = dt.datetime(2030, 1, 2, 3, 4, 6, tzinfo=UTC)  # ... and ended
    assert repo.settle_runs(engine, [
        (b, repo.Settlement(150, STEPS, day, started_at=began)),
        (c, repo.Settlement(90, 9, day[:1], RunState.CUT, "why", began, ended)),
    ]) == [True, True]
    assert repo.settle_runs(engine, [(b, repo.Settlement(1, 1, ()))]) == [False]  # settled once
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT attempt, state, cost_micro, steps_done, steps_planned, reserved_micro, error, "
            "CAST(scores_json AS TEXT), finished_at IS NOT NULL FROM study_runs ORDER BY id")).all()
    pair = ('[["2012-01-01T00:00:00+00:00", 0.25], ["2012-01-02T00:00:00+00:00", 1.25]]')
    assert [tuple(r) for r in rows] == [
        ("a", "DONE", 150, STEPS, STEPS, 0, None, pair, True),
        ("b", "DONE", 150, STEPS, STEPS, 0, None, pair, True),
        ("c", "CUT", 90, 9, 9, 0, "why", '[["2012-01-01T00:00:00+00:00", 0.25]]', True),
    ]
    with session_scope(engine) as s:
        starts = s.execute(select(RunRow.started_at).order_by(RunRow.id)).scalars().all()
        ends = s.execute(select(RunRow.finished_at).order_by(RunRow.id)).scalars().all()
    assert starts[0] != began and starts[1:] == [began, began]  # a's: its reservation's time
    assert ends[2] == ended and ends[1] not in (None, ended)  # b's: its settlement's time
    ledger = _ledger(engine, sid)
    _balanced(ledger)
    assert ledger["spend"] == 390 and ledger["used"] == 2 * STEPS + 9


class _Slow(SyntheticBackend):
    """Each window takes at least ``seconds`` of wall time."""

    def __init__(self, seconds: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.seconds = seconds

    def run_window(self, candidate, window, kind, *, seal_at, should_stop):
        import time

        time.sleep(self.seconds)
        return super().run_window(candidate, window, kind, seal_at=seal_at, should_stop=should_stop)


def test_each_window_run_records_when_it_really_ran_though_its_slice_settles_them_together(
        store_url: str) -> None:
    # A slice settles its windows together (every SETTLE_EVERY_S); a window's stored end is its
    # own, so its duration is its own work (was: every window of a settlement ended at the
    # settlement's time, and a study's summed window time counted the slice's time many times).
    engine = open_store(store_url)
    sid = _create(engine, n=2)  # 8 windows: one slice, settled at its end
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)
    execute_chunk(engine, keys, _Slow(0.05), attempt="slow")
    with session_scope(engine) as s:
        spans = [(r.started_at, r.finished_at) for r in s.execute(
            select(RunRow).where(RunRow.study_id == sid).order_by(RunRow.started_at)).scalars()]
    assert len(spans) == len(keys) == 8
    for (start, end), (next_start, _) in itertools.pairwise(spans):
        assert end is not None and start < end <= next_start  # one after the other, no overlap
    worked = sum((end - start).total_seconds() for start, end in spans if end is not None)
    last_end = spans[-1][1]
    assert last_end is not None
    assert worked < (last_end - spans[0][0]).total_seconds() + 0.01  # not the slice's many times


def test_the_search_progress_counts_every_chunk_and_reaches_its_plan(store_url: str) -> None:
    """``search_progress``: the study's finished search windows of the planned ones, reported
    after each slice of each chunk, never past the plan, the holdout runs not counted."""
    engine = open_store(store_url)
    sid = _create(engine, n=40)  # 40 candidates × 2 folds × tune and eval: 160 windows
    repo.start_study(engine, sid)
    assert search_progress(engine, sid) == Progress(SEARCH_PROGRESS, 0, 160, unit="window runs")
    keys = plan_runs(engine, sid)
    seen: list[Progress] = []
    backend = SyntheticBackend(cost_per_step=1)
    execute_chunk(engine, keys[:100], backend, attempt="one", progress=seen.append)
    execute_chunk(engine, keys[100:], backend, attempt="two", progress=seen.append)
    done = [p.done for p in seen]
    assert done == sorted(done) and done[-1] == 160 and len(seen) >= 160 // SLICE_MAX_WINDOWS
    assert {p.total for p in seen} == {160}
    assert seen[-1].line() == "search: 100% (160 of 160 window runs)"
    run_study_local(engine, sid, backend, max_workers=1)  # finalize: the holdout runs too
    assert search_progress(engine, sid).done == 160
