"""Read a dataset file (CSV, Parquet or JSON Lines) in bounded batches of columns.

The columnar refund data path (``refund.dataset`` → ``refund.holdout``) reads every file through
:func:`iter_column_batches`: at most :data:`BATCH_ROWS` rows, and about :data:`BATCH_CHARS`
characters of the columns asked for, are held at a time, and only those columns.

- **Parquet** is read by pyarrow (``ParquetFile.iter_batches``): cells stay Arrow arrays.
- **CSV** is parsed by Python's ``csv`` module (strict, every cell the exact text written), fed by
  an incremental UTF-8 decoder, and each batch becomes Arrow arrays. pyarrow's own CSV reader is
  not used for parsing: its parse is not the product's (it reads ``"x"y`` as ``xy`` where the
  product refuses the row, and refuses a line holding one empty quoted cell, which the product
  skips), so the same file would not give the same rows or errors.
- **JSON Lines** is parsed by the strict JSON reader (duplicate keys, non-finite numbers refused),
  line by line; a missing key is a null cell.

Any error met while streaming is re-raised as the whole-file reader (:func:`read_table`) reports
it, so a file gets the same message, row and column whichever way it is read.
"""

from __future__ import annotations

import codecs
import csv
import io
import lzma
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeAlias

import pyarrow as pa

from typestrict_pipeline.errors import DatasetError
from typestrict_pipeline.files import bound_from_env, iter_jsonl_objects, loads_strict, nul_refusal
from typestrict_pipeline.refund.manifest import DatasetFormat

__all__ = [
    "BATCH_CHARS",
    "BATCH_ROWS",
    "MAX_CSV_CELL_CHARS",
    "Cells",
    "ColumnBatch",
    "FileStamp",
    "column_names",
    "csv_columns",
    "csv_row_count",
    "file_stamp",
    "iter_column_batches",
    "max_csv_cell_chars",
    "read_table",
]

BATCH_ROWS = 65_536
"""Rows per batch: a batch of short texts is a few MB whatever the file's size."""

BATCH_CHARS = 1024 * 1024
"""Characters per batch (1 Mi, of the columns read; for Parquet, of its row groups' uncompressed
bytes): a batch ends at :data:`BATCH_ROWS` rows or once it holds this many characters, so a batch
of long texts is a few MB too (a 100-character row: about 10,000 rows a batch, read as fast as
65,536). Bounded by rows only, 2,000 texts of 100 kB (a 200 MB CSV) were one batch and reading
them peaked at 1.9 GB; now at 0.2 GB (0.4 GB with 4 Mi characters a batch)."""

MAX_CSV_CELL_CHARS = 32 * 1024 * 1024
"""Longest cell of a CSV file read, in characters (32 Mi, 33,554,432): generous for a training
text (a 20 MB text is read as written; a long novel's chapter is well under 1 Mi characters),
and a cell left open by a stray quote is refused after 32 Mi characters instead of swallowing the
rest of the file. A line of the file is at most :data:`CSV_LINE_CELLS` times as long (64 Mi
characters): a longer line is refused once that much of it is read, never held whole.
``TYPESTRICT_MAX_CSV_CELL_CHARS`` overrides the cell bound (and the line bound with it)."""

CSV_LINE_CELLS = 2
"""A CSV line's bound, in cells of :func:`max_csv_cell_chars` characters."""


def max_csv_cell_chars() -> int:
    """The bound on a CSV cell (:data:`MAX_CSV_CELL_CHARS`, or the environment's)."""
    return bound_from_env("TYPESTRICT_MAX_CSV_CELL_CHARS", MAX_CSV_CELL_CHARS)

Cells: TypeAlias = "pa.Array | list[Any]"
"""One column of one batch: an Arrow array (Parquet) or plain Python values (CSV, JSON Lines)."""


@dataclass(frozen=True)
class ColumnBatch:
    """Some consecutive rows of the file.

    Attributes:
        start: the 0-based position of the batch's first data row.
        length: rows in the batch.
        cells: column name → that column's cells. A CSV or Parquet column the file lacks is left
            out; a JSON Lines batch has every column asked for (null where a row lacks the key).
    """

    start: int
    length: int
    cells: dict[str, Cells]


@dataclass(frozen=True)
class FileStamp:
    """What a dataset file looked like when it was validated (size and modification time)."""

    size: int
    mtime_ns: int


