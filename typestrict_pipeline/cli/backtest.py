"""``typestrict backtest ...``, ``typestrict run WORKFLOW`` (live) and ``typestrict usage WORKSPACE``.

* ``typestrict backtest run WORKFLOW --start 2015-01-01 --end 2015-12-31 --step 1d``: a
  HISTORICAL backtest of the workflow's active version; prints the run card, stores everything.
* ``typestrict backtest list|show ID|cancel ID|workflows|leakcheck WORKFLOW|activate WORKFLOW``:
  ``list`` and ``show`` first end as ``interrupted`` the backtests whose process died (with when
  and why); ``cancel`` ends one that has not ended (its process stops before its next step).
* ``typestrict run WORKFLOW``: one LIVE decision with everything known now (or ``--as-of``).
* ``typestrict usage WORKSPACE``: spend by day and by workflow, historical and live apart.

Models: the stand-in server by default (offline, deterministic); ``--model-url`` with
``--model``, ``--price-in`` and ``--price-out`` (micro-USD per 1M tokens) for a real endpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from typestrict_pipeline import values
from typestrict_pipeline.backtest.engine import BacktestStatus, parse_step, short_of_complete
from typestrict_pipeline.backtest.metering import format_usd
from typestrict_pipeline.backtest.pit import PointInTimeTable, format_time
from typestrict_pipeline.backtest.service import (
    ModelSetup,
    active_workflow,
    endpoint_models,
    parse_time,
    run_and_store_backtest,
    run_and_store_live,
    standin_models,
)
from typestrict_pipeline.backtest.store import (
    activate_version,
    list_backtests,
    load_backtest,
)
from typestrict_pipeline.backtest.workflow import Workflow, check_columns
from typestrict_pipeline.backtest.workflows import default_registry, load_dataset
from typestrict_pipeline.cli.common import (
    EXIT_CANCELLED,
    Wrote,
    add_json,
    add_store,
    bounded_int,
    check_range,
    day,
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
    value_type,
    write_store,
    writes,
)
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.values import (
    MAX_PROMPT_CHARS,
    api_key_env,
    base_url,
    check_text,
    command_value,
    model_name,
    parameter_name,
    shown,
)
from typestrict_pipeline.workspaces import require_workspace

WORKSPACE = value_type(values.workspace_id)
WORKFLOW = identifier("a workflow name")
PRICE = bounded_int("a price in micro-USD per 1M tokens", 0, 10**12)
# A live decision more than this past the data's last known time gets a warning.
STALE_AFTER = dt.timedelta(days=2)

RUN_EXIT_CODES: dict[BacktestStatus, int] = {
    BacktestStatus.COMPLETED: 0,
    BacktestStatus.FAILED: 1,
    BacktestStatus.STOPPED: 1,
    BacktestStatus.INTERRUPTED: 1,
    BacktestStatus.CANCELLED: EXIT_CANCELLED,
}
"""How ``backtest run`` exits for each end of its backtest (``docs/cli.md``, "Exit codes"): 0 only
for one that ran every planned step; a backtest that did not complete is never a success."""


def _run_problem(bid: str, card: Any) -> str:
    """The stderr line of a backtest that did not complete: what happened, what ran, what to do."""
    return "typestrict: " + (short_of_complete(bid, card, keep_going="--on-step-error continue")
                             or f"backtest {bid} completed.")


def _pairs(items: list[str] | None, what: str) -> dict[str, Any]:
    """``--param NAME=VALUE`` (the value by :func:`~typestrict_pipeline.values.command_value`,
    the rule of a study's ``--grid``) or ``--prompt STEP=TEXT`` (text that may span lines), each
    name a stored text (:func:`~typestrict_pipeline.values.parameter_name`), each name once.

    >>> _pairs(["threshold=0.4", "threshold=0.6"], "param")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected each parameter once in --param, got threshold twice (the second threshold='0.6'). Give threshold once: the value to run with.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(f"--{what} as NAME=VALUE", repr(item), f"write --{what} name=value")
        k, v = item.split("=", 1)
        name = parameter_name(k, f"--{what}")
        if name in out:  # the second replaced the first without a word; the rule of a study's --grid
            raise InputError(f"each {'parameter' if what == 'param' else 'prompt step'} once in --{what}",
                             f"{name} twice (the second {name}={shown(v, 60)})",
                             f"give {name} once: the value to run with")
        out[name] = (command_value(v.strip(), f"--param {name}") if what == "param"
                     else check_text(v, f"--prompt {name}", max_chars=MAX_PROMPT_CHARS, lines=True, empty=True))
    return out


def _data(args: argparse.Namespace, workflow: Workflow) -> tuple[dict[str, PointInTimeTable], str]:
    # Each option read by one source only: --table without --csv, or --dataset with it, was
    # ignored without a word (the run replayed another table than the one named).
    if args.table is not None and not args.csv:
        raise InputError("--table with --csv (it names the --csv file's table)", f"--table {shown(args.table, 60)} "
                         "without --csv", "pass --csv FILE.csv too, or leave --table out to read --dataset")
    if args.csv and args.dataset is not None:
        raise InputError("--dataset or --csv, one of them", f"both (--dataset {shown(args.dataset, 60)})",
                         "leave out --dataset to read the --csv file, or --csv to read the dataset")
    if args.csv:
        table = PointInTimeTable.from_csv(args.csv, args.table or _CSV_TABLE)
        # The columns the workflow reads, checked here to name the file and advise on it (the
        # replay's own check speaks of a registered dataset).
        check_columns(workflow, {table.name: table}, dataset="the --csv file", file=args.csv,
                      fix="correct the cell in the file, or leave it empty when the value is missing, and run "
                          "again")
        return {table.name: table}, args.csv
    dataset = args.dataset or _DATASET
    return dict(load_dataset(dataset)), dataset


_DATASET = "seattle_weather"
"""The dataset read when neither --dataset nor --csv is given."""
_CSV_TABLE = "weather"
"""The table a --csv file is when --table is not given."""


@contextlib.contextmanager
def _models(args: argparse.Namespace, workflow: Workflow) -> Iterator[ModelSetup]:
    if args.model_url:
        if not args.model or args.price_in is None or args.price_out is None:
            raise InputError("--model, --price-in and --price-out with --model-url",
                             "some of them missing",
                             "give the model name and its prices in micro-USD per 1M tokens")
        with endpoint_models(workflow, base_url=args.model_url, model=args.model,
                             api_key_env=args.api_key_env, input_micro_usd_per_mtok=args.price_in,
                             output_micro_usd_per_mtok=args.price_out) as setup:
            yield setup
    else:
        with standin_models(workflow, latency_s=args.standin_latency) as setup:
            yield setup


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", type=WORKSPACE, default="demo", help="workspace id (default: demo)")
    add_store(p)
    p.add_argument("--dataset", help=f"named dataset (default: {_DATASET})")
    p.add_argument("--csv", help="a CSV with event_time and known_time columns instead of --dataset")
    p.add_argument("--table", help=f"table name for --csv (default: {_CSV_TABLE}); only with --csv")
    p.add_argument("--model-url", help="an OpenAI-compatible base URL (default: the local stand-in)")
    p.add_argument("--model", help="model name at --model-url (its price-table entry)")
    p.add_argument("--api-key-env", help="environment variable holding the endpoint's key")
    p.add_argument("--price-in", type=PRICE, help="micro-USD per 1M prompt tokens")
    p.add_argument("--price-out", type=PRICE, help="micro-USD per 1M completion tokens")
    p.add_argument("--standin-latency", type=positive_float("seconds", 60.0), default=0.02,
                   help="seconds each stand-in answer takes (default 0.02)")


def _check_model_url(args: argparse.Namespace) -> None:
    url = args.model_url
    given = [flag for flag, value in (("--model", args.model), ("--price-in", args.price_in),
                                      ("--price-out", args.price_out), ("--api-key-env", args.api_key_env))
             if value is not None]
    if not url and given:  # never ignored in silence: the run would use the stand-in instead
        raise InputError(f"--model-url with {', '.join(given)}", f"{' '.join(given)} without --model-url",
                         "add --model-url URL (an OpenAI-compatible endpoint), or leave "
                         f"{', '.join(given)} out to use the local stand-in")
    if url:
        base_url(url, "--model-url")
    if args.model is not None:  # sent with every call and stored with each: refused before any
        model_name(args.model, "--model")
    if args.api_key_env is not None:  # a key that is not there failed every call of a stored run
        api_key_env(args.api_key_env, "--api-key-env")


def _backtest_run(args: argparse.Namespace) -> int:
    start, end = parse_time(args.start, "start"), parse_time(args.end, "end")
    check_range(start, end)
    _check_model_url(args)
    step_size = parse_step(args.step)
    code_workflow = default_registry().active(args.workflow)  # an unknown workflow: refused before the store opens
    params, prompts = _pairs(args.param, "param"), _pairs(args.prompt, "prompt")  # before the store opens
    code_workflow.resolve_prompts(prompts)  # their steps and fields, before the store opens (or is made)
    data, label = _data(args, code_workflow)
    engine = write_store(args)
    try:
        workflow = active_workflow(engine, args.workflow, workspace=args.workspace)
        with _models(args, workflow) as models, _bar(f"backtest {args.workflow}") as report:
            bid, result = run_and_store_backtest(
                engine, workflow, workspace=args.workspace, data=data, dataset=label,
                start=start, end=end, step=step_size, models=models, params=params,
                prompts=prompts, max_in_flight=args.max_in_flight,
                retries=args.retries, on_step_error=args.on_step_error, on_progress=report,
            )
    finally:
        engine.dispose()
    wrote = Wrote(f"backtest {bid} of {result.workflow.name} @ {result.workflow.version_id} "
                  f"({result.card.steps_run} steps)", (bid,), store=shown_store(store_url(args)))
    c = result.card
    # Only a backtest that ran every planned step exits 0: failed (the engine's rule, which the
    # store, the API and the console show too) and stopped exit 1, cancelled elsewhere 3.
    code = RUN_EXIT_CODES.get(c.status, 1)
    if args.json:
        print_json({"id": bid, "workflow": result.workflow.name, "version_id": result.workflow.version_id,
                    "status": c.status.value, "error": c.stop_reason if code else None,
                    "card": c.to_text(), "wrote": wrote.to_json()})
        return code
    print(c.to_text())
    print(f"  backtest id     {bid}")
    say_wrote(args, wrote)
    if code:
        print(_run_problem(bid, c), file=sys.stderr)
    return code


@contextlib.contextmanager
def _bar(what: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar whose total is learnt from the first report (steps planned)."""
    state: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        def report(done: int, planned: int) -> None:
            if "update" not in state:
                state["update"] = stack.enter_context(progress(planned, what))
            state["update"](done)

        yield report


def _reap(engine: Any, **where: Any) -> None:
    """End the backtests and studies whose process died before showing them (best effort: a
    read-only store is still read)."""
    from sqlalchemy.exc import SQLAlchemyError

    from typestrict_pipeline.lifecycle.reaper import reap

    with contextlib.suppress(SQLAlchemyError):
        reap(engine, **where)


def _backtest_list(args: argparse.Namespace) -> int:
    engine = read_store(args)
    try:
        require_workspace(engine, args.workspace)
        _reap(engine, workspace=args.workspace)
        rows = list_backtests(engine, workspace=args.workspace, workflow=args.workflow)
    finally:
        engine.dispose()
    if args.json:
        print_json([{
            "id": b.id, "workflow": b.workflow, "version_id": b.version_id, "mode": b.mode.value,
            "status": b.status.value, "steps_run": b.steps_run, "steps_planned": b.steps_planned,
            "mean_score": b.mean_score, "cost_micro_usd": b.cost_micro_usd,
        } for b in rows])
        return 0
    if not rows:
        print(f"workspace {args.workspace} has no backtests"
              + (f" of workflow {args.workflow}" if args.workflow else ""))
        return 0
    print_table(f"Backtests of workspace {args.workspace}, newest first",
                ["id", "workflow", "version", "mode", "status", "steps", "mean score", "cost"],
                [[b.id, b.workflow, b.version_id, b.mode.value, b.status.value,
                  f"{b.steps_run}/{b.steps_planned}",
                  "n/a" if b.mean_score is None else f"{b.mean_score:.4f}", format_usd(b.cost_micro_usd)]
                 for b in rows], right=["steps", "mean score", "cost"])
    return 0


def _backtest_show(args: argparse.Namespace) -> int:
    engine = read_store(args)
    try:
        load_backtest(engine, args.id)  # an unknown id is refused before anything else
        _reap(engine)
        b = load_backtest(engine, args.id)
    finally:
        engine.dispose()
    if args.json:
        print_json({
            "id": b.id, "workflow": b.workflow, "version_id": b.version_id, "mode": b.mode.value,
            "status": b.status.value, "steps_run": b.steps_run, "steps_planned": b.steps_planned,
            "mean_score": b.mean_score, "cost_micro_usd": b.cost_micro_usd, "error": b.error,
            "card": None if b.card is None else b.card.to_text(),
        })
        return 0
    if b.card is not None:
        print(b.card.to_text())
    print(f"  backtest id     {b.id} ({b.status.value}, {b.mode.value})")
    if b.error:
        print(f"  error           {b.error}")
    return 0


def _backtest_cancel(args: argparse.Namespace) -> int:
    from typestrict_pipeline.lifecycle.reaper import cancel_backtest

    engine = write_store(args)
    try:
        _reap(engine)
        ended = cancel_backtest(engine, args.id)
    finally:
        engine.dispose()
    wrote = Wrote(f"the cancellation of backtest {ended.object_id}", (ended.object_id,),
                  store=shown_store(store_url(args)))
    if args.json:
        print_json({"backtest_id": ended.object_id, "state": ended.state, "why": ended.why,
                    "wrote": wrote.to_json()})
    else:
        print(f"backtest {ended.object_id}: {ended.state} ({ended.why}); what ran stays stored")
        say_wrote(args, wrote)
    return 0


def _active_ids(args: argparse.Namespace, names: list[str]) -> dict[str, str]:
    """Each workflow's active version in ``--workspace`` of ``--store``: the store's activation
    (``backtest activate``, a study's "Promote winner") when the store exists, else the code's."""
    from typestrict_pipeline.backtest.store import active_version_id
    from typestrict_pipeline.cli.common import sqlite_path, store_url

    reg = default_registry()
    active = {name: reg.active(name).version_id for name in names}
    path = sqlite_path(store_url(args))
    if path is not None and not path.exists():
        return active
    engine = read_store(args)
    try:
        for name in names:
            stored = active_version_id(engine, workspace=args.workspace, workflow=name)
            if stored is not None:
                active[name] = stored
    finally:
        engine.dispose()
    return active


def _workflows(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.engine import format_step
    from typestrict_pipeline.backtest.workflow import columns_read, columns_text

    reg = default_registry()
    names = list(reg.names())
    active = _active_ids(args, names)
    rows: list[dict[str, Any]] = []
    for name in names:
        for wf in reg.versions(name):
            rows.append({"workflow": name, "version_id": wf.version_id,
                         "active": wf.version_id == active[name], "tables": list(wf.tables),
                         "columns": columns_read(wf), "horizon": format_step(wf.horizon),
                         "params": wf.default_params, "scored_by": wf.outcome_description})
    if args.json:
        print_json(rows)
        return 0
    print_table("Registered workflows", ["workflow", "version", "active", "tables", "horizon", "params",
                                         "scored by"],
                [[r["workflow"], r["version_id"], "active" if r["active"] else "", ",".join(r["tables"]),
                  r["horizon"], json.dumps(r["params"]), r["scored_by"]] for r in rows])
    print("\ncolumns: what a dataset for each must have, per table, each with its kind (`data register` "
          "and `backtest run` refuse data without them)")
    for r in rows:
        print(f"  {r['workflow']} @ {r['version_id']}   {columns_text(r['columns'])}")
    return 0


def _leakcheck(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.leaks import check_leaks

    wf = default_registry().active(args.workflow)
    if wf.fixture is None:
        raise InputError("a workflow with a leak-check fixture", f"{args.workflow!r} without one",
                         "add a fixture to the workflow's registration")
    if args.version is not None:
        wf = default_registry().get(args.workflow, args.version)
    elif not _store_missing(args):
        engine = read_store(args)
        try:
            wf = active_workflow(engine, args.workflow, workspace=args.workspace)
        finally:
            engine.dispose()
    if wf.fixture is None:
        raise InputError("a workflow version with a leak-check fixture", f"{wf.version_id!r} without one",
                         "add a fixture to the workflow's registration")
    with wf.fixture() as fixture:
        report = check_leaks(wf, fixture)
    if args.json:
        print_json({"workflow": wf.name, "version_id": wf.version_id, "ok": report.ok,
                    "summary": report.summary()})
    else:
        print(report.summary())
    return 0 if report.ok else 1


def _store_missing(args: argparse.Namespace) -> bool:
    """No store at ``--store`` (a SQLite file that does not exist): read nothing, create nothing."""
    from typestrict_pipeline.cli.common import sqlite_path, store_url

    path = sqlite_path(store_url(args))
    return path is not None and not path.exists()


def _activate(args: argparse.Namespace) -> int:
    params, prompts = _pairs(args.param, "param"), _pairs(args.prompt, "prompt")  # before the store opens
    # the version and its overrides (steps, fields, values) checked before the store opens (or is made)
    wf = default_registry().get(args.workflow, args.version).variant(params=params, prompts=prompts)
    engine = write_store(args)
    try:
        activate_version(engine, workspace=args.workspace, workflow=wf)
    finally:
        engine.dispose()
    wrote = Wrote(f"version {wf.version_id} of {wf.name} as the active one in workspace {args.workspace}",
                  (wf.version_id,), store=shown_store(store_url(args)))
    if args.json:
        print_json({"workflow": wf.name, "version_id": wf.version_id, "workspace": args.workspace,
                    "params": wf.default_params, "wrote": wrote.to_json()})
        return 0
    print(f"{wf.name}: version {wf.version_id} is now active in workspace {args.workspace}")
    say_wrote(args, wrote)
    return 0


def _stale_warning(data: dict[str, PointInTimeTable], as_of: dt.datetime, label: str) -> str | None:
    """The warning printed when a live decision's "as of" is past the end of its data."""
    last = max(t.last_known for t in data.values())
    if as_of - last <= STALE_AFTER:
        return None
    return (f"warning: deciding as of {format_time(as_of)}, but the data ({label}) end at "
            f"{format_time(last)}, {(as_of - last).days:,} days earlier: this decision sees nothing "
            "newer. Pass --as-of within the data, or load newer data (--csv).")


def as_of_time(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """``--as-of``: an ISO 8601 day or time; anything else is refused with what to write.

    >>> as_of_time("2015-12-31").isoformat()
    '2015-12-31T00:00:00+00:00'
    >>> as_of_time("yesterday", dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --as-of as an ISO 8601 date or time from 1900-01-01 to 2199-12-31 (2015-01-01, 2015-01-01T00:00Z), got 'yesterday'. Write the day or time to decide as of, in UTC: --as-of 2026-11-30 for yesterday, or --as-of 2026-11-30T18:00Z; leave --as-of out to decide as of now.
    """
    from typestrict_pipeline.values import timestamp

    day_before = ((now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=1)).date().isoformat()
    return timestamp(text, "--as-of", fix=(
        f"write the day or time to decide as of, in UTC: --as-of {day_before} for yesterday, or "
        f"--as-of {day_before}T18:00Z; leave --as-of out to decide as of now"))


def _live(args: argparse.Namespace) -> int:
    as_of = as_of_time(args.as_of) if args.as_of else dt.datetime.now(dt.UTC)
    _check_model_url(args)
    code_workflow = default_registry().active(args.workflow)  # an unknown workflow: refused before the store opens
    data, label = _data(args, code_workflow)
    warning = _stale_warning(data, as_of, label)
    if warning:
        print(warning, file=sys.stderr)
    engine = write_store(args)
    try:
        workflow = active_workflow(engine, args.workflow, workspace=args.workspace)
        with _models(args, workflow) as models:
            lid, live = run_and_store_live(
                engine, workflow, workspace=args.workspace, data=data, models=models, as_of=as_of,
            )
    finally:
        engine.dispose()
    wrote = Wrote(f"live decision {lid} of {live.workflow} @ {live.version_id}", (lid,),
                  store=shown_store(store_url(args)))
    if args.json:
        print_json({"id": lid, "workflow": live.workflow, "version_id": live.version_id,
                    "mode": live.mode.value, "as_of": live.as_of, "status": live.status.value,
                    "error": live.error, "decision": live.decision, "cost_micro_usd": live.cost_micro_usd,
                    "calls": len(live.calls), "stale_data": warning is not None, "wrote": wrote.to_json()})
        return 0 if live.error is None else 1
    print(f"Live decision: {live.workflow} @ {live.version_id}   [{live.mode.value}]")
    print(f"  as of           {format_time(live.as_of)}")
    print(f"  status          {live.status.value}" + (f" ({live.error})" if live.error else ""))
    print(f"  decision        {json.dumps(live.decision, default=str)}")
    print(f"  cost            {format_usd(live.cost_micro_usd)} ({len(live.calls)} calls)")
    print(f"  id              {lid}")
    say_wrote(args, wrote)
    return 0 if live.error is None else 1


def _usage(args: argparse.Namespace) -> int:
    from typestrict_pipeline.study.limits import format_usd as dash_usd
    from typestrict_pipeline.study.tables import state_text
    from typestrict_pipeline.usage import workspace_usage

    if args.since and args.until:
        check_range(args.since, args.until, what="period (--since, --until)")
    engine = read_store(args)
    try:
        require_workspace(engine, args.workspace)
        u = workspace_usage(engine, args.workspace, since=args.since, until=args.until)
    finally:
        engine.dispose()
    if args.json:
        print_json(_usage_json(u))
        return 0
    print(f"Usage of workspace {args.workspace} (UTC days; HISTORICAL = backtests and studies, "
          "LIVE = live runs)")
    usd = format_usd
    print_table("By day", ["day", "backtests", "studies", "HISTORICAL", "LIVE", "calls"],
                [[d.day, usd(d.backtests_micro), usd(d.studies_micro), usd(d.historical_micro),
                  usd(d.live_micro), d.calls] for d in u.by_day()],
                right=["backtests", "studies", "HISTORICAL", "LIVE", "calls"])
    by_wf = u.by_workflow()
    tokens = {w: (sum(r.input_tokens for r in u.calls if r.workflow == w),
                  sum(r.output_tokens for r in u.calls if r.workflow == w)) for w in by_wf}
    print_table("By workflow", ["workflow", "backtests", "studies", "LIVE", "tokens in", "tokens out"],
                [[w, usd(d.backtests_micro), usd(d.studies_micro), usd(d.live_micro), *tokens[w]]
                 for w, d in by_wf.items()],
                right=["backtests", "studies", "LIVE", "tokens in", "tokens out"])
    if u.studies:
        print_table("Studies", ["study", "name", "workflow", "created", "state", "spend", "budget"],
                    [[s.study_id, s.name or "", s.workflow, s.day, state_text(s.state),
                      "not tracked" if s.spend_micro is None else usd(s.spend_micro), dash_usd(s.budget_micro)]
                     for s in u.studies], right=["study", "spend", "budget"])
    t = u.totals()
    print(f"Total: HISTORICAL {usd(t.historical_micro)}, LIVE {usd(t.live_micro)} (HISTORICAL: backtests "
          f"{usd(t.backtests_micro)}, studies {usd(t.studies_micro)})")
    return 0


def _usage_json(u: Any) -> dict[str, Any]:
    t = u.totals()
    return {
        "workspace": u.workspace,
        "by_day": [d.__dict__ for d in u.by_day()],
        "by_workflow": {w: {k: v for k, v in d.__dict__.items() if k != "day"}
                        for w, d in u.by_workflow().items()},
        "studies": [s.__dict__ for s in u.studies],
        "total": {"backtests_micro": t.backtests_micro, "studies_micro": t.studies_micro,
                  "historical_micro": t.historical_micro, "live_micro": t.live_micro, "calls": t.calls},
    }


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``backtest``, ``run`` and ``usage``."""
    bt = subparsers.add_parser("backtest", help="HISTORICAL backtests of a workflow")
    sub = bt.add_subparsers(dest="backtest_command", required=True)

    p = writes(sub.add_parser("run", help="replay a workflow over history and print its run card"))
    p.add_argument("workflow", type=WORKFLOW, help="the workflow, e.g. seattle_rain (see `backtest workflows`)")
    p.add_argument("--start", required=True, help="first decision time (ISO 8601; a date is 00:00 UTC)")
    p.add_argument("--end", required=True, help="last decision time")
    p.add_argument("--step", type=step, default="1d", help="step size: 1d, 12h, 30m, 1w (default 1d)")
    p.add_argument("--param", action="append", help="parameter override NAME=VALUE (repeatable)")
    p.add_argument("--prompt", action="append", help="prompt override STEP=TEXT (repeatable)")
    p.add_argument("--max-in-flight", type=bounded_int("calls in flight", 1, 256), default=8,
                   help="model calls in flight, 1 to 256 (default 8)")
    p.add_argument("--retries", type=bounded_int("retries", 0, 10), default=0,
                   help="extra attempts per model call, 0 to 10 (default 0)")
    p.add_argument("--on-step-error", choices=("continue", "stop"), default="continue",
                   help="what a failed step does to the run (default continue)")
    _add_common(p)
    add_json(p)
    p.set_defaults(func=_backtest_run)

    p = sub.add_parser("list", help="a workspace's backtests, newest first")
    p.add_argument("--workspace", type=WORKSPACE, default="demo", help="workspace id (default: demo)")
    p.add_argument("--workflow", type=WORKFLOW, help="only this workflow's backtests")
    add_json(add_store(p))
    p.set_defaults(func=_backtest_list)

    p = sub.add_parser("show", help="a stored backtest's run card")
    p.add_argument("id", type=identifier("a backtest id"), help="the backtest id (see `backtest list`)")
    add_json(add_store(p))
    p.set_defaults(func=_backtest_show)

    p = writes(sub.add_parser("cancel", help="cancel a backtest that has not ended (what ran stays stored)"))
    p.add_argument("id", type=identifier("a backtest id"), help="the backtest id (see `backtest list`)")
    add_json(add_store(p))
    p.set_defaults(func=_backtest_cancel)

    p = sub.add_parser("workflows", help="the registered workflows and their versions (active: in --workspace)")
    p.add_argument("--workspace", type=WORKSPACE, default="demo", help="workspace id (default: demo)")
    add_json(add_store(p))
    p.set_defaults(func=_workflows)

    p = sub.add_parser("leakcheck", help="truncation-invariance and future-poisoning tests")
    p.add_argument("workflow", type=WORKFLOW, help="the workflow to check")
    p.add_argument("--version", help="a registered version id (default: the one active in --workspace)")
    p.add_argument("--workspace", type=WORKSPACE, default="demo", help="workspace id (default: demo)")
    add_json(add_store(p))
    p.set_defaults(func=_leakcheck)

    p = writes(sub.add_parser("activate", help="make a version (with parameter/prompt overrides) the live one"))
    p.add_argument("workflow", type=WORKFLOW, help="the workflow")
    p.add_argument("--version", help="a registered version id (default: the code's active one)")
    p.add_argument("--param", action="append", help="parameter override NAME=VALUE (repeatable)")
    p.add_argument("--prompt", action="append", help="prompt override STEP=TEXT (repeatable)")
    p.add_argument("--workspace", type=WORKSPACE, default="demo", help="workspace id (default: demo)")
    add_json(add_store(p))
    p.set_defaults(func=_activate)

    p = writes(subparsers.add_parser("run", help="one LIVE decision of a workflow, with everything known now"))
    p.add_argument("workflow", type=WORKFLOW, help="the workflow, e.g. seattle_rain")
    p.add_argument("--as-of", help="decide as of this time instead of now (ISO 8601)")
    add_json(p)
    _add_common(p)
    p.set_defaults(func=_live)

    p = subparsers.add_parser("usage", help="a workspace's spend (backtests, studies, live runs) by day and workflow")
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id, e.g. demo")
    p.add_argument("--since", type=day, help="first day, YYYY-MM-DD (UTC)")
    p.add_argument("--until", type=day, help="last day, YYYY-MM-DD (UTC), included")
    add_json(add_store(p))
    p.set_defaults(func=_usage)
