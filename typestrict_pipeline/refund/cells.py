"""Turn one batch of a dataset column into Arrow text, the way the product reads a cell.

A cell is text when it is a string; an integer is read as its decimal text; ``None``, a missing
JSON key and a floating-point NaN are empty; anything else (``true``, ``1.5``, a list where a text
belongs) is an error naming the row. Arrow columns of strings, integers, nulls and NaN are
converted without a Python object per cell; any other column goes cell by cell through
:func:`scalar`, the one rule.

>>> import pyarrow as pa
>>> texts, error = as_text(pa.array([1, None, 30]), file="d.parquet", start=0, column="id",
...                        what="an id")
>>> texts.to_pylist(), error
(['1', None, '30'], None)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.errors import DatasetError

__all__ = [
    "as_text",
    "blank_mask",
    "python_whitespace",
    "scalar",
]


def scalar(value: Any, *, file: str, row: int, column: str, what: str) -> str | None:
    """A cell as text: None/NaN → None; str as is; int → decimal text; anything else is an error.

    >>> scalar(7, file="f", row=1, column="id", what="an id")
    '7'
    >>> scalar(True, file="f", row=2, column="id", what="an id")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: f, row 2, column 'id': expected an id as text, got True. Write it as text.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise DatasetError(
            f"{what} as text", repr(value), "write it as text", file=file, row=row, column=column
        )
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    raise DatasetError(
        f"{what} as text",
        f"{type(value).__name__} {value!r}",
        "write it as text",
        file=file,
        row=row,
        column=column,
    )


_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def python_whitespace() -> str:
    """Every character ``str.strip()`` and ``str.split()`` treat as white space (29 of them).

    >>> python_whitespace() == "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
    True
    """
    return _WHITESPACE


def blank_mask(texts: pa.Array) -> npt.NDArray[np.bool_]:
    """True where a cell is null or only white space (Python's ``not text.strip()``).

    Only a cell that is empty or starts with white space can be blank: those few are trimmed.

    >>> blank_mask(pa.array(["a", " ", "", None, " b", "\u3000", "x "])).tolist()
    [False, True, True, True, False, True, False]
    """
    first = pc.utf8_slice_codeunits(texts, 0, 1)
    maybe = pc.fill_null(pc.or_(pc.equal(first, ""), pc.is_in(first, value_set=_spaces())), True)
    out = np.asarray(maybe.to_numpy(zero_copy_only=False), dtype=bool)
    rows = np.flatnonzero(out)
    if rows.size:
        some = texts.take(pa.array(rows))
        trimmed = pc.utf8_trim(some, characters=python_whitespace())
        blank = pc.fill_null(pc.equal(pc.utf8_length(trimmed), 0), True)
        out[rows] = np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool)
    return out


@functools.cache
def _spaces() -> pa.Array:
    """The white-space characters as an Arrow array, made on first use: any ``pa.array`` call
    imports pandas (pyarrow checks for pandas objects), which loading the code location must not."""
    return pa.array(list(_WHITESPACE), type=pa.large_string())


def _python_cells(
    values: Sequence[Any], *, file: str, start: int, column: str, what: str
) -> tuple[pa.Array, DatasetError | None]:
    out: list[str | None] = []
    first: DatasetError | None = None
    for i, value in enumerate(values):
        try:
            out.append(scalar(value, file=file, row=start + i + 1, column=column, what=what))
        except DatasetError as exc:
            first = first or exc
            out.append(None)
    try:
        return pa.array(out, type=pa.large_string()), first
    except (pa.ArrowException, UnicodeEncodeError):  # a lone surrogate from a JSON escape
        for i, text in enumerate(out):
            if text is None or _encodable(text):
                continue
            out[i] = None
            if first is None or (first.row or 0) > start + i + 1:
                first = DatasetError(
                    f"{what} of Unicode characters",
                    "a lone surrogate escape (\\ud800-\\udfff) that is no character",
                    "remove the escape or write the character it stands for",
                    file=file, row=start + i + 1, column=column,
                )
        return pa.array(out, type=pa.large_string()), first


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_text(
    cells: pa.Array | pa.ChunkedArray | Sequence[Any],
    *,
    file: str,
    start: int,
    column: str,
    what: str,
) -> tuple[pa.Array, DatasetError | None]:
    """One batch of a column as large-string Arrow text (null: empty), and its first bad cell.

    Args:
        cells: the batch's cells (Arrow, or Python values).
        file: the file named in messages.
        start: the 0-based position of the batch's first row (rows in messages count from 1).
        column: the column's name.
        what: what the cell holds, for the message ("an id").

    Returns:
        The texts, and the error of the batch's first cell that is not text (None: none); the
        caller decides when to raise it, so errors come in the product's order.
    """
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    if not isinstance(cells, pa.Array):
        return _python_cells(cells, file=file, start=start, column=column, what=what)
    kind = cells.type
    if pa.types.is_dictionary(kind):
        cells = cells.dictionary_decode()
        kind = cells.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return cells.cast(pa.large_string()), None
    if pa.types.is_null(kind):
        return pa.nulls(len(cells), pa.large_string()), None
    if pa.types.is_integer(kind):
        return cells.cast(pa.large_string()), None
    if pa.types.is_floating(kind):
        values = cells.to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~np.isnan(values))  # nulls come back as NaN
        if bad.size == 0:
            return pa.nulls(len(cells), pa.large_string()), None
        i = int(bad[0])
        error = DatasetError(
            f"{what} as text", f"float {float(values[i])!r}", "write it as text",
            file=file, row=start + i + 1, column=column,
        )
        return pa.nulls(len(cells), pa.large_string()), error
    return _python_cells(cells.to_pylist(), file=file, start=start, column=column, what=what)