def file_stamp(path: Path) -> FileStamp:
    """The file's size and modification time, to tell later reads that it changed."""
    st = os.stat(path)
    return FileStamp(size=st.st_size, mtime_ns=st.st_mtime_ns)


def _missing_file(path: Path) -> DatasetError:
    return DatasetError(
        "an existing dataset file", "no such file", "check dataset.path in the manifest",
        file=str(path),
    )


# --------------------------------------------------------------------------------------------
# Whole-file reading (the exact messages; also what a streamed read falls back to on an error)
# --------------------------------------------------------------------------------------------

_OPENERS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def _csv_module(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix == ".zst":
        raise DatasetError(
            "a CSV file, plain or compressed with gzip, bzip2, xz or zip",
            "a .zst file",
            "recompress it with gzip (.csv.gz)",
            file=str(path),
        )
    return _OPENERS.get(suffix) or ("zipfile" if suffix == ".zip" else None)


_READ_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, ValueError, RuntimeError, zlib.error,
                                             lzma.LZMAError)
"""What reading a CSV file can raise: a damaged ``.gz`` or ``.xz`` raises ``zlib.error`` or
``LZMAError`` besides ``OSError``/``EOFError``; all are caught, so the message names the file."""


def _unreadable(path: Path, module: str | None, exc: BaseException) -> DatasetError:
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    elif str(exc):
        name = "zlib" if isinstance(exc, zlib.error) else type(exc).__name__
        detail = f"{name}: {' '.join(str(exc).split())[:100]}"
    else:
        detail = type(exc).__name__
    return DatasetError(
        "a readable CSV file" + (f" ({path.suffix} compressed)" if module else ""),
        f"a truncated or corrupt archive ({detail})" if module else detail,
        "check the file" + (", or compress it again" if module else ""),
        file=str(path),
    )


def _refuse_binary(path: Path, module: str | None) -> None:
    """Refuse a plain file whose first 64 KiB hold a NUL byte (a binary or sparse file: a 2 GiB
    file of zeros is refused after 64 KiB, not parsed as one 2 GiB line)."""
    if module is not None:
        return
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return  # the reader says why
    nul = head.find(b"\x00")
    if nul >= 0:
        got, fix = nul_refusal(head, nul)
        raise DatasetError("a CSV file of text", got, fix, file=str(path))


def _csv_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed by suffix (``.gz``, ``.bz2``, ``.xz``, ``.zip``)."""
    module = _csv_module(path)
    _refuse_binary(path, module)
    try:
        with _open_csv_binary(path, module) as handle:
            data: bytes = handle.read()
            return data
    except _READ_ERRORS as exc:
        raise _unreadable(path, module, exc) from None


def _open_csv_binary(path: Path, module: str | None) -> IO[bytes]:
    import importlib

    if module is None:
        return open(path, "rb")
    if module == "zipfile":
        import zipfile

        archive = zipfile.ZipFile(path)
        names = [n for n in archive.namelist() if not n.endswith("/")]
        if len(names) != 1:
            archive.close()
            raise ValueError("a zip archive must hold exactly one file")
        return archive.open(names[0])
    opener = importlib.import_module(module)
    handle: IO[bytes] = opener.open(path, "rb")
    return handle


def _not_utf8(path: Path, line: int) -> DatasetError:
    return DatasetError(
        "a UTF-8 encoded CSV file",
        f"bytes that are not UTF-8 on line {line} of the file",
        "save the file as UTF-8",
        file=str(path),
        row=max(line - 1, 1),
    )


def _decode_csv(path: Path, raw: bytes) -> str:
    r"""The file's text; bytes that are not UTF-8 are refused with their line (a byte-order
    mark counted in the file's bytes).

    >>> _decode_csv(Path("t.csv"), b"\xef\xbb\xbfid\n\xff\n")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: t.csv, row 1: expected a UTF-8 encoded CSV file, got bytes that are not UTF-8 on line 2 of the file. Save the file as UTF-8.
    """
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0  # not in exc.start
        raise _not_utf8(path, raw.count(b"\n", 0, exc.start + bom) + 1) from None


def _check_csv_bytes(path: Path, module: str | None) -> None:
    """Raise what ``_decode_csv(path, _csv_bytes(path))`` raises (a damaged archive first, then
    the first bytes that are not UTF-8, with their line), reading the file in chunks of 1 MiB:
    the whole-file reader's verdict on a file of any size, in bounded memory."""
    decoder = codecs.getincrementaldecoder("utf-8")()  # the BOM is valid UTF-8: same verdict
    first: DatasetError | None = None
    lines = 0
    try:
        with _open_csv_binary(path, module) as handle:
            while True:
                chunk = handle.read(1 << 20)
                if first is None:
                    pending = len(decoder.getstate()[0])  # its offsets count these bytes too
                    try:
                        decoder.decode(chunk, final=not chunk)
                    except UnicodeDecodeError as exc:
                        first = _not_utf8(path, lines + chunk.count(b"\n", 0, max(exc.start - pending, 0)) + 1)
                if not chunk:
                    break
                lines += chunk.count(b"\n")
    except _READ_ERRORS as exc:
        raise _unreadable(path, module, exc) from None
    if first is not None:
        raise first


