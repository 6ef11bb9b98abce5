"""A registered dataset's rows, column by column: read, typed, validated and written in
proportion to the file (:mod:`typestrict_pipeline.backtest.workflows.datasets` uses them).

The rules are those of the rows as a data frame of text cells (a cell at a time in Python, about
45 µs a row and 14 times the file's size in memory); here each column is an Arrow array of the
cells as written, read by Arrow's CSV reader where it reads what the product's CSV reader reads
(else by that reader, a chunk of :data:`CHUNK_ROWS` rows at a time), typed over the whole column,
and every check finds the same first bad cell, with the same message, file, row and column. Only
the cells a fast check cannot vouch for are looked at one by one, by the very functions that
typed every cell before. The rows are written as CSV a chunk at a time, each cell the text
pandas' ``to_csv`` writes for its value and quoted as its ``csv`` writer quotes, so the stored
bytes are those of ``to_csv`` (:mod:`~typestrict_pipeline.backtest.workflows.dataset_csv`;
``tests/test_dataset_rows_reference.py`` and ``tests/test_dataset_csv.py`` hold the two to the
same bytes and errors).
"""

from __future__ import annotations

import codecs
import csv
import datetime as dt
import io
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Union

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.backtest.pit import (
    EVENT_TIME,
    KNOWN_TIME,
    PointInTimeTable,
    _offset_times,
    _one_row_per_times,
    _outside_error,
    _outside_range,
    check_header,
)
from typestrict_pipeline.errors import DatasetError, InputError, listed
from typestrict_pipeline.lazy import LazyModule

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    import pandas as pd
    import pyarrow as pa
else:
    pd = LazyModule("pandas")
    pa = LazyModule("pyarrow")

__all__ = ["CHUNK_ROWS", "Cells", "Rows", "Typed", "csv_bytes", "read_cells", "typed_column", "validated_rows"]

CHUNK_ROWS = 16_384
"""Rows read, parsed or written at a time (the Python objects of one chunk live at once)."""

Typed = Union[npt.NDArray[Any], "pa.ChunkedArray"]
"""A typed value column: numbers (``float64``), truth values (``bool``), or the text cells as
written (an Arrow string array; an empty cell is a missing value)."""


@dataclass(frozen=True)
class Cells:
    """A CSV file's cells as written: the header's names and each column's text."""

    names: tuple[str, ...]
    columns: Mapping[str, pa.ChunkedArray]
    rows: int


@dataclass(frozen=True)
class Rows:
    """Validated rows: each value column typed, the times in microseconds (UTC), and which rows
    are kept (the first of rows identical in every cell)."""

    names: tuple[str, ...]
    values: Mapping[str, Typed]
    event_us: npt.NDArray[np.int64]
    known_us: npt.NDArray[np.int64]
    keep: npt.NDArray[np.bool_]

    @property
    def kept(self) -> int:
        """How many rows are stored."""
        return int(self.keep.sum())


def _check_utf8(path: Path, raw: bytes) -> None:
    """Refuse bytes that are not UTF-8 as :func:`~typestrict_pipeline.refund.table.csv_columns`
    does (its message and line), decoding a mebibyte at a time instead of the whole text."""
    from typestrict_pipeline.refund.table import _decode_csv

    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    try:
        for start in range(0, len(raw), 1 << 20):
            decoder.decode(view[start:start + (1 << 20)], final=False)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        _decode_csv(path, raw)  # raises the whole-file reader's error
        raise  # pragma: no cover - the two decoders agree on what is UTF-8


def read_cells(path: Path) -> Cells:
    """A customer's CSV file as text cells, by the rules of every CSV the product takes
    (:func:`~typestrict_pipeline.refund.table.csv_columns`: its reader, its refusals with their
    row): the file's bytes, then each column's text as Arrow strings (:func:`_records`).

    Raises:
        DatasetError: the file is not such a CSV, a column has no name, or it holds no row.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = f.write_text('a,b\\n1,"x, y"\\n\\n2,\\n')
    >>> cells = read_cells(f)
    >>> cells.names, cells.rows, cells.columns["b"].to_pylist()
    (('a', 'b'), 2, ['x, y', ''])
    """
    from typestrict_pipeline.files import read_data_file

    raw = read_data_file(path, error=DatasetError, what="a CSV file with a header row")
    _check_utf8(path, raw)
    names, columns = _records(raw, path)
    del raw
    check_header(names, str(path))  # a column without a name, at the header, by its position
    rows = len(columns[0]) if columns else 0
    if not rows:
        raise DatasetError("at least one row", "no rows", "give the file some rows", file=str(path))
    return Cells(tuple(names), dict(zip(names, columns, strict=True)), rows)


