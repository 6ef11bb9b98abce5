"""Point-in-time tables and views: only rows known at t, no path to later rows, clear errors."""

import datetime as dt
import gc
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.backtest.pit import PointInTimeTable, PointInTimeView, to_datetime64
from typestrict_pipeline.errors import DatasetError, LookAheadError, NotFoundError

T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def daily(n: int, block_rows: int = 4) -> PointInTimeTable:
    return PointInTimeTable(
        "x",
        event_time=[T0 + i * DAY for i in range(n)],
        known_time=[T0 + (i + 1) * DAY for i in range(n)],
        columns={"v": np.arange(n, dtype=float), "label": [f"r{i}" for i in range(n)]},
        block_rows=block_rows,
    )


def test_view_holds_exactly_the_rows_known_at_t() -> None:
    table = daily(10)
    for k in range(0, 11):
        view = table.view(T0 + k * DAY)
        assert len(view) == k
        assert view.column("v").tolist() == list(range(k))
        assert view.tail(3, "v").tolist() == list(range(max(0, k - 3), k))


def test_arrays_from_a_view_are_read_only() -> None:
    view = daily(10).view(T0 + 7 * DAY)
    with pytest.raises(ValueError, match="read-only"):
        view.column("v")[0] = 99.0
    with pytest.raises(ValueError, match="read-only"):
        view.tail(2)["v"][0] = 99.0


def _reachable_arrays(root: object, limit: int = 10_000) -> list[np.ndarray]:
    """Every numpy array reachable from ``root`` through references (gc.get_referents)."""
    seen: set[int] = set()
    stack: list[Any] = [root]
    arrays: list[np.ndarray] = []
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            if obj.dtype.names:  # a structured block: check each column
                arrays.extend(obj[name] for name in obj.dtype.names)
            else:
                arrays.append(obj)
            if obj.base is not None:
                stack.append(obj.base)
            continue
        if isinstance(obj, PointInTimeView):
            stack.extend(getattr(obj, s) for s in PointInTimeView.__slots__)
            continue
        if type(obj).__name__ == "_Block":
            stack.extend((obj.cols, obj.prev))
            continue
        stack.extend(gc.get_referents(obj))
    return arrays


@pytest.mark.parametrize("k", [0, 1, 3, 4, 5, 8, 9, 17, 40])
def test_no_reference_path_from_a_view_to_a_later_row(k: int) -> None:
    """The guarantee is structural: the view's object graph holds no row known after t."""
    table = daily(41, block_rows=4)
    t = T0 + k * DAY
    view = table.view(t)
    view.column("v")  # fill the cache too
    view.tail(5)
    limit = to_datetime64(t)
    arrays = _reachable_arrays(view)
    known = [a for a in arrays if a.dtype == np.dtype("datetime64[us]")]
    values = [a for a in arrays if a.dtype == np.float64]
    assert all((a <= limit + np.timedelta64(1, "D")).all() for a in known)  # event <= known <= t
    assert all((a < k).all() for a in values), "a value of a later row is reachable"
    assert not any(isinstance(x, PointInTimeTable) for x in gc.get_referents(view))


def test_reading_the_future_raises_look_ahead_error() -> None:
    view = daily(10).view(T0 + 5 * DAY)
    with pytest.raises(LookAheadError, match=r"table 'x': expected a read of rows known at or before the step's time 2020-01-06T00:00:00Z, got a read of the row about 2020-01-06T00:00:00Z"):
        view.get("v", T0 + 5 * DAY)
    with pytest.raises(LookAheadError, match="rows known until 2020-01-07"):
        view.rows(until=T0 + 6 * DAY)
    with pytest.raises(LookAheadError, match="a view as of 2020-01-07"):
        view.at(T0 + 6 * DAY)
    assert view.get("v", T0 + 4 * DAY) == 4.0
    assert len(view.at(T0 + 2 * DAY)) == 2


def test_a_missing_past_row_is_not_found_not_look_ahead() -> None:
    table = PointInTimeTable("x", event_time=[T0, T0 + 2 * DAY], known_time=[T0 + DAY, T0 + 3 * DAY],
                             columns={"v": [1.0, 3.0]})
    view = table.view(T0 + 5 * DAY)
    with pytest.raises(NotFoundError, match="expected a row about 2020-01-02T00:00:00Z"):
        view.get("v", T0 + DAY)


def test_revisions_the_latest_known_version_wins_and_never_back_fills() -> None:
    # Day 0 is first reported as 1.0 (known day 1), revised to 1.5 on day 3.
    table = PointInTimeTable(
        "x",
        event_time=[T0, T0 + DAY, T0],
        known_time=[T0 + DAY, T0 + 2 * DAY, T0 + 3 * DAY],
        columns={"v": [1.0, 2.0, 1.5]},
    )
    assert table.view(T0 + 2 * DAY).get("v", T0) == 1.0
    assert table.view(T0 + 3 * DAY).get("v", T0) == 1.5


