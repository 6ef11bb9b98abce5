"""``typestrict study ...``: run a study on Dagster, see its leaderboard, cancel it, promote its winner.

* ``run WORKFLOW --start ... --end ... --folds K --tune-steps N --eval-steps N --holdout-steps N
  --grid NAME=V1,V2 [--random NAME=LOW:HIGH --random-draws N --seed S]
  [--prompt-file STEP=PATH ...] --max-candidates N --max-total-steps N [--budget-usd X]``:
  creates the study (refused without both limits, with a USD budget on a version never
  backtested in the workspace, or while another study runs on the workflow) and runs
  ``study_job`` on the Dagster instance (``DAGSTER_HOME``, else an ephemeral one); prints the
  leaderboard. ``--synthetic`` runs the trivial synthetic workflow instead (no model).
* ``leaderboard STUDY_ID [--json]``: the leaderboard and its header.
* ``list [--workspace W] [--workflow NAME]``, ``cancel STUDY_ID``, ``delete STUDY_ID``,
  ``promote STUDY_ID``.

Dagster is imported only by ``run``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from sqlalchemy import Engine, select

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import default_store_url, open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.form import StudyForm, study_config
from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
from typestrict_pipeline.study.limits import estimate_text, format_usd
from typestrict_pipeline.study.tables import StudyRow, StudyState


def _engine(args: argparse.Namespace) -> Engine:
    return open_store(args.store_url or default_store_url())


def _study_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError("a study id (a whole number, see `typestrict study list`)", repr(text),
                         "pass the study's id") from None


def _run(args: argparse.Namespace) -> int:
    from typestrict_pipeline.study.service import create_study_from_config

    engine = _engine(args)
    form = StudyForm(
        workflow=args.workflow, start=args.start, end=args.end, tune_steps=args.tune_steps,
        eval_steps=args.eval_steps, holdout_steps=args.holdout_steps, workspace=args.workspace,
        dataset=args.dataset, step=args.step, folds=args.folds, horizon_steps=args.horizon_steps,
        grid=list(args.grid or []), random=list(args.random or []),
        random_draws=args.random_draws, seed=args.seed, prompt_files=list(args.prompt_file or []),
        max_candidates=args.max_candidates, max_total_steps=args.max_total_steps,
        budget_usd=args.budget_usd, min_unseen_steps=args.min_unseen_steps, name=args.name,
        synthetic=args.synthetic, max_in_flight=args.max_in_flight,
        standin_latency=args.standin_latency,
    )
    sid = create_study_from_config(engine, study_config(form))
    with session_scope(engine) as s:
        study = repo.get_study(s, sid)
        est = study.estimate_micro
        admitted = study.candidates_planned
    if est is not None:
        print(f"study {sid}: {estimate_text(est, admitted, args.folds)}")
    else:
        print(f"study {sid}: no USD estimate (this version has no completed backtest in workspace "
              f"{args.workspace!r})")
    ok = run_study_on_dagster(sid, executor=args.executor)
    print(render_markdown(load_leaderboard(engine, sid)))
    return 0 if ok else 1


def run_study_on_dagster(study_id: int, *, executor: str = "in_process",
                         max_concurrent: int = 2) -> bool:
    """Run ``study_job`` for ``study_id`` on ``DAGSTER_HOME``'s instance (else an ephemeral one)."""
    import importlib
    import os

    import dagster as dg

    # Imported by name: the wiring is not part of the typed core.
    study_run_config = importlib.import_module("assets.studies").study_run_config
    defs = importlib.import_module("typestrict_pipeline.definitions").defs
    job = defs.resolve_job_def("study_job")
    config: dict[str, Any] = dict(study_run_config(study_id))
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    if executor == "multiprocess":
        config["execution"] = {"config": {"multiprocess": {
            "max_concurrent": max_concurrent, "start_method": {"forkserver": {}}}}}
        result = dg.execute_job(dg.reconstructable(_study_job), instance=instance,
                                run_config={**config, **quiet})
        return bool(result.success)
    res = job.execute_in_process(run_config={**config, **quiet}, instance=instance,
                                 raise_on_error=False)
    return bool(res.success)


def _study_job() -> Any:
    import importlib

    return importlib.import_module("typestrict_pipeline.definitions").defs.resolve_job_def("study_job")


