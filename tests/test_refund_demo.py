"""The refund demo part, end to end on its two fast trainings (the full run is `make demo`)."""

import json
from pathlib import Path

import pytest

from demo.refund import JEV_KEY_ENV, run


@pytest.mark.slow
def test_the_demo_runs_its_fast_trainings_through_dagster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "demo"
    root.mkdir()
    # run() sets these for the rest of `python -m demo`; give monkeypatch something to restore.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    monkeypatch.delenv(JEV_KEY_ENV, raising=False)

    assert run(root, only=("rt-tiny", "rt-failed")) == 0
    out = capsys.readouterr().out

    assert "13,905 rows, 1,449 movies; fresh 7,403, rotten 5,405, plot 1,097" in out
    assert "Jev (demo stand-in)" in out
    assert "training_sensor tick: found 2 new manifests" in out
    assert "verdict: REFUND (the credit comes back)" in out
    assert "  why: The credit comes back: the model did not beat Jev: worse than Jev on average (G = -0.2393" in out
    assert "verdict: FAILED (the credit comes back)" in out
    assert out.count("every number matches") == 2
    assert "| macro_f1 |" in out and "G <= 0 in" in out
    # grouped by movie: the group bootstrap, with how q05 moved against row resampling
    assert "unit: group" in out and "whole movies moved it by" in out
    assert (root / "dagster_home" / "dagster.yaml").is_file()
    for tid, verdict in (("rt-tiny", "refund"), ("rt-failed", "failed")):
        audit = json.loads((root / "audits" / f"{tid}.json").read_text())
        assert audit["overall"]["verdict"] == verdict
        for d in audit["decisions"]:
            assert d["report"]["bootstrap"]["unit"] == "group" and "group_sha256" in d["rows"]
        assert audit["jev_id"] == ("jev-demo-lexicon-v1" if tid == "rt-tiny" else "none")
    assert "credits: workspace 'demo' balance after settlement: 2" in out
