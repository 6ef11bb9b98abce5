"""``typestrict data ...``: register a point-in-time dataset for a workflow, add rows, show it.

Commands (the core functions are in :mod:`typestrict_pipeline.backtest.workflows.datasets`):

* ``register NAME --workflow WORKFLOW --table TABLE=FILE.csv``: a dataset of one CSV per table
  the workflow reads (``event_time``, ``known_time`` in ISO 8601 with a UTC offset, then the
  value columns); studies and backtests then name it as their dataset;
* ``append NAME FILE.csv [--table TABLE]``: add rows that became known after the table's last
  knowledge time (rows already known are never rewritten), then say, for each enabled schedule
  of the store (``--store``) that replays the dataset, when it reads them (its next evaluation)
  and what it will then decide;
* ``show [NAME]``: every registered dataset (or one): its tables, rows, knowledge times, and up
  to which decision step outcomes are known.

Datasets live under ``TYPESTRICT_DATASETS_DIR`` (default ``${TYPESTRICT_HOME}/datasets``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from typestrict_pipeline.cli.common import (
    Wrote,
    add_json,
    add_store,
    print_json,
    read_store,
    say_wrote,
    sqlite_path,
    store_url,
    writes,
)
from typestrict_pipeline.errors import InputError

if TYPE_CHECKING:
    from typestrict_pipeline.reruns.service import ScheduleView
    from typestrict_pipeline.reruns.timeline import Timeline

_MAX_TABLES = 64


def _tables(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs[:_MAX_TABLES + 1]:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise InputError("--table TABLE=FILE.csv", repr(pair), "write the table's name, '=', then the file")
        if name in out:
            raise InputError("each table once", f"table {name!r} twice", "pass one file per table")
        out[name] = path
    if len(out) > _MAX_TABLES:
        raise InputError(f"at most {_MAX_TABLES} tables", f"{len(pairs)}", "pass the tables the workflow reads")
    return out


def _show_one(name: str) -> str:
    from typestrict_pipeline.backtest.pit import format_time
    from typestrict_pipeline.backtest.workflows import default_registry
    from typestrict_pipeline.backtest.workflows.datasets import dataset_info
    from typestrict_pipeline.errors import listed

    info = dataset_info(name)
    lines = [f"Dataset {info.name}: workflow {info.workflow}, registered {format_time(info.registered_at)}"]
    for t in info.tables:
        lines.append(f"  {t.name}: {t.rows} rows ({t.file}), known {format_time(t.first_known)} .. "
                     f"{format_time(t.last_known)}; columns {listed(t.columns, plain=True)}")
    try:
        horizon = default_registry().get(info.workflow).horizon
    except LookupError:
        lines.append(f"  workflow {info.workflow} is not registered in this code location")
    else:
        span = (f"{horizon.days} day(s)" if horizon % dt.timedelta(days=1) == dt.timedelta(0)
                else f"{int(horizon.total_seconds())} s")
        lines.append(f"  outcomes are known for decisions up to {format_time(info.last_known - horizon)} "
                     f"(last knowledge time − the workflow's horizon, {span})")
    return "\n".join(lines)


def _register(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.workflows.datasets import register_dataset

    info = register_dataset(args.name, args.workflow, _tables(args.table))
    wrote = Wrote(f"dataset {info.name} ({len(info.tables)} table(s), {sum(t.rows for t in info.tables)} rows)",
                  (info.name,), files=tuple(str(t.file) for t in info.tables))
    if args.json:
        print_json({**dataclasses.asdict(info), "wrote": wrote.to_json()})
        return 0
    print(_show_one(info.name))
    print(f"Use it as a study's or backtest's dataset ({info.name}); add rows with: "
          f"typestrict data append {info.name} FILE.csv --table {info.tables[0].name}")
    say_wrote(args, wrote)
    return 0


def _append(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.pit import format_time
    from typestrict_pipeline.backtest.workflows.datasets import append_rows, dataset_info

    table = args.table
    if table is None:
        tables = [t.name for t in dataset_info(args.name).tables]
        if len(tables) != 1:
            raise InputError("--table TABLE for a dataset of several tables", f"tables {tables}", "name the table")
        table = tables[0]
    r = append_rows(args.name, table, args.file)
    written = next(str(t.file) for t in dataset_info(r.dataset).tables if t.name == r.table)
    rows = f"{r.added} row{'' if r.added == 1 else 's'}"  # "1 row added", never "1 rows"
    wrote = Wrote(f"{r.added} new row{'' if r.added == 1 else 's'} of {r.dataset}/{r.table}", (f"{r.dataset}/{r.table}",),
                  files=(written,))
    readers = _readers(args, r.dataset)
    if args.json:
        print_json({**dataclasses.asdict(r), "schedules": [
            {"schedule_id": v.id, "study_id": v.root_study_id, **tl.to_json()} for v, tl in readers],
            "wrote": wrote.to_json()})
        return 0
    print(f"{r.dataset}/{r.table}: {rows} added ({r.rows} in all); known up to "
          f"{format_time(r.last_known_after)} (was {format_time(r.last_known_before)}).")
    from typestrict_pipeline.reruns.service import reading_text

    if not readers:
        print(f"No enabled schedule reads {r.dataset}: schedule a finished study on it with "
              "typestrict schedule enable STUDY_ID --cadence 1h --owner EMAIL")
    for view, timeline in readers:
        print("  " + reading_text(view, timeline))
    say_wrote(args, wrote)
    return 0


def _readers(args: argparse.Namespace, dataset: str) -> list[tuple[ScheduleView, Timeline]]:
    """The enabled schedules of the store that replay ``dataset`` (none when there is no store)."""
    from typestrict_pipeline.reruns.service import schedules_reading
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.reruns.workspace import store_spend_source

    path = sqlite_path(store_url(args))
    if path is not None and not path.exists():
        return []
    engine = read_store(args)
    return schedules_reading(engine, StoreStudies(engine), dataset, spend=store_spend_source(engine))


def _show(args: argparse.Namespace) -> int:
    from typestrict_pipeline.backtest.workflows.datasets import (
        dataset_info,
        datasets_dir,
        list_datasets,
    )

    if args.json:
        infos = [dataset_info(args.name)] if args.name is not None else list_datasets()
        print_json([dataclasses.asdict(i) for i in infos])
        return 0
    if args.name is not None:
        print(_show_one(args.name))
        return 0
    found = list_datasets()
    if not found:
        print(f"No registered datasets in {datasets_dir()}. Register one with: "
              "typestrict data register NAME --workflow WORKFLOW --table TABLE=FILE.csv")
        return 0
    print("\n".join(_show_one(d.name) for d in found))
    return 0


def _common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--store`` (the store whose schedules ``append`` reports on; datasets are files under
    ``TYPESTRICT_DATASETS_DIR``) and ``--json``."""
    return add_json(add_store(p))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``typestrict data register|append|show``."""
    data = subparsers.add_parser("data", help="register point-in-time datasets for workflows and add rows")
    sub = data.add_subparsers(dest="data_command", required=True)

    p = writes(_common(sub.add_parser("register", help="register a dataset for a workflow (one CSV per table it reads)")))
    p.add_argument("name", help="the dataset's name (lowercase letters, digits, _)")
    p.add_argument("--workflow", required=True, help="the registered workflow that reads it")
    p.add_argument("--table", action="append", required=True, metavar="TABLE=FILE.csv",
                   help="a table and its CSV (event_time, known_time with a UTC offset, value columns)")
    p.set_defaults(func=_register)

    p = writes(_common(sub.add_parser("append", help="add rows known after the table's last knowledge time, and "
                                                 "say when each schedule on the dataset reads them")))
    p.add_argument("name", help="a registered dataset")
    p.add_argument("file", help="CSV with the table's columns")
    p.add_argument("--table", help="which table (default: the only one)")
    p.set_defaults(func=_append)

    p = _common(sub.add_parser("show", help="registered datasets: tables, rows, knowledge times"))
    p.add_argument("name", nargs="?", help="one dataset (default: every registered one)")
    p.set_defaults(func=_show)