def test_frame_has_utc_times() -> None:
    frame = daily(5).view(T0 + 3 * DAY).frame()
    assert list(frame.columns) == ["event_time", "known_time", "v", "label"]
    assert str(frame["known_time"].dt.tz) == "UTC"
    assert len(frame) == 3


def test_data_without_knowledge_times_is_refused_clearly() -> None:
    df = pd.DataFrame({"event_time": ["2020-01-01T00:00:00Z"], "v": [1.0]})
    with pytest.raises(DatasetError, match=r"expected a column 'known_time' with the time each row became known, got columns \['event_time', 'v'\]"):
        PointInTimeTable.from_frame("x", df, file="data.csv")


def test_an_empty_knowledge_time_names_its_row() -> None:
    df = pd.DataFrame({"event_time": ["2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"],
                       "known_time": ["2020-01-02T00:00:00Z", None], "v": [1.0, 2.0]})
    with pytest.raises(DatasetError, match=r"data.csv, row 2, column 'known_time': expected a time in every row"):
        PointInTimeTable.from_frame("x", df, file="data.csv")


def test_a_value_that_is_not_a_time_names_its_row() -> None:
    df = pd.DataFrame({"event_time": ["2020-01-01T00:00:00Z", "yesterday"],
                       "known_time": ["2020-01-02T00:00:00Z", "2020-01-03T00:00:00Z"], "v": [1.0, 2.0]})
    with pytest.raises(DatasetError, match=r"d.csv, row 2, column 'event_time': expected a time in ISO 8601 with a UTC offset \(for example 2012-01-02T00:00:00Z\), got 'yesterday'"):
        PointInTimeTable.from_frame("x", df, file="d.csv")


def test_times_without_zone_are_refused() -> None:
    df = pd.DataFrame({"event_time": ["2020-01-01"], "known_time": ["2020-01-02"], "v": [1.0]})
    with pytest.raises(DatasetError, match="timezone-aware times in 'event_time'"):
        PointInTimeTable.from_frame("x", df)


def test_csv_round_trip(tmp_path: Any) -> None:
    path = tmp_path / "d.csv"
    path.write_text("event_time,known_time,v\n2020-01-01T00:00:00Z,2020-01-02T00:00:00Z,1.5\n")
    table = PointInTimeTable.from_csv(path)
    assert table.name == "d" and table.view(T0 + DAY).last("v") == 1.5


def test_csv_rows_are_read_by_the_products_csv_rules(tmp_path: Any) -> None:
    head, row = "event_time,known_time,v\n", "2020-01-01T00:00:00Z,2020-01-02T00:00:00Z,1.5\n"
    path = tmp_path / "d.csv"
    path.write_text(head + row + "2020-01-02T00:00:00Z,2020-01-03T00:00:00Z\n")  # pandas pads it with NaN
    with pytest.raises(DatasetError, match=r"d.csv, row 2: expected 3 cells, like the header, got 2 cells"):
        PointInTimeTable.from_csv(path)
    # A line of only "": no row to the product's reader, a row of empty cells to pandas'
    path.write_text(head + row + '""\n' + row.replace("1.5", "2.5"))
    with pytest.raises(DatasetError, match=r'd.csv: expected 2 rows, as the product\'s CSV rules count them'):
        PointInTimeTable.from_csv(path)
    # A cell longer than the csv module's default limit (128 KiB) is read whole, typed as text
    path.write_text(head + row.replace("1.5", "x" * 200_000))
    assert PointInTimeTable.from_csv(path).cells("v")[0] == "x" * 200_000


def test_only_an_empty_cell_is_a_missing_value_in_a_csv_table(tmp_path: Any) -> None:
    """A text cell 'NA', 'null' or 'None' is replayed as that text (as ``typestrict data register``
    reads it), not as a missing value; an empty cell is missing."""
    path = tmp_path / "d.csv"
    path.write_text("event_time,known_time,weather,mm\n"
                    "2020-01-01T00:00:00Z,2020-01-02T00:00:00Z,NA,1.5\n"
                    "2020-01-02T00:00:00Z,2020-01-03T00:00:00Z,null,\n"
                    "2020-01-03T00:00:00Z,2020-01-04T00:00:00Z,None,2\n")
    table = PointInTimeTable.from_csv(path)
    assert table.cells("weather").tolist() == ["NA", "null", "None"]
    mm = table.cells("mm").astype(float)
    assert mm[0] == 1.5 and np.isnan(mm[1]) and mm[2] == 2.0


