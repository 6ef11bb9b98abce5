"""Recorded probabilities: validation (file, row, column) and alignment into DecisionData."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from typestrict_pipeline.errors import PredictionsError
from typestrict_pipeline.refund.dataset import Dataset, load_dataset
from typestrict_pipeline.refund.holdout import Holdout, split_dataset
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.predictions import (
    Prediction,
    build_decision_data,
    read_predictions,
    write_predictions_jsonl,
)
from typestrict_pipeline.refund.rule import canonical_rows
from typestrict_pipeline.refund.types import DecisionKind

ANSWERS = ["fresh", "rotten", "plot"]


def make_dataset(tmp_path: Path) -> tuple[Dataset, Holdout, Holdout]:
    rows = []
    for i in range(30):
        options = ["Up", "Heat", "Cars"] if i % 2 else ["Up", "Heat"]
        rows.append(
            {
                "id": f"e{i:02d}",
                "text": f"review number {i} ☃",
                "cat": ANSWERS[i % 3],
                "title": options[i % len(options)],
                "options": options,
            }
        )
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    manifest = {
        "manifest_version": 1,
        "training_id": "t",
        "workspace_id": "demo",
        "dataset": {"path": "data.jsonl", "columns": {"id": "id", "text": "text"}},
        "decisions": [
            {"name": "sentiment", "question": "Which?", "answer_column": "cat", "answers": ANSWERS},
            {
                "name": "title",
                "question": "Which title?",
                "answer_column": "title",
                "options_column": "options",
            },
        ],
        "predictions": {
            "jev": {"kind": "file", "path": "jev.jsonl"},
            "model": {"kind": "file", "path": "model.jsonl"},
        },
        "training": {"status": "succeeded"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    ds = load_dataset(load_manifest(tmp_path / "manifest.json"))
    return ds, split_dataset(ds, "sentiment"), split_dataset(ds, "title")


def records(ds: Dataset, *, shift: float = 0.0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    title = ds.decision("title")
    assert title.options is not None
    for i, ex in enumerate(ds.examples):
        # reversed key order on purpose: alignment is by answer name, not position
        out.append(
            {
                "id": ex.id,
                "decision": "sentiment",
                "probabilities": {"plot": 0.25, "rotten": 0.25 - shift, "fresh": 0.5 + shift},
            }
        )
        opts = title.options[i]
        probs = (
            {o: 1.0 / len(opts) for o in opts}
            if len(opts) == 2
            else {opts[0]: 0.5, opts[1]: 0.25, opts[2]: 0.25}
        )
        out.append({"id": ex.id, "decision": "title", "probabilities": probs})
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_builds_decision_data_aligned_to_the_answers(tmp_path: Path) -> None:
    ds, sentiment, _ = make_dataset(tmp_path)
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", records(ds, shift=0.1)), "model")
    jev = read_predictions(write_jsonl(tmp_path / "jev.jsonl", records(ds)), "jev")
    data = build_decision_data(ds, sentiment, model=model, jev=jev)
    assert data.name == "sentiment" and data.kind is DecisionKind.SINGLE
    assert data.answers == tuple(ANSWERS)
    assert len(data.rows) == sentiment.summary.n_test == 6
    by_hash = {hashlib.sha256(ex.text.encode("utf-8")).hexdigest(): ex for ex in ds.examples}
    labels = ds.decision("sentiment").labels
    position = {ex.id: i for i, ex in enumerate(ds.examples)}
    for row in data.rows:
        ex = by_hash[row.text_sha256]
        assert ex.id in sentiment.test_ids
        assert ANSWERS[row.y] == labels[position[ex.id]]
        assert row.p_model == (0.6, 0.15, 0.25) and row.p_jev == (0.5, 0.25, 0.25)
        assert row.n_options is None


def test_multiple_choice_uses_option_positions_padded(tmp_path: Path) -> None:
    ds, _, title = make_dataset(tmp_path)
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", records(ds)), "model")
    jev = read_predictions(write_jsonl(tmp_path / "jev.jsonl", records(ds)), "jev")
    data = build_decision_data(ds, title, model=model, jev=jev)
    assert data.kind is DecisionKind.MULTIPLE_CHOICE and data.answers == ("1", "2", "3")
    for row in data.rows:
        assert len(row.p_model) == 3
        if row.n_options == 2:
            assert row.p_model == (0.5, 0.5, 0.0)
        else:
            assert row.n_options == 3 and row.p_model == (0.5, 0.25, 0.25)
    # H1's judgement accepts this layout as is.
    rows, n_options = canonical_rows(data)
    assert n_options is not None and len(rows) == len(data.rows)


@pytest.mark.parametrize(
    ("probabilities", "pattern"),
    [
        (
            {"fresh": float("nan"), "rotten": 0.5, "plot": 0.5},
            r"model.jsonl, row 1, character \d+: expected finite JSON numbers, got NaN",
        ),
        (
            {"fresh": -0.1, "rotten": 0.6, "plot": 0.5},
            r"row 1, column 'probabilities.fresh': expected a probability from 0 to 1, got a negative value -0.1",
        ),
        (
            {"fresh": 1.2, "rotten": -0.1, "plot": -0.1},
            r"row 1, column 'probabilities.fresh': expected a probability from 0 to 1, got 1.2, above 1",
        ),
        (
            {"fresh": 0.5, "rotten": 0.5, "plot": 0.1},
            r"row 1, column 'probabilities': expected probabilities summing to 1 \(±0.01\), got a sum of 1.1",
        ),
        (
            {"fresh": "0.5", "rotten": 0.5, "plot": 0.0},
            r"row 1, column 'probabilities.fresh': expected a probability \(a number from 0 to 1\) for decision 'sentiment', got \"0.5\"",
        ),
    ],
)
def test_bad_values(tmp_path: Path, probabilities: dict[str, Any], pattern: str) -> None:
    path = write_jsonl(
        tmp_path / "model.jsonl",
        [{"id": "e00", "decision": "sentiment", "probabilities": probabilities}],
    )
    with pytest.raises(PredictionsError, match=pattern):
        read_predictions(path, "model")


def test_sum_within_tolerance_is_accepted(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {
                "id": "e00",
                "decision": "sentiment",
                "probabilities": {"fresh": 0.5000005, "rotten": 0.25, "plot": 0.25},
            }
        ],
    )
    assert read_predictions(path, "model").predictions[("sentiment", "e00")].probabilities[0] == (
        "fresh",
        0.5000005,
    )


def test_row_numbers_and_structure_errors(tmp_path: Path) -> None:
    ok = {
        "id": "e00",
        "decision": "sentiment",
        "probabilities": {"fresh": 1.0, "rotten": 0.0, "plot": 0.0},
    }
    path = write_jsonl(
        tmp_path / "m.jsonl", [ok, {**ok, "id": "e01", "probabilities": {"fresh": 2.0}}]
    )
    with pytest.raises(PredictionsError, match=r"m.jsonl, row 2, column 'probabilities.fresh'"):
        read_predictions(path, "model")
    write_jsonl(path, [ok, ok])
    with pytest.raises(
        PredictionsError,
        match=r"m.jsonl, row 2, column 'id': expected one prediction per \(id, decision\), got id 'e00' of decision 'sentiment' again \(first at row 1\)",
    ):
        read_predictions(path, "model")
    write_jsonl(path, [{**ok, "score": 1}])
    with pytest.raises(
        PredictionsError,
        match=r"row 1, column 'score': expected the keys 'id', 'decision', 'probabilities'",
    ):
        read_predictions(path, "model")
    write_jsonl(path, [{"id": "e00", "probabilities": ok["probabilities"]}])
    with pytest.raises(
        PredictionsError, match=r"row 1, column 'decision': expected a non-empty text, got nothing"
    ):
        read_predictions(path, "model")
    with pytest.raises(
        PredictionsError, match=r"nope.jsonl: expected an existing predictions file"
    ):
        read_predictions(tmp_path / "nope.jsonl", "jev")


def test_a_line_past_the_bound_is_refused_by_row_naming_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TYPESTRICT_MAX_JSONL_LINE_BYTES", "4096")  # the default is 64 MiB
    ok: dict[str, Any] = {"id": "e00", "decision": "sentiment",
                          "probabilities": {"fresh": 1.0, "rotten": 0.0, "plot": 0.0}}
    at_bound = {**ok, "id": "e" + "x" * (4096 - len(json.dumps({**ok, "id": "e"})))}
    assert len(json.dumps(at_bound)) == 4096
    path = write_jsonl(tmp_path / "m.jsonl", [ok, at_bound])
    assert len(read_predictions(path, "model").predictions) == 2  # a line of the bound is read
    write_jsonl(path, [ok, {**at_bound, "id": at_bound["id"] + "y"}, ok])
    with pytest.raises(
        PredictionsError,
        match=r"m\.jsonl, row 2: expected a JSON Lines row of at most 4,096 bytes, got a longer "
        r"line \(no line end in its first 4,097 bytes\)\. Write one object per line, or raise "
        r"TYPESTRICT_MAX_JSONL_LINE_BYTES",
    ):
        read_predictions(path, "model")


def test_answers_differ_from_the_decision(tmp_path: Path) -> None:
    ds, sentiment, _ = make_dataset(tmp_path)
    bad = records(ds)
    for r in bad:
        if r["decision"] == "sentiment":
            r["probabilities"] = {"fresh": 0.5, "rotten": 0.25, "spoiler": 0.25}
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", bad), "model")
    jev = read_predictions(write_jsonl(tmp_path / "jev.jsonl", bad), "jev")
    with pytest.raises(PredictionsError) as info:
        build_decision_data(ds, sentiment, model=model, jev=jev)
    msg = str(info.value)
    assert (
        "model.jsonl, row " in msg
        and "column 'probabilities': expected the answers of decision 'sentiment' ['fresh', 'rotten', 'plot']"
        in msg
    )
    assert "missing ['plot']; unexpected ['spoiler']" in msg


def test_jev_answers_differ_from_the_model(tmp_path: Path) -> None:
    ds, sentiment, _ = make_dataset(tmp_path)
    other = records(ds)
    for r in other:
        if r["decision"] == "sentiment":
            r["probabilities"] = {"fresh": 0.5, "rotten": 0.5}
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", records(ds)), "model")
    jev = read_predictions(write_jsonl(tmp_path / "jev.jsonl", other), "jev")
    with pytest.raises(
        PredictionsError,
        match=r"jev.jsonl, row \d+, column 'probabilities': expected Jev's answers to be the model's answers \['fresh', 'plot', 'rotten'\], got \['fresh', 'rotten'\]",
    ):
        build_decision_data(ds, sentiment, model=model, jev=jev)


def test_a_test_example_without_a_prediction(tmp_path: Path) -> None:
    ds, sentiment, _ = make_dataset(tmp_path)
    missing = sentiment.test_ids[1]
    partial = [r for r in records(ds) if not (r["id"] == missing and r["decision"] == "sentiment")]
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", partial), "model")
    jev = read_predictions(write_jsonl(tmp_path / "jev.jsonl", records(ds)), "jev")
    row = next(ex.row for ex in ds.examples if ex.id == missing)
    with pytest.raises(
        PredictionsError,
        match=rf"model.jsonl, column 'id': expected a prediction for every test example of decision 'sentiment' \(6\), got none for 1 of them: '{missing}' \(first: dataset row {row}\)",
    ):
        build_decision_data(ds, sentiment, model=model, jev=jev)


def test_unknown_ids_and_decisions(tmp_path: Path) -> None:
    ds, sentiment, _ = make_dataset(tmp_path)
    jev = read_predictions(write_jsonl(tmp_path / "jev.jsonl", records(ds)), "jev")
    extra = [
        *records(ds),
        {
            "id": "zz",
            "decision": "sentiment",
            "probabilities": {"fresh": 1.0, "rotten": 0.0, "plot": 0.0},
        },
    ]
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", extra), "model")
    with pytest.raises(
        PredictionsError,
        match=rf"model.jsonl, row {len(extra)}, column 'id': expected an id of the dataset, got 'zz'",
    ):
        build_decision_data(ds, sentiment, model=model, jev=jev)
    extra[-1] = {"id": "e00", "decision": "mood", "probabilities": {"x": 1.0}}
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", extra), "model")
    with pytest.raises(
        PredictionsError,
        match=r"column 'decision': expected one of the training's decisions \['sentiment', 'title'\], got 'mood'",
    ):
        build_decision_data(ds, sentiment, model=model, jev=jev)


def test_parquet_layout_and_errors(tmp_path: Path) -> None:
    ds, sentiment, _ = make_dataset(tmp_path)
    rows = records(ds)
    table = {
        "id": [r["id"] for r in rows],
        "decision": [r["decision"] for r in rows],
        "answers": [list(r["probabilities"]) for r in rows],
        "probabilities": [list(r["probabilities"].values()) for r in rows],
    }
    pq.write_table(pa.table(table), tmp_path / "jev.parquet")
    jev = read_predictions(tmp_path / "jev.parquet", "jev")
    model = read_predictions(write_jsonl(tmp_path / "model.jsonl", records(ds)), "model")
    data = build_decision_data(ds, sentiment, model=model, jev=jev)
    assert all(r.p_jev == r.p_model for r in data.rows)
    table["probabilities"][3] = [0.5, None, 0.5] if len(table["answers"][3]) == 3 else [None, 0.5]
    pq.write_table(pa.table(table), tmp_path / "bad.parquet")
    with pytest.raises(
        PredictionsError,
        match=r"bad.parquet, row 4, column 'probabilities': expected a probability from 0 to 1, got NaN",
    ):
        read_predictions(tmp_path / "bad.parquet", "jev")
    del table["answers"]
    pq.write_table(pa.table(table), tmp_path / "bad.parquet")
    with pytest.raises(
        PredictionsError,
        match=r"bad.parquet, column 'answers': expected the columns 'id', 'decision', 'answers', 'probabilities'",
    ):
        read_predictions(tmp_path / "bad.parquet", "jev")


def test_write_then_read_round_trips_exactly(tmp_path: Path) -> None:
    p = [Prediction("a", "d", (("x", 0.1), ("y", 0.2), ("z", 0.7000000000000001)))]
    write_predictions_jsonl(tmp_path / "out" / "p.jsonl", p)
    back = read_predictions(tmp_path / "out" / "p.jsonl", "model").predictions[("d", "a")]
    assert back.probabilities == p[0].probabilities and back.row == 1
    assert [f.name for f in (tmp_path / "out").iterdir()] == ["p.jsonl"]  # no temp file left


def test_no_answers_the_reviewed_examples_are_judged_on_their_review_labels(tmp_path: Path) -> None:
    rows = [
        {
            "id": f"r{i}",
            "text": f"ticket {i}",
            "grp": f"c{i // 4}",
            "rev": (["bug", "question"][(i // 4) % 2] if i % 4 == 0 else ""),
        }
        for i in range(40)
    ]
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    manifest = {
        "manifest_version": 1,
        "training_id": "t",
        "workspace_id": "demo",
        "dataset": {
            "path": "data.jsonl",
            "columns": {"id": "id", "text": "text", "group": "grp", "review_label": "rev"},
        },
        "decisions": [
            {"name": "kind", "question": "Bug or question?", "answers": ["bug", "question"]}
        ],
        "predictions": {
            "jev": {"kind": "file", "path": "j.jsonl"},
            "model": {"kind": "file", "path": "m.jsonl"},
        },
        "training": {"status": "succeeded"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    ds = load_dataset(load_manifest(tmp_path / "manifest.json"))
    holdout = split_dataset(ds, "kind")
    assert holdout.summary.source.value == "reviewed" and holdout.summary.n_test == 10
    assert (
        holdout.summary.n_excluded == 30 and holdout.summary.n_train == 0
    )  # every group is an evaluation group
    preds = [
        {"id": f"r{i}", "decision": "kind", "probabilities": {"bug": 0.9, "question": 0.1}}
        for i in range(40)
    ]
    both = read_predictions(write_jsonl(tmp_path / "m.jsonl", preds), "model")
    data = build_decision_data(ds, holdout, model=both, jev=both)
    assert sorted(r.y for r in data.rows) == [0] * 5 + [1] * 5


def test_one_tolerance_accepts_rounded_and_float32_outputs_as_given(tmp_path: Path) -> None:
    import struct

    from typestrict_pipeline import verify_audit
    from typestrict_pipeline.refund.metrics import sums_to_one

    def f32(x: float) -> float:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])

    rounded = {"fresh": 0.3333, "rotten": 0.3333, "plot": 0.3333}  # sums to 0.9999
    single = {"fresh": f32(0.7), "rotten": f32(0.2), "plot": f32(0.1)}  # float32 values
    path = write_jsonl(tmp_path / "m.jsonl", [
        {"id": "e00", "decision": "sentiment", "probabilities": rounded},
        {"id": "e01", "decision": "sentiment", "probabilities": single},
    ])
    got = read_predictions(path, "model").predictions
    assert dict(got[("sentiment", "e00")].probabilities) == rounded  # kept as given
    assert dict(got[("sentiment", "e01")].probabilities) == single
    # the same rule in the judgement and in the stand-alone verifier, decided on the exact sum
    for values in ([0.3333] * 3, [0.33] * 3, list(single.values()), [0.995, 0.015],
                   [0.98, 0.009], [0.5, 0.5, 0.011], [70.0, 30.0]):
        assert sums_to_one(values) == verify_audit.sums_to_one(values)
    assert sums_to_one([0.33] * 3) and not sums_to_one([0.98, 0.009])
    bad = write_jsonl(tmp_path / "b.jsonl", [
        {"id": "e00", "decision": "sentiment", "probabilities": {"fresh": 0.5, "rotten": 0.48,
                                                                 "plot": 0.0}}])
    with pytest.raises(PredictionsError, match=r"summing to 1 \(±0.01\), got a sum of 0.98"):
        read_predictions(bad, "model")
