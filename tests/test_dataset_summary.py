"""An append and ``dataset_info`` answer from the table's summary, without reading its rows.

``append_rows`` read the whole stored table (``pd.read_csv``) for its columns' kinds and its last
knowledge time, and the API's answer (``dataset_info``) read it again: 10 rows appended to
2,500,000 cost 3.4 s and +498 MB (docs/api.md). Each table now has a summary beside it, written
under the dataset's lock right after the table and trusted only while the table file's size,
``mtime_ns`` and inode are those it was written with; otherwise the table is read as before. The
answers, stored bytes and refusals are the previous code's (``tests/dataset_reference.py``).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from tests import dataset_reference as ref
from tests.test_dataset_rows_reference import HEAD, NOW, _day, _file, _outcome
from typestrict_pipeline import files
from typestrict_pipeline.backtest.pit import EVENT_TIME, KNOWN_TIME, PointInTimeTable
from typestrict_pipeline.backtest.workflows import dataset_summary, datasets
from typestrict_pipeline.backtest.workflows.dataset_summary import (
    cell_classes,
    read_summary,
    summary_path,
)
from typestrict_pipeline.backtest.workflows.datasets import (
    TableInfo,
    append_rows,
    dataset_info,
    register_dataset,
)
from typestrict_pipeline.errors import DatasetError


def _rows(days: range, weather: list[str] | None = None) -> bytes:
    cells = weather or ["rain"] * len(days)
    return _file(*(_day(d) + f",{d / 4},{d},-1,0.5,{w}" for d, w in zip(days, cells, strict=True)))


def _registered(tmp_path: Path, content: bytes) -> tuple[Path, Path]:
    (tmp_path / "w.csv").write_bytes(content)
    register_dataset("d", "seattle_rain", {"weather": tmp_path / "w.csv"}, base=tmp_path / "ds", now=NOW)
    return tmp_path / "ds", tmp_path / "ds" / "d" / "weather.csv"


def _read_info(target: Path) -> TableInfo:
    """What ``dataset_info`` answers from a read of the table (the previous code)."""
    pit = PointInTimeTable.from_csv(target, "weather")
    return TableInfo("weather", target, pit.n_rows, (EVENT_TIME, KNOWN_TIME, *pit.columns),
                     pit.first_known, pit.last_known)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every data file read whole (the stored table's rows are read only so)."""
    seen: list[Path] = []
    read = files.read_data_file

    def counting(path: Any, *args: Any, **kwargs: Any) -> bytes:
        seen.append(Path(path).resolve())
        return read(path, *args, **kwargs)

    monkeypatch.setattr(files, "read_data_file", counting)
    return seen


def test_an_append_and_the_answer_read_none_of_the_stored_rows(tmp_path: Path, reads: list[Path]) -> None:
    base, target = _registered(tmp_path, _rows(range(50)))
    (tmp_path / "more.csv").write_bytes(_rows(range(60, 63)))
    reads.clear()

    result = append_rows("d", "weather", tmp_path / "more.csv", base=base, now=NOW)
    info = dataset_info("d", base=base)

    assert target.resolve() not in reads, "the stored table was read"
    assert reads == [(tmp_path / "more.csv").resolve()]
    assert (result.added, result.rows) == (3, 53)
    assert result.last_known_before == dt.datetime(2012, 2, 20, tzinfo=dt.UTC)
    assert result.last_known_after == dt.datetime(2012, 3, 4, tzinfo=dt.UTC)
    assert info.tables == (_read_info(target),) and info.tables[0].rows == 53


