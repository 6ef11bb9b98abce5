"""Load a training's dataset (CSV, Parquet or JSONL) and validate it against the manifest.

Every problem is found before anything is written, and reported as one error that names the file,
the (1-based data) row and the column, says what was expected and what to do. When several rows
share a problem the message says how many and lists the first few.

Reading rules (documented in ``docs/manifest.md``):

- CSV cells are read as text, exactly (no type guessing, no NA guessing); an empty cell is empty.
- JSONL and Parquet cells may be strings, integers (ids, answers) or null; lists only for options.
- An id is text; integer ids are read as their decimal text. Ids must be unique and non-empty.
- Texts are kept exactly as written (they are hashed as sent to the models); a text that is
  empty or only whitespace is an error.
- An empty answer / review cell means "not labeled" / "not reviewed".
- An empty group cell makes the row its own group.
- Options (multiple choice) are a list of two or more distinct non-empty strings: a list value in
  JSONL or Parquet, or a JSON list written in a CSV cell.

**Columnar.** The file is read in bounded batches (``refund.table``) and validated column by
column with Arrow compute functions (``refund.cells``); what stays in memory is the group and
answer codes (NumPy) and, for multiple choice, the options (an Arrow list column). Neither the
texts nor the ids are kept (``refund.sources``): :class:`Dataset` reads them again, from the same
file, for the rows asked (:meth:`Dataset.examples_at`; the split streams them,
``refund.holdout``), and refuses a file that changed since it was validated (within a verdict
run, ``refund.runreads`` keeps both columns as this read gives them, when they fit its budget,
so the run's later steps read memory instead of the file). Ids are checked
unique by a 64-bit key each (spilled to disk past a bound); only the rows whose key another row
has are read again and compared. The errors are today's, in today's order: a file gets
the same message, row and column as when every cell was a Python object (the reference kept in
``tests/refund_reference.py`` proves it).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.errors import DatasetError, NotEnoughDataError, listed
from typestrict_pipeline.progress import Progress, ProgressFn
from typestrict_pipeline.refund import table as _table
from typestrict_pipeline.refund.cells import as_text, python_whitespace
from typestrict_pipeline.refund.cells import blank_mask as _blank_mask_exact
from typestrict_pipeline.refund.manifest import (
    MAX_ANSWERS,
    Columns,
    DatasetFormat,
    DecisionSpec,
    TrainingManifest,
)
from typestrict_pipeline.refund.rowdigest import (
    key_records,
    row_messages,
    shared_key_rows_of,
    string_keys,
    text_keys,
)
from typestrict_pipeline.refund.rowseed import LocalSeeds, SeedHasher, Seeds
from typestrict_pipeline.refund.runreads import Gathered, active_cache
from typestrict_pipeline.refund.sources import FileTexts, MemoryTexts, TextSource
from typestrict_pipeline.refund.spill import Buckets
from typestrict_pipeline.refund.splitrows import (
    PreparedSplit,
    join_units,
    member_of,
    seed_prefix,
)
from typestrict_pipeline.refund.table import (
    ColumnBatch,
    file_stamp,
    iter_column_batches,
    parse_json_cell,
    read_table,
)
from typestrict_pipeline.refund.types import DecisionKind

__all__ = [
    "Dataset",
    "DecisionLabels",
    "Example",
    "FileTexts",
    "MemoryTexts",
    "TextSource",
    "load_dataset",
    "read_table",
    "unlabeled_from_split",
    "unlabeled_text",
    "validate_dataset",
]

_SHOW_ROWS = 5
READING = "reading the dataset"
"""What :func:`load_dataset` reports its progress as."""
_NONE = -1
"""The code of an empty answer, review or group cell."""
WORKER_ROWS = 250_000
"""From about this many rows (Parquet: the file's; CSV and JSON Lines: its bytes / 64) the seed
digests are hashed in a worker process (``refund.rowseed.SeedHasher``); below, in the process."""


def _first_bytes_of_space() -> npt.NDArray[np.bool_]:
    """The bytes a white-space character's UTF-8 can start with (every character of
    ``python_whitespace``: ASCII ones, and 0xC2, 0xE1, 0xE2, 0xE3 for the others)."""
    table = np.zeros(256, dtype=bool)
    table[[c.encode("utf-8")[0] for c in python_whitespace()]] = True
    return table


_SPACE_START = _first_bytes_of_space()


def blank_mask(texts: pa.Array) -> npt.NDArray[np.bool_]:
    """``refund.cells.blank_mask``: True where a cell is null or only white space. A batch with
    no null, no empty cell and no cell starting with a white-space character's first byte has no
    blank cell (one look at each cell's first byte); any other batch is checked cell by cell.

    >>> blank_mask(pa.array(["a", "b c"], pa.large_string())).tolist()
    [False, False]
    >>> blank_mask(pa.array(["a", "\u3000", " x", None], pa.large_string())).tolist()
    [False, True, False, True]
    """
    n = len(texts)
    if n and texts.null_count == 0 and pa.types.is_large_string(texts.type):
        buffers = texts.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64)[texts.offset:texts.offset + n + 1]
        if buffers[2] is not None and bool((offsets[1:] > offsets[:-1]).all()):
            data = np.frombuffer(buffers[2], dtype=np.uint8)
            if not _SPACE_START[data[offsets[:-1]]].any():
                return np.zeros(n, dtype=bool)
    return _blank_mask_exact(texts)


def _payload(messages: pa.Array) -> memoryview:
    """The bytes of a large-string array's values, end to end (Arrow's buffer, not copied)."""
    buffers = messages.buffers()
    n = len(messages)
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[messages.offset:messages.offset + n + 1]
    if buffers[2] is None or n == 0:
        return memoryview(b"")
    return memoryview(buffers[2])[int(offsets[0]):int(offsets[-1])]


@dataclass(frozen=True)
class Example:
    """One row of the dataset.

    Attributes:
        id: the example's id (text).
        text: the text exactly as written in the file.
        group: the group value, or None (no group column, or an empty cell: its own group).
        row: 1-based data row in the file (the CSV header is not a row), for messages.
    """

    id: str
    text: str
    group: str | None
    row: int


@dataclass(frozen=True, eq=False)
class DecisionLabels:
    """One decision's labels, aligned with the dataset's rows, as codes.

    Attributes:
        spec: the decision as the manifest describes it.
        label_codes: each row's right answer: its index in ``spec.answers`` (single) or in the
            row's options (multiple choice); -1 when not labeled.
        review_codes: the answer a person gave in review, coded the same way (-1: not reviewed).
        option_lists: each row's options (multiple choice), else None.
    """

    spec: DecisionSpec
    label_codes: npt.NDArray[np.int16]
    review_codes: npt.NDArray[np.int16]
    option_lists: pa.Array | None = None

    @property
    def name(self) -> str:
        """The decision's name."""
        return self.spec.name

    @property
    def n_labeled(self) -> int:
        """How many examples have a right answer."""
        return int(np.count_nonzero(self.label_codes >= 0))

    @property
    def n_reviewed(self) -> int:
        """How many examples have a review label."""
        return int(np.count_nonzero(self.review_codes >= 0))

    def options_at(self, i: int) -> tuple[str, ...]:
        """Row ``i``'s options (multiple choice)."""
        assert self.option_lists is not None
        return tuple(self.option_lists[i].as_py())

    @property
    def max_options(self) -> int:
        """The most options any row offers (multiple choice), else the number of answers."""
        if self.option_lists is None:
            return len(self.spec.answers)
        return int(pc.max(pc.list_value_length(self.option_lists)).as_py())

    def _value(self, code: int, i: int) -> str | None:
        if code < 0:
            return None
        if self.option_lists is None:
            return self.spec.answers[code]
        return str(self.option_lists[i][code].as_py())

    def label_at(self, i: int) -> str | None:
        """Row ``i``'s right answer (None: not labeled)."""
        return self._value(int(self.label_codes[i]), i)

    def review_at(self, i: int) -> str | None:
        """Row ``i``'s review label (None: not reviewed)."""
        return self._value(int(self.review_codes[i]), i)

    @property
    def labels(self) -> tuple[str | None, ...]:
        """Every row's right answer (builds a Python object per row: for small data)."""
        return tuple(self.label_at(i) for i in range(len(self.label_codes)))

    @property
    def reviews(self) -> tuple[str | None, ...]:
        """Every row's review label (builds a Python object per row: for small data)."""
        return tuple(self.review_at(i) for i in range(len(self.review_codes)))

    @property
    def options(self) -> tuple[tuple[str, ...], ...] | None:
        """Every row's options (builds a Python object per row: for small data)."""
        if self.option_lists is None:
            return None
        return tuple(tuple(o) for o in self.option_lists.to_pylist())


