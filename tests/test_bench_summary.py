"""`make bench`'s summary: every figure lands in one JSON file, targets marked PASS/MISS, and
the table for docs/benchmarks.md renders from it."""

import json
from pathlib import Path

import pytest

from bench import render, summary


def test_rows_merge_into_one_file_and_render_with_their_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latest.json"
    monkeypatch.setenv("TYPESTRICT_BENCH_RESULTS", str(path))
    summary.start_run()
    summary.row("bench_x", "bootstrap", "0.03 s", alternative="floor 0.01 s", ratio="3.0x",
                target="<= 3x", ok=True)
    summary.row("bench_x", "tick", "1.1 s", target="<= naive", ok=False)
    summary.row("bench_x", "tick", "0.9 s", target="<= naive", ok=True)  # a re-run replaces it
    summary.end_run(12.0)
    printed = capsys.readouterr().out
    assert "[PASS] bootstrap: 0.03 s vs floor 0.01 s -> 3.0x (target <= 3x)" in printed
    assert "[MISS] tick: 1.1 s" in printed

    data = json.loads(path.read_text())
    assert [(r["what"], r["status"]) for r in data["rows"]] == [("bootstrap", "PASS"), ("tick", "PASS")]
    assert data["run"]["seconds"] == 12.0
    table = render.render()
    assert "| bootstrap | 0.03 s | floor 0.01 s | 3.0x | <= 3x | **PASS** |" in table
    assert [r["what"] for r in summary.targets()] == ["bootstrap", "tick"]
