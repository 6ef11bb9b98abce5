"""Check every input of a training before anything about it is stored.

:func:`check_training` reads and validates, in this order, the dataset the manifest names, each
decision's split (the product's own, so exactly the test examples that will be judged), every
predictions *file* in full (not only its test rows: an id the dataset does not have, a decision
the manifest does not have, answers that are not the decision's or the example's options, and a
test example without a prediction are all refused), and that each *endpoint* answers HTTP at all
and has its API key variable set. The first problem is raised as the project's own error naming
the file, the row and the column. The ``dataset`` asset calls it first, so a bad training fails
before its first asset is materialized: nothing of it is stored.

>>> import json, tempfile, pathlib
>>> from typestrict_pipeline.refund.manifest import load_manifest
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> rows = "".join(f"r{i},text {i},{'yes' if i % 2 else 'no'}\\n" for i in range(40))
>>> _ = (folder / "d.csv").write_text("id,text,label\\n" + rows)
>>> _ = (folder / "p.jsonl").write_text(
...     '{"id": "zz", "decision": "s", "probabilities": {"yes": 0.5, "no": 0.5}}\\n')
>>> _ = (folder / "m.json").write_text(json.dumps({
...     "manifest_version": 1, "training_id": "t", "workspace_id": "w",
...     "dataset": {"path": "d.csv", "columns": {"id": "id", "text": "text"}},
...     "decisions": [{"name": "s", "question": "q?", "answer_column": "label",
...                    "answers": ["no", "yes"]}],
...     "predictions": {"jev": {"kind": "file", "path": "p.jsonl"},
...                     "model": {"kind": "file", "path": "p.jsonl"}},
...     "training": {"status": "succeeded"}}))
>>> check_training(load_manifest(folder / "m.json"))
Traceback (most recent call last):
...
typestrict_pipeline.errors.PredictionsError: .../p.jsonl, row 1, column 'id': expected an id of the dataset, got 'zz'; in all: 1 prediction for ids the dataset does not have (first: 'zz'); 8 of the 8 test examples of decision 's' without a prediction (first: 'r1', ...). Predict the dataset's examples (is this the right file?).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from typestrict_pipeline.errors import ManifestError, PredictionsError, listed
from typestrict_pipeline.progress import ProgressFn
from typestrict_pipeline.refund.dataset import Dataset, load_dataset
from typestrict_pipeline.refund.grouping import GroupingScan, scan_dataset
from typestrict_pipeline.refund.holdout import Holdout, check_something_to_train_on, split_decisions
from typestrict_pipeline.refund.manifest import (
    EndpointSource,
    PredictionsFileSource,
    PredictionSource,
    TrainingManifest,
    TrainingStatus,
)
from typestrict_pipeline.refund.predictions import (
    SystemPredictions,
    predictions_file,
    read_predictions,
)
from typestrict_pipeline.refund.runreads import reads_within
from typestrict_pipeline.refund.types import DecisionKind

__all__ = [
    "REACH_TIMEOUT_S",
    "Preflight",
    "check_endpoint_reachable",
    "check_file_predictions",
    "check_training",
    "fit_predictions",
    "screen_training",
]

REACH_TIMEOUT_S = 10.0
"""Seconds allowed for an endpoint's reachability check (any HTTP answer counts as reachable)."""


@dataclass(frozen=True)
class Preflight:
    """What :func:`check_training` read and found valid.

    Attributes:
        manifest: the training manifest.
        dataset: the validated dataset (None for a failed training: it is not read).
        holdouts: each decision's split (empty for a failed training).
        checked: one line per input checked, for the run's log and metadata.
        grouping: the look for undeclared groups (:func:`~typestrict_pipeline.refund.grouping.scan_dataset`;
            None for a failed training). Warnings only: they change no number.
    """

    manifest: TrainingManifest
    dataset: Dataset | None
    holdouts: tuple[Holdout, ...]
    checked: tuple[str, ...]
    grouping: GroupingScan | None = None