@dataclass(frozen=True, eq=False)
class Dataset:
    """A validated dataset, held as columns.

    Attributes:
        path: the file it was read from.
        columns: the column names used.
        id_source: where every row's id is read again (the ids are not kept: 13 bytes a row of
            Arrow text, 1.3 GB at 100 million rows); :attr:`ids` reads them all.
        group_codes: each row's group as an index into ``group_values`` (-1: no group value),
            or None when the dataset has no group column.
        group_values: the distinct group values.
        decisions: each decision's labels, in manifest order.
        texts: where the texts are read from again.
        prepared: the split's units and seeds, computed while the file was read (None: the
            split computes them, reading the texts again).
    """

    path: str
    columns: Columns
    id_source: TextSource
    group_codes: npt.NDArray[np.int32] | None
    group_values: pa.Array
    decisions: tuple[DecisionLabels, ...]
    texts: TextSource
    prepared: PreparedSplit | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_rows(self) -> int:
        """Rows in the dataset."""
        return len(self.id_source)

    @property
    def ids(self) -> pa.Array:
        """Every row's id, in file order (read again: the whole column in memory)."""
        return self.id_source.values()

    def decision(self, name: str) -> DecisionLabels:
        """The labels of the decision called ``name``.

        Raises:
            KeyError: no such decision (the message lists the decisions).
        """
        for labels in self.decisions:
            if labels.name == name:
                return labels
        raise KeyError(f"no decision {name!r}; the dataset has {[d.name for d in self.decisions]}")

    def group_at(self, i: int) -> str | None:
        """Row ``i``'s group value (None: its own group)."""
        if self.group_codes is None or self.group_codes[i] < 0:
            return None
        return str(self.group_values[int(self.group_codes[i])].as_py())

    def positions(self, ids: Iterable[str]) -> dict[str, int]:
        """The 0-based row of each id given that the dataset has (an unknown id is left out);
        the ids are read again a batch at a time, unless the run keeps the row of every one
        (``refund.runreads``)."""
        wanted = list(ids)
        if not wanted:
            return {}
        if isinstance(self.id_source, FileTexts):  # the ids unique: rows a run kept answer
            kept = self.id_source.rows_of(wanted)
            if kept is not None:
                return kept
        value_set = pa.array(wanted, type=pa.large_string())
        out: dict[str, int] = {}
        start = 0
        for batch in self.id_source.batches():
            found = pc.index_in(batch, value_set=value_set)
            rows = np.flatnonzero(pc.is_valid(found).to_numpy(zero_copy_only=False))
            if rows.size:
                codes = found.take(pa.array(rows)).to_numpy(zero_copy_only=False)
                out.update((wanted[int(c)], start + int(r))
                           for c, r in zip(codes, rows, strict=True))
            start += len(batch)
        return out

    def has_ids(self, ids: Iterable[str]) -> list[str]:
        """The ids given that are not the dataset's, in the order given."""
        wanted = list(dict.fromkeys(ids))
        known = self.positions(wanted)
        return [i for i in wanted if i not in known]

    def examples_at(self, positions: Sequence[int]) -> list[Example]:
        """The rows at ``positions`` (0-based) as :class:`Example` objects, ids and texts read
        again."""
        order = np.argsort(np.asarray(positions, dtype=np.int64), kind="stable")
        ascending = np.asarray(positions, dtype=np.int64)[order]
        distinct, back = np.unique(ascending, return_inverse=True)
        texts = self.texts.at(distinct)
        ids = self.id_source.at(distinct)
        out: list[Example | None] = [None] * len(order)
        for k, i in enumerate(order):
            p, j = int(ascending[k]), int(back[k])
            out[int(i)] = Example(id=str(ids[j]), text=texts[j], group=self.group_at(p), row=p + 1)
        return [e for e in out if e is not None]

    @property
    def examples(self) -> tuple[Example, ...]:
        """Every row as an :class:`Example` (a Python object per row: for small data)."""
        if "examples" not in self._cache:
            self._cache["examples"] = tuple(self.examples_at(range(self.n_rows)))
        cached: tuple[Example, ...] = self._cache["examples"]
        return cached

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _rows_text(rows: Sequence[int], total: int | None = None) -> str:
    count = len(rows) if total is None else total
    shown = ", ".join(str(r) for r in rows[:_SHOW_ROWS])
    more = f", ... ({count} rows in all)" if count > _SHOW_ROWS else ""
    return f"rows {shown}{more}" if count > 1 else f"row {shown}"


_LIKE_AMONG = 1_000


