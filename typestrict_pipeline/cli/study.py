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
  ``promote STUDY_ID``. ``list`` first ends as ``Interrupted`` the studies whose process died;
  ``cancel`` works on any study that has not ended (pending, running, failed, interrupted); an
  ended one is refused (exit 2) with how it ended: nothing to cancel.
* ``promote STUDY_ID [--json]``: the winner through the evaluation gate, then the normal
  activation path (``study.promote.promote_winner``, what ``POST /v1/studies/{id}/promote`` and
  the console's "Promote winner" call). The gate reads the study's stored baseline holdout run;
  only for a study without one is the study's backend built and the active version run on the
  holdout (a metered backtest outside the study's budget). ``--json``: ``study_id``,
  ``promoted`` (``version`` or ``parameters``), ``version_id``, ``params``, ``message``, ``wrote``.

Dagster is imported only by ``run``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, select

from typestrict_pipeline import values
from typestrict_pipeline.cli.common import (
    EXIT_CANCELLED,
    MAX_CANDIDATES,
    MAX_STEPS,
    Wrote,
    add_json,
    add_store,
    bounded_int,
    check_range,
    identifier,
    positive_float,
    print_json,
    print_table,
    progress,
    read_store,
    say_wrote,
    shown_store,
    step,
    store_url,
    study_id,
    usd,
    value_type,
    write_store,
    writes,
)
from typestrict_pipeline.errors import InputError, TypeStrictError
from typestrict_pipeline.processes import keep_stop_signals, stop_request, stop_signals_received
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import MIN_SCORED_STEPS
from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
from typestrict_pipeline.study.limits import estimate_text, format_usd
from typestrict_pipeline.study.tables import CandidateRow, CandidateState, StudyRow, StudyState
from typestrict_pipeline.workspaces import require_workspace

STEPS = bounded_int("a number of steps", 1, MAX_STEPS)
SCORED_STEPS = bounded_int("a number of steps", MIN_SCORED_STEPS, MAX_STEPS)
"""An eval or holdout window's steps, refused below the study's minimum naming the flag."""



def _engine(args: argparse.Namespace) -> Engine:
    return write_store(args)


def _admitted(engine: Engine, study_id: int) -> int:
    """Candidates left after "Max candidates" (and duplicates, rejections): those that will run."""
    from sqlalchemy import func

    with session_scope(engine) as s:
        return int(s.execute(select(func.count()).select_from(CandidateRow).where(
            CandidateRow.study_id == study_id,
            CandidateRow.state != CandidateState.DISCARDED.value)).scalar_one())


def _run(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.service import parse_time
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.service import create_study_from_config

    check_range(parse_time(args.start, "start"), parse_time(args.end, "end"), what="study's data (--start, --end)")
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
    config = study_config(form)
    engine = _engine(args)
    sid = create_study_from_config(engine, config)
    with session_scope(engine) as s:
        est = repo.get_study(s, sid).estimate_micro
    admitted = _admitted(engine, sid)
    if args.json:
        pass  # the leaderboard as JSON at the end says it all
    elif est is not None:
        print(f"study {sid}: {estimate_text(est, admitted, args.folds)}", flush=True)
    else:
        print(f"study {sid}: {admitted} candidate{'s' if admitted != 1 else ''} to run; no USD estimate "
              f"(this version has no completed backtest in workspace {args.workspace!r})", flush=True)
    url = store_url(args)
    why = "its study_job run ended before starting it"
    try:
        with _watch_runs(engine, sid):
            ok = run_study_on_dagster(sid, executor=args.executor, store_url=url)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C, SIGTERM: the study ends interrupted, now
            from typestrict_pipeline.backtest.store import interruption_reason

            repo.interrupt_study(engine, sid, interruption_reason(exc) + "; re-execute its run "
                                 "to resume it")
        elif isinstance(exc, TypeStrictError):  # e.g. no Dagster instance to run it on
            why = f"its study_job run could not start: {exc}"
        raise
    finally:
        # A run that never started the study (it could not reach the store, or failed before
        # its first step, or could not be launched at all) leaves nothing to resume: the study
        # is marked failed and its workflow's lock released, in the store this command was given.
        if repo.abandon_unstarted(engine, sid, why):
            print(f"typestrict: study {sid} never started; marked failed and its workflow's lock "
                  "released", file=sys.stderr)
    board = load_leaderboard(engine, sid)
    wrote = Wrote(f"study {sid} ({board.state.label}) of {args.workflow} in workspace {args.workspace}",
                  (str(sid),), store=shown_store(url))
    if args.json:
        print(json.dumps({**board.to_json(), "wrote": wrote.to_json()}, indent=2, default=str))
    else:
        print(render_markdown(board))
        say_wrote(args, wrote)
    if board.state is StudyState.CANCELLED:
        # Cancelled by another command (`typestrict study cancel`, the API, the console) while it
        # ran: `backtest run`'s code for the same end (docs/cli.md, "Exit codes"), not a success.
        print(f"typestrict: study {sid} was cancelled while it ran; what ran is kept and ranked "
              f"above. Run the study again (`typestrict study run {args.workflow} ...`) for a "
              "complete one.", file=sys.stderr)
        return EXIT_CANCELLED
    return 0 if ok else 1


@contextlib.contextmanager
def _watch_runs(engine: Engine, study_id: int) -> Iterator[None]:
    """A progress bar of the study's search (:func:`search_progress`), read every 0.5 s."""
    import threading

    from typestrict_pipeline.study.runner import search_progress

    stop = threading.Event()
    total = search_progress(engine, study_id).total or 0
    with progress(total, f"study {study_id}: window runs") as update:
        def poll() -> None:
            while not stop.wait(0.5):
                try:
                    update(search_progress(engine, study_id).done)
                except Exception:  # a progress bar never fails the study
                    return

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)


def run_study_on_dagster(study_id: int, *, executor: str = "in_process",
                         max_concurrent: int = 2, store_url: str | None = None) -> bool:
    """Run ``study_job`` for ``study_id`` on ``DAGSTER_HOME``'s instance (else the home's, else an
    ephemeral one), on the store at ``store_url`` (default: the environment's), which travels
    with the run in its config and its ``typestrict/store`` tag. A failed run prints its step's
    message in one line on stderr (Dagster's own log, with its traceback, stays in the run's
    event log, which the UI shows)."""
    import importlib

    import dagster as dg

    from typestrict_pipeline.store import default_store_url

    # Imported by name: the wiring is not part of the typed core.
    study_run_config = importlib.import_module("assets.studies").study_run_config
    resources_store = importlib.import_module("resources.store")
    defs = importlib.import_module("typestrict_pipeline.definitions").defs
    job = defs.resolve_job_def("study_job")
    url = store_url or default_store_url()
    config: dict[str, Any]
    tags: dict[str, str]
    config, tags = resources_store.on_store(url, study_run_config(study_id))
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    # The instance is disposed when the run ends (its storage's connections closed here, not
    # by the garbage collector in whichever thread collects it: `main()` also runs in process).
    with _instance() as instance:
        # The run's config names the store without its password; this process (and the step
        # processes it starts) executes it, so its TYPESTRICT_STORE_URL is the command's store,
        # whose password the store resource takes back (resources/store.py).
        # keep_stop_signals: Dagster leaves SIGTERM with SIGINT's handler when it ends (ignored, for a
        # command started in the background); this command and what it starts stay stoppable.
        # stop_signals_received: Dagster turns Ctrl-C or SIGTERM during the run into a failed step;
        # the command stops on it as on any stop signal (its caller ends the study interrupted, with
        # which signal), not as a failed run.
        with _store_environment(url), keep_stop_signals(), stop_signals_received() as stopped:
            if executor == "multiprocess":
                config["execution"] = {"config": {"multiprocess": {
                    "max_concurrent": max_concurrent, "start_method": {"forkserver": {}}}}}
                result: Any = dg.execute_job(dg.reconstructable(_study_job), instance=instance,
                                             run_config={**config, **quiet}, tags=tags)
            else:
                result = job.execute_in_process(run_config={**config, **quiet}, instance=instance,
                                                raise_on_error=False, tags=tags)
        if stopped:
            raise stop_request(stopped[0])
        _say_failure(result)
        return bool(result.success)


@contextlib.contextmanager
def _store_environment(url: str) -> Iterator[None]:
    """``TYPESTRICT_STORE_URL`` set to ``url`` while a run of this command executes here."""
    import os

    before = os.environ.get("TYPESTRICT_STORE_URL")
    os.environ["TYPESTRICT_STORE_URL"] = url
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TYPESTRICT_STORE_URL", None)
        else:
            os.environ["TYPESTRICT_STORE_URL"] = before


def _say_failure(result: Any) -> None:
    """One line per failed step of a Dagster run: the step and its error's own message."""

    if result.success:
        return
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            err = event.step_failure_data.error
            message = " ".join(((err.cause or err).message or "").split())[:500]
            print(f"typestrict: study_job run {result.run_id[:8]} failed at step {event.step_key}: "
                  f"{message}", file=sys.stderr)


def _instance() -> Any:
    """``DAGSTER_HOME``'s instance; else the home's (``<TYPESTRICT_HOME>/dagster_home``, where
    ``make demo`` and ``make ui`` keep it) when it exists; else an ephemeral one. A folder
    Dagster cannot use (a relative or missing path, a ``dagster.yaml`` that is not YAML or that
    Dagster refuses, a file it cannot read) is an :class:`InputError` naming it, not an
    unexpected error."""
    import os

    import dagster as dg
    import yaml

    from typestrict_pipeline.store import typestrict_home

    folder = os.environ.get("DAGSTER_HOME")
    local = typestrict_home() / "dagster_home"
    try:
        if folder:
            return dg.DagsterInstance.get()
        if (local / "dagster.yaml").is_file():
            folder = str(local)
            return dg.DagsterInstance.from_config(folder)
    except (dg.DagsterError, yaml.YAMLError, OSError) as exc:  # a relative or missing folder, a bad dagster.yaml
        raise InputError(
            "DAGSTER_HOME as the absolute path of a Dagster instance's folder (with a valid "
            "dagster.yaml, if any)", f"{folder!r}: {' '.join(str(exc).split())[:300]}",
            "set DAGSTER_HOME to the instance's folder, or unset it (then the command uses "
            "<TYPESTRICT_HOME>/dagster_home when it has a dagster.yaml, else an ephemeral instance)",
        ) from None
    return dg.DagsterInstance.ephemeral()


def _study_job() -> Any:
    import importlib

    return importlib.import_module("typestrict_pipeline.definitions").defs.resolve_job_def("study_job")


def _leaderboard(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.lineage import summarize
    from typestrict_pipeline.reruns.service import lineage_entries, lineage_text

    sid = args.study_id
    engine = read_store(args)
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
    from sqlalchemy.exc import SQLAlchemyError

    from typestrict_pipeline.lifecycle.reaper import reap

    engine = read_store(args)
    if args.workspace:
        require_workspace(engine, args.workspace)
    with contextlib.suppress(SQLAlchemyError):  # studies whose process died: interrupted first
        reap(engine, workspace=args.workspace)
    with session_scope(engine) as s:
        q = select(StudyRow).order_by(StudyRow.id.desc()).limit(args.limit)
        if args.workspace:
            q = q.where(StudyRow.workspace == args.workspace)
        if args.workflow:
            q = q.where(StudyRow.workflow == args.workflow)
        rows = s.execute(q).scalars().all()
    if args.json:
        print_json([{
            "id": r.id, "name": r.name, "workspace": r.workspace, "workflow": r.workflow,
            "state": StudyState(r.state).label, "stop_limit": r.stop_limit,
            "spend_micro": r.spend_micro if r.cost_tracked else None, "budget_micro": r.budget_micro,
            "created_at": r.created_at,
        } for r in rows])
        return 0
    if not rows:
        print("no studies" + (f" in workspace {args.workspace}" if args.workspace else "")
              + (f" of workflow {args.workflow}" if args.workflow else ""))
        return 0
    print_table("Studies, newest first", ["id", "name", "workspace", "workflow", "state", "stopped by",
                                          "spend", "budget"],
                [[r.id, r.name or "", r.workspace, r.workflow, StudyState(r.state).label, r.stop_limit or "",
                  format_usd(r.spend_micro) if r.cost_tracked else "—", format_usd(r.budget_micro)]
                 for r in rows], right=["id", "spend", "budget"])
    return 0


def _say(args: argparse.Namespace, text: str, wrote: Wrote, **fields: Any) -> None:
    """What a command that wrote something prints: a sentence and what it wrote, or its fields
    and ``wrote`` as JSON."""
    if args.json:
        print_json({**fields, "wrote": wrote.to_json()})
    else:
        print(text)
        say_wrote(args, wrote)


def _cancel(args: argparse.Namespace) -> int:
    from typestrict_pipeline.lifecycle.reaper import cancel_study, reap

    sid = args.study_id
    engine = write_store(args)
    try:
        reap(engine)
        # A study that has ended is refused (exit 2) with how it ended, like `backtest cancel`,
        # `training cancel` and the API's 409: there is nothing to cancel.
        ended = cancel_study(engine, sid)
    finally:
        engine.dispose()
    _say(args, f"study {sid}: Cancelled ({ended.why}); what ran is kept",
         Wrote(f"the cancellation of study {sid}", (str(sid),), store=shown_store(store_url(args))),
         study_id=sid, state=ended.state, why=ended.why)
    return 0


def _delete(args: argparse.Namespace) -> int:
    sid = args.study_id
    repo.delete_study(_engine(args), sid)
    _say(args, f"study {sid}: deleted (a schedule re-running it turns itself off at its next tick)",
         Wrote(f"the deletion of study {sid} (its candidates and runs)", (str(sid),),
               store=shown_store(store_url(args))),
         study_id=sid, deleted=True)
    return 0


def _promote(args: argparse.Namespace) -> int:
    from typestrict_pipeline.study.promote import promote_winner, promoted_kind
    from typestrict_pipeline.study.service import study_backend

    sid = args.study_id
    engine = _engine(args)
    # The gate reads the study's stored baseline holdout run; the backend is built (and the
    # active version run on the holdout) only for a study without one.
    res = promote_winner(engine, sid, build_backend=lambda: study_backend(engine, sid))
    with session_scope(engine) as s:
        row = repo.get_study(s, sid)
        workspace, workflow = row.workspace, row.workflow
    if res.version_id is not None:
        wrote = Wrote(f"version {res.version_id} of {workflow} as the active one in workspace {workspace} "
                      f"(the winner of study {sid})", (res.version_id,), store=shown_store(store_url(args)))
    else:
        wrote = Wrote(f"the winner's parameters of study {sid} {json.dumps(dict(res.params), default=str)} "
                      f"as the configuration of {workflow} in workspace {workspace}", (f"{workspace}/{workflow}",),
                      store=shown_store(store_url(args)))
    _say(args, res.message, wrote, study_id=sid, promoted=promoted_kind(res), version_id=res.version_id,
         params=dict(res.params), message=res.message)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    study = subparsers.add_parser("study", help="studies: run, leaderboard, cancel, delete, promote")
    sub = study.add_subparsers(dest="study_command", required=True)

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        return add_store(sub.add_parser(name, help=help_text))

    p = writes(cmd("run", "create a study and run it on Dagster; print its leaderboard"))
    _run_arguments(p)
    add_json(p)
    p.set_defaults(func=_run)

    p = cmd("leaderboard", "print a study's leaderboard and header")
    p.add_argument("study_id", type=study_id, help="the study's id (see `typestrict study list`)")
    add_json(p)
    p.set_defaults(func=_leaderboard)

    p = cmd("list", "list studies, newest first")
    p.add_argument("--workspace", type=WORKSPACE, help="only this workspace's studies")
    p.add_argument("--workflow", type=WORKFLOW, help="only this workflow's studies")
    p.add_argument("--limit", type=bounded_int("a number of studies", 1, 10_000), default=50,
                   help="at most this many (default 50)")
    add_json(p)
    p.set_defaults(func=_list)

    for name, text in (("cancel", "cancel a study (what ran is kept)"),
                       ("delete", "delete a study that is not in flight (its candidates and runs too)"),
                       ("promote", "promote a finished study's winner through the evaluation gate")):
        p = writes(cmd(name, text))
        p.add_argument("study_id", type=study_id, help="the study's id (see `typestrict study list`)")
        add_json(p)
        p.set_defaults(func={"cancel": _cancel, "delete": _delete, "promote": _promote}[name])


WORKSPACE = value_type(values.workspace_id)
WORKFLOW = identifier("a workflow name")


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``study run`` (the fields of the launchpad's new-study form)."""
    p.add_argument("workflow", type=WORKFLOW, help="the workflow to study, e.g. seattle_rain")
    p.add_argument("--workspace", type=WORKSPACE, default="demo", help="workspace id (default: demo)")
    p.add_argument("--dataset", default="seattle_weather", help="named dataset (default: seattle_weather)")
    p.add_argument("--name", help="a display name for the study")
    p.add_argument("--start", required=True, help="first time the folds may use (ISO 8601)")
    p.add_argument("--end", required=True, help="end of the data (exclusive); the holdout ends here")
    p.add_argument("--step", type=step, default="1d", help="step size: 1d, 12h, 30m, 1w (default 1d)")
    p.add_argument("--folds", type=bounded_int("a number of folds", 1, 100), default=3,
                   help="walk-forward folds, 1 to 100 (default 3)")
    p.add_argument("--tune-steps", type=STEPS, required=True, help="steps in each fold's tune window")
    p.add_argument("--eval-steps", type=SCORED_STEPS, required=True, help="steps in each fold's eval window")
    p.add_argument("--holdout-steps", type=SCORED_STEPS, required=True,
                   help="steps in the sealed holdout at the end of the data")
    p.add_argument("--horizon-steps", type=bounded_int("a horizon in steps", 1, 10_000), default=1,
                   help="steps until a decision's outcome is known (default 1)")
    p.add_argument("--grid", action="append", help="NAME=V1,V2,... (repeatable)")
    p.add_argument("--random", action="append", help="NAME=LOW:HIGH drawn uniformly (repeatable)")
    p.add_argument("--random-draws", type=bounded_int("a number of random draws", 0, MAX_CANDIDATES),
                   default=0, help="how many --random candidates to draw (default 0)")
    p.add_argument("--seed", type=bounded_int("a seed", 0, 2**32 - 1), default=0,
                   help="seed of the random draws (default 0)")
    p.add_argument("--prompt-file", action="append", help="STEP=PATH: an alternative prompt (repeatable)")
    p.add_argument("--max-candidates", type=bounded_int("Max candidates", 1, MAX_CANDIDATES),
                   help="required: how many candidates may run")
    p.add_argument("--max-total-steps", type=STEPS, help="required: how many steps the study may run")
    p.add_argument("--budget-usd", type=usd,
                   help="optional USD budget (needs a completed backtest of the version); needed to "
                        "re-run the study on a schedule")
    p.add_argument("--min-unseen-steps", type=bounded_int("a number of steps", 0, MAX_STEPS),
                   help="Min unseen steps for a re-run: new steps a scheduled re-run waits for")
    p.add_argument("--max-in-flight", type=bounded_int("calls in flight", 1, 256), default=8,
                   help="model calls in flight, 1 to 256 (default 8)")
    p.add_argument("--standin-latency", type=positive_float("seconds", 60.0), default=0.02,
                   help="seconds each stand-in answer takes (default 0.02)")
    p.add_argument("--executor", choices=("in_process", "multiprocess"), default="in_process",
                   help="Dagster executor of study_job (default in_process)")
    p.add_argument("--synthetic", action="store_true", help="run the synthetic workflow (no model)")