def check_endpoint_reachable(
    source: EndpointSource, *, where: str, manifest: str, timeout_s: float = REACH_TIMEOUT_S
) -> None:
    """Refuse an endpoint whose key variable is unset or that does not answer HTTP at all.

    ``GET <base_url>/models`` is sent once; any HTTP status (even 401 or 404) means the server
    is there. A refused connection, an unknown host or no answer within ``timeout_s`` is an
    error naming the manifest key. The API key is never sent here nor shown.

    >>> src = EndpointSource(base_url="http://127.0.0.1:9", model="m", api_key_env=None)
    >>> check_endpoint_reachable(src, where="predictions.jev", manifest="m.json", timeout_s=2)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.ManifestError: m.json, key 'predictions.jev.base_url': expected an endpoint that answers HTTP at http://127.0.0.1:9, got no answer (...). Check base_url, or start the server, before the training is measured.
    """
    if source.api_key_env is not None and not os.environ.get(source.api_key_env):
        raise ManifestError(
            f"the environment variable {source.api_key_env} (holding the API key) to be set",
            "it is unset or empty",
            f"set {source.api_key_env} where the runs execute",
            file=f"{manifest}, key '{where}.api_key_env'",
        )
    request = urllib.request.Request(f"{source.base_url}/models", method="GET")
    try:
        with urllib.request.urlopen(request, timeout=min(timeout_s, source.timeout_s)):
            return
    except urllib.error.HTTPError:
        return  # the server answered: reachable
    except (TimeoutError, urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        detail = reason.strerror if isinstance(reason, OSError) and reason.strerror else type(reason).__name__
        raise ManifestError(
            f"an endpoint that answers HTTP at {source.base_url}",
            f"no answer ({detail})",
            "check base_url, or start the server, before the training is measured",
            file=f"{manifest}, key '{where}.base_url'",
        ) from None


SHOWN = 5
"""How many ids a summary of problems names (the first ones, in file order)."""


@dataclass(frozen=True)
class _Problem:
    """One row that does not fit the split: the message it would have on its own."""

    row: int | None
    column: str
    expected: str
    got: str
    fix: str


@dataclass
class PredictionsFit:
    """Every way a predictions file does not fit a training's split, counted.

    Attributes:
        unknown_decisions: rows naming a decision the manifest does not have.
        unknown_ids: rows naming an id the dataset does not have.
        wrong_answers: rows whose answers are not the decision's (or the example's options).
        missing: per decision, the test ids without a prediction (in split order).
        n_test: per decision, how many test examples it has.
    """

    unknown_decisions: list[tuple[str, _Problem]]
    unknown_ids: list[tuple[str, _Problem]]
    wrong_answers: list[tuple[str, _Problem]]
    missing: dict[str, list[str]]
    n_test: dict[str, int]

    @property
    def ok(self) -> bool:
        return not (self.unknown_decisions or self.unknown_ids or self.wrong_answers
                    or any(self.missing.values()))

    def summary(self) -> str:
        """The counts and the first ids of each kind of problem, in words.

        >>> PredictionsFit([], [("zz", None), ("zy", None)], [], {"s": ["a"]}, {"s": 4}).summary()
        "2 predictions for ids the dataset does not have (first: 'zz', 'zy'); 1 of the 4 test examples of decision 's' without a prediction (first: 'a')"
        """
        parts = []
        for found, what in ((self.unknown_decisions, "for decisions the training does not have"),
                            (self.unknown_ids, "for ids the dataset does not have"),
                            (self.wrong_answers, "over other answers than the decision's")):
            if found:
                parts.append(f"{len(found):,} prediction{'s' if len(found) != 1 else ''} {what} "
                             f"(first: {_first(k for k, _ in found)})")
        for decision, ids in self.missing.items():
            if ids:
                parts.append(f"{len(ids):,} of the {self.n_test[decision]:,} test examples of "
                             f"decision {decision!r} without a prediction (first: {_first(ids)})")
        return "; ".join(parts)

    @property
    def problems(self) -> int:
        return (len(self.unknown_decisions) + len(self.unknown_ids) + len(self.wrong_answers)
                + sum(len(v) for v in self.missing.values()))


def _first(ids: Iterable[str]) -> str:
    out = []
    for i, ident in enumerate(ids):
        if i == SHOWN:
            out.append("...")
            break
        out.append(repr(ident))
    return ", ".join(out)


def fit_predictions(
    predictions: SystemPredictions, dataset: Dataset, holdouts: Sequence[Holdout]
) -> PredictionsFit:
    """Check a whole predictions file against the split and count every problem (no early stop).

    Every row must name a decision of the manifest and an id of the dataset, and give
    probabilities over exactly the decision's answers (a multiple-choice decision: the example's
    options); every test example of every decision must have a prediction. Predictions for the
    dataset's other rows are allowed (the model may answer every row).
    """
    decisions = {d.name: d for d in dataset.decisions}
    position = dataset.positions({ident for (_, ident) in predictions.predictions})
    fit = PredictionsFit([], [], [], {}, {})
    for (decision, ident), p in predictions.predictions.items():
        labels = decisions.get(decision)
        if labels is None:
            fit.unknown_decisions.append((decision, _Problem(
                p.row, "decision", f"one of the training's decisions {sorted(decisions)}",
                repr(decision), "fix the decision name")))
            continue
        i = position.get(ident)
        if i is None:
            fit.unknown_ids.append((ident, _Problem(
                p.row, "id", "an id of the dataset", repr(ident),
                "predict the dataset's examples (is this the right file?)")))
            continue
        if labels.spec.kind is DecisionKind.MULTIPLE_CHOICE:
            expected: Sequence[str] = labels.options_at(i)
            what = f"the options of example {ident!r}"
        else:
            expected = labels.spec.answers
            what = f"the answers of decision {decision!r}"
        given = [a for a, _ in p.probabilities]
        if sorted(given) != sorted(expected):
            unknown = [a for a in given if a not in expected]
            missing = [a for a in expected if a not in given]
            detail = "; ".join(
                part for part in (
                    f"unknown {listed(unknown)}" if unknown else "",
                    f"missing {listed(missing)}" if missing else "",
                ) if part
            ) or "an answer given twice"
            fit.wrong_answers.append((ident, _Problem(
                p.row, "probabilities", f"probabilities over {what} {listed(expected)}", detail,
                f"give {predictions.system}'s probabilities over exactly these answers")))
    for h in holdouts:
        fit.n_test[h.decision] = len(h.test_ids)
        fit.missing[h.decision] = [t for t in h.test_ids
                                   if (h.decision, t) not in predictions.predictions]
    return fit


def check_file_predictions(
    predictions: SystemPredictions, dataset: Dataset, holdouts: Sequence[Holdout], *,
    fix: str | None = None,
) -> None:
    """Refuse a predictions file that does not fit the dataset, in full.

    The message names the first problem (its file, row and column) and, when there are more,
    how many of each kind there are with the first few ids: ``missing`` test examples, ``extra``
    ids or decisions, rows over other answers. ``fix`` (when given) replaces the what-to-do
    sentence (the API says nothing was stored or charged).

    Raises:
        PredictionsError: the predictions do not fit the split.
    """
    fit = fit_predictions(predictions, dataset, holdouts)
    if fit.ok:
        return
    source = predictions.source
    more = f"; in all: {fit.summary()}" if fit.problems > 1 else ""
    rows = [*fit.unknown_decisions, *fit.unknown_ids, *fit.wrong_answers]
    if rows:
        first = min((pr for _, pr in rows), key=lambda pr: pr.row if pr.row is not None else 0)
        raise PredictionsError(first.expected, first.got + more, fix or first.fix, file=source,
                               row=first.row, column=first.column)
    decision, missing_ids = next((d, ids) for d, ids in fit.missing.items() if ids)
    shown = ", ".join(repr(m) for m in missing_ids[:SHOWN]) + (
        ", ..." if len(missing_ids) > SHOWN else "")
    first_row = dataset.positions([missing_ids[0]])[missing_ids[0]] + 1
    others = sum(len(v) for d, v in fit.missing.items() if d != decision)
    raise PredictionsError(
        f"a prediction for every test example of decision {decision!r} ({fit.n_test[decision]})",
        f"none for {len(missing_ids)} of them: {shown} (first: dataset row {first_row})"
        + (f"; in all: {fit.summary()}" if others else ""),
        fix or f"predict the missing examples with {predictions.system} and record them",
        file=source, column="id",
    )


def _check_source(
    manifest: TrainingManifest,
    system: str,
    source: PredictionSource,
    dataset: Dataset,
    holdouts: Sequence[Holdout],
    reach: Callable[..., None],
) -> str:
    if isinstance(source, PredictionsFileSource):
        preds = read_predictions(source.path, system)
        check_file_predictions(preds, dataset, holdouts)
        return f"{system}: {len(preds.predictions)} predictions in {source.path_as_written}"
    from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_MODEL

    if source.model == JEV_STANDIN_MODEL and urllib.parse.urlsplit(source.base_url).hostname in (
            "127.0.0.1", "localhost"):
        # The demo's Jev stand-in: the refund_jev_client resource starts it when it is gone.
        return f"{system}: the demo's Jev stand-in (started on demand)"
    reach(source, where=f"predictions.{system}", manifest=manifest.source)
    return f"{system}: endpoint {source.base_url} answers"


def check_training(
    manifest: TrainingManifest,
    *,
    reach: Callable[..., None] = check_endpoint_reachable,
    progress: ProgressFn | None = None,
    something_to_train_on: bool = False,
) -> Preflight:
    """Read and validate every input of ``manifest``'s training; nothing is written.

    Args:
        manifest: the validated manifest (its paths are already confined, see
            :func:`typestrict_pipeline.refund.manifest.load_manifest`).
        reach: the endpoint check (default :func:`check_endpoint_reachable`).
        progress: told how far the dataset's read is (:func:`load_dataset`).
        something_to_train_on: also refuse, right after the dataset is read, a split that would
            hold out every row (:func:`~typestrict_pipeline.refund.holdout.check_something_to_train_on`,
            the check of a training's creation through the API and the console), before any
            run is requested (:func:`screen_training`). The verdict run's own check (the
            ``dataset`` asset) leaves it out: once a run is requested its verdict is the answer.

    Returns:
        The dataset, the splits and what was checked.

    Raises:
        DatasetError, NotEnoughDataError, PredictionsError, ManifestError: the first problem;
            a predictions file that is missing or not named JSONL or Parquet before the dataset
            is read.
    """
    if manifest.status is TrainingStatus.FAILED:
        return Preflight(manifest, None, (), ("failed training: only the manifest is read",))
    sources: list[tuple[str, PredictionSource]] = [("jev", manifest.jev)]
    if manifest.model is not None:
        sources.append(("model", manifest.model))
    for system, source in sources:  # a file that is not there is said before the dataset is read
        if isinstance(source, PredictionsFileSource):
            predictions_file(source.path, system)
    with reads_within():  # the validation's pass keeps the ids and texts for the split and checks
        dataset = load_dataset(manifest, progress=progress)
        if something_to_train_on:
            check_something_to_train_on(dataset)
        holdouts = tuple(split_decisions(dataset))
        checked = [f"dataset: {dataset.n_rows} rows in {manifest.dataset.path_as_written}"]
        for system, source in sources:
            checked.append(_check_source(manifest, system, source, dataset, holdouts, reach))
    grouping = scan_dataset(manifest)
    return Preflight(manifest, dataset, holdouts, tuple(checked), grouping)


SCREEN_MAX_BYTES = 64 * 1024 * 1024
"""Largest dataset file ``training_sensor`` checks in its tick (larger ones are checked by the
verdict run's first asset: a sensor tick must stay short)."""


def _no_reach(source: EndpointSource, *, where: str, manifest: str) -> None:
    """No network from a sensor: an endpoint is checked by the run."""


def screen_training(manifest: TrainingManifest, *, max_bytes: int = SCREEN_MAX_BYTES) -> str | None:
    """What ``training_sensor`` checks before it requests a verdict run (and ``typestrict training
    check``): the message of the first problem with the dataset, its split (that it leaves some
    row to train on, as at a creation through the API or the console), and the predictions
    files (every test id of every decision present once, answer sets complete, probabilities
    valid), or None when they fit (or the dataset is larger than ``max_bytes``, or the training
    failed: the run checks those)."""
    from typestrict_pipeline.errors import TypeStrictError

    if manifest.status is TrainingStatus.FAILED:
        return None
    try:
        if manifest.dataset.path.stat().st_size > max_bytes:
            return None
    except OSError:
        pass  # the check below says what is wrong with it
    try:
        check_training(manifest, reach=_no_reach, something_to_train_on=True)
    except TypeStrictError as exc:
        return str(exc)
    return None