def _leaderboard(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.lineage import summarize
    from typestrict_pipeline.reruns.service import lineage_entries, lineage_text

    engine = _engine(args)
    sid = _study_id(args.study_id)
    board = load_leaderboard(engine, sid)
    entries = lineage_entries(engine, str(sid))
    if args.json:
        out = board.to_json()
        if entries:
            out["lineage"] = {"entries": [{**e.__dict__, "edge": e.edge} for e in entries],
                              "summary": summarize(entries).__dict__}
        print(json.dumps(out, indent=2, default=str))
    else:
        print(render_markdown(board))
        if entries:  # the lineage panel under the leaderboard
            print("\n" + lineage_text(engine, str(sid)))
    return 0


def _list(args: argparse.Namespace) -> int:
    with session_scope(_engine(args)) as s:
        q = select(StudyRow).order_by(StudyRow.id.desc()).limit(50)
        if args.workspace:
            q = q.where(StudyRow.workspace == args.workspace)
        if args.workflow:
            q = q.where(StudyRow.workflow == args.workflow)
        rows = s.execute(q).scalars().all()
        if not rows:
            print("no studies")
        for r in rows:
            spend = format_usd(r.spend_micro) if r.cost_tracked else "—"
            print(f"{r.id:>5}  {r.workspace}/{r.workflow}  {StudyState(r.state).label:<15} "
                  f"{r.stop_limit or '':<16} spend {spend}")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    state = repo.cancel_study(_engine(args), _study_id(args.study_id))
    print(f"study {args.study_id}: {state.label}; what ran is kept")
    return 0


def _delete(args: argparse.Namespace) -> int:
    sid = _study_id(args.study_id)
    repo.delete_study(_engine(args), sid)
    print(f"study {sid}: deleted (a schedule re-running it turns itself off at its next tick)")
    return 0


def _promote(args: argparse.Namespace) -> int:
    from typestrict_pipeline.study.promote import promote_winner
    from typestrict_pipeline.study.service import study_backend

    engine = _engine(args)
    sid = _study_id(args.study_id)
    res = promote_winner(engine, sid, study_backend(engine, sid))
    print(res.message)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    study = subparsers.add_parser("study", help="studies: run, leaderboard, cancel, delete, promote")
    sub = study.add_subparsers(dest="study_command", required=True)

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--store-url", help="store URL (default: TYPESTRICT_STORE_URL or the local SQLite file)")
        return p

    p = cmd("run", "create a study and run it on Dagster; print its leaderboard")
    p.add_argument("workflow")
    p.add_argument("--workspace", default="demo")
    p.add_argument("--dataset", default="seattle_weather")
    p.add_argument("--name")
    p.add_argument("--start", required=True, help="first time the folds may use (ISO 8601)")
    p.add_argument("--end", required=True, help="end of the data (exclusive); the holdout ends here")
    p.add_argument("--step", default="1d")
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--tune-steps", type=int, required=True)
    p.add_argument("--eval-steps", type=int, required=True)
    p.add_argument("--holdout-steps", type=int, required=True)
    p.add_argument("--horizon-steps", type=int, default=1)
    p.add_argument("--grid", action="append", help="NAME=V1,V2,... (repeatable)")
    p.add_argument("--random", action="append", help="NAME=LOW:HIGH drawn uniformly (repeatable)")
    p.add_argument("--random-draws", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="seed of the random draws (default 0)")
    p.add_argument("--prompt-file", action="append", help="STEP=PATH: an alternative prompt (repeatable)")
    p.add_argument("--max-candidates", type=int, help="required: how many candidates may run")
    p.add_argument("--max-total-steps", type=int, help="required: how many steps the study may run")
    p.add_argument("--budget-usd", help="optional USD budget (needs a completed backtest of the version)")
    p.add_argument("--min-unseen-steps", type=int,
                   help="Min unseen steps for a re-run: new steps a scheduled re-run waits for")
    p.add_argument("--max-in-flight", type=int, default=8)
    p.add_argument("--standin-latency", type=float, default=0.02)
    p.add_argument("--executor", choices=("in_process", "multiprocess"), default="in_process")
    p.add_argument("--synthetic", action="store_true", help="run the synthetic workflow (no model)")
    p.set_defaults(func=_run)

    p = cmd("leaderboard", "print a study's leaderboard and header")
    p.add_argument("study_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_leaderboard)

    p = cmd("list", "list studies")
    p.add_argument("--workspace")
    p.add_argument("--workflow")
    p.set_defaults(func=_list)

    p = cmd("cancel", "cancel a study (what ran is kept)")
    p.add_argument("study_id")
    p.set_defaults(func=_cancel)

    p = cmd("delete", "delete a study that is not in flight (its candidates and runs too)")
    p.add_argument("study_id")
    p.set_defaults(func=_delete)

    p = cmd("promote", "promote a finished study's winner through the evaluation gate")
    p.add_argument("study_id")
    p.set_defaults(func=_promote)
