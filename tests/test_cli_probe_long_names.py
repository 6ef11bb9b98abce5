"""A name of 10,000 characters (a pasted file, a shell variable gone wrong) is refused with its
length and its first characters, as every other value is (``values.shown``), never echoed whole:
the dataset, table and workflow names of ``data``, ``run`` and ``backtest run`` printed all of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from typestrict_pipeline.cli import main

LONG = "x" * 10_000
CSV = ("event_time,known_time,precipitation,temp_max,temp_min,wind,weather\n"
       "2015-01-01T00:00:00Z,2015-01-02T00:00:00Z,0.0,12.8,5.0,4.7,sun\n")


@pytest.mark.parametrize(("argv", "expected"), [
    (["data", "show", LONG], "expected a dataset name of lowercase letters"),
    (["data", "append", LONG, "{csv}"], "expected a dataset name of lowercase letters"),
    (["data", "register", LONG, "--workflow", "seattle_rain", "--table", "weather={csv}"],
     "expected a dataset name of lowercase letters"),
    (["data", "register", "fresh", "--workflow", LONG, "--table", "weather={csv}"],
     "expected a registered workflow, got"),
    (["data", "register", "fresh", "--workflow", "seattle_rain", "--table", LONG + "={csv}"],
     "expected one file per table workflow 'seattle_rain' reads (weather), got tables"),
    (["run", "seattle_rain", "--as-of", "2015-06-01", "--dataset", LONG], "expected a dataset name (seattle_weather"),
    (["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-01-10", "--dataset", LONG],
     "expected a dataset name (seattle_weather"),
])
def test_a_long_name_is_shown_cut_with_its_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str], expected: str,
) -> None:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    monkeypatch.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
    csv = tmp_path / "w.csv"
    csv.write_text(CSV)
    assert main([a.replace("{csv}", str(csv)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert "(10000 characters)" in err or "got tables [" in err, err  # a list: cut, with '…'
    assert len(err) < 1_000, len(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.csv"]  # nothing written