def _missing_column(name: str, role: str, available: list[str], file: str) -> DatasetError:
    lowered = {c.lower().strip(): c for c in available}
    close = [lowered[name.lower().strip()]] if name.lower().strip() in lowered else []
    # the likeness is measured among the first columns only: a file of a million columns
    # costs no more than one of a thousand
    close = close or difflib.get_close_matches(name, available[:_LIKE_AMONG], n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return DatasetError(
        f"a column named {name!r} ({role})",
        f"no such column; the file has {listed(available)}",
        f"rename the column in the file or fix the name the training gives it{hint}",
        file=file,
        column=name,
    )


def _parse_options(value: Any, *, file: str, row: int, column: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = parse_json_cell(value, file=file, row=row)
        except DatasetError:
            raise DatasetError(
                'a JSON list of options, e.g. ["red", "green"]',
                repr(value if len(value) <= 60 else value[:57] + "..."),
                "write the options as a JSON list of strings",
                file=file,
                row=row,
                column=column,
            ) from None
    if hasattr(value, "tolist") and not isinstance(value, list):
        value = value.tolist()
    if not isinstance(value, list | tuple) or not all(
        isinstance(o, str) and o.strip() for o in value
    ):
        raise DatasetError(
            "a list of non-empty strings",
            repr(value)[:60],
            "write the options as a list of strings",
            file=file,
            row=row,
            column=column,
        )
    options = tuple(value)
    if len(options) > MAX_ANSWERS:
        raise DatasetError(
            f"at most {MAX_ANSWERS} options (the most an audit holds, docs/audit-format.md)",
            f"{len(options):,}",
            "give every example at most that many options",
            file=file,
            row=row,
            column=column,
        )
    if len(options) < 2:
        raise DatasetError(
            "at least 2 options",
            f"{len(options)} ({listed(options)})",
            "give every example two or more options",
            file=file,
            row=row,
            column=column,
        )
    # one set per row, not a count of every option per option: 256 options took 65,280
    # comparisons a row (16 s for 20,000 rows), the set about 256 hashes
    if len(set(options)) != len(options):
        repeated = sorted(o for o, times in Counter(options).items() if times > 1)
        raise DatasetError(
            "each option listed once",
            f"{repeated} listed more than once",
            "remove the duplicate options",
            file=file,
            row=row,
            column=column,
        )
    return options



def _outside_error(
    file: str,
    column: str,
    rows: list[int],
    count: int,
    value: str,
    allowed: Sequence[str],
    decision: str,
    multiple_choice: bool,
) -> DatasetError:
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if multiple_choice:
        expected = f"one of this example's options for decision {decision!r} {listed(allowed)}"
        fix = f"fix the cell{hint}, or add the right answer to the example's options"
    else:
        expected = f"one of the answers of decision {decision!r} {listed(allowed)}"
        fix = f"fix the cell{hint}, or add the answer to the decision's answers (decisions[].answers)"
    return DatasetError(
        expected,
        f"{value!r} ({_rows_text(rows, count)})",
        fix,
        file=file,
        row=rows[0],
        column=column,
    )



class _Rows:
    """Rows with some property: the first few and how many (for messages)."""

    def __init__(self) -> None:
        self.first: list[int] = []
        self.count = 0

    def add(self, rows: npt.NDArray[np.int64]) -> None:
        if rows.size:
            self.first.extend(int(r) for r in rows[: max(_SHOW_ROWS - len(self.first), 0)])
            self.count += int(rows.size)

    def text(self) -> str:
        return _rows_text(self.first, self.count)


def _first(current: DatasetError | None, new: DatasetError | None) -> DatasetError | None:
    return current if current is not None else new


def _blank_to_null(texts: pa.Array, blank: npt.NDArray[np.bool_]) -> pa.Array:
    if not blank.any():
        return texts
    return pc.if_else(pa.array(blank), pa.scalar(None, pa.large_string()), texts)


@dataclass
class _TextColumn:
    """An optional-label column (group, answer, review) read batch by batch."""

    name: str
    what: str
    chunks: list[pa.Array] = field(default_factory=list)
    type_error: DatasetError | None = None

    def convert(self, cells: Any, start: int, length: int, file: str) -> _Converted:
        """The batch's cells as text, blanks as nulls, and dictionary-encoded (no state)."""
        if cells is None:
            texts = pa.nulls(length, pa.large_string())
            return _Converted(texts, None, pc.dictionary_encode(texts))
        texts, error = as_text(cells, file=file, start=start, column=self.name, what=self.what)
        texts = _blank_to_null(texts, blank_mask(texts))
        return _Converted(texts, error, _narrow_codes(pc.dictionary_encode(texts)))

    def add(self, converted: _Converted) -> pa.Array:
        self.type_error = _first(self.type_error, converted.error)
        self.chunks.append(converted.encoded)
        return converted.texts


def _narrow_codes(encoded: pa.DictionaryArray) -> pa.DictionaryArray:
    """One byte a row instead of four when the batch has fewer than 128 distinct values (an
    answer column): 300 MB less per decision at 100 million rows.

    >>> _narrow_codes(pc.dictionary_encode(pa.array(["a", None, "b", "a"]))).type
    DictionaryType(dictionary<values=string, indices=int8, ordered=0>)
    """
    if len(encoded.dictionary) >= 128:
        return encoded
    return pa.DictionaryArray.from_arrays(encoded.indices.cast(pa.int8()), encoded.dictionary)


#: Distinct group values a :class:`_GroupColumn` lets its batches' dictionaries hold (beyond the
#: merged dictionary's own size) before it merges them.
MERGE_WORDS = 1 << 20


@dataclass
class _GroupColumn(_TextColumn):
    """The group column, coded as it is read: each batch's dictionary is merged into one running
    dictionary (``values``, in order of first appearance), so a value that recurs across
    batches is held once, and each row keeps a 4-byte code.

    Per-batch dictionaries held until the end cost up to 20 bytes a row when most of a batch's
    groups are new to it (measured, a group per ten rows drawn uniformly, 2 million rows: 16.3
    bytes a row held that way, 10.1 merged with the batches still pending counted, tending to
    4 plus the distinct values as the rows grow); a merge waits until the batches'
    dictionaries hold as many values as the merged one (and ``MERGE_WORDS``), so the merges
    cost about twice the values they read. The codes and values are those of one dictionary
    encoding of the whole column.

    >>> col = _GroupColumn("g", "a group")
    >>> for cells in (["b", "a", None], ["a", "c"]):
    ...     _ = col.add(col.convert(pa.array(cells, pa.large_string()), 0, len(cells), "f"))
    >>> codes, values = col.codes(5)
    >>> codes.tolist(), values.to_pylist()
    ([0, 1, -1, 1, 2], ['b', 'a', 'c'])
    """

    values: pa.Array = field(default_factory=lambda: pa.array([], pa.large_string()))
    coded: list[npt.NDArray[np.int32]] = field(default_factory=list)
    pending: int = 0

    def add(self, converted: _Converted) -> pa.Array:
        texts = super().add(converted)
        assert converted.encoded is not None
        self.pending += len(converted.encoded.dictionary)
        if self.pending >= max(len(self.values), MERGE_WORDS):
            self._merge()
        return texts

    def _merge(self) -> None:
        if not self.chunks:
            return
        words = pa.chunked_array([self.values, *(c.dictionary for c in self.chunks)],
                                 type=self.values.type).combine_chunks()
        encoded = pc.dictionary_encode(words)  # the merged values keep their codes
        mapping = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int32)
        word = len(self.values)
        for chunk in self.chunks:
            local = np.append(mapping[word:word + len(chunk.dictionary)], np.int32(-1))
            indices = np.asarray(pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False))
            self.coded.append(local[indices])  # -1 (null) takes the appended -1
            word += len(chunk.dictionary)
        self.values = encoded.dictionary
        self.chunks, self.pending = [], 0

    def codes(self, n: int) -> tuple[npt.NDArray[np.int32], pa.Array]:
        """Every row's code (-1: no group) and the distinct values; the batches are let go."""
        self._merge()
        out = np.empty(n, dtype=np.int32)
        row = 0
        for i, part in enumerate(self.coded):
            out[row:row + len(part)] = part
            row += len(part)
            self.coded[i] = np.zeros(0, np.int32)  # let each part go once copied
        self.coded = []
        return out, self.values


