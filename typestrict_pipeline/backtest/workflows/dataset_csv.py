"""The fast paths of a registered dataset's CSV: read, times and write, each over whole columns.

:mod:`~typestrict_pipeline.backtest.workflows.dataset_rows` reads a customer's file by the
product's CSV rules (Python's C ``csv`` reader, strict quotes), parses its times as pandas'
ISO 8601 parser does, and stores the rows as pandas' ``to_csv`` writes them. Each function here
does one of these over whole Arrow or numpy columns, and only where it gives the same cells, the
same times and the same bytes; anywhere it cannot vouch for that it answers ``None`` and the
caller takes the general way, which also makes every refusal:

* :func:`arrow_columns`: Arrow's CSV reader, for a file whose every quote opens or closes a
  field where the ``csv`` reader would (the two readers differ only on the others);
* :func:`z_times`: a chunk of times all written ``YYYY-MM-DDTHH:MM:SSZ``, valid and in range;
* :func:`iso_texts`, :func:`float_texts`, :func:`quoted`, :func:`csv_lines`: the stored text
  of each cell, then each line, as ``to_csv`` writes it (``tests/test_dataset_csv.py`` holds
  them to ``to_csv`` on hostile cells).
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.lazy import LazyModule

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    import pandas as pd
    import pyarrow as pa
else:
    pd = LazyModule("pandas")
    pa = LazyModule("pyarrow")

__all__ = ["arrow_columns", "csv_lines", "float_texts", "header_line", "iso_texts", "quoted", "z_times"]

_BOM = b"\xef\xbb\xbf"
_QUOTE, _COMMA, _LF, _CR = 34, 44, 10, 13


def _plain_quotes(data: npt.NDArray[np.uint8]) -> bool:
    """Whether every quote of ``data`` opens a field (at the start, after a comma or a line end)
    or closes one (before a comma, a line end or the end), in turn, a doubled quote inside a
    quoted field being a close and an open; and no line is a lone empty quoted field (``""``,
    which the ``csv`` reader reads as one empty cell and Arrow's as a row). Looked at a
    mebibyte at a time (the quotes' positions of one at once)."""
    bounds = np.zeros(256, dtype=bool)  # the bytes a quote may follow when it opens, precede when it closes
    bounds[[_COMMA, _LF, _CR, _QUOTE]] = True
    line_end = np.zeros(256, dtype=bool)
    line_end[[_LF, _CR]] = True
    seen = 0
    for start in range(0, len(data), 1 << 20):
        at = np.flatnonzero(data[start:start + (1 << 20)] == _QUOTE) + start
        opens, closes = at[seen % 2::2], at[1 - seen % 2::2]
        seen += len(at)
        before = _byte_at(data, opens - 1)
        after = _byte_at(data, closes + 1)
        if not (bounds[before].all() and bounds[after].all()):
            return False
        empty = opens[_byte_at(data, opens + 1) == _QUOTE]  # "" opened at a line's start ...
        if (line_end[_byte_at(data, empty - 1)] & line_end[_byte_at(data, empty + 2)]).any():
            return False  # ... and closed at its end
    return seen % 2 == 0


def _byte_at(data: npt.NDArray[np.uint8], at: npt.NDArray[np.intp]) -> npt.NDArray[np.uint8]:
    """The bytes of ``data`` at positions ``at``, a line feed before the start and after the end."""
    inside = (at >= 0) & (at < len(data))
    out = np.full(len(at), _LF, dtype=np.uint8)
    out[inside] = data[at[inside]]
    return out


def _first_record(text: memoryview) -> list[str] | None:
    """The first record the ``csv`` reader reads that is not an empty line (the header), from
    the text's first 64 KiB (four times more while the record may go on past them)."""
    size = 1 << 16
    while True:
        whole = size >= len(text)
        piece = codecs.getincrementaldecoder("utf-8")().decode(text[:size], final=whole)
        records = csv.reader(io.StringIO(piece, newline=""), strict=True)
        try:
            header = next((r for r in records if r), None)
            if whole or (header is not None and next(records, None) is not None):
                return header
        except csv.Error:
            if whole:
                return None
        size *= 4


def arrow_columns(raw: bytes, cell: int) -> tuple[list[str], list[pa.ChunkedArray]] | None:
    """The header and each column's cells (Arrow strings, the header row left out) of a CSV file
    as the product's ``csv`` reader reads it (``utf-8-sig``, strict quotes, empty lines left
    out, cells under ``cell`` characters), read by Arrow; ``None`` when Arrow's reading could
    differ (a quote that neither opens nor closes a field where the ``csv`` reader would, a
    line of ``""``, a second BOM) or fails (a short or long row, a long cell): the caller reads
    the file the general way, which also refuses it.

    >>> header, columns = arrow_columns(b'\\xef\\xbb\\xbfa,b\\r\\n1,"x, ""y"" z"\\n\\n2,\\n', 100)
    >>> header, [c.to_pylist() for c in columns]
    (['a', 'b'], [['1', '2'], ['x, "y" z', '']])
    >>> arrow_columns(b'a,b\\n1,x"y"\\n', 100) is None  # a quote inside a plain cell
    True
    """
    import pyarrow.csv as pacsv

    text = memoryview(raw)[len(_BOM):] if raw.startswith(_BOM) else memoryview(raw)  # no copy
    if text[:len(_BOM)] == _BOM or not _plain_quotes(np.frombuffer(text, dtype=np.uint8)):
        return None
    header = _first_record(text)
    if header is None:
        return None
    names = [f"f{i}" for i in range(len(header))]
    try:  # on one thread: as fast here, and its peak memory is the file and the cells, not more
        table = pacsv.read_csv(
            pa.BufferReader(pa.py_buffer(text)),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                                 null_values=[], strings_can_be_null=False))
    except (pa.ArrowInvalid, ValueError):
        return None
    import pyarrow.compute as pc

    if table.column_names != names or [c[0].as_py() for c in table.columns] != header:
        return None
    if any(c.null_count or (pc.max(pc.utf8_length(c)).as_py() or 0) >= cell for c in table.columns):
        return None
    return header, [c.slice(1) for c in table.columns]


def z_times(cells: pa.Array | pa.ChunkedArray, low_ns: int, high_ns: int) -> npt.NDArray[np.int64] | None:
    """Nanoseconds since 1970 (UTC) of times all written ``YYYY-MM-DDTHH:MM:SSZ`` (a valid date,
    hours to 23, minutes and seconds to 59), from ``low_ns`` to before ``high_ns``; ``None`` when
    a cell is written otherwise, is no such time or lies outside (the caller parses the cells
    the general way, which refuses them as it should).

    >>> z_times(pa.array(["2012-02-29T23:59:59Z", "1970-01-01T00:00:01Z"]), 0, 2**62).tolist()
    [1330559999000000000, 1000000000]
    >>> z_times(pa.array(["2011-02-29T00:00:00Z"]), 0, 2**62) is None
    True
    """
    arr = cells.combine_chunks() if isinstance(cells, pa.ChunkedArray) else cells
    n = len(arr)
    if not n or arr.null_count or arr.type != pa.string():
        return None
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    if int(offsets[-1]) - int(offsets[0]) != 20 * n or (np.diff(offsets) != 20).any():
        return None
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]].reshape(n, 20)
    if (data[:, [4, 7, 10, 13, 16, 19]] != np.frombuffer(b"--T::Z", dtype=np.uint8)).any():
        return None
    digits = data[:, [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]].astype(np.int64) - 48
    if ((digits < 0) | (digits > 9)).any():
        return None
    year = digits[:, 0] * 1000 + digits[:, 1] * 100 + digits[:, 2] * 10 + digits[:, 3]
    month, day, hour, minute, second = (digits[:, i] * 10 + digits[:, i + 1] for i in range(4, 14, 2))
    if ((month < 1) | (month > 12) | (day < 1) | (hour > 23) | (minute > 59) | (second > 59)).any():
        return None
    first = ((year - 1970) * 12 + month - 1).astype("datetime64[M]")
    length = ((first + 1).astype("datetime64[D]") - first.astype("datetime64[D]")).astype(np.int64)
    if (day > length).any():
        return None
    days = first.astype("datetime64[D]").astype(np.int64) + day - 1
    ns: npt.NDArray[np.int64] = (days * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000_000
    if ((ns < low_ns) | (ns >= high_ns)).any():
        return None
    return ns


def _string_array(data: npt.NDArray[np.uint8]) -> pa.Array:
    """Rows of a ``uint8`` matrix, each one ASCII text of the matrix's width, as Arrow strings."""
    n, width = data.shape
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(data))])


