"""Today's (round 3) refund data path, kept verbatim as the reference the columnar path is proved
against (tests/test_refund_columnar_identity.py): read every cell into Python lists, build an
``Example`` per row, split with one ``HoldoutRecord`` per row.

Not used by the product. ``load_dataset`` → ``split_decisions`` here must give the same split,
seed, summary and errors as ``typestrict_pipeline.refund`` for every dataset.
"""

from __future__ import annotations

import difflib
import enum
import hashlib
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from typestrict_pipeline.errors import DatasetError, NotEnoughDataError
from typestrict_pipeline.files import iter_jsonl_objects, loads_strict
from typestrict_pipeline.refund.manifest import (
    Columns,
    DatasetFormat,
    DecisionSpec,
    TrainingManifest,
)
from typestrict_pipeline.refund.table import not_parquet
from typestrict_pipeline.refund.types import DecisionKind, Role

_SHOW_ROWS = 5


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


@dataclass(frozen=True)
class DecisionLabels:
    """One decision's labels, aligned with ``Dataset.examples``.

    Attributes:
        spec: the decision as the manifest describes it.
        labels: the right answer of each example (None: not labeled).
        reviews: the answer a person gave in review (None: not reviewed or no review column).
        options: each example's options (multiple choice), else None.
    """

    spec: DecisionSpec
    labels: tuple[str | None, ...]
    reviews: tuple[str | None, ...]
    options: tuple[tuple[str, ...], ...] | None

    @property
    def name(self) -> str:
        """The decision's name."""
        return self.spec.name

    @property
    def n_labeled(self) -> int:
        """How many examples have a right answer."""
        return sum(1 for v in self.labels if v is not None)

    @property
    def n_reviewed(self) -> int:
        """How many examples have a review label."""
        return sum(1 for v in self.reviews if v is not None)


@dataclass(frozen=True)
class Dataset:
    """A validated dataset.

    Attributes:
        path: the file it was read from.
        columns: the column names used.
        examples: every row, in file order.
        decisions: each decision's labels, in manifest order.
    """

    path: str
    columns: Columns
    examples: tuple[Example, ...]
    decisions: tuple[DecisionLabels, ...]

    def decision(self, name: str) -> DecisionLabels:
        """The labels of the decision called ``name``.

        Raises:
            KeyError: no such decision (the message lists the decisions).
        """
        for labels in self.decisions:
            if labels.name == name:
                return labels
        raise KeyError(f"no decision {name!r}; the dataset has {[d.name for d in self.decisions]}")


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def read_table(path: Path, fmt: DatasetFormat) -> dict[str, list[Any]]:
    """Read a CSV, Parquet or JSONL file into columns of plain Python values.

    Args:
        path: the file.
        fmt: its format.

    Returns:
        Column name → list of values, one per data row (None for a missing JSONL key).

    Raises:
        DatasetError: the file is missing or cannot be parsed (the message names the row when it
            can).
    """
    if not path.exists():
        raise DatasetError(
            "an existing dataset file",
            "no such file",
            "check dataset.path in the manifest",
            file=str(path),
        )
    if fmt is DatasetFormat.CSV:
        return _read_csv(path)
    if fmt is DatasetFormat.PARQUET:
        return _read_parquet(path)
    return _read_jsonl(path)