@dataclass(frozen=True)
class _Converted:
    texts: pa.Array
    error: DatasetError | None
    encoded: pa.Array | None = None


@dataclass(frozen=True)
class _Staged:
    """One batch with the work that needs no state done (in the reading thread)."""

    batch: ColumnBatch
    ids: _Converted
    invisible: DatasetError | None
    blank_ids: npt.NDArray[np.bool_]
    texts: _Converted
    blank_texts: npt.NDArray[np.bool_]
    group: _Converted | None
    columns: dict[tuple[str, str], _Converted]
    keys: npt.NDArray[np.uint64]
    messages: dict[str, pa.Array]
    id_keys: npt.NDArray[np.uint64]


@dataclass
class _OptionsColumn:
    """A multiple-choice options column, parsed cell by cell (its own rule, ``_parse_options``)."""

    name: str
    chunks: list[pa.Array] = field(default_factory=list)
    error: DatasetError | None = None
    missing: _Rows = field(default_factory=_Rows)

    def add(self, cells: Any, start: int, length: int, file: str) -> list[tuple[str, ...] | None]:
        values = [None] * length if cells is None else (
            cells.to_pylist() if isinstance(cells, pa.Array | pa.ChunkedArray) else cells
        )
        parsed: list[tuple[str, ...] | None] = []
        for i, value in enumerate(values):
            if self.error is not None:  # raised for every decision of the column: nothing
                parsed.append(None)     # after it is read (1,000 options a row: 39 s for 100,000
                continue                # rows to refuse row 1)
            try:
                options = _parse_options(value, file=file, row=start + i + 1, column=self.name)
            except DatasetError as exc:
                self.error = _first(self.error, exc)
                options = None
            parsed.append(options)
        self.missing.add(np.flatnonzero([o is None for o in parsed]) + start + 1)
        self.chunks.append(pa.array(parsed, type=pa.large_list(pa.large_string())))
        return parsed


@dataclass
class _ChoiceCheck:
    """Multiple-choice labels checked against each row's options, as the rows stream by."""

    codes: list[npt.NDArray[np.int16]] = field(default_factory=list)
    bad: dict[str, tuple[list[int], int, tuple[str, ...]]] = field(default_factory=dict)

    def add(self, texts: pa.Array, options: list[tuple[str, ...] | None], start: int) -> None:
        codes = np.full(len(options), _NONE, dtype=np.int16)
        for i, label in enumerate(texts.to_pylist()):
            if label is None:
                continue
            row_options = options[i]
            if row_options is None:
                continue  # the missing options are reported first
            if label in row_options:
                codes[i] = row_options.index(label)
                continue
            rows, count, first_options = self.bad.get(label, ([], 0, row_options))
            if len(rows) < _SHOW_ROWS:
                rows.append(start + i + 1)
            self.bad[label] = (rows, count + 1, first_options)
        self.codes.append(codes)


def _single_codes(
    column: _TextColumn, answers: Sequence[str]
) -> tuple[npt.NDArray[np.int16], tuple[str, list[int], int] | None]:
    """Each row's index in ``answers`` (-1: empty), and the first value outside them: the value
    at the first such row, with its first rows and how many rows have it."""
    value_set = pa.array(list(answers), type=pa.large_string())
    codes_all = np.empty(sum(len(c) for c in column.chunks), dtype=np.int16)
    row = 0
    first_bad: str | None = None
    for chunk in column.chunks:
        mapped = pc.fill_null(pc.index_in(chunk.dictionary, value_set=value_set), -2)
        mapped_np = np.asarray(mapped.to_numpy(zero_copy_only=False), dtype=np.int16)
        indices = np.asarray(
            pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64
        )
        codes = np.full(len(indices), _NONE, dtype=np.int16)
        valid = indices >= 0
        codes[valid] = mapped_np[indices[valid]]
        if first_bad is None:
            outside = np.flatnonzero(codes == -2)
            if outside.size:
                first_bad = str(chunk.dictionary[int(indices[outside[0]])].as_py())
        codes_all[row:row + len(codes)] = codes  # written in place: no second copy of the rows
        row += len(codes)
    if first_bad is None:
        return codes_all, None
    rows = _Rows()
    start = 0
    for chunk in column.chunks:
        hit = pc.fill_null(pc.equal(chunk.dictionary_decode(), first_bad), False)
        rows.add(np.flatnonzero(hit.to_numpy(zero_copy_only=False)) + start + 1)
        start += len(chunk)
    return codes_all, (first_bad, rows.first, rows.count)