def iso_texts(us: npt.NDArray[np.int64]) -> pa.Array | None:
    """Times (microseconds since 1970, UTC, years 1000 to 9999) written as
    :func:`~typestrict_pipeline.backtest.pit.format_time` writes them to the second,
    ``YYYY-MM-DDTHH:MM:SSZ``; ``None`` when one has a fraction of a second or another year.

    >>> iso_texts(np.array([1330559999000000, -2208988800000000])).to_pylist()
    ['2012-02-29T23:59:59Z', '1900-01-01T00:00:00Z']
    """
    if (us % 1_000_000).any():
        return None
    seconds = us // 1_000_000
    day = seconds.astype("datetime64[s]").astype("datetime64[D]")
    month = day.astype("datetime64[M]")
    year = month.astype("datetime64[Y]").astype(np.int64) + 1970
    if ((year < 1000) | (year > 9999)).any():
        return None
    of_day = seconds - day.astype("datetime64[s]").astype(np.int64)
    fields = (year, month.astype(np.int64) % 12 + 1, (day - month.astype("datetime64[D]")).astype(np.int64) + 1,
              of_day // 3600, of_day // 60 % 60, of_day % 60)
    out = np.empty((len(us), 20), dtype=np.uint8)
    out[:, [4, 7, 10, 13, 16, 19]] = np.frombuffer(b"--T::Z", dtype=np.uint8)
    for value, (start, width) in zip(fields, ((0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2)), strict=True):
        for k in range(width):
            out[:, start + k] = 48 + value // 10 ** (width - 1 - k) % 10
    return _string_array(out)


def float_texts(values: npt.NDArray[np.float64]) -> pa.Array:
    """Numbers as ``to_csv`` writes a ``float64`` column: numpy's ``astype(str)`` of each (the
    shortest text that reads back the same, ``-0.0`` kept), a NaN empty. Each distinct value (bit
    for bit) is written once.

    >>> float_texts(np.array([7.0, np.nan, -0.0, 0.0, 1e16, 7.0])).to_pylist()
    ['7.0', '', '-0.0', '0.0', '1e+16', '7.0']
    """
    codes, distinct = pd.factorize(np.ascontiguousarray(values).view(np.int64))
    numbers = np.asarray(distinct, dtype=np.int64).view(np.float64)
    texts = numbers.astype(str).astype(object)
    texts[np.isnan(numbers)] = ""
    return pa.array(texts, type=pa.string()).take(pa.array(codes, type=pa.int64()))


def quoted(texts: pa.Array) -> pa.Array:
    """Text cells as Python's ``csv`` writer writes them for ``to_csv`` (``QUOTE_MINIMAL``, line
    end ``\\n``): a cell with a comma, a quote or a line feed within double quotes, its quotes
    doubled; any other as is. A cell with a carriage return is quoted too: a stored cell holds
    one only in a ``\\r\\n`` (``dataset_rows._check_texts``), quoted for its ``\\n`` anyway, so the
    bytes are ``to_csv``'s whether or not a Python version's writer quotes a lone ``\\r``.

    >>> quoted(pa.array(["a", "b, c", 'say "hi" now', "two\\nlines", ""])).to_pylist()
    ['a', '"b, c"', '"say ""hi"" now"', '"two\\nlines"', '']
    """
    import pyarrow.compute as pc

    needs = pc.match_substring_regex(texts, '[,"\n\r]')
    if not pc.any(needs).as_py():
        return texts
    wrapped = pc.binary_join_element_wise('"', pc.replace_substring(texts, '"', '""'), '"', "")
    return pc.if_else(needs, wrapped, texts)


def header_line(names: Sequence[str]) -> bytes:
    """The header line ``to_csv`` writes (its ``csv`` writer and settings).

    >>> header_line(["event_time", "a,b"])
    b'event_time,"a,b"\\n'
    """
    out = io.StringIO()
    csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL).writerow(list(names))
    return out.getvalue().encode()


def csv_lines(cells: Sequence[pa.Array]) -> bytes:
    """Rows of cells, each column's already as stored (:func:`quoted`), as CSV lines: the cells
    joined by commas, each line ended by ``\\n``.

    >>> csv_lines([pa.array(["1", "2"]), pa.array(['"a,b"', ""])])
    b'1,"a,b"\\n2,\\n'
    """
    import pyarrow.compute as pc

    *first, last = cells
    ended = pc.binary_join_element_wise(last, "", "\n")
    joined = pc.binary_join_element_wise(*first, ended, ",") if first else ended
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32, count=len(joined) + 1, offset=joined.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    text: bytes = joined.buffers()[2].slice(start, end - start).to_pybytes()
    return text