class _LineTooLong(csv.Error):
    """A CSV line longer than its bound (raised by :func:`_bounded_lines` through the reader)."""

    def __init__(self, line: int, limit: int) -> None:
        super().__init__(f"line {line} longer than {limit} characters")
        self.line = line
        self.limit = limit


def _bounded_lines(stream: IO[str], limit: int) -> Iterator[str]:
    """The lines of ``stream`` (opened with ``newline=""``), each read at most ``limit`` characters
    and one at a time: a longer line raises :class:`_LineTooLong` instead of being read whole."""
    number = 0
    while line := stream.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith(("\n", "\r")):
            raise _LineTooLong(number, limit)
        yield line


def _csv_reader(stream: IO[str]) -> Iterator[list[str]]:
    """The product's CSV reader over ``stream``: strict quotes, cells of at most
    :func:`max_csv_cell_chars` characters, lines of at most :data:`CSV_LINE_CELLS` times that."""
    cell = max_csv_cell_chars()
    csv.field_size_limit(cell)
    return csv.reader(_bounded_lines(stream, CSV_LINE_CELLS * cell), strict=True)


def _check_header(header: list[str], file: str) -> None:
    seen: dict[str, int] = {}
    for number, name in enumerate(header, start=1):
        first = seen.setdefault(name, number)
        if first == number:
            continue
        if not name.strip():
            raise DatasetError(
                "a name for every column of the header",
                f"{'a blank' if name else 'an empty'} name for columns {first} and {number}",
                "name the columns, or remove them (a comma at the end of the header line adds a "
                "column without a name)",
                file=file,
            )
        raise DatasetError(
            "each column name once in the header",
            f"the column name {name[:40]!r} twice (columns {first} and {number})",
            "rename one of the columns",
            file=file,
        )


def _csv_records(
    reader: Iterator[list[str]], file: str
) -> Iterator[tuple[list[str], int, list[str]]]:
    """``(header, row, record)`` for each data row, with the product's CSV rules."""
    header: list[str] | None = None
    row = 0
    try:
        for record in reader:
            if not record or (record == [""] and header is not None):
                continue
            if header is None:
                header = record
                _check_header(header, file)
                continue
            row += 1
            if len(record) != len(header):
                raise DatasetError(
                    f"{len(header)} cells, like the header",
                    f"{len(record)} cells",
                    "make every row have one cell per column (quote cells that contain commas)",
                    file=file,
                    row=row,
                )
            yield header, row, record
    except _LineTooLong as exc:
        raise DatasetError(
            f"lines of at most {exc.limit:,} characters ({CSV_LINE_CELLS} times the bound of a "
            "cell)",
            f"a longer line (no line end in the first {exc.limit + 1:,} characters of line "
            f"{exc.line:,} of the file)",
            "check that this is the right file, or raise TYPESTRICT_MAX_CSV_CELL_CHARS if its "
            "cells are really that long",
            file=file,
            row=row + 1 if header is not None else None,
        ) from None
    except csv.Error as exc:
        if str(exc).startswith("field larger than field limit"):
            raise DatasetError(
                f"cells of at most {csv.field_size_limit():,} characters",
                "a longer cell (or a quote left open, which runs the cell on to the next quote)",
                "check the quotes on that row, or raise TYPESTRICT_MAX_CSV_CELL_CHARS if a cell "
                "is really that long",
                file=file,
                row=row + 1 if header is not None else None,
            ) from None
        raise DatasetError(
            "a CSV file with a header row",
            f"a CSV syntax error ({exc})",
            "check the quotes on that row",
            file=file,
            row=row + 1,
        ) from None
    if header is None:
        raise DatasetError(
            "a CSV file with a header row", "an empty file", "write the header and the rows",
            file=file,
        )
    yield header, 0, []  # the header of a file without data rows (row 0: no record)