def test_a_table_changed_by_hand_is_read_and_its_summary_written_again(tmp_path: Path, reads: list[Path]) -> None:
    base, target = _registered(tmp_path, _rows(range(50)))
    with target.open("ab") as table:  # a row added by hand: the summary says 50 rows
        table.write(_rows(range(55, 56)).split(b"\n", 1)[1])
    assert read_summary(target) is None
    assert dataset_info("d", base=base).tables == (_read_info(target),)
    assert dataset_info("d", base=base).tables[0].rows == 51

    (tmp_path / "early.csv").write_bytes(_rows(range(52, 53)))  # after the summary's last time, not the table's
    with pytest.raises(DatasetError, match=r"after the table's last knowledge time 2012-02-26T00:00:00Z"):
        append_rows("d", "weather", tmp_path / "early.csv", base=base, now=NOW)

    (tmp_path / "more.csv").write_bytes(_rows(range(60, 62)))
    result = append_rows("d", "weather", tmp_path / "more.csv", base=base, now=NOW)
    assert (result.rows, result.last_known_before) == (53, dt.datetime(2012, 2, 26, tzinfo=dt.UTC))
    assert read_summary(target) is not None and read_summary(target).rows == 53  # type: ignore[union-attr]

    reads.clear()
    (tmp_path / "last.csv").write_bytes(_rows(range(70, 71)))
    assert append_rows("d", "weather", tmp_path / "last.csv", base=base, now=NOW).rows == 54
    assert target.resolve() not in reads
    assert dataset_info("d", base=base).tables == (_read_info(target),)