def test_truncated_and_poisoned_keep_the_past() -> None:
    table = daily(30)
    cut = T0 + 12 * DAY
    truncated = table.truncated(cut)
    assert truncated.n_rows == 12
    poisoned = table.poisoned(cut, seed=1)
    assert poisoned.n_rows == 30
    past = poisoned.view(cut).column("v")
    assert past.tolist() == list(range(12))
    future = poisoned.view(T0 + 30 * DAY).column("v")[12:]
    assert not np.array_equal(future, np.arange(12, 30, dtype=float))
    # Deterministic for a seed.
    again = table.poisoned(cut, seed=1).view(T0 + 30 * DAY).column("v")
    assert np.array_equal(again, poisoned.view(T0 + 30 * DAY).column("v"))


@settings(max_examples=60, deadline=None)
@given(
    known_offsets=st.lists(st.integers(0, 50), min_size=1, max_size=60),
    block=st.integers(1, 9),
    probe=st.integers(-1, 55),
)
def test_view_equals_brute_force_filter(known_offsets: list[int], block: int, probe: int) -> None:
    """Property: for any rows, block size and time, the view is exactly {rows: known_time <= t}."""
    n = len(known_offsets)
    known = [T0 + k * DAY for k in known_offsets]
    # Rows known at the same time are about distinct times (one row per event_time and known_time).
    events = [T0 + (k - 1) * DAY + i * dt.timedelta(seconds=1) for i, k in enumerate(known_offsets)]
    values = np.arange(n, dtype=float)
    table = PointInTimeTable("x", event_time=events, known_time=known, columns={"v": values},
                             block_rows=block)
    t = T0 + probe * DAY
    view = table.view(t)
    expected = sorted(i for i in range(n) if known[i] <= t)
    got = sorted(int(v) for v in view.column("v"))
    assert got == expected
    assert len(view) == len(expected)
    tail = view.tail(3, "v")
    assert len(tail) == min(3, len(expected))


def test_times_with_different_offsets_are_one_kind_of_time_in_utc() -> None:
    df = pd.DataFrame({"event_time": ["2012-01-05T00:00:00Z", "2012-01-06T14:00:00+14:00"],
                       "known_time": ["2012-01-06T00:00:00Z", "2012-01-06T12:00:00-12:00"], "v": [1.0, 2.0]})
    table = PointInTimeTable.from_frame("x", df, file="d.csv")
    assert table.first_known == dt.datetime(2012, 1, 6, tzinfo=dt.UTC)
    assert table.last_known == dt.datetime(2012, 1, 7, tzinfo=dt.UTC)
    assert table.view(table.last_known).get("v", dt.datetime(2012, 1, 6, tzinfo=dt.UTC)) == 2.0


@pytest.mark.parametrize(("times", "match"), [
    (["2012-01-05T00:00:00Z", "2012-01-06T00:00:00"],
     r"d.csv, row 2, column 'event_time': expected timezone-aware times in 'event_time' .*got '2012-01-06T00:00:00'"),
    (["2012-01-05T00:00:00Z", "2012-01-06"], r"d.csv, row 2, column 'event_time': expected timezone-aware"),
    (["0001-01-01T00:00:00Z", "2012-01-06T00:00:00Z"],
     r"d.csv, row 1, column 'event_time': expected a time from 1900-01-01 to 2199-12-31"),
])
def test_a_time_without_offset_or_out_of_range_names_its_row(times: list[str], match: str) -> None:
    df = pd.DataFrame({"event_time": times, "known_time": ["2012-01-06T00:00:00Z", "2012-01-07T00:00:00Z"],
                       "v": [1.0, 2.0]})
    with pytest.raises(DatasetError, match=match):
        PointInTimeTable.from_frame("x", df, file="d.csv")


def test_a_file_of_many_columns_without_the_workflows_column_gets_a_short_message() -> None:
    """A customer's file of 20,000 columns that lacks one the workflow reads: the refusal names
    the missing column and lists twenty of the file's columns with how many more (not all)."""
    from typestrict_pipeline.backtest.workflow import check_columns
    from typestrict_pipeline.backtest.workflows.weather import TABLE, WEATHER

    cols = {f"c{i}": [1.0] for i in range(20_000)}
    df = pd.DataFrame({"event_time": ["2012-01-01T00:00:00Z"], "known_time": ["2012-01-02T00:00:00Z"],
                       **cols})
    table = PointInTimeTable.from_frame(TABLE, df, file="wide.csv")
    with pytest.raises(DatasetError) as info:
        check_columns(WEATHER, {TABLE: table}, dataset="'wide'")
    text = str(info.value)
    assert "missing: " in text and "temp_max" in text
    assert "… and 19,980 more" in text and len(text) < 2_000, text[:300]


