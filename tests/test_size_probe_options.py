"""Multiple-choice options at customers' sizes: each row's options are checked for repeats in a
number of comparisons that grows with the options, not with their square (256 options a row
were 65,280 comparisons a row: 16 s for 20,000 rows), and the refusals say the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typestrict_pipeline.errors import DatasetError
from typestrict_pipeline.refund.dataset import _parse_options, load_dataset
from typestrict_pipeline.refund.manifest import MAX_ANSWERS, load_manifest


class _Counted(str):
    """A string that counts the equality tests made on it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__ne__(self, other)

    __hash__ = str.__hash__


def test_repeats_are_found_in_about_one_comparison_per_option() -> None:
    options = [_Counted(f"option {k}") for k in range(MAX_ANSWERS)]
    _Counted.compared = 0
    got = _parse_options(options, file="data.csv", row=1, column="opts")
    assert got == tuple(options)
    # a set: a comparison only on a hash collision (the square: 256 * 255 = 65,280)
    assert _Counted.compared <= 4 * MAX_ANSWERS


def test_repeated_options_are_still_named_sorted_once_each() -> None:
    with pytest.raises(DatasetError) as caught:
        _parse_options('["b", "a", "c", "b", "a", "b"]', file="data.csv", row=7, column="opts")
    text = str(caught.value)
    assert "row 7" in text and "column 'opts'" in text
    assert "expected each option listed once, got ['a', 'b'] listed more than once" in text
    assert "Remove the duplicate options." in text


def _training(tmp_path: Path, k: int, rows: int) -> Path:
    options = [f"opt{j}" for j in range(k)]
    lines = ["id,text,label,opts"]
    cell = '"' + json.dumps(options).replace('"', '""') + '"'
    lines += [f"r{i},text number {i},opt{i % k},{cell}" for i in range(rows)]
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = {
        "manifest_version": 1, "training_id": "tr_opts", "workspace_id": "demo",
        "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text", "group": None}},
        "decisions": [{"name": "pick", "question": "Which?", "answer_column": "label",
                       "options_column": "opts"}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"},
                        "model": {"kind": "file", "path": "model.jsonl"}},
        "training": {"status": "succeeded"},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def test_a_dataset_of_the_most_options_loads(tmp_path: Path) -> None:
    dataset = load_dataset(load_manifest(_training(tmp_path, MAX_ANSWERS, 300)))
    assert dataset.n_rows == 300
    assert dataset.decision("pick").max_options == MAX_ANSWERS


def test_more_options_than_an_audit_holds_are_refused_with_the_limit(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        load_dataset(load_manifest(_training(tmp_path, 1_000, 3)))
    text = str(caught.value)
    assert "row 1, column 'opts'" in text
    assert f"expected at most {MAX_ANSWERS} options" in text and "got 1,000" in text


def test_options_after_a_refused_cell_are_not_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first refused options cell is the one said (the rest of the file is still read for
    the checks said before it), so the options of the rows after it are not parsed: 1,000
    options a row took 39 s over 100,000 rows (a 1.2 GB file) to refuse row 1, now 13 s."""
    import typestrict_pipeline.refund.dataset as dataset_module
    from typestrict_pipeline.refund.table import parse_json_cell as real

    parsed: list[int] = []

    def counting(value: str, *, file: str, row: int) -> object:
        parsed.append(row)
        return real(value, file=file, row=row)

    monkeypatch.setattr(dataset_module, "parse_json_cell", counting)
    with pytest.raises(DatasetError) as caught:
        load_dataset(load_manifest(_training(tmp_path, 1_000, 50)))
    assert "row 1, column 'opts'" in str(caught.value) and "got 1,000" in str(caught.value)
    assert parsed == [1]
