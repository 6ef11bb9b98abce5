"""The command line's cases of the hostile-input corpus: every bad argument gets a message and an
exit code, nothing is written (store contents and home files compared before and after), and no
command prints a traceback — including a closed pipe and Ctrl-C.

The store is a real SQLite file in a private ``TYPESTRICT_HOME`` with one known workspace
(``acme``: a grant and a spend), plus the real PostgreSQL server for the unreachable-URL case.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store

BIG = "1" + "0" * 30  # 10**30 written out
STUDY = ["study", "run", "seattle_rain", "--start", "2013-01-02", "--end", "2015-12-31", "--tune-steps", "90",
         "--eval-steps", "60", "--holdout-steps", "120", "--grid", "threshold=0.4,0.5",
         "--max-candidates", "2", "--max-total-steps", "2000"]
BACKTEST = ["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-01-10"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hostile-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYPESTRICT_HOME", str(root))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        mp.delenv("DAGSTER_HOME", raising=False)
        engine = open_store(f"sqlite:///{root / 'store.db'}")
        ledger = CreditLedger(engine)
        ledger.grant("acme", 5, reference="inv-1")
        ledger.spend("acme", "t1")
        engine.dispose()
        yield root


def snapshot(root: Path) -> tuple[str, list[tuple[str, int]]]:
    """A digest of the store's full contents and every other file's name and size."""
    conn = sqlite3.connect(root / "store.db")
    try:
        digest = hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
    finally:
        conn.close()
    files = sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*")
                   if p.is_file() and not p.name.startswith("store.db"))
    return digest, files


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    return code, err


CASES: list[tuple[str, list[str], int, str]] = [
    ("steps 10**30", [*STUDY, "--max-total-steps", BIG], 2, "expected a number of steps as a whole number"),
    ("steps as an expression", [*STUDY, "--max-total-steps", "10**30"], 2, "got '10**30'"),
    ("steps zero", [*STUDY, "--max-total-steps", "0"], 2, "expected a number of steps from 1 to 10,000,000"),
    ("candidates negative", [*STUDY, "--max-candidates", "-3"], 2, "expected Max candidates from 1"),
    ("budget 1e400", [*STUDY, "--budget-usd", "1e400"], 2, "expected a USD amount from 0 to 1,000,000"),
    ("budget nan", [*STUDY, "--budget-usd", "nan"], 2, "expected a USD amount"),
    ("budget negative", [*STUDY, "--budget-usd", "-1"], 2, "expected a USD amount"),
    ("budget 7 decimals", [*STUDY, "--budget-usd", "0.0000001"], 2, "at most 6 decimals"),
    ("folds zero", [*STUDY, "--folds", "0"], 2, "expected a number of folds from 1 to 100"),
    ("seed negative", [*STUDY, "--seed", "-1"], 2, "expected a seed from 0"),
    ("study step overflow", [*STUDY, "--step", "99999999999d"], 2, "at most 366 days"),
    ("study reversed range", [*STUDY[:3], "--start", "2015-12-31", "--end", "2013-01-02", *STUDY[7:]], 2,
     "got the start 2015-12-31T00:00:00+00:00 after the end 2013-01-02T00:00:00+00:00. Swap them"),
    ("grant 10**30", ["credits", "grant", "acme", BIG, "--reference", "x"], 2,
     "expected an amount of credits as a whole number from 1 to 1,000,000"),
    ("grant 5001 digits", ["credits", "grant", "acme", "9" * 5001, "--reference", "x"], 2,
     "(5001 characters)"),
    ("grant negative", ["credits", "grant", "acme", "-5", "--reference", "x"], 2, "from 1 to 1,000,000."),
    ("grant past one entry's bound", ["credits", "grant", "acme", "1000001", "--reference", "x"], 2,
     "expected an amount of credits from 1 to 1,000,000, got '1000001'"),
    ("adjust past one entry's bound", ["credits", "adjust", "acme", "-2000000", "--reference", "z", "--reason", "r"],
     2, "expected an amount of credits from -1,000,000 to 1,000,000, got '-2000000'"),
    ("grant empty reference", ["credits", "grant", "acme", "5", "--reference", ""], 2, "expected a reference"),
    ("grant NUL in reason", ["credits", "grant", "acme", "5", "--reference", "y", "--reason", "a\x00b"], 2,
     "expected a reason of 1 to 500 printable characters"),
    ("adjust 10**10", ["credits", "adjust", "acme", "10000000000", "--reference", "z", "--reason", "r"], 2,
     "from -1,000,000 to 1,000,000."),
    ("spend path as training", ["credits", "spend", "acme", "../../etc"], 2,
     "expected a training id (letters, digits, _ . @ + -; at most 128; no '..'), got '../../etc'"),
    ("workspace with a slash", ["credits", "grant", "a/b", "1", "--reference", "q"], 2, "expected a workspace id"),
    ("workspace too long", ["credits", "balance", "w" * 129], 2, "at most 64 characters), got a text of 129 characters"),
    ("unknown workspace", ["credits", "balance", "ghost"], 2,
     "expected a workspace the store knows, got 'ghost' (known: acme)"),
    ("unknown workspace usage", ["usage", "ghost"], 2, "got 'ghost' (known: acme)"),
    *[(f"unknown workspace {' '.join(argv[:2])}", argv, 2, "expected a workspace the store knows, got 'ghost' (known: acme)")
      for argv in (["training", "list", "ghost"], ["api-key", "list", "ghost"], ["schedule", "workspace", "ghost"],
                   ["schedule", "workspace", "ghost", "--json"],
                   ["schedule", "data-arrived", "ghost", "wx2", "2013-06-01T00:00:00Z"])],  # was recorded for no one
    ("ledger unknown training", ["credits", "ledger", "acme", "--training", "t9"], 2,
     "expected ledger entries of training 't9' in workspace 'acme', got none"),
    ("ledger training path", ["credits", "ledger", "acme", "--training", "../x"], 2, "expected a training id"),
    ("usage bad day", ["usage", "acme", "--since", "2014-13-45"], 2,
     "expected a day as YYYY-MM-DD (e.g. 2014-12-31) from 1900-01-01 to 2199-12-31, got '2014-13-45', which is not "
     "a calendar date"),
    ("usage year 1", ["usage", "acme", "--since", "0001-01-01"], 2,
     "from 1900-01-01 to 2199-12-31, got '0001-01-01', which is outside those years. Fix the day."),
    ("usage year 99999", ["usage", "acme", "--until", "99999-01-01"], 2, "expected a day as YYYY-MM-DD"),
    ("usage reversed", ["usage", "acme", "--since", "2015-02-01", "--until", "2015-01-01"], 2,
     "got the start 2015-02-01 after the end 2015-01-01. Swap them"),
    ("store scheme mysql", ["credits", "balance", "acme", "--store", "mysql://u@h/db"], 2,
     "expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB, got 'mysql://u@h/db'. "
     "Fix --store or TYPESTRICT_STORE_URL"),
    ("store not a URL", ["credits", "balance", "acme", "--store", "store.db"], 2, "expected a store URL"),
    ("store password masked", ["credits", "balance", "acme", "--store", "redis://u:secret@h/0"], 2,
     "'redis://u:***@h/0'"),
    # one rule and one message for a study id, in every command that takes one (common.study_id)
    *[(f"study id {bad} to {' '.join(argv)}", [*argv, bad], 2,
       f"expected a study id as a whole number from 1 to 2,147,483,647 in ASCII digits, with no sign or "
       f"leading zero, got '{bad}'. Pass an id that `typestrict study list` shows")
      # '01' and '+1' named study 1 here while the API answers them 404 (values.row_id, one rule)
      for bad in ("abc", "1.0", "\uff11", "01", "+1", "2147483648")
      for argv in (["study", "leaderboard"], ["study", "delete"], ["study", "status"], ["schedule", "lineage"])],
    ("study id huge", ["study", "leaderboard", "9" * 30], 2, "expected a study id"),
    ("study id unknown", ["study", "leaderboard", "99"], 2, "expected an existing study id, got 99"),
    ("backtest unknown id", ["backtest", "show", "nosuch"], 2, "got unknown id 'nosuch'"),
    ("backtest reversed", [*BACKTEST[:3], "--start", "2015-02-01", "--end", "2015-01-01"], 2, "Swap them"),
    ("backtest in flight 0", [*BACKTEST, "--max-in-flight", "0"], 2, "expected calls in flight from 1 to 256"),
    ("backtest latency nan", [*BACKTEST, "--standin-latency", "nan"], 2, "expected seconds from 0 to 60"),
    ("backtest model URL", [*BACKTEST, "--model-url", "file:///etc/passwd", "--model", "m", "--price-in",
                            "1", "--price-out", "1"], 2, "expected --model-url as an http:// or https://"),
    *[(f"model URL {url}", [*argv, "--model-url", url, "--model", "m", "--price-in", "1", "--price-out", "1"], 2,
       "expected --model-url as an http:// or https:// base URL with a host (and a port from 1 to 65535, if any)")
      for url in ("http://h:x/v1", "http://[::1/v1", "http://h:99999/v1", "http:///v1", "http://h /v1")
      for argv in (BACKTEST, ["run", "seattle_rain", "--as-of", "2015-06-01"])],
    ("backtest unknown workflow", ["backtest", "run", "nosuch", "--start", "2015-01-01", "--end", "2015-01-10"],
     2, "expected a registered workflow, got 'nosuch'"),
    ("live unknown workflow", ["run", "nosuch"], 2, "expected a registered workflow, got 'nosuch'"),
    ("live bad as-of", ["run", "seattle_rain", "--as-of", "yesterday"], 2, "expected --as-of as an ISO 8601"),
    ("schedule id zero", ["schedule", "status", "0"], 2, "expected a schedule id as a whole number from 1"),
    *[(f"schedule id {bad}", ["schedule", "status", bad], 2,
       f"expected a schedule id as a whole number from 1 to 2,147,483,647 in ASCII digits, with no sign or "
       f"leading zero, got '{bad}'. Pass an id that `typestrict schedule status` shows")
      for bad in ("01", "+1", " 1", "1_0")],
    ("notifications empty user", ["schedule", "notifications", "", "--on"], 2, "expected a person"),
    ("unknown command", ["frobnicate"], 2, "invalid choice"),
    ("api port full-width digits", ["api", "--port", "\uff11\uff12"], 2,
     "argument --port: expected a TCP port as a whole number from 1 to 65,535, got '\uff11\uff12'"),
    ("api port hex", ["api", "--port", "0x10"], 2, "argument --port: expected a TCP port as a whole number"),
    ("api port 0", ["api", "--port", "0"], 2, "argument --port: expected a TCP port from 1 to 65,535, got '0'"),
    ("api workers nan", ["api", "--workers", "nan"], 2, "argument --workers: expected a number of worker processes"),
    # round 3: unicode tricks in identifiers and numbers, special store paths
    ("workspace homoglyph", ["credits", "balance", "\u0430cme"], 2,
     "expected a workspace id (letters, digits, '_', '-' or '.', starting with a letter or digit, no '..', at most 64"),
    ("workspace of 65 characters", ["credits", "grant", "w" * 65, "1"], 2,  # the store's schedules hold 64
     "expected a workspace id (letters, digits, '_', '-' or '.', starting with a letter or digit, no '..', at most 64 "
     "characters), got a text of 65 characters"),
    ("workspace with '@'", ["credits", "grant", "team@acme", "1"], 2,  # a manifest and an API key refused it
     "expected a workspace id (letters, digits, '_', '-' or '.'"),
    ("workspace zero-width", ["credits", "balance", "ac\u200bme"], 2, "got 'ac\\u200bme'"),
    ("workspace RTL override", ["credits", "balance", "\u202eacme"], 2, "got '\\u202eacme'"),
    ("workspace BOM", ["credits", "balance", "\ufeffacme"], 2, "got '\\ufeffacme'"),
    ("training RTL override", ["credits", "ledger", "acme", "--training", "t\u202e1"], 2, "expected a training id"),
    ("grant Arabic-Indic digit", ["credits", "grant", "acme", "\u0665", "--reference", "x"], 2, "as a whole number from 1"),
    ("grant full-width digit", ["credits", "grant", "acme", "\uff15", "--reference", "x"], 2, "as a whole number from 1"),
    ("grant with underscore", ["credits", "grant", "acme", "1_0", "--reference", "x"], 2, "got '1_0'"),
    ("budget inf", [*STUDY, "--budget-usd", "inf"], 2, "expected a USD amount"),
    ("budget with underscore", [*STUDY, "--budget-usd", "1_0"], 2, "expected a USD amount"),
    ("seed nan", [*STUDY, "--seed", "nan"], 2, "expected a seed as a whole number"),
    ("grid value 1e400", [*STUDY[:13], "--grid", "threshold=1e400", *STUDY[15:]], 2,
     "expected --grid threshold as a finite number, got '1e400'"),
    ("grid value nested 30k deep", [*STUDY[:13], "--grid", "threshold=" + "[" * 30000 + "]" * 30000, *STUDY[15:]], 2,
     "expected JSON nested at most 32 levels deep"),
    ("usage February 30", ["usage", "acme", "--since", "2014-02-30"], 2, "expected a day as YYYY-MM-DD"),
    ("backtest year 0", [*BACKTEST[:3], "--start", "0000-01-01", "--end", "2015-01-10"], 2, "expected the start as an ISO 8601"),
    ("backtest offset +99:00", [*BACKTEST[:3], "--start", "2015-01-01T00:00+99:00", "--end", "2015-01-10"], 2,
     "expected the start as an ISO 8601"),
    # --param NAME=VALUE: the rule of --grid (one rule, values.command_value), before the store opens
    *[(f"backtest param {v}", [*BACKTEST, "--param", f"threshold={v}"], 2,
       f"expected --param threshold as a finite number, got {v!r}")
      for v in ("nan", "NaN", "inf", "-Infinity", "+INF", "1e999")],
    ("backtest param RTL override", [*BACKTEST, "--param", "threshold=a\u202eb"], 2,
     "expected a --param threshold value without control characters"),
    ("backtest param NUL in a JSON string", [*BACKTEST, "--param", 'threshold=["a\\u0000"]'], 2,
     "got U+0000 at character 2"),
    ("backtest param zero-width name", [*BACKTEST, "--param", "thre\u200bshold=0.5"], 2,
     "expected the parameter name of --param without control characters"),
    ("backtest param escape in name", [*BACKTEST, "--param", "\x1b[31mthreshold=0.5"], 2, "got U+001B at character 1"),
    ("backtest param empty name", [*BACKTEST, "--param", "=0.5"], 2, "expected the parameter name of --param that is not empty"),
    ("backtest prompt BOM", [*BACKTEST, "--prompt", "forecast=\ufeffsay rain"], 2, "got U+FEFF at character 1"),
    ("activate param -Infinity", ["backtest", "activate", "seattle_rain", "--param", "threshold=-infinity",
                                  "--workspace", "acme"], 2, "expected --param threshold as a finite number"),
    ("activate param RTL name", ["backtest", "activate", "seattle_rain", "--param", "\u202ethreshold=0.5",
                                 "--workspace", "acme"], 2, "got U+202E at character 1"),
    ("store is a directory", ["credits", "balance", "acme", "--store", "sqlite:////"], 2, "got something that is not a file"),
    ("store is /dev/null", ["credits", "balance", "acme", "--store", "sqlite:////dev/null"], 2, "got something that is not a file"),
    # round 4: a value given empty ("$UNSET") is refused, never read as the option left out (which
    # decided as of now, wrote to the default store, recorded now as the data's end...)
    *[(f"empty {name}", argv, 2, f"argument {arg}: expected a value, got an empty one") for name, arg, argv in [
        ("--store of a write", "--store", ["credits", "grant", "acme", "1", "--reference", "e1", "--store", ""]),
        ("--as-of of a live run", "--as-of", ["run", "seattle_rain", "--as-of", ""]),
        ("--csv of a backtest", "--csv", [*BACKTEST, "--csv", ""]),
        ("--model-url of a backtest", "--model-url", [*BACKTEST, "--model-url", ""]),
        ("--version to activate", "--version", ["backtest", "activate", "seattle_rain", "--version", "",
                                                "--workspace", "acme"]),
        ("END of data-arrived", "end", ["schedule", "data-arrived", "acme", "seattle_rain", ""]),
        ("audit file to verify", "AUDIT.json", ["verify", ""]),
        ("--host of the server", "--host", ["api", "--host", ""]),
    ]],
    # every --now is one rule (common.now_option): a time with its zone, read with the command line
    *[(f"--now without a zone: {' '.join(argv[:2])}", [*argv, "--now", "2030-01-01T00:00:00"], 2,
       "argument --now: expected --now as an ISO 8601 time with a zone from 1900-01-01 to 2199-12-31 "
       "(2015-01-01T00:00Z, 2015-01-01T00:00+02:00), got '2030-01-01T00:00:00', which has no zone")
      for argv in (["schedule", "tick"], ["training", "expire"], ["credits", "expire"])],
    *[(f"--now empty: {' '.join(argv[:2])}", [*argv, "--now", ""], 2,
       "argument --now: expected --now as an ISO 8601 time with a zone from 1900-01-01 to 2199-12-31 "
       "(2015-01-01T00:00Z, 2015-01-01T00:00+02:00), got ''")
      for argv in (["schedule", "tick"], ["training", "expire"], ["credits", "expire"])],
    # a store URL is checked by the store's one rule (scheme, driver, port), by every command
    ("store port not a number", ["credits", "balance", "acme", "--store", "postgresql://u@h:notaport/db"], 2,
     "expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB, got 'postgresql+psycopg2://u@h:notaport/db'"),
    ("store port past 65535", ["credits", "balance", "acme", "--store", "postgresql://u@h:99999/db"], 2,
     "expected a store URL whose port is a TCP port from 1 to 65535, got 'postgresql+psycopg2://u@h:99999/db'"),
    ("store port an IPv6 host cut short", ["credits", "balance", "acme", "--store", "postgresql://u@[::1/db"], 2,
     "expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB"),
    ("api-key store port not a number", ["api-key", "list", "acme", "--store", "postgresql://u@h:x/db"], 2,
     "expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB"),
    ("api-key store scheme mysql", ["api-key", "create", "acme", "--store", "mysql://u:secret@h/db"], 2,
     "got 'mysql://u:***@h/db'. Fix --store or TYPESTRICT_STORE_URL"),
    *[(f"store in memory: {' '.join(argv[:2])} {url}", [*argv, "--store", url], 2,
       f"expected a store URL naming the store's file, sqlite:///PATH, got '{url}', an in-memory database "
       "that is gone when the command ends") for url in ("sqlite://", "sqlite:///", "sqlite:///:memory:")
      for argv in (["credits", "grant", "acme", "1", "--reference", "mem"], ["store", "upgrade"],
                   ["api-key", "create", "acme"])],
    ("store path too long", ["credits", "balance", "acme", "--store", "sqlite:////tmp/" + "q" * 5000 + "/store.db"], 2,
     "expected a path the system can open, got '/tmp/qqq"),
    ("store path too long, a write", ["credits", "grant", "acme", "1", "--reference", "long", "--new-store",
                                      "--store", "sqlite:////tmp/" + "q" * 5000 + "/store.db"], 2,
     "characters): File name too long (errno 36). Check the path you gave"),
    # an API key's label and workspace: the rules of every stored text and every workspace id
    ("api-key label with an escape", ["api-key", "create", "acme", "--label", "x\x1b[2J"], 2,
     "expected an API key's label without control characters"),
    ("api-key label RTL override", ["api-key", "create", "acme", "--label", "\u202eexe.txt"], 2,
     "got U+202E at character 1"),
    ("api-key label 201 characters", ["api-key", "create", "acme", "--label", "x" * 201], 2,
     "expected an API key's label of at most 200 characters, got 201 characters"),
    ("api-key list workspace path", ["api-key", "list", "../x"], 2, "expected a workspace id (letters, digits"),
    ("api-key create workspace with '..'", ["api-key", "create", "a..b"], 2, "expected a workspace id (letters, digits"),
]


@pytest.mark.parametrize(("argv", "code", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_argument_gets_a_message_and_writes_nothing(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    before = snapshot(home)
    got, err = run_cli(argv, capsys)
    assert (got, message in err) == (code, True), err
    assert "Traceback" not in err
    assert snapshot(home) == before


_HEAD = b"event_time,known_time,precipitation,temp_max,temp_min,wind,weather\n"
_ROW = b"2015-01-01T00:00:00Z,2015-01-02T00:00:00Z,0.0,5.0,1.0,2.0,sun\n"
BAD_CSV: list[tuple[str, bytes, str]] = [
    ("empty file", b"", ": expected a CSV file with a header row, got an empty file. Write the header and the rows."),
    ("header only", _HEAD, ": expected at least one row in table 'weather', got an empty table."),
    ("NUL byte", _HEAD + _ROW + _ROW.replace(b"sun", b"s\x00n"),
     ", row 2: expected a CSV file with a header row of text, got a NUL byte on line 3 of the file"),
    ("not UTF-8", _HEAD + _ROW + _ROW.replace(b"sun", b"s\xfcn"),
     ", row 2: expected a UTF-8 encoded CSV file, got bytes that are not UTF-8 on line 3 of the file. "
     "Save the file as UTF-8."),
    ("BOM then a short row", b"\xef\xbb\xbf" + _HEAD + _ROW + _ROW.replace(b",sun", b""),
     ", row 2: expected 7 cells, like the header, got 6 cells."),
    ("a line of spaces", _HEAD + _ROW + b"   \n" + _ROW, ", row 2: expected 7 cells, like the header, got 1 cells."),
    ("an unclosed quote", _HEAD + _ROW + b'2015-01-02T00:00:00Z,"2015', ", row 2: expected a CSV file with a header "
     "row, got a CSV syntax error (unexpected end of data)"),
]


@pytest.mark.parametrize(("content", "message"), [c[1:] for c in BAD_CSV], ids=[c[0] for c in BAD_CSV])
def test_a_bad_csv_file_gets_a_message_naming_it_and_writes_nothing(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    """``backtest run --csv FILE`` reads a file by the rules of every CSV the product takes."""
    csv = tmp_path / "weather.csv"
    csv.write_bytes(content)
    before = snapshot(home)
    got, err = run_cli([*BACKTEST, "--csv", str(csv), "--standin-latency", "0"], capsys)
    assert (got, f"typestrict: {csv}{message}" in err) == (2, True), err
    assert "Traceback" not in err
    assert snapshot(home) == before


def test_reading_a_missing_store_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "store.db"
    for argv in (["credits", "balance", "acme"], ["usage", "acme"], ["study", "list"],
                 ["backtest", "list"], ["schedule", "status"], ["audit", "m1"]):
        got, err = run_cli([*argv, "--store", f"sqlite:///{missing}"], capsys)
        assert got == 2 and f"expected a store at {missing}, got no such file" in err, (argv, err)
    assert not missing.parent.exists()


def test_an_unreachable_postgres_store_is_a_message(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(home)
    got, err = run_cli(["credits", "balance", "acme", "--store",
                        "postgresql://nobody@127.0.0.1:1/none"], capsys)
    assert got == 2 and "could not open the store at postgresql+psycopg2://nobody@127.0.0.1:1/none" in err
    assert "expected a PostgreSQL server answering on 127.0.0.1:1, got no answer" in err
    assert "Traceback" not in err and snapshot(home) == before


def test_text_that_looks_like_markup_is_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ledger reason or a key label with square brackets is a table cell like any other: the
    ledger with a reason ``[/]`` failed as "unexpected error MarkupError", and a label
    ``[red]k[/red]`` was listed as ``k``."""
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"]
    reason, label = "refund [/] of [b]x[/b]", "[red]k[/red]"
    assert run_cli(["credits", "grant", "acme", "2", "--reference", "m1", "--reason", reason, *store], capsys)[0] == 0
    assert run_cli(["api-key", "create", "acme", "--label", label, *store], capsys)[0] == 0
    capsys.readouterr()
    assert main(["credits", "ledger", "acme", *store]) == 0
    assert main(["api-key", "list", "acme", *store]) == 0
    out, err = capsys.readouterr()
    assert reason in out and label in out and err == ""


