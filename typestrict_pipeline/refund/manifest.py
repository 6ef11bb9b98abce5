"""The training manifest: one small JSON file that says what a training is and where its data is.

Every key is documented in ``docs/manifest.md``. Unknown keys anywhere are refused with an error
that names the key and the allowed ones, so a typo never silently changes what is measured.

>>> import json, tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "m.json").write_text(json.dumps({
...     "manifest_version": 1, "training_id": "tr_1", "workspace_id": "demo",
...     "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text"}},
...     "decisions": [{"name": "sentiment", "question": "Is it positive?",
...                    "answer_column": "label", "answers": ["no", "yes"]}],
...     "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"},
...                     "model": {"kind": "file", "path": "model.jsonl"}},
...     "training": {"status": "succeeded"}}))
>>> m = load_manifest(folder / "m.json")
>>> m.decisions[0].kind, m.decisions[0].answers, m.options.keep_if_loses
(<DecisionKind.SINGLE: 'single'>, ('no', 'yes'), False)
"""

from __future__ import annotations

import difflib
import enum
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typestrict_pipeline import values
from typestrict_pipeline.errors import InputError, ManifestError
from typestrict_pipeline.files import read_json_file, special_kind
from typestrict_pipeline.refund.types import DecisionKind
from typestrict_pipeline.values import check_text

__all__ = [
    "MANIFEST_VERSION",
    "Columns",
    "DatasetFormat",
    "DatasetSpec",
    "DecisionSpec",
    "EndpointSource",
    "KeyWords",
    "ManifestKeyError",
    "PredictionSource",
    "PredictionsFileSource",
    "TrainingManifest",
    "TrainingOptions",
    "TrainingStatus",
    "default_data_root",
    "load_manifest",
    "parse_manifest",
    "request_field",
]

MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 1024 * 1024
"""A manifest is a few kB; a larger file is refused before it is decoded."""


class DatasetFormat(enum.StrEnum):
    """The file formats a dataset (or a predictions file) may have.

    Attributes:
        CSV: comma-separated values with a header row (``.csv``, also ``.csv.gz``/``.csv.bz2``).
        PARQUET: Apache Parquet (``.parquet``, ``.pq``).
        JSONL: one JSON object per line (``.jsonl``, ``.ndjson``).
    """

    CSV = "csv"
    PARQUET = "parquet"
    JSONL = "jsonl"


class TrainingStatus(enum.StrEnum):
    """How the training ended.

    Attributes:
        SUCCEEDED: a model was produced; it is compared with Jev.
        FAILED: no usable model; the verdict is ``failed`` and the credit comes back.
    """

    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Columns:
    """Which dataset columns hold what.

    Attributes:
        id: unique example id (required).
        text: the example's text, as sent to the models (required).
        group: optional group column (a repository, a customer, a document): whole groups go to
            the test side together.
        review_label: optional column holding the answer a person gave in the review step; used
            as the test when the data has no answers. A decision may name its own
            ``review_column`` instead.
    """

    id: str
    text: str
    group: str | None = None
    review_label: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """Where the dataset is and how to read it.

    Attributes:
        path: the dataset file, resolved against the manifest's folder.
        path_as_written: the path exactly as the manifest wrote it.
        format: the file format (from ``format`` or inferred from the file name).
        columns: which columns hold the id, text, group and review label.
    """

    path: Path
    path_as_written: str
    format: DatasetFormat
    columns: Columns


@dataclass(frozen=True)
class DecisionSpec:
    """One decision the model makes, and how it is read from the dataset.

    Attributes:
        name: unique within the training (letters, digits, ``_``, ``-``, ``.``).
        question: the question both systems are asked.
        kind: ``single`` (one fixed list of answers) or ``multiple_choice`` (each example offers
            its own options).
        answer_column: the column holding the right answer, or None when the data has no
            answers (then the review labels are the test).
        answers: the answers of a single decision, in order (empty for multiple choice).
        options_column: the column holding each example's options (multiple choice only).
        review_column: the column holding a person's review label for this decision, or None
            to use the dataset's ``columns.review_label``.
    """

    name: str
    question: str
    kind: DecisionKind
    answer_column: str | None
    answers: tuple[str, ...]
    options_column: str | None
    review_column: str | None


