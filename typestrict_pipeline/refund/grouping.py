"""Groups in words: what the bootstrap resampled, and signs of groups nobody declared.

The refund's bootstrap resamples **whole groups** when the dataset declares a group column, and
**single examples** otherwise (``docs/method/refund.md``, "Groups: the group bootstrap"). When
examples do come in groups (several per customer, user, document or session) but no group
column is declared, the rows of a group are treated as independent evidence, the bootstrap's
spread is too narrow, and "the gain is real" is said far more often than 5% (issue 27: 19–38%).
So every place that shows a verdict states its resampling unit in one sentence made here
(:func:`resampling_sentence`), and before judging the product looks, cheaply, for groups it can
see (:func:`detect_undeclared_groups`, :func:`scan_dataset`) and warns.

The detector's rule (thresholds are the module's constants, documented in the method page):

- **A group-like name**: a column (not the id, text, answer, review or options column, nor the
  declared group) whose name is one of :data:`GROUP_WORDS` (case-insensitive; ``customer``,
  ``user``, ``document``, ``session``, ``account``, ``patient``, ``author`` …), alone or followed
  by an id-like suffix (``customer_id``, ``UserID``, ``session-key``, ``author name``).
- **Repeated values**: such a column, not floating point, not boolean and not text-like (mean
  length at most :data:`TEXTLIKE_MEAN_CHARS` characters), whose ``k`` non-empty sampled cells
  hold ``d`` distinct values with ``MIN_DISTINCT <= d <= k / 2``: on average at least two rows
  share each value. Fewer than 5 values read as a category (a flag, a language), not groups.
- **Near-identical texts**: texts equal after case folding, NFKC, dropping punctuation and
  symbols and collapsing white space (:func:`near_text_key`), shared by rows of different
  declared groups (every row when none is declared), on at least :data:`NEAR_DUPLICATE_MIN_ROWS`
  rows and :data:`NEAR_DUPLICATE_SHARE` of the sampled rows.

Everything is computed on the file's first :data:`SAMPLE_ROWS` rows (bounded whatever the
file's size) and never changes a number of the verdict: the warnings are shown and recorded
beside it.

>>> print(resampling_sentence("example", 400))
each example resampled on its own: if your examples come in groups (several per customer, user, document or session), declare the group column so whole groups are resampled
>>> print(resampling_sentence("group", 208, "movie"))
whole groups resampled (208 groups by column 'movie')
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.refund.manifest import DatasetFormat, TrainingManifest

__all__ = [
    "GROUP_WORDS",
    "MIN_DISTINCT",
    "NEAR_DUPLICATE_MIN_ROWS",
    "NEAR_DUPLICATE_SHARE",
    "SAMPLE_ROWS",
    "GroupingScan",
    "GroupingWarning",
    "WarningKind",
    "detect_undeclared_groups",
    "grouping_lines",
    "near_text_key",
    "near_text_keys",
    "resampling_line",
    "resampling_lines_from_audit",
    "resampling_sentence",
    "scan_dataset",
]

UNGROUPED = (
    "each example resampled on its own: if your examples come in groups (several per customer, "
    "user, document or session), declare the group column so whole groups are resampled"
)
"""The unit of a verdict without a group column, in words (the one wording, reused everywhere)."""

GROUP_WORDS = frozenset({
    "customer", "client", "user", "document", "doc", "session", "account", "patient", "author",
    "speaker", "conversation", "thread", "repository", "repo", "household", "subject",
})
"""Column names that usually hold a group (alone or with an id-like suffix, plural allowed)."""

ID_SUFFIXES = frozenset({"id", "ids", "key", "name", "no", "nr", "number", "code", "uuid", "hash"})
"""Suffixes that keep a group-like name a group (``customer_id``; not ``user_rating``)."""

SAMPLE_ROWS = 100_000
"""Rows read from the start of the file for the look (bounded, whatever the file's size)."""

MIN_ROWS = 20
"""Fewer non-empty sampled cells than this: no repeated-values warning (too little to judge)."""

MIN_DISTINCT = 5
"""Fewer distinct values than this read as a category, not groups."""

TEXTLIKE_MEAN_CHARS = 64
"""A string column whose sampled values are longer than this on average is text, not an id."""

NEAR_DUPLICATE_MIN_ROWS = 10
"""At least this many rows must have a near-identical text elsewhere …"""

NEAR_DUPLICATE_SHARE = 0.02
"""… and at least this share of the sampled rows (2%: the demo's 13,905 reviews have 0.8%)."""

MAX_COLUMNS = 256
"""At most this many columns are looked at (in file order)."""


def resampling_sentence(unit: str, n_units: int | None, group_column: str | None = None) -> str:
    """The verdict's resampling unit in words (a clause: no capital, no final stop).

    Args:
        unit: the bootstrap's unit, ``"example"`` or ``"group"`` (the audit's ``bootstrap.unit``;
            an audit of format 1 has none: ``"example"``).
        n_units: how many units were resampled (groups for ``"group"``).
        group_column: the declared group column, when known.

    >>> resampling_sentence("group", 12)
    'whole groups resampled (12 groups)'
    >>> resampling_sentence("group", None, "user")
    "whole groups resampled (by column 'user')"
    """
    if unit != "group":
        return UNGROUPED
    by = "" if group_column is None else f"by column {group_column!r}"
    if n_units is None:  # before the test is drawn
        return "whole groups resampled" + (f" ({by})" if by else "")
    plural = "group" if n_units == 1 else "groups"
    return f"whole groups resampled ({n_units:,} {plural}{' ' + by if by else ''})"


def resampling_line(decisions: Sequence[tuple[str, str, int | None]], group_column: str | None) -> str:
    """One line for a verdict: ``Resampling unit: …`` (per decision when there are several).

    >>> print(resampling_line([("kind", "example", 400)], None)[:60])
    Resampling unit: each example resampled on its own: if your
    >>> print(resampling_line([("a", "group", 20), ("b", "group", 21)], "user"))
    Resampling unit: a: whole groups resampled (20 groups by column 'user'); b: whole groups resampled (21 groups by column 'user').
    """
    if not decisions:
        return ""
    if len(decisions) == 1:
        _, unit, n = decisions[0]
        return f"Resampling unit: {resampling_sentence(unit, n, group_column)}."
    sentences = [resampling_sentence(u, n, group_column) for _, u, n in decisions]
    if len(set(sentences)) == 1:
        return f"Resampling unit, every decision: {sentences[0]}."
    return "Resampling unit: " + "; ".join(f"{name}: {s}" for (name, _, _), s in zip(
        decisions, sentences, strict=True)) + "."


def _audit_units(audit: Mapping[str, Any]) -> list[tuple[str, str, int | None]]:
    out = []
    for d in audit.get("decisions") or []:
        boot = (d.get("report") or {}).get("bootstrap") or {}
        unit = str(boot.get("unit") or "example")
        n = boot.get("n_units", (d.get("report") or {}).get("n"))
        out.append((str(d.get("name")), unit, None if n is None else int(n)))
    return out


def resampling_lines_from_audit(audit: Mapping[str, Any], group_column: str | None = None) -> str:
    """:func:`resampling_line` read from an audit file's dict (``""`` for a failed training).

    >>> resampling_lines_from_audit({"decisions": [{"name": "s", "report": {"n": 400,
    ...     "bootstrap": {"unit": "group", "n_units": 37}}}]})
    'Resampling unit: whole groups resampled (37 groups).'
    """
    return resampling_line(_audit_units(audit), group_column)


# ------------------------------------------------------------------------------------------------
# Signs of undeclared groups
# ------------------------------------------------------------------------------------------------


class WarningKind(enum.StrEnum):
    """What was seen.

    Attributes:
        NAME: a column named like a group (``customer_id``).
        REPEATS: many rows share a value of a column.
        NEAR_DUPLICATES: many texts are near-identical to another row's.
    """

    NAME = "group_like_name"
    REPEATS = "repeated_values"
    NEAR_DUPLICATES = "near_identical_texts"


@dataclass(frozen=True)
class GroupingWarning:
    """One sign of grouping the manifest does not declare.

    Attributes:
        kind: what was seen.
        column: the column it was seen in (the text column for near-identical texts).
        seen: what was seen, in words, with its figures.
        fix: what to do.
        sampled_rows: the rows looked at.
    """

    kind: WarningKind
    column: str
    seen: str
    fix: str
    sampled_rows: int

    @property
    def message(self) -> str:
        """The whole warning: what was seen, then what to do."""
        return f"{self.seen}. {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``kind``, ``column``, ``message``, ``sampled_rows``."""
        return {"kind": self.kind.value, "column": self.column, "message": self.message,
                "sampled_rows": self.sampled_rows}


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_WORD = re.compile(r"[^0-9a-z]+")


def _name_tokens(name: str) -> list[str]:
    return [t for t in _NON_WORD.split(_CAMEL.sub(" ", name).lower()) if t]


def _group_like_name(name: str) -> bool:
    """``customer``, ``customer_id``, ``UserID``, ``session-key``; not ``user_rating``.

    >>> [_group_like_name(n) for n in ("customer_id", "UserID", "Sessions", "user_rating", "text")]
    [True, True, True, False, False]
    """
    tokens = _name_tokens(name)
    if not tokens or len(tokens) > 2:
        return False
    word = tokens[0]
    if word not in GROUP_WORDS and not (word.endswith("s") and word[:-1] in GROUP_WORDS):
        return False
    return len(tokens) == 1 or tokens[1] in ID_SUFFIXES


def near_text_keys(texts: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The form in which texts count as near-identical, for a whole column at once (Arrow
    compute, no Python object per row): NFKC, lower case, Unicode punctuation and symbols
    dropped, runs of white space made one space, trimmed. A missing text stays missing."""
    if not pa.types.is_large_string(texts.type):
        texts = texts.cast(pa.large_string())
    out = pc.utf8_lower(pc.utf8_normalize(texts, form="NFKC"))
    out = pc.replace_substring_regex(out, pattern=r"[\pP\pS]+", replacement="")
    return pc.binary_join(pc.utf8_split_whitespace(out), pa.scalar(" ", pa.large_string()))


def near_text_key(text: str) -> str:
    """One text's near-identical form (:func:`near_text_keys`).

    >>> near_text_key("Great movie!!  Loved it.") == near_text_key("great movie, loved it")
    True
    >>> near_text_key("ＧＲＥＡＴ — film") == near_text_key("great film")
    True
    """
    return str(near_text_keys(pa.array([text], type=pa.large_string()))[0].as_py())


NEAR_KEY_SLICE_CHARS = 1024 * 1024
"""Characters of texts whose near-identical forms are made at once (:func:`near_key_digests`)."""


def near_key_digests(texts: Sequence[Any] | pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each text's near-identical form (:func:`near_text_keys`) as a 16-byte digest (BLAKE2b;
    null for a missing text or an empty form), made a slice of at most
    :data:`NEAR_KEY_SLICE_CHARS` characters at a time (one row at least): the forms of a whole
    sample at once held four copies of its texts (1.1 GB for 2,000 texts of 100 kB); the digests
    are 16 bytes a row.

    >>> d = near_key_digests(["Great movie!!", "great movie", "", None, "other"])
    >>> d[0] == d[1], d[1] == d[4], d[2].as_py(), d[3].as_py()
    (True, False, None, None)
    >>> near_key_digests(pa.chunked_array([["Great movie!!", None], ["other"]])) == d.take([0, 3, 4])
    True
    """
    import hashlib

    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        column = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = column.cast(pa.large_string())
        lengths = np.asarray(pc.fill_null(pc.utf8_length(column), 0), dtype=np.int64)

        def part(start: int, stop: int) -> pa.Array:
            return column.slice(start, stop - start)
    else:
        values = texts
        lengths = np.fromiter((len(v) if isinstance(v, str) else 0 for v in values), dtype=np.int64,
                              count=len(values))

        def part(start: int, stop: int) -> pa.Array:
            return _as_array(values[start:stop])
    ends = np.cumsum(lengths)
    out: list[bytes | None] = []
    start = 0
    while start < len(lengths):
        stop = max(start + 1, int(np.searchsorted(ends, ends[start] - lengths[start] + NEAR_KEY_SLICE_CHARS,
                                                  side="right")))
        for key in near_text_keys(part(start, stop)).to_pylist():
            out.append(hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest() if key else None)
        start = stop
    return pa.array(out, type=pa.binary(16))


def _fix(column: str, declared: str | None) -> str:
    now = "" if declared is None else f" (now {declared!r})"
    return (f"If rows that share a value of {column!r} are related (the same customer, user, "
            f"document or session), declare it as the group column{now}: \"group\": {column!r} "
            "in the manifest's dataset.columns or the API's dataset.columns, so whole groups "
            "are held out and resampled")


def _as_array(values: Sequence[Any] | pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    try:
        return pa.array(list(values))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.large_string())


def _repeats(name: str, values: pa.Array | pa.ChunkedArray) -> tuple[int, int, int, Any] | None:
    """``(k, d, top_count, top_value)`` when the column may hold ids, else None."""
    t = values.type
    if pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_nested(t) or pa.types.is_null(t):
        return None
    if pa.types.is_dictionary(t):
        values = values.cast(t.value_type)
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        values = pc.if_else(pc.equal(values, ""), pa.scalar(None, t), values)
    values = values.drop_null()
    k = len(values)
    if k == 0:
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        mean = pc.mean(pc.utf8_length(values)).as_py() or 0.0
        if mean > TEXTLIKE_MEAN_CHARS:
            return None
    counts = pc.value_counts(values)
    freq = counts.field("counts")
    top = int(pc.index(freq, pc.max(freq)).as_py())
    return k, len(counts), int(freq[top].as_py()), counts.field("values")[top].as_py()


def detect_undeclared_groups(
    columns: Mapping[str, Sequence[Any] | pa.Array | pa.ChunkedArray],
    *,
    text: str,
    skip: Collection[str] = (),
    group: str | None = None,
) -> tuple[GroupingWarning, ...]:
    """Signs of groups the dataset does not declare, on a sample of its rows (module rule).

    Args:
        columns: column name → that column's sampled cells (the same rows in every column).
        text: the text column.
        skip: columns not looked at for names and repeats (the id, answer, review and options
            columns).
        group: the declared group column, or None.

    Returns:
        One warning per sign seen, in column order (names and repeats), then near-identical
        texts; empty when nothing was seen. Nothing here changes a verdict's number.

    >>> rows = range(60)
    >>> warn = detect_undeclared_groups(
    ...     {"id": [f"r{i}" for i in rows], "text": [f"review number {i}" for i in rows],
    ...      "customer_id": [f"c{i // 6}" for i in rows], "label": ["a", "b"] * 30},
    ...     text="text", skip={"id", "label"})
    >>> [(w.kind.value, w.column) for w in warn]
    [('group_like_name', 'customer_id'), ('repeated_values', 'customer_id')]
    >>> print(warn[1].seen)
    60 sampled rows share 10 values of column 'customer_id' (6.0 rows per value on average; the most common, 'c0', on 6 rows)
    >>> detect_undeclared_groups({"id": ["1", "2"], "text": ["a", "b"]}, text="text", skip={"id"})
    ()
    """
    out: list[GroupingWarning] = []
    n = max((len(v) for v in columns.values()), default=0)
    excluded = set(skip) | {text} | ({group} if group else set())
    for name in list(columns)[:MAX_COLUMNS]:
        if name in excluded:
            continue
        values = _as_array(columns[name])
        stats = _repeats(name, values)
        if _group_like_name(name):
            tail = ""
            if stats is not None:
                k, d, _, _ = stats
                tail = f" ({d:,} distinct values over {k:,} sampled rows)"
            out.append(GroupingWarning(
                WarningKind.NAME, name,
                f"Column {name!r} is named like a group (a customer, user, document or session) "
                f"but is not declared as the group column{tail}", _fix(name, group), n))
        if stats is None:
            continue
        k, d, top_count, top_value = stats
        if k >= MIN_ROWS and d >= MIN_DISTINCT and 2 * d <= k:
            out.append(GroupingWarning(
                WarningKind.REPEATS, name,
                f"{k:,} sampled rows share {d:,} values of column {name!r} ({k / d:.1f} rows per "
                f"value on average; the most common, {str(top_value)!r}, on {top_count:,} rows)",
                _fix(name, group), n))
    near = _near_duplicates(columns.get(text), columns.get(group) if group else None)
    if near is not None:
        rows, clusters = near
        if rows >= NEAR_DUPLICATE_MIN_ROWS and rows >= NEAR_DUPLICATE_SHARE * n:
            where = "another row" if group is None else "a row of another group"
            out.append(GroupingWarning(
                WarningKind.NEAR_DUPLICATES, text,
                f"{rows:,} of {n:,} sampled rows ({rows / n:.1%}) have a text near-identical to "
                f"{where}'s ({clusters:,} sets of texts equal once case, spacing and punctuation "
                "are ignored)",
                "If they are copies of one document or come from one customer, user or session, "
                "declare a column that groups them as the group column (\"group\" in "
                "dataset.columns) so they are held out and resampled together; otherwise remove "
                "the copies", n))
    return tuple(out)


def _near_duplicates(
    texts: Sequence[Any] | pa.Array | pa.ChunkedArray | None,
    groups: Sequence[Any] | pa.Array | pa.ChunkedArray | None,
) -> tuple[int, int] | None:
    """``(rows, sets)``: rows whose near-identical text is shared with another row (of another
    group when groups are given), and how many such sets."""
    if texts is None:
        return None
    keys = near_key_digests(texts)
    n = len(keys)
    if groups is None:  # every row its own owner: a key shared by two rows is shared
        counts = pc.value_counts(keys.drop_null())
        many = pc.greater(counts.field("counts"), 1)
        return int(pc.sum(pc.filter(counts.field("counts"), many)).as_py() or 0), int(
            pc.sum(many.cast(pa.int64())).as_py() or 0)
    else:  # a row without a group is its own group
        g = _as_array(groups).cast(pa.large_string())
        r, gp, empty = (pa.scalar(v, pa.large_string()) for v in ("r", "g", ""))
        own = pc.binary_join_element_wise(r, pa.array(np.arange(n, dtype=np.int64)).cast(pa.large_string()), empty)
        owner = pc.if_else(pc.or_kleene(pc.is_null(g), pc.equal(g, "")), own,
                           pc.binary_join_element_wise(gp, g, empty))
    table = pa.table({"key": keys, "owner": owner}).filter(pc.is_valid(keys))
    per_key = table.group_by("key").aggregate([("owner", "count_distinct"), ("owner", "count")])
    shared = per_key.filter(pc.greater(per_key["owner_count_distinct"], 1))
    rows = int(pc.sum(shared["owner_count"]).as_py() or 0)
    return rows, shared.num_rows


# ------------------------------------------------------------------------------------------------
# On a training's dataset file
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupingScan:
    """What :func:`scan_dataset` looked at and found.

    Attributes:
        group_column: the declared group column (None: every example is its own unit).
        sampled_rows: the rows looked at (the file's first rows, at most :data:`SAMPLE_ROWS`).
        warnings: the signs of undeclared groups seen.
    """

    group_column: str | None
    sampled_rows: int
    warnings: tuple[GroupingWarning, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, ``group`` always present (``null`` on purpose when none is declared)."""
        return {"group": self.group_column, "sampled_rows": self.sampled_rows,
                "warnings": [w.as_dict() for w in self.warnings]}


_HEAD_BATCH = 1024
"""CSV rows read at a time for the sample: the cells of the columns looked at for repeats are
Python strings only this many rows at a time, then Arrow."""


def _jsonl_head(objects: Iterable[tuple[int, dict[str, Any]]], rows: int,
                keep: Collection[str] = (), max_columns: int = MAX_COLUMNS) -> dict[str, list[Any]]:
    """The first ``rows`` objects as columns: the first ``max_columns`` keys in the order
    they first appear (a CSV's first columns), then those of ``keep`` that appeared; a row
    without a key has ``None`` there. Each row's other keys are dropped as it is read, so a
    sample of 40,000 rows of 500 keys holds 256 columns, not 40,000 dicts of 500 keys.

    >>> rows = [(1, {"a": 1, "t": "x"}), (2, {"b": 2, "a": 3}), (3, {"c": 9})]
    >>> _jsonl_head(rows, 3)
    {'a': [1, 3, None], 't': ['x', None, None], 'b': [None, 2, None], 'c': [None, None, 9]}
    >>> _jsonl_head(rows, 2, keep={"c", "b"}, max_columns=2)
    {'a': [1, 3], 't': ['x', None], 'b': [None, 2]}
    >>> _jsonl_head(rows, 3, keep={"c"}, max_columns=2)
    {'a': [1, 3, None], 't': ['x', None, None], 'c': [None, None, 9]}
    """
    columns: dict[str, list[Any]] = {}
    extra: dict[str, list[Any]] = {}  # ``keep``'s keys past the first MAX_COLUMNS
    count = 0
    for _, value in objects:
        if count >= rows:
            break
        for key, cell in value.items():
            column = columns.get(key)
            if column is None:
                column = extra.get(key)
            if column is None:
                if len(columns) < max_columns:
                    column = columns[key] = [None] * count
                elif key in keep:
                    column = extra[key] = [None] * count
                else:
                    continue
            column.append(cell)
        count += 1
        for column in (*columns.values(), *extra.values()):
            if len(column) < count:
                column.append(None)
    return {**columns, **extra}


def _head(path: Path, fmt: DatasetFormat, rows: int, keep: Collection[str] = ()) -> dict[str, Any]:
    """The file's first ``rows`` rows: of a CSV or Parquet file the first :data:`MAX_COLUMNS`
    columns, the ones :func:`detect_undeclared_groups` looks at, and ``keep`` (a CSV's ``keep``
    as lists, its others as Arrow string arrays, the column :func:`_as_array` makes of the
    list); of JSON Lines the first :data:`MAX_COLUMNS` keys in the order they first appear, and
    ``keep`` (:func:`_jsonl_head`)."""
    from typestrict_pipeline.refund.table import PARQUET_PRE_BUFFER, iter_column_batches

    if fmt is DatasetFormat.PARQUET:
        import pyarrow.parquet as pq

        handle = pq.ParquetFile(path, pre_buffer=PARQUET_PRE_BUFFER)
        every = [str(n) for n in handle.schema_arrow.names]
        # the columns looked at and ``keep``, as a CSV's below: a file of 500 columns read 256
        looked = list(dict.fromkeys([*every[:MAX_COLUMNS], *(c for c in keep if c in every)]))
        for batch in handle.iter_batches(batch_size=rows, columns=looked):
            return {str(name): batch.column(i) for i, name in enumerate(batch.schema.names)}
        return {n: [] for n in looked}
    if fmt is DatasetFormat.JSONL:
        from typestrict_pipeline.errors import DatasetError
        from typestrict_pipeline.files import iter_jsonl_objects

        return _jsonl_head(iter_jsonl_objects(path, DatasetError), rows, keep)
    names: list[str] = []
    for _ in iter_column_batches(path, fmt, (), names_out=names, batch_rows=1):
        break  # a CSV's header is read with its first row
    # Only the columns looked at (a file of 500 or 10,000 columns: 256 of them), and never the
    # whole sample of them as Python strings: 40,000 rows of 500 columns took 1.9 GB to hold.
    wanted = list(dict.fromkeys([*names[:MAX_COLUMNS], *(c for c in keep if c in names)]))
    lists: dict[str, list[Any]] = {c: [] for c in wanted if c in keep}
    chunks: dict[str, list[pa.Array]] = {c: [] for c in wanted if c not in keep}
    for batch in iter_column_batches(path, fmt, wanted, batch_rows=min(rows, _HEAD_BATCH),
                                     batch_chars=0):
        take = min(batch.length, rows - batch.start)
        for name, cells in batch.cells.items():
            part = list(cells[:take])
            if name in lists:
                lists[name].extend(part)
            else:
                chunks[name].append(_as_array(part))
        if batch.start + take >= rows:
            break
    out: dict[str, Any] = {}
    for name in wanted:
        if name in lists:
            out[name] = lists[name]
            continue
        parts = chunks[name]
        try:
            out[name] = pa.concat_arrays(parts) if parts else []
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowCapacityError):  # past 2 GiB, or types that differ
            out[name] = _as_array([v for part in parts for v in part.to_pylist()])
    return out


def scan_dataset(manifest: TrainingManifest, *, sample_rows: int = SAMPLE_ROWS) -> GroupingScan:
    """Look at the first ``sample_rows`` rows of a training's dataset for undeclared groups.

    Reads only those rows (bounded time and memory whatever the file's size); the dataset is
    expected to have been validated (:func:`~typestrict_pipeline.refund.dataset.load_dataset`).
    """
    cols = manifest.dataset.columns
    skip = {cols.id} | ({cols.review_label} if cols.review_label else set())
    for d in manifest.decisions:
        skip |= {c for c in (d.answer_column, d.options_column, d.review_column) if c}
    keep = {cols.text} | ({cols.group} if cols.group else set())
    head = _head(manifest.dataset.path, manifest.dataset.format, sample_rows, keep)
    n = max((len(v) for v in head.values()), default=0)
    warnings = detect_undeclared_groups(head, text=cols.text, skip=skip, group=cols.group)
    return GroupingScan(cols.group, n, warnings)


def grouping_lines(scan: GroupingScan) -> list[str]:
    """The scan as lines for a terminal or a log: one per warning, each starting ``warning:``.

    >>> grouping_lines(GroupingScan(None, 10, ()))
    []
    """
    return [f"warning: {w.message}." for w in scan.warnings]
