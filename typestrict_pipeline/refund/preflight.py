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
typestrict_pipeline.errors.PredictionsError: .../p.jsonl, row 1, column 'id': expected an id of the dataset, got 'zz'. Predict the dataset's examples (is this the right file?).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from typestrict_pipeline.errors import ManifestError, PredictionsError
from typestrict_pipeline.progress import ProgressFn
from typestrict_pipeline.refund.dataset import Dataset, load_dataset
from typestrict_pipeline.refund.holdout import Holdout, split_decisions
from typestrict_pipeline.refund.manifest import (
    EndpointSource,
    PredictionsFileSource,
    PredictionSource,
    TrainingManifest,
    TrainingStatus,
)
from typestrict_pipeline.refund.predictions import SystemPredictions, read_predictions
from typestrict_pipeline.refund.types import DecisionKind

__all__ = [
    "REACH_TIMEOUT_S",
    "Preflight",
    "check_endpoint_reachable",
    "check_file_predictions",
    "check_training",
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
    """

    manifest: TrainingManifest
    dataset: Dataset | None
    holdouts: tuple[Holdout, ...]
    checked: tuple[str, ...]


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


def check_file_predictions(
    predictions: SystemPredictions, dataset: Dataset, holdouts: Sequence[Holdout]
) -> None:
    """Refuse a predictions file that does not fit the dataset, in full.

    Every row must name a decision of the manifest and an id of the dataset, and give
    probabilities over exactly the decision's answers (a multiple-choice decision: the
    example's options); every test example of every decision must have a prediction.

    Raises:
        PredictionsError: the first problem, naming the file, the row and the column.
    """
    decisions = {d.name: d for d in dataset.decisions}
    position = dataset.positions({ident for (_, ident) in predictions.predictions})
    source = predictions.source
    for (decision, ident), p in predictions.predictions.items():
        labels = decisions.get(decision)
        if labels is None:
            raise PredictionsError(
                f"one of the training's decisions {sorted(decisions)}",
                repr(decision),
                "fix the decision name",
                file=source, row=p.row, column="decision",
            )
        i = position.get(ident)
        if i is None:
            raise PredictionsError(
                "an id of the dataset",
                repr(ident),
                "predict the dataset's examples (is this the right file?)",
                file=source, row=p.row, column="id",
            )
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
                    f"unknown {unknown}" if unknown else "",
                    f"missing {missing}" if missing else "",
                ) if part
            ) or "an answer given twice"
            raise PredictionsError(
                f"probabilities over {what} {list(expected)}",
                detail,
                f"give {predictions.system}'s probabilities over exactly these answers",
                file=source, row=p.row, column="probabilities",
            )
    for h in holdouts:
        missing_ids = [t for t in h.test_ids if (h.decision, t) not in predictions.predictions]
        if missing_ids:
            shown = ", ".join(repr(m) for m in missing_ids[:5]) + (
                ", ..." if len(missing_ids) > 5 else ""
            )
            first_row = dataset.positions([missing_ids[0]])[missing_ids[0]] + 1
            raise PredictionsError(
                f"a prediction for every test example of decision {h.decision!r} "
                f"({len(h.test_ids)})",
                f"none for {len(missing_ids)} of them: {shown} (first: dataset row {first_row})",
                f"predict the missing examples with {predictions.system} and record them",
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
) -> Preflight:
    """Read and validate every input of ``manifest``'s training; nothing is written.

    Args:
        manifest: the validated manifest (its paths are already confined, see
            :func:`typestrict_pipeline.refund.manifest.load_manifest`).
        reach: the endpoint check (default :func:`check_endpoint_reachable`).
        progress: told how far the dataset's read is (:func:`load_dataset`).

    Returns:
        The dataset, the splits and what was checked.

    Raises:
        DatasetError, NotEnoughDataError, PredictionsError, ManifestError: the first problem.
    """
    if manifest.status is TrainingStatus.FAILED:
        return Preflight(manifest, None, (), ("failed training: only the manifest is read",))
    dataset = load_dataset(manifest, progress=progress)
    holdouts = tuple(split_decisions(dataset))
    checked = [f"dataset: {dataset.n_rows} rows in {manifest.dataset.path_as_written}"]
    sources: list[tuple[str, PredictionSource]] = [("jev", manifest.jev)]
    if manifest.model is not None:
        sources.append(("model", manifest.model))
    for system, source in sources:
        checked.append(_check_source(manifest, system, source, dataset, holdouts, reach))
    return Preflight(manifest, dataset, holdouts, tuple(checked))
