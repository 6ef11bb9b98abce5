"""A dataset of long texts is read a few MB at a time, not in one batch of the whole file.

The refund data path read a dataset in batches of 65,536 rows (``refund.table.BATCH_ROWS``),
whatever the rows held: 2,000 texts of 100 kB (a 200 MB CSV, under the server's 256 MiB upload
limit) were one batch, and reading it peaked at 1.9 GB (a prediction upload for that training,
which reads the dataset again, at 2.9 GB of the API server). A batch now also ends once it holds
``refund.table.BATCH_CHARS`` characters (for Parquet, its row groups' uncompressed bytes).

Measured in a fresh process (no earlier test's memory counts): the peak of Python's allocations
(``tracemalloc``) plus the peak of Arrow's pool while ``load_dataset`` reads 40 texts of 512 Ki
characters (20 million characters, each text ending in an emoji: 80 MiB as Python strings) in
each format: 322-386 MiB before (one batch of every text, and its copies), 51-81 MiB now.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROWS = 40
CHARS = 512 * 1024
MiB = 1024 * 1024
PEAK_SCAN = 80 * MiB

SCRIPT = r"""
import json, sys, tracemalloc
from pathlib import Path
import pyarrow as pa
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.grouping import scan_dataset
from typestrict_pipeline.refund.manifest import parse_manifest

folder, name, what = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def manifest(path):
    return parse_manifest({
        "manifest_version": 1, "training_id": "t", "workspace_id": "w",
        "dataset": {"path": path, "columns": {"id": "id", "text": "text", "group": "grp"}},
        "decisions": [{"name": "d", "question": "Which?", "answer_column": "label",
                       "answers": ["yes", "no"]}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"}},
        "training": {"status": "failed", "reason": "not trained"}}, source="m", base_dir=folder)
work = load_dataset if what == "load" else scan_dataset
work(manifest("small" + Path(name).suffix))  # the modules every read loads
tracemalloc.start()
done = work(manifest(name))
python = tracemalloc.get_traced_memory()[1]
rows = done.n_rows if what == "load" else done.sampled_rows
print(json.dumps({"rows": rows, "python": python, "arrow": pa.default_memory_pool().max_memory()}))
"""


def _columns(rows: int, chars: int, tail: str = "€😀") -> dict[str, list[str]]:
    # multi-byte characters (2, 3 and 4 bytes in UTF-8) around the texts' ends
    return {"id": [f"r{i}" for i in range(rows)],
            "text": [f"é{i}" + "x" * (chars - 6 - len(tail)) + tail for i in range(rows)],
            "grp": [f"g{i // 2}" for i in range(rows)],
            "label": ["yes" if i % 3 else "no" for i in range(rows)]}


def _write(path: Path, columns: dict[str, list[str]]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.table(columns), path)
        return
    rows = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    else:
        path.write_text("id,text,grp,label\n" + "".join(f"{r['id']},{r['text']},{r['grp']},{r['label']}\n"
                                                        for r in rows), encoding="utf-8")


def _measure(tmp_path: Path, suffix: str, what: str, tail: str = "€😀") -> tuple[int, dict[str, int]]:
    _write(tmp_path / f"small{suffix}", _columns(4, 100))
    _write(tmp_path / f"long{suffix}", _columns(ROWS, CHARS, tail))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), f"long{suffix}", what],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    measured = json.loads(out.stdout)
    assert measured["rows"] == ROWS
    return measured["python"] + measured["arrow"], measured


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_long_texts_are_read_a_few_mb_at_a_time(suffix: str, tmp_path: Path) -> None:
    peak, measured = _measure(tmp_path, suffix, "load")
    assert peak < 128 * MiB, (f"{peak / MiB:.0f} MiB (Python {measured['python'] / MiB:.0f}, Arrow "
                             f"{measured['arrow'] / MiB:.0f}) to read {ROWS * CHARS / MiB:.0f} MiB of texts")


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_the_look_for_near_identical_texts_holds_no_copies_of_the_sample(suffix: str, tmp_path: Path) -> None:
    """The look for undeclared groups made when a training is created (``scan_dataset``) holds
    its sample (the first 100,000 rows) whole, as read; the texts' near-identical forms were made
    for the whole sample at once, four more copies of it, and a 200 MB CSV of 100 kB texts took
    the API server to 1.99 GB creating its training (1.26 GB with the batches above bounded).
    Now they are made 1 Mi characters at a time and kept as 16-byte digests: 40 texts of 512 Ki
    characters (1 byte each) peaked at 127 MiB of Python and Arrow allocations, 48 MiB now."""
    peak, measured = _measure(tmp_path, suffix, "scan", tail=".")  # texts of 1 byte a character
    assert peak < PEAK_SCAN, (f"{peak / MiB:.0f} MiB (Python {measured['python'] / MiB:.0f}, Arrow "
                              f"{measured['arrow'] / MiB:.0f}) to look at {ROWS * CHARS / MiB:.0f} MiB of texts")


LONG_CELL = r"""
import json, sys, tracemalloc
from pathlib import Path
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.manifest import parse_manifest
from typestrict_pipeline.refund.rowdigest import string_keys

folder = Path(sys.argv[1])
def manifest(path):
    return parse_manifest({
        "manifest_version": 1, "training_id": "t", "workspace_id": "w",
        "dataset": {"path": path, "columns": {"id": "id", "text": "text"}},
        "decisions": [{"name": "d", "question": "Which?", "answer_column": "label",
                       "answers": ["yes", "no"]}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"}},
        "training": {"status": "failed", "reason": "not trained"}}, source="m", base_dir=folder)
load_dataset(manifest("small.csv"))
tracemalloc.start()
load_dataset(manifest("long.csv"))
peak = tracemalloc.get_traced_memory()[1]
kept = tracemalloc.get_traced_memory()[0]
print(json.dumps({"peak": peak, "kept": kept}))
"""


def test_one_long_cell_is_keyed_without_powers_of_its_length(tmp_path: Path) -> None:
    """The identical-text key of a text (``rowdigest.string_keys``) asked for ``Q**i`` up to the
    text's length in bytes rounded up to a power of two, twice, cached for the process's life:
    one cell of 32 Mi characters of 2-byte characters (the CSV cell bound) took the API server to
    3.4 GB creating its training (27 s), 1.6 GB still held after. A string longer than a slice
    (64 kB) is now keyed a slice at a time, with the same key (7.4 s, 978 MB peak, 560 MB held).
    Here one cell of 4 Mi characters of 2 bytes: 544 MiB of allocations at the peak and 256 MiB
    kept after before, 88 MiB and 2 MiB now."""
    from typestrict_pipeline.refund.rowdigest import _poly_keys, string_keys

    (tmp_path / "small.csv").write_text("id,text,label\nr1,a,yes\nr2,b,no\n", encoding="utf-8")
    (tmp_path / "long.csv").write_text("id,text,label\nr1,a,yes\nr2," + "é" * (4 * MiB) + ",no\nr3,c,no\n",
                                       encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", LONG_CELL, str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    measured = json.loads(out.stdout)
    assert measured["peak"] < 160 * MiB and measured["kept"] < 16 * MiB, measured
    texts = pa.array(["x" * 70_000, "é" * 300_001 + "😀", "short"], pa.large_string())
    assert string_keys(texts).tolist() == [int(_poly_keys(texts.slice(i, 1))[0]) for i in range(3)]
