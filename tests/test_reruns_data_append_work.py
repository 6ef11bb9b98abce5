"""An append writes the rows it adds, never the whole table again.

``append_rows`` read the stored table, joined the new rows to it and wrote every row out as CSV
again: a 10-row append to a 500,000-row table took 3.0 s, 2.5 s of it re-writing rows already
stored (through the API: 5.6 s and +170 MB of the server's peak RSS; docs/api.md, "Point-in-time
datasets at customers' sizes"). Now the stored bytes are copied as they are and
only the new rows are written as CSV: the rows known before keep their bytes exactly (they were
re-formatted: a whole number ``7`` became ``7.0`` once a new row held ``2.5``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.backtest.workflows import dataset_csv
from typestrict_pipeline.backtest.workflows.datasets import (
    append_rows,
    load_registered,
    register_dataset,
)

HEAD = "event_time,known_time,precipitation,temp_max,temp_min,wind,weather\n"


def _rows(start: dt.datetime, n: int, wind: str) -> str:
    out = []
    for i in range(n):
        at = start + dt.timedelta(hours=i)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        out.append(f"{stamp},{stamp},0.5,10,2,{wind},rain\n")
    return "".join(out)


def test_an_append_writes_only_the_rows_it_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "datasets"
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    (tmp_path / "start.csv").write_text(HEAD + _rows(start, 2_000, "7"))
    register_dataset("live", "seattle_rain", {"weather": tmp_path / "start.csv"}, base=base)
    stored = (base / "live" / "weather.csv").read_bytes()

    written: list[int] = []
    lines = dataset_csv.csv_lines

    def counting(cells: Sequence[Any]) -> bytes:
        written.append(len(cells[0]))
        return lines(cells)

    monkeypatch.setattr(dataset_csv, "csv_lines", counting)  # every row written as CSV goes through it
    (tmp_path / "more.csv").write_text(HEAD + _rows(start + dt.timedelta(days=200), 3, "2.5"))
    result = append_rows("live", "weather", tmp_path / "more.csv", base=base)

    assert (result.added, result.rows) == (3, 2_003)
    assert written == [3], f"rows written as CSV: {written}"
    after = (base / "live" / "weather.csv").read_bytes()
    assert after.startswith(stored) and after.count(b"\n") == stored.count(b"\n") + 3
    table = load_registered("live", base=base)["weather"]
    assert table.n_rows == 2_003 and table.cells("wind").tolist()[-4:] == [7.0, 2.5, 2.5, 2.5]
    assert list(tmp_path.glob("datasets/live/.staged.*")) == []
