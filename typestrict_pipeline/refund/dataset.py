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
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from typestrict_pipeline.refund.types import DecisionKind

__all__ = [
    "Dataset",
    "DecisionLabels",
    "Example",
    "load_dataset",
    "read_table",
    "unlabeled_from_split",
    "unlabeled_text",
    "validate_dataset",
]

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
    import lzma
    import zlib

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
            with open(path, "rb") as handle:  # a binary or sparse file is refused by its start
                head = handle.read(65536)
            if b"\x00" in head:
                line = head.count(b"\n", 0, head.index(b"\x00")) + 1
                raise DatasetError("a CSV file of text", f"a NUL byte on line {line} of the file (a binary or "
                                   "sparse file?)", "check that this is the right file", file=str(path))
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
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error, lzma.LZMAError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else (
            f"{'zlib' if isinstance(exc, zlib.error) else type(exc).__name__}: {' '.join(str(exc).split())[:100]}"
            if str(exc) else type(exc).__name__)
        raise DatasetError(
            "a readable CSV file" + (f" ({path.suffix} compressed)" if module else ""),
            f"a truncated or corrupt archive ({detail})" if module else detail,
            "check the file" + (", or compress it again" if module else ""),
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
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise DatasetError(
                "each column name once in the header",
                f"the column name {name[:40]!r} twice",
                "rename one of the columns",
                file=file,
            )
        seen.add(name)


def _read_parquet(path: Path) -> dict[str, list[Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise DatasetError(
            "a Parquet file", f"{type(exc).__name__}: {exc}", "check the file", file=str(path)
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
        f"rename the column in the file or fix the column name in the manifest{hint}",
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
        fix = f"fix the cell{hint}, or add the answer to the decision's answers in the manifest"
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
    typestrict_pipeline.errors.DatasetError: d.csv, row 2, column 'label': expected one of the answers of decision 's' ['no', 'yes'], got 'maybe' (row 2). Fix the cell, or add the answer to the decision's answers in the manifest.
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
