"""Recorded probabilities (Jev's and the model's): read, validate, align into ``DecisionData``.

File format (documented in ``docs/manifest.md``, "Predictions files"):

- **JSONL**, one object per line: ``{"id": "r17", "decision": "sentiment",
  "probabilities": {"fresh": 0.7, "rotten": 0.2, "plot": 0.1}}``. For a multiple-choice decision
  the keys are that example's options (their texts).
- **Parquet**, one row per (example, decision): ``id`` (string or integer), ``decision`` (string),
  ``answers`` (list of strings) and ``probabilities`` (list of doubles, same length and order).

Checks, each an error naming the file, the row (1-based) and the column: a missing field, an id
or decision that the training does not have, a duplicate (id, decision), a value that is not a
number, NaN or infinite, negative, above 1, a row not summing to 1 within ±0.01 (the one tolerance:
:func:`~typestrict_pipeline.refund.metrics.sums_to_one`), answers that
differ from the decision's (or from the example's options), Jev's answers differing from the
model's, and a test example without a prediction.

Probabilities are used exactly as given (float64, never renormalised or rounded): the
judgement and the audit recompute from these values.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typestrict_pipeline.errors import PredictionsError, listed
from typestrict_pipeline.files import iter_jsonl_objects, write_atomic
from typestrict_pipeline.refund.dataset import Dataset
from typestrict_pipeline.refund.holdout import Holdout, HoldoutSource
from typestrict_pipeline.refund.manifest import MAX_PREDICTION_ROWS
from typestrict_pipeline.refund.metrics import PROB_SUM_TOLERANCE, sums_to_one
from typestrict_pipeline.refund.stream import group_sha256
from typestrict_pipeline.refund.table import not_parquet
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow

__all__ = [
    "SUM_TOLERANCE",
    "Prediction",
    "SystemPredictions",
    "bounded_rows",
    "build_decision_data",
    "option_positions",
    "read_predictions",
    "text_sha256",
    "validate_probabilities",
    "write_predictions_jsonl",
]

SUM_TOLERANCE = float(PROB_SUM_TOLERANCE)
"""A row's probabilities must sum to 1 within this (the product's one tolerance, checked exactly
by :func:`~typestrict_pipeline.refund.metrics.sums_to_one`)."""


def bounded_rows(chunks: Iterable[bytes], *, source: str, fix: str,
                 bound: int = MAX_PREDICTION_ROWS) -> Iterator[bytes]:
    """The chunks of a submitted JSON Lines file, passed on while its rows (non-blank lines, as
    the reader counts them) are at most ``bound``: past it, refused naming ``source`` before the
    next chunk is asked for, so the work is bounded by the bound, not by the file. The one rule
    of every door (:data:`~typestrict_pipeline.refund.manifest.MAX_PREDICTION_ROWS`; the API's
    JSON body has its schema's bound, the same number).

    >>> b"".join(bounded_rows([b'{"a": 1}\\n\\n{"a"', b': 2}\\n'], source="f", fix="x", bound=2))
    b'{"a": 1}\\n\\n{"a": 2}\\n'
    >>> list(bounded_rows([b"1\\n2\\n3"], source="your file 'p.jsonl'", fix="send fewer", bound=2))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.PredictionsError: your file 'p.jsonl': expected at most 2 rows, got more than 2 (the file was read no further than row 3). Send fewer.
    """
    rows = 0
    open_line = False  # the last chunk ended inside a line that has more than blanks
    for chunk in chunks:
        pieces = chunk.split(b"\n")
        for i, piece in enumerate(pieces[:-1]):  # the lines this chunk ends
            if piece.strip() or (i == 0 and open_line):
                rows += 1
        open_line = bool(pieces[-1].strip()) or (len(pieces) == 1 and open_line)
        if rows + open_line > bound:
            raise PredictionsError(f"at most {bound:,} rows", f"more than {bound:,} (the file was read no "
                                   f"further than row {bound + 1:,})", fix, file=source)
        yield chunk


@dataclass(frozen=True)
class Prediction:
    """One system's probabilities for one example of one decision.

    Attributes:
        id: the example id.
        decision: the decision's name.
        probabilities: (answer or option text, probability) pairs, in the order given.
        row: 1-based row in the source file (None when it came from an endpoint).
    """

    id: str
    decision: str
    probabilities: tuple[tuple[str, float], ...]
    row: int | None = None

    def as_dict(self) -> dict[str, float]:
        """Answer → probability."""
        return dict(self.probabilities)


@dataclass(frozen=True)
class SystemPredictions:
    """All predictions of one system (Jev or the model).

    Attributes:
        system: ``"jev"`` or ``"model"`` (used in messages).
        source: where they came from (a file path or an endpoint URL), for messages.
        predictions: keyed by (decision, id).
    """

    system: str
    source: str
    predictions: Mapping[tuple[str, str], Prediction]

    @classmethod
    def from_iterable(
        cls, system: str, source: str, items: Iterable[Prediction]
    ) -> SystemPredictions:
        """Index predictions by (decision, id); a duplicate is an error."""
        out: dict[tuple[str, str], Prediction] = {}
        for p in items:
            key = (p.decision, p.id)
            if key in out:
                first = out[key].row
                raise PredictionsError(
                    "one prediction per (id, decision)",
                    f"id {p.id!r} of decision {p.decision!r} again"
                    + (f" (first at row {first})" if first else ""),
                    "remove the duplicate",
                    file=source,
                    row=p.row,
                    column="id",
                )
            out[key] = p
        return cls(system=system, source=source, predictions=out)


def text_sha256(text: str) -> str:
    """Lowercase hex SHA-256 of the UTF-8 text, exactly as written (no normalisation).

    >>> text_sha256("abc")
    'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def option_positions(k: int) -> tuple[str, ...]:
    """The answer names of a multiple-choice decision with up to ``k`` options: "1".."k".

    >>> option_positions(3)
    ('1', '2', '3')
    """
    return tuple(str(i) for i in range(1, k + 1))


def validate_probabilities(
    pairs: Sequence[tuple[str, Any]],
    *,
    file: str,
    row: int | None,
    column: str = "probabilities",
    name_answer: bool = True,
    decision: str | None = None,
) -> tuple[tuple[str, float], ...]:
    """Check one row of probabilities: numbers in [0, 1], no NaN, summing to 1 (±0.01).

    The one rule for a probability, for files and the API's bodies alike: a JSON number, never
    ``true``/``false`` or a string (``"0.6"``), shown as written.

    Args:
        pairs: (answer, value) pairs.
        file: the file (or endpoint) named in messages.
        row: the 1-based row, or None.
        column: the column named in messages.
        name_answer: name a bad value's column as ``column.answer`` (JSONL objects).
        decision: the row's decision, named in a bad value's message.

    Returns:
        The pairs with float values.

    Raises:
        PredictionsError: the first problem found.

    >>> validate_probabilities([("a", 0.5), ("b", 0.6)], file="p.jsonl", row=2)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.PredictionsError: p.jsonl, row 2, column 'probabilities': expected probabilities summing to 1 (±0.01), got a sum of 1.1. Fix the predictions so each row sums to 1.
    >>> validate_probabilities([("a", True), ("b", 0.0)], file="p.jsonl", row=3, decision="d")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.PredictionsError: p.jsonl, row 3, column 'probabilities.a': expected a probability (a number from 0 to 1) for decision 'd', got true. Write a number (not true/false or a string).
    >>> validate_probabilities([("a", -0.0), ("b", 1)], file="p.jsonl", row=4)
    (('a', 0.0), ('b', 1.0))
    """
    if not pairs:
        raise PredictionsError(
            "probabilities for the answers",
            "none",
            "give one probability per answer",
            file=file,
            row=row,
            column=column,
        )
    # The row of every real file: floats from 0 to 1 (NaN fails the comparison) summing to 1,
    # kept as given, without a second pair per answer; any other row takes the checks below,
    # which name its first problem.
    # A zero written -0.0 takes the checks below, which store it as 0.0 (it was kept, and the
    # audit's p_model showed -0.0).
    if all(type(v) is float and (0.0 < v <= 1.0 or (v == 0.0 and math.copysign(1.0, v) > 0))
           for _, v in pairs) and sums_to_one([v for _, v in pairs]):
        return tuple(pairs)
    out: list[tuple[str, float]] = []
    of = "" if decision is None else f" for decision {decision!r}"
    for answer, value in pairs:
        where = f"{column}.{answer}" if name_answer else column
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PredictionsError(
                f"a probability (a number from 0 to 1){of}",
                _as_written(value),
                "write a number (not true/false or a string)",
                file=file,
                row=row,
                column=where,
            )
        f = float(value) + 0.0  # -0.0 is 0.0
        if math.isnan(f):
            raise PredictionsError(
                "a probability from 0 to 1",
                "NaN",
                "the system produced no number here; fix or re-run it",
                file=file,
                row=row,
                column=where,
            )
        if f < 0.0:
            raise PredictionsError(
                "a probability from 0 to 1",
                f"a negative value {f!r}",
                "fix the predictions",
                file=file,
                row=row,
                column=where,
            )
        if f > 1.0:
            raise PredictionsError(
                "a probability from 0 to 1",
                f"{f!r}, above 1",
                "fix the predictions",
                file=file,
                row=row,
                column=where,
            )
        out.append((answer, f))
    total = math.fsum(v for _, v in out)
    if not sums_to_one([v for _, v in out]):
        raise PredictionsError(
            f"probabilities summing to 1 (±{SUM_TOLERANCE})",
            f"a sum of {total!r}",
            "fix the predictions so each row sums to 1",
            file=file,
            row=row,
            column=column,
        )
    return tuple(out)


def _as_written(value: Any) -> str:
    """A value as its JSON text when it has one (``true``, ``"0.6"``), else its repr; cut at 60."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)[:60]
    except (TypeError, ValueError):
        return repr(value)[:60]


def _text_cell(value: Any, *, file: str, row: int, column: str) -> str:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise PredictionsError(
        "a non-empty text" + (" or integer" if column == "id" else ""),
        "nothing" if value is None else repr(value),
        f"fill in {column!r}",
        file=file,
        row=row,
        column=column,
    )


def _answer_names() -> Callable[[str], str]:
    """One ``str`` per answer name of a file (its first spelling), for every row that names it:
    a file of 2,000 rows over 10,000 answers held 20 million copies of the names (1.2 GB)."""
    names: dict[str, str] = {}
    return lambda name: names.setdefault(name, name)


def _read_jsonl(path: Path) -> list[Prediction]:
    file = str(path)
    out: list[Prediction] = []
    one_name = _answer_names()
    for row, obj in iter_jsonl_objects(path, PredictionsError):
        extra = sorted(set(obj) - {"id", "decision", "probabilities"})
        if extra:
            raise PredictionsError(
                "the keys 'id', 'decision', 'probabilities'",
                f"the unknown key {extra[0]!r}",
                "remove it (see docs/manifest.md)",
                file=file,
                row=row,
                column=extra[0],
            )
        ident = _text_cell(obj.get("id"), file=file, row=row, column="id")
        decision = _text_cell(obj.get("decision"), file=file, row=row, column="decision")
        probs = obj.get("probabilities")
        if not isinstance(probs, dict):
            raise PredictionsError(
                'an object {"answer": probability, ...}',
                "nothing" if probs is None else repr(probs)[:60],
                "write one probability per answer",
                file=file,
                row=row,
                column="probabilities",
            )
        pairs = validate_probabilities([(one_name(a), v) for a, v in probs.items()], file=file, row=row,
                                       decision=decision)
        out.append(Prediction(id=ident, decision=decision, probabilities=pairs, row=row))
    return out


def _read_parquet(path: Path) -> list[Prediction]:
    import pyarrow.parquet as pq

    file = str(path)
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise PredictionsError(
            "a Parquet file", not_parquet(exc), "check the file (or save it as Parquet)", file=file
        ) from exc
    cols = table.to_pydict()
    for name in ("id", "decision", "answers", "probabilities"):
        if name not in cols:
            raise PredictionsError(
                "the columns 'id', 'decision', 'answers', 'probabilities'",
                f"no column {name!r} (columns: {sorted(cols)})",
                "write the file in the documented layout (docs/manifest.md)",
                file=file,
                column=name,
            )
    out: list[Prediction] = []
    one_name = _answer_names()
    for i in range(table.num_rows):
        row = i + 1
        ident = _text_cell(cols["id"][i], file=file, row=row, column="id")
        decision = _text_cell(cols["decision"][i], file=file, row=row, column="decision")
        answers = cols["answers"][i]
        values = cols["probabilities"][i]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise PredictionsError(
                "a list of answers",
                repr(answers)[:60],
                "write the answers as a list of strings",
                file=file,
                row=row,
                column="answers",
            )
        if not isinstance(values, list) or len(values) != len(answers):
            raise PredictionsError(
                f"a list of {len(answers)} probabilities (one per answer)",
                repr(values)[:60],
                "align 'probabilities' with 'answers'",
                file=file,
                row=row,
                column="probabilities",
            )
        if len(set(answers)) != len(answers):
            raise PredictionsError(
                "each answer once",
                repr(answers),
                "remove the duplicate answers",
                file=file,
                row=row,
                column="answers",
            )
        values = [math.nan if v is None else v for v in values]
        pairs = validate_probabilities(
            [(one_name(a), v) for a, v in zip(answers, values, strict=True)], file=file, row=row, name_answer=False,
            decision=decision,
        )
        out.append(Prediction(id=ident, decision=decision, probabilities=pairs, row=row))
    return out


def predictions_file(path: str | Path, system: str) -> Path:
    """``path`` when it can be a predictions file: it exists and is named ``.jsonl``/``.ndjson``
    or ``.parquet``/``.pq``. A check of names only, so a training's check says it before the
    dataset is read (a missing file was said after a 1,000,000-row dataset was read and split).

    >>> predictions_file("/nowhere/jev.jsonl", "jev")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.PredictionsError: /nowhere/jev.jsonl: expected an existing predictions file, got no such file. Check where jev's predictions are in the manifest.

    Raises:
        PredictionsError: no such file, or not a JSONL or Parquet file by its name.
    """
    file = Path(path)
    if not file.exists():
        raise PredictionsError(
            "an existing predictions file",
            "no such file",
            f"check where {system}'s predictions are in the manifest",
            file=str(file),
        )
    if not file.name.lower().endswith((".jsonl", ".ndjson", ".parquet", ".pq")):
        raise PredictionsError(
            "a .jsonl or .parquet predictions file",
            repr(file.name),
            "convert the file to JSONL or Parquet",
            file=str(file),
        )
    return file


def read_predictions(path: str | Path, system: str) -> SystemPredictions:
    """Read and validate a predictions file (JSONL or Parquet, by its suffix).

    Args:
        path: the file (``.jsonl``/``.ndjson`` or ``.parquet``/``.pq``).
        system: ``"jev"`` or ``"model"``, used in messages.

    Returns:
        The system's predictions, keyed by (decision, id).

    Raises:
        PredictionsError: a missing file or any bad row (names the file, row and column).
    """
    file = predictions_file(path, system)
    items = _read_jsonl(file) if file.name.lower().endswith((".jsonl", ".ndjson")) else _read_parquet(file)
    return SystemPredictions.from_iterable(system, str(file), items)


def write_predictions_jsonl(path: str | Path, predictions: Iterable[Prediction]) -> None:
    """Write predictions as JSONL, atomically (temp file + ``os.replace``), floats by ``repr``.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "p.jsonl"
    >>> write_predictions_jsonl(p, [Prediction("a", "d", (("yes", 0.25), ("no", 0.75)))])
    >>> p.read_text()
    '{"id": "a", "decision": "d", "probabilities": {"yes": 0.25, "no": 0.75}}\\n'
    """
    lines = [
        json.dumps(
            {"id": p.id, "decision": p.decision, "probabilities": dict(p.probabilities)},
            ensure_ascii=False,
            allow_nan=False,
        )
        + "\n"
        for p in predictions
    ]
    write_atomic(path, "".join(lines).encode("utf-8"))


def _answers_error(
    preds: SystemPredictions, p: Prediction, expected: Sequence[str], what: str
) -> PredictionsError:
    got = [a for a, _ in p.probabilities]
    missing = [a for a in expected if a not in got]
    extra = [a for a in got if a not in expected]
    detail = []
    if missing:
        detail.append(f"missing {listed(missing)}")
    if extra:
        detail.append(f"unexpected {listed(extra)}")
    return PredictionsError(
        f"{what} {listed(expected)}",
        f"{listed(sorted(got))} ({'; '.join(detail)})",
        f"give {preds.system}'s probabilities over exactly these answers for example {p.id!r}",
        file=preds.source,
        row=p.row,
        column="probabilities",
    )


def build_decision_data(
    dataset: Dataset,
    holdout: Holdout,
    *,
    model: SystemPredictions,
    jev: SystemPredictions,
) -> DecisionData:
    """Align both systems' probabilities on one decision's test examples.

    Single decisions: ``answers`` are the manifest's answers, vectors in that order. Multiple
    choice: ``answers`` are option positions "1".."K" (K = the most options any example offers),
    each vector gives the example's options in its own order, padded with 0.0 to K, with
    ``n_options`` = that example's option count; ``y`` is the right option's position (0-based).

    Args:
        dataset: the validated dataset.
        holdout: the decision's split (its test rows are judged).
        model: the trained model's predictions.
        jev: Jev's predictions.

    Returns:
        The :class:`DecisionData` of the test rows (sorted by id).

    Raises:
        PredictionsError: a prediction for an id or decision the training does not have,
            answers that differ from the decision's (or between Jev and the model), or a test
            example without a prediction.
    """
    name = holdout.decision
    labels = dataset.decision(name)
    asked = {ident for preds in (model, jev) for (_, ident) in preds.predictions}
    known_ids = set(dataset.positions(asked))
    known_decisions = {d.name for d in dataset.decisions}
    for preds in (model, jev):
        for (decision, ident), p in preds.predictions.items():
            if decision not in known_decisions:
                raise PredictionsError(
                    f"one of the training's decisions {sorted(known_decisions)}",
                    repr(decision),
                    "fix the decision name",
                    file=preds.source,
                    row=p.row,
                    column="decision",
                )
            if ident not in known_ids:
                raise PredictionsError(
                    "an id of the dataset",
                    repr(ident),
                    "predict the dataset's examples (is this the right file?)",
                    file=preds.source,
                    row=p.row,
                    column="id",
                )

    test_ids = holdout.test_ids
    position = dataset.positions(test_ids)
    for preds in (model, jev):
        missing = [i for i in test_ids if (name, i) not in preds.predictions]
        if missing:
            first = missing[0]
            shown = ", ".join(repr(m) for m in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise PredictionsError(
                f"a prediction for every test example of decision {name!r} ({len(test_ids)})",
                f"none for {len(missing)} of them: {shown} (first: dataset row {position[first] + 1})",
                f"predict the missing examples with {preds.system} and record them",
                file=preds.source,
                column="id",
            )

    mc = labels.spec.kind is DecisionKind.MULTIPLE_CHOICE
    if mc:
        k = labels.max_options
        answers = option_positions(k)
    else:
        answers = labels.spec.answers
        k = len(answers)

    # Jev and the model must answer over the same answers (checked on the first test example).
    if test_ids:
        first_id = test_ids[0]
        pm = model.predictions[(name, first_id)]
        pj = jev.predictions[(name, first_id)]
        am = sorted(a for a, _ in pm.probabilities)
        aj = sorted(a for a, _ in pj.probabilities)
        if am != aj:
            raise PredictionsError(
                f"Jev's answers to be the model's answers {am}",
                f"{aj} for example {first_id!r}",
                "ask both systems the same question with the same answers",
                file=jev.source,
                row=pj.row,
                column="probabilities",
            )

    labeled = holdout.summary.source is HoldoutSource.LABELED
    # with groups, the bootstrap resamples the groups the split drew (identical texts joined)
    unit_of = {r.id: r.unit for r in holdout.test_rows} if holdout.summary.grouped else None
    examples = dict(zip(test_ids, dataset.examples_at([position[i] for i in test_ids]),
                        strict=True))
    rows: list[JudgedRow] = []
    for ident in test_ids:
        i = position[ident]
        example = examples[ident]
        right = labels.label_at(i) if labeled else labels.review_at(i)
        assert right is not None
        if mc:
            expected: Sequence[str] = labels.options_at(i)
            what = f"the options of example {ident!r}"
        else:
            expected = answers
            what = f"the answers of decision {name!r}"
        vectors: list[tuple[float, ...]] = []
        for preds in (model, jev):
            p = preds.predictions[(name, ident)]
            given = p.as_dict()
            if len(given) != len(p.probabilities) or set(given) != set(expected):
                raise _answers_error(preds, p, expected, what)
            vec = [given[a] for a in expected]
            vec.extend([0.0] * (k - len(vec)))
            vectors.append(tuple(vec))
        rows.append(
            JudgedRow(
                text_sha256=text_sha256(example.text),
                y=list(expected).index(right),
                p_model=vectors[0],
                p_jev=vectors[1],
                n_options=len(expected) if mc else None,
                group_sha256=None if unit_of is None else group_sha256(unit_of[ident]),
            )
        )
    return DecisionData(
        name=name,
        kind=labels.spec.kind,
        answers=tuple(answers),
        rows=tuple(rows),
    )