def _records(raw: bytes, path: Path) -> tuple[list[str], list[pa.ChunkedArray]]:
    """The header and each column's cells (Arrow strings).

    Read by Arrow's CSV reader where it reads the cells the ``csv`` reader reads
    (:func:`~typestrict_pipeline.backtest.workflows.dataset_csv.arrow_columns`), else by the C
    ``csv`` reader, the text's lines as they come (no line can be longer than the bound
    :func:`~typestrict_pipeline.refund.table._bounded_lines` keeps, :func:`_lines_fit`); a file
    it refuses, or with a short or long row, is read again by the product's reader, which
    refuses it with its message and row."""
    from typestrict_pipeline.backtest.workflows.dataset_csv import arrow_columns
    from typestrict_pipeline.refund.table import CSV_LINE_CELLS, _check_header, max_csv_cell_chars

    cell = max_csv_cell_chars()
    if not _lines_fit(raw, CSV_LINE_CELLS * cell):
        _refuse(raw, path)
    csv.field_size_limit(cell)
    fast = arrow_columns(raw, cell)
    if fast is not None:
        _check_header(fast[0], str(path))
        return fast
    names, chunks = _csv_chunks(raw, path)
    return names, [pa.chunked_array([c[i] for c in chunks], type=pa.string()) for i in range(len(names))]


def _stream(raw: bytes) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8-sig", newline="")


def _refuse(raw: bytes, path: Path) -> NoReturn:
    """Read the file by the product's reader, which refuses it with its message and row."""
    from typestrict_pipeline.refund.table import _csv_reader, _csv_records

    for _ in _csv_records(_csv_reader(_stream(raw)), str(path)):  # raises, with the row
        pass
    raise AssertionError("the two readers disagree on the file")  # pragma: no cover


def _csv_chunks(raw: bytes, path: Path) -> tuple[list[str], list[list[pa.Array]]]:
    """The header and the rows' cells in chunks of Arrow arrays (one a column), read by the C
    ``csv`` reader; a file it refuses, or with a short or long row, :func:`_refuse`."""
    from typestrict_pipeline.refund.table import _check_header

    header: list[str] | None = None
    chunks: list[list[pa.Array]] = []
    pending: list[list[str]] = []
    try:
        for record in csv.reader(_stream(raw), strict=True):
            if not record or (record == [""] and header is not None):
                continue
            if header is None:
                header = record
                _check_header(header, str(path))
            elif len(record) != len(header):
                break
            else:
                pending.append(record)
                if len(pending) == CHUNK_ROWS:
                    chunks.append(_arrays(pending))
                    pending = []
        else:
            if header is not None:
                if pending:
                    chunks.append(_arrays(pending))
                return header, chunks
    except csv.Error:
        pass
    _refuse(raw, path)


def _lines_fit(raw: bytes, limit: int) -> bool:
    """Whether no line of ``raw`` (ended by ``\\n`` or ``\\r``) is longer than ``limit`` bytes (so
    none is longer than ``limit`` characters), looked at a mebibyte at a time."""
    if len(raw) <= limit:
        return True
    data = np.frombuffer(raw, dtype=np.uint8)
    last = -1
    for start in range(0, len(data), 1 << 20):
        piece = data[start:start + (1 << 20)]
        ends = np.flatnonzero((piece == 10) | (piece == 13)) + start
        if not ends.size:
            if start + len(piece) - 1 - last > limit:
                return False
            continue
        if ends[0] - last - 1 > limit or (ends.size > 1 and int(np.diff(ends).max()) - 1 > limit):
            return False
        last = int(ends[-1])
    return len(data) - 1 - last <= limit


def _arrays(records: list[list[str]]) -> list[pa.Array]:
    return [_strings(column) for column in zip(*records, strict=True)]


