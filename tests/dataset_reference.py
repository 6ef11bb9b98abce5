"""The registration and append of point-in-time datasets as they were before they were read a
column at a time (the code of ``datasets.py`` at 63b3350, the functions verbatim): the reference
``tests/test_dataset_rows_reference.py`` holds the new code to, bit for bit and error for error."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from typestrict_pipeline.backtest.pit import (
    EVENT_TIME,
    KNOWN_TIME,
    PointInTimeTable,
    check_header,
    format_time,
)
from typestrict_pipeline.backtest.workflow import Workflow, check_columns
from typestrict_pipeline.errors import DatasetError, InputError, listed


def _read_rows(path: Path, *, stored: bool = False) -> pd.DataFrame:
    """A CSV's rows, read in bounded work (:func:`typestrict_pipeline.files.read_data_file`: a
    regular file, not too large, a readable archive, no NUL byte). A file given to register or
    append is read as the text written, by the rules of every CSV the product takes
    (:func:`typestrict_pipeline.refund.table.csv_columns`: a row of more or fewer cells than the
    header is refused with its row), every cell a string (``NA``, ``null``, ``inf`` are not
    turned into anything: :func:`_typed` decides); a stored table (``stored``), which this
    module wrote after validating it, with its numbers typed and an empty cell missing."""
    import io

    from typestrict_pipeline.files import read_data_file

    raw = read_data_file(path, error=DatasetError, what="a CSV file with a header row")
    if not stored:  # the customer's file: the trainings' CSV rules (a short or long row refused)
        from typestrict_pipeline.refund.table import csv_columns

        cells = csv_columns(raw, path)
        check_header(list(cells), str(path))  # a column without a name, at the header, by its position
        frame = pd.DataFrame(cells, dtype=str)
        if frame.empty:
            raise DatasetError("at least one row", "no rows", "give the file some rows", file=str(path))
        return frame
    try:
        frame = pd.read_csv(io.BytesIO(raw), keep_default_na=False, na_values=[""])
    except (ValueError, MemoryError, pd.errors.ParserError) as exc:
        raise DatasetError("a readable CSV file with a header row",
                           f"{exc.__class__.__name__}: {' '.join(str(exc).split())[:160]}",
                           "check the file", file=str(path)) from None
    if frame.empty:
        raise DatasetError("at least one row", "no rows", "give the file some rows", file=str(path))
    return frame


NUMBER_MISTAKES = frozenset({"nan", "na", "n/a", "null", "none", "nil", "-", "?", "missing", "inf", "-inf",
                             "+inf", "infinity", "-infinity", "+infinity", "true", "false", "yes", "no"})
"""Words a number column may hold by mistake: read as a number column, then refused by row."""


def _column_kind(cells: pd.Series) -> str:
    """``"number"`` when the column's cells are numbers (or words a number column may hold by
    mistake, :data:`NUMBER_MISTAKES`, refused later with their row), ``"bool"`` when they are all
    ``true``/``false``, else ``"text"``. A cell is empty when only white space (Arrow's
    ``utf8_trim_whitespace``) is left; a number is :func:`~typestrict_pipeline.values.looks_numeric`.

    Over the whole column with Arrow: the cells written plainly as numbers are matched at once,
    and only the others are looked at one by one, stopping at the first that makes the column
    text (a column of 200 cells: about 0.1 ms, against 1.6 ms with pandas' string methods).

    >>> _column_kind(pd.Series(["1.5", " ", "NA", "-2"])), _column_kind(pd.Series(["true", "FALSE"]))
    ('number', 'bool')
    >>> _column_kind(pd.Series(["1", "rain"])), _column_kind(pd.Series(["", " "]))
    ('text', 'number')
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from typestrict_pipeline.values import looks_numeric, plain_numbers

    arr = pa.array(cells, type=pa.large_string())
    stripped = pc.utf8_trim_whitespace(arr)
    filled = pc.not_equal(stripped, "").fill_null(False)
    if not pc.any(filled).as_py():
        return "number"
    lowered = pc.utf8_lower(pc.filter(stripped, filled))
    if pc.all(pc.is_in(lowered, value_set=pa.array(["true", "false"], type=pa.large_string()))).as_py():
        return "bool"
    kept = pc.filter(arr, filled)
    plain = plain_numbers(kept)
    numeric = bool(pc.any(plain).as_py())
    rest = pa.array(np.flatnonzero(~plain.to_numpy(zero_copy_only=False)), type=pa.int64())
    for cell, word in zip(pc.take(kept, rest).to_pylist(), pc.take(lowered, rest).to_pylist(), strict=True):
        if looks_numeric(cell):
            numeric = True
        elif word not in NUMBER_MISTAKES:
            return "text"
    return "number" if numeric else "text"


def _typed(frame: pd.DataFrame, kinds: Mapping[str, str], file: Path) -> pd.DataFrame:
    """``frame`` (every cell text) with its value columns typed by ``kinds``, each cell checked:
    a number is finite and written in digits, an empty cell is missing (the one spelling of
    it); a truth value is ``true``/``false``; a text has no control character and does not
    start like a spreadsheet formula (``=``, ``+``, ``-``, ``@``, tab, CR): refused with its
    file, row and column (docs/security.md)."""
    from typestrict_pipeline.values import check_text, data_numbers, is_formula

    out = frame.copy()
    for col, kind in kinds.items():
        if col in (EVENT_TIME, KNOWN_TIME) or col not in frame.columns:
            continue
        cells = frame[col]
        if kind == "number":
            try:
                out[col] = data_numbers(cells.tolist())
            except InputError as exc:
                raise DatasetError(f"a number in column {col!r} (finite, written in digits), or an empty "
                                   "cell for a missing value", exc.got, exc.fix, file=str(file), row=exc.row,
                                   column=str(col)) from None
            continue
        if kind == "bool":
            text = cells.str.strip().str.lower()
            ok = text.isin(["true", "false"])
            if not ok.all():
                i = int(np.flatnonzero(~ok.to_numpy())[0])
                raise DatasetError(f"true or false in column {col!r} (as in the rows already known)",
                                   repr(cells.iloc[i]), "fix the value", file=str(file), row=i + 1, column=str(col))
            out[col] = text == "true"
            continue
        for i, v in enumerate(cells):
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
        out[col] = cells.where(cells != "", np.nan)
    return out


def _kinds_of(old: pd.DataFrame) -> dict[str, str]:
    """The kind of each value column of a stored table."""
    kinds = {}
    for col in old.columns:
        if pd.api.types.is_bool_dtype(old[col].dtype):
            kinds[str(col)] = "bool"
        elif pd.api.types.is_numeric_dtype(old[col].dtype):
            kinds[str(col)] = "number"
        else:
            kinds[str(col)] = "text"
    return kinds


def _canonical(frame: pd.DataFrame, file: Path, now: dt.datetime) -> pd.DataFrame:
    """The rows with their times in ISO 8601 ``Z`` (validated), refusing rows known in the future."""
    out = frame.copy()
    ev = pd.to_datetime(frame[EVENT_TIME], utc=True, format="ISO8601")
    kn = pd.to_datetime(frame[KNOWN_TIME], utc=True, format="ISO8601")
    future = np.flatnonzero((kn > pd.Timestamp(now)).to_numpy())
    if future.size:
        i = int(future[0])
        raise DatasetError(
            f"a knowledge time at or before now ({format_time(now)})", str(frame[KNOWN_TIME].iloc[i]),
            "append a row once it is known: a row known in the future would let a backtest see it early",
            file=str(file), row=i + 1, column=KNOWN_TIME,
        )
    out[EVENT_TIME] = [format_time(t.to_pydatetime()) for t in ev]
    out[KNOWN_TIME] = [format_time(t.to_pydatetime()) for t in kn]
    return out


def _validated(frame: pd.DataFrame, name: str, file: Path, now: dt.datetime,
               workflow: Workflow | None = None) -> pd.DataFrame:
    # The times present and typed; two rows with the same event_time and known_time that differ
    # refused (with both rows and the column), rows identical in every cell kept once.
    table = PointInTimeTable.from_frame(name, frame, file=str(file))
    if workflow is not None:  # the columns the workflow reads, checked as every replay checks them
        check_columns(workflow, {name: table}, dataset=f"file {file.name}",
                      fix=f"add the columns to {file.name} and register it again")
    canonical = _canonical(frame, file, now)
    if len(canonical) == table.n_rows:
        return canonical
    # Only rows identical in every cell share both times now: store each once, as the table reads it.
    return canonical.drop_duplicates(subset=[EVENT_TIME, KNOWN_TIME], ignore_index=True)


def register_bytes(path: Path, wf: Workflow, table: str, now: dt.datetime) -> bytes:
    """The bytes ``register_dataset`` stored for ``table`` of workflow ``wf`` from ``path``."""
    frame = _read_rows(path)
    declared = wf.columns.get(table, {})
    kinds = {str(c): declared.get(str(c)) or _column_kind(frame[c]) for c in frame.columns}
    at = now.replace(microsecond=0)
    return _validated(_typed(frame, kinds, path), table, path, at, wf).to_csv(index=False).encode()


def append_bytes(target: Path, src: Path, table: str, now: dt.datetime) -> tuple[bytes, int, int, dt.datetime, dt.datetime]:
    """What ``append_rows`` wrote after the stored bytes, with (added, rows, last before, last after)."""
    new = _read_rows(src)
    old = _read_rows(target, stored=True)
    want = [str(c) for c in old.columns]
    got = [str(c) for c in new.columns]
    for col in want:
        if col not in got:
            raise DatasetError(f"the table's columns {listed(want)}",
                               f"columns {listed(got)}, without {col!r}",
                               "add the column (leave a value empty when it is missing)", file=str(src), column=col)
    for col in got:
        if col not in want:
            raise DatasetError(f"the table's columns {listed(want)}", f"an extra column {col!r}",
                               "remove it: a dataset's columns are fixed when it is registered",
                               file=str(src), column=col)
    new = _typed(new, _kinds_of(old), src)
    canonical = _validated(new[list(old.columns)], table, src, now)
    last = pd.to_datetime(old[KNOWN_TIME], utc=True, format="ISO8601").max()
    kn = pd.to_datetime(canonical[KNOWN_TIME], utc=True, format="ISO8601")
    early = np.flatnonzero((kn <= last).to_numpy())
    if early.size:
        i = int(early[0])
        raise DatasetError(
            f"rows known after the table's last knowledge time {format_time(last.to_pydatetime())} "
            "(rows already known are never rewritten)",
            f"known_time {canonical[KNOWN_TIME].iloc[i]}",
            "append only rows that became known later; a correction is a new row about the same "
            "event_time with a later known_time",
            file=str(src), row=i + 1, column=KNOWN_TIME,
        )
    added = canonical.to_csv(index=False, header=False).encode()
    return (added, len(canonical), len(old) + len(canonical), last.to_pydatetime(), kn.max().to_pydatetime())
