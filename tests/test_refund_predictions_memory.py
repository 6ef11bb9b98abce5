"""A predictions file over many answers is held at about one tuple and one float per value.

2,000 test rows over 10,000 answers (a 543 MB JSON Lines file) took 3.4 GB and 113 s to read:
every row kept its own copy of every answer's name and a second pair per value was built
(docs/manifest.md, "Predictions at customers' sizes"). Now a file's answer names are one
``str`` each, shared by its rows, and a row of floats from 0 to 1 summing to 1 is kept as read.
The checks are unchanged: a bad row still names its first problem (tests/test_refund_predictions.py).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from typestrict_pipeline.errors import PredictionsError
from typestrict_pipeline.refund.predictions import read_predictions

ROWS, ANSWERS = 200, 500


def _write(path: Path) -> list[str]:
    answers = [f"answer_{j:05d}" for j in range(ANSWERS)]
    value = 1.0 / ANSWERS
    with path.open("w") as handle:
        for i in range(ROWS):
            probabilities = dict.fromkeys(answers, value)
            handle.write(json.dumps({"id": f"ex{i:05d}", "decision": "d", "probabilities": probabilities}) + "\n")
    return answers


def test_a_wide_predictions_file_holds_one_name_per_answer(tmp_path: Path) -> None:
    answers = _write(tmp_path / "p.jsonl")
    tracemalloc.start()
    try:
        predictions = read_predictions(tmp_path / "p.jsonl", "model")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rows = [predictions.predictions[("d", f"ex{i:05d}")] for i in range(ROWS)]
    assert [a for a, _ in rows[-1].probabilities] == answers
    assert all(v == 1.0 / ANSWERS for row in rows for _, v in row.probabilities)
    first = rows[0].probabilities
    assert all(a is b for row in rows for (a, _), (b, _) in zip(row.probabilities, first, strict=True))
    per_value = held / (ROWS * ANSWERS)
    assert per_value < 100, f"{per_value:.0f} bytes held per probability"  # a tuple (56) and a float (24)


def test_a_bad_value_in_a_wide_row_is_still_named(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "decision": "d", "probabilities": {"x": 0.5, "y": 0.25, "z": 0.25}}\n'
                    '{"id": "b", "decision": "d", "probabilities": {"x": 0.5, "y": 1, "z": -0.5}}\n')
    with pytest.raises(PredictionsError, match=r"row 2, column 'probabilities.z'.*a negative value -0.5"):
        read_predictions(path, "model")