def _strings(cells: tuple[str, ...]) -> pa.Array:
    """Python strings as an Arrow string array: built from their joined text and lengths when
    all are ASCII (a character a byte; several times faster than converting each), else converted."""
    joined = "".join(cells)
    if not joined.isascii() or len(joined) >= 1 << 31:
        return pa.array(cells, type=pa.string())
    offsets = np.zeros(len(cells) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, cells), dtype=np.int32, count=len(cells)), out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(cells), [None, pa.py_buffer(offsets),
                                                          pa.py_buffer(joined.encode("ascii"))])


def _flags(values: Any) -> npt.NDArray[np.bool_]:
    """An Arrow boolean array (or chunked array) as numpy, a null as False."""
    filled = values.fill_null(False)
    parts = filled.chunks if isinstance(filled, pa.ChunkedArray) else [filled]
    if not parts:
        return np.zeros(0, dtype=bool)
    return np.concatenate([p.to_numpy(zero_copy_only=False) for p in parts]).astype(bool, copy=False)


def _numbers(cells: pa.ChunkedArray, col: str, file: Path) -> npt.NDArray[np.float64]:
    from typestrict_pipeline.values import data_numbers

    try:
        return data_numbers(cells)
    except InputError as exc:
        raise DatasetError(f"a number in column {col!r} (finite, written in digits), or an empty "
                           "cell for a missing value", exc.got, exc.fix, file=str(file), row=exc.row,
                           column=str(col)) from None


def _truths(cells: pa.ChunkedArray, col: str, file: Path) -> npt.NDArray[np.bool_]:
    """``true``/``false`` cells (any case, white space around) as bools: the cells spelled
    exactly in one of three usual ways at once, any other one by one, in row order."""
    import pyarrow.compute as pc

    usual = _flags(pc.is_in(cells, value_set=pa.array(["true", "false", "True", "False", "TRUE", "FALSE"])))
    out = _flags(pc.is_in(cells, value_set=pa.array(["true", "True", "TRUE"])))
    for i in np.flatnonzero(~usual).tolist():
        v = cells[i].as_py()
        text = v.strip().lower()
        if text not in ("true", "false"):
            raise DatasetError(f"true or false in column {col!r} (as in the rows already known)",
                               repr(v), "fix the value", file=str(file), row=i + 1, column=str(col))
        out[i] = text == "true"
    return out


_MAYBE_REFUSED = r"[\x00-\x1f\x{7f}-\x{9f}]|^[=+\-@]"
"""A superset of the text cells :func:`_check_texts` may refuse (a control character, or a first
character a formula starts with); only these are looked at one by one."""

_LONE_CR = re.compile(r"\r(?!\n)")
"""A carriage return not followed by a line feed: CSV writers quote a cell for its ``\\n`` only."""


def _check_texts(cells: pa.ChunkedArray, col: str, file: Path) -> None:
    """Refuse the first text cell (in row order) with a control character or too long, that a
    spreadsheet would run as a formula, or with a carriage return not followed by a line feed
    (a CSV writer leaves it unquoted and every later read takes it for a line end); see
    :func:`~typestrict_pipeline.values.check_text` and :func:`~typestrict_pipeline.values.is_formula`."""
    import pyarrow.compute as pc

    from typestrict_pipeline.values import check_text, is_formula

    suspect = _flags(pc.or_(pc.match_substring_regex(cells, _MAYBE_REFUSED),
                            pc.greater(pc.utf8_length(cells), 100_000)))
    for i in np.flatnonzero(suspect).tolist():
        v = cells[i].as_py()
        try:
            check_text(v, "a text cell", max_chars=100_000, lines=True, empty=True, data=True)
        except InputError as exc:
            raise DatasetError(exc.expected, exc.got, exc.fix, file=str(file), row=i + 1,
                               column=str(col)) from None
        if is_formula(v):
            raise DatasetError(
                "a text cell that a spreadsheet would not run as a formula", repr(v[:60]),
                "remove the leading =, +, -, @, tab or carriage return (data files are opened in "
                "spreadsheets, and their cells go into prompts)", file=str(file), row=i + 1, column=str(col))
        lone = _LONE_CR.search(v)
        if lone is not None:  # stored unquoted (as CSV writers do), it would read back as a line end
            near = v[max(0, lone.start() - 30):lone.start() + 30]
            raise DatasetError(
                "line breaks inside a text cell written \\n or \\r\\n", repr(near),
                "replace the lone carriage return (\\r) in the cell with \\n, or remove it, and "
                "send the file again", file=str(file), row=i + 1, column=str(col))