def test_an_empty_typestrict_home_is_the_default_home_not_the_current_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TYPESTRICT_HOME=$UNSET``: the store is ./.typestrict/store.db, as with no setting (it was
    ./store.db, and a write with --new-store started a store in the folder itself)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TYPESTRICT_HOME", "")
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    code, err = run_cli(["credits", "balance", "acme"], capsys)
    assert code == 2 and f"expected a store at {tmp_path / '.typestrict' / 'store.db'}, got no such file" in err, err
    assert run_cli(["credits", "grant", "acme", "1", "--reference", "h1", "--new-store"], capsys)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".typestrict"]
    assert (tmp_path / ".typestrict" / "store.db").is_file()


@pytest.mark.parametrize(("variable", "argv"), [
    ("TYPESTRICT_HOME", ["credits", "balance", "acme"]),
    ("TYPESTRICT_HOME", ["training", "show", "t1", "--store", "sqlite:///{home}/store.db"]),
    ("TYPESTRICT_DATASETS_DIR", ["data", "show"]),
])
def test_a_path_from_the_environment_the_system_refuses_is_named(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, variable: str, argv: list[str]
) -> None:
    """A folder named by the environment that the system refuses (here: too long) was "unexpected
    error OSError: [Errno 36] File name too long ... This is a bug"."""
    monkeypatch.setenv(variable, "/tmp/" + "q" * 5000)
    before = snapshot(home)
    code, err = run_cli([a.format(home=home) for a in argv], capsys)
    assert code == 2 and "typestrict: expected a path the system can open, got '/tmp/qqq" in err, err
    assert "File name too long (errno 36)" in err and "This is a bug" not in err
    assert snapshot(home) == before


