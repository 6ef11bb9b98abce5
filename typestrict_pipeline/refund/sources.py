"""A validated dataset's columns read again: its texts and its ids.

The columnar path keeps neither column in memory (at 100 million rows the ids alone are 1.3 GB of
Arrow text): what needs a text or an id later (the split's identical-text join, the test rows,
pass 2's row order, a repeated id's message) reads the rows it needs again, from the same file,
which must not have changed since it was validated. A dataset validated from columns already
in memory keeps them there (:class:`MemoryTexts`). Within a verdict run's shared reads
(``refund.runreads``) a column that fits its budget is read from the file once, and kept for the
run's other steps in the process.

>>> import pyarrow as pa
>>> source = MemoryTexts(pa.array(["a", "b", "c", "d"], pa.large_string()))
>>> source.at(np.array([1, 3])), len(source)
(['b', 'd'], 4)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from typestrict_pipeline.errors import DatasetError
from typestrict_pipeline.refund import table as _table
from typestrict_pipeline.refund.cells import as_text
from typestrict_pipeline.refund.manifest import DatasetFormat
from typestrict_pipeline.refund.runreads import ColumnCache, ColumnKey, Gathered, active_cache
from typestrict_pipeline.refund.table import FileStamp, file_stamp, iter_column_batches

__all__ = ["KEEP_ROWS", "FileTexts", "MemoryTexts", "TextSource", "aligned"]


KEEP_ROWS = 1 << 16
"""Most rows a take keeps of a column too large to keep whole (``refund.runreads``): a larger
take (every training row's id) streams from the file, as without a run's shared reads."""


class TextSource:
    """Where a validated dataset's column of texts (its texts, or its ids) is read from again."""

    def __len__(self) -> int:
        """Rows in the column."""
        raise NotImplementedError

    def batches(self) -> Iterator[pa.Array]:
        """Every row's value (large-string Arrow), in row order, a batch at a time."""
        raise NotImplementedError

    def take(self, positions: npt.NDArray[np.int64]) -> pa.Array:
        """The values at ``positions`` (0-based, ascending), as one large-string Arrow array."""
        return _take(self.batches(), np.asarray(positions, dtype=np.int64), to_end=False)

    def at(self, positions: npt.NDArray[np.int64]) -> list[str]:
        """The values at ``positions`` (0-based, ascending), as Python strings."""
        values: list[str] = self.take(positions).to_pylist()
        return values

    def values(self) -> pa.Array:
        """Every value in one array (the whole column in memory: for small data)."""
        parts = [b.cast(pa.large_string()) for b in self.batches()]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.large_string())


@dataclass(frozen=True)
class MemoryTexts(TextSource):
    """A column held in memory (a dataset validated from columns already read)."""

    texts: pa.Array

    def __len__(self) -> int:
        return len(self.texts)

    def batches(self) -> Iterator[pa.Array]:
        rows = _table.BATCH_ROWS
        for start in range(0, len(self.texts), rows):
            yield self.texts.slice(start, rows)

    def take(self, positions: npt.NDArray[np.int64]) -> pa.Array:
        taken: pa.Array = self.texts.take(pa.array(np.asarray(positions, dtype=np.int64)))
        return taken.cast(pa.large_string())

    def values(self) -> pa.Array:
        return self.texts