def test_a_crash_between_the_table_and_its_summary_leaves_the_old_summary_untrusted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, target = _registered(tmp_path, _rows(range(50)))
    before = summary_path(target).read_bytes()
    monkeypatch.setattr(datasets, "write_summary", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    (tmp_path / "more.csv").write_bytes(_rows(range(60, 63)))
    with pytest.raises(KeyboardInterrupt):
        append_rows("d", "weather", tmp_path / "more.csv", base=base, now=NOW)
    monkeypatch.undo()

    assert summary_path(target).read_bytes() == before and read_summary(target) is None
    assert dataset_info("d", base=base).tables == (_read_info(target),)
    assert dataset_info("d", base=base).tables[0].rows == 53
    (tmp_path / "again.csv").write_bytes(_rows(range(61, 62)))
    with pytest.raises(DatasetError, match=r"last knowledge time 2012-03-04T00:00:00Z"):
        append_rows("d", "weather", tmp_path / "again.csv", base=base, now=NOW)


def test_a_dataset_without_summaries_is_read_then_summarised(tmp_path: Path, reads: list[Path]) -> None:
    base, target = _registered(tmp_path, _rows(range(50)))
    summary_path(target).unlink()  # registered before summaries
    assert dataset_info("d", base=base).tables == (_read_info(target),)
    (tmp_path / "more.csv").write_bytes(_rows(range(60, 63)))
    reads.clear()
    assert append_rows("d", "weather", tmp_path / "more.csv", base=base, now=NOW).rows == 53
    assert target.resolve() in reads and read_summary(target) is not None
    reads.clear()
    (tmp_path / "last.csv").write_bytes(_rows(range(70, 71)))
    assert append_rows("d", "weather", tmp_path / "last.csv", base=base, now=NOW).rows == 54
    assert target.resolve() not in reads


@pytest.mark.parametrize("summary", ["{", '{"version": 1}', '{"version": 1, "stat": [1, 2, 3]}'])
def test_a_damaged_summary_is_not_trusted(tmp_path: Path, summary: str) -> None:
    base, target = _registered(tmp_path, _rows(range(5)))
    summary_path(target).write_text(summary)
    assert read_summary(target) is None
    assert dataset_info("d", base=base).tables == (_read_info(target),)


def test_a_table_past_the_size_bound_is_read_and_refused_as_before(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    base, target = _registered(tmp_path, _rows(range(50)))
    monkeypatch.setenv("TYPESTRICT_MAX_DATA_FILE_BYTES", str(target.stat().st_size - 1))
    (tmp_path / "more.csv").write_bytes(_rows(range(60, 61)))
    assert read_summary(target) is None
    old = _outcome(lambda: ref.append_bytes(target, tmp_path / "more.csv", "weather", NOW))
    assert old[0] == "DatasetError"
    assert _outcome(lambda: append_rows("d", "weather", tmp_path / "more.csv", base=base, now=NOW)) == old


# The kind of a value column is what pandas reads the stored table as, and a text column's kind
# follows its cells: digits read as numbers (the next rows are typed as numbers), True/False as
# truth values, a mix of the two as text. Each step appends the weather cells below (the first
# registers), through both the previous code and the summary, and every answer must agree.
SEQUENCES = {
    "digits": [["1", "2"], ["3"], ["sun"], ["4.5", ""]],
    "truths": [["True", "False"], ["true"], ["sun"], ["", "false"]],
    "truths and digits": [["True", "1"], ["sun"], ["7"]],
    "truth and empty": [["True", ""], ["False"], ["3"]],
    "empty": [[""], ["5"], ["x"], [""]],
    "words like truths": [["rain", " true "], ["TRUE"], ["1"]],
    "NA": [["NA", "7"], ["8"], ["null"]],
    "spaces and numbers": [[" 3 ", "4"], ["1e5"], [" "], ["inf"]],
    "truths then digits": [["True"], ["False"], ["2"], ["x"], ["y"]],
    "digits then truths": [["1"], ["True"], ["2"], ["rain"]],
}


@pytest.mark.parametrize("case", list(SEQUENCES))
def test_appends_from_the_summary_answer_as_a_read_of_the_table(case: str, tmp_path: Path) -> None:
    steps = SEQUENCES[case]
    base, target = _registered(tmp_path, _rows(range(len(steps[0])), steps[0]))
    day = 100
    for i, cells in enumerate(steps[1:]):
        src = tmp_path / f"step{i}.csv"
        src.write_bytes(_rows(range(day, day + len(cells)), cells))
        day += 10
        stored = target.read_bytes()
        old = _outcome(lambda: ref.append_bytes(target, src, "weather", NOW))  # noqa: B023

        def new() -> tuple[Any, ...]:
            r = append_rows("d", "weather", src, base=base, now=NOW)  # noqa: B023
            return (target.read_bytes()[len(stored):], r.added, r.rows, r.last_known_before, r.last_known_after)  # noqa: B023

        assert _outcome(new) == old, f"step {i + 1}"
        assert dataset_info("d", base=base).tables == (_read_info(target),)
        summary = read_summary(target)
        assert summary is not None
        if summary.kinds is not None:
            assert summary.kinds == ref._kinds_of(pd.read_csv(io.BytesIO(target.read_bytes()),
                                                              keep_default_na=False, na_values=[""]))


@pytest.mark.parametrize(("cells", "classes"), [
    (["1", "2.5", "", "1e16", "-0.0"], "N"), (["True", "False", "TRUE", "false"], "B"),
    (["True", "1"], "BN"), (["True", ""], "BN"), (["rain", "1", "True"], "BO"), (["a, b", '"q"'], "O"),
    ([" true "], "O"), (["NA"], "O"), (["", ""], "N"),
])
def test_cell_classes_are_what_pandas_reads_each_cell_as(cells: list[str], classes: str) -> None:
    got = cell_classes(pa.chunked_array([pa.array(cells)]))
    assert got == classes
    if dataset_summary.kind_of(got) is not None:  # one chunk: what pandas reads the column as
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([["i", "v"], *(["0", c] for c in cells)])
        frame = pd.read_csv(io.BytesIO(text.getvalue().encode()), keep_default_na=False, na_values=[""])
        assert dataset_summary.kind_of(got) == ref._kinds_of(frame)["v"]


def test_the_header_of_the_table_is_the_summary_s_columns(tmp_path: Path) -> None:
    content = _file(*("1,2,3,4,sun," + _day(i) for i in range(3)),
                    head="precipitation,temp_max,temp_min,wind,weather,event_time,known_time")
    base, target = _registered(tmp_path, content)
    summary = read_summary(target)
    assert summary is not None and summary.columns == tuple(target.read_text().split("\n", 1)[0].split(","))
    assert dataset_info("d", base=base).tables == (_read_info(target),)
    assert HEAD.split(",")[0] == EVENT_TIME