@dataclass(frozen=True)
class PredictionsFileSource:
    """Probabilities recorded in a file (format in ``docs/manifest.md``).

    Attributes:
        path: the file, resolved against the manifest's folder.
        path_as_written: the path exactly as the manifest wrote it.
    """

    path: Path
    path_as_written: str


@dataclass(frozen=True)
class EndpointSource:
    """Probabilities asked from an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    The API key itself is never in the manifest: only the name of the environment variable that
    holds it, read when a call is made.

    Attributes:
        base_url: e.g. ``https://api.example.com/v1``.
        model: the model name sent in each request.
        api_key_env: the environment variable holding the API key, or None for no key.
        timeout_s: seconds allowed per attempt.
        max_attempts: attempts per example (retries on 429, 5xx and network errors).
        top_logprobs: how many alternatives to ask for the answer token (1..20).
    """

    base_url: str
    model: str
    api_key_env: str | None
    timeout_s: float = 30.0
    max_attempts: int = 4
    top_logprobs: int = 20


PredictionSource = PredictionsFileSource | EndpointSource


MAX_DECISIONS = 32
"""The most decisions a training may have: the most an audit holds (``verify_audit.MAX_DECISIONS``,
which refuses an audit of more as one the product never writes)."""

MAX_PREDICTION_ROWS = 200_000
"""The most rows a training's submitted predictions may have, on every door: the API's JSON body
(``predictions``, its schema's bound), the console's **Upload the predictions** and
``typestrict training submit`` (both read the file no further than the row past it). A training
holds out at most 2,000 test examples per decision, so this is far above what a submission needs;
a file past it holds predictions of every row of the dataset, not of the test examples."""

MAX_ANSWERS = 256
"""The most answers a decision may have (a multiple-choice example: options): the most an audit
holds (``verify_audit.MAX_ANSWERS``). A verdict over more was judged and settled, and its audit
was refused by the verifier ("expected at most 256 entries (the product never writes more)")."""

MAX_STATED_IDS = 10_000_000
"""The most ids a training may state it was trained on (a list in the manifest or a file)."""


@dataclass(frozen=True)
class TrainedOnStatement:
    """The ids a training states its model was trained on (``training.trained_on``).

    Attributes:
        key: the manifest key it came from (``training.trained_on.ids`` …), for messages.
        hashed: the values are the ids' SHA-256 under the audit's id domain, not the ids.
        values: the values, when listed in the manifest.
        path: the file that holds them (one per line, UTF-8), when given as a file.
    """

    key: str
    hashed: bool
    values: tuple[str, ...] | None = None
    path: Path | None = None


@dataclass(frozen=True)
class TrainingOptions:
    """Options chosen when the training was started.

    Attributes:
        keep_if_loses: keep (deliver) the model even if it does not beat Jev; gives up the
            refund for that training. Off unless turned on.
    """

    keep_if_loses: bool = False