class _Validator:
    """Checks a dataset batch by batch; raises the first problem in the product's order."""

    def __init__(self, manifest: TrainingManifest, file: str, rows_hint: int = 0) -> None:
        self.manifest = manifest
        self.file = file
        cols = manifest.dataset.columns
        self.cols = cols
        self.n = 0
        self.id_error: DatasetError | None = None  # a bad type or an invisible character
        self.empty_ids = _Rows()
        self.text_error: DatasetError | None = None
        self.empty_texts = _Rows()
        self.group = _GroupColumn(cols.group, "a group") if cols.group else None
        self.text_columns: dict[tuple[str, str], _TextColumn] = {}
        self.option_columns: dict[str, _OptionsColumn] = {}
        self.choice: dict[tuple[str, str], _ChoiceCheck] = {}
        # for the split, while the texts go by: each row's text key, each decision's row
        # digests, each row's id key (spilled to disk past refund.spill.MEMORY_BYTES)
        self.text_keys = Buckets(16)
        self.id_keys = Buckets(8)
        self._shared: _Background[npt.NDArray[np.int64]] | None = None
        self.streams = [d.name for d in manifest.decisions if d.answer_column is not None]
        # hashed in a worker process past WORKER_ROWS rows (refund.rowseed)
        self.seeds: Seeds = LocalSeeds(len(self.streams))
        if rows_hint >= WORKER_ROWS:
            with contextlib.suppress(OSError):  # no process could be started: hashed here
                self.seeds = SeedHasher(len(self.streams))
        for d in manifest.decisions:
            for column, what in self._label_columns(d):
                self.text_columns.setdefault((column, what), _TextColumn(column, what))
            if d.kind is DecisionKind.MULTIPLE_CHOICE:
                assert d.options_column is not None
                self.option_columns.setdefault(d.options_column, _OptionsColumn(d.options_column))

    def _label_columns(self, d: DecisionSpec) -> list[tuple[str, str]]:
        out = [] if d.answer_column is None else [(d.answer_column, "an answer")]
        review = d.review_column or self.cols.review_label
        return out if review is None else [*out, (review, "a review label")]

    @property
    def wanted(self) -> list[str]:
        """Every column the checks read."""
        names = [self.cols.id, self.cols.text] + ([self.cols.group] if self.cols.group else [])
        names += [c for c, _ in self.text_columns] + list(self.option_columns)
        return list(dict.fromkeys(names))

    def stage(self, batch: ColumnBatch) -> _Staged:
        """What a batch needs that depends on no other batch: Arrow and NumPy work (it releases
        the GIL), so it runs in the reading thread while the last batch is hashed."""
        start, length, cells = batch.start, batch.length, batch.cells
        ids = _Converted(pa.nulls(length, pa.large_string()), None)
        if cells.get(self.cols.id) is not None:
            ids = _Converted(*as_text(cells[self.cols.id], file=self.file, start=start,
                                      column=self.cols.id, what="an id"))
        blank_ids = blank_mask(ids.texts)
        invisible = self._invisible(ids.texts, blank_ids, start)
        texts = _Converted(pa.nulls(length, pa.large_string()), None)
        if cells.get(self.cols.text) is not None:
            texts = _Converted(*as_text(cells[self.cols.text], file=self.file, start=start,
                                        column=self.cols.text, what="a text"))
        group = None if self.group is None else self.group.convert(
            cells.get(self.group.name), start, length, self.file)
        columns = {key: column.convert(cells.get(key[0]), start, length, self.file)
                   for key, column in self.text_columns.items()}
        groups = pa.nulls(length, pa.large_string()) if group is None else group.encoded
        messages = {
            d.name: row_messages(ids.texts, texts.texts,
                                 columns[(d.answer_column, "an answer")].encoded, groups, "\n")
            for d in self.manifest.decisions
            if d.answer_column is not None and d.kind is not DecisionKind.MULTIPLE_CHOICE
        }
        return _Staged(batch, ids, invisible, blank_ids, texts, blank_mask(texts.texts), group,
                       columns, text_keys(texts.texts), messages, string_keys(ids.texts))

    def add(self, batch: ColumnBatch | _Staged) -> None:
        staged = batch if isinstance(batch, _Staged) else self.stage(batch)
        start, length, cells = staged.batch.start, staged.batch.length, staged.batch.cells
        self.n += length
        ids = self._add_ids(staged)
        row_texts = self._add_texts(staged)
        groups = pa.nulls(length, pa.large_string())
        if self.group is not None and staged.group is not None:
            groups = self.group.add(staged.group)
        texts = {key: column.add(staged.columns[key]) for key, column in self.text_columns.items()}
        options = {
            name: column.add(cells.get(name), start, length, self.file)
            for name, column in self.option_columns.items()
        }
        for d in self.manifest.decisions:
            if d.kind is not DecisionKind.MULTIPLE_CHOICE:
                continue
            assert d.options_column is not None
            for column, what in self._label_columns(d):
                check = self.choice.setdefault((d.name, what), _ChoiceCheck())
                check.add(texts[(column, what)], options[d.options_column], start)
        self._hash(staged, ids, row_texts, groups)

    def _hash(self, staged: _Staged, ids: pa.Array, row_texts: pa.Array, groups: pa.Array) -> None:
        """The split's inputs for this batch: text keys and the labeled rows' digests."""
        self.text_keys.add(key_records(staged.keys, staged.batch.start))
        self.id_keys.add(staged.id_keys.view(np.uint8).reshape(-1, 8))
        for stream, name in enumerate(self.streams):
            d = self.manifest.decision(name)
            if d.kind is DecisionKind.MULTIPLE_CHOICE:
                codes = self.choice[(d.name, "an answer")].codes[-1]
                positions = pc.binary_join_element_wise(
                    pa.array((codes + 1).astype(np.int64), mask=codes < 0).cast(pa.large_string()),
                    pa.scalar("", pa.large_string()))
                messages = row_messages(ids, row_texts, positions, groups, "\n")
            else:
                messages = staged.messages[d.name]
            self.seeds.add(stream, _payload(messages), len(messages))

    def _add_ids(self, staged: _Staged) -> pa.Array:
        ids = staged.ids.texts
        if staged.batch.cells.get(self.cols.id) is not None and self.id_error is None:
            self.id_error = _first_row(staged.ids.error, staged.invisible)
        self.empty_ids.add(np.flatnonzero(staged.blank_ids) + staged.batch.start + 1)
        return ids

    def _invisible(
        self, ids: pa.Array, blank: npt.NDArray[np.bool_], start: int
    ) -> DatasetError | None:
        ascii_ = pc.fill_null(pc.string_is_ascii(ids), True).to_numpy(zero_copy_only=False)
        shown = pc.fill_null(pc.ascii_is_printable(ids), True).to_numpy(zero_copy_only=False)
        suspects = np.flatnonzero(~blank & (~ascii_ | ~shown))
        for i in suspects:
            value = ids[int(i)].as_py()
            if not value.isprintable():  # a control, escape, bidi or zero-width character
                return DatasetError(
                    "an id of printable characters",
                    f"an id with an invisible or control character ({ascii(value)[:60]})",
                    "remove the character (ids are compared exactly, and shown in messages)",
                    file=self.file, row=start + int(i) + 1, column=self.cols.id,
                )
        return None

    def _add_texts(self, staged: _Staged) -> pa.Array:
        self.text_error = _first(self.text_error, staged.texts.error)
        self.empty_texts.add(np.flatnonzero(staged.blank_texts) + staged.batch.start + 1)
        return staged.texts.texts

    # ---- after the last batch: raise the first problem, as the checks are ordered ----

    def check_columns(self, available: list[str]) -> None:
        cols, file = self.cols, self.file
        needed = [(cols.id, "dataset.columns.id"), (cols.text, "dataset.columns.text")]
        if cols.group:
            needed.append((cols.group, "dataset.columns.group"))
        for d in self.manifest.decisions:
            where = f"decision {d.name!r}"
            for column, role in ((d.answer_column, "answer_column"),
                                 (d.options_column, "options_column"),
                                 (d.review_column, "review_column")):
                if column is not None:
                    needed.append((column, f"{where} {role}"))
        if cols.review_label is not None:
            needed.append((cols.review_label, "dataset.columns.review_label"))
        names = set(available)
        for column, role in needed:
            if column not in names:
                raise _missing_column(column, role, available, file)

    def finish(self, ids: TextSource) -> Dataset:
        """The dataset, or the first problem; ``ids``: where the ids are read again (a repeated
        id is looked for among the rows whose id key another row has)."""
        cols, file, n = self.cols, self.file, self.n
        if n == 0:
            raise NotEnoughDataError(
                f"{file}: expected at least one data row, got none. Add examples to the dataset."
            )
        if self.id_error is not None:
            raise self.id_error
        if self.empty_ids.count:
            raise DatasetError(
                "a non-empty id on every row",
                f"an empty id ({self.empty_ids.text()})",
                "give every example a unique id",
                file=file, row=self.empty_ids.first[0], column=cols.id,
            )
        _check_unique(ids, self.id_keys, file, cols.id)
        self.id_keys.close()
        if self.text_error is not None:
            raise self.text_error
        if self.empty_texts.count:
            raise DatasetError(
                "a non-empty text on every row",
                f"an empty text ({self.empty_texts.text()})",
                "write the example's text, or remove the row",
                file=file, row=self.empty_texts.first[0], column=cols.text,
            )
        group_codes: npt.NDArray[np.int32] | None = None
        group_values = pa.array([], type=pa.large_string())
        if self.group is not None:
            if self.group.type_error is not None:
                raise self.group.type_error
            group_codes, group_values = self.group.codes(n)
        decisions = tuple(self._decision(d) for d in self.manifest.decisions)
        for column in self.text_columns.values():
            column.chunks = []  # the codes are made
        return Dataset(
            path=str(self.manifest.dataset.path), columns=cols, id_source=ids,
            group_codes=group_codes,
            group_values=group_values, decisions=decisions, texts=MemoryTexts(pa.array([])),
        )

    def read(self) -> None:
        """Every batch is in: start what needs nothing else, beside the checks of :meth:`finish`
        (on two cores). The worker sorts the seed digests, a thread finds the rows whose text
        key another row has (NumPy's sort lets the GIL go)."""
        if isinstance(self.seeds, SeedHasher):
            self.seeds.request(self._prefixes())

        def shared() -> npt.NDArray[np.int64]:
            try:
                return shared_key_rows_of(self.text_keys.parts())
            finally:
                self.text_keys.close()

        self._shared = _Background(shared)

    def _prefixes(self) -> list[bytes]:
        return [seed_prefix(name, "labeled") for name in self.streams]

    def prepare(self, dataset: Dataset) -> PreparedSplit:
        """The split's units and the labeled seeds, from what the batches left."""
        codes = dataset.group_codes
        group_codes = codes if codes is not None else np.full(self.n, -1, dtype=np.int32)
        prefixes = self._prefixes()
        if self._shared is None:
            self.read()
        assert self._shared is not None
        shared = self._shared.result()
        rows = join_units(dataset.id_source, group_codes, dataset.group_values, codes is not None,
                          shared, dataset.texts.at)
        seeds = dict(zip(self.streams, self.seeds.seeds(prefixes), strict=True))
        return PreparedSplit(rows=rows, labeled_seeds=seeds)

    def close(self) -> None:
        """Remove what was spilled to disk."""
        if self._shared is not None:
            self._shared.wait()  # it reads the text keys' files
        for buckets in (self.text_keys, self.id_keys):
            buckets.close()
        self.seeds.close()

    def _decision(self, d: DecisionSpec) -> DecisionLabels:
        file, n = self.file, self.n
        review_column = d.review_column or self.cols.review_label
        label_col = None if d.answer_column is None else self.text_columns[(d.answer_column, "an answer")]
        review_col = None if review_column is None else self.text_columns[(review_column, "a review label")]
        for col in (label_col, review_col):
            if col is not None and col.type_error is not None:
                raise col.type_error
        option_lists: pa.Array | None = None
        none = np.broadcast_to(np.int16(_NONE), (n,))  # read-only, no memory per row
        if d.kind is DecisionKind.MULTIPLE_CHOICE:
            assert d.options_column is not None
            opts = self.option_columns[d.options_column]
            if opts.error is not None:
                raise opts.error
            if opts.missing.count:
                raise DatasetError(
                    f"options on every example of multiple-choice decision {d.name!r}",
                    f"no options ({opts.missing.text()})",
                    "give each example its list of options (both systems are asked with them)",
                    file=file, row=opts.missing.first[0], column=d.options_column,
                )
            option_lists = pa.chunked_array(opts.chunks).combine_chunks()
            codes = []
            for col, what in ((label_col, "an answer"), (review_col, "a review label")):
                if col is None:
                    codes.append(none)
                    continue
                check = self.choice[(d.name, what)]
                if check.bad:
                    value, (rows, count, allowed) = min(check.bad.items(), key=lambda kv: kv[1][0][0])
                    raise _outside_error(file, col.name, rows, count, value, allowed, d.name, True)
                codes.append(np.concatenate(check.codes))
            labels, reviews = codes
        else:
            codes = []
            for col in (label_col, review_col):
                if col is None:
                    codes.append(none)
                    continue
                found, bad = _single_codes(col, d.answers)
                if bad is not None:
                    value, rows, count = bad
                    raise _outside_error(file, col.name, rows, count, value, d.answers, d.name, False)
                codes.append(found)
            labels, reviews = codes
        n_labeled = int(np.count_nonzero(labels >= 0))
        n_reviewed = int(np.count_nonzero(reviews >= 0))
        if n_labeled == 0 and n_reviewed == 0:
            looked = [c for c in (d.answer_column, review_column) if c is not None]
            raise NotEnoughDataError(
                f"{file}: expected labeled examples or examples a person labeled in review for "
                f"decision {d.name!r} (columns {looked}), got none (all {n} cells empty). "
                "Fill in the right answers, or review some examples, before training."
            )
        if d.kind is DecisionKind.SINGLE:
            used, column_used = (labels, d.answer_column) if n_labeled else (reviews, review_column)
            present = _present_codes(used, len(d.answers))
            distinct = sorted(d.answers[c] for c in present)
            if len(distinct) < 2:
                which = "labeled" if n_labeled else "reviewed"
                raise DatasetError(
                    f"at least 2 different answers among the {which} examples of decision {d.name!r}",
                    f"only {distinct} ({n_labeled or n_reviewed} rows)",
                    "add examples of the other answers: a decision with one answer cannot be measured",
                    file=file,
                    column=column_used,
                )
        return DecisionLabels(spec=d, label_codes=labels, review_codes=reviews,
                              option_lists=option_lists)