_OPENERS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def _csv_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed by suffix (``.gz``, ``.bz2``, ``.xz``)."""
    import importlib

    suffix = path.suffix.lower()
    module = _OPENERS.get(suffix) or ("zipfile" if suffix == ".zip" else None)
    if suffix == ".zst":
        raise DatasetError(
            "a CSV file, plain or compressed with gzip, bzip2, xz or zip",
            "a .zst file",
            "recompress it with gzip (.csv.gz)",
            file=str(path),
        )
    try:
        if module is None:
            return path.read_bytes()
        if module == "zipfile":
            import zipfile

            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if not n.endswith("/")]
                if len(names) != 1:
                    raise ValueError("a zip archive must hold exactly one file")
                return archive.read(names[0])
        opener = importlib.import_module(module)
        with opener.open(path, "rb") as handle:
            data: bytes = handle.read()
            return data
    except (OSError, EOFError, ValueError, RuntimeError) as exc:
        raise DatasetError(
            "a readable CSV file" + (f" ({path.suffix} compressed)" if module else ""),
            exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__,
            "check the file",
            file=str(path),
        ) from None


def _decode_csv(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DatasetError(
            "a UTF-8 encoded CSV file",
            f"bytes that are not UTF-8 on line {line} of the file",
            "save the file as UTF-8",
            file=str(path),
            row=max(line - 1, 1),
        ) from None


def _read_csv(path: Path) -> dict[str, list[Any]]:
    """Every cell as the exact text written (``NA``, ``null``, ``None`` are text); ragged rows refused."""
    import csv
    import io
    import sys

    file = str(path)
    text = _decode_csv(path, _csv_bytes(path))
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    columns: list[list[str]] = []
    row = 0
    try:
        for record in reader:
            if not record or (record == [""] and header is not None):
                continue
            if header is None:
                header = record
                _check_header(header, file)
                columns = [[] for _ in header]
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
            for cells, value in zip(columns, record, strict=True):
                cells.append(value)
    except csv.Error as exc:
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
    return dict(zip(header, columns, strict=True))


def _check_header(header: list[str], file: str) -> None:
    """Written apart from the product's: every name's positions first, then the name whose second
    position comes earliest (where a reader going left to right would stop)."""
    positions: dict[str, list[int]] = {}
    for number, name in enumerate(header, start=1):
        positions.setdefault(name, []).append(number)
    repeated = sorted((at[1], at[0], name) for name, at in positions.items() if len(at) > 1)
    if not repeated:
        return
    second, first, name = repeated[0]
    if name.strip() == "":
        got = f"{'an empty' if name == '' else 'a blank'} name for columns {first} and {second}"
        raise DatasetError("a name for every column of the header", got,
                           "name the columns, or remove them (a comma at the end of the header line "
                           "adds a column without a name)", file=file)
    raise DatasetError("each column name once in the header",
                       f"the column name {name[:40]!r} twice (columns {first} and {second})",
                       "rename one of the columns", file=file)


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


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _rows_text(rows: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in rows[:_SHOW_ROWS])
    more = f", ... ({len(rows)} rows in all)" if len(rows) > _SHOW_ROWS else ""
    return f"rows {shown}{more}" if len(rows) > 1 else f"row {shown}"


def _require_column(table: dict[str, list[Any]], name: str, role: str, file: str) -> list[Any]:
    if name in table:
        return table[name]
    available = list(table)
    lowered = {c.lower().strip(): c for c in available}
    close = [lowered[name.lower().strip()]] if name.lower().strip() in lowered else []
    close = close or difflib.get_close_matches(name, available, n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    raise DatasetError(
        f"a column named {name!r} ({role})",
        f"no such column; the file has {available}",
        f"rename the column in the file or fix the name the training gives it{hint}",
        file=file,
        column=name,
    )


def _scalar(value: Any, *, file: str, row: int, column: str, what: str) -> str | None:
    """A cell as text: None/NaN → None; str as is; int → decimal text; anything else is an error."""
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


def _optional_label(value: Any, *, file: str, row: int, column: str, what: str) -> str | None:
    text = _scalar(value, file=file, row=row, column=column, what=what)
    if text is None or not text.strip():
        return None
    return text


def _parse_options(value: Any, *, file: str, row: int, column: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = loads_strict(value, file=file, error=DatasetError, row=row)
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
    if len(options) < 2:
        raise DatasetError(
            "at least 2 options",
            f"{len(options)} ({list(options)})",
            "give every example two or more options",
            file=file,
            row=row,
            column=column,
        )
    repeated = sorted({o for o in options if options.count(o) > 1})
    if repeated:
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
    value: str,
    allowed: Sequence[str],
    decision: str,
    multiple_choice: bool,
) -> DatasetError:
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if multiple_choice:
        expected = f"one of this example's options for decision {decision!r} {list(allowed)}"
        fix = f"fix the cell{hint}, or add the right answer to the example's options"
    else:
        expected = f"one of the answers of decision {decision!r} {list(allowed)}"
        fix = f"fix the cell{hint}, or add the answer to the decision's answers (decisions[].answers)"
    return DatasetError(
        expected,
        f"{value!r} ({_rows_text(rows)})",
        fix,
        file=file,
        row=rows[0],
        column=column,
    )


def _check_labels(
    labels: Sequence[str | None],
    *,
    allowed_for: Callable[[int], Sequence[str]],
    file: str,
    column: str,
    decision: str,
    multiple_choice: bool,
    first_row: int,
) -> None:
    bad: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        if label is not None and label not in allowed_for(i):
            bad.setdefault(label, []).append(i + first_row)
    if bad:
        value, rows = min(bad.items(), key=lambda item: item[1][0])
        raise _outside_error(
            file, column, rows, value, allowed_for(rows[0] - first_row), decision, multiple_choice
        )


def validate_dataset(
    table: dict[str, list[Any]], manifest: TrainingManifest, *, file: str | None = None
) -> Dataset:
    """Validate columns read by :func:`read_table` against the manifest.

    Args:
        table: column name → values, one per data row.
        manifest: the training manifest (columns and decisions).
        file: the name used in messages (default: the manifest's dataset path).

    Returns:
        The validated dataset.

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
    spec = manifest.dataset
    name = file if file is not None else spec.path_as_written
    cols = spec.columns
    first = 1
    ids_raw = _require_column(table, cols.id, "dataset.columns.id", name)
    texts_raw = _require_column(table, cols.text, "dataset.columns.text", name)
    groups_raw = (
        _require_column(table, cols.group, "dataset.columns.group", name) if cols.group else None
    )
    for decision in manifest.decisions:
        where = f"decision {decision.name!r}"
        if decision.answer_column is not None:
            _require_column(table, decision.answer_column, f"{where} answer_column", name)
        if decision.options_column is not None:
            _require_column(table, decision.options_column, f"{where} options_column", name)
        if decision.review_column is not None:
            _require_column(table, decision.review_column, f"{where} review_column", name)
    if cols.review_label is not None:
        _require_column(table, cols.review_label, "dataset.columns.review_label", name)

    n = len(ids_raw)
    if n == 0:
        raise NotEnoughDataError(
            f"{name}: expected at least one data row, got none. Add examples to the dataset."
        )

    ids: list[str] = []
    seen: dict[str, int] = {}
    empty_ids: list[int] = []
    dupes: list[tuple[int, str, int]] = []
    for i, raw in enumerate(ids_raw):
        row = i + first
        value = _scalar(raw, file=name, row=row, column=cols.id, what="an id")
        if value is None or not value.strip():
            empty_ids.append(row)
            ids.append("")
            continue
        if not value.isprintable():  # a control, escape, bidi or zero-width character
            raise DatasetError(
                "an id of printable characters",
                f"an id with an invisible or control character ({ascii(value)[:60]})",
                "remove the character (ids are compared exactly, and shown in messages)",
                file=name, row=row, column=cols.id,
            )
        if value in seen:
            dupes.append((row, value, seen[value]))
        else:
            seen[value] = row
        ids.append(value)
    if empty_ids:
        raise DatasetError(
            "a non-empty id on every row",
            f"an empty id ({_rows_text(empty_ids)})",
            "give every example a unique id",
            file=name,
            row=empty_ids[0],
            column=cols.id,
        )
    if dupes:
        row, value, earlier = dupes[0]
        more = f"; {len(dupes)} duplicate rows in all" if len(dupes) > 1 else ""
        raise DatasetError(
            "unique ids",
            f"{value!r} again (first at row {earlier}{more})",
            "make the ids unique (the test set and the audit are keyed by id)",
            file=name,
            row=row,
            column=cols.id,
        )

    texts: list[str] = []
    empty_texts: list[int] = []
    for i, raw in enumerate(texts_raw):
        row = i + first
        value = _scalar(raw, file=name, row=row, column=cols.text, what="a text")
        if value is None or not value.strip():
            empty_texts.append(row)
            value = ""
        texts.append(value)
    if empty_texts:
        raise DatasetError(
            "a non-empty text on every row",
            f"an empty text ({_rows_text(empty_texts)})",
            "write the example's text, or remove the row",
            file=name,
            row=empty_texts[0],
            column=cols.text,
        )

    groups: list[str | None] = [None] * n
    if groups_raw is not None and cols.group is not None:
        groups = [
            _optional_label(v, file=name, row=i + first, column=cols.group, what="a group")
            for i, v in enumerate(groups_raw)
        ]

    examples = tuple(
        Example(id=ids[i], text=texts[i], group=groups[i], row=i + first) for i in range(n)
    )
    decisions = tuple(
        _validate_decision(table, d, cols, name, n, first) for d in manifest.decisions
    )
    return Dataset(path=str(spec.path), columns=cols, examples=examples, decisions=decisions)


def _validate_decision(
    table: dict[str, list[Any]],
    decision: DecisionSpec,
    cols: Columns,
    name: str,
    n: int,
    first: int,
) -> DecisionLabels:
    def read(column: str | None, what: str) -> tuple[str | None, ...]:
        if column is None:
            return (None,) * n
        return tuple(
            _optional_label(v, file=name, row=i + first, column=column, what=what)
            for i, v in enumerate(table[column])
        )

    labels = read(decision.answer_column, "an answer")
    review_column = decision.review_column or cols.review_label
    reviews = read(review_column, "a review label")

    options: tuple[tuple[str, ...], ...] | None = None
    if decision.kind is DecisionKind.MULTIPLE_CHOICE:
        assert decision.options_column is not None
        column = decision.options_column
        parsed = [
            _parse_options(v, file=name, row=i + first, column=column)
            for i, v in enumerate(table[column])
        ]
        missing = [i + first for i, o in enumerate(parsed) if o is None]
        if missing:
            raise DatasetError(
                f"options on every example of multiple-choice decision {decision.name!r}",
                f"no options ({_rows_text(missing)})",
                "give each example its list of options (both systems are asked with them)",
                file=name,
                row=missing[0],
                column=column,
            )
        options = tuple(o for o in parsed if o is not None)
        opts = options

        def allowed(i: int) -> Sequence[str]:
            return opts[i]

    else:
        answers = decision.answers

        def allowed(i: int) -> Sequence[str]:
            return answers

    if decision.answer_column is not None:
        _check_labels(
            labels,
            allowed_for=allowed,
            file=name,
            column=decision.answer_column,
            decision=decision.name,
            multiple_choice=options is not None,
            first_row=first,
        )
    if review_column is not None:
        _check_labels(
            reviews,
            allowed_for=allowed,
            file=name,
            column=review_column,
            decision=decision.name,
            multiple_choice=options is not None,
            first_row=first,
        )

    n_labeled = sum(1 for v in labels if v is not None)
    n_reviewed = sum(1 for v in reviews if v is not None)
    if n_labeled == 0 and n_reviewed == 0:
        looked = [c for c in (decision.answer_column, review_column) if c is not None]
        raise NotEnoughDataError(
            f"{name}: expected labeled examples or examples a person labeled in review for decision "
            f"{decision.name!r} (columns {looked}), got none (all {n} cells empty). "
            "Fill in the right answers, or review some examples, before training."
        )
    used, column_used = (labels, decision.answer_column) if n_labeled else (reviews, review_column)
    if decision.kind is DecisionKind.SINGLE:
        distinct = sorted({v for v in used if v is not None})
        if len(distinct) < 2:
            which = "labeled" if n_labeled else "reviewed"
            raise DatasetError(
                f"at least 2 different answers among the {which} examples of decision {decision.name!r}",
                f"only {distinct} ({n_labeled or n_reviewed} rows)",
                "add examples of the other answers: a decision with one answer cannot be measured",
                file=name,
                column=column_used,
            )
    return DecisionLabels(spec=decision, labels=labels, reviews=reviews, options=options)


def load_dataset(manifest: TrainingManifest) -> Dataset:
    """Read the manifest's dataset and validate it.

    Args:
        manifest: the training manifest.

    Returns:
        The validated dataset.

    Raises:
        DatasetError: see :func:`validate_dataset`; also a missing or unreadable file.
        NotEnoughDataError: a decision has neither labeled nor reviewed examples.
    """
    spec = manifest.dataset
    table = read_table(spec.path, spec.format)
    return validate_dataset(table, manifest, file=str(spec.path))


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


# ---- holdout.py ----

TEST_FRACTION = Fraction(1, 5)
"""The share of labeled examples held out (20%)."""
TEST_CAP = 2000
"""At most this many test examples per decision."""
SEED_DOMAIN = b"typestrict-holdout-v1\0"
"""Domain-separation prefix of the holdout seed (bump the version if the algorithm changes)."""


class HoldoutSource(enum.StrEnum):
    """Where the test examples' answers come from.

    Attributes:
        LABELED: the dataset's answers (20% of labeled examples).
        REVIEWED: no answers in the data; the examples a person labeled in review.
    """

    LABELED = "labeled"
    REVIEWED = "reviewed"


@dataclass(frozen=True)
class HoldoutRecord:
    """One row as the split sees it.

    Attributes:
        id: unique row id.
        text: the text (part of the seed).
        answer: the stratum answer (right answer, review label, or option position), or None.
        group: the group value, or None (own group).
    """

    id: str
    text: str
    answer: str | None
    group: str | None


@dataclass(frozen=True)
class HoldoutRow:
    """One row of the result.

    Attributes:
        id: the row id.
        role: test, train or excluded.
        answer: its stratum answer, or None.
        group: its group value, or None.
        unit: the key of the group it was drawn with: ``"g\\0" + group`` or ``"r\\0" + id``
            (a row without a group value), or, when identical texts joined several such groups,
            the smallest of their keys. The group bootstrap resamples these.
    """

    id: str
    role: Role
    answer: str | None
    group: str | None
    unit: str = ""


@dataclass(frozen=True)
class AnswerSplit:
    """Counts for one answer.

    Attributes:
        answer: the answer (for multiple choice, the option position "1".."K").
        labeled: rows with this answer (labeled or reviewed, per ``source``).
        share: the exact share aimed at (a fraction: n_a/5, or 2000·n_a/n when capped).
        target: the integer quota (within one of ``share``).
        test / train / excluded: where this answer's rows went.
    """

    answer: str
    labeled: int
    share: Fraction
    target: int
    test: int
    train: int
    excluded: int


@dataclass(frozen=True)
class HoldoutSummary:
    """What the split did, for metadata, the audit and the result page.

    Attributes:
        decision: the decision's name.
        source: labeled or reviewed.
        seed_sha256: the seed, hex.
        n_rows: rows in the dataset.
        n_labeled: stratum rows.
        n_test / n_train / n_excluded: rows per role.
        target_test: the total quota T.
        capped: whether the 2,000 cap applied.
        grouped: whether a group column was used.
        groups_test: distinct group values on the test side.
        groups_train: distinct group values with at least one train row.
        rows_excluded_from_train: rows of test groups that are not test.
        per_answer: counts per answer, in answer order.
        rows_joined_by_text: rows of groups (or single rows) that an identical text (after
            :func:`normalize_text`) joined with another group, so they are drawn together.
        groups_joined_by_text: how many joined groups those rows form.
    """

    decision: str
    source: HoldoutSource
    seed_sha256: str
    n_rows: int
    n_labeled: int
    n_test: int
    n_train: int
    n_excluded: int
    target_test: int
    capped: bool
    grouped: bool
    groups_test: int
    groups_train: int
    rows_excluded_from_train: int
    per_answer: tuple[AnswerSplit, ...]
    rows_joined_by_text: int = 0
    groups_joined_by_text: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (fractions written as ``"num/den"`` strings, exact)."""
        return {
            "decision": self.decision,
            "source": self.source.value,
            "seed_sha256": self.seed_sha256,
            "n_rows": self.n_rows,
            "n_labeled": self.n_labeled,
            "n_test": self.n_test,
            "n_train": self.n_train,
            "n_excluded": self.n_excluded,
            "target_test": self.target_test,
            "test_fraction": [TEST_FRACTION.numerator, TEST_FRACTION.denominator],
            "cap": TEST_CAP,
            "capped": self.capped,
            "grouped": self.grouped,
            "groups_test": self.groups_test,
            "groups_train": self.groups_train,
            "rows_excluded_from_train": self.rows_excluded_from_train,
            "rows_joined_by_text": self.rows_joined_by_text,
            "groups_joined_by_text": self.groups_joined_by_text,
            "per_answer": [
                {
                    "answer": a.answer,
                    "labeled": a.labeled,
                    "share": str(a.share),
                    "target": a.target,
                    "test": a.test,
                    "train": a.train,
                    "excluded": a.excluded,
                }
                for a in self.per_answer
            ],
        }


@dataclass(frozen=True)
class Holdout:
    """The split of one decision.

    Attributes:
        decision: the decision's name.
        rows: every row with its role, in the input order.
        summary: counts and flags.
    """

    decision: str
    rows: tuple[HoldoutRow, ...]
    summary: HoldoutSummary

    def ids(self, role: Role) -> tuple[str, ...]:
        """The ids with ``role``, sorted (a canonical order independent of the file)."""
        return tuple(sorted(r.id for r in self.rows if r.role is role))

    @property
    def test_ids(self) -> tuple[str, ...]:
        """The test ids, sorted."""
        return self.ids(Role.TEST)


_ROW_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Encodes a row exactly as ``json.dumps([id, text, answer, group], ensure_ascii=False,
separators=(",", ":"))`` does (one encoder, built once)."""


def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


def holdout_seed(
    records: Iterable[HoldoutRecord], *, decision: str, source: HoldoutSource
) -> bytes:
    """The split's seed: SHA-256 over the sorted row contents, the decision and the source.

    Args:
        records: every row (id, text, answer, group).
        decision: the decision's name (each decision gets its own draw).
        source: labeled or reviewed.

    Returns:
        32 bytes.

    >>> a = [HoldoutRecord("1", "x", "yes", None), HoldoutRecord("2", "y", "no", None)]
    >>> holdout_seed(a, decision="d", source=HoldoutSource.LABELED) == holdout_seed(
    ...     a[::-1], decision="d", source=HoldoutSource.LABELED)
    True
    """
    encode = _ROW_ENCODER.encode
    sha = hashlib.sha256
    digests = sorted(
        sha(encode([r.id, r.text, r.answer, r.group]).encode("utf-8")).digest() for r in records
    )
    return _digest(
        SEED_DOMAIN,
        decision.encode("utf-8"),
        b"\0",
        source.value.encode("ascii"),
        b"\0",
        b"".join(digests),
    )


def normalize_text(text: str) -> str:
    r"""The form in which two texts count as identical for the split.

    Unicode NFKC (so full-width letters, ligatures and composed accents compare equal), case
    folded, every run of white space made one space, trimmed.

    >>> normalize_text("  Great\tMOVIE!\n") == normalize_text("great movie!")
    True
    >>> normalize_text("ﬁne") == normalize_text("FINE")
    True
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def join_identical_texts(
    records: Sequence[HoldoutRecord],
) -> tuple[list[str], int, int]:
    r"""Each row's group key after joining groups that share a text (union-find).

    A row's own key is ``"g\0" + group``, or ``"r\0" + id`` without a group value. Rows whose
    texts are equal after :func:`normalize_text` put their groups together; a joined group's
    key is the smallest of its members' keys (so the result does not depend on row order).

    Args:
        records: every row.

    Returns:
        (each row's key, rows in joined groups, joined groups).

    >>> recs = [HoldoutRecord("1", "Hi", "a", "x"), HoldoutRecord("2", "hi ", "a", "y"),
    ...         HoldoutRecord("3", "other", "a", "y"), HoldoutRecord("4", "new", "a", None)]
    >>> keys, rows, groups = join_identical_texts(recs)
    >>> keys == ["g\0x"] * 3 + ["r\x004"], rows, groups
    (True, 3, 1)
    """
    own = [("g\0" + r.group) if r.group is not None else ("r\0" + r.id) for r in records]
    parent: dict[str, str] = {k: k for k in own}

    def find(key: str) -> str:
        root = key
        while parent[root] != root:
            root = parent[root]
        while parent[key] != root:
            parent[key], key = root, parent[key]
        return root

    first_with_text: dict[str, str] = {}
    for r, key in zip(records, own, strict=True):
        text: object = r.text
        if not isinstance(text, str):  # a missing text (NaN from a frame) joins nothing
            continue
        other = first_with_text.setdefault(normalize_text(text), key)
        a, b = find(key), find(other)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the smaller key stays the root
    keys = [find(k) for k in own]
    members: dict[str, set[str]] = {}
    for key, root in zip(own, keys, strict=True):
        members.setdefault(root, set()).add(key)
    joined = {root for root, m in members.items() if len(m) > 1}
    return keys, sum(1 for root in keys if root in joined), len(joined)


def _round_half_up(x: Fraction) -> int:
    return int((x + Fraction(1, 2)).__floor__())


def allocate_quotas(
    counts: Sequence[int], *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> tuple[list[int], list[Fraction], bool]:
    """Per-answer test quotas by the largest-remainder method.

    Args:
        counts: rows per answer, in answer order.
        fraction: the share to hold out (1/5; 1 for the reviewed case).
        cap: the most test rows in all.

    Returns:
        (quotas, exact shares, capped). Each quota is floor or ceil of its share; the total is
        the share total rounded half up.

    >>> allocate_quotas([73, 54, 11])
    ([15, 11, 2], [Fraction(73, 5), Fraction(54, 5), Fraction(11, 5)], False)
    >>> quotas, shares, capped = allocate_quotas([7403, 5405, 1097])  # Rotten Tomatoes: capped
    >>> quotas, capped
    ([1065, 777, 158], True)
    """
    n = sum(counts)
    if n == 0:
        return [0] * len(counts), [Fraction(0)] * len(counts), False
    capped = n * fraction > cap
    scale = Fraction(cap, n) if capped else fraction
    shares = [c * scale for c in counts]
    total = _round_half_up(sum(shares, Fraction(0)))
    quotas = [int(s.__floor__()) for s in shares]
    left = total - sum(quotas)
    order = sorted(range(len(counts)), key=lambda i: (-(shares[i] - quotas[i]), i))
    for i in order[:left]:
        quotas[i] += 1
    return quotas, shares, capped


def draw_holdout(
    records: Sequence[HoldoutRecord],
    *,
    decision: str,
    source: HoldoutSource = HoldoutSource.LABELED,
    answer_order: Sequence[str] | None = None,
    grouped: bool | None = None,
    fraction: Fraction = TEST_FRACTION,
    cap: int = TEST_CAP,
) -> Holdout:
    """Split one decision's rows into test, train and excluded (algorithm in the module doc).

    Args:
        records: every row of the dataset.
        decision: the decision's name (part of the seed).
        source: LABELED (hold out ``fraction`` of the answered rows) or REVIEWED (every
            answered row is test, up to ``cap``; unanswered rows outside test groups are train).
        answer_order: the answers in display/tie-break order (default: sorted); answers present
            in the data but not listed are an error.
        grouped: whether the data has a group column (default: any record has a group).
        fraction: the held-out share for LABELED (default 1/5).
        cap: the most test rows (default 2,000).

    Returns:
        The :class:`Holdout`.

    Raises:
        DatasetError: duplicate ids, or an answer not in ``answer_order``.
        NotEnoughDataError: too few answered rows to hold out even one test example.
    """
    seen: set[str] = set()
    for r in records:
        if r.id in seen:
            raise DatasetError("unique ids", f"{r.id!r} twice", "make the ids unique", column="id")
        seen.add(r.id)
    present = {r.answer for r in records if r.answer is not None}
    answers = list(answer_order) if answer_order is not None else sorted(present)
    unknown = sorted(present - set(answers))
    if unknown:
        raise DatasetError(
            f"answers among {answers}",
            f"{unknown}",
            "list every answer of the decision",
            column="answer",
        )
    index = {a: i for i, a in enumerate(answers)}
    counts = [0] * len(answers)
    for r in records:
        if r.answer is not None:
            counts[index[r.answer]] += 1
    n_labeled = sum(counts)
    share_of = fraction if source is HoldoutSource.LABELED else Fraction(1)
    quotas, shares, capped = allocate_quotas(counts, fraction=share_of, cap=cap)
    if sum(quotas) == 0:
        which = "labeled" if source is HoldoutSource.LABELED else "reviewed"
        need = _round_half_up_inverse(share_of)
        raise NotEnoughDataError(
            f"expected enough {which} examples of decision {decision!r} to hold out at least one "
            f"test example (at least {need}), got {n_labeled}. Label more examples before training."
        )
    seed = holdout_seed(records, decision=decision, source=source)
    is_grouped = any(r.group is not None for r in records) if grouped is None else grouped

    # Groups (identical texts joined): key -> row positions; stratum counts per group.
    unit_of, rows_joined, groups_joined = join_identical_texts(records)
    group_rows: dict[str, list[int]] = {}
    for pos, key in enumerate(unit_of):
        group_rows.setdefault(key, []).append(pos)
    group_prefix = hashlib.sha256(seed + b"group\0")

    def group_rank(key: str) -> bytes:  # == sha256(seed + b"group\0" + key)
        h = group_prefix.copy()
        h.update(key.encode("utf-8"))
        return h.digest()

    order = sorted(group_rows, key=group_rank)

    remaining = list(quotas)
    open_total = sum(remaining)
    test_groups: set[str] = set()
    selected: set[int] = set()

    counts_of: dict[str, dict[int, int]] = {}
    for key, positions in group_rows.items():
        out: dict[int, int] = {}
        for pos in positions:
            stratum = records[pos].answer
            if stratum is not None:
                si = index[stratum]
                out[si] = out.get(si, 0) + 1
        counts_of[key] = out

    # Pass 1: whole groups that fit.
    for key in order:
        if open_total == 0:
            break
        gc = counts_of[key]
        if not gc or any(c > remaining[a] for a, c in gc.items()):
            continue
        test_groups.add(key)
        for a, c in gc.items():
            remaining[a] -= c
            open_total -= c
        selected.update(pos for pos in group_rows[key] if records[pos].answer is not None)

    # Pass 2: top up open quotas with the next groups; surplus rows of those groups are excluded.
    if open_total:
        for key in order:
            if open_total == 0:
                break
            if key in test_groups:
                continue
            gc = counts_of[key]
            if not any(remaining[ai] > 0 for ai in gc):
                continue
            test_groups.add(key)
            by_answer: dict[int, list[int]] = {}
            for pos in group_rows[key]:
                label = records[pos].answer
                if label is not None:
                    by_answer.setdefault(index[label], []).append(pos)
            for ai, positions in by_answer.items():
                positions.sort(key=lambda p: _digest(seed, b"row\0", records[p].id.encode("utf-8")))
                take = min(len(positions), remaining[ai])
                selected.update(positions[:take])
                remaining[ai] -= take
                open_total -= take

    in_test_group = set()
    for key in test_groups:
        in_test_group.update(group_rows[key])

    rows: list[HoldoutRow] = []
    per = [[0, 0, 0] for _ in answers]  # test, train, excluded
    role_index = {Role.TEST: 0, Role.TRAIN: 1, Role.EXCLUDED: 2}
    excluded_from_train = 0
    groups_train: set[str] = set()
    groups_test: set[str] = set()
    for pos, r in enumerate(records):
        if pos in in_test_group:
            role = Role.TEST if pos in selected else Role.EXCLUDED
            if role is Role.EXCLUDED:
                excluded_from_train += 1
            if r.group is not None:
                groups_test.add(r.group)
        elif r.answer is not None or source is HoldoutSource.REVIEWED:
            role = Role.TRAIN
            if r.group is not None:
                groups_train.add(r.group)
        else:
            role = Role.EXCLUDED
        if r.answer is not None:
            per[index[r.answer]][role_index[role]] += 1
        rows.append(HoldoutRow(id=r.id, role=role, answer=r.answer, group=r.group, unit=unit_of[pos]))

    n_test = sum(1 for row in rows if row.role is Role.TEST)
    n_train = sum(1 for row in rows if row.role is Role.TRAIN)
    summary = HoldoutSummary(
        decision=decision,
        source=source,
        seed_sha256=seed.hex(),
        n_rows=len(records),
        n_labeled=n_labeled,
        n_test=n_test,
        n_train=n_train,
        n_excluded=len(records) - n_test - n_train,
        target_test=sum(quotas),
        capped=capped,
        grouped=is_grouped,
        groups_test=len(groups_test),
        groups_train=len(groups_train),
        rows_excluded_from_train=excluded_from_train,
        per_answer=tuple(
            AnswerSplit(
                answer=a,
                labeled=counts[i],
                share=shares[i],
                target=quotas[i],
                test=per[i][0],
                train=per[i][1],
                excluded=per[i][2],
            )
            for i, a in enumerate(answers)
        ),
        rows_joined_by_text=rows_joined,
        groups_joined_by_text=groups_joined,
    )
    return Holdout(decision=decision, rows=tuple(rows), summary=summary)


def _round_half_up_inverse(share: Fraction) -> int:
    """The fewest answered rows for which round-half-up(n · share) ≥ 1."""
    n = 1
    while _round_half_up(n * share) < 1:
        n += 1
    return n


def split_dataset(
    dataset: Dataset, decision: str, *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> Holdout:
    """Split one decision of a validated dataset.

    Uses the right answers when the decision has any labeled example, else the review labels.
    For multiple choice the stratum is the right option's position ("1".."K").

    Args:
        dataset: the validated dataset.
        decision: the decision's name.
        fraction: held-out share (default 1/5).
        cap: the most test rows (default 2,000).

    Returns:
        The :class:`Holdout`.

    Raises:
        NotEnoughDataError: too few examples to hold out any test.
    """
    labels = dataset.decision(decision)
    source = HoldoutSource.LABELED if labels.n_labeled else HoldoutSource.REVIEWED
    values = labels.labels if source is HoldoutSource.LABELED else labels.reviews
    if labels.spec.kind is DecisionKind.MULTIPLE_CHOICE:
        assert labels.options is not None
        strata: list[str | None] = [
            None if v is None else str(labels.options[i].index(v) + 1) for i, v in enumerate(values)
        ]
        k_max = max(len(o) for o in labels.options)
        answer_order: list[str] = [str(k) for k in range(1, k_max + 1)]
    else:
        strata = list(values)
        answer_order = list(labels.spec.answers)
    records = [
        HoldoutRecord(id=ex.id, text=ex.text, answer=strata[i], group=ex.group)
        for i, ex in enumerate(dataset.examples)
    ]
    return draw_holdout(
        records,
        decision=decision,
        source=source,
        answer_order=answer_order,
        grouped=dataset.columns.group is not None,
        fraction=fraction,
        cap=cap,
    )


def split_decisions(dataset: Dataset) -> tuple[Holdout, ...]:
    """Split every decision of the dataset, each with its own seed, in manifest order."""
    return tuple(split_dataset(dataset, d.name) for d in dataset.decisions)


def training_ids(holdouts: Sequence[Holdout]) -> frozenset[str]:
    """The ids a (multi-task) model may train on: ``train`` in every decision's split.

    A row that is test (or excluded) for one decision must not be trained on for another, or
    the model would see a text it is measured on.

    >>> h = draw_holdout([HoldoutRecord(str(i), f"t{i}", "a" if i % 2 else "b", None)
    ...                   for i in range(10)], decision="d")
    >>> len(training_ids([h]))
    8
    """
    if not holdouts:
        return frozenset()
    common = {r.id for r in holdouts[0].rows if r.role is Role.TRAIN}
    for h in holdouts[1:]:
        common &= {r.id for r in h.rows if r.role is Role.TRAIN}
    return frozenset(common)
