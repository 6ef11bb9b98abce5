"""Studies fan out into work-sized chunks: the dealing itself, and ``study_job`` on chunks.

What a user relies on: every planned window runs exactly once, chunks are balanced by steps,
the chunked study picks the same winner with the same holdout score as one step per candidate,
its runs are tagged ``mode=HISTORICAL``, and a launched run gets the job's executor (the warm
multiprocess executor: steps forked from the run process, two at once) unless the launchpad
overrides it.
"""

from __future__ import annotations

import datetime as dt
import random

import dagster as dg
import pytest

from assets.studies import (
    STUDY_JOB_EXECUTION,
    STUDY_JOB_PRELOAD,
    executor_workers,
    study_job,
    study_run_config,
)
from resources.executor import warm_multiprocess_executor
from resources.store import StoreResource
from resources.studies import StudyRunnerResource
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.runner import RunKey, deal_chunks, default_chunk_count
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyState, WindowKind

UTC = dt.UTC
T0 = dt.datetime(2020, 1, 1, tzinfo=UTC)


def _keys(rng: random.Random, n_candidates: int, n_folds: int) -> list[RunKey]:
    return [RunKey(1, 100 + c, f, kind, T0, T0, rng.randint(1, 50))
            for c in range(n_candidates) for f in range(1, n_folds + 1)
            for kind in (WindowKind.TUNE, WindowKind.EVAL)]


@pytest.mark.parametrize("seed", range(20))  # 20 seeded random plans (random.Random(seed))
def test_every_window_is_dealt_once_in_plan_order_and_chunks_are_balanced(seed: int) -> None:
    rng = random.Random(seed)
    keys = _keys(rng, rng.randint(1, 40), rng.randint(1, 4))
    n = rng.randint(1, 12)
    chunks = deal_chunks(keys, n)
    assert sorted((k for c in chunks for k in c), key=keys.index) == keys  # each exactly once
    assert 1 <= len(chunks) <= n and all(chunks)
    for chunk in chunks:
        assert chunk == sorted(chunk, key=keys.index)  # a chunk runs its windows in plan order
    candidates = {k.candidate_id for k in keys}
    if len(candidates) >= n:  # a candidate's windows stay together
        owner = {k.candidate_id: i for i, c in enumerate(chunks) for k in c}
        assert all(owner[k.candidate_id] == i for i, c in enumerate(chunks) for k in c)
        unit = max(sum(k.steps for k in keys if k.candidate_id == c) for c in candidates)
    else:
        assert len(chunks) == min(n, len(keys))
        unit = max(k.steps for k in keys)
    loads = [sum(k.steps for k in c) for c in chunks]
    assert max(loads) - min(loads) <= unit  # greedy balance: within one unit of work
    assert deal_chunks(keys, n) == chunks  # deterministic


def test_the_chunk_count_follows_the_executors_workers() -> None:
    assert executor_workers({"execution": {"config": {"in_process": {}}}}) == 1
    assert executor_workers({"execution": {"config": {"multiprocess": {"max_concurrent": 3}}}}) == 3
    assert executor_workers({"execution": {"config": STUDY_JOB_EXECUTION}}) == 2
    assert default_chunk_count(executor_workers({"execution": {"config": STUDY_JOB_EXECUTION}})) == 2
    with pytest.raises(ValueError, match="at least 1 chunk"):
        deal_chunks([], 0)


def _config(n: int) -> StudyConfig:
    return StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5 + 0.01 * i for i in range(n)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=n, max_total_steps=100_000, budget_micro=None,
        backend={"backend": "synthetic", "cost_per_step": 3, "noise": 0.3},
    )


def _run(url: str, fanout: str, chunks: int = 0) -> tuple[dg.ExecuteInProcessResult, int, dg.DagsterRun]:
    engine = open_store(url)
    sid = create_study_from_config(engine, _config(6), last_backtest=LastBacktest(30, 10))
    with dg.instance_for_test() as instance:
        result = study_job.execute_in_process(
            run_config=study_run_config(sid, fanout, chunks), instance=instance,
            resources={"store": StoreResource(url=url), "study_runner": StudyRunnerResource()})
        run = instance.get_run_by_id(result.run_id)
        assert run is not None
    return result, sid, run


