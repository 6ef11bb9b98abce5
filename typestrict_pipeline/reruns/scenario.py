"""A small, reproducible scheduled-re-run scenario on the synthetic regime-shift workflow.

Used by the tests and by ``make demo``: a root study over two arms ("steady" and "late") that
finishes before the regime shifts, so its winner is "steady"; once data after the shift arrive,
a re-run picks "late" and the schedule's owner is told that the winner changed.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Engine

from typestrict_pipeline.reruns.studies import StoreStudies, default_backend_for
from typestrict_pipeline.reruns.synthetic import RegimeShiftBackend, regime_config
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import run_study_local
from typestrict_pipeline.study.space import SearchSpace

WORKFLOW = "regime-demo"
VERSION = "v1"
ARMS = ("steady", "late")
START = dt.datetime(2015, 1, 1, tzinfo=dt.UTC)
STEP = dt.timedelta(days=1)


def backend(shift_at: dt.datetime, seed: int = 7) -> RegimeShiftBackend:
    """The synthetic workflow: "steady" is better before ``shift_at``, "late" after (seed 7)."""
    return RegimeShiftBackend(
        before={"steady": 0.62, "late": 0.50},
        after={"steady": 0.50, "late": 0.66},
        shift_at=shift_at,
        noise=0.05,
        seed=seed,
    )


def create_root_study(
    engine: Engine,
    *,
    workspace: str,
    root_end: dt.datetime,
    budget_micro_usd: int | None,
    min_unseen_steps: int | None,
    workflow: RegimeShiftBackend,
    n_folds: int = 2,
    tune_steps: int = 5,
    eval_steps: int = 5,
    holdout_steps: int = 10,
) -> str:
    """Create (not run) a root study whose holdout ends at ``root_end``; returns its id.

    The study stores ``workflow``'s configuration, so every process (and every re-run, which
    copies it) rebuilds the same synthetic workflow. The USD estimate is taken from the synthetic
    workflow's known cost per step (as if its last backtest had run 10 steps). "Min unseen steps
    for a re-run" is stored on the study when it is created (``None``: created without it).
    """
    layout = plan_folds(
        start=START, end=root_end, step=STEP, n_folds=n_folds, tune_steps=tune_steps,
        eval_steps=eval_steps, holdout_steps=holdout_steps,
    )
    study_id = repo.create_study(
        engine,
        workspace=workspace,
        workflow=WORKFLOW,
        workflow_version=VERSION,
        space=SearchSpace(grid={"arm": list(ARMS)}),
        layout=layout,
        limits=StudyLimits(max_candidates=4, max_total_steps=10_000, budget_micro=budget_micro_usd),
        config={"workflow": WORKFLOW, "backend": regime_config(workflow)},
        last_backtest=repo.LastBacktest(cost_micro=10 * workflow.cost_per_step, steps=10),
        name="root study",
        min_unseen_steps=min_unseen_steps,
    )
    return str(study_id)


def run(engine: Engine, study_id: str) -> None:
    """Run a created study to its end in this process, on the backend it stores."""
    with session_scope(engine) as session:
        row = repo.get_study(session, int(study_id))
        session.expunge(row)
    run_study_local(engine, int(study_id), default_backend_for(row), max_workers=2)


def port(engine: Engine) -> StoreStudies:
    """The studies port (every study runs on the backend it stores)."""
    return StoreStudies(engine, max_workers=2)


SEATTLE_WORKFLOW = "seattle_rain"


def create_seattle_study(
    engine: Engine,
    *,
    workspace: str,
    dataset: str,
    end: dt.datetime,
    budget_micro_usd: int,
    min_unseen_steps: int,
    n_folds: int = 2,
    tune_steps: int = 10,
    eval_steps: int = 10,
    holdout_steps: int = 10,
) -> str:
    """Create (not run) a small Seattle rain study on a named point-in-time dataset.

    The study replays the registered ``seattle_rain`` workflow on ``dataset`` (a registered
    dataset, ``typestrict data register``) with its stand-in forecaster (no latency), over two
    thresholds; its holdout ends at ``end`` (exclusive). A tick reads the dataset itself, so new
    rows appended to it (``typestrict data append``) are what makes its re-runs fire.
    """
    from typestrict_pipeline.backtest.workflows import default_registry
    from typestrict_pipeline.reruns.studies import REGISTERED_SETUP

    wf = default_registry().active(SEATTLE_WORKFLOW)
    layout = plan_folds(start=end - (n_folds * (tune_steps + eval_steps) + holdout_steps + 12) * STEP, end=end,
                        step=STEP, n_folds=n_folds, tune_steps=tune_steps, eval_steps=eval_steps,
                        holdout_steps=holdout_steps)
    backend = {"backend": "engine", "setup": REGISTERED_SETUP,
               "setup_args": {"workflow": SEATTLE_WORKFLOW, "dataset": dataset, "latency_s": 0.0},
               "max_in_flight": 4}
    study_id = repo.create_study(
        engine, workspace=workspace, workflow=SEATTLE_WORKFLOW, workflow_version=wf.version_id,
        space=SearchSpace(grid={"threshold": [0.4, 0.6]}), layout=layout,
        limits=StudyLimits(max_candidates=4, max_total_steps=10_000, budget_micro=budget_micro_usd),
        config={"workflow": SEATTLE_WORKFLOW, "backend": backend},
        last_backtest=repo.LastBacktest(cost_micro=30, steps=10), name=f"seattle rain on {dataset}",
        min_unseen_steps=min_unseen_steps,
    )
    return str(study_id)


def within_noise_lineage(engine: Engine, *, now: dt.datetime | None = None) -> str:
    """A root study and one scheduled re-run whose arms both score below the baseline (the
    default configuration) before and after the shift, so the lineage's best is within noise and
    its bound shows no persistence; the re-run's study id. Used by the tests of the lineage's two
    statements on every surface.

    Args:
        engine: the store (workspace ``demo`` is set active with a $50 usage budget).
        now: when the schedule is enabled and evaluated (default 2026-11-30 09:00 UTC).
    """
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.service import enable_schedule, evaluate_schedule, execute_rerun
    from typestrict_pipeline.reruns.studies import record_data_end
    from typestrict_pipeline.reruns.workspace import set_workspace, store_spend_source

    at = now or dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)
    set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    root_end = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
    workflow = RegimeShiftBackend(before={"steady": 0.45, "late": 0.44}, after={"steady": 0.44, "late": 0.45},
                                  shift_at=root_end, noise=0.05, seed=7)
    root = create_root_study(engine, workspace="demo", root_end=root_end, budget_micro_usd=10**6,
                             min_unseen_steps=10, workflow=workflow)
    run(engine, root)
    studies = port(engine)
    sched = enable_schedule(engine, studies, study_id=root, cadence="1d", owner="ana@example.com", now=at)
    record_data_end(engine, "demo", WORKFLOW, root_end + 10 * STEP)
    fired = evaluate_schedule(engine, studies, sched.id, now=at, spend=store_spend_source(engine))
    if fired is None or fired.run_key is None:
        raise RuntimeError(f"the scenario's schedule {sched.id} did not fire on 10 unseen steps")
    child = execute_rerun(engine, studies, fired.run_key).study_id
    if child is None:
        raise RuntimeError(f"the scenario's re-run {fired.run_key} made no study")
    return str(child)
