"""Point-in-time (bitemporal) tables and the views a decision sees.

Every row of a :class:`PointInTimeTable` carries two times:

* ``event_time``: the time the row describes (the day a weather reading is about);
* ``known_time``: the time the row became known (the end of that day).

At a step ``t`` a workflow sees a :class:`PointInTimeView`: the rows with
``known_time <= t`` and nothing else. The guarantee is structural, not a convention:

* the table stores its rows, sorted by knowledge time, in immutable blocks of ``block_rows``
  rows that form a persistent chain (each block points only to the blocks before it);
* a view holds the last *complete* block known at ``t`` (from which only earlier blocks are
  reachable) plus its own copy of the few rows known at ``t`` that do not fill a block;
* a view holds no reference to the table, to a later block or to any later row, so no
  attribute path from inside a decision leads to the future (``tests/test_backtest_pit.py``
  walks the view's object graph to check it);
* every read that names a time after ``t`` raises :class:`~typestrict_pipeline.errors.LookAheadError`.

Creating a view costs O(``block_rows``) whatever the history length (no copy of the history per
step); reading the last ``n`` rows costs O(n); reading a whole column costs O(rows known).

Times are aware UTC ``datetime`` objects at the API and ``datetime64[us]`` (UTC) inside.

>>> import datetime as dt
>>> day = dt.datetime(2012, 1, 1, tzinfo=dt.UTC)
>>> table = PointInTimeTable(
...     "rain",
...     event_time=[day, day + dt.timedelta(days=1), day + dt.timedelta(days=2)],
...     known_time=[day + dt.timedelta(days=1), day + dt.timedelta(days=2), day + dt.timedelta(days=3)],
...     columns={"mm": [0.0, 3.5, 1.0]},
... )
>>> view = table.view(day + dt.timedelta(days=2))
>>> len(view), view.column("mm").tolist()
(2, [0.0, 3.5])
>>> view.get("mm", day + dt.timedelta(days=2))
Traceback (most recent call last):
...
typestrict_pipeline.errors.LookAheadError: table 'rain': expected a read of rows known at or before the step's time 2012-01-03T00:00:00Z, got a read of the row about 2012-01-03T00:00:00Z, which was not known yet. Read only what was knowable at the step (view.tail, view.last, view.get with an earlier event time); what happened next belongs in the workflow's outcome function.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.errors import DatasetError, LookAheadError, NotFoundError, listed
from typestrict_pipeline.lazy import LazyModule
from typestrict_pipeline.values import shown

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    import pandas as pd
else:
    pd = LazyModule("pandas")

EVENT_TIME = "event_time"
KNOWN_TIME = "known_time"
_TIME_COLUMNS = (EVENT_TIME, KNOWN_TIME)
_US = "datetime64[us]"
DEFAULT_BLOCK_ROWS = 64

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "EVENT_TIME",
    "KNOWN_TIME",
    "PointInTimeTable",
    "PointInTimeView",
    "SourceStamp",
    "check_header",
    "format_time",
    "read_csv_fresh",
    "source_stamp",
    "to_datetime64",
    "to_utc_datetime",
]


def format_time(t: dt.datetime | np.datetime64) -> str:
    """ISO 8601 in UTC with a ``Z``, to the second (to the microsecond when it has some).

    >>> format_time(dt.datetime(2013, 5, 2, tzinfo=dt.UTC))
    '2013-05-02T00:00:00Z'
    """
    if isinstance(t, np.datetime64):
        t = to_utc_datetime(t)
    t = t.astimezone(dt.UTC)
    spec = "seconds" if t.microsecond == 0 else "microseconds"
    return t.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def to_datetime64(t: dt.datetime) -> np.datetime64:
    """An aware datetime as ``datetime64[us]`` in UTC; naive datetimes are refused.

    >>> to_datetime64(dt.datetime(2012, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))))
    np.datetime64('2012-01-01T00:00:00.000000')
    """
    if not isinstance(t, dt.datetime) or t.tzinfo is None:
        raise DatasetError(
            "a timezone-aware datetime",
            repr(t),
            "pass datetime(..., tzinfo=datetime.UTC) or another aware value",
        )
    return np.datetime64(t.astimezone(dt.UTC).replace(tzinfo=None), "us")


def to_utc_datetime(t: np.datetime64) -> dt.datetime:
    """A ``datetime64`` (taken as UTC) as an aware datetime.

    >>> to_utc_datetime(np.datetime64("2012-01-01T06:00"))
    datetime.datetime(2012, 1, 1, 6, 0, tzinfo=datetime.timezone.utc)
    """
    micros = int(t.astype("datetime64[us]").astype(np.int64))
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def _time_array(
    values: Iterable[Any] | npt.NDArray[Any], what: str, table: str, file: str | None
) -> npt.NDArray[np.datetime64]:
    """Times as ``datetime64[us]`` UTC; refuses naive datetimes, strings without offset, NaT."""
    if isinstance(values, np.ndarray) and np.issubdtype(values.dtype, np.datetime64):
        arr = values.astype(_US)
    else:
        series = pd.Series(list(values) if not isinstance(values, pd.Series) else values)
        if series.empty:
            return np.empty(0, dtype=_US)
        empty = np.flatnonzero(series.isna().to_numpy())
        if empty.size:  # told before any parsing: an empty cell is not a time without a zone
            raise _empty_times(empty, what, table, file)
        if pd.api.types.is_datetime64_any_dtype(series.dtype):
            parsed = series
        elif pd.api.types.infer_dtype(series, skipna=False) == "string":  # every cell text (none empty)
            parsed = _text_times(series, what, table, file)
        else:
            try:
                parsed = pd.to_datetime(series, utc=False, format="ISO8601", errors="coerce")
            except (ValueError, TypeError) as exc:  # mixed offsets, objects that are not times
                raise DatasetError(
                    f"times in ISO 8601 with a UTC offset in {what!r}",
                    f"values that are not one kind of time ({exc.__class__.__name__})",
                    f"fix the {what!r} column of table {table!r}",
                    file=file,
                    column=what,
                ) from exc
            bad = np.flatnonzero(parsed.isna().to_numpy() & series.notna().to_numpy())
            if bad.size:
                raise _not_a_time(series, int(bad[0]), what, table, file)
        tz = getattr(parsed.dt, "tz", None)
        if tz is None:
            raise DatasetError(
                f"timezone-aware times in {what!r} (for example 2012-01-02T00:00:00Z)",
                "times without a time zone",
                "add a UTC offset or 'Z' to every time: a local time would make what was "
                "knowable depend on the reader's time zone",
                file=file,
                column=what,
            )
        arr = parsed.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype(_US)
    nat = np.flatnonzero(np.isnat(arr))
    if nat.size:
        raise _empty_times(nat, what, table, file)
    return arr


_UNNAMED = re.compile(r"Unnamed: \d+")
"""The name pandas gives a column whose name in the header is empty."""

_OFFSET = re.compile(r"[Tt ]\d{2}(?::?\d{2}){0,2}(?:[.,]\d+)?(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$")
"""How an ISO 8601 time with a UTC offset ends: the time of day, then ``Z``, ``+14:00``,
``-1200`` or ``+05`` (a date alone, ``2012-01-05``, has none)."""


def _not_a_time(series: pd.Series, i: int, what: str, table: str, file: str | None,
                start: int = 0) -> DatasetError:
    return DatasetError("a time in ISO 8601 with a UTC offset (for example 2012-01-02T00:00:00Z)",
                        shown(series.iloc[i]), f"fix the {what!r} column of table {table!r}",
                        file=file, row=start + i + 1, column=what)


def _offset_times(series: pd.Series, what: str, table: str, file: str | None, start: int = 0) -> pd.Series:
    """Step 1 of :func:`_text_times`: the cells parsed to UTC, the first that is no time or has no
    offset refused (its row counted from ``start``, the series' first row in the file).

    >>> _offset_times(pd.Series(["2012-01-05T10:00:00Z", "2012-01-06"]), "event_time", "t", "w.csv", start=10)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: w.csv, row 12, column 'event_time': expected timezone-aware times in 'event_time' (for example 2012-01-02T00:00:00Z), got '2012-01-06'. Add a UTC offset or 'Z' to every time: a local time would make what was knowable depend on the reader's time zone.
    """
    stripped = series.str.strip()
    parsed = pd.to_datetime(stripped, utc=True, format="ISO8601", errors="coerce")
    unread = parsed.isna().to_numpy()
    bad = np.flatnonzero(unread | ~stripped.str.contains(_OFFSET).to_numpy(dtype=bool))
    if bad.size:
        i = int(bad[0])
        if unread[i]:
            raise _not_a_time(series, i, what, table, file, start)
        raise DatasetError(f"timezone-aware times in {what!r} (for example 2012-01-02T00:00:00Z)",
                           shown(series.iloc[i]), "add a UTC offset or 'Z' to every time: a local time would "
                           "make what was knowable depend on the reader's time zone",
                           file=file, row=start + i + 1, column=what)
    return parsed


def _outside_range(parsed: pd.Series) -> int | None:
    """Step 2 of :func:`_text_times`: the index of the first time outside the range every time
    the product reads lies in (:data:`typestrict_pipeline.values.TIME_MIN` to ``TIME_MAX``), if any.

    >>> _outside_range(pd.to_datetime(pd.Series(["2012-01-05T10:00:00Z", "1850-01-01T00:00:00Z"]), utc=True))
    1
    """
    from typestrict_pipeline.values import TIME_MAX, TIME_MIN

    far = np.flatnonzero(((parsed < pd.Timestamp(TIME_MIN)) | (parsed >= pd.Timestamp(TIME_MAX))).to_numpy())
    return int(far[0]) if far.size else None


def _outside_error(value: Any, what: str, table: str, file: str | None, row: int) -> DatasetError:
    """The refusal of a time outside the product's range (``row``: 1-based)."""
    from typestrict_pipeline.values import TIME_MAX, TIME_MIN

    return DatasetError(f"a time from {TIME_MIN.date()} to {(TIME_MAX - dt.timedelta(days=1)).date()} in {what!r}",
                        shown(value), f"fix the {what!r} column of table {table!r}",
                        file=file, row=row, column=what)


def _text_times(series: pd.Series, what: str, table: str, file: str | None) -> pd.Series:
    """Times written as text: each in ISO 8601 with its own UTC offset (rows may differ:
    ``+14:00`` beside ``Z``), converted to UTC, from 1900-01-01 to 2199-12-31 (the range of every
    time the product reads, :data:`typestrict_pipeline.values.TIME_MIN`); a time without an
    offset, or outside the range, is refused with its row.

    >>> times = _text_times(pd.Series(["2012-01-06T00:00:00+14:00", "2012-01-05T10:00:00Z"]), "event_time", "t", None)
    >>> [t.isoformat() for t in times]
    ['2012-01-05T10:00:00+00:00', '2012-01-05T10:00:00+00:00']
    >>> _text_times(pd.Series(["2012-01-05T10:00:00Z", "2012-01-06 00:00"]), "event_time", "t", "w.csv")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: w.csv, row 2, column 'event_time': expected timezone-aware times in 'event_time' (for example 2012-01-02T00:00:00Z), got '2012-01-06 00:00'. Add a UTC offset or 'Z' to every time: a local time would make what was knowable depend on the reader's time zone.
    """
    parsed = _offset_times(series, what, table, file)
    i = _outside_range(parsed)
    if i is not None:
        raise _outside_error(series.iloc[i], what, table, file, i + 1)
    return parsed


def _empty_times(rows: npt.NDArray[np.intp], what: str, table: str, file: str | None) -> DatasetError:
    """The error for rows of ``what`` without a time (``rows``: their 0-based indices)."""
    return DatasetError(
        f"a time in every row of {what!r}",
        f"an empty time in {rows.size} row(s)",
        f"give every row of table {table!r} the time it "
        + ("became known" if what == KNOWN_TIME else "describes"),
        file=file,
        row=int(rows[0]) + 1,
        column=what,
    )


def _differs(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Where two arrays of one column's cells differ, a missing cell (NaN, None, NaT) equal to a
    missing cell.

    >>> _differs(np.array([1.0, np.nan, np.nan]), np.array([1.0, np.nan, 2.0])).tolist()
    [False, False, True]
    >>> _differs(np.array(["rain", None, "sun"], dtype=object), np.array(["rain", np.nan, "fog"], dtype=object)).tolist()
    [False, False, True]
    """
    ne: npt.NDArray[np.bool_] = np.asarray(a != b, dtype=bool)
    if a.dtype.kind in "bBiuSU":  # no missing value in these
        return ne
    both_missing: npt.NDArray[np.bool_] = np.asarray(pd.isna(a), dtype=bool) & np.asarray(pd.isna(b), dtype=bool)
    return ne & ~both_missing


def _cell(value: Any) -> str:
    """A cell as a message shows it (a missing one as an empty cell)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and value != value) or value is pd.NaT:
        return "an empty cell"
    return shown(value)


def _one_row_per_times(
    name: str,
    order: npt.NDArray[np.intp],
    ev: npt.NDArray[np.datetime64],
    kn: npt.NDArray[np.datetime64],
    cols: Mapping[str, npt.NDArray[Any]],
    file: str | None,
) -> npt.NDArray[np.intp]:
    """``order`` (the rows sorted by knowledge time, then event time, stably) with each run of
    rows identical in every cell kept once (its first row); two rows with the same event time and
    the same knowledge time that differ in a cell are refused, naming both rows (1-based, as the
    rows were given) and the column: which of them a step would read would depend on their order.

    O(rows) on the sorted times; the cells are compared only for rows whose times repeat.

    >>> t = np.array(["2012-01-01", "2012-01-01", "2012-01-02"], dtype="datetime64[us]")
    >>> _one_row_per_times("t", np.arange(3), t, t, {"x": np.array([1.0, 1.0, 2.0])}, None).tolist()
    [0, 2]
    >>> _one_row_per_times("t", np.arange(3), t, t, {"x": np.array([1.0, 3.0, 2.0])}, "t.csv")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: t.csv, row 2, column 'x': expected one row per event_time and known_time in table 't' (two rows about the same time known at the same time must agree in every cell), got rows 1 and 2 both about event_time 2012-01-01T00:00:00Z known at 2012-01-01T00:00:00Z, with x 1.0 and 3.0. Keep the right one of them: a correction is a new row about the same event_time with a later known_time.
    """
    if len(order) < 2:
        return order
    ev_s, kn_s = ev[order], kn[order]
    same = np.flatnonzero((ev_s[1:] == ev_s[:-1]) & (kn_s[1:] == kn_s[:-1]))  # row same+1 repeats row same
    if not same.size:
        return order
    first, second = order[same], order[same + 1]  # file order within a run (the sort is stable)
    differ = {c: _differs(arr[first], arr[second]) for c, arr in cols.items()}
    bad = np.zeros(same.size, dtype=bool)
    for d in differ.values():
        bad |= d
    if bad.any():
        j = int(np.flatnonzero(bad)[np.argmin(second[bad])])  # the pair whose later row comes first
        col = next(c for c, d in differ.items() if d[j])
        a, b = int(first[j]), int(second[j])
        raise DatasetError(
            f"one row per {EVENT_TIME} and {KNOWN_TIME} in table {name!r} (two rows about the same time "
            "known at the same time must agree in every cell)",
            f"rows {a + 1} and {b + 1} both about {EVENT_TIME} {format_time(ev[a])} known at "
            f"{format_time(kn[a])}, with {col} {_cell(cols[col][a])} and {_cell(cols[col][b])}",
            f"keep the right one of them: a correction is a new row about the same {EVENT_TIME} with a "
            f"later {KNOWN_TIME}",
            file=file, row=b + 1, column=col,
        )
    keep = np.ones(len(order), dtype=bool)
    keep[same + 1] = False  # identical to the row before it: one fact, kept once
    return order[keep]


def check_header(names: Sequence[object], file: str | None) -> None:
    """Refuse a header with a column without a name (an empty or blank cell, as a comma at the end
    of the header line makes), naming the column's position (1-based) and the column before it.

    >>> check_header(["event_time", "known_time", "x", ""], "w.csv")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: w.csv: expected a name for every column of the header, got an empty name for column 4 (after 'x'). Name the column, or remove it (a comma at the end of the header line adds a column without a name).
    """
    for i, col in enumerate(names):
        if not isinstance(col, str) or col.strip():
            continue
        after = f" (after {shown(str(names[i - 1]))})" if i else " (the first)"
        raise DatasetError(
            "a name for every column of the header",
            f"{'a blank' if col else 'an empty'} name for column {i + 1}{after}",
            "name the column, or remove it (a comma at the end of the header line adds a column "
            "without a name)",
            file=file,
        )


class _Block:
    """One immutable block of rows and a link to the block before it (a persistent chain)."""

    __slots__ = ("cols", "n", "prev", "stop")

    def __init__(self, cols: npt.NDArray[Any], prev: _Block | None, stop: int) -> None:
        self.cols = cols  # one structured array: a field per column
        self.prev = prev
        self.stop = stop  # rows [0, stop) are reachable from this block
        self.n = len(cols)


def _freeze(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    arr.flags.writeable = False
    return arr


class PointInTimeTable:
    """A table whose every row carries the time it describes and the time it became known.

    Args:
        name: the table's name (workflows read ``ctx.data[name]``).
        event_time: the time each row describes (aware datetimes or ``datetime64`` in UTC).
        known_time: the time each row became known.
        columns: the value columns, each as long as the times.
        block_rows: rows per immutable block (the most a view ever copies).
        file: the file the rows came from, named in error messages.

    Raises:
        DatasetError: a missing or empty time, a naive time, columns of different lengths,
            a value column named like a time column or with an empty name, no rows at all, or
            two rows with the same ``event_time`` and the same ``known_time`` that differ in a
            cell (named with both rows and the column).

    Rows are kept sorted by (``known_time``, ``event_time``), stably. Several rows may describe
    the same event time (a revision) when they became known at different times; a view's
    :meth:`PointInTimeView.get` returns the latest one known at its time. Rows with the same two
    times must agree in every cell (else which one a step read would depend on the file's order):
    rows identical in every cell are one fact, kept once (the first of them), so every reader,
    :attr:`n_rows` included, sees one row.
    """

    __slots__ = (
        "_block_rows",
        "_cols",
        "_known",
        "_last_event",
        "_n",
        "_name",
        "_nodes",
        "_rec",
        "_source_rows",
        "_value_columns",
    )

    def __init__(
        self,
        name: str,
        *,
        event_time: Iterable[Any] | npt.NDArray[Any],
        known_time: Iterable[Any] | npt.NDArray[Any],
        columns: Mapping[str, Iterable[Any] | npt.NDArray[Any]],
        block_rows: int = DEFAULT_BLOCK_ROWS,
        file: str | None = None,
    ) -> None:
        if block_rows < 1:
            raise DatasetError("block_rows of at least 1", str(block_rows), "use the default 64")
        ev = _time_array(event_time, EVENT_TIME, name, file)
        kn = _time_array(known_time, KNOWN_TIME, name, file)
        if len(ev) != len(kn):
            raise DatasetError(
                f"as many {KNOWN_TIME!r} values as {EVENT_TIME!r} values",
                f"{len(kn)} and {len(ev)}",
                f"give every row of table {name!r} both times",
                file=file,
            )
        if len(kn) == 0:
            raise DatasetError(
                f"at least one row in table {name!r}", "an empty table", "replay a table with data", file=file
            )
        cols: dict[str, npt.NDArray[Any]] = {}
        for col, values in columns.items():
            if not str(col).strip():
                raise DatasetError("a name for every value column", "an empty name",
                                   "name the column, or leave it out", file=file)
            if col in _TIME_COLUMNS:
                raise DatasetError(
                    f"value columns other than {EVENT_TIME!r} and {KNOWN_TIME!r}",
                    f"a value column named {col!r}",
                    "pass the times as event_time= and known_time=",
                    file=file,
                    column=col,
                )
            arr = np.asarray(values)
            if arr.ndim != 1 or len(arr) != len(kn):
                raise DatasetError(
                    f"a column of {len(kn)} values",
                    f"{arr.shape[0] if arr.ndim else 0} values",
                    f"make column {col!r} of table {name!r} as long as its times",
                    file=file,
                    column=col,
                )
            cols[col] = arr
        order = np.lexsort((ev, kn))  # by known_time, then event_time; stable
        order = _one_row_per_times(name, order, ev, kn, cols, file)
        # One structured array (a field per column): a view copies its few rows in one call.
        all_cols = {EVENT_TIME: ev, KNOWN_TIME: kn, **cols}
        rec = np.empty(len(order), dtype=[(c, a.dtype) for c, a in all_cols.items()])
        for col, arr in all_cols.items():
            rec[col] = arr[order]
        rec = _freeze(rec)
        sorted_cols = {c: rec[c] for c in all_cols}
        self._name = name
        self._rec = rec
        self._cols = sorted_cols
        self._known = _freeze(rec[KNOWN_TIME].copy())
        self._last_event = rec[EVENT_TIME].max()
        self._source_rows = _freeze(order.astype(np.int64) + 1)
        self._n = len(order)
        self._value_columns = tuple(cols)
        self._block_rows = block_rows
        nodes: list[_Block] = []
        prev: _Block | None = None
        for start in range(0, self._n - self._n % block_rows, block_rows):
            stop = start + block_rows
            prev = _Block(_freeze(rec[start:stop].copy()), prev, stop)
            nodes.append(prev)
        self._nodes = nodes

    # -- construction from files and frames -------------------------------------------------

    @classmethod
    def from_frame(
        cls,
        name: str,
        frame: pd.DataFrame,
        *,
        event_time: str = EVENT_TIME,
        known_time: str = KNOWN_TIME,
        file: str | None = None,
        block_rows: int = DEFAULT_BLOCK_ROWS,
    ) -> PointInTimeTable:
        """A table from a data frame with an event-time and a knowledge-time column.

        Raises:
            DatasetError: the knowledge-time (or event-time) column is missing, or a time is
                empty or has no time zone; the message names the column (and the file).

        >>> import pandas as pd
        >>> PointInTimeTable.from_frame("t", pd.DataFrame({"event_time": ["2012-01-01Z"], "x": [1]}))
        Traceback (most recent call last):
        ...
        typestrict_pipeline.errors.DatasetError: expected a column 'known_time' with the time each row became known, got columns ['event_time', 'x']. Add it: a backtest replays only data whose knowledge time is recorded, so it can show each step only what was knowable then.
        """
        check_header(list(frame.columns), file)
        for col, role in ((known_time, "became known"), (event_time, "describes")):
            if col not in frame.columns:
                raise DatasetError(
                    f"a column {col!r} with the time each row {role}",
                    f"columns {listed(str(c) for c in frame.columns)}",
                    "add it: a backtest replays only data whose knowledge time is recorded, "
                    "so it can show each step only what was knowable then"
                    if role == "became known"
                    else "add it, or name the column with event_time=",
                    file=file,
                )
        values = {
            str(c): frame[c].to_numpy() for c in frame.columns if c not in (event_time, known_time)
        }
        return cls(
            name,
            event_time=frame[event_time],
            known_time=frame[known_time],
            columns=values,
            block_rows=block_rows,
            file=file,
        )

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike[str],
        name: str | None = None,
        *,
        event_time: str = EVENT_TIME,
        known_time: str = KNOWN_TIME,
    ) -> PointInTimeTable:
        """A table from a CSV file with an event-time and a knowledge-time column (ISO 8601, with offset).

        The file is read by the rules of every CSV the product takes, as ``typestrict data
        register`` and the trainings read theirs (:func:`typestrict_pipeline.files.read_data_file`,
        :func:`typestrict_pipeline.refund.table.csv_row_count`): a regular file of bounded size,
        plain or ``.gz``/``.bz2``/``.xz``, UTF-8 (a BOM is dropped), no NUL byte, a header with each
        column name once, and every row one cell per column: a short or long row is refused with
        its row (1-based, the header is not a row, a blank line is skipped), never padded. Then
        pandas types the cells (numbers, ``True``/``False``; only an empty cell is missing: a text
        cell ``NA`` stays the text ``NA``).

        Raises:
            DatasetError: the file is missing, unreadable or not such a CSV, or a time column is
                missing or bad; the message names the file as ``path`` names it.

        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "rain.csv"
        >>> _ = f.write_text("event_time,known_time,mm\\n2012-01-01T00:00:00Z,2012-01-02T00:00:00Z\\n")
        >>> PointInTimeTable.from_csv(f)
        Traceback (most recent call last):
        ...
        typestrict_pipeline.errors.DatasetError: ...rain.csv, row 1: expected 3 cells, like the header, got 2 cells. Make every row have one cell per column (quote cells that contain commas).
        """
        import io

        from typestrict_pipeline.files import read_data_file
        from typestrict_pipeline.refund.table import csv_row_count

        p = Path(path)
        raw = read_data_file(p, error=DatasetError, what="a CSV file with a header row")
        rows = csv_row_count(raw, p)
        try:
            # Only an empty cell is a missing value (the product's one rule: pandas' default list
            # would read a text cell 'NA', 'null' or 'None' as missing at replay).
            frame = pd.read_csv(io.BytesIO(raw), keep_default_na=False, na_values=[""])
        except (ValueError, MemoryError, pd.errors.ParserError) as exc:
            raise DatasetError("a readable CSV file with a header row",
                               f"{exc.__class__.__name__}: {' '.join(str(exc).split())[:160]}",
                               "check the file", file=str(p)) from None
        if any(_UNNAMED.fullmatch(str(c)) for c in frame.columns):  # pandas' name for an empty one
            header = pd.read_csv(io.BytesIO(raw), header=None, nrows=1, dtype=str, keep_default_na=False)
            check_header([str(c) for c in header.iloc[0]], str(p))
        if len(frame) != rows:  # the two readers split the lines apart: no row number would be sure
            raise DatasetError(
                f'{rows} rows, as the product\'s CSV rules count them (a blank line, or one of only "", is no row)',
                f"{len(frame)} rows when the cells are typed", "remove the lines that hold no cells", file=str(p))
        return cls.from_frame(
            name or p.stem, frame, event_time=event_time, known_time=known_time, file=str(p)
        )

    # -- what the table holds -----------------------------------------------------------------

    @property
    def name(self) -> str:
        """The table's name."""
        return self._name

    @property
    def columns(self) -> tuple[str, ...]:
        """The value columns (the two time columns are always there too)."""
        return self._value_columns

    @property
    def n_rows(self) -> int:
        """How many rows (all versions) the table holds."""
        return self._n

    @property
    def block_rows(self) -> int:
        """Rows per immutable block."""
        return self._block_rows

    @property
    def first_known(self) -> dt.datetime:
        """When the first row became known."""
        return to_utc_datetime(self._known[0])

    @property
    def last_known(self) -> dt.datetime:
        """When the last row became known."""
        return to_utc_datetime(self._known[-1])

    @property
    def last_event(self) -> dt.datetime:
        """The latest time a row is about (a late correction about an old time does not move it,
        where it moves :attr:`last_known`)."""
        return to_utc_datetime(self._last_event)

    @property
    def known_times(self) -> npt.NDArray[np.datetime64]:
        """The knowledge times, sorted, read-only."""
        return self._known

    def cells(self, column: str) -> npt.NDArray[Any]:
        """Every value of a value column, in the table's order (by knowledge time), read-only:
        for checking the data before a replay, never for a decision (which reads a view)."""
        if column not in self._value_columns:
            raise KeyError(column)
        return self._cols[column]

    def source_row(self, index: int) -> int:
        """The 1-based row, in the rows the table was built from (its file's data rows), of the
        row at ``index`` in the table's order."""
        return int(self._source_rows[index])

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return (
            f"PointInTimeTable({self._name!r}, rows={self._n}, known "
            f"{format_time(self._known[0])} .. {format_time(self._known[-1])})"
        )

    # -- views --------------------------------------------------------------------------------

    def cutoff(self, as_of: dt.datetime) -> int:
        """How many rows are known at ``as_of`` (``known_time <= as_of``)."""
        return int(np.searchsorted(self._known, to_datetime64(as_of), side="right"))

    def cutoffs(self, times: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
        """:meth:`cutoff` for many ``datetime64[us]`` times at once (one vectorised search)."""
        return np.searchsorted(self._known, times.astype(_US), side="right")

    def view(self, as_of: dt.datetime) -> PointInTimeView:
        """What was knowable at ``as_of``: the rows with ``known_time <= as_of``."""
        return self.view_at(self.cutoff(as_of), as_of)

    def view_at(self, k: int, as_of: dt.datetime) -> PointInTimeView:
        """The view of the first ``k`` rows (``k`` must be :meth:`cutoff` of ``as_of``).

        Engines compute ``k`` for every step at once with :meth:`cutoffs`; this skips the search.
        """
        full = k // self._block_rows
        head = self._nodes[full - 1] if full else None
        start = full * self._block_rows
        rem: npt.NDArray[Any] | None = None
        if k > start:
            if full < len(self._nodes):
                rem = _freeze(self._nodes[full].cols[: k - start].copy())
            else:
                rem = _freeze(self._rec[start:k].copy())
        return PointInTimeView(self._name, as_of, head, rem, k, self._value_columns)

    # -- derived tables for leak tests ----------------------------------------------------------

    def _rows(self, stop: int) -> dict[str, npt.NDArray[Any]]:
        return {c: a[:stop] for c, a in self._cols.items()}

    def truncated(self, as_of: dt.datetime) -> PointInTimeTable:
        """The same table without any row known after ``as_of`` (truncation-invariance test)."""
        k = self.cutoff(as_of)
        if k == 0:
            raise DatasetError(
                f"a time at or after the first knowledge time {format_time(self._known[0])}",
                format_time(as_of),
                "truncate at a time when some row was known",
            )
        rows = self._rows(k)
        return PointInTimeTable(
            self._name,
            event_time=rows[EVENT_TIME],
            known_time=rows[KNOWN_TIME],
            columns={c: rows[c] for c in self._value_columns},
            block_rows=self._block_rows,
        )

    def poisoned(self, as_of: dt.datetime, *, seed: int) -> PointInTimeTable:
        """Every row known after ``as_of`` replaced by noise (future-poisoning test).

        Times are kept (so steps see the same row counts); numeric values are drawn from a
        normal with the column's mean and 3x its standard deviation, other values from the
        column's observed values, with ``numpy.random.default_rng(seed)``.
        """
        k = self.cutoff(as_of)
        rng = np.random.default_rng(seed)
        cols: dict[str, npt.NDArray[Any]] = {}
        m = self._n - k
        for c in self._value_columns:
            arr = self._cols[c].copy()
            if m:
                if np.issubdtype(arr.dtype, np.number) and not np.issubdtype(arr.dtype, np.bool_):
                    finite = arr[np.isfinite(arr.astype(float))].astype(float)
                    mu = float(finite.mean()) if finite.size else 0.0
                    sd = float(finite.std()) if finite.size > 1 else 1.0
                    noise = rng.normal(mu, 3.0 * (sd or 1.0), size=m)
                    if np.issubdtype(arr.dtype, np.integer):
                        noise = np.rint(noise)
                    arr[k:] = noise.astype(arr.dtype)
                else:
                    choices = np.unique(arr.astype(str)) if arr.dtype.kind in "OUS" else np.unique(arr)
                    arr[k:] = rng.choice(choices, size=m)
            cols[c] = arr
        return PointInTimeTable(
            self._name,
            event_time=self._cols[EVENT_TIME],
            known_time=self._cols[KNOWN_TIME],
            columns=cols,
            block_rows=self._block_rows,
        )


class PointInTimeView:
    """The rows of one table that were known at one time, and nothing else.

    Built by :meth:`PointInTimeTable.view`; immutable; safe to share between threads. Arrays it
    returns are read-only. Rows are in knowledge order (then event order).
    """

    __slots__ = ("_as_of", "_as_of64", "_cache", "_head", "_n", "_name", "_rem", "_value_columns")

    def __init__(
        self,
        name: str,
        as_of: dt.datetime,
        head: _Block | None,
        rem: npt.NDArray[Any] | Mapping[str, npt.NDArray[Any]] | None,
        n: int,
        value_columns: tuple[str, ...],
    ) -> None:
        self._name = name
        self._as_of = as_of
        self._as_of64: np.datetime64 | None = None
        self._head = head
        self._rem = rem
        self._n = n
        self._value_columns = value_columns
        self._cache: dict[str, npt.NDArray[Any]] | None = None

    @property
    def table_name(self) -> str:
        """The table this view reads."""
        return self._name

    @property
    def as_of(self) -> dt.datetime:
        """The view's time: it holds the rows known at or before it."""
        return self._as_of

    @property
    def columns(self) -> tuple[str, ...]:
        """The value columns (``event_time`` and ``known_time`` can be read too)."""
        return self._value_columns

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"PointInTimeView({self._name!r}, as_of={format_time(self._as_of)}, rows={self._n})"

    def _check_column(self, column: str) -> None:
        if column not in self._value_columns and column not in _TIME_COLUMNS:
            raise DatasetError(
                f"a column of table {self._name!r} "
                f"({listed((*self._value_columns, *_TIME_COLUMNS), plain=True)})",
                repr(column),
                "check the column name",
            )

    def _pieces(self, column: str, need: int) -> list[npt.NDArray[Any]]:
        """The last ``need`` rows of ``column`` as pieces, newest last."""
        pieces: list[npt.NDArray[Any]] = []
        got = 0
        if self._rem is not None:
            piece = self._rem[column]
            pieces.append(piece)
            got += len(piece)
        node = self._head
        while node is not None and got < need:
            pieces.append(node.cols[column])
            got += node.n
            node = node.prev
        pieces.reverse()
        return pieces

    def column(self, column: str) -> npt.NDArray[Any]:
        """Every known value of ``column`` (read-only; O(rows known), cached per view)."""
        self._check_column(column)
        if self._cache is not None and column in self._cache:
            return self._cache[column]
        pieces = self._pieces(column, self._n)
        if len(pieces) == 1:
            out = pieces[0]
        elif pieces:
            out = _freeze(np.concatenate(pieces))
        else:
            out = _freeze(self._empty(column))
        if self._cache is None:
            self._cache = {}
        self._cache[column] = out
        return out

    def _empty(self, column: str) -> npt.NDArray[Any]:
        if column in _TIME_COLUMNS:
            return np.empty(0, dtype=_US)
        node = self._head
        if node is not None:
            return node.cols[column][:0].copy()
        return np.empty(0, dtype=object)

    def tail(self, n: int, column: str | None = None) -> Any:
        """The last ``n`` known rows (fewer if fewer are known), in O(n).

        Args:
            n: how many rows.
            column: one column (returns an array) or ``None`` (returns a dict of every column,
                the two times included).
        """
        if n < 0:
            raise ValueError(f"expected n >= 0, got {n}. Ask for a non-negative number of rows.")
        names = (column,) if column is not None else (*_TIME_COLUMNS, *self._value_columns)
        out: dict[str, npt.NDArray[Any]] = {}
        for c in names:
            self._check_column(c)
            pieces = self._pieces(c, n)
            if not pieces or n == 0:
                arr = self._empty(c)
            else:
                arr = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
                arr = arr[len(arr) - min(n, len(arr)):]
            out[c] = _freeze(arr) if arr.flags.writeable else arr
        return out[column] if column is not None else out

    def last(self, column: str) -> Any:
        """The value of ``column`` in the row that became known last.

        Raises:
            NotFoundError: no row is known yet.
        """
        self._check_column(column)
        if self._n == 0:
            raise NotFoundError(
                f"table {self._name!r}: expected at least one row known at "
                f"{format_time(self._as_of)}, got none. Start the backtest after the first row "
                "becomes known."
            )
        if self._rem is not None:
            return self._rem[column][-1]
        assert self._head is not None
        return self._head.cols[column][-1]

    def _as_of_64(self) -> np.datetime64:
        if self._as_of64 is None:
            self._as_of64 = to_datetime64(self._as_of)
        return self._as_of64

    def _look_ahead(self, what: str) -> LookAheadError:
        return LookAheadError(
            f"table {self._name!r}: expected a read of rows known at or before the step's time "
            f"{format_time(self._as_of)}, got a read of {what}, which was not known yet. "
            "Read only what was knowable at the step (view.tail, view.last, view.get with an "
            "earlier event time); what happened next belongs in the workflow's outcome function."
        )

    def get(self, column: str, event_time: dt.datetime) -> Any:
        """The latest known value of ``column`` for the row about ``event_time``.

        Raises:
            LookAheadError: no row about ``event_time`` is known yet and ``event_time`` is at or
                after the view's time (the read would look ahead).
            NotFoundError: no row about an ``event_time`` at or before the view's time is known.
        """
        self._check_column(column)
        target = to_datetime64(event_time)
        # Search newest first: recent events are the common case, so this is usually O(block).
        for piece_ev, piece_val in self._iter_pieces_newest_first(column):
            hits = np.flatnonzero(piece_ev == target)
            if hits.size:
                return piece_val[hits[-1]]
        if target >= self._as_of_64():
            raise self._look_ahead(f"the row about {format_time(event_time)}")
        raise NotFoundError(
            f"table {self._name!r}: expected a row about {format_time(event_time)} known at "
            f"{format_time(self._as_of)}, got none. Check the event time (rows about the past "
            "may become known late, or be missing)."
        )

    def _iter_pieces_newest_first(
        self, column: str
    ) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
        if self._rem is not None:
            yield self._rem[EVENT_TIME], self._rem[column]
        node = self._head
        while node is not None:
            yield node.cols[EVENT_TIME], node.cols[column]
            node = node.prev

    def rows(
        self, *, since: dt.datetime | None = None, until: dt.datetime | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        """Rows with ``since < known_time <= until`` (``until`` defaults to the view's time).

        Raises:
            LookAheadError: ``until`` is after the view's time.
        """
        if until is not None and to_datetime64(until) > self._as_of_64():
            raise self._look_ahead(f"rows known until {format_time(until)}")
        known = self.column(KNOWN_TIME)
        lo = 0 if since is None else int(np.searchsorted(known, to_datetime64(since), side="right"))
        hi = self._n if until is None else int(np.searchsorted(known, to_datetime64(until), side="right"))
        return {c: self.column(c)[lo:hi] for c in (*_TIME_COLUMNS, *self._value_columns)}

    def at(self, as_of: dt.datetime) -> PointInTimeView:
        """The view at an earlier time (what was knowable then).

        Raises:
            LookAheadError: ``as_of`` is after this view's time.
        """
        t64 = to_datetime64(as_of)
        if t64 > self._as_of_64():
            raise self._look_ahead(f"a view as of {format_time(as_of)}")
        k = int(np.searchsorted(self.column(KNOWN_TIME), t64, side="right"))
        cols = {c: self.column(c)[:k] for c in (*_TIME_COLUMNS, *self._value_columns)}
        return PointInTimeView(self._name, as_of, None, cols if k else None, k, self._value_columns)

    def frame(self) -> pd.DataFrame:
        """Every known row as a data frame (O(rows known); the times as UTC timestamps)."""
        data: dict[str, Any] = {}
        for c in (*_TIME_COLUMNS, *self._value_columns):
            arr = self.column(c)
            data[c] = pd.to_datetime(arr).tz_localize("UTC") if c in _TIME_COLUMNS else arr
        return pd.DataFrame(data)



# -- reading files that grow: re-read when the file changed, cheap when it did not ---------------

SourceStamp = tuple[int, int, int]
"""What identifies a file's content without reading it: ``(st_mtime_ns, st_size, st_ino)``."""

_FRESH: dict[tuple[str, str, str, str], tuple[SourceStamp, PointInTimeTable]] = {}
_FRESH_LOCK = threading.Lock()


def source_stamp(path: str | os.PathLike[str]) -> SourceStamp:
    """The file's ``(modification time in ns, size, inode)``: a new value whenever rows are
    appended (size) or the file is replaced (an atomic replace is a new inode).

    Raises:
        DatasetError: the file is missing or unreadable.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise DatasetError("a readable file", f"{exc.__class__.__name__}: {exc.strerror}",
                           "check the path (was the dataset moved?)", file=str(path)) from exc
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_csv_fresh(
    path: str | os.PathLike[str],
    name: str,
    *,
    event_time: str = EVENT_TIME,
    known_time: str = KNOWN_TIME,
) -> PointInTimeTable:
    """:meth:`PointInTimeTable.from_csv`, re-read only when the file changed since the last read.

    No cache outlives new data: each call compares the file's :func:`source_stamp` (one
    ``stat``, microseconds) with the stamp of the copy kept from the last read and reads the
    file again when they differ. A file that changes while it is read is not kept (the next
    call reads it again). A long-running process (a Dagster code server, a daemon) therefore
    sees appended rows at its next call.

    >>> import tempfile, pathlib, os
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = f.write_text("event_time,known_time,x\\n2012-01-01T00:00:00Z,2012-01-02T00:00:00Z,1\\n")
    >>> read_csv_fresh(f, "t").n_rows
    1
    >>> with f.open("a") as fh:
    ...     _ = fh.write("2012-01-02T00:00:00Z,2012-01-03T00:00:00Z,2\\n")
    >>> read_csv_fresh(f, "t").n_rows
    2
    """
    p = Path(path).resolve()
    key = (str(p), name, event_time, known_time)
    before = source_stamp(p)
    with _FRESH_LOCK:
        kept = _FRESH.get(key)
    if kept is not None and kept[0] == before:
        return kept[1]
    table = PointInTimeTable.from_csv(p, name, event_time=event_time, known_time=known_time)
    if source_stamp(p) == before:
        with _FRESH_LOCK:
            _FRESH[key] = (before, table)
    return table