@pytest.mark.slow
def test_a_chunked_study_finds_the_same_winner_and_holdout_score_and_is_tagged_historical(
        sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    per_candidate, sid_a, _ = _run(sqlite_url, "candidate")
    chunked, sid_b, run = _run(sqlite_url, "chunk")
    three, sid_c, _ = _run(sqlite_url, "chunk", chunks=3)
    assert per_candidate.success and chunked.success and three.success
    boards = [load_leaderboard(engine, sid) for sid in (sid_a, sid_b, sid_c)]
    assert all(b.state == StudyState.FINISHED for b in boards)
    winners = {(next(r.index for r in b.rows if r.candidate_id == b.winner_candidate_id),
                b.holdout_score, b.holdout_baseline, b.spend_micro) for b in boards}
    assert len(winners) == 1  # same winner (by its grid position), same holdout, same spend

    def steps(result: dg.ExecuteInProcessResult) -> set[str]:
        return {e.step_key for e in result.all_events
                if e.step_key and e.step_key.startswith("study_backtests")}

    # The job's default executor has two workers: one chunk each (the run config is in process
    # here; execute_in_process ignores the executor but the chunk count reads its config).
    assert steps(chunked) == {f"study_backtests[chunk{i}]" for i in range(2)}
    assert steps(three) == {f"study_backtests[chunk{i}]" for i in range(3)}
    assert len(steps(per_candidate)) == 6
    assert run.tags.get("mode") == "HISTORICAL" and run.tags.get("area") == "studies"


def test_a_launched_study_gets_the_jobs_executor_unless_the_launchpad_overrides_it() -> None:
    # What the launchpad shows: the job's default execution block.
    default = study_job.run_config_schema.config_type.fields["execution"].default_value  # type: ignore[attr-defined]
    assert default == {"config": STUDY_JOB_EXECUTION}
    # A run config naming only the study (the CLI, a sensor, the launchpad's ops block) gets it.
    resolved = dg.validate_run_config(study_job, study_run_config(1))["execution"]
    start = resolved["warm_multiprocess"]["multiprocess"]["start_method"]
    assert start == {"fork": {"fallback_preload_modules": STUDY_JOB_PRELOAD}}
    assert STUDY_JOB_PRELOAD[0] == "typestrict_pipeline.definitions"
    assert resolved["warm_multiprocess"]["multiprocess"]["max_concurrent"] == 2
    # The launchpad can name another executor, or another start method.
    override = {**study_run_config(1), "execution": {"config": {"in_process": {}}}}
    assert "in_process" in dg.validate_run_config(study_job, override)["execution"]["warm_multiprocess"]
    spawn = {**study_run_config(1), "execution": {"config": {"multiprocess": {
        "start_method": {"spawn": {}}}}}}
    assert dg.validate_run_config(study_job, spawn)["execution"]["warm_multiprocess"][
        "multiprocess"]["start_method"] == {"spawn": {}}


def test_a_code_location_defaulting_to_celery_still_loads_and_study_job_on_celery_takes_its_config() -> None:
    from dagster_celery import celery_executor

    from assets.studies import study_job_on
    from typestrict_pipeline.definitions import defs

    merged = dg.Definitions.merge(defs, dg.Definitions(executor=celery_executor))
    # their own executor and its default block
    assert merged.resolve_job_def("study_job").executor_def is warm_multiprocess_executor
    assert merged.resolve_job_def("verdict_job").executor_def is dg.multi_or_in_process_executor
    on_celery = study_job_on(celery_executor)
    config = {**study_run_config(1), "execution": {"config": {"broker": "redis://h:6379/0"}}}
    assert dg.validate_run_config(on_celery, config)["execution"]["celery"]["broker"] == "redis://h:6379/0"
    assert on_celery.tags["mode"] == "HISTORICAL"
    # Its run process looks at its steps ten times a second, not once (dagster-celery's tick).
    import dagster_celery.core_execution_loop as celery_loop

    from assets.studies import CELERY_POLL_S

    assert celery_loop.TICK_SECONDS == CELERY_POLL_S == 0.1
