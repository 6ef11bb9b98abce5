"""Registering and appending a point-in-time dataset at customers' sizes.

What is measured, each in a fresh interpreter (so one run's memory is not the next one's): the
wall time and the peak RSS above the interpreter's RSS before the call (``VmHWM`` minus
``VmRSS``, pandas and pyarrow already loaded, as in a server):

* ``register_dataset`` of a ``seattle_rain`` table of N rows written by pyarrow (7 columns,
  about 70 bytes a row: the table docs/api.md measured through the API);
* **the floor**: ``pyarrow.csv.read_csv`` of the same file (every column typed by Arrow, no
  check) then ``pyarrow.csv.write_csv`` of it, what reading and writing the file costs at all;
* ``append_rows`` of 10 rows to that registered table.

N is 500,000 by default and 500,000 then 2,500,000 with ``TYPESTRICT_BENCH_FULL=1``.

Run: ``.venv/bin/python -m bench.bench_dataset_sizes`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import summary

BENCH = "bench_dataset_sizes"
ROOT = Path(__file__).resolve().parent.parent

PRELUDE = r"""
import json, sys, time, datetime as dt
from pathlib import Path
import pandas, pyarrow, pyarrow.compute, pyarrow.csv

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024

def measured(fn):
    before = status("VmRSS")
    started = time.perf_counter()
    fn()
    print(json.dumps({"wall_s": time.perf_counter() - started, "peak_mb": status("VmHWM") - before}))
"""

WRITE = r"""
import numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.csv as pacsv
n, out, start = int(sys.argv[1]), sys.argv[2], np.datetime64(sys.argv[3], "s")
rng = np.random.default_rng(0)
ev = start + np.arange(n).astype("timedelta64[m]")
text = lambda a: pc.binary_join_element_wise(pa.array(np.datetime_as_string(a, unit="s")), "Z", "")
pacsv.write_csv(pa.table({"event_time": text(ev), "known_time": text(ev + np.timedelta64(1, "D")),
    "precipitation": np.round(np.abs(rng.normal(size=n)) * 3, 1), "temp_max": np.round(rng.normal(size=n) * 10, 1),
    "temp_min": np.round(rng.normal(size=n) * 5, 1), "wind": np.round(np.abs(rng.normal(size=n)) * 3, 1),
    "weather": np.array(["drizzle", "rain", "sun", "snow", "fog"])[rng.integers(0, 5, n)]}), out)
"""

REGISTER = r"""
from typestrict_pipeline.backtest.workflows.datasets import register_dataset
from typestrict_pipeline.backtest.workflows import dataset_rows
register_dataset("warm", "seattle_rain", {"weather": Path(sys.argv[3])}, base=Path(sys.argv[2]))
measured(lambda: register_dataset("big", "seattle_rain", {"weather": Path(sys.argv[1])}, base=Path(sys.argv[2])))
"""

FLOOR = r"""
measured(lambda: pyarrow.csv.write_csv(pyarrow.csv.read_csv(sys.argv[1]), sys.argv[2]))
"""

APPEND = r"""
from typestrict_pipeline.backtest.workflows.datasets import append_rows
measured(lambda: append_rows("big", "weather", Path(sys.argv[1]), base=Path(sys.argv[2])))
"""


def _run(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PRELUDE + code, *args], cwd=ROOT, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    result: dict[str, float] = json.loads(lines[-1]) if lines else {}
    return result


def _sizes(rows: int, folder: Path) -> None:
    src, small, more = folder / f"w{rows}.csv", folder / "small.csv", folder / "more.csv"
    _run(WRITE, str(rows), str(src), "2000-01-01T00:00:00")
    _run(WRITE, "10", str(small), "2000-01-01T00:00:00")
    _run(WRITE, "10", str(more), "2010-01-01T00:00:00")
    mb = src.stat().st_size / 1e6
    ours = _run(REGISTER, str(src), str(folder / f"ds{rows}"), str(small))
    floor = _run(FLOOR, str(src), str(folder / "floor.csv"))
    summary.row(BENCH, f"register_dataset, {rows:,} rows ({mb:.0f} MB)",
                f"{ours['wall_s']:.1f} s; +{ours['peak_mb']:.0f} MB peak RSS ({ours['peak_mb'] / mb:.1f}x the file)",
                alternative=f"pyarrow read_csv + write_csv, no check (the floor) {floor['wall_s']:.1f} s; "
                            f"+{floor['peak_mb']:.0f} MB",
                ratio=f"{ours['wall_s'] / floor['wall_s']:.1f}x the floor's time",
                numbers={"rows": rows, "file_mb": mb, **{f"ours_{k}": v for k, v in ours.items()},
                         **{f"floor_{k}": v for k, v in floor.items()}})
    added = _run(APPEND, str(more), str(folder / f"ds{rows}"))
    summary.row(BENCH, f"append_rows, 10 rows to {rows:,}", f"{added['wall_s']:.2f} s; +{added['peak_mb']:.0f} MB peak RSS",
                numbers={"rows": rows, **added})


def main() -> None:
    full = bool(os.environ.get("TYPESTRICT_BENCH_FULL"))
    with tempfile.TemporaryDirectory() as tmp:
        for rows in (500_000, 2_500_000) if full else (500_000,):
            _sizes(rows, Path(tmp))


if __name__ == "__main__":
    main()