def _read_csv(path: Path) -> dict[str, list[Any]]:
    return csv_columns(_csv_bytes(path), path)


def csv_columns(raw: bytes, path: Path) -> dict[str, list[str]]:
    """A CSV file's bytes (already read, in bounded work) as columns of the exact text written,
    by the product's CSV rules: UTF-8, each column name once, every row one cell per column
    (a short or long row is refused with its row, never padded), quotes strict. ``path`` is
    the file the messages name.

    >>> csv_columns(b"a,b\\n1,2\\n", Path("t.csv"))
    {'a': ['1'], 'b': ['2']}
    >>> csv_columns(b"a,b\\n1,2\\n3\\n", Path("t.csv"))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: t.csv, row 2: expected 2 cells, like the header, got 1 cells. Make every row have one cell per column (quote cells that contain commas).
    """
    file = str(path)
    text = _decode_csv(path, raw)
    reader = _csv_reader(io.StringIO(text, newline=""))
    columns: list[list[str]] | None = None
    names: list[str] = []
    for header, row, record in _csv_records(reader, file):
        if columns is None:
            names, columns = header, [[] for _ in header]
        if row:
            for cells, value in zip(columns, record, strict=True):
                cells.append(value)
    assert columns is not None
    return dict(zip(names, columns, strict=True))


def csv_row_count(raw: bytes, path: Path) -> int:
    """How many data rows a CSV file's bytes hold by the product's CSV rules, checked as
    :func:`csv_columns` checks them (UTF-8, a header, each column name once, every row one cell
    per column: a short or long row is refused with its row, never padded) without keeping the
    cells: for a reader that types the cells itself (the point-in-time tables' reader).

    A well-formed file is counted in one pass of the C ``csv`` reader (about 1 s per million
    rows of six columns, against 10 s for :func:`csv_columns`, which keeps every cell); any
    other file is read by :func:`csv_columns`, so it is refused with exactly its message.

    >>> csv_row_count(b"\\xef\\xbb\\xbfa,b\\n1,2\\n\\n3,4\\n", Path("t.csv"))
    2
    >>> csv_row_count(b"a,b\\n1,2\\n3\\n", Path("t.csv"))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: t.csv, row 2: expected 2 cells, like the header, got 1 cells. Make every row have one cell per column (quote cells that contain commas).
    """
    from collections import Counter

    try:
        reader = _csv_reader(io.StringIO(raw.decode("utf-8-sig"), newline=""))
        records = filter(None, reader)  # a blank line is no record (as _csv_records skips it)
        header = next(records, None)
        widths = Counter(map(len, records))
    except (UnicodeDecodeError, csv.Error):
        header = None
    if header is not None and len(set(header)) == len(header) > 1 and set(widths) <= {len(header)}:
        return widths[len(header)]
    # A refusal, or a line of one empty cell ("" alone), which is no row: the reader decides.
    return len(next(iter(csv_columns(raw, path).values())))


def not_parquet(exc: BaseException) -> str:
    """What pyarrow found instead of a Parquet file, in words, without the path it read (a
    server's copy is no name of the customer's) nor the exception's class.

    >>> not_parquet(OSError("Could not open Parquet input source '/srv/x/dataset.csv': Parquet "
    ...                     "magic bytes not found in footer. Either the file is corrupted or this is not a parquet file."))
    'a file that is not Parquet (Parquet magic bytes not found in footer)'
    """
    text = " ".join(str(exc).split())
    if "': " in text:
        text = text.split("': ", 1)[1]
    first = text.split(". ", 1)[0].rstrip(".")[:120]
    return f"a file that is not Parquet ({first})" if first else "a file that is not Parquet"


