"""``typestrict backtest ...``, ``typestrict run WORKFLOW`` (live) and ``typestrict usage WORKSPACE``.

* ``typestrict backtest run WORKFLOW --start 2015-01-01 --end 2015-12-31 --step 1d``: a
  HISTORICAL backtest of the workflow's active version; prints the run card, stores everything.
* ``typestrict backtest list|show ID|workflows|leakcheck WORKFLOW|activate WORKFLOW``.
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
from collections.abc import Iterator
from typing import Any

from typestrict_pipeline.backtest.engine import parse_step
from typestrict_pipeline.backtest.metering import RunMode, format_usd
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
    usage,
)
from typestrict_pipeline.backtest.workflow import Workflow
from typestrict_pipeline.backtest.workflows import default_registry, load_dataset
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import default_store_url, open_store


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items: list[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(f"{what} as NAME=VALUE", repr(item), f"write --{what} name=value")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v) if what == "param" else v
    return out


def _data(args: argparse.Namespace) -> tuple[dict[str, PointInTimeTable], str]:
    if args.csv:
        table = PointInTimeTable.from_csv(args.csv, args.table)
        return {table.name: table}, args.csv
    return dict(load_dataset(args.dataset)), args.dataset


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
    p.add_argument("--workspace", default="demo", help="workspace id (default: demo)")
    p.add_argument("--store-url", help="store URL (default: TYPESTRICT_STORE_URL or the local SQLite file)")
    p.add_argument("--dataset", default="seattle_weather", help="named dataset (default: seattle_weather)")
    p.add_argument("--csv", help="a CSV with event_time and known_time columns instead of --dataset")
    p.add_argument("--table", default="weather", help="table name for --csv (default: weather)")
    p.add_argument("--model-url", help="an OpenAI-compatible base URL (default: the local stand-in)")
    p.add_argument("--model", help="model name at --model-url (its price-table entry)")
    p.add_argument("--api-key-env", help="environment variable holding the endpoint's key")
    p.add_argument("--price-in", type=int, help="micro-USD per 1M prompt tokens")
    p.add_argument("--price-out", type=int, help="micro-USD per 1M completion tokens")
    p.add_argument("--standin-latency", type=float, default=0.02,
                   help="seconds each stand-in answer takes (default 0.02)")


def _engine(args: argparse.Namespace) -> Any:
    return open_store(args.store_url or default_store_url())


def _backtest_run(args: argparse.Namespace) -> int:
    data, label = _data(args)
    engine = _engine(args)
    try:
        workflow = active_workflow(engine, args.workflow, workspace=args.workspace)
        with _models(args, workflow) as models:
            bid, result = run_and_store_backtest(
                engine, workflow, workspace=args.workspace, data=data, dataset=label,
                start=parse_time(args.start, "start"), end=parse_time(args.end, "end"),
                step=parse_step(args.step), models=models, params=_pairs(args.param, "param"),
                prompts=_pairs(args.prompt, "prompt"), max_in_flight=args.max_in_flight,
                retries=args.retries, on_step_error=args.on_step_error,
            )
    finally:
        engine.dispose()
    print(result.card.to_text())
    print(f"  backtest id     {bid}")
    return 0


def _backtest_list(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        rows = list_backtests(engine, workspace=args.workspace, workflow=args.workflow)
    finally:
        engine.dispose()
    print(f"{'id':32}  {'workflow':16} {'version':18} {'mode':10} {'status':9} {'steps':>9} "
          f"{'mean':>7} {'cost':>11}")
    for b in rows:
        mean = "n/a" if b.mean_score is None else f"{b.mean_score:.4f}"
        print(f"{b.id:32}  {b.workflow:16} {b.version_id:18} {b.mode.value:10} {b.status.value:9} "
              f"{b.steps_run:>4}/{b.steps_planned:<4} {mean:>7} {format_usd(b.cost_micro_usd):>11}")
    return 0


def _backtest_show(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        b = load_backtest(engine, args.id)
    finally:
        engine.dispose()
    if b.card is not None:
        print(b.card.to_text())
    print(f"  backtest id     {b.id} ({b.status.value}, {b.mode.value})")
    if b.error:
        print(f"  error           {b.error}")
    return 0


def _workflows(args: argparse.Namespace) -> int:
    reg = default_registry()
    for name in reg.names():
        active = reg.active(name)
        for wf in reg.versions(name):
            mark = "active" if wf.version_id == active.version_id else ""
            print(f"{name:16} {wf.version_id:18} {mark:7} tables={','.join(wf.tables)} "
                  f"horizon={wf.horizon} params={json.dumps(wf.default_params)}")
            print(f"{'':16} scored by: {wf.outcome_description}")
    return 0


def _leakcheck(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.leaks import check_leaks

    wf = default_registry().active(args.workflow)
    assert wf.fixture is not None
    with wf.fixture() as fixture:
        report = check_leaks(wf, fixture)
    print(report.summary())
    return 0 if report.ok else 1


def _activate(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        base = default_registry().get(args.workflow, args.version)
        wf = base.variant(params=_pairs(args.param, "param"), prompts=_pairs(args.prompt, "prompt"))
        activate_version(engine, workspace=args.workspace, workflow=wf)
    finally:
        engine.dispose()
    print(f"{wf.name}: version {wf.version_id} is now active in workspace {args.workspace}")
    return 0


def _live(args: argparse.Namespace) -> int:
    data, _label = _data(args)
    engine = _engine(args)
    try:
        workflow = active_workflow(engine, args.workflow, workspace=args.workspace)
        with _models(args, workflow) as models:
            lid, live = run_and_store_live(
                engine, workflow, workspace=args.workspace, data=data, models=models,
                as_of=parse_time(args.as_of, "as_of") if args.as_of else None,
            )
    finally:
        engine.dispose()
    print(f"Live decision: {live.workflow} @ {live.version_id}   [{live.mode.value}]")
    print(f"  as of           {format_time(live.as_of)}")
    print(f"  status          {live.status.value}" + (f" ({live.error})" if live.error else ""))
    print(f"  decision        {json.dumps(live.decision, default=str)}")
    print(f"  cost            {format_usd(live.cost_micro_usd)} ({len(live.calls)} calls)")
    print(f"  id              {lid}")
    return 0 if live.error is None else 1


def _usage(args: argparse.Namespace) -> int:
    engine = open_store(args.store_url or default_store_url())
    try:
        rows = usage(engine, workspace=args.workspace,
                     since=dt.date.fromisoformat(args.since) if args.since else None,
                     until=dt.date.fromisoformat(args.until) if args.until else None)
    finally:
        engine.dispose()
    print(f"Usage of workspace {args.workspace} (UTC days; HISTORICAL = backtests, LIVE = live runs)")
    print("\nBy day")
    print(f"  {'day':10}  {'HISTORICAL':>12}  {'LIVE':>12}  {'calls':>7}")
    days = sorted({r.day for r in rows})
    for d in days:
        h = sum(r.cost_micro_usd for r in rows if r.day == d and r.mode is RunMode.HISTORICAL)
        li = sum(r.cost_micro_usd for r in rows if r.day == d and r.mode is RunMode.LIVE)
        n = sum(r.calls for r in rows if r.day == d)
        print(f"  {d:10}  {format_usd(h):>12}  {format_usd(li):>12}  {n:>7}")
    print("\nBy workflow")
    print(f"  {'workflow':16}  {'HISTORICAL':>12}  {'LIVE':>12}  {'tokens in':>10}  {'tokens out':>10}")
    for w in sorted({r.workflow for r in rows}):
        h = sum(r.cost_micro_usd for r in rows if r.workflow == w and r.mode is RunMode.HISTORICAL)
        li = sum(r.cost_micro_usd for r in rows if r.workflow == w and r.mode is RunMode.LIVE)
        ti = sum(r.input_tokens for r in rows if r.workflow == w)
        to = sum(r.output_tokens for r in rows if r.workflow == w)
        print(f"  {w:16}  {format_usd(h):>12}  {format_usd(li):>12}  {ti:>10}  {to:>10}")
    th = sum(r.cost_micro_usd for r in rows if r.mode is RunMode.HISTORICAL)
    tl = sum(r.cost_micro_usd for r in rows if r.mode is RunMode.LIVE)
    print(f"\nTotal: HISTORICAL {format_usd(th)}, LIVE {format_usd(tl)}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``backtest``, ``run`` and ``usage``."""
    bt = subparsers.add_parser("backtest", help="HISTORICAL backtests of a workflow")
    sub = bt.add_subparsers(dest="backtest_command", required=True)

    p = sub.add_parser("run", help="replay a workflow over history and print its run card")
    p.add_argument("workflow")
    p.add_argument("--start", required=True, help="first decision time (ISO 8601; a date is 00:00 UTC)")
    p.add_argument("--end", required=True, help="last decision time")
    p.add_argument("--step", default="1d", help="step size: 1d, 12h, 30m, 1w (default 1d)")
    p.add_argument("--param", action="append", help="parameter override NAME=VALUE (repeatable)")
    p.add_argument("--prompt", action="append", help="prompt override STEP=TEXT (repeatable)")
    p.add_argument("--max-in-flight", type=int, default=8, help="model calls in flight (default 8)")
    p.add_argument("--retries", type=int, default=0, help="extra attempts per model call")
    p.add_argument("--on-step-error", choices=("continue", "stop"), default="continue")
    _add_common(p)
    p.set_defaults(func=_backtest_run)

    p = sub.add_parser("list", help="a workspace's backtests, newest first")
    p.add_argument("--workspace", default="demo")
    p.add_argument("--workflow")
    p.add_argument("--store-url")
    p.set_defaults(func=_backtest_list)

    p = sub.add_parser("show", help="a stored backtest's run card")
    p.add_argument("id")
    p.add_argument("--store-url")
    p.set_defaults(func=_backtest_show)

    p = sub.add_parser("workflows", help="the registered workflows and their versions")
    p.set_defaults(func=_workflows)

    p = sub.add_parser("leakcheck", help="truncation-invariance and future-poisoning tests")
    p.add_argument("workflow")
    p.set_defaults(func=_leakcheck)

    p = sub.add_parser("activate", help="make a version (with parameter/prompt overrides) the live one")
    p.add_argument("workflow")
    p.add_argument("--version", help="a registered version id (default: the code's active one)")
    p.add_argument("--param", action="append")
    p.add_argument("--prompt", action="append")
    p.add_argument("--workspace", default="demo")
    p.add_argument("--store-url")
    p.set_defaults(func=_activate)

    p = subparsers.add_parser("run", help="one LIVE decision of a workflow, with everything known now")
    p.add_argument("workflow")
    p.add_argument("--as-of", help="decide as of this time instead of now (ISO 8601)")
    _add_common(p)
    p.set_defaults(func=_live)

    p = subparsers.add_parser("usage", help="a workspace's spend by day and workflow, historical and live apart")
    p.add_argument("workspace")
    p.add_argument("--since", help="first day, YYYY-MM-DD")
    p.add_argument("--until", help="last day, YYYY-MM-DD")
    p.add_argument("--store-url")
    p.set_defaults(func=_usage)
