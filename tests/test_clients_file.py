"""The predictions-file client, and collecting a decision's predictions from any client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typestrict_pipeline.clients import (
    ClassifyItem,
    OpenAICompatibleClient,
    PredictionsFileClient,
    StandinServer,
    client_for_source,
    holdout_items,
    predict_holdout,
)
from typestrict_pipeline.errors import PredictionsError
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import split_dataset
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.predictions import build_decision_data
from typestrict_pipeline.refund.rule import judge_decision


def write_training(tmp_path: Path, base_url: str) -> Path:
    rows = [{"id": f"e{i}", "text": f"text {i}", "label": ["yes", "no"][i % 2]} for i in range(40)]
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    preds = [
        {
            "id": r["id"],
            "decision": "polar",
            "probabilities": {"yes": 0.8, "no": 0.2}
            if r["label"] == "yes"
            else {"yes": 0.3, "no": 0.7},
        }
        for r in rows
    ]
    (tmp_path / "model.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8"
    )
    manifest = {
        "manifest_version": 1,
        "training_id": "t",
        "workspace_id": "demo",
        "dataset": {"path": "data.jsonl", "columns": {"id": "id", "text": "text"}},
        "decisions": [
            {
                "name": "polar",
                "question": "Yes or no?",
                "answer_column": "label",
                "answers": ["yes", "no"],
            }
        ],
        "predictions": {
            "jev": {
                "kind": "openai",
                "base_url": base_url,
                "model": "jev-standin",
                "max_attempts": 2,
            },
            "model": {"kind": "file", "path": "model.jsonl"},
        },
        "training": {"status": "succeeded"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return tmp_path / "manifest.json"


def test_end_to_end_file_model_and_stand_in_jev(tmp_path: Path) -> None:
    with StandinServer() as server:
        m = load_manifest(write_training(tmp_path, server.base_url))
        ds = load_dataset(m)
        holdout = split_dataset(ds, "polar")
        assert m.model is not None
        model_client = client_for_source(m.model, system="model")
        jev_client = client_for_source(m.jev, system="jev")
        assert isinstance(model_client, PredictionsFileClient) and isinstance(
            jev_client, OpenAICompatibleClient
        )
        model = predict_holdout(model_client, ds, holdout, system="model")
        jev = predict_holdout(jev_client, ds, holdout, system="jev", max_workers=4)
        assert model.usage.calls == 0 and model.usage.total_tokens == 0
        assert jev.usage.calls == 8 and jev.usage.prompt_tokens > 0 and server.served == 8
        data = build_decision_data(ds, holdout, model=model.predictions, jev=jev.predictions)
        assert len(data.rows) == 8
        report = judge_decision(data)  # H1's judgement runs on what we built
        assert report.name == "polar" and report.answers == ("yes", "no") and len(report.rows) == 8


def test_file_client_missing_and_mismatched(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"id": "a", "decision": "d", "probabilities": {"x": 0.5, "y": 0.5}}) + "\n",
        encoding="utf-8",
    )
    client = PredictionsFileClient(path, system="jev")
    assert client.classify("q", ClassifyItem("a", "t", ("y", "x")), decision="d").probabilities == (
        0.5,
        0.5,
    )
    with pytest.raises(
        PredictionsError,
        match=r"p.jsonl, column 'id': expected a prediction for example 'b' of decision 'd', got none",
    ):
        client.classify("q", ClassifyItem("b", "t", ("x", "y")), decision="d")
    with pytest.raises(
        PredictionsError,
        match=r"p.jsonl, row 1, column 'probabilities': expected probabilities over \['x', 'z'\]",
    ):
        client.classify("q", ClassifyItem("a", "t", ("x", "z")), decision="d")


def test_holdout_items_carry_each_examples_options(tmp_path: Path) -> None:
    with StandinServer() as server:
        m = load_manifest(write_training(tmp_path, server.base_url))
    ds = load_dataset(m)
    items = holdout_items(ds, split_dataset(ds, "polar"))
    assert len(items) == 8 and all(i.options == ("yes", "no") for i in items)
    assert [i.id for i in items] == sorted(i.id for i in items)