def test_a_fifo_in_place_of_a_training_manifest_never_hangs(tmp_path: Path) -> None:
    """``training show T`` reads T's manifest to find its workspace; a FIFO there blocked it for
    good. In its own process, with a deadline."""
    folder = tmp_path / "trainings" / "tfifo"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "manifest.json")
    env = {**os.environ, "TYPESTRICT_HOME": str(tmp_path)}
    env.pop("TYPESTRICT_STORE_URL", None)
    done = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "training", "show", "tfifo",
                           "--new-store"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "expected a training with id 'tfifo' in the store or under" in done.stderr


def _cli(*argv: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "typestrict_pipeline.cli", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_closed_pipe_ends_quietly(home: Path) -> None:
    """``typestrict backtest workflows --json | head -c 10``, with more output than a pipe holds."""
    engine = open_store(f"sqlite:///{home / 'pipe.db'}")
    ledger = CreditLedger(engine)
    for i in range(400):  # ~100 KB of JSON lines, more than the 64 KiB a pipe buffers
        ledger.grant("pipe", 1, reference=f"inv-{i}", reason="x" * 100)
    engine.dispose()
    env = {**os.environ, "TYPESTRICT_STORE_URL": f"sqlite:///{home / 'pipe.db'}"}
    proc = _cli("credits", "ledger", "pipe", "--json", env=env)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == b'{"amount":'
    proc.stdout.close()  # the reader goes away, as `head` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141
    assert err == ""


def test_a_closed_stdout_drops_the_output_and_a_full_one_is_one_line(home: Path) -> None:
    """``typestrict ... >&-`` ran into a traceback ('NoneType' object has no attribute 'flush'), exit
    1; ``> /dev/full`` (a full disk) was "unexpected error OSError ... This is a bug"."""
    env = {**os.environ, "TYPESTRICT_HOME": str(home)}
    env.pop("TYPESTRICT_STORE_URL", None)
    argv = [sys.executable, "-m", "typestrict_pipeline.cli", "credits", "balance", "acme"]
    closed = subprocess.run(argv, env=env, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1),
                            timeout=300, check=False)
    assert (closed.returncode, closed.stderr) == (0, b"")
    with open("/dev/full", "wb") as full:
        done = subprocess.run(argv, env=env, stdout=full, stderr=subprocess.PIPE, timeout=300, check=False)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.splitlines() == ["typestrict: expected room to write, got No space left on device (errno 28). Free "
                                "space, or raise the quota or the file size limit, and run the command again; "
                                "what was stored before stays stored."]