def typed_column(cells: pa.ChunkedArray, kind: str, col: str, file: Path) -> Typed:
    """A value column's cells typed by ``kind`` (``number``, ``bool``, else text), each checked:
    a number is finite and written in digits, an empty cell missing; a truth value is
    ``true``/``false``; a text has no control character and does not start like a spreadsheet
    formula. Refused with its file, row and column, the first bad cell of the column.

    >>> typed_column(pa.chunked_array([["1.5", "", "7"]]), "number", "x", Path("t.csv")).tolist()
    [1.5, nan, 7.0]
    >>> typed_column(pa.chunked_array([["=1+1"]]), "text", "x", Path("t.csv"))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: t.csv, row 1, column 'x': expected a text cell that a spreadsheet would not run as a formula, got '=1+1'. Remove the leading =, +, -, @, tab or carriage return (data files are opened in spreadsheets, and their cells go into prompts).
    """
    if kind == "number":
        return _numbers(cells, col, file)
    if kind == "bool":
        return _truths(cells, col, file)
    _check_texts(cells, col, file)
    return cells


def _series(cells: pa.ChunkedArray, start: int) -> pd.Series:
    """Rows ``start`` to ``start + CHUNK_ROWS`` of a text column, as the data frame of text cells
    held them (pandas' ``str``)."""
    return pd.Series(cells.slice(start, CHUNK_ROWS).to_pylist(), dtype=str)


def _times(cells: pa.ChunkedArray, what: str, table: str, file: str) -> npt.NDArray[np.int64]:
    """A time column's cells as nanoseconds since 1970 (UTC), by the rules of
    :func:`~typestrict_pipeline.backtest.pit._text_times` over the whole column (the first cell
    that is no time or has no offset, then the first outside the range), a chunk at a time: a
    chunk of times all written ``YYYY-MM-DDTHH:MM:SSZ`` and in range at once
    (:func:`~typestrict_pipeline.backtest.workflows.dataset_csv.z_times`), any other by pandas."""
    from typestrict_pipeline.backtest.workflows.dataset_csv import z_times
    from typestrict_pipeline.values import TIME_MAX, TIME_MIN

    low, high = (int(pd.Timestamp(t).as_unit("ns").value) for t in (TIME_MIN, TIME_MAX))
    out = np.empty(len(cells), dtype=np.int64)
    outside: tuple[int, Any] | None = None
    for start in range(0, len(cells), CHUNK_ROWS):
        fast = z_times(cells.slice(start, CHUNK_ROWS), low, high)
        if fast is not None:
            out[start:start + len(fast)] = fast
            continue
        series = _series(cells, start)
        parsed = _offset_times(series, what, table, file, start)
        far = _outside_range(parsed)
        if far is not None:
            outside = outside or (start + far, series.iloc[far])
            continue
        utc = parsed.dt.tz_localize(None).dt.as_unit("ns").to_numpy()
        out[start:start + len(series)] = utc.view(np.int64)
    if outside is not None:
        raise _outside_error(outside[1], what, table, file, outside[0] + 1)
    return out


def _shown(value: Any) -> str:
    from typestrict_pipeline.values import shown

    return shown(value)


def _frame_columns_check(names: Sequence[str], file: str) -> None:
    """The time columns present (:meth:`PointInTimeTable.from_frame`'s refusal and order)."""
    for col, role in ((KNOWN_TIME, "became known"), (EVENT_TIME, "describes")):
        if col not in names:
            raise DatasetError(
                f"a column {col!r} with the time each row {role}",
                f"columns {listed(str(c) for c in names)}",
                "add it: a backtest replays only data whose knowledge time is recorded, "
                "so it can show each step only what was knowable then"
                if role == "became known" else "add it, or name the column with event_time=",
                file=file,
            )


