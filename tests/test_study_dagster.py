"""Studies on Dagster: the fan-out job in process, the leaderboard metadata, and a kill + resume
of a chunked study launched with the job's default executor (multiprocess, steps forked from the
run process) on the real PostgreSQL server."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy import select

from assets.studies import LEADERBOARD_KEY, study_job, study_run_config
from resources.store import StoreResource
from resources.studies import StudyRunnerResource
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.limits import usd_to_micro
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunRow, RunState, StudyRow, StudyState

UTC = dt.UTC


def _config(backend: dict, n: int = 3, budget: int | None = None) -> StudyConfig:  # type: ignore[type-arg]
    return StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5 + 0.02 * i for i in range(n)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=n, max_total_steps=100_000, budget_micro=budget, backend=backend,
    )


@pytest.mark.parametrize("fanout", ["candidate", "window"])
def test_study_job_in_process_ranks_scores_holdout_and_records_leaderboard(
        sqlite_url: str, fanout: str) -> None:
    engine = open_store(sqlite_url)
    sid = create_study_from_config(engine, _config({"backend": "synthetic", "cost_per_step": 3}),
                                   last_backtest=LastBacktest(30, 10))
    with dg.instance_for_test() as instance:
        result = study_job.execute_in_process(
            run_config=study_run_config(sid, fanout), instance=instance,
            resources={"store": StoreResource(url=sqlite_url), "study_runner": StudyRunnerResource()},
        )
        assert result.success
        mats = result.asset_materializations_for_node("study_finalize")
        assert len(mats) == 1 and mats[0].asset_key == LEADERBOARD_KEY
        assert mats[0].partition == str(sid)
        md = str(mats[0].metadata["leaderboard"].value)
        assert "| Rank | Candidate | Adjusted | Out-of-sample | In-sample | Overfit gap | Cost |" in md
        assert "planned / 3 run / 0 discarded" in str(mats[0].metadata["header"].value)
        assert instance.get_dynamic_partitions("study_ids") == [str(sid)]
        # progress: a log line and an observation of the study's leaderboard partition as the
        # search goes (each step reports the whole study's figures after its slices)
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
        assert f"study {sid}: search: 100% (12 of 12 window runs)" in messages
        observed = [e.asset_observation_data.asset_observation for e in result.all_events
                    if e.event_type is dg.DagsterEventType.ASSET_OBSERVATION]
        assert observed and {o.asset_key for o in observed} == {LEADERBOARD_KEY}
        assert {o.partition for o in observed} == {str(sid)}
        assert observed[-1].metadata["percent"].value == 100.0
        steps = {e.step_key for e in result.all_events if e.step_key and "study_backtests" in e.step_key}
        assert len(steps) == (3 if fanout == "candidate" else 3 * 2 * 2)
        finished = result.output_for_node("study_finalize")
    board = load_leaderboard(engine, sid)
    winner = next(r for r in board.rows if r.candidate_id == board.winner_candidate_id)
    # the op's output in the run's page names the winner as every surface does, not by row id
    assert finished["winner"] == f"#{winner.index}" and "winner_candidate_id" not in finished
    assert board.state == StudyState.FINISHED and board.holdout_score is not None
    # 3 candidates × 2 folds × 30 steps, then the holdout twice: the winner's and the baseline's.
    assert board.spend_micro == 3 * (3 * 2 * 30 + 2 * 15)
    assert board.holdout_baseline is not None and board.holdout_diff_se is not None


@pytest.mark.parametrize("fanout", ["chunk", "window"])
def test_study_job_runs_a_study_its_budget_stops_in_plan_order_in_one_step(
        sqlite_url: str, fanout: str) -> None:
    """3 candidates × 2 folds × 30 steps at 3 µ$ a step is 540 µ$; a 300 µ$ budget stops the
    search. Its windows run in one step, in plan order: the first candidate whole (180 µ$), then
    the second's first fold (90 µ$), then the next window (45 µ$) would pass the budget."""
    engine = open_store(sqlite_url)
    sid = create_study_from_config(engine, _config({"backend": "synthetic", "cost_per_step": 3},
                                                   budget=300),
                                   last_backtest=LastBacktest(30, 10))
    with dg.instance_for_test() as instance:
        result = study_job.execute_in_process(
            run_config=study_run_config(sid, fanout, chunks=4), instance=instance,
            resources={"store": StoreResource(url=sqlite_url), "study_runner": StudyRunnerResource()},
        )
        assert result.success
        steps = {e.step_key for e in result.all_events if e.step_key and "study_backtests" in e.step_key}
        assert steps == {"study_backtests[chunk0]"}
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
        assert (f"study {sid}: its limits stop the search before its end, so its window runs "
                "run one at a time in plan order (one step)") in messages
    board = load_leaderboard(engine, sid)
    assert board.state == StudyState.BUDGET_REACHED and board.spend_micro == 270
    first = min(board.rows, key=lambda r: r.index)
    assert first.complete and board.winner_candidate_id == first.candidate_id
    # the rows are the candidates that ran: the first whole, the second through one fold
    assert [r.complete for r in sorted(board.rows, key=lambda r: r.index)] == [True, False]