def test_ctrl_c_exits_130_with_one_line(home: Path, tmp_path: Path) -> None:
    """Ctrl-C during a long backtest: exit 130, one line, no traceback; what was stored stays."""
    store = tmp_path / "ctrl-c.db"
    env = {**os.environ, "TYPESTRICT_STORE_URL": f"sqlite:///{store}", "TYPESTRICT_HOME": str(tmp_path)}
    proc = _cli("backtest", "run", "seattle_rain", "--start", "2012-01-02", "--end", "2015-12-31",
                "--standin-latency", "0.2", "--max-in-flight", "1", "--new-store", env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + 300
    started = False
    while time.monotonic() < deadline and proc.poll() is None and not started:
        time.sleep(0.5)
        if store.exists():
            conn = sqlite3.connect(store, timeout=30)
            try:
                names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                started = "backtest_runs" in names and conn.execute(  # the run's row comes first
                    "SELECT COUNT(*) FROM backtest_runs").fetchone()[0] > 0
            except sqlite3.OperationalError:
                started = False
            finally:
                conn.close()
    assert started, "the backtest did not start"
    # From here on the run is in its steps (1,460 at 0.2 s each, one at a time: minutes to go);
    # the outcome asserted below is the same whenever the signal lands after the row exists, so
    # this second only lets some steps run first, it does not decide the result.
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=300)
    err = proc.stderr.read().decode()
    assert code == 130, err
    assert err.strip().splitlines() == ["typestrict: interrupted; what was stored before stays stored"]
    # ... and the backtest says so, with when and why (before: "running" for good, or "failed")
    conn = sqlite3.connect(store)
    try:
        status, error, finished = conn.execute(
            "SELECT status, error, finished_at FROM backtest_runs").fetchone()
    finally:
        conn.close()
    assert status == "interrupted" and finished is not None
    assert error.startswith("interrupted at 20") and "Ctrl-C (SIGINT)" in error