def test_two_rows_with_the_same_times_that_differ_are_refused_naming_both_rows_and_the_column() -> None:
    """A view's get/tail would read one or the other by the rows' order: refused, in any order,
    with the 1-based rows as given (not as sorted) and the first column that differs."""
    df = pd.DataFrame({"event_time": ["2012-01-03T00:00:00Z", "2012-01-01T00:00:00Z", "2012-01-02T00:00:00Z",
                                      "2012-01-01T01:00:00+01:00"],
                       "known_time": ["2012-01-04T00:00:00Z", "2012-01-02T00:00:00Z", "2012-01-03T00:00:00Z",
                                      "2012-01-02T00:00:00Z"],
                       "v": [3.0, 1.0, 2.0, 1.0], "label": ["c", "a", "b", None]})
    with pytest.raises(DatasetError) as info:
        PointInTimeTable.from_frame("x", df, file="d.csv")
    assert str(info.value) == (
        "d.csv, row 4, column 'label': expected one row per event_time and known_time in table 'x' (two rows "
        "about the same time known at the same time must agree in every cell), got rows 2 and 4 both about "
        "event_time 2012-01-01T00:00:00Z known at 2012-01-02T00:00:00Z, with label 'a' and an empty cell. Keep "
        "the right one of them: a correction is a new row about the same event_time with a later known_time.")
    # The same event with a later knowledge time is a revision: accepted, the latest one read.
    df.loc[3, "known_time"] = "2012-01-05T00:00:00Z"
    table = PointInTimeTable.from_frame("x", df, file="d.csv")
    jan = dt.datetime(2012, 1, 1, tzinfo=dt.UTC)
    assert table.view(jan + 4 * DAY).get("label", jan) != "a"  # the revision (a missing label)
    assert table.view(jan + 3 * DAY).get("label", jan) == "a"


def test_rows_identical_in_every_cell_are_one_row_for_every_reader() -> None:
    """The same fact twice (a file pasted into itself): one row, whatever the order, so a tail of
    n rows holds n facts; a missing cell equals a missing cell."""
    rows = {"event_time": [T0 + i * DAY for i in range(6)], "known_time": [T0 + (i + 1) * DAY for i in range(6)],
            "v": [0.0, 1.0, np.nan, 3.0, 4.0, 5.0], "label": ["a", "b", None, "d", "e", "f"]}
    df = pd.DataFrame(rows)
    doubled = pd.concat([df, df.iloc[[4, 1, 2]], df.iloc[[2]]], ignore_index=True)
    once = PointInTimeTable.from_frame("x", df)
    for frame in (doubled, doubled.iloc[::-1].reset_index(drop=True)):
        table = PointInTimeTable.from_frame("x", frame, block_rows=2)
        assert table.n_rows == 6
        view = table.view(T0 + 6 * DAY)
        assert view.tail(3, "label").tolist() == once.view(T0 + 6 * DAY).tail(3, "label").tolist()
        assert np.array_equal(view.column("v"), once.view(T0 + 6 * DAY).column("v"), equal_nan=True)
    assert [PointInTimeTable.from_frame("x", doubled).source_row(i) for i in range(6)] == [1, 2, 3, 4, 5, 6]


def test_the_check_of_repeated_times_keeps_a_million_rows_fast() -> None:
    """One pass over the sorted times; cells compared only where the times repeat."""
    import time

    n = 1_000_000
    ev = np.datetime64("2012-01-01T00:00:00", "us") + np.arange(n).astype("timedelta64[m]")
    twice = np.arange(n) // 2  # every row given twice, identical
    cols = {"v": np.arange(n, dtype=float)[twice], "w": np.array(["rain", "sun"] * (n // 2), dtype=object)[twice]}
    started = time.perf_counter()
    table = PointInTimeTable("x", event_time=ev[twice], known_time=ev[twice] + np.timedelta64(1, "D"),
                             columns=cols)
    assert table.n_rows == n // 2
    assert time.perf_counter() - started < 10  # about 0.3 s on one core
    cols["v"] = cols["v"].copy()
    cols["v"][-1] = -1.0
    with pytest.raises(DatasetError, match=r"row 1000000, column 'v': .* got rows 999999 and 1000000 "):
        PointInTimeTable("x", event_time=ev[twice], known_time=ev[twice] + np.timedelta64(1, "D"), columns=cols)


def test_a_frame_with_a_column_without_a_name_is_refused_at_the_header() -> None:
    df = pd.DataFrame({"event_time": ["2012-01-01T00:00:00Z"], "known_time": ["2012-01-02T00:00:00Z"], "": [1]})
    with pytest.raises(DatasetError, match=r"^d.csv: expected a name for every column of the header, got an empty "
                                           r"name for column 3 \(after 'known_time'\)"):
        PointInTimeTable.from_frame("x", df, file="d.csv")
