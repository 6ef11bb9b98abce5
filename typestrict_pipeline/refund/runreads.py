"""A dataset's ids and texts read once per verdict run, not once per step and decision.

The columnar path keeps neither column of a validated dataset in memory (``refund.sources``):
whatever needs an id or a text later reads the file again. In one verdict run that was about 30
passes over the file for a training of two decisions: every step of the run gets its own copy
of the dataset and the split (Dagster hands them over pickled), and each decision's test ids,
their rows and their texts were read again, one pass each, in each step.

Within :func:`shared_reads` (a scope: one Dagster run's steps in this process), a column read
in full is kept, and the steps of the same scope read it from memory:

- the dataset's read while it is validated (``refund.dataset.load_dataset``) keeps the id and
  text columns as it goes, so a run reads the file once;
- any other whole read of a column (:meth:`refund.sources.FileTexts.batches`) keeps it the same
  way, so a step in a process of its own reads each column at most once more;
- of a column too large to keep whole, the rows read by position (at most
  :data:`~typestrict_pipeline.refund.sources.KEEP_ROWS` at a time: each decision's test rows,
  their ids and texts) are kept, so the steps after the first find them without a pass.

What is kept is bounded: at most :data:`SHARED_READ_BYTES` of Arrow buffers per scope. A column
that does not fit is not kept, and is read from the file as before (a file of long texts is
still streamed, never held whole). An entry is keyed by the file's identity (its real path,
format and column, and the size and modification time it had when it was validated): a file
that changed since is refused by the stamp check before the cache is asked, and a file with a
new stamp is another key. A scope holds the columns of its own run only: entering another scope
drops the last one's columns, and outside any scope nothing is kept (the command line and the
sensors read as before). :func:`reads_within` keeps columns for one block of work and drops them
at its end (the API's split of a training: one request, five passes over the file before).

>>> import pyarrow as pa
>>> key = ColumnKey("/d.csv", "csv", "id", 10, 1)
>>> with shared_reads("run-1"):
...     kept = active_cache()
...     kept is not None and kept.put(key, [pa.array(["a"], pa.large_string())])
True
>>> active_cache() is None
True
>>> with shared_reads("run-1"):
...     [c.to_pylist() for c in active_cache().get(key)]
[['a']]
>>> with shared_reads("run-2"):
...     active_cache().get(key) is None
True
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

__all__ = [
    "SHARED_READ_BYTES",
    "ColumnCache",
    "ColumnKey",
    "Gathered",
    "active_cache",
    "drop_shared_reads",
    "reads_within",
    "shared_reads",
]

SHARED_READ_BYTES = 64 * 1024 * 1024
"""Most bytes of columns one scope keeps (64 MiB): the ids and texts of about a million rows of
short texts. A larger column is read from the file each time, as without the cache."""


@dataclass(frozen=True)
class ColumnKey:
    """One column of one file as it was validated.

    Attributes:
        path: the file's real path (symbolic links resolved).
        format: its format's value (``csv``, ``parquet``, ``jsonl``).
        column: the column's name.
        size: the file's size when it was validated.
        mtime_ns: its modification time then.
    """

    path: str
    format: str
    column: str
    size: int
    mtime_ns: int


@dataclass
class ColumnCache:
    """The columns kept in one scope, within :attr:`budget` bytes."""

    budget: int
    columns: dict[ColumnKey, list[pa.Array]] = field(default_factory=dict)
    too_large: set[ColumnKey] = field(default_factory=set)
    rows: dict[ColumnKey, dict[int, str | None]] = field(default_factory=dict)
    used: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def kept_rows(self, key: ColumnKey) -> dict[int, str | None]:
        """The rows of a column too large to keep whole that were read by position (a copy)."""
        with self.lock:
            return dict(self.rows.get(key, {}))

    def keep_rows(self, key: ColumnKey, values: dict[int, str | None]) -> None:
        """Keep rows read by position (row → value), those that fit in the room left."""
        with self.lock:
            kept = self.rows.setdefault(key, {})
            for row, value in values.items():
                size = _ROW_BYTES + (0 if value is None else sys.getsizeof(value))
                if row in kept or self.used + size > self.budget:
                    continue
                kept[row] = value
                self.used += size

    def get(self, key: ColumnKey) -> list[pa.Array] | None:
        """The column's batches as they were read, or None when it is not kept."""
        with self.lock:
            return self.columns.get(key)

    def room(self) -> int:
        """Bytes still free in the budget."""
        with self.lock:
            return self.budget - self.used

    def refused(self, key: ColumnKey) -> bool:
        """Whether the column was found too large to keep (it is read from the file)."""
        with self.lock:
            return key in self.too_large

    def put(self, key: ColumnKey, chunks: list[pa.Array] | None) -> bool:
        """Keep a column read in full (its batches in row order); False when it does not fit
        (``chunks`` None: it passed the room left while it was read), and it is not tried again."""
        size = -1 if chunks is None else sum(_nbytes(c) for c in chunks)
        with self.lock:
            if key in self.columns:
                return True
            if chunks is None or self.used + size > self.budget:
                self.too_large.add(key)
                return False
            self.columns[key] = list(chunks)
            self.used += size
            return True