@pytest.mark.parametrize(
    ("make", "kind"),
    [(lambda p: p.mkdir(), "a directory"), (os.mkfifo, "a FIFO (named pipe)"),
     (lambda p: p.symlink_to(p.name), "a path that cannot be followed")],
    ids=["a directory", "a FIFO", "a symlink loop"],
)
def test_store_init_never_moves_or_opens_what_is_not_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, kind: str
) -> None:
    target = tmp_path / "store.db"
    make(target)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = run_cli(["store", "init", "--url", f"sqlite:///{target}"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"expected a regular file (or no file) for the store, got {kind}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing moved, nothing created


def test_concurrent_store_inits_create_one_store_and_the_others_find_it(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    procs = [subprocess.Popen([sys.executable, "-m", "typestrict_pipeline.cli", "store", "init",
                               "--url", f"sqlite:///{db}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert all(code == 0 and "Traceback" not in err for code, _, err in results), results
    outs = [out for _, out, _ in results]
    assert sum("created an empty store" in o for o in outs) == 1, outs
    assert sum("already exists" in o for o in outs) == 3, outs
    assert not list(tmp_path.glob("store.db.broken-*"))  # no store was taken for a broken one
    CreditLedger(open_store(f"sqlite:///{db}")).grant("w", 1, reference="r")  # it works


@pytest.mark.parametrize("query", ["?uri=true&mode=memory", "?mode=ro", "?timeout=0"])
def test_a_sqlite_store_url_with_a_query_is_refused_and_nothing_is_written(tmp_path: Path, query: str) -> None:
    """The driver read a SQLite URL's query: ``store init`` and ``credits grant --new-store`` on
    ``sqlite:///…/store.db?uri=true&mode=memory`` said they wrote to ``…/store.db`` and exited 0,
    and nothing was there (an in-memory database, and a file named ``store.db?mode=memory``);
    ``?mode=ro`` printed the driver's warning with a line of its source on stderr."""
    url = f"sqlite:///{tmp_path / 'store.db'}{query}"
    env = {k: v for k, v in os.environ.items() if k != "TYPESTRICT_STORE_URL"}
    env["TYPESTRICT_HOME"] = str(tmp_path / "home")
    for argv in (["store", "init", "--store", url],
                 ["credits", "grant", "acme", "5", "--reference", "r1", "--new-store", "--store", url]):
        proc = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", *argv], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("typestrict: expected a store URL sqlite:///PATH naming the store's file "
                                      "and nothing else, got "), proc.stderr
        assert "Remove the '?' and what follows it." in proc.stderr and "Warning" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(("query", "names"), [("?port=2", "port"), ("?sslmode=disable&host=127.0.0.2", "host"),
                                              ("?dbname=other&user=root", "dbname, user")])
def test_a_postgres_store_url_whose_query_names_another_server_is_refused(
        tmp_path: Path, query: str, names: str) -> None:
    """libpq takes the query's host, port, database or user over the URL's: a command on
    ``postgresql://u@127.0.0.1:1/none?port=2`` connected to port 2 while its messages (and the
    runs it launches, and the logs) named 127.0.0.1:1."""
    url = f"postgresql://nobody@127.0.0.1:1/none{query}"
    env = {k: v for k, v in os.environ.items() if k != "TYPESTRICT_STORE_URL"}
    env["TYPESTRICT_HOME"] = str(tmp_path / "home")
    proc = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "credits", "balance", "acme",
                           "--store", url], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("typestrict: expected a store URL that names its server and database once, "
                                  "got 'postgresql+psycopg2://nobody@127.0.0.1:1/none?"), proc.stderr
    assert f"', whose query names {names} again. Remove " in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "home").exists()