_CHILD = textwrap.dedent("""
    import sys, dagster as dg
    from assets.studies import study_run_config
    import study_job_helper as helper
    sid, parent = int(sys.argv[1]), sys.argv[2]
    config = study_run_config(sid)  # the job's default executor: forked steps, 2 chunks at once
    if parent != "-":  # the executor is configuration; in-process resumes faster
        config = {**config, "execution": {"config": {"in_process": {}}}}
    with dg.DagsterInstance.get() as instance:
        options = None
        if parent != "-":
            instance.report_run_failed(instance.get_run_by_id(parent))  # as run monitoring would
            # Re-execute every step: finished window runs return at once (their rows are DONE);
            # from_failure would not re-plan mapped steps that never started (dagster 1.13
            # plan/state.py skips unresolved steps whose upstream succeeded), which
            # study_finalize then catches up one by one.
            options = dg.ReexecutionOptions(parent_run_id=parent)
        result = dg.execute_job(dg.reconstructable(helper.make_study_job), instance=instance,
                                run_config=config, reexecution_options=options)
        print("RUN", result.run_id, result.success, flush=True)
""")


def _done_runs(engine) -> dict[int, tuple[int | None, object]]:
    with session_scope(engine) as s:
        return {r.id: (r.cost_micro, r.finished_at) for r in s.execute(select(RunRow).where(
            RunRow.state == RunState.DONE.value)).scalars()}


