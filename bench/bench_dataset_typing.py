"""Typing a registered dataset's cells: ``data register`` / ``data append`` read every cell.

What is timed (one process, this machine, the median of 3 after a warm-up):

* a number column of 1,000,000 cells (``f"{x:.3f}"`` of normal draws, seed 0) through
  ``values.data_numbers`` (Arrow's RE2 match and string-to-double cast over the column, the
  rest one by one), against two alternatives in the same run: ``data_number`` called cell by
  cell (what register did before), and the **floor**: Arrow's cast of the same cells to
  float64 with no check at all (it reads ``inf``, ``nan`` and ``1e999`` as numbers, which the
  product refuses), so the figure says what the checks cost beyond parsing;
* the kind of 10,000 columns of 200 cells (``_column_kind``, Arrow over each column) against
  the pandas string methods it replaced (the same rule, ``.str.strip()``, ``.isin``,
  ``.map(looks_numeric)``), whose per-column overhead dominated a wide file;
* ``typestrict data register`` of a 10,007-column x 200-row file and of a 200,000-row x 7-column
  file, as whole commands (one run each: they take seconds).

Run: ``.venv/bin/python -m bench.bench_dataset_typing`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from bench import summary
from bench.timing import median_time
from typestrict_pipeline.backtest.workflows.datasets import NUMBER_MISTAKES, _column_kind
from typestrict_pipeline.values import data_number, data_numbers, looks_numeric

BENCH = "bench_dataset_typing"
HEAD = "event_time,known_time,precipitation,temp_max,temp_min,wind,weather"


def kind_by_pandas(cells: pd.Series) -> str:
    """A column's kind by the rule of ``_column_kind``, read with pandas' string methods as the
    dataset module did before it read the column with Arrow at once: the alternative timed here,
    and the reference ``tests/test_values.py`` holds the new reading to."""
    filled = cells[cells.str.strip() != ""]
    if filled.empty:
        return "number"
    lowered = filled.str.strip().str.lower()
    if lowered.isin(["true", "false"]).all():
        return "bool"
    numeric = filled.map(looks_numeric)
    if numeric.any() and (numeric | lowered.isin(list(NUMBER_MISTAKES))).all():
        return "number"
    return "text"


def _numbers() -> None:
    cells = [f"{x:.3f}" for x in np.random.default_rng(0).normal(size=1_000_000)]
    ours, _ = median_time(lambda: data_numbers(cells), warm_up=True)
    by_cell, _ = median_time(lambda: [data_number(c) for c in cells], warm_up=True)
    floor, _ = median_time(lambda: pc.cast(pa.array(cells, type=pa.large_string()), pa.float64()),
                           warm_up=True)
    summary.row(BENCH, "1,000,000 number cells typed and checked (data_numbers)", f"{ours:.3f} s",
                alternative=f"data_number cell by cell {by_cell:.3f} s; Arrow's cast alone, unchecked "
                            f"(the floor) {floor:.3f} s",
                ratio=f"{by_cell / ours:.1f}x faster than cell by cell, {ours / floor:.1f}x the floor",
                numbers={"ours_s": ours, "by_cell_s": by_cell, "floor_s": floor})


def _kinds() -> None:
    rng = np.random.default_rng(1)
    columns = [pd.Series([f"{x:.3f}" for x in rng.normal(size=200)], dtype=str) for _ in range(10_000)]
    ours, _ = median_time(lambda: [_column_kind(c) for c in columns], warm_up=True)
    old, _ = median_time(lambda: [kind_by_pandas(c) for c in columns], warm_up=True)
    summary.row(BENCH, "the kind of 10,000 columns of 200 cells (_column_kind)", f"{ours:.2f} s",
                alternative=f"pandas string methods {old:.2f} s", ratio=f"{old / ours:.1f}x faster",
                numbers={"ours_s": ours, "pandas_s": old})


def _register(folder: Path, name: str, rows: list[str], head: str) -> float:
    path = folder / f"{name}.csv"
    path.write_text(head + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    env = {**os.environ, "TYPESTRICT_HOME": str(folder / f"home-{name}")}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "data", "register", name, "--workflow",
                    "seattle_rain", "--table", f"weather={path}"], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _commands() -> None:
    rng = np.random.default_rng(2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        extra = ",".join(f"c{i}" for i in range(10_000))
        wide = [f"2012-01-{1 + r % 28:02d}T{r // 28:02d}:00:00Z,2012-01-{1 + r % 28:02d}T{r // 28:02d}:00:00Z,"
                "1.0,10,5,3,rain," + ",".join(f"{x:.3f}" for x in rng.normal(size=10_000)) for r in range(200)]
        t_wide = _register(folder, "wide", wide, f"{HEAD},{extra}")
        start = pd.Timestamp("2000-01-01T00:00:00Z")
        times = pd.date_range(start, periods=200_000, freq="h").strftime("%Y-%m-%dT%H:%M:%SZ")
        known = (pd.date_range(start, periods=200_000, freq="h") + pd.Timedelta(days=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        v = rng.normal(size=(200_000, 4))
        long = [f"{e},{k},{abs(a):.2f},{b * 10:.1f},{c * 10:.1f},{abs(d) * 3:.1f},{'rain' if a > 0 else 'sun'}"
                for e, k, (a, b, c, d) in zip(times, known, v, strict=True)]
        t_long = _register(folder, "long", long, HEAD)
    summary.row(BENCH, "typestrict data register, 10,007 columns x 200 rows", f"{t_wide:.1f} s",
                numbers={"wall_s": t_wide})
    summary.row(BENCH, "typestrict data register, 200,000 rows x 7 columns", f"{t_long:.1f} s",
                numbers={"wall_s": t_long})


def main() -> None:
    _numbers()
    _kinds()
    _commands()


if __name__ == "__main__":
    main()
