"""The study part of `make demo`: which Seattle rain configuration worked, ranked honestly.

1. The same local Dagster instance and store as the backtest part (``<root>/dagster_home``,
   ``<root>/store.db``); the backtest part's completed backtest of ``seattle_rain`` is what the
   USD estimate comes from (the part runs one itself when started alone).
2. A study on the real NOAA data: a grid of thresholds × look-back windows × two prompts for the
   forecast step (the version's own and a terser one), 3 walk-forward folds of 90 tune + 60 eval
   days with a 1-day gap, a 1-day embargo, then a sealed 120-day holdout at the end of 2015.
   Limits: max candidates, max total steps and a USD budget 25% above the estimate.
3. A second start on the same workflow while the first is pending is refused (one at a time).
4. ``study_job`` runs on Dagster (in process); its leaderboard is printed, as Dagster stored it.
5. A small study with a budget below its estimate stops with "Budget reached" and says why its
   holdout is missing.
6. Promote winner: through the evaluation gate (holdout not worse than the active version's).
"""

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import dagster as dg

from demo.runs import execute
from typestrict_pipeline.backtest.workflows import default_registry
from typestrict_pipeline.errors import ConflictError
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.store import default_store_url, open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
from typestrict_pipeline.study.limits import estimate_text, format_usd
from typestrict_pipeline.study.promote import promote_winner
from typestrict_pipeline.study.service import (
    StudyConfig,
    create_study_from_config,
    lookup_last_backtest,
    study_backend,
)
from typestrict_pipeline.study.space import SearchSpace

WORKFLOW = "seattle_rain"
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
UTC = dt.UTC


def _backend() -> dict[str, Any]:
    return {"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow",
            "setup_args": {"workflow": WORKFLOW, "dataset": "seattle_weather", "latency_s": 0.02},
            "max_in_flight": 16}


def _ensure_backtest(engine: Any, version: str) -> repo.LastBacktest:
    last = lookup_last_backtest(engine, "demo", WORKFLOW, version)
    if last is not None:
        return last
    from typestrict_pipeline.backtest.service import run_and_store_backtest, standin_models
    from typestrict_pipeline.backtest.workflows import load_dataset

    wf = default_registry().active(WORKFLOW)
    with standin_models(wf, latency_s=0.02) as models:
        run_and_store_backtest(engine, wf, workspace="demo", data=load_dataset("seattle_weather"),
                               dataset="seattle_weather", start=dt.datetime(2015, 1, 1, tzinfo=UTC),
                               end=dt.datetime(2015, 3, 31, tzinfo=UTC), step=dt.timedelta(days=1),
                               models=models, max_in_flight=16)
    found = lookup_last_backtest(engine, "demo", WORKFLOW, version)
    assert found is not None
    return found


def _run_job(study_id: int, instance: dg.DagsterInstance) -> tuple[bool, dict[str, Any]]:
    from assets.studies import study_run_config
    from typestrict_pipeline.definitions import defs

    job = defs.resolve_job_def("study_job")
    result = execute(job, run_config={**study_run_config(study_id), **QUIET},
                     instance=instance, raise_on_error=False)
    mats = result.asset_materializations_for_node("study_finalize") if result.success else []
    meta = {k: v.value for k, v in mats[0].metadata.items()} if mats else {}
    return result.success, meta


def run(root: Path) -> int:
    """Run two studies on Seattle rain through Dagster and print their leaderboards."""
    print("\n=== Study: which Seattle rain configuration worked, ranked honestly ===")
    dagster_home = root / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    os.environ["TYPESTRICT_HOME"] = str(root)
    if not (dagster_home / "dagster.yaml").exists():
        write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    started = time.perf_counter()
    engine = open_store(default_store_url())
    wf = default_registry().active(WORKFLOW)
    last = _ensure_backtest(engine, wf.version_id)
    print(f"  USD estimate from the last completed backtest of {WORKFLOW} {wf.version_id}: "
          f"{format_usd(last.cost_micro)} for {last.steps} steps")
    own = wf.prompts["forecast"]
    terse = own.replace(" Today: {today_mm:.1f} mm,", "")
    space = SearchSpace(grid={"threshold": [0.4, 0.5, 0.6], "lookback_days": [3, 7]},
                        prompts={"forecast": [own, terse]})
    base = StudyConfig(
        workspace="demo", workflow=WORKFLOW, workflow_version=wf.version_id, space=space,
        start=dt.datetime(2013, 1, 2, tzinfo=UTC), end=dt.datetime(2015, 12, 31, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=3, tune_steps=90, eval_steps=60, holdout_steps=120,
        max_candidates=12, max_total_steps=6_000, backend=_backend(), name="seattle rain grid")
    layout = base.layout()
    from typestrict_pipeline.study.limits import estimate_cost_micro, study_total_steps

    total = study_total_steps(12, layout.search_steps_per_candidate, layout.holdout.steps)

    estimate = estimate_cost_micro(last.cost_micro, last.steps, total)
    cfg = StudyConfig(**{**base.__dict__, "budget_micro": estimate * 5 // 4})
    sid = create_study_from_config(engine, cfg, last_backtest=last)
    print(f"  study {sid}: {estimate_text(estimate, 12, 3)}; budget {format_usd(estimate * 5 // 4)}")
    try:
        create_study_from_config(engine, cfg, last_backtest=last)
        print("  a second study on the same workflow was NOT refused: that is a bug")
        return 1
    except ConflictError as exc:
        print(f"  a second start is refused: {exc}")
    instance = dg.DagsterInstance.get()
    ok, meta = _run_job(sid, instance)
    if not ok:
        print("  the study run failed")
        return 1
    print("\n" + str(meta.get("header", "")) + "\n\n" + str(meta.get("leaderboard", "")))

    # A budget below the estimate: the study stops before the run that would exceed it.
    small = SearchSpace(grid={"threshold": [0.45, 0.55]})
    cfg2 = StudyConfig(**{**base.__dict__, "space": small, "max_candidates": 2, "n_folds": 2,
                          "tune_steps": 30, "eval_steps": 30, "holdout_steps": 60,
                          "name": "budget below the estimate"})
    lay2 = cfg2.layout()
    est2 = estimate_cost_micro(last.cost_micro, last.steps,
                               study_total_steps(2, lay2.search_steps_per_candidate, lay2.holdout.steps))
    cfg2 = StudyConfig(**{**cfg2.__dict__, "budget_micro": est2 * 9 // 10})
    sid2 = create_study_from_config(engine, cfg2, last_backtest=last)
    print(f"\n  study {sid2}: {estimate_text(est2, 2, 2)}; budget {format_usd(est2 * 9 // 10)} "
          "(below the estimate)")
    ok2, _ = _run_job(sid2, instance)
    board2 = load_leaderboard(engine, sid2)
    print("\n" + render_markdown(board2).partition("\n\n")[0])

    with session_scope(engine) as s:
        winner = repo.get_study(s, sid).winner_candidate_id
    print(f"\n  Promote winner (candidate id {winner}) of study {sid}:")
    try:
        res = promote_winner(engine, sid, study_backend(engine, sid))
        print(f"  {res.message}")
    except ConflictError as exc:
        print(f"  not promoted: {exc}")
    print(f"  (study part: {time.perf_counter() - started:.1f} s; `typestrict study leaderboard "
          f"{sid}` prints the leaderboard again)")
    engine.dispose()
    return 0 if ok2 else 1