@pytest.mark.slow
def test_killed_study_run_resumes_without_rerunning_or_double_charging(pg_url: str, tmp_path: Path) -> None:
    engine = open_store(pg_url)
    # 20 ms per step: a 15-step window takes ~0.3 s; the search has 4 × 2 × 2 = 16 window runs.
    cfg = _config({"backend": "synthetic", "cost_per_step": 7, "sleep_s": 0.02}, n=4,
                  budget=usd_to_micro("1"))
    sid = create_study_from_config(engine, cfg, last_backtest=LastBacktest(70, 10))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = {**os.environ, "DAGSTER_HOME": str(home), "STUDY_TEST_STORE_URL": pg_url,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), str(Path.cwd())])}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(sid), "-"], env=env,
                             cwd=tmp_path, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 150
    done: dict[int, tuple[int | None, object]] = {}
    while time.monotonic() < deadline and child.poll() is None:
        done = _done_runs(engine)
        if len(done) >= 4:
            break
        time.sleep(0.05)
    assert len(done) >= 4, (child.poll(), child.stdout.read() if child.poll() is not None else "")  # type: ignore[union-attr]
    os.killpg(child.pid, signal.SIGKILL)  # the run and its step processes, mid-study
    child.wait()
    done = _done_runs(engine)
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == StudyState.RUNNING.value
        # What the killed attempts had already flushed as spent (real money, kept once).
        flushed = sum(r.cost_micro or 0 for r in s.execute(select(RunRow).where(
            RunRow.study_id == sid, RunRow.state == RunState.RESERVED.value)).scalars())
    assert 4 <= len(done) < 16
    with session_scope(engine) as s:
        parent = s.get(StudyRow, sid).dagster_run_id  # type: ignore[union-attr]
    assert parent
    with dg.DagsterInstance.from_config(str(home)) as instance:  # what the killed run was doing
        logs = instance.all_logs(parent)
        launched = instance.get_run_by_id(parent)
        assert launched is not None and launched.tags["mode"] == "HISTORICAL"  # a replay (issue 3/7)
        engine_text = " ".join(e.message or "" for e in logs if e.is_dagster_event)
        chunk_steps = {e.step_key for e in logs if e.step_key and e.step_key.startswith("study_backtests")}
    assert "multiprocess executor" in engine_text  # the job's default executor, not in process
    assert chunk_steps and chunk_steps <= {f"study_backtests[chunk{i}]" for i in range(4)}
    resumed = subprocess.run([sys.executable, "-c", _CHILD, str(sid), parent], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "RUN" in resumed.stdout and resumed.stdout.strip().endswith("True"), resumed.stdout + resumed.stderr[-3000:]
    after = _done_runs(engine)
    for run_id, before in done.items():
        assert after[run_id] == before  # finished before the kill: not re-run, not re-charged
    assert len(after) == 16 + 2  # every window run, the winner's holdout and the baseline's
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == StudyState.FINISHED.value
        all_costs = sum(r.cost_micro or 0 for r in s.execute(select(RunRow)).scalars())
        assert study.spend_micro == all_costs  # spend = what each attempt really cost, once
        assert study.reserved_micro == 0 and study.steps_reserved == 0
        done_cost = sum(c or 0 for c, _ in after.values())
        assert done_cost == 7 * (4 * 2 * 30 + 2 * 15) + flushed


NEW_STUDY: dict[str, object] = {
    "workflow": "wx", "synthetic": True, "start": "2012-01-01", "end": "2012-12-01", "folds": 2,
    "tune_steps": 15, "eval_steps": 15, "holdout_steps": 15, "grid": ["skill=0.5,0.6"],
}


def _launch(sqlite_url: str, new_study: dict[str, object]) -> dg.ExecuteInProcessResult:
    from assets.studies import new_study_run_config

    with dg.instance_for_test() as instance:
        return study_job.execute_in_process(
            run_config=new_study_run_config(new_study), instance=instance, raise_on_error=False,
            resources={"store": StoreResource(url=sqlite_url), "study_runner": StudyRunnerResource()})


def _failure(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error  # type: ignore[union-attr]
    assert error is not None
    return str(error.message)


def test_the_launchpad_creates_a_study_or_refuses_it_with_the_products_messages(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    no_limit = _launch(sqlite_url, {**NEW_STUDY, "max_candidates": 2})
    assert "expected Max total steps (a whole number ≥ 1), got nothing" in _failure(no_limit)
    no_estimate = _launch(sqlite_url, {**NEW_STUDY, "max_candidates": 2, "max_total_steps": 1000,
                                       "budget_usd": "0.01"})
    assert "Run one, then try again, or leave the USD budget empty." in _failure(no_estimate)
    with session_scope(engine) as s:
        assert s.execute(select(StudyRow)).first() is None  # nothing was created
    ok = _launch(sqlite_url, {**NEW_STUDY, "max_candidates": 2, "max_total_steps": 1000,
                              "min_unseen_steps": 5, "name": "from the launchpad"})
    assert ok.success
    mats = ok.asset_materializations_for_node("study_finalize")
    assert len(mats) == 1 and "2 planned / 2 run / 0 discarded" in str(mats[0].metadata["header"].value)
    with session_scope(engine) as s:
        row = s.execute(select(StudyRow)).scalar_one()
        assert (row.name, row.min_unseen_steps, row.max_total_steps) == ("from the launchpad", 5, 1000)
        assert row.state == StudyState.FINISHED.value and str(row.id) == mats[0].partition
    both = study_job.execute_in_process(
        run_config={"ops": {"study_plan": {"config": {"study_id": 1, "new_study": NEW_STUDY}}}},
        raise_on_error=False,
        resources={"store": StoreResource(url=sqlite_url), "study_runner": StudyRunnerResource()})
    assert "expected either study_id (a created study) or new_study" in _failure(both)


def test_the_launchpad_refuses_a_search_space_naming_its_config_not_the_clis_flags(sqlite_url: str) -> None:
    """The launchpad's config has ``new_study.grid``, not ``--grid`` (each door its own words)."""
    limits = {"max_candidates": 2, "max_total_steps": 1000}
    said = _failure(_launch(sqlite_url, {**NEW_STUDY, **limits, "grid": ["skill=0.5", "skill=0.6,nan"]}))
    assert "expected skill in new_study.grid[1] as a finite number, got 'nan'" in said, said
    said = _failure(_launch(sqlite_url, {**NEW_STUDY, **limits, "random": ["skill=0.5"], "random_draws": 2}))
    assert ("expected new_study.random[0] as NAME=LOW:HIGH, got 'skill=0.5'. Write e.g. \"threshold=0.3:0.7\" "
            "in new_study.random.") in said, said
    assert "--grid" not in said and "--random" not in said


def test_the_launchpad_refuses_prompt_files_naming_its_config_not_the_clis_flag(sqlite_url: str, tmp_path: Path) -> None:
    """``new_study.prompt_files`` is the launchpad's field: its refusals name it, not ``--prompt-file``."""
    limits = {"max_candidates": 2, "max_total_steps": 1000}
    said = _failure(_launch(sqlite_url, {**NEW_STUDY, **limits, "prompt_files": ["forecast"]}))
    assert ("expected new_study.prompt_files[0] as STEP=PATH, got 'forecast'. Write e.g. \"forecast=alt.txt\" "
            "in new_study.prompt_files.") in said, said
    prompt = tmp_path / "alt.txt"
    prompt.write_text("Forecast {date}.", encoding="utf-8")
    said = _failure(_launch(sqlite_url, {**NEW_STUDY, **limits,
                                         "prompt_files": [f"forecast={prompt}", f"\u202e={prompt}"]}))
    assert "expected the parameter name of new_study.prompt_files[1] without control characters" in said, said
    assert "--prompt-file" not in said