_ROW_BYTES = 120
"""What a kept row costs besides its string: its entry in a dict and its row number."""


def _nbytes(array: pa.Array) -> int:
    """The bytes an array's buffers hold (a slice counts its whole buffers: what it keeps)."""
    return sum(b.size for b in array.buffers() if b is not None)


class Gathered:
    """A column's batches collected as they are read, until they pass ``limit`` bytes (then
    they are let go and :attr:`chunks` is None: the column is not kept).

    >>> g = Gathered(limit=10)
    >>> g.add(pa.array(["abc"], pa.large_string())); g.chunks is None
    True
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.chunks: list[pa.Array] | None = []

    def add(self, chunk: pa.Array) -> None:
        """One more batch of the column, in row order."""
        if self.chunks is None:
            return
        self.size += _nbytes(chunk)
        if self.size > self.limit:
            self.chunks = None
            self.size = 0
            return
        self.chunks.append(chunk)


_ACTIVE: contextvars.ContextVar[ColumnCache | None] = contextvars.ContextVar(
    "typestrict_shared_reads", default=None)
_LOCK = threading.Lock()
_LAST: list[tuple[str, ColumnCache]] = []
"""The last scope entered and its columns (one at most: a new scope drops them)."""


def active_cache() -> ColumnCache | None:
    """The columns of the scope the caller is in (None: outside any scope, nothing is kept)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def shared_reads(scope: str, *, budget: int | None = None) -> Iterator[ColumnCache]:
    """Keep the columns read in full within this block for the later blocks of the same
    ``scope`` in this process (a Dagster run id: its steps).

    Entering a scope other than the last one's drops the last one's columns first; leaving the
    block keeps them for the next block of the same scope.

    Args:
        scope: what the columns belong to (a run id).
        budget: bytes the scope may keep (default :data:`SHARED_READ_BYTES`).
    """
    with _LOCK:
        if _LAST and _LAST[0][0] == scope:
            cache = _LAST[0][1]
        else:
            cache = ColumnCache(SHARED_READ_BYTES if budget is None else budget)
            _LAST[:] = [(scope, cache)]
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


_WITHIN_HELD = [0]
"""Bytes the :func:`reads_within` blocks running now may keep between them (under ``_LOCK``)."""


@contextlib.contextmanager
def reads_within(*, budget: int | None = None) -> Iterator[ColumnCache]:
    """Keep the columns read in full within this block for the rest of the block only, and let
    them go at its end; a run's shared reads (:func:`shared_reads`) are left as they are. Within
    a run's shared reads already, the block reads through them (what it reads is the run's).

    One piece of work that reads a dataset's columns several times (the API's split of a
    training, a check of a training and its predictions: the validation, each decision's test
    rows, every id) reads the file once. The blocks running at once in a process share one
    allowance of :data:`SHARED_READ_BYTES` (a server answering many such requests keeps no more
    than one would): a block that finds it taken keeps less, or nothing, and reads the file
    again where it must, as without this block.

    >>> key = ColumnKey("/d.csv", "csv", "id", 10, 1)
    >>> with reads_within() as kept:
    ...     kept.put(key, [pa.array(["a"], pa.large_string())]) and active_cache() is kept
    True
    >>> active_cache() is None
    True
    >>> with shared_reads("run-3") as run, reads_within() as kept:
    ...     kept is run
    True

    Args:
        budget: bytes the block may keep at most (default :data:`SHARED_READ_BYTES`).
    """
    active = _ACTIVE.get()
    if active is not None:
        yield active
        return
    wanted = SHARED_READ_BYTES if budget is None else budget
    with _LOCK:
        granted = max(0, min(wanted, SHARED_READ_BYTES - _WITHIN_HELD[0]))
        _WITHIN_HELD[0] += granted
    cache = ColumnCache(granted)
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)
        with _LOCK:
            _WITHIN_HELD[0] -= granted



def drop_shared_reads(scope: str) -> None:
    """Let go of ``scope``'s columns (its run is over); another scope's are left as they are."""
    with _LOCK:
        if _LAST and _LAST[0][0] == scope:
            _LAST.clear()
