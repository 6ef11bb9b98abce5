"""A CSV saved as UTF-16 (a spreadsheet's "Unicode text") is refused as one, with what to do (save
it as UTF-8), by ``split`` (a training's dataset) and ``data register`` / ``data append`` alike;
it was "a NUL byte on line 1 of the file (a binary or sparse file?). Check that this is the right
file", which it was. A file of zeros is still a binary or sparse file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main

WEATHER = ("event_time,known_time,precipitation,temp_max,temp_min,wind,weather\n"
           "2015-01-01T00:00:00Z,2015-01-02T00:00:00Z,0.0,12.8,5.0,4.7,sun\n")
REVIEWS = "id,text,sentiment\n" + "".join(f"r{i},text {i},{'fresh' if i % 2 else 'rotten'}\n" for i in range(40))
UTF16 = "got a UTF-16 file (NUL bytes between its letters). Save the file as UTF-8."


def _manifest(folder: Path, data: str) -> Path:
    doc = {
        "manifest_version": 1, "training_id": "t1", "workspace_id": "acme",
        "dataset": {"path": data, "columns": {"id": "id", "text": "text"}},
        "decisions": [{"name": "sentiment", "question": "Fresh or rotten?", "answer_column": "sentiment",
                       "answers": ["fresh", "rotten"]}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"}, "model": {"kind": "file", "path": "m.jsonl"}},
        "training": {"status": "succeeded"},
    }
    path = folder / "manifest.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    monkeypatch.delenv("TYPESTRICT_DATA_ROOT", raising=False)
    return tmp_path


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_split_says_a_utf16_dataset_is_utf16(home: Path, capsys: pytest.CaptureFixture[str], encoding: str) -> None:
    (home / "data.csv").write_bytes(REVIEWS.encode(encoding))
    assert main(["split", str(_manifest(home, "data.csv"))]) == 2
    err = capsys.readouterr().err
    assert f"{home / 'data.csv'}: expected a CSV file of text, {UTF16}" in err, err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])
def test_data_register_says_a_utf16_table_is_utf16(home: Path, capsys: pytest.CaptureFixture[str], encoding: str) -> None:
    (home / "w.csv").write_bytes(WEATHER.encode(encoding))
    assert main(["data", "register", "live", "--workflow", "seattle_rain", "--table", f"weather={home / 'w.csv'}"]) == 2
    err = capsys.readouterr().err
    assert f"expected a CSV file with a header row of text, {UTF16}" in err, err
    assert not (home / "home").exists()  # nothing registered


def test_a_file_of_zeros_is_still_a_binary_or_sparse_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "data.csv").write_bytes(bytes(100_000))
    assert main(["split", str(_manifest(home, "data.csv"))]) == 2
    assert ("expected a CSV file of text, got a NUL byte on line 1 of the file (a binary or sparse file?). Check "
            "that this is the right file.") in capsys.readouterr().err
    (home / "w.csv").write_bytes(bytes(100_000))
    assert main(["data", "register", "live", "--workflow", "seattle_rain", "--table", f"weather={home / 'w.csv'}"]) == 2
    assert "(a binary or sparse file?)" in capsys.readouterr().err
