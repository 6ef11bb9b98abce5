"""Writing the demo's trainings: the dataset file, the manifests, the models' predictions files.

The demo's dataset is the Rotten Tomatoes corpus (13,891 rows with a text; see
:mod:`typestrict_pipeline.demo_data.corpus`) with two decisions derived from the same answers:

- ``sentiment``: fresh / rotten / plot, the corpus's own answer;
- ``kind``: review / plot (fresh and rotten are reviews), a second decision on the same texts.

Groups are movies, so no movie is on both sides of a split. Each demo training is one folder
``<trainings>/<training_id>/`` with ``manifest.json`` and the model's predictions file; the
dataset file is shared. Jev is asked through the OpenAI-compatible endpoint given to
:func:`manifest_document` (in the demo: Jev (demo stand-in), the lexicon of
:mod:`typestrict_pipeline.demo_data.lexicon`).

The trainings (``DEMO_TRAININGS``):

- ``rt-tfidf``: TF-IDF + logistic regression on every training row; expected to beat Jev.
- ``rt-tiny``: the same model trained on 100 training rows drawn with seed 7; expected not to.
- ``rt-two-decisions``: one model per decision (sentiment, kind), each trained on the rows that
  are training rows for *both* decisions' splits; the verdict needs both decisions won.
- ``rt-failed``: a training that failed (no predictions); verdict ``failed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from typestrict_pipeline.demo_data.corpus import ANSWERS, labelled_examples, load_rotten_tomatoes
from typestrict_pipeline.files import write_atomic

DATASET_FILE = "rotten_tomatoes.csv"
KIND_ANSWERS = ("review", "plot")
KIND_OF = {"fresh": "review", "rotten": "review", "plot": "plot"}
DECISIONS: dict[str, dict[str, Any]] = {
    "sentiment": {
        "question": "Is this Rotten Tomatoes text a fresh review, a rotten review, or a plot synopsis?",
        "answer_column": "sentiment",
        "answers": list(ANSWERS),
    },
    "kind": {
        "question": "Is this text a review of the movie or a synopsis of its plot?",
        "answer_column": "kind",
        "answers": list(KIND_ANSWERS),
    },
}
TINY_SLICE_ROWS = 100
TINY_SLICE_SEED = 7


@dataclass(frozen=True)
class DemoTraining:
    """One training of the demo.

    Attributes:
        training_id: the partition key.
        title: one line saying what it shows.
        decisions: its decisions, in order.
        train_rows: None for every training row, else how many training rows (seeded draw).
        failure_reason: set for the failed training.
    """

    training_id: str
    title: str
    decisions: tuple[str, ...]
    train_rows: int | None = None
    failure_reason: str | None = None


DEMO_TRAININGS = (
    DemoTraining("rt-tfidf", "TF-IDF + logistic regression, all training rows", ("sentiment",)),
    DemoTraining(
        "rt-tiny",
        f"the same model on a tiny slice ({TINY_SLICE_ROWS} training rows, seed {TINY_SLICE_SEED})",
        ("sentiment",),
        train_rows=TINY_SLICE_ROWS,
    ),
    DemoTraining("rt-two-decisions", "two decisions (sentiment, kind), TF-IDF each", ("sentiment", "kind")),
    DemoTraining(
        "rt-failed",
        "a training that failed on our side",
        ("sentiment",),
        failure_reason="the trainer ran out of GPU memory at epoch 2 (simulated by the demo)",
    ),
)


def demo_frame() -> pd.DataFrame:
    """The demo dataset: ``id, text, movie, sentiment, kind`` (13,891 rows with a text)."""
    frame = labelled_examples(load_rotten_tomatoes())
    return pd.DataFrame(
        {
            "id": frame["id"],
            "text": frame["text"],
            "movie": frame["movie"],
            "sentiment": frame["answer"],
            "kind": frame["answer"].map(KIND_OF),
        }
    )




def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    """Write ``frame`` as UTF-8 CSV atomically (temp file + rename)."""
    return write_atomic(path, frame.to_csv(index=False).encode("utf-8"))


def write_json(document: Mapping[str, Any], path: Path) -> Path:
    """Write ``document`` as indented UTF-8 JSON atomically."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return write_atomic(path, text.encode("utf-8"))