def _compared(values: Mapping[str, Typed], rows: npt.NDArray[np.intp], n: int) -> dict[str, npt.NDArray[Any]]:
    """The value columns as :func:`~typestrict_pipeline.backtest.pit._one_row_per_times` compares
    them: numbers and truth values as they are; a text column as objects (a missing cell NaN),
    filled only at ``rows`` (the rows whose times repeat, the only ones it reads)."""
    out: dict[str, npt.NDArray[Any]] = {}
    for col, v in values.items():
        if isinstance(v, np.ndarray):
            out[col] = v
            continue
        arr = np.full(n, None, dtype=object)
        picked = v.take(pa.array(rows)).to_pylist()
        arr[rows] = [np.nan if c == "" else c for c in picked]
        out[col] = arr
    return out


def _kept(name: str, values: Mapping[str, Typed], ev: npt.NDArray[np.datetime64], kn: npt.NDArray[np.datetime64],
          file: str) -> npt.NDArray[np.bool_]:
    """Which rows are stored: every row but one identical to an earlier row in every cell; two
    rows with the same times that differ refused (the point-in-time table's rule and message)."""
    order = np.lexsort((ev, kn))
    ev_s, kn_s = ev[order], kn[order]
    same = np.flatnonzero((ev_s[1:] == ev_s[:-1]) & (kn_s[1:] == kn_s[:-1]))
    keep = np.ones(len(ev), dtype=bool)
    if not same.size:
        return keep
    rows = np.unique(np.concatenate([order[same], order[same + 1]]))
    kept = _one_row_per_times(name, order, ev, kn, _compared(values, rows, len(ev)), file)
    keep[:] = False
    keep[kept] = True
    return keep


def _workflow_columns(workflow: Any, name: str, values: Mapping[str, Typed], ev: npt.NDArray[np.datetime64],
                      kn: npt.NDArray[np.datetime64], file: Path) -> None:
    """The columns ``workflow`` reads, checked as every replay checks them (on the first row:
    each column is already typed by the kind the workflow reads it as)."""
    from typestrict_pipeline.backtest.workflow import check_columns

    first = _compared(values, np.arange(1), 1)
    first = {c: v[:1] for c, v in first.items()}
    table = PointInTimeTable(name, event_time=ev[:1], known_time=kn[:1], columns=first, file=str(file))
    check_columns(workflow, {name: table}, dataset=f"file {file.name}",
                  fix=f"add the columns to {file.name} and register it again")


def validated_rows(cells: Cells, values: Mapping[str, Typed], names: Sequence[str], name: str, file: Path,
                   now: dt.datetime, workflow: Any = None) -> Rows:
    """The rows of ``cells`` (their value columns typed as ``values``, the columns in the order
    ``names``) checked as a point-in-time table checks them: the time columns present, every time
    ISO 8601 with an offset within range (``event_time`` first), two rows with the same times
    agreeing in every cell; then the columns ``workflow`` reads; then no row known after ``now``.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = f.write_text("event_time,known_time,x\\n2012-01-01T00:00Z,2099-01-01T00:00Z,1\\n")
    >>> cells = read_cells(f)
    >>> validated_rows(cells, {"x": typed_column(cells.columns["x"], "number", "x", f)}, cells.names, "t", f,
    ...                dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: ...t.csv, row 1, column 'known_time': expected a knowledge time at or before now (2026-01-01T00:00:00Z), got 2099-01-01T00:00Z. Append a row once it is known: a row known in the future would let a backtest see it early.
    """
    from typestrict_pipeline.backtest.pit import format_time

    where = str(file)
    _frame_columns_check(names, where)
    ev_ns = _times(cells.columns[EVENT_TIME], EVENT_TIME, name, where)
    kn_ns = _times(cells.columns[KNOWN_TIME], KNOWN_TIME, name, where)
    ev = ev_ns.view("datetime64[ns]").astype("datetime64[us]")
    kn = kn_ns.view("datetime64[ns]").astype("datetime64[us]")
    ordered = {c: values[c] for c in names if c in values}
    keep = _kept(name, ordered, ev, kn, where)
    if workflow is not None:
        _workflow_columns(workflow, name, ordered, ev, kn, file)
    future = np.flatnonzero(kn_ns > pd.Timestamp(now).as_unit("ns").value)
    if future.size:
        i = int(future[0])
        raise DatasetError(
            f"a knowledge time at or before now ({format_time(now)})", str(cells.columns[KNOWN_TIME][i].as_py()),
            "append a row once it is known: a row known in the future would let a backtest see it early",
            file=where, row=i + 1, column=KNOWN_TIME,
        )
    return Rows(tuple(names), ordered, np.floor_divide(ev_ns, 1000), np.floor_divide(kn_ns, 1000), keep)


