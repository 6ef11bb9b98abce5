"""The demo's data: the Rotten Tomatoes loader, Jev's lexicon stand-in, the demo manifests."""

import json
from pathlib import Path

import pandas as pd
import pytest

from typestrict_pipeline.demo_data import lexicon
from typestrict_pipeline.demo_data.build import (
    DEMO_TRAININGS,
    demo_frame,
    manifest_document,
    prepare_training,
    write_csv,
)
from typestrict_pipeline.demo_data.corpus import (
    labelled_examples,
    load_rotten_tomatoes,
    summarize,
)
from typestrict_pipeline.demo_data.training import train_text_classifier
from typestrict_pipeline.errors import DatasetError, InputError, NotEnoughDataError
from typestrict_pipeline.refund.manifest import TrainingStatus, load_manifest
from typestrict_pipeline.refund.predictions import read_predictions


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    return load_rotten_tomatoes()


def test_the_loader_reads_the_whole_corpus(corpus: pd.DataFrame) -> None:
    s = summarize(corpus)
    assert s.rows == 13_905
    assert s.movies == 1_449
    assert s.answer_counts == {"fresh": 7_403, "rotten": 5_405, "plot": 1_097}
    assert s.empty_texts == 14
    assert list(corpus.columns) == ["id", "text", "answer", "movie"]
    assert corpus["id"].is_unique and corpus["id"].iloc[0] == "rt-00000"
    assert len(labelled_examples(corpus)) == 13_891


def test_the_loader_names_a_bad_answer_with_file_row_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "rt.csv"
    bad.write_text("category,text,movie_name\nfresh,Fine.,m1\nsplendid,Great.,m2\n")
    with pytest.raises(DatasetError, match=r"rt.csv, row 2, column 'category': expected an answer among"):
        load_rotten_tomatoes(bad)


def test_the_demo_frame_derives_the_second_decision(corpus: pd.DataFrame) -> None:
    frame = demo_frame()
    assert len(frame) == 13_891
    assert set(frame["kind"]) == {"review", "plot"}
    assert ((frame["sentiment"] == "plot") == (frame["kind"] == "plot")).all()


def test_the_lexicon_stand_in_is_a_fixed_function_of_the_text() -> None:
    p = lexicon.probabilities("A superb, moving film.", ["fresh", "rotten", "plot"])
    assert p == lexicon.probabilities("A superb, moving film.", ["fresh", "rotten", "plot"])
    assert p[0] == max(p) and abs(sum(p) - 1.0) < 1e-12
    neg = lexicon.probabilities("Dull, tedious and not funny.", ["fresh", "rotten", "plot"])
    assert neg[1] == max(neg)
    two = lexicon.probabilities("Dull, tedious and not funny.", ["review", "plot"])
    assert two[0] > two[1] and abs(sum(two) - 1.0) < 1e-12
    with pytest.raises(InputError, match="answers among"):
        lexicon.probabilities("x", ["spam", "ham"])


def test_the_classifier_refuses_a_single_answer() -> None:
    with pytest.raises(NotEnoughDataError, match="at least 2 distinct answers"):
        train_text_classifier(["a", "b"], ["fresh", "fresh"], ["fresh", "rotten"], min_df=1)


def test_prepared_demo_trainings_are_valid_and_trained_on_training_rows_only(tmp_path: Path) -> None:
    """Tiny slice and failed training (fast ones): a valid manifest, predictions for test rows only."""
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.holdout import split_decisions

    dataset_path = write_csv(demo_frame(), tmp_path / "data" / "rt.csv")
    jev = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev-demo-lexicon-v1"}
    tiny = next(t for t in DEMO_TRAININGS if t.training_id == "rt-tiny")
    failed = next(t for t in DEMO_TRAININGS if t.failure_reason is not None)
    p = prepare_training(tiny, trainings_dir=tmp_path / "trainings", dataset_path=dataset_path, jev_source=jev)
    assert p.train_rows == {"sentiment": 100} and p.test_rows == {"sentiment": 2000}
    manifest = load_manifest(p.manifest_path, data_root=dataset_path.parent)
    holdout = split_decisions(load_dataset(manifest))[0]
    preds = read_predictions(p.manifest_path.parent / "model_predictions.jsonl", "model")
    assert sorted(i for _, i in preds.predictions) == sorted(holdout.test_ids)
    q = prepare_training(failed, trainings_dir=tmp_path / "trainings", dataset_path=dataset_path, jev_source=jev)
    m = load_manifest(q.manifest_path, data_root=dataset_path.parent)
    assert m.status is TrainingStatus.FAILED and m.model is None
    assert m.failure_reason == failed.failure_reason


def test_the_manifest_document_names_both_decisions() -> None:
    two = next(t for t in DEMO_TRAININGS if len(t.decisions) == 2)
    doc = manifest_document(
        two, dataset_path=Path("/d/rt.csv"), jev_source={"kind": "file", "path": "j.jsonl"},
        model_predictions="m.jsonl",
    )
    assert [d["name"] for d in doc["decisions"]] == ["sentiment", "kind"]
    assert doc["dataset"]["columns"]["group"] == "movie"
    json.dumps(doc)
