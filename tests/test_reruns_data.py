"""Registered point-in-time datasets: register, append (validated), read fresh; the CLI over them."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from typestrict_pipeline.backtest.pit import read_csv_fresh
from typestrict_pipeline.backtest.workflows import load_dataset
from typestrict_pipeline.backtest.workflows.datasets import (
    append_rows,
    dataset_info,
    register_dataset,
)
from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import ConflictError, DatasetError, InputError
from typestrict_pipeline.reruns.studies import REGISTERED_SETUP, dataset_data_end

CUT = dt.datetime(2012, 3, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HEAD = "event_time,known_time,precipitation,temp_max,temp_min,wind,weather\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    write_seattle_csv(tmp_path / "start.csv", known_until=CUT)
    register_dataset("live", "seattle_rain", {"weather": tmp_path / "start.csv"})
    return tmp_path


def write(path: Path, *rows: str, head: str = HEAD) -> Path:
    path.write_text(head + "".join(r + "\n" for r in rows))
    return path


def test_appended_rows_reach_every_reader_and_the_tick_data_end(home: Path) -> None:
    config = {"backend": "engine", "setup": REGISTERED_SETUP,
              "setup_args": {"workflow": "seattle_rain", "dataset": "live"}}
    assert dataset_data_end(config, DAY) == CUT
    first = load_dataset("live")["weather"]
    assert load_dataset("live")["weather"] is first  # unchanged file: the table read last time

    write_seattle_csv(home / "more.csv", known_after=CUT, known_until=CUT + 12 * DAY)
    r = append_rows("live", "weather", home / "more.csv")
    assert (r.added, r.rows, r.last_known_after) == (12, 72, CUT + 12 * DAY)
    after = load_dataset("live")["weather"]
    assert after.n_rows == first.n_rows + 12 and after.last_known == CUT + 12 * DAY
    assert dataset_data_end(config, DAY) == CUT + 12 * DAY
    # What was knowable before the append is unchanged: a view at CUT sees the same rows.
    assert after.view(CUT).column("precipitation").tolist() == first.view(CUT).column("precipitation").tolist()


def test_an_append_never_rewrites_rows_already_known(home: Path) -> None:
    known = write(home / "old.csv", "2012-02-28T00:00:00Z,2012-03-01T00:00:00Z,1.0,10,5,3,rain")
    with pytest.raises(DatasetError, match=r"old.csv, row 1, column 'known_time': expected rows known after "
                                           r"the table's last knowledge time 2012-03-01T00:00:00Z"):
        append_rows("live", "weather", known)
    # A correction is a new row about the same day, known later: accepted.
    fix = write(home / "fix.csv", "2012-02-29T00:00:00Z,2012-03-02T00:00:00Z,2.5,10,5,3,rain")
    assert append_rows("live", "weather", fix).added == 1
    table = load_dataset("live")["weather"]
    assert table.view(CUT).get("precipitation", dt.datetime(2012, 2, 29, tzinfo=dt.UTC)) != 2.5
    assert table.view(CUT + DAY).get("precipitation", dt.datetime(2012, 2, 29, tzinfo=dt.UTC)) == 2.5


def test_a_late_correction_about_an_old_day_is_no_new_step_for_a_schedule(home: Path) -> None:
    """A correction about an old day, known a month after the last row, moved the data end a
    month: a schedule counted 30 unseen steps, fired a re-run whose holdout had no outcome to
    score (it failed), and then skipped forever ("The previous study in the lineage did not
    finish"). The steps whose outcome is known end where the rows about them end."""
    config = {"backend": "engine", "setup": REGISTERED_SETUP,
              "setup_args": {"workflow": "seattle_rain", "dataset": "live"}}
    assert dataset_data_end(config, DAY) == CUT
    late = write(home / "late.csv", "2012-02-20T00:00:00Z,2012-03-31T00:00:00Z,2.5,10,5,3,rain")
    assert append_rows("live", "weather", late).added == 1
    assert load_dataset("live")["weather"].last_known == CUT + 30 * DAY
    assert dataset_data_end(config, DAY) == CUT  # was CUT + 30 days
    # The days themselves, as they become known, are new steps.
    days = write(home / "days.csv", *(f"2012-03-{d:02d}T00:00:00Z,2012-04-{d:02d}T00:00:00Z,0,10,5,3,sun"
                                      for d in range(1, 4)))
    assert append_rows("live", "weather", days).added == 3
    assert dataset_data_end(config, DAY) == CUT + 3 * DAY


def test_an_append_that_would_take_the_table_past_the_size_bound_is_refused(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No read could load such a table (every data file is read within the bound): the append is
    refused and the table stays as it was, still readable."""
    before = (home / "start.csv").stat().st_size
    monkeypatch.setenv("TYPESTRICT_MAX_DATA_FILE_BYTES", str(before + 100))
    write_seattle_csv(home / "more.csv", known_after=CUT, known_until=CUT + 12 * DAY)  # ~700 bytes more
    with pytest.raises(DatasetError, match=r"more.csv: expected a table of at most [\d,]+ bytes once the rows "
                                           r"are appended .* got [\d,]+ bytes \(12 rows added to 60\)"):
        append_rows("live", "weather", home / "more.csv")
    table = load_dataset("live")["weather"]
    assert table.n_rows == 60 and table.last_known == CUT


@pytest.mark.parametrize(("rows", "head", "match"), [
    (["2012-03-01T00:00:00Z,2012-03-02T00:00:00Z,lots,10,5,3,rain"], HEAD,
     r"bad.csv, row 1, column 'precipitation': expected a number in column 'precipitation'"),
    (["2012-03-01T00:00:00Z,2012-03-02 00:00,1.0,10,5,3,rain"], HEAD,
     r"bad.csv, row 1, column 'known_time': expected timezone-aware times"),
    (["2012-03-01T00:00:00Z,,1.0,10,5,3,rain"], HEAD, r"bad.csv, row 1, column 'known_time'"),
    (["2012-03-01T00:00:00Z,2012-03-02T00:00:00Z,1.0,10,5,rain"], HEAD.replace(",wind", ""),
     r"bad.csv, column 'wind': expected the table's columns"),
    (["2012-03-01T00:00:00Z,2012-03-02T00:00:00Z,1.0,10,5,3,rain,x"], HEAD.strip() + ",extra\n",
     r"bad.csv, column 'extra': expected the table's columns .* got an extra column 'extra'"),
    (["2012-03-01T00:00:00Z,2199-01-01T00:00:00Z,1.0,10,5,3,rain"], HEAD,
     r"bad.csv, row 1, column 'known_time': expected a knowledge time at or before now"),
])
def test_bad_rows_are_refused_with_file_row_and_column(home: Path, rows: list[str], head: str, match: str) -> None:
    before = (home / "datasets" / "live" / "weather.csv").read_bytes()
    with pytest.raises(DatasetError, match=match):
        append_rows("live", "weather", write(home / "bad.csv", *rows, head=head))
    assert (home / "datasets" / "live" / "weather.csv").read_bytes() == before  # nothing written


def test_register_checks_the_workflow_tables_and_the_name(home: Path) -> None:
    with pytest.raises(ConflictError, match="'live', which is registered"):
        register_dataset("live", "seattle_rain", {"weather": home / "start.csv"})
    with pytest.raises(InputError, match=r"one file per table workflow 'seattle_rain' reads \(weather\)"):
        register_dataset("other", "seattle_rain", {"rain": home / "start.csv"})
    with pytest.raises(InputError, match="not a built-in dataset"):
        register_dataset("seattle_weather", "seattle_rain", {"weather": home / "start.csv"})
    with pytest.raises(InputError, match="a dataset name of lowercase"):
        register_dataset("../x", "seattle_rain", {"weather": home / "start.csv"})
    no_known = write(home / "nok.csv", "2012-01-01T00:00:00Z,1.0", head="event_time,precipitation\n")
    with pytest.raises(DatasetError, match=r"nok.csv: expected a column 'known_time'"):
        register_dataset("other", "seattle_rain", {"weather": no_known})
    assert [t.rows for t in dataset_info("live").tables] == [60]


def test_read_csv_fresh_rereads_only_when_the_file_changed(tmp_path: Path) -> None:
    f = write(tmp_path / "t.csv", "2012-01-01T00:00:00Z,2012-01-02T00:00:00Z,1", head="event_time,known_time,x\n")
    a = read_csv_fresh(f, "t")
    assert read_csv_fresh(f, "t") is a
    write(tmp_path / "t.csv", "2012-01-01T00:00:00Z,2012-01-02T00:00:00Z,7", head="event_time,known_time,x\n")
    b = read_csv_fresh(f, "t")  # replaced with the same size: a new inode, so read again
    assert b is not a and b.view(dt.datetime(2012, 1, 3, tzinfo=dt.UTC)).column("x").tolist() == [7]


def test_cli_register_append_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    write_seattle_csv(tmp_path / "a.csv", known_until=CUT)
    write_seattle_csv(tmp_path / "b.csv", known_after=CUT, known_until=CUT + 5 * DAY)
    assert main(["data", "register", "wx", "--workflow", "seattle_rain", "--table", f"weather={tmp_path / 'a.csv'}"]) == 0
    assert main(["data", "append", "wx", str(tmp_path / "b.csv")]) == 0
    out = capsys.readouterr().out
    assert "wx/weather: 5 rows added (65 in all); known up to 2012-03-06T00:00:00Z" in out
    assert main(["data", "show", "wx"]) == 0
    assert "outcomes are known for decisions up to 2012-03-05T00:00:00Z" in capsys.readouterr().out
    # one row is "1 row", in what it says and in what it wrote (before: "1 rows added")
    write_seattle_csv(tmp_path / "c.csv", known_after=CUT + 5 * DAY, known_until=CUT + 6 * DAY)
    assert main(["data", "append", "wx", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert "wx/weather: 1 row added (66 in all); known up to 2012-03-07T00:00:00Z" in out, out
    assert "1 rows" not in out and "1 new row of wx/weather" in out, out
    # Appending the same rows again is refused with the file, row and column, no traceback.
    assert main(["data", "append", "wx", str(tmp_path / "b.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"typestrict: {tmp_path / 'b.csv'}, row 1, column 'known_time'") and "Traceback" not in err
    assert main(["data", "register", "wx2", "--workflow", "seattle_rain", "--table", "weather"]) == 2
    assert "--table TABLE=FILE.csv" in capsys.readouterr().err


def test_a_wide_table_is_shown_and_refused_in_a_line_not_a_column_each(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``data show`` and an append's refusal listed every column (10,005 names, ~60 KB a line)."""
    extra = [f"c{i}" for i in range(3000)]
    head = HEAD.strip() + "," + ",".join(extra) + "\n"
    cells = ",".join("1" for _ in extra)
    rows = [f"2012-01-{d:02d}T00:00:00Z,2012-01-{d + 1:02d}T00:00:00Z,1.0,10,5,3,rain,{cells}" for d in (1, 2)]
    register_dataset("wide", "seattle_rain", {"weather": write(home / "wide.csv", *rows, head=head)})
    assert main(["data", "show", "wide"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "; columns " in x)
    assert line.endswith("; columns event_time, known_time, precipitation, temp_max, temp_min, wind, weather, c0, "
                         "c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, … and 2,987 more"), line
    later = "2012-01-03T00:00:00Z,2012-01-04T00:00:00Z,1.0,10,5,3,rain," + cells[2:]
    narrower = write(home / "narrow.csv", later, head=head.replace(",c0,", ","))
    with pytest.raises(DatasetError, match=r"without 'c0'") as refused:
        append_rows("wide", "weather", narrower)
    assert len(str(refused.value)) < 1000, len(str(refused.value))
    assert "… and 2,986 more]" in str(refused.value)


def test_data_arrived_is_refused_where_the_tick_reads_the_dataset(
    home: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from typestrict_pipeline.reruns import scenario
    from typestrict_pipeline.store import open_store

    engine = open_store(sqlite_url)
    scenario.create_seattle_study(engine, workspace="w", dataset="live", end=CUT, budget_micro_usd=10**6,
                                  min_unseen_steps=5)
    engine.dispose()
    assert main(["schedule", "data-arrived", "w", "seattle_rain", "2012-04-01T00:00:00Z", "--store", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert "whose studies read dataset 'live' themselves" in err
    assert "typestrict data append live --table TABLE FILE.csv" in err
    # A workflow whose data a tick cannot read still takes the signal.
    assert main(["schedule", "data-arrived", "w", "regime-demo", "2015-02-10T00:00:00Z", "--store", sqlite_url]) == 0


def test_two_rows_with_the_same_times_and_different_values_are_refused_in_register_and_append(home: Path) -> None:
    """Which one a backtest read depended on the file's order: refused with the file, both rows
    (1-based data rows) and the column; nothing is written."""
    lines = (home / "start.csv").read_text().splitlines()
    cells = lines[41].split(",")
    other = ",".join([*cells[:3], "99", *cells[4:]])  # temp_max differs
    conflict = write(home / "conf.csv", *lines[1:42], other, *lines[42:])
    with pytest.raises(DatasetError) as info:
        register_dataset("conf", "seattle_rain", {"weather": conflict})
    assert str(info.value) == (
        f"{conflict}, row 42, column 'temp_max': expected one row per event_time and known_time in table "
        "'weather' (two rows about the same time known at the same time must agree in every cell), got rows 41 "
        f"and 42 both about event_time {cells[0]} known at {cells[1]}, with temp_max {float(cells[3])} and 99.0. "
        "Keep the right one of them: a correction is a new row about the same event_time with a later known_time.")
    assert not (home / "datasets" / "conf").exists()

    before = (home / "datasets" / "live" / "weather.csv").read_bytes()
    new = [f"2012-03-0{d}T00:00:00Z,2012-03-0{d + 1}T00:00:00Z,1.0,10,5,3,rain" for d in (1, 2, 3)]
    appended = write(home / "more.csv", *new, new[1].replace(",rain", ",sun"))
    with pytest.raises(DatasetError, match=r"more.csv, row 4, column 'weather': expected one row per event_time "
                                           r"and known_time .* got rows 2 and 4 both about event_time "
                                           r"2012-03-02T00:00:00Z known at 2012-03-03T00:00:00Z, with weather "
                                           r"'rain' and 'sun'\. Keep the right one of them: a correction is a new "
                                           r"row about the same event_time with a later known_time\."):
        append_rows("live", "weather", appended)
    # Across the table and the appended rows: a row with the times of a row already known.
    last = lines[-1].split(",")
    again = write(home / "again.csv", ",".join([*last[:2], "7.5", *last[3:]]))
    with pytest.raises(DatasetError, match=r"again.csv, row 1, column 'known_time': expected rows known after the "
                                           r".* a correction is a new row about the same event_time with a later "
                                           r"known_time"):
        append_rows("live", "weather", again)
    assert (home / "datasets" / "live" / "weather.csv").read_bytes() == before


def test_rows_identical_in_every_cell_are_stored_and_counted_once(home: Path) -> None:
    lines = (home / "start.csv").read_text().splitlines()
    twice = write(home / "twice.csv", *lines[1:], *lines[20:30])
    info = register_dataset("twice", "seattle_rain", {"weather": twice})
    assert info.tables[0].rows == 60
    stored = (home / "datasets" / "twice" / "weather.csv").read_text()
    assert stored == (home / "datasets" / "live" / "weather.csv").read_text()
    new = [f"2012-03-0{d}T00:00:00Z,2012-03-0{d + 1}T00:00:00Z,,10,5,3,rain" for d in (1, 2)]  # a missing value
    r = append_rows("twice", "weather", write(home / "more.csv", new[0], new[1], new[0]))
    assert (r.added, r.rows) == (2, 62)
    assert load_dataset("twice")["weather"].n_rows == 62


@pytest.mark.parametrize("head", [HEAD.strip() + ",\n", HEAD.replace(",wind,", ",,")])
def test_a_header_column_without_a_name_is_refused_at_the_header_by_register_and_append(
        home: Path, head: str) -> None:
    row = "2012-03-01T00:00:00Z,2012-03-02T00:00:00Z,1.0,10,5,3,rain" + ("," if head.endswith(",\n") else "")
    position, after = (8, "weather") if head.endswith(",\n") else (6, "temp_min")
    bad = write(home / "bad.csv", row, head=head)
    match = (rf"^{bad}: expected a name for every column of the header, got an empty name for column {position} "
             rf"\(after '{after}'\)\. Name the column, or remove it")
    with pytest.raises(DatasetError, match=match):
        register_dataset("other", "seattle_rain", {"weather": bad})
    with pytest.raises(DatasetError, match=match):
        append_rows("live", "weather", bad)


@pytest.mark.parametrize(("head", "got"), [
    (HEAD.replace(",wind,", ",,").strip() + ",\n", "got an empty name for columns 6 and 8"),
    (HEAD.replace(",wind,", ",temp_max,"), "got the column name 'temp_max' twice (columns 4 and 6)"),
])
def test_a_header_name_given_twice_is_refused_with_both_positions(home: Path, head: str, got: str) -> None:
    """Two columns without a name were "the column name '' twice", with no position."""
    row = "2012-03-01T00:00:00Z,2012-03-02T00:00:00Z,1.0,10,5,3,rain" + ("," if head.endswith(",\n") else "")
    bad = write(home / "bad.csv", row, head=head)
    with pytest.raises(DatasetError, match=rf"^{bad}: expected .*, {re.escape(got)}\. "):
        register_dataset("other", "seattle_rain", {"weather": bad})
    with pytest.raises(DatasetError, match=rf"^{bad}: expected .*, {re.escape(got)}\. "):
        append_rows("live", "weather", bad)


def test_cli_register_refuses_an_empty_column_name_with_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It was "unexpected error ValueError: no field of name" (exit 1)."""
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    write_seattle_csv(tmp_path / "a.csv", known_until=CUT)
    lines = (tmp_path / "a.csv").read_text().splitlines()
    bad = write(tmp_path / "e.csv", *(f"{line},5" for line in lines[1:]), head=lines[0] + ",\n")
    assert main(["data", "register", "wx", "--workflow", "seattle_rain", "--table", f"weather={bad}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"typestrict: {bad}: expected a name for every column of the header, got an empty name "
                          "for column 8 (after 'weather')"), err