def _time_texts(us: npt.NDArray[np.int64]) -> list[str]:
    """Times (microseconds since 1970, UTC) as :func:`~typestrict_pipeline.backtest.pit.format_time`
    writes them: to the second, or to the microsecond when they have some, then ``Z``."""
    t = us.view("datetime64[us]")
    texts = np.datetime_as_string(t, unit="s")
    fine = np.flatnonzero(us % 1_000_000)
    out = texts.astype(object)
    if fine.size:
        out[fine] = np.datetime_as_string(t[fine], unit="us")
    return [s + "Z" for s in out.tolist()]


def _stored_texts(rows: Rows, col: str, part: npt.NDArray[np.intp]) -> pa.Array:
    """One column of the kept rows ``part`` as ``to_csv`` writes its cells from the data frame of
    those rows: the times as :func:`~typestrict_pipeline.backtest.pit.format_time` writes them,
    numbers as a ``float64`` (a missing one empty), truth values ``True``/``False``, a text as it
    is (an empty one missing, so empty), quoted as the ``csv`` writer quotes."""
    from typestrict_pipeline.backtest.workflows import dataset_csv

    if col in (EVENT_TIME, KNOWN_TIME):
        us = (rows.event_us if col == EVENT_TIME else rows.known_us)[part]
        texts = dataset_csv.iso_texts(us)
        return texts if texts is not None else dataset_csv.quoted(pa.array(_time_texts(us), type=pa.string()))
    v = rows.values[col]
    if isinstance(v, np.ndarray) and v.dtype == np.bool_:
        return pa.array(["False", "True"]).take(pa.array(v[part].astype(np.int8)))
    if isinstance(v, np.ndarray):
        return dataset_csv.float_texts(v[part])
    return dataset_csv.quoted(v.take(pa.array(part)).combine_chunks())


def csv_bytes(rows: Rows, *, header: bool) -> Iterator[bytes]:
    """The kept rows as CSV in their file order (the header first when ``header``), a chunk of
    :data:`CHUNK_ROWS` rows at a time, the bytes pandas' ``to_csv(index=False)`` writes of the
    data frame of those rows (the times as :func:`~typestrict_pipeline.backtest.pit.format_time`
    writes them): each cell's text as ``to_csv`` writes it (:func:`_stored_texts`), the cells
    joined by commas and each line ended by ``\\n`` over whole columns
    (:mod:`~typestrict_pipeline.backtest.workflows.dataset_csv`; ``tests/test_dataset_csv.py``
    holds them to ``to_csv``). Every value is written on its own, so the chunks are the bytes of
    the whole.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = f.write_text('event_time,known_time,x,w\\n2012-01-01T00:00Z,2012-01-02T01:00+01:00,7,"a, b"\\n')
    >>> cells = read_cells(f)
    >>> values = {c: typed_column(cells.columns[c], k, c, f) for c, k in (("x", "number"), ("w", "text"))}
    >>> rows = validated_rows(cells, values, cells.names, "t", f, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    >>> b"".join(csv_bytes(rows, header=True)).decode()
    'event_time,known_time,x,w\\n2012-01-01T00:00:00Z,2012-01-02T00:00:00Z,7.0,"a, b"\\n'
    """
    from typestrict_pipeline.backtest.workflows.dataset_csv import csv_lines, header_line

    if header:
        yield header_line(rows.names)
    kept = np.flatnonzero(rows.keep)
    for start in range(0, len(kept), CHUNK_ROWS):
        part = kept[start:start + CHUNK_ROWS]
        yield csv_lines([_stored_texts(rows, c, part) for c in rows.names])