@dataclass(frozen=True)
class FileTexts(TextSource):
    """A column read again from the dataset file, which must not have changed since validation.

    Attributes:
        path: the file.
        format: its format.
        column: the column read.
        stamp: the file's size and modification time when it was validated.
        file: the file's name in messages.
        rows: rows in the file.
        what: what a cell holds ("a text", "an id").
    """

    path: Path
    format: DatasetFormat
    column: str
    stamp: FileStamp
    file: str
    rows: int = -1
    what: str = "a text"

    def __len__(self) -> int:
        return self.rows

    def _check_stamp(self) -> None:
        try:
            now = file_stamp(self.path)
        except OSError:
            now = None
        if now != self.stamp:
            raise DatasetError(
                "the dataset file as it was when it was validated",
                "a file that changed or went away since" if now is None or now.size != self.stamp.size
                else "a file written again since",
                "run the verdict again on the file as it is now",
                file=self.file,
            )

    @property
    def key(self) -> ColumnKey:
        """The column's identity in a run's shared reads (``refund.runreads``)."""
        return ColumnKey(os.path.realpath(self.path), self.format.value, self.column,
                         self.stamp.size, self.stamp.mtime_ns)

    def batches(self) -> Iterator[pa.Array]:
        """Every row's value, a batch at a time: from the run's shared reads when the column is
        kept there, else read from the file (and kept, when a scope is active and it fits)."""
        self._check_stamp()
        cache = active_cache()
        kept = None if cache is None else cache.get(self.key)
        if kept is not None:
            yield from kept
            return
        gathered = None if cache is None or cache.refused(self.key) else Gathered(cache.room())
        for batch in iter_column_batches(self.path, self.format, [self.column]):
            texts = self._texts(batch.cells.get(self.column), batch.start, batch.length)
            if gathered is not None:
                gathered.add(texts)
            yield texts
        if cache is not None and gathered is not None:  # read to its end: the whole column
            cache.put(self.key, gathered.chunks)

    def _texts(self, cells: _table.Cells | None, start: int, length: int) -> pa.Array:
        if cells is None:  # a JSON Lines batch without the key: checked at validation
            return pa.nulls(length, pa.large_string())
        texts, _ = as_text(cells, file=self.file, start=start, column=self.column, what=self.what)
        return texts

    def take(self, positions: npt.NDArray[np.int64]) -> pa.Array:
        """In a run's shared reads (``refund.runreads``), the whole column is read once and
        kept, and every take after it reads memory; a column too large for that keeps the rows
        taken (up to :data:`KEEP_ROWS` at a time), and reads only the rows it lacks."""
        wanted = np.asarray(positions, dtype=np.int64)
        cache = active_cache()
        if len(wanted) and cache is not None:
            if not cache.refused(self.key):
                return _take(self.batches(), wanted, to_end=True)  # read to its end: kept
            if len(wanted) <= KEEP_ROWS:
                return self._take_kept(cache, wanted)
        return self._take_file(wanted)

    def _take_kept(self, cache: ColumnCache, wanted: npt.NDArray[np.int64]) -> pa.Array:
        """``take`` of a column too large to keep whole: the rows kept, and the others read
        from the file (and kept, as the room allows)."""
        self._check_stamp()  # a file changed since is refused, kept rows or not
        known = cache.kept_rows(self.key)
        missing = np.asarray([p for p in wanted.tolist() if p not in known], dtype=np.int64)
        if len(missing):
            read = dict(zip(missing.tolist(), self._take_file(missing).to_pylist(), strict=True))
            cache.keep_rows(self.key, read)
            known.update(read)
        return pa.array([known[p] for p in wanted.tolist()], pa.large_string())

    def rows_of(self, values: Sequence[str]) -> dict[str, int] | None:
        """The row of each of ``values`` when every one is among the rows a run keeps of this
        column (a column of unique values: the ids), without reading the file; else None."""
        cache = active_cache()
        if cache is None or not values:
            return None
        self._check_stamp()
        where = {value: row for row, value in cache.kept_rows(self.key).items() if value is not None}
        found = {v: where[v] for v in values if v in where}
        if len(found) != len(set(values)):
            return None
        return dict(sorted(found.items(), key=lambda item: item[1]))  # in row order, as read

    def _take_file(self, wanted: npt.NDArray[np.int64]) -> pa.Array:
        """``take`` read from the file. Parquet: only the row groups holding ``wanted`` are read
        (the column alone)."""
        if self.format is not DatasetFormat.PARQUET or len(wanted) == 0:
            return super().take(wanted)
        import pyarrow.parquet as pq

        self._check_stamp()
        handle = pq.ParquetFile(self.path, pre_buffer=_table.PARQUET_PRE_BUFFER)
        if self.column not in handle.schema_arrow.names:
            return pa.nulls(len(wanted), pa.large_string())
        sizes = [handle.metadata.row_group(i).num_rows for i in range(handle.num_row_groups)]
        ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
        groups = np.searchsorted(ends, wanted, side="right")
        out: list[pa.Array] = []
        for group in np.unique(groups).tolist():
            first = int(ends[group]) - sizes[group]
            cells = handle.read_row_group(group, columns=[self.column]).column(0)
            texts = self._texts(cells, first, sizes[group])
            out.append(texts.take(pa.array(wanted[groups == group] - first)))
        return pa.concat_arrays(out)


def _take(batches: Iterator[pa.Array], wanted: npt.NDArray[np.int64], *, to_end: bool) -> pa.Array:
    """The values at ``wanted`` (0-based, ascending) among ``batches``, as one large-string
    array; the batches are read to their end with ``to_end``, else until the last one wanted."""
    out: list[pa.Array] = []
    if len(wanted):
        start = 0
        for values in batches:
            end = start + len(values)
            lo, hi = np.searchsorted(wanted, [start, end])
            if hi > lo:
                out.append(values.take(pa.array(wanted[lo:hi] - start)))
            start = end
            if hi == len(wanted) and not to_end:
                break
    if not out:
        return pa.array([], pa.large_string())
    return pa.concat_arrays([o.cast(pa.large_string()) for o in out])


def aligned(source: Iterator[pa.Array], length: int, pending: list[pa.Array]) -> pa.Array:
    """The next ``length`` values of ``source`` as one array, whatever its batches' sizes
    (``pending``: what the last call read beyond its length, kept for the next)."""
    have = sum(len(p) for p in pending)
    while have < length:
        batch = next(source, None)
        if batch is None:
            break
        pending.append(batch.cast(pa.large_string()))
        have += len(batch)
    whole = pa.concat_arrays(pending) if len(pending) > 1 else (
        pending[0] if pending else pa.array([], pa.large_string()))
    pending[:] = [whole.slice(length)] if len(whole) > length else []
    return whole.slice(0, min(length, len(whole)))
