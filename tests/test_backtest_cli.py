"""``typestrict backtest ...``, ``typestrict run`` and ``typestrict usage``, in process."""

import re
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.cli import main


@pytest.fixture
def store(tmp_path: Path) -> list[str]:
    return ["--store-url", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"]


def test_backtest_run_prints_the_run_card_then_list_show_live_and_usage(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-30",
                 "--standin-latency", "0", "--param", "lookback_days=3", *store])
    out = capsys.readouterr().out
    assert code == 0
    assert "Backtest run card: seattle_rain @ v" in out and "[HISTORICAL]" in out
    assert "steps           30 run of 30 planned" in out and "lookback_days=3" in out
    found = re.search(r"backtest id\s+([0-9a-f]{32})", out)
    assert found is not None, out
    bid = found.group(1)

    assert main(["backtest", "list", *store]) == 0
    assert bid in capsys.readouterr().out
    assert main(["backtest", "show", bid, *store]) == 0
    assert "30 run of 30 planned" in capsys.readouterr().out

    assert main(["run", "seattle_rain", "--as-of", "2016-01-01", "--standin-latency", "0", *store]) == 0
    live = capsys.readouterr().out
    assert "[LIVE]" in live and "as of           2016-01-01T00:00:00Z" in live

    assert main(["usage", "demo", *store]) == 0
    usage = capsys.readouterr().out
    assert "By day" in usage and "By workflow" in usage
    assert re.search(r"Total: HISTORICAL \$0\.000\d+, LIVE \$0\.000011", usage)


def test_bad_input_exits_2_with_the_message(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-30",
                 "--step", "7d", *store])
    assert code == 2
    err = capsys.readouterr().err
    assert "expected a step size that fits the time range a whole number of times" in err
    assert main(["backtest", "run", "nope", "--start", "2013-06-01", "--end", "2013-06-30", *store]) == 2
    assert "expected a registered workflow, got 'nope' (registered: seattle_rain)" in capsys.readouterr().err
    assert main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-30",
                 "--step", "fortnight", *store]) == 2
    assert ("expected a step size like 1d, 12h, 30m, 45s or 1w, at most 366 days, got 'fortnight'"
            in capsys.readouterr().err)


def test_a_csv_without_knowledge_times_is_refused(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "weather.csv"
    csv.write_text("event_time,precipitation\n2013-01-01T00:00:00Z,0.0\n")
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2013-01-02",
                 "--end", "2013-01-02", *store])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{csv}: expected a column 'known_time' with the time each row became known" in err


def _seattle_lines(path: Path) -> list[str]:
    import datetime as dt

    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    write_seattle_csv(path, known_until=dt.datetime(2013, 1, 1, tzinfo=dt.UTC))
    return path.read_text().splitlines()


@pytest.mark.parametrize(
    ("change", "row", "got"),
    [
        (lambda cells: cells[:3], 6, "got 3 cells"),  # a short row: was padded with NaN and run
        (lambda cells: [*cells, "extra"], 6, "got 8 cells"),  # a long row: was a raw pandas error
    ],
    ids=["short row", "long row"],
)
def test_a_csv_row_with_more_or_fewer_cells_than_the_header_is_refused_with_its_row(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, row: int, got: str
) -> None:
    csv = tmp_path / "weather.csv"
    lines = _seattle_lines(csv)
    lines[row] = ",".join(change(lines[row].split(",")))  # line 6 is data row 6 (the header is line 0)
    csv.write_text("\n".join(lines) + "\n")
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                 "--end", "2012-06-30", "--standin-latency", "0", *store])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{csv}, row {row}: expected 7 cells, like the header, {got}. Make every row have one cell" in err
    assert "Traceback" not in err
    assert not Path(store[1].removeprefix("sqlite:///")).exists()  # refused before the store opens