def _read_parquet(path: Path) -> dict[str, list[Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise DatasetError(
            "a Parquet file", not_parquet(exc), "check the file (or save it as Parquet)", file=str(path)
        ) from exc
    return {str(k): list(v) for k, v in table.to_pydict().items()}


def _read_jsonl(path: Path) -> dict[str, list[Any]]:
    rows = [value for _, value in iter_jsonl_objects(path, DatasetError)]
    names: dict[str, None] = {}
    for value in rows:
        for key in value:
            names.setdefault(str(key), None)
    return {name: [value.get(name) for value in rows] for name in names}


def read_table(path: Path, fmt: DatasetFormat) -> dict[str, list[Any]]:
    """Read a whole CSV, Parquet or JSONL file into columns of plain Python values.

    For small files and messages; the refund path streams with :func:`iter_column_batches`.

    Returns:
        Column name → list of values, one per data row (None for a missing JSONL key).

    Raises:
        DatasetError: the file is missing or cannot be parsed (the message names the row when it
            can).
    """
    if not path.exists():
        raise _missing_file(path)
    if fmt is DatasetFormat.CSV:
        return _read_csv(path)
    if fmt is DatasetFormat.PARQUET:
        return _read_parquet(path)
    return _read_jsonl(path)


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------


def column_names(path: Path, fmt: DatasetFormat) -> list[str]:
    """The file's column names, in the order :func:`read_table` gives them.

    A JSON Lines file's names are every key of every row, in order of first appearance, so the
    whole file is read (one row at a time).
    """
    names: list[str] = []
    for batch in iter_column_batches(path, fmt, (), names_out=names):
        del batch
    return names


def iter_column_batches(
    path: Path,
    fmt: DatasetFormat,
    wanted: Sequence[str],
    *,
    names_out: list[str] | None = None,
    batch_rows: int | None = None,
    batch_chars: int | None = None,
) -> Iterator[ColumnBatch]:
    """The file's rows, ``batch_rows`` at a time (fewer once a batch holds ``batch_chars``
    characters), with only the ``wanted`` columns it has.

    Args:
        path: the file.
        fmt: its format.
        wanted: the columns to return (a name the file lacks is left out of ``cells``).
        names_out: when given, filled with every column name of the file (in :func:`read_table`'s
            order) by the time the iterator is exhausted.
        batch_rows: rows per batch (default :data:`BATCH_ROWS`).
        batch_chars: characters of the ``wanted`` cells after which a batch ends before
            ``batch_rows`` (default :data:`BATCH_CHARS`; at least one row a batch; 0: rows
            only). Parquet batches take their row count from the row groups' uncompressed sizes.

    Raises:
        DatasetError: exactly what :func:`read_table` raises for the file.
    """
    if not path.exists():
        raise _missing_file(path)
    if batch_rows is None:
        batch_rows = BATCH_ROWS
    if batch_chars is None:
        batch_chars = BATCH_CHARS
    if fmt is DatasetFormat.PARQUET:
        yield from _parquet_batches(path, wanted, names_out, batch_rows, batch_chars)
    elif fmt is DatasetFormat.CSV:
        yield from _csv_batches(path, wanted, names_out, batch_rows, batch_chars)
    else:
        yield from _jsonl_batches(path, wanted, names_out, batch_rows, batch_chars)


#: ``ParquetFile(pre_buffer=...)`` for the batch readers. Pre-buffering keeps every row group's
#: column chunks it has read for the file's lifetime (apache/arrow#39808, #37139): reading a
#: 100-million-row file held 2.4 GB that way, measured with pyarrow 26 (and 195 MB without,
#: in 9.3 s instead of 15 s). Local files gain nothing from it.
PARQUET_PRE_BUFFER = False


def _parquet_rows_per_batch(metadata: Any, present: Sequence[str], batch_rows: int,
                            batch_chars: int) -> int:
    """Rows per batch of a Parquet file: ``batch_rows``, fewer when the ``present`` columns'
    uncompressed bytes per row (the largest of any row group) would make a batch hold more than
    ``batch_chars``."""
    if batch_chars <= 0:
        return batch_rows
    widest = 0.0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if group.num_rows <= 0:
            continue
        size = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns)
                   if group.column(c).path_in_schema.split(".")[0] in present)
        widest = max(widest, size / group.num_rows)
    return max(1, min(batch_rows, int(batch_chars // widest) if widest > 0 else batch_rows))


def _parquet_batches(
    path: Path, wanted: Sequence[str], names_out: list[str] | None, batch_rows: int,
    batch_chars: int = 0,
) -> Iterator[ColumnBatch]:
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path, pre_buffer=PARQUET_PRE_BUFFER)
        names = [str(n) for n in handle.schema_arrow.names]
        if names_out is not None:
            names_out[:] = names
        present = [c for c in dict.fromkeys(wanted) if c in names]
        start = 0
        if not present:
            total = handle.metadata.num_rows
            while start < total:
                length = min(batch_rows, total - start)
                yield ColumnBatch(start, length, {})
                start += length
            return
        rows = _parquet_rows_per_batch(handle.metadata, present, batch_rows, batch_chars)
        for record_batch in handle.iter_batches(batch_size=rows, columns=present):
            cells: dict[str, Cells] = {
                name: record_batch.column(i) for i, name in enumerate(record_batch.schema.names)
            }
            yield ColumnBatch(start, record_batch.num_rows, cells)
            start += record_batch.num_rows
    except DatasetError:
        raise
    except Exception:
        _read_parquet(path)  # the whole-file reader's message for this file
        raise


def _csv_batches(
    path: Path, wanted: Sequence[str], names_out: list[str] | None, batch_rows: int,
    batch_chars: int = 0,
) -> Iterator[ColumnBatch]:
    file = str(path)
    module = _csv_module(path)
    _refuse_binary(path, module)
    try:
        with _open_csv_binary(path, module) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="", errors="strict")
            reader = _csv_reader(text)
            yield from _csv_record_batches(_csv_records(reader, file), wanted, names_out, batch_rows,
                                           batch_chars)
    except _READ_ERRORS:
        # The whole-file reader decodes the whole file before it parses: a byte that is not
        # UTF-8 (or a damaged archive) anywhere comes first. Ask the same of the file, read in
        # chunks (a file refused for a 1 GB line is not then read whole); else the error stands.
        _check_csv_bytes(path, module)
        raise


def _csv_record_batches(
    records: Iterator[tuple[list[str], int, list[str]]],
    wanted: Sequence[str],
    names_out: list[str] | None,
    batch_rows: int,
    batch_chars: int = 0,
) -> Iterator[ColumnBatch]:
    picks: list[tuple[str, int]] | None = None
    columns: dict[str, list[str]] = {}
    start = length = chars = 0
    room = batch_chars if batch_chars > 0 else -1
    for header, row, record in records:
        if picks is None:
            if names_out is not None:
                names_out[:] = header
            position = {name: i for i, name in enumerate(header)}
            picks = [(c, position[c]) for c in dict.fromkeys(wanted) if c in position]
            columns = {c: [] for c, _ in picks}
        if not row:
            break
        for name, i in picks:
            cell = record[i]
            columns[name].append(cell)
            chars += len(cell)
        length += 1
        if length == batch_rows or chars >= room >= 0:
            yield ColumnBatch(start, length, dict(columns))
            start += length
            length = chars = 0
            columns = {c: [] for c, _ in picks}
    if length:
        yield ColumnBatch(start, length, dict(columns))


def _jsonl_batches(
    path: Path, wanted: Sequence[str], names_out: list[str] | None, batch_rows: int,
    batch_chars: int = 0,
) -> Iterator[ColumnBatch]:
    names: dict[str, None] = {}
    keep = list(dict.fromkeys(wanted))
    columns: dict[str, list[Any]] = {c: [] for c in keep}
    start = length = chars = 0
    room = batch_chars if batch_chars > 0 else -1
    for _, value in iter_jsonl_objects(path, DatasetError):
        for key in value:
            if key not in names:
                names[str(key)] = None
        for c in keep:
            cell = value.get(c)
            columns[c].append(cell)
            if isinstance(cell, str):
                chars += len(cell)
        length += 1
        if length == batch_rows or chars >= room >= 0:
            yield ColumnBatch(start, length, dict(columns))
            start += length
            length = chars = 0
            columns = {c: [] for c in keep}
    if length:
        yield ColumnBatch(start, length, dict(columns))
    if names_out is not None:
        names_out[:] = list(names)


def parse_json_cell(value: str, *, file: str, row: int) -> Any:
    """A CSV cell holding JSON (the options list), with the strict reader."""
    return loads_strict(value, file=file, error=DatasetError, row=row)
