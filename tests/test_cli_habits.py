"""The command line's habits, as git and the Dagster CLI have them (issue #26, "CLI"): a version,
"did you mean" for commands and flags, ``--store`` and ``--json`` on every command, one meaning
for an id per command group, reads that create nothing, errors that name what is missing, values
printed as they are written, and every command that writes saying what it wrote."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from typestrict_pipeline.cli import build_parser, main
from typestrict_pipeline.store import open_store


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(child, (*path, name))


def test_every_command_takes_store_and_json() -> None:
    """The README: every command takes --store URL and --json (walks the whole parser)."""
    leaves = list(_leaves(build_parser()))
    assert len(leaves) > 40
    missing = {" ".join(path): [f for f in ("--store", "--json")
                                if f not in {o for a in p._actions for o in a.option_strings}]
               for path, p in leaves}
    assert {k: v for k, v in missing.items() if v} == {}


def test_study_commands_take_study_ids_and_schedule_status_a_schedule_id() -> None:
    """One meaning for an id per command group: under `study`, a positional id is a study's."""
    for path, p in _leaves(build_parser()):
        ids = [a.dest for a in p._actions if not a.option_strings and a.dest.endswith("_id")]
        if path[0] == "study":
            assert set(ids) <= {"study_id"}, (path, ids)
    status = dict(_leaves(build_parser()))[("schedule", "status")]
    assert [a.dest for a in status._actions if not a.option_strings] == ["schedule_id"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from typestrict_pipeline import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"typestrict {__version__}"


def test_a_mistyped_command_or_flag_names_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stdy", "list"]) == 2
    assert "invalid choice: 'stdy'" in (err := capsys.readouterr().err) and "Did you mean 'study'?" in err
    assert main(["schedule", "statu"]) == 2
    assert "Did you mean 'status'?" in capsys.readouterr().err
    assert main(["schedule", "status", "--jsn"]) == 2
    err = capsys.readouterr().err
    # reported by the command it was given to, with that command's usage, and the nearest flag
    assert "usage: typestrict schedule status" in err
    assert "typestrict schedule status: error: unrecognized arguments: --jsn. Did you mean --json?" in err



def test_a_mistyped_required_flag_names_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse stops at the missing required flag before it looks at the unknown one: the
    error still names the typo and the flag meant, then what is missing."""
    assert main(["backtest", "run", "seattle_rain", "--strat", "2015-01-01", "--end", "2015-01-05"]) == 2
    err = capsys.readouterr().err
    assert "usage: typestrict backtest run" in err
    assert ("typestrict backtest run: error: unrecognized arguments: --strat. Did you mean --start? "
            "(the following arguments are required: --start)") in err
    assert main(["credits", "grant", "demo", "5", "--refrence=inv-1"]) == 2
    assert "unrecognized arguments: --refrence. Did you mean --reference?" in capsys.readouterr().err
    # nothing mistyped: the plain message, no guess (a negative amount is a value, not a flag)
    assert main(["credits", "adjust", "demo", "-5", "--reason", "x"]) == 2
    assert "error: the following arguments are required: --reference\n" in capsys.readouterr().err

READS = (
    ["credits", "balance", "demo"], ["credits", "ledger", "demo"], ["credits", "models", "demo"],
    ["audit", "rt-tiny"], ["verify", "--model", "rt-tiny"], ["study", "list"],
    ["study", "leaderboard", "1"], ["study", "status", "1"], ["backtest", "list"],
    ["backtest", "show", "x1"], ["backtest", "workflows"], ["usage", "demo"], ["schedule", "status"],
    ["schedule", "lineage", "1"], ["schedule", "outbox"], ["schedule", "workspace", "demo"],
    ["api-key", "list", "demo"],
)


def test_reading_an_empty_postgresql_database_creates_nothing(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in READS:
        assert main([*argv, "--store", pg_url]) == 2, argv
        err = capsys.readouterr().err
        assert "got a database without one (no tables of ours). Reading creates nothing" in err, (argv, err)
        assert "Traceback" not in err
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
    finally:
        engine.dispose()
    # A command that writes makes the store, as before.
    assert main(["store", "upgrade", "--store", pg_url]) == 0
    assert main(["study", "list", "--store", pg_url]) == 0


def test_reading_a_sqlite_database_of_something_else_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (t TEXT)")
    for argv in (["study", "list"], ["schedule", "status"], ["api-key", "list", "demo"]):
        assert main([*argv, "--store", f"sqlite:///{other}"]) == 2
        assert "expected a TypeStrict store" in capsys.readouterr().err
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["notes"]


def test_a_missing_postgresql_database_is_named(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    missing = pg_url.rsplit("/", 1)[0] + "/ts_no_such_database"
    assert main(["study", "list", "--store", missing]) == 2
    err = capsys.readouterr().err
    assert "expected the database 'ts_no_such_database' on 127.0.0.1:5432, got no such database" in err
    assert "createdb -h 127.0.0.1 -p 5432 ts_no_such_database" in err
    assert "OperationalError" not in err


# A role and a database that do not exist on the real server (trust auth: no password asked).
MISSING = {
    "role": ("postgresql://nosuchrole@127.0.0.1:5432/test",
             "expected the database user 'nosuchrole' to log in on 127.0.0.1:5432, got no such role. "
             "Create it (createuser -h 127.0.0.1 -p 5432 nosuchrole, or CREATE ROLE nosuchrole LOGIN) "
             "or fix the user in --store / TYPESTRICT_STORE_URL."),
    "database": ("postgresql://root@127.0.0.1:5432/nosuchdb",
                 "expected the database 'nosuchdb' on 127.0.0.1:5432, got no such database. Create it "
                 "(createdb -h 127.0.0.1 -p 5432 nosuchdb, or CREATE DATABASE nosuchdb) or fix the "
                 "database name in --store / TYPESTRICT_STORE_URL."),
}


@pytest.mark.parametrize("missing", sorted(MISSING))
def test_a_missing_role_or_database_is_named_by_reads_and_writes(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The product's message names what is missing and what to do, for a command that reads and
    one that writes alike (exit 2, no traceback, no driver's class name)."""
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    url, message = MISSING[missing]
    for argv in (["study", "list"], ["credits", "balance", "demo"], ["credits", "grant", "demo", "1",
                 "--reference", "inv-1"], ["api-key", "create", "demo"], ["store", "upgrade"],
                 ["backtest", "workflows"]):
        assert main([*argv, "--store", url]) == 2, argv
        out, err = capsys.readouterr()
        assert err == f"typestrict: could not open the store at {url.replace('postgresql', 'postgresql+psycopg2')}: " \
            f"{message}\n", (argv, err)
        assert out == ""


def test_durations_are_printed_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backtest", "workflows", "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 0
    out = capsys.readouterr().out
    assert "1d" in out and "day," not in out and "0:00:00" not in out
    assert main(["backtest", "workflows", "--json", "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 0
    assert {r["horizon"] for r in json.loads(capsys.readouterr().out)} == {"1d"}
    assert not (tmp_path / "none.db").exists()  # listing the code's workflows created no store


def test_run_refuses_what_it_would_ignore_and_says_what_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}"]
    before = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).date().isoformat()
    assert main(["run", "seattle_rain", "--as-of", "yesterday", *store]) == 2
    err = capsys.readouterr().err
    after = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).date().isoformat()
    assert any(  # "yesterday" is read on either side of a midnight the call may cross
        f"got 'yesterday'. Write the day or time to decide as of, in UTC: --as-of {day} for yesterday" in err
        for day in {before, after})
    assert main(["run", "seattle_rain", "--model", "gpt-x", "--as-of", "2015-12-31", *store]) == 2
    err = capsys.readouterr().err
    assert "expected --model-url with --model, got --model without --model-url" in err
    assert not (tmp_path / "store.db").exists()  # refused before anything was stored