_T = TypeVar("_T")


class _Background(Generic[_T]):
    """``work()`` in a thread; :meth:`result` waits for its value (or raises its error)."""

    def __init__(self, work: Callable[[], _T]) -> None:
        import threading

        self._value: list[_T] = []
        self._error: list[BaseException] = []

        def run() -> None:
            try:
                self._value.append(work())
            except BaseException as exc:  # raised by result()
                self._error.append(exc)

        self._thread = threading.Thread(target=run, name="dataset-background", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> _T:
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._value[0]


def ahead(items: Iterable[ColumnBatch], work: Callable[[ColumnBatch], _Staged],
          depth: int = 2) -> Iterator[_Staged]:
    """``work(item)`` for each item, done in a second thread up to ``depth`` items ahead.

    The reading and the Arrow and NumPy work release the GIL, so on two cores they overlap the
    per-row hashing of the batch before. An error in the thread is raised here, in order.
    """
    import queue
    import threading

    out: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                out.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(("item", work(item))):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the reader, raised there
            put(("error", exc))

    thread = threading.Thread(target=produce, name="dataset-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = out.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()


def _first_row(a: DatasetError | None, b: DatasetError | None) -> DatasetError | None:
    if a is None or b is None:
        return a if b is None else b
    return a if (a.row or 0) <= (b.row or 0) else b


def _present_codes(codes: npt.NDArray[np.int16], k: int) -> list[int]:
    """The codes ``0..k-1`` present in ``codes`` (-1: none), counted a million rows at a time (no
    sorted copy of the rows).

    >>> _present_codes(np.array([2, -1, 0, 2], dtype=np.int16), 3)
    [0, 2]
    """
    seen = np.zeros(k + 1, dtype=np.int64)
    for start in range(0, len(codes), 1 << 20):
        seen += np.bincount(codes[start:start + (1 << 20)].astype(np.int64) + 1, minlength=k + 1)
    return [int(c) for c in np.flatnonzero(seen[1:])]


def _repeated_keys(keys: Buckets) -> npt.NDArray[np.uint64]:
    """The id keys (sorted) that more than one row has."""
    repeated = []
    for part in keys.parts():  # a key's records are in one part
        sorted_keys = np.sort(np.ascontiguousarray(part).view(np.uint64).ravel())
        same = sorted_keys[1:] == sorted_keys[:-1]
        if same.any():
            repeated.append(np.unique(sorted_keys[1:][same]))
    return np.sort(np.concatenate(repeated)) if repeated else np.zeros(0, np.uint64)


def _check_unique(ids: TextSource, keys: Buckets, file: str, column: str) -> None:
    """Raise on the first repeated id. Distinct keys are distinct ids; the rows whose key another
    row has (every repeated id's rows among them) are read again and their ids compared."""
    repeated = _repeated_keys(keys)
    if repeated.size == 0:
        return
    rows_parts: list[npt.NDArray[np.int64]] = []
    id_parts: list[pa.Array] = []
    start = 0
    for batch in ids.batches():
        hit = np.flatnonzero(member_of(string_keys(batch), repeated))
        if hit.size:
            rows_parts.append(hit + start)
            id_parts.append(batch.take(pa.array(hit)).cast(pa.large_string()))
        start += len(batch)
    rows = np.concatenate(rows_parts) if rows_parts else np.zeros(0, np.int64)
    if not id_parts:
        return
    suspects = pa.concat_arrays(id_parts)
    if pc.count_distinct(suspects).as_py() == len(suspects):
        return
    # dictionary codes count up in order of first appearance: code c first appears at first[c]
    codes = np.asarray(pc.dictionary_encode(suspects).indices.to_numpy(zero_copy_only=False))
    _, first = np.unique(codes, return_index=True)
    earlier = first[codes]
    dupes = np.flatnonzero(earlier != np.arange(len(codes)))
    k = int(dupes[0])
    row, first_row = int(rows[k]), int(rows[int(earlier[k])])
    more = f"; {dupes.size} duplicate rows in all" if dupes.size > 1 else ""
    raise DatasetError(
        "unique ids",
        f"{suspects[k].as_py()!r} again (first at row {first_row + 1}{more})",
        "make the ids unique (the test set and the audit are keyed by id)",
        file=file, row=row + 1, column=column,
    )


class _Keep:
    """The id and text columns of the validation's read, gathered for the run's shared reads
    (``refund.runreads``: only within a scope, and while they fit in its room)."""

    def __init__(self) -> None:
        self.cache = active_cache()
        self.room = 0 if self.cache is None else self.cache.room()
        self.ids, self.texts = Gathered(self.room), Gathered(self.room)
        if self.cache is None:
            self.ids.chunks = self.texts.chunks = None

    def add(self, staged: _Staged) -> None:
        """One batch's ids and texts, exactly as a read of the column gives them; the two
        together hold at most the room (past it, the larger is let go)."""
        self.ids.add(staged.ids.texts)
        self.texts.add(staged.texts.texts)
        if self.ids.size + self.texts.size > self.room:
            larger = max(self.ids, self.texts, key=lambda g: g.size if g.chunks is not None else -1)
            larger.chunks = None
            larger.size = 0

    def keep(self, ids: TextSource, texts: TextSource) -> None:
        """The whole columns were read: keep them under the file's identity."""
        if self.cache is None:
            return
        for source, gathered in ((ids, self.ids), (texts, self.texts)):
            if isinstance(source, FileTexts):
                self.cache.put(source.key, gathered.chunks)


def _run(
    validator: _Validator,
    batches: Iterable[ColumnBatch],
    names: Callable[[], list[str]],
    sources: Callable[[int], tuple[TextSource, TextSource]],
    progress: ProgressFn | None = None,
    total: int | None = None,
) -> Dataset:
    if progress is not None:
        progress(Progress(READING, 0, total))
    kept = _Keep()
    try:
        for staged in ahead(batches, validator.stage):
            validator.add(staged)
            kept.add(staged)
            batch = staged.batch
            if progress is not None and batch.start + batch.length != total:
                progress(Progress(READING, batch.start + batch.length, total))
        if progress is not None:  # the last report: every row read (the total now known)
            progress(Progress(READING, validator.n, validator.n))
        validator.read()
        validator.check_columns(names())
        ids, texts = sources(validator.n)
        kept.keep(ids, texts)
        del kept
        dataset = _with_texts(validator.finish(ids), texts, None)
        _release_unused()  # the batches' columns are coded and let go
        prepared = validator.prepare(dataset)
        _release_unused()  # the text keys and digests are read and let go
        return _with_texts(dataset, dataset.texts, prepared)
    finally:
        validator.close()


def _release_unused() -> None:
    """Give back to the system the memory the allocators keep for reuse: Arrow's pool (the
    batches are read, and what follows allocates mostly with NumPy) and, with glibc, the free
    pages of ``malloc``'s heaps (``malloc_trim``: NumPy's arrays below 32 MB come from there,
    and pages freed between arrays still held are otherwise kept until the process ends)."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return cast("Callable[[int], int]", function)


def validate_dataset(
    table: dict[str, list[Any]], manifest: TrainingManifest, *, file: str | None = None
) -> Dataset:
    """Validate columns already read (e.g. by :func:`read_table`) against the manifest.

    Args:
        table: column name → values, one per data row.
        manifest: the training manifest (columns and decisions).
        file: the name used in messages (default: the manifest's dataset path).

    Returns:
        The validated dataset (its texts held in memory).

    Raises:
        DatasetError: a missing column, an empty text or id, a duplicate id, an answer outside the
            decision's answers, fewer than 2 distinct answers, missing or bad options, a right
            answer that is not among its example's options.
        NotEnoughDataError: a decision has neither labeled nor reviewed examples.

    >>> from typestrict_pipeline.refund.manifest import parse_manifest
    >>> m = parse_manifest({"manifest_version": 1, "training_id": "t", "workspace_id": "w",
    ...     "dataset": {"path": "d.csv", "columns": {"id": "id", "text": "text"}},
    ...     "decisions": [{"name": "s", "question": "q?", "answer_column": "label",
    ...                    "answers": ["no", "yes"]}],
    ...     "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}},
    ...     "training": {"status": "failed", "reason": "out of memory"}})
    >>> validate_dataset({"id": ["a", "b"], "text": ["x", "y"], "label": ["yes", "maybe"]}, m)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: d.csv, row 2, column 'label': expected one of the answers of decision 's' ['no', 'yes'], got 'maybe' (row 2). Fix the cell, or add the answer to the decision's answers (decisions[].answers).
    """
    name = file if file is not None else manifest.dataset.path_as_written
    rows = _table.BATCH_ROWS
    n = len(next(iter(table.values()), []))
    batches = [
        ColumnBatch(start, min(rows, n - start),
                    {k: v[start:start + rows] for k, v in table.items()})
        for start in range(0, n, rows)
    ]
    text_column = manifest.dataset.columns.text

    id_column = manifest.dataset.columns.id

    def sources(n: int) -> tuple[TextSource, TextSource]:
        del n
        ids, _ = as_text(table[id_column], file=name, start=0, column=id_column, what="an id")
        texts, _ = as_text(table[text_column], file=name, start=0, column=text_column,
                           what="a text")
        return MemoryTexts(ids), MemoryTexts(texts)

    return _run(_Validator(manifest, name), batches, lambda: list(table), sources)


def _with_texts(dataset: Dataset, texts: TextSource, prepared: PreparedSplit | None) -> Dataset:
    return Dataset(path=dataset.path, columns=dataset.columns, id_source=dataset.id_source,
                   group_codes=dataset.group_codes, group_values=dataset.group_values,
                   decisions=dataset.decisions, texts=texts, prepared=prepared)


def load_dataset(manifest: TrainingManifest, *, progress: ProgressFn | None = None) -> Dataset:
    """Read the manifest's dataset in bounded batches and validate it.

    Args:
        manifest: the training manifest.
        progress: told the rows read after each batch (the total is known for Parquet).

    Returns:
        The validated dataset (texts are read again from the file when asked for).

    Raises:
        DatasetError: see :func:`validate_dataset`; also a missing or unreadable file.
        NotEnoughDataError: a decision has neither labeled nor reviewed examples.
    """
    spec = manifest.dataset
    file = str(spec.path)
    if not spec.path.exists():
        read_table(spec.path, spec.format)  # the missing-file message
    stamp = file_stamp(spec.path)
    names: list[str] = []
    total = None
    if spec.format is DatasetFormat.PARQUET:
        import pyarrow.parquet as pq

        try:
            total = pq.ParquetFile(spec.path).metadata.num_rows
        except Exception:  # an unreadable file: the read below says why, in the product's words
            total = None
    validator = _Validator(manifest, file, total if total is not None else stamp.size // 64)
    batches = iter_column_batches(spec.path, spec.format, validator.wanted, names_out=names)

    def sources(n: int) -> tuple[TextSource, TextSource]:
        return (FileTexts(spec.path, spec.format, spec.columns.id, stamp, file, n, "an id"),
                FileTexts(spec.path, spec.format, spec.columns.text, stamp, file, n))

    return _run(validator, batches, lambda: names, sources, progress, total)


def unlabeled_from_split(split: Any) -> dict[str, tuple[int, str]]:
    """Each decision's unlabeled rows, as a count and in words, from an audit's ``split`` summary.

    ``split`` maps a decision to its counts (``n_rows``, ``n_labeled``, as the verdict job writes
    them); anything else (an old audit, ``None``, a decision without both counts) gives nothing.

    >>> unlabeled_from_split({"party": {"n_rows": 80, "n_labeled": 79}, "x": None})
    {'party': (1, '1 of 80 rows: their answer cell is empty (the texts NA, null, None are answers)')}
    """
    out: dict[str, tuple[int, str]] = {}
    if not isinstance(split, dict):
        return out
    for name, counts in split.items():
        if not isinstance(counts, dict):
            continue
        n_rows, n_labeled = counts.get("n_rows"), counts.get("n_labeled")
        if type(n_rows) is int and type(n_labeled) is int and 0 <= n_labeled <= n_rows:
            out[str(name)] = (n_rows - n_labeled, unlabeled_text(n_labeled, n_rows))
    return out


def unlabeled_text(n_labeled: int, n_rows: int) -> str:
    """How many rows have no answer, and why (only an empty cell is missing; ``NA`` is a value).

    >>> unlabeled_text(98, 100)
    '2 of 100 rows: their answer cell is empty (the texts NA, null, None are answers)'
    """
    return (
        f"{n_rows - n_labeled} of {n_rows} rows: their answer cell is empty "
        "(the texts NA, null, None are answers)"
    )