def manifest_document(
    training: DemoTraining,
    *,
    dataset_path: Path,
    jev_source: Mapping[str, Any],
    model_predictions: str | None,
) -> dict[str, Any]:
    """The manifest of a demo training (format: ``docs/manifest.md``).

    Args:
        training: which demo training.
        dataset_path: the shared dataset CSV (written into the manifest as an absolute path).
        jev_source: the ``predictions.jev`` entry (the stand-in's OpenAI-compatible endpoint).
        model_predictions: the model's predictions file name, relative to the manifest's folder
            (None for the failed training).

    >>> t = DEMO_TRAININGS[3]
    >>> doc = manifest_document(t, dataset_path=Path("/d/rt.csv"), jev_source={"kind": "file", "path": "j"},
    ...                         model_predictions=None)
    >>> doc["training"]["status"], "model" in doc["predictions"]
    ('failed', False)
    """
    predictions: dict[str, Any] = {"jev": dict(jev_source)}
    if model_predictions is not None:
        predictions["model"] = {"kind": "file", "path": model_predictions}
    training_block: dict[str, Any] = {"status": "succeeded"}
    if training.failure_reason is not None:
        training_block = {"status": "failed", "reason": training.failure_reason}
    return {
        "manifest_version": 1,
        "training_id": training.training_id,
        "workspace_id": "demo",
        "dataset": {
            "path": str(dataset_path),
            "columns": {"id": "id", "text": "text", "group": "movie"},
        },
        "decisions": [{"name": name, **DECISIONS[name]} for name in training.decisions],
        "predictions": predictions,
        "training": training_block,
        "options": {"keep_if_loses": False},
    }


@dataclass(frozen=True)
class PreparedTraining:
    """A demo training written to disk.

    Attributes:
        training: which demo training.
        manifest_path: its ``manifest.json``.
        train_rows: per decision, how many rows its model was trained on (empty when failed).
        test_rows: per decision, how many test rows it predicted.
        seconds: wall time to split, train and predict.
    """

    training: DemoTraining
    manifest_path: Path
    train_rows: dict[str, int]
    test_rows: dict[str, int]
    seconds: float


MODEL_PREDICTIONS_FILE = "model_predictions.jsonl"


def prepare_training(
    training: DemoTraining,
    *,
    trainings_dir: Path,
    dataset_path: Path,
    jev_source: Mapping[str, Any],
) -> PreparedTraining:
    """Write a demo training's manifest, train its model(s) and write their test predictions.

    The split is the product's own (:func:`typestrict_pipeline.refund.holdout.split_decisions`,
    seeded by the dataset), so it is exactly the split the ``holdout`` asset will draw. Each
    decision's model is trained only on rows that are training rows in *every* decision's split
    (:func:`typestrict_pipeline.refund.holdout.training_ids`), so the model never sees a text or a
    movie it is measured on; the tiny-slice training draws its rows from those with a fixed seed.

    Args:
        training: which demo training.
        trainings_dir: the trainings folder (``<trainings_dir>/<id>/manifest.json``).
        dataset_path: the shared dataset CSV.
        jev_source: the manifest's ``predictions.jev`` entry.

    Returns:
        What was written.
    """
    import time

    from typestrict_pipeline.demo_data.training import sample_rows, train_text_classifier
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.holdout import split_decisions, training_ids
    from typestrict_pipeline.refund.manifest import load_manifest
    from typestrict_pipeline.refund.predictions import Prediction, write_predictions_jsonl

    started = time.perf_counter()
    folder = trainings_dir / training.training_id
    failed = training.failure_reason is not None
    document = manifest_document(
        training,
        dataset_path=dataset_path,
        jev_source=jev_source,
        model_predictions=None if failed else MODEL_PREDICTIONS_FILE,
    )
    manifest_path = write_json(document, folder / "manifest.json")
    if failed:
        return PreparedTraining(training, manifest_path, {}, {}, time.perf_counter() - started)

    manifest = load_manifest(manifest_path, data_root=dataset_path.parent)
    dataset = load_dataset(manifest)
    holdouts = split_decisions(dataset)
    allowed = training_ids(holdouts)
    examples = dataset.examples
    position = {ex.id: i for i, ex in enumerate(examples)}
    train_idx = sorted(position[i] for i in allowed)
    if training.train_rows is not None:
        picked = sample_rows(len(train_idx), training.train_rows, seed=TINY_SLICE_SEED)
        train_idx = [train_idx[i] for i in picked]
    texts = [examples[i].text for i in train_idx]
    predictions: list[Prediction] = []
    train_rows: dict[str, int] = {}
    test_rows: dict[str, int] = {}
    for h in holdouts:
        labels = dataset.decision(h.decision)
        answers = labels.spec.answers
        y = [labels.label_at(i) or "" for i in train_idx]
        model = train_text_classifier(
            texts, y, answers, min_df=1 if training.train_rows is not None else 2
        )
        test = [position[i] for i in h.test_ids]
        probs = model.predict_proba([examples[i].text for i in test])
        for i, p in zip(test, probs, strict=True):
            predictions.append(
                Prediction(examples[i].id, h.decision, tuple(zip(answers, p, strict=True)))
            )
        train_rows[h.decision] = len(train_idx)
        test_rows[h.decision] = len(test)
    write_predictions_jsonl(folder / MODEL_PREDICTIONS_FILE, predictions)
    return PreparedTraining(
        training, manifest_path, train_rows, test_rows, time.perf_counter() - started
    )