@dataclass(frozen=True)
class TrainingManifest:
    """A whole training manifest.

    Attributes:
        source: the manifest file it was read from (or ``"<memory>"``).
        manifest_version: the manifest format version (1).
        training_id: the training's id.
        workspace_id: the workspace it belongs to (a plain string, e.g. ``"demo"``).
        dataset: the dataset and its columns.
        decisions: one or more decisions, in manifest order.
        jev: where Jev's probabilities come from.
        model: where the trained model's probabilities come from (None only for a failed
            training).
        status: succeeded or failed.
        failure_reason: why it failed (None when it succeeded).
        options: the training's options.
        trained_on_sha256: the SHA-256 of every training row's id, as stated by the training
            (the first form of attestation: "all the split's training rows"; canonical form in
            ``refund.trained_on``), or None.
        trained_on: the ids the training states it was trained on (any subset of the split's
            training rows), or None.
    """

    source: str
    manifest_version: int
    training_id: str
    workspace_id: str
    dataset: DatasetSpec
    decisions: tuple[DecisionSpec, ...]
    jev: PredictionSource
    model: PredictionSource | None
    status: TrainingStatus
    failure_reason: str | None
    options: TrainingOptions
    trained_on_sha256: str | None = None
    trained_on: TrainedOnStatement | None = None

    def decision(self, name: str) -> DecisionSpec:
        """The decision called ``name``.

        Raises:
            ManifestError: no decision has that name.
        """
        for spec in self.decisions:
            if spec.name == name:
                return spec
        raise ManifestError(
            f"one of the decisions {[d.name for d in self.decisions]}",
            repr(name),
            "use a decision name from the manifest",
            file=self.source,
        )


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_TOP_KEYS_REQUIRED = (
    "manifest_version",
    "training_id",
    "workspace_id",
    "dataset",
    "decisions",
    "predictions",
    "training",
)
_TOP_KEYS = (*_TOP_KEYS_REQUIRED, "options")
_DATASET_KEYS = ("path", "format", "columns")
_COLUMN_KEYS = ("id", "text", "group", "review_label")
_DECISION_KEYS = (
    "name",
    "question",
    "answer_column",
    "answers",
    "options_column",
    "review_column",
)
_PREDICTIONS_KEYS = ("jev", "model")
_FILE_SOURCE_KEYS = ("kind", "path")
_ENDPOINT_KEYS = (
    "kind",
    "base_url",
    "model",
    "api_key_env",
    "timeout_s",
    "max_attempts",
    "top_logprobs",
)
_TRAINING_KEYS = ("status", "reason", "trained_on_sha256", "trained_on")
_TRAINED_ON_KEYS = ("ids", "ids_file", "id_sha256", "id_sha256_file")
_OPTION_KEYS = ("keep_if_loses",)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


class ManifestKeyError(ManifestError):
    """A manifest error at one key; the message names the file and the key.

    >>> print(ManifestKeyError("true or false", "'yes'", "write true or false",
    ...                        file="m.json", key="options.keep_if_loses"))
    m.json, key 'options.keep_if_loses': expected true or false, got 'yes'. Write true or false.
    """

    def __init__(self, expected: str, got: str, fix: str, *, file: str, key: str,
                 shown: str | None = None) -> None:
        super().__init__(expected, got, fix, file=f"{file}, key {key!r}" if shown is None else shown)
        self.file = file
        self.key = key


KeyWords = Callable[[str], str]
"""How a door names a manifest key in its messages (``decisions[0].answers`` → the API's
``field 'decisions.0.answers'``): the key is the manifest's, the words the door's."""


def request_field(key: str) -> str:
    """A manifest key as the API's request body names the same JSON field (a training's
    request is the manifest's fields: ``POST /v1/trainings``).

    >>> request_field("decisions[0].answers")
    "field 'decisions.0.answers'"
    """
    dotted = re.sub(r"\[([0-9]+)\]", r".\1", key)
    return f"field {dotted!r}"


class _Ctx:
    """Where in the manifest we are, for error messages."""

    def __init__(self, file: str, keys: KeyWords | None = None) -> None:
        self.file = file
        self.keys = keys

    def fail(self, where: str, expected: str, got: str, fix: str) -> ManifestError:
        return ManifestKeyError(expected, got, fix, file=self.file, key=where,
                                shown=None if self.keys is None else self.keys(where))


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_keys(
    ctx: _Ctx,
    where: str,
    obj: Any,
    allowed: tuple[str, ...],
    required: tuple[str, ...],
) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise ctx.fail(
            where, "a JSON object", _describe(obj), f"write {where} as an object {{...}}"
        )
    for key in obj:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            action = f"rename it to {close[0]!r}" if close else "remove it"
            raise ctx.fail(
                f"{where}.{key}" if where != "(top level)" else str(key),
                f"one of the keys {list(allowed)}",
                f"the unknown key {key!r}",
                f"{action} (unknown keys are refused so a typo never changes the result)",
            )
    for key in required:
        if key not in obj:
            raise ctx.fail(
                where,
                f"the key {key!r} (required keys: {list(required)})",
                f"an object without it (keys: {sorted(obj)})",
                f"add {key!r}; see docs/manifest.md",
            )
    return obj


