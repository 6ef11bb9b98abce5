"""Support for the refund wiring tests (no tests here): small synthetic trainings, seeded."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typestrict_pipeline.refund.predictions import Prediction, write_predictions_jsonl

ANSWERS = {"sentiment": ("yes", "no"), "topic": ("a", "b", "c")}


def _probs(rng: random.Random, right: int, k: int, skill: float) -> tuple[float, ...]:
    """Right answer on top with probability ``skill``, otherwise a random wrong answer on top."""
    top = right if rng.random() < skill else rng.choice([i for i in range(k) if i != right])
    w = [rng.random() * 0.3 for _ in range(k)]
    w[top] += 0.5 + rng.random() * 0.5
    total = sum(w)
    return tuple(x / total for x in w)


def make_training(
    trainings: Path,
    training_id: str,
    *,
    n: int = 240,
    decisions: Sequence[str] = ("sentiment",),
    model_skill: float | Sequence[float] = 0.9,
    jev_skill: float = 0.6,
    seed: int = 0,
    status: str = "succeeded",
    jev: dict[str, Any] | None = None,
    keep_if_loses: bool = False,
) -> Path:
    """Write ``<trainings>/<id>/{manifest.json,data.csv,model.jsonl,jev.jsonl}``; return the manifest."""
    rng = random.Random(seed)
    folder = trainings / training_id
    folder.mkdir(parents=True, exist_ok=True)
    skills = [model_skill] * len(decisions) if isinstance(model_skill, float) else list(model_skill)
    rows = []
    for i in range(n):
        row = {"id": f"ex{i:04d}", "text": f"example {i} of training {training_id}", "grp": f"g{i // 4}"}
        for d in decisions:
            row[d] = rng.choice(ANSWERS[d])
        rows.append(row)
    header = ["id", "text", "grp", *decisions]
    lines = [",".join(header)] + [",".join(str(r[c]) for c in header) for r in rows]
    (folder / "data.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model: list[Prediction] = []
    jev_preds: list[Prediction] = []
    for r in rows:
        for d, skill in zip(decisions, skills, strict=True):
            answers = ANSWERS[d]
            right = answers.index(r[d])
            pm = _probs(rng, right, len(answers), skill)
            pj = _probs(rng, right, len(answers), jev_skill)
            model.append(Prediction(r["id"], d, tuple(zip(answers, pm, strict=True))))
            jev_preds.append(Prediction(r["id"], d, tuple(zip(answers, pj, strict=True))))
    write_predictions_jsonl(folder / "model.jsonl", model)
    write_predictions_jsonl(folder / "jev.jsonl", jev_preds)
    training: dict[str, Any] = {"status": status}
    predictions: dict[str, Any] = {
        "jev": jev or {"kind": "file", "path": "jev.jsonl"},
        "model": {"kind": "file", "path": "model.jsonl"},
    }
    if status == "failed":
        training["reason"] = "the trainer ran out of memory"
        predictions = {"jev": {"kind": "file", "path": "does-not-exist.jsonl"}}
    manifest = {
        "manifest_version": 1,
        "training_id": training_id,
        "workspace_id": "tests",
        "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
        "decisions": [
            {"name": d, "question": f"Which {d}?", "answer_column": d, "answers": list(ANSWERS[d])}
            for d in decisions
        ],
        "predictions": predictions,
        "training": training,
        "options": {"keep_if_loses": keep_if_loses},
    }
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return path


def make_mc_training(trainings: Path, training_id: str, *, n: int = 200, seed: int = 0) -> Path:
    """A multiple-choice training: each example offers 2 to 4 options of its own (JSONL dataset)."""
    rng = random.Random(seed)
    folder = trainings / training_id
    folder.mkdir(parents=True, exist_ok=True)
    pool = ["Up", "Heat", "Alien", "Jaws", "Rocky", "Fargo", "Brazil", "Ran"]
    rows = []
    model: list[Prediction] = []
    jev_preds: list[Prediction] = []
    for i in range(n):
        options = rng.sample(pool, rng.randint(2, 4))
        right = rng.randrange(len(options))
        rows.append({"id": f"q{i:04d}", "text": f"which film is it, clue {i}", "title": options[right],
                     "title_options": options})
        pm = _probs(rng, right, len(options), 0.95)
        pj = _probs(rng, right, len(options), 0.5)
        model.append(Prediction(f"q{i:04d}", "title", tuple(zip(options, pm, strict=True))))
        jev_preds.append(Prediction(f"q{i:04d}", "title", tuple(zip(options, pj, strict=True))))
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    write_predictions_jsonl(folder / "model.jsonl", model)
    write_predictions_jsonl(folder / "jev.jsonl", jev_preds)
    manifest = {
        "manifest_version": 1,
        "training_id": training_id,
        "workspace_id": "tests",
        "dataset": {"path": "data.jsonl", "columns": {"id": "id", "text": "text"}},
        "decisions": [{"name": "title", "question": "Which film?", "answer_column": "title",
                       "options_column": "title_options"}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"},
                        "model": {"kind": "file", "path": "model.jsonl"}},
        "training": {"status": "succeeded"},
        "options": {"keep_if_loses": True},
    }
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return path
