"""``typestrict COMMAND`` imports only the area that adds COMMAND (``cli.COMMANDS``).

Every command used to import every area's module (FastAPI, the studies, the backtests, pyarrow)
before it parsed its first word: ``typestrict credits balance demo`` spent nearly all of its time
building the parser (cProfile: 2.1–2.4 s of 2.3–2.6 s in ``main``, on a loaded 2-core machine). These tests keep the table of commands true to what the modules register, the parser a
command gets identical to the full one, and what a command line naming no command prints as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from typestrict_pipeline.cli import COMMANDS, areas_for, build_parser, main
from typestrict_pipeline.cli.parser import parse

AREAS = {area for areas in COMMANDS.values() for area in areas}


def _tree(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub-)parser under ``parser``, by the words that name it."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _tree(sub, (*words, name))


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    return {words[0] for words, _ in _tree(parser) if len(words) == 1}


def test_the_table_names_every_command_the_areas_register_and_no_other() -> None:
    assert _commands(build_parser()) == set(COMMANDS)
    assert all(areas == tuple(a for a in areas_for([]) if a in areas) for areas in COMMANDS.values()), (
        "expected each command's areas in the order of the help (cli._AREAS), got another order")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_gets_the_same_parser_as_from_the_full_one(command: str) -> None:
    """Every help under ``COMMAND`` (``COMMAND --help``, ``COMMAND SUB --help`` ...) is the full
    parser's, and the parser holds exactly the commands of the areas it imported."""
    full = {words: p for words, p in _tree(build_parser()) if words[:1] == (command,)}
    lazy = {words: p for words, p in _tree(build_parser([command])) if words[:1] == (command,)}
    assert sorted(lazy) == sorted(full)
    for words, parser in full.items():
        assert lazy[words].format_help() == parser.format_help(), words
    areas = set(COMMANDS[command])
    assert _commands(build_parser([command])) == {c for c, a in COMMANDS.items() if set(a) <= areas}


_PROBE = """
import contextlib, io, json, sys
from typestrict_pipeline.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(), "modules": sorted(sys.modules)}))
"""


def _probe(argv: Sequence[str]) -> tuple[int, str, set[str], set[str]]:
    """Run ``typestrict ARGV`` in a fresh interpreter: its exit code, what it printed, the areas
    whose modules it imported, and every module it imported."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True)
    got = json.loads(proc.stdout)
    modules = set(got["modules"])
    areas = {a for a in AREAS if f"typestrict_pipeline.cli.{a}" in modules}
    return got["code"], got["out"] + got["err"], areas, modules


@pytest.mark.parametrize(("argv", "areas", "absent"), [
    (["credits", "--help"], {"credits"}, {"fastapi", "pyarrow", "typestrict_pipeline.api", "dagster"}),
    (["verify", "--help"], {"refund"}, {"sqlalchemy", "fastapi", "pyarrow"}),
    (["study", "--help"], {"study", "schedule"}, {"fastapi", "pyarrow", "typestrict_pipeline.backtest.service"}),
])
def test_a_command_imports_only_its_area(argv: list[str], areas: set[str], absent: set[str]) -> None:
    code, printed, imported, modules = _probe(argv)
    assert code == 0, printed
    assert f"usage: typestrict {argv[0]}" in printed
    assert imported == areas
    assert absent.isdisjoint(modules), sorted(absent & modules)


def test_credits_balance_runs_without_the_api_or_the_other_areas(sqlite_url: str) -> None:
    from typestrict_pipeline.credits import CreditLedger
    from typestrict_pipeline.store import open_store

    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("acme", 3, reference="inv-1", now=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
    engine.dispose()
    code, printed, imported, modules = _probe(["credits", "balance", "acme", "--store", sqlite_url])
    assert (code, printed) == (0, "workspace acme: balance 3 credits\n")
    assert imported == {"credits"}
    assert {"fastapi", "pyarrow", "dagster"}.isdisjoint(modules), sorted({"fastapi", "pyarrow", "dagster"} & modules)


def _captured(call: Callable[[], int]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = call()
    return code, out.getvalue(), err.getvalue()


def _full_parser(argv: list[str]) -> int:
    """What every area's parser does with ``argv`` (how ``typestrict`` read any command line
    before it imported only the area named)."""
    try:
        parse(build_parser(), argv)
    except SystemExit as exc:
        assert isinstance(exc.code, int)
        return exc.code
    raise AssertionError(f"expected {argv} to stop in the parser (help, version or a usage error), got it parsed")


@pytest.mark.parametrize(("argv", "code"), [
    ([], 2),
    (["--help"], 0),
    (["-h", "credits"], 0),  # an option before the command: the full help, not credits'
    (["--version", "credits"], 0),
    (["nosuchcommand"], 2),
    (["credit"], 2),
    (["credit", "balance", "demo"], 2),
    (["--", "credits"], 2),
])
def test_a_line_naming_no_command_is_answered_by_every_area(argv: list[str], code: int) -> None:
    got = _captured(lambda: main(argv))
    assert got == _captured(lambda: _full_parser(argv))
    assert got[0] == code
    if argv[:1] in (["--help"], ["-h"]):
        assert all(f"    {c} " in got[1] or f"    {c}\n" in got[1] for c in COMMANDS), got[1]
    if argv[:1] == ["credit"]:
        assert got[2].endswith("Did you mean 'credits'?\n"), got[2]


def test_typestrict_credit_in_a_process_says_what_was_meant(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "credit", "balance", "demo"],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: typestrict [-h] [--version] COMMAND ...\n")
    assert "invalid choice: 'credit'" in proc.stderr and proc.stderr.endswith("Did you mean 'credits'?\n")