def _string(ctx: _Ctx, where: str, value: Any, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        expected = "a non-empty string" + (" or null" if optional else "")
        raise ctx.fail(where, expected, _describe(value), f"set {where} to a non-empty string")
    return value


def _required_string(ctx: _Ctx, where: str, value: Any) -> str:
    out = _string(ctx, where, value)
    assert out is not None
    return out


def _stored_text(ctx: _Ctx, where: str, text: str, what: str, *, lines: bool = False) -> str:
    """``text`` unchanged when it holds no control or invisible format character (the rule of
    every stored text, :func:`typestrict_pipeline.values.check_text`; line breaks and tabs only
    where ``lines``); else the error names the file, the key and the code point."""
    try:
        return check_text(text, what, max_chars=max(len(text), 1), lines=lines, empty=True)
    except InputError as exc:
        raise ctx.fail(where, exc.expected, exc.got, exc.fix) from None


def _name(ctx: _Ctx, where: str, value: Any) -> str:
    text = _required_string(ctx, where, value)
    if not set(text) <= _NAME_CHARS:
        raise ctx.fail(
            where,
            "a name of letters, digits, '_', '-' or '.'",
            repr(text),
            "rename it without spaces or other characters",
        )
    return text


def _by_rule(ctx: _Ctx, where: str, value: Any, rule: Callable[[str], str]) -> str:
    """A required string checked by the one rule of its kind in :mod:`typestrict_pipeline.values`
    (:func:`~typestrict_pipeline.values.training_id`, :func:`~typestrict_pipeline.values.workspace_id`),
    its refusal naming the manifest's key."""
    text = _required_string(ctx, where, value)
    try:
        return rule(text)
    except InputError as exc:
        raise ctx.fail(where, exc.expected, exc.got, exc.fix) from None


def default_data_root() -> Path:
    """The shared data folder manifests may also point into (besides their own folder).

    ``TYPESTRICT_DATA_ROOT`` if set, else ``${TYPESTRICT_HOME}/data`` (docs/manifest.md, "Where
    files may be").
    """
    import os

    from typestrict_pipeline.store import typestrict_home

    configured = os.environ.get("TYPESTRICT_DATA_ROOT")
    return Path(configured) if configured else typestrict_home() / "data"


class _Paths:
    """Resolves a manifest's file paths and keeps them inside the allowed folders."""

    def __init__(self, base: Path | None, roots: tuple[Path, ...]) -> None:
        self.base = base
        self.roots = tuple(r.resolve() for r in roots)

    def resolve(self, ctx: _Ctx, where: str, written: str) -> Path:
        path = Path(written)
        if "\x00" in written:
            raise ctx.fail(where, "a path without NUL characters", repr(written)[:80], "fix the path")
        if ".." in path.parts:
            raise ctx.fail(
                where,
                "a path without '..' (files are read only inside the training's folder or the "
                "data folder)",
                "a path that climbs out with '..'",
                "move the file into the training's folder, or into the data folder "
                "(TYPESTRICT_DATA_ROOT) and write its path there",
            )
        if self.base is None:
            return path
        try:
            target = (path if path.is_absolute() else self.base / path).resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise ctx.fail(where, "a path to a regular file", "a symbolic link loop",
                           "point at the file itself") from None
        kind = special_kind(target)
        if kind is not None:
            raise ctx.fail(where, "a path to a regular file", kind, "point at the file itself")
        if not any(target.is_relative_to(root) for root in self.roots):
            allowed = " or ".join(str(r) for r in self.roots)
            raise ctx.fail(
                where,
                f"a file inside {allowed}",
                "a path that leads outside them"
                + (" (through a symbolic link)" if not path.is_absolute() else ""),
                "move the file into the training's folder, or set TYPESTRICT_DATA_ROOT to the "
                "folder that holds your data (docs/manifest.md)",
            )
        return target


def _infer_format(path_written: str) -> DatasetFormat | None:
    name = path_written.lower()
    for suffix in (".gz", ".bz2", ".xz", ".zst", ".zip"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith(".csv"):
        return DatasetFormat.CSV
    if name.endswith((".parquet", ".pq")):
        return DatasetFormat.PARQUET
    if name.endswith((".jsonl", ".ndjson")):
        return DatasetFormat.JSONL
    return None


def _parse_dataset(ctx: _Ctx, raw: Any, paths: _Paths) -> DatasetSpec:
    obj = _check_keys(ctx, "dataset", raw, _DATASET_KEYS, ("path", "columns"))
    written = _required_string(ctx, "dataset.path", obj["path"])
    path = paths.resolve(ctx, "dataset.path", written)
    fmt_raw = obj.get("format")
    if fmt_raw is None:
        fmt = _infer_format(written)
        if fmt is None:
            raise ctx.fail(
                "dataset.path",
                "a file ending in .csv, .parquet, .pq, .jsonl or .ndjson",
                repr(written),
                "rename the file or set dataset.format to 'csv', 'parquet' or 'jsonl'",
            )
    else:
        allowed = [f.value for f in DatasetFormat]
        if fmt_raw not in allowed:
            raise ctx.fail(
                "dataset.format", f"one of {allowed}", _describe(fmt_raw), "set a supported format"
            )
        fmt = DatasetFormat(fmt_raw)
    cols = _check_keys(ctx, "dataset.columns", obj["columns"], _COLUMN_KEYS, ("id", "text"))
    columns = Columns(
        id=_required_string(ctx, "dataset.columns.id", cols["id"]),
        text=_required_string(ctx, "dataset.columns.text", cols["text"]),
        group=_string(ctx, "dataset.columns.group", cols.get("group"), optional=True),
        review_label=_string(
            ctx, "dataset.columns.review_label", cols.get("review_label"), optional=True
        ),
    )
    if columns.id == columns.text:
        raise ctx.fail(
            "dataset.columns",
            "different columns for the id and the text",
            f"{columns.id!r} for both",
            "name the id column and the text column separately",
        )
    return DatasetSpec(
        path=path,
        path_as_written=written,
        format=fmt,
        columns=columns,
    )


def _parse_decision(ctx: _Ctx, index: int, raw: Any, columns: Columns) -> DecisionSpec:
    where = f"decisions[{index}]"
    obj = _check_keys(ctx, where, raw, _DECISION_KEYS, ("name", "question"))
    name = _name(ctx, f"{where}.name", _stored_text(  # the code point named before the name's rule
        ctx, f"{where}.name", _required_string(ctx, f"{where}.name", obj["name"]), "a decision name"))
    question = _stored_text(ctx, f"{where}.question", _required_string(ctx, f"{where}.question", obj["question"]),
                            "a question", lines=True)
    answer_column = _string(ctx, f"{where}.answer_column", obj.get("answer_column"), optional=True)
    options_column = _string(
        ctx, f"{where}.options_column", obj.get("options_column"), optional=True
    )
    review_column = _string(ctx, f"{where}.review_column", obj.get("review_column"), optional=True)
    has_answers = "answers" in obj and obj["answers"] is not None
    if has_answers == (options_column is not None):
        raise ctx.fail(
            where,
            "exactly one of 'answers' (a single decision) or 'options_column' (multiple choice)",
            "both" if has_answers else "neither",
            "list the answers for a decision whose answers are the same for every example, "
            "or name the options column when each example offers its own options",
        )
    answers: tuple[str, ...] = ()
    if has_answers:
        raw_answers = obj["answers"]
        if not isinstance(raw_answers, list) or not all(
            isinstance(a, str) and a.strip() for a in raw_answers
        ):
            raise ctx.fail(
                f"{where}.answers",
                "a list of non-empty strings",
                _describe(raw_answers),
                "write the answers as a JSON list of strings",
            )
        answers = tuple(raw_answers)
        if len(answers) > MAX_ANSWERS:
            raise ctx.fail(
                f"{where}.answers",
                f"at most {MAX_ANSWERS} answers (the most an audit holds, docs/audit-format.md)",
                f"{len(answers):,}",
                "group the rarest answers into one (such as 'other'), or split the decision "
                "into decisions of fewer answers",
            )
        if len(answers) < 2:
            raise ctx.fail(
                f"{where}.answers",
                "at least 2 answers",
                f"{len(answers)} ({list(answers)})",
                "a decision needs two or more possible answers to be measured; add the missing ones",
            )
        duplicates = sorted({a for a in answers if answers.count(a) > 1})
        if duplicates:
            raise ctx.fail(
                f"{where}.answers",
                "each answer listed once",
                f"{duplicates} listed more than once",
                "remove the duplicates",
            )
    if answer_column is None and review_column is None and columns.review_label is None:
        raise ctx.fail(
            where,
            "an 'answer_column', or a review label column (decision 'review_column' or dataset "
            "columns.review_label) when the data has no answers",
            "none of them",
            "name the column with the right answers, or the column with a person's review labels",
        )
    used = {columns.id, columns.text} | ({columns.group} if columns.group else set())
    for key, col in (("answer_column", answer_column), ("options_column", options_column)):
        if col is not None and col in used:
            raise ctx.fail(
                f"{where}.{key}",
                "a column other than the id, text and group columns",
                repr(col),
                "name the column that holds this decision's answers or options",
            )
    return DecisionSpec(
        name=name,
        question=question,
        kind=DecisionKind.SINGLE if has_answers else DecisionKind.MULTIPLE_CHOICE,
        answer_column=answer_column,
        answers=answers,
        options_column=options_column,
        review_column=review_column,
    )


def _positive_number(ctx: _Ctx, where: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ctx.fail(
            where, "a positive number", _describe(value), f"set {where} to a number above 0"
        )
    return float(value)


def _int_in(ctx: _Ctx, where: str, value: Any, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ctx.fail(
            where, f"an integer from {low} to {high}", _describe(value), f"set {where} within range"
        )
    return value


def _parse_source(ctx: _Ctx, where: str, raw: Any, paths: _Paths) -> PredictionSource:
    if not isinstance(raw, dict):
        raise ctx.fail(
            where, "a JSON object", _describe(raw), "see docs/manifest.md for the two kinds"
        )
    kind = raw.get("kind")
    if kind == "file":
        obj = _check_keys(ctx, where, raw, _FILE_SOURCE_KEYS, ("kind", "path"))
        written = _required_string(ctx, f"{where}.path", obj["path"])
        return PredictionsFileSource(
            path=paths.resolve(ctx, f"{where}.path", written), path_as_written=written
        )
    if kind == "openai":
        obj = _check_keys(ctx, where, raw, _ENDPOINT_KEYS, ("kind", "base_url", "model"))
        base_url = _required_string(ctx, f"{where}.base_url", obj["base_url"])
        try:  # the rule of every base URL (--model-url's too): one that only starts right is refused
            values.base_url(base_url, "an endpoint", fix="write the endpoint's base URL, e.g. https://api.example.com/v1",
                            key_option="api_key_env")
        except InputError as exc:
            raise ctx.fail(f"{where}.base_url", exc.expected, exc.got, exc.fix) from None
        env = _string(ctx, f"{where}.api_key_env", obj.get("api_key_env"), optional=True)
        return EndpointSource(
            base_url=base_url.rstrip("/"),
            model=_required_string(ctx, f"{where}.model", obj["model"]),
            api_key_env=env,
            timeout_s=_positive_number(ctx, f"{where}.timeout_s", obj.get("timeout_s"), 30.0),
            max_attempts=_int_in(ctx, f"{where}.max_attempts", obj.get("max_attempts"), 4, 1, 20),
            top_logprobs=_int_in(ctx, f"{where}.top_logprobs", obj.get("top_logprobs"), 20, 1, 20),
        )
    raise ctx.fail(
        f"{where}.kind",
        "'file' (a predictions file) or 'openai' (an OpenAI-compatible endpoint)",
        _describe(kind),
        "set kind to 'file' or 'openai'",
    )


def parse_manifest(
    raw: Any,
    *,
    source: str = "<memory>",
    base_dir: Path | None = None,
    data_roots: tuple[Path, ...] = (),
    keys: KeyWords | None = None,
) -> TrainingManifest:
    """Validate an already-decoded manifest object.

    Args:
        raw: the decoded JSON value.
        source: the name used in error messages (the file path).
        keys: how the messages name a key (the door's words, e.g. :func:`request_field`);
            None: ``source, key '...'``.
        base_dir: the folder that relative paths are resolved against (None: left as written).
        data_roots: folders besides ``base_dir`` that files may be in (paths resolving outside
            ``base_dir`` and these, ``..`` included, symbolic links followed, are refused).

    Returns:
        The frozen manifest.

    Raises:
        ManifestError: an unknown key, a missing key or a bad value; the message names the key.

    >>> parse_manifest({"manifest_version": 1, "training_id": "t", "workspace_id": "w"})
    Traceback (most recent call last):
    ...
    typestrict_pipeline.refund.manifest.ManifestKeyError: <memory>, key '(top level)': expected the key 'dataset' ...
    """
    ctx = _Ctx(source, keys)
    paths = _Paths(base_dir, ((base_dir,) if base_dir is not None else ()) + tuple(data_roots))
    obj = _check_keys(ctx, "(top level)", raw, _TOP_KEYS, _TOP_KEYS_REQUIRED)
    version = obj["manifest_version"]
    if type(version) is not int or version != MANIFEST_VERSION:
        raise ctx.fail(
            "manifest_version",
            f"manifest_version {MANIFEST_VERSION}",
            _describe(version),
            "write a version-1 manifest as described in docs/manifest.md",
        )
    training_id = _by_rule(ctx, "training_id", obj["training_id"], values.training_id)
    workspace_id = _by_rule(ctx, "workspace_id", obj["workspace_id"], values.workspace_id)
    dataset = _parse_dataset(ctx, obj["dataset"], paths)

    raw_decisions = obj["decisions"]
    if not isinstance(raw_decisions, list) or not raw_decisions:
        raise ctx.fail(
            "decisions",
            "a non-empty list of decisions",
            _describe(raw_decisions),
            "list one or more decisions",
        )
    if len(raw_decisions) > MAX_DECISIONS:
        raise ctx.fail(
            "decisions",
            f"at most {MAX_DECISIONS} decisions (the most an audit holds, docs/audit-format.md)",
            f"{len(raw_decisions):,}",
            "split the decisions between trainings of their own",
        )
    decisions = tuple(
        _parse_decision(ctx, i, d, dataset.columns) for i, d in enumerate(raw_decisions)
    )
    names = [d.name for d in decisions]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ctx.fail(
            "decisions", "unique decision names", f"{repeated} used more than once", "rename them"
        )

    training = _check_keys(ctx, "training", obj["training"], _TRAINING_KEYS, ("status",))
    allowed_status = [s.value for s in TrainingStatus]
    if training["status"] not in allowed_status:
        raise ctx.fail(
            "training.status",
            f"one of {allowed_status}",
            _describe(training["status"]),
            "set the status",
        )
    status = TrainingStatus(training["status"])
    reason = _string(ctx, "training.reason", training.get("reason"), optional=True)
    if status is TrainingStatus.FAILED and reason is None:
        raise ctx.fail(
            "training.reason",
            "a reason for a failed training",
            "none",
            "say why the training failed (it is shown with the 'failed' verdict)",
        )
    if status is TrainingStatus.SUCCEEDED and reason is not None:
        raise ctx.fail(
            "training.reason",
            "no reason for a training that succeeded",
            repr(reason),
            "remove training.reason or set training.status to 'failed'",
        )

    trained_on = _string(ctx, "training.trained_on_sha256", training.get("trained_on_sha256"),
                         optional=True)
    if trained_on is not None and not (
        len(trained_on) == 64 and all(c in "0123456789abcdef" for c in trained_on.lower())
    ):
        raise ctx.fail(
            "training.trained_on_sha256", "64 hexadecimal characters (a SHA-256)",
            _describe(trained_on), "state the SHA-256 of the training ids (docs/manifest.md)",
        )

    statement = None
    if training.get("trained_on") is not None:
        if trained_on is not None:
            raise ctx.fail("training.trained_on", "one statement of what the model was trained on",
                           "both trained_on and trained_on_sha256",
                           "keep trained_on (the ids) and remove trained_on_sha256")
        statement = _parse_trained_on(ctx, training["trained_on"], paths)

    preds = _check_keys(ctx, "predictions", obj["predictions"], _PREDICTIONS_KEYS, ("jev",))
    jev = _parse_source(ctx, "predictions.jev", preds["jev"], paths)
    model: PredictionSource | None = None
    if preds.get("model") is not None:
        model = _parse_source(ctx, "predictions.model", preds["model"], paths)
    elif status is TrainingStatus.SUCCEEDED:
        raise ctx.fail(
            "predictions",
            "the key 'model' for a training that succeeded",
            "no model predictions",
            "say where the trained model's probabilities come from",
        )

    opts = _check_keys(ctx, "options", obj.get("options", {}), _OPTION_KEYS, ())
    keep = opts.get("keep_if_loses", False)
    if not isinstance(keep, bool):
        raise ctx.fail(
            "options.keep_if_loses", "true or false", _describe(keep), "write true or false"
        )

    return TrainingManifest(
        source=source,
        manifest_version=MANIFEST_VERSION,
        training_id=training_id,
        workspace_id=workspace_id,
        dataset=dataset,
        decisions=decisions,
        jev=jev,
        model=model,
        status=status,
        failure_reason=reason,
        options=TrainingOptions(keep_if_loses=keep),
        trained_on_sha256=None if trained_on is None else trained_on.lower(),
        trained_on=statement,
    )


def _parse_trained_on(ctx: _Ctx, raw: Any, paths: _Paths) -> TrainedOnStatement:
    """``training.trained_on``: exactly one of ``ids``, ``ids_file``, ``id_sha256``,
    ``id_sha256_file`` (docs/manifest.md)."""
    where = "training.trained_on"
    obj = _check_keys(ctx, where, raw, _TRAINED_ON_KEYS, ())
    if len(obj) != 1:
        raise ctx.fail(where, f"exactly one of the keys {list(_TRAINED_ON_KEYS)}",
                       f"{len(obj)} of them ({sorted(obj)})",
                       "state the ids (or their SHA-256) once, as a list or as a file")
    (name, value), = obj.items()
    key = f"{where}.{name}"
    hashed = name.startswith("id_sha256")
    if name.endswith("_file"):
        written = _required_string(ctx, key, value)
        return TrainedOnStatement(key, hashed, path=paths.resolve(ctx, key, written))
    if not isinstance(value, list) or not value or len(value) > MAX_STATED_IDS:
        raise ctx.fail(key, f"a list of 1 to {MAX_STATED_IDS:,} ids", _describe(value)[:80],
                       "list the ids the model was trained on")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item or len(item) > 1000 or not item.isprintable():
            raise ctx.fail(f"{key}[{i}]", "an id: a printable string of 1 to 1000 characters",
                           _describe(item), "write each id as the dataset's id column has it")
        if hashed and not (len(item) == 64 and all(c in "0123456789abcdef" for c in item)):
            raise ctx.fail(f"{key}[{i}]", "64 lowercase hexadecimal characters (an id's SHA-256)",
                           _describe(item), "hash each id as docs/manifest.md shows")
    return TrainedOnStatement(key, hashed, values=tuple(value))


def load_manifest(path: str | Path, *, data_root: Path | None = None) -> TrainingManifest:
    """Read and validate a training manifest; relative paths resolve against its folder.

    The file is read with the strict JSON reader (:func:`typestrict_pipeline.files.read_json_file`:
    duplicate keys, non-finite or oversized numbers and deep nesting are refused with the line
    and column). The files it names must be inside its folder or ``data_root``.

    Args:
        path: the manifest JSON file.
        data_root: the shared data folder (default :func:`default_data_root`).

    Returns:
        The frozen manifest.

    Raises:
        ManifestError: the file is missing, is not JSON, or is not a valid manifest.
    """
    file = Path(path)
    raw = read_json_file(
        file, error=ManifestError, what="a training manifest file", max_bytes=MAX_MANIFEST_BYTES
    )
    root = data_root if data_root is not None else default_data_root()
    return parse_manifest(
        raw, source=str(file), base_dir=file.resolve().parent, data_roots=(root,)
    )