def test_api_key_list_has_a_header_and_writes_say_what_they_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}"]
    assert main(["api-key", "create", "demo", "--label", "laptop", "--json", "--new-store", *store]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["key"].startswith("tsk_") and made["label"] == "laptop"
    assert main(["api-key", "list", "demo", *store]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if "key id" in line)
    assert out[header].split() == ["key", "id", "created", "(UTC)", "state", "label"]
    assert made["key_id"] in "\n".join(out[header + 1:]) and "1 key(s)" in out[-1]
    assert main(["credits", "grant", "demo", "3", "--reference", "inv-1", "--json", *store]) == 0
    line = json.loads(capsys.readouterr().out)
    assert (line["kind"], line["amount"], line["balance_after"]) == ("grant", 3, 3)


def test_a_study_gets_a_name_when_none_is_given() -> None:
    from typestrict_pipeline.study.form import StudyForm, study_config

    config = study_config(StudyForm(
        "seattle_rain", "2013-01-02", "2015-12-31", 90, 60, 120, grid=["threshold=0.4,0.5,0.6"],
        max_candidates=3, max_total_steps=2000))
    assert config.name == ("seattle_rain: threshold 0.4..0.6 (3 values) on seattle_weather, "
                           "2013-01-02 to 2015-12-31")


def test_reads_work_on_a_store_that_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).dispose()
    assert main(["study", "list", "--store", url]) == 0
    assert "no studies" in capsys.readouterr().out