def test_every_row_one_cell_longer_than_the_header_is_refused_not_read_as_an_index(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pandas reads a header one cell short of every row as "the first column is the index"."""
    csv = tmp_path / "weather.csv"
    lines = _seattle_lines(csv)
    csv.write_text("\n".join([lines[0], *(f"{line},x" for line in lines[1:])]) + "\n")
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                 "--end", "2012-06-30", "--standin-latency", "0", *store])
    err = capsys.readouterr().err
    assert code == 2 and f"{csv}, row 1: expected 7 cells, like the header, got 8 cells." in err, err


def test_a_csv_with_a_bom_and_blank_lines_runs(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the product's CSV rules accept (a spreadsheet's BOM, blank lines) still runs."""
    csv = tmp_path / "weather.csv"
    lines = _seattle_lines(csv)
    csv.write_bytes(b"\xef\xbb\xbf" + "\n".join([*lines[:10], "", *lines[10:]]).encode() + b"\n\n")
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                 "--end", "2012-06-30", "--standin-latency", "0", *store])
    out = capsys.readouterr().out
    assert code == 0 and "steps           30 run of 30 planned" in out, out


def test_activate_changes_what_runs(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backtest", "activate", "seattle_rain", "--param", "threshold=0.7", *store]) == 0
    activated = capsys.readouterr().out
    found = re.search(r"version (v[0-9a-f]{16}) is now active", activated)
    assert found is not None, activated
    vid = found.group(1)
    assert main(["run", "seattle_rain", "--as-of", "2016-01-01", "--standin-latency", "0", *store]) == 0
    assert f"seattle_rain @ {vid}" in capsys.readouterr().out


def test_workflows_lists_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backtest", "workflows"]) == 0
    out = capsys.readouterr().out
    assert "seattle_rain" in out and "active" in out and "whether the next day" in out
    assert out.splitlines()[1].split()[:3] == ["workflow", "version", "active"]  # a header


def test_workflows_lists_the_columns_a_dataset_needs_as_the_api_does(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from typestrict_pipeline.api.backtests import workflows

    api = {w["workflow"]: w["columns"] for w in workflows()}
    assert main(["backtest", "workflows", "--json", *store[:2]]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["columns"] == api[r["workflow"]] for r in rows)  # one field, one spelling
    assert main(["backtest", "workflows", *store[:2]]) == 0
    out = capsys.readouterr().out
    assert ("weather: event_time (time), known_time (time), precipitation (number), temp_max (number), "
            "temp_min (number), wind (number), weather (text)") in out


def test_data_its_workflow_cannot_read_is_refused_before_a_backtest_or_a_study_is_stored(
    typestrict_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import datetime as dt
    import json

    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    csv = tmp_path / "weather.csv"
    write_seattle_csv(csv, known_until=dt.datetime(2013, 1, 1, tzinfo=dt.UTC))
    lines = csv.read_text().splitlines()
    cells = lines[7].split(",")
    lines[7] = ",".join([*cells[:2], "lots", *cells[3:]])
    csv.write_text("\n".join(lines) + "\n")
    store = ["--store-url", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"]
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                 "--end", "2012-06-30", "--standin-latency", "0", *store])
    assert code == 2
    err = capsys.readouterr().err
    assert "row 7, column 'precipitation': expected a number in column 'precipitation'" in err and "'lots'" in err
    # A dataset stored before registering checked its columns: a study on it is refused too.
    folder = typestrict_home / "datasets" / "old"
    folder.mkdir(parents=True)
    (folder / "weather.csv").write_text("\n".join(",".join(r.split(",")[:3]) for r in lines) + "\n")
    (folder / "dataset.json").write_text(json.dumps({"name": "old", "workflow": "seattle_rain",
                                                     "tables": {"weather": "weather.csv"}}))
    study = ["study", "run", "seattle_rain", "--dataset", "old", "--start", "2012-02-01", "--end", "2012-12-31",
             "--folds", "2", "--tune-steps", "30", "--eval-steps", "20", "--holdout-steps", "30",
             "--grid", "threshold=0.4,0.6", "--max-candidates", "2", "--max-total-steps", "1000", *store]
    assert main(study) == 2
    err = capsys.readouterr().err
    assert "missing: temp_max, temp_min, wind, weather" in err and "seattle_rain" in err
    from sqlalchemy import func, select

    from typestrict_pipeline.backtest.store import list_backtests
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.tables import StudyRow

    engine = open_store(store[1])
    try:
        assert list_backtests(engine, workspace="demo") == []  # nothing stored, nothing launched
        with session_scope(engine) as s:
            assert s.execute(select(func.count()).select_from(StudyRow)).scalar_one() == 0
    finally:
        engine.dispose()


def test_two_rows_with_the_same_times_and_different_values_are_refused_whatever_their_order(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Which of two such rows a step read depended on the file's order (the score changed with it):
    both orders are refused, naming the file, both rows and the column."""
    lines = _seattle_lines(tmp_path / "base.csv")
    cells = lines[41].split(",")
    other = ",".join([*cells[:2], "50.0" if cells[2] != "50.0" else "0.0", *cells[3:]])
    for name, rows, first, second in (("a.csv", [*lines[:42], other, *lines[42:]], cells[2], "50.0"),
                                      ("b.csv", [*lines[:41], other, *lines[41:]], "50.0", cells[2])):
        csv = tmp_path / name
        csv.write_text("\n".join(rows) + "\n")
        code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                     "--end", "2012-06-30", "--standin-latency", "0", *store])
        err = capsys.readouterr().err
        assert code == 2, err
        assert (f"{csv}, row 42, column 'precipitation': expected one row per event_time and known_time in table "
                f"'weather'") in err, err
        assert (f"got rows 41 and 42 both about event_time {cells[0]} known at {cells[1]}, with precipitation "
                f"{float(first)} and {float(second)}. Keep the right one of them: a correction is a new row about "
                "the same event_time with a later known_time.") in err, err
    # Rows identical in every cell are one fact: the run is the run of the file without the copy.
    once, twice = tmp_path / "once.csv", tmp_path / "twice.csv"
    once.write_text("\n".join(lines) + "\n")
    twice.write_text("\n".join([*lines[:42], *lines[30:42], *lines[42:]]) + "\n")
    scores = []
    for csv in (once, twice):
        assert main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-02-05",
                     "--end", "2012-02-25", "--standin-latency", "0", *store]) == 0
        found = re.search(r"mean score\s+(\S+)", capsys.readouterr().out)
        assert found is not None
        scores.append(found.group(1))
    assert scores[0] == scores[1]


def test_a_csv_header_with_an_empty_column_name_is_refused_at_the_header(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A comma at the end of the header line (pandas named the column 'Unnamed: 7' and ran)."""
    csv = tmp_path / "weather.csv"
    lines = _seattle_lines(csv)
    csv.write_text("\n".join([lines[0] + ",", *(f"{line},5" for line in lines[1:])]) + "\n")
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                 "--end", "2012-06-30", "--standin-latency", "0", *store])
    err = capsys.readouterr().err
    assert code == 2, err
    assert (f"typestrict: {csv}: expected a name for every column of the header, got an empty name for column 8 "
            "(after 'weather'). Name the column, or remove it") in err


def test_a_cell_the_workflow_cannot_read_names_the_csv_and_advises_on_the_file(
    store: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "register the dataset again": the data came from --csv."""
    csv = tmp_path / "weather.csv"
    lines = _seattle_lines(csv)
    cells = lines[6].split(",")
    lines[6] = ",".join([*cells[:2], "nan", *cells[3:]])
    csv.write_text("\n".join(lines) + "\n")
    code = main(["backtest", "run", "seattle_rain", "--csv", str(csv), "--start", "2012-06-01",
                 "--end", "2012-06-30", "--standin-latency", "0", *store])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"typestrict: {csv}, row 6, column 'precipitation': expected a number in column "
                          "'precipitation' of table 'weather' of the --csv file"), err
    assert "got 'nan'. Correct the cell in the file, or leave it empty when the value is missing" in err
    assert "egister" not in err
