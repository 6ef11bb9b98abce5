"""Registering a dataset holds memory in proportion to the file, a small multiple of it.

Registering typed every cell in Python, as a data frame of text: about 14 times the file's size
in memory (docs/api.md, "Point-in-time datasets at customers' sizes"). The file is now read into
Arrow strings a chunk of rows at a time and each column typed at once. Measured in a fresh
process (so no earlier test's memory counts): the peak of Python's allocations (numpy's and
pandas' included, ``tracemalloc``) plus the peak of Arrow's pool, registering 50,000 rows
(about 3 MB) of the ``seattle_rain`` table, in chunks of 4,096 rows (3.4 times the file; the previous code 20.3). The file's bytes are read by a plain ``read_bytes``
here: the bounded reader every data file goes through reserves its bound (1 GiB) of address space
for one read, which ``tracemalloc`` counts though no page of it is touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROWS = 50_000
LIMIT = 5.0  # times the file's size

SCRIPT = r"""
import json, sys, tracemalloc, datetime as dt
from pathlib import Path
import pandas, pyarrow as pa, pyarrow.compute  # loaded in the server before any request
import typestrict_pipeline.files as files
from typestrict_pipeline.backtest.workflows import dataset_rows
from typestrict_pipeline.backtest.workflows.datasets import register_dataset

dataset_rows.CHUNK_ROWS = 4_096  # a quarter of the product's chunk, so 50,000 rows are 13 chunks

files.read_data_file = lambda path, **kw: Path(path).read_bytes()
src, base = Path(sys.argv[1]), Path(sys.argv[2])
register_dataset("warm", "seattle_rain", {"weather": src.with_name("small.csv")}, base=base,
                 now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))  # the modules every registration loads
tracemalloc.start()
register_dataset("big", "seattle_rain", {"weather": src}, base=base, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
print(json.dumps({"python": tracemalloc.get_traced_memory()[1], "arrow": pa.default_memory_pool().max_memory()}))
"""


def _write(path: Path, rows: int = ROWS) -> None:
    rng = np.random.default_rng(0)
    times = pd.date_range("2000-01-01T00:00:00Z", periods=rows, freq="min")
    frame = pd.DataFrame({
        "event_time": times.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "known_time": (times + pd.Timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "precipitation": np.round(np.abs(rng.normal(size=rows)) * 3, 1),
        "temp_max": np.round(rng.normal(size=rows) * 10, 1),
        "temp_min": np.round(rng.normal(size=rows) * 5, 1),
        "wind": np.round(np.abs(rng.normal(size=rows)) * 3, 1),
        "weather": np.array(["drizzle", "rain", "sun", "snow", "fog"])[rng.integers(0, 5, rows)],
    })
    frame.to_csv(path, index=False)


def test_registering_holds_a_small_multiple_of_the_file(tmp_path: Path) -> None:
    src = tmp_path / "weather.csv"
    _write(src)
    _write(tmp_path / "small.csv", 10)
    size = src.stat().st_size
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), *sys.path])}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(src), str(tmp_path / "ds")], env=env,
                         cwd=tmp_path, capture_output=True, text=True, check=True, timeout=300)
    peak = json.loads(out.stdout.strip().splitlines()[-1])
    held = peak["python"] + peak["arrow"]
    assert held < LIMIT * size, f"{held / size:.1f} times the file ({peak}, file {size:,} bytes)"
    stored = (tmp_path / "ds" / "big" / "weather.csv").read_bytes()
    assert stored.count(b"\n") == ROWS + 1
