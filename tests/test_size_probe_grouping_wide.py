"""The look for undeclared groups on a wide file: it reads the sample of the columns it looks at
(the first 256, ``grouping.MAX_COLUMNS``, with the text and the group), never the whole sample
of every column as Python strings. Before, 40,000 rows of 500 columns (a 385 MB CSV) took
`typestrict split` to 1.9 GB for this look alone (load and split: 190 MB); the warnings are
the ones the whole sample gives."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

from typestrict_pipeline.refund.grouping import (
    MAX_COLUMNS,
    WarningKind,
    detect_undeclared_groups,
    scan_dataset,
)
from typestrict_pipeline.refund.manifest import load_manifest

ROWS, WIDTH = 6_000, 400


def _training(tmp_path: Path, group: str | None = None) -> Path:
    header = ["id", "text", "label", "customer_id"] + [f"x{k}" for k in range(WIDTH - 5)] + ["user_id"]
    with (tmp_path / "data.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\r\n")  # CRLF, as spreadsheets write it
        w.writerow(header)
        for i in range(ROWS):
            text = f"review {i}\nsecond line, \"quoted\"" if i % 50 else "the same review"
            w.writerow([f"r{i}", text, "yes" if i % 2 else "no", f"c{i // 8}"]
                       + [f"{(i * 7 + k) % 1000 / 7:.3f}" for k in range(WIDTH - 5)] + [f"u{i // 4}"])
    manifest = {
        "manifest_version": 1, "training_id": "tr_wide", "workspace_id": "demo",
        "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text", "group": group}},
        "decisions": [{"name": "d", "question": "q?", "answer_column": "label",
                       "answers": ["no", "yes"]}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"},
                        "model": {"kind": "file", "path": "model.jsonl"}},
        "training": {"status": "succeeded"},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def _whole_sample(path: Path) -> dict[str, list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return {name: [r[i] for r in rows[1:]] for i, name in enumerate(rows[0])}


def test_the_warnings_are_those_of_every_column_of_the_sample(tmp_path: Path) -> None:
    for group in (None, "x7"):
        folder = tmp_path / str(group)
        folder.mkdir()
        manifest = load_manifest(_training(folder, group))
        scan = scan_dataset(manifest)
        expected = detect_undeclared_groups(
            _whole_sample(folder / "data.csv"), text="text", skip={"id", "label"}, group=group)
        assert scan.warnings == expected
        assert scan.sampled_rows == ROWS
        seen = [(w.kind, w.column) for w in scan.warnings]
        assert (WarningKind.NAME, "customer_id") in seen
        assert (WarningKind.REPEATS, "customer_id") in seen
        # 'user_id' is column 400: past the columns looked at, as before
        assert all(column != "user_id" for _, column in seen) and MAX_COLUMNS < WIDTH


def test_the_sample_of_a_wide_file_is_not_held_as_python_strings(tmp_path: Path) -> None:
    manifest = load_manifest(_training(tmp_path))
    tracemalloc.start()
    try:
        scan_dataset(manifest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # every cell of the sample as a string: 2.4 million cells, about 150 MiB; now 1,024 rows of the
    # 256 columns looked at
    assert peak < 64 * 1024 * 1024, f"{peak / 2**20:.0f} MiB"


def test_a_wide_parquet_file_reads_only_the_columns_looked_at(tmp_path: Path) -> None:
    """A Parquet file's sample is read as Arrow columns, but it read every column (500 columns:
    all 500 for the 256 looked at); now the first 256, the text and the group, and the warnings
    are those of every column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from typestrict_pipeline.refund import grouping

    csv_manifest = _training(tmp_path)
    whole = _whole_sample(tmp_path / "data.csv")
    pq.write_table(pa.table(whole), tmp_path / "data.parquet")
    doc = json.loads(csv_manifest.read_text(encoding="utf-8"))
    doc["dataset"].update(path="data.parquet", format="parquet")
    for group in (None, "user_id"):  # 'user_id', column 400, declared: read too
        doc["dataset"]["columns"]["group"] = group
        path = tmp_path / f"manifest_{group}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        manifest = load_manifest(path)
        scan = scan_dataset(manifest)
        assert scan.warnings == detect_undeclared_groups(whole, text="text", skip={"id", "label"}, group=group)
        assert scan.sampled_rows == ROWS
        head = grouping._head(manifest.dataset.path, manifest.dataset.format, ROWS,
                              {"text"} | ({group} if group else set()))
        assert list(head) == list(whole)[:MAX_COLUMNS] + ([group] if group else [])


def test_a_wide_json_lines_file_keeps_only_the_keys_looked_at(tmp_path: Path) -> None:
    """A JSON Lines sample was held as every row's whole object (40,000 rows of 500 keys: 2.5 GB
    for this look); now the first 256 keys in the order they appear, the text and the group, as
    columns, and the warnings are those of every key. Rows may leave keys out or bring new ones."""
    from typestrict_pipeline.refund import grouping

    csv_manifest = _training(tmp_path)
    whole = _whole_sample(tmp_path / "data.csv")
    names = list(whole)
    objects = []
    for i in range(ROWS // 4):  # 1,500 rows: enough to look at
        row = {n: whole[n][i] for n in names}
        if i % 3 == 1:
            del row["x3"]  # a key some rows leave out
        if i >= 10:
            row["late_customer"] = f"k{i // 5}"  # a key that first appears at row 11
        objects.append(row)
    with (tmp_path / "data.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(o) + "\n" for o in objects)
    keys = list(dict.fromkeys(k for o in objects for k in o))
    every = {k: [o.get(k) for o in objects] for k in keys}
    doc = json.loads(csv_manifest.read_text(encoding="utf-8"))
    doc["dataset"].update(path="data.jsonl", format="jsonl")
    for group in (None, "user_id"):  # 'user_id', key 400, declared: read too
        doc["dataset"]["columns"]["group"] = group
        path = tmp_path / f"manifest_{group}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        manifest = load_manifest(path)
        scan = scan_dataset(manifest)
        assert scan.warnings == detect_undeclared_groups(every, text="text", skip={"id", "label"}, group=group)
        assert scan.sampled_rows == ROWS // 4
        head = grouping._head(manifest.dataset.path, manifest.dataset.format, ROWS // 4,
                              {"text"} | ({group} if group else set()))
        assert list(head) == keys[:MAX_COLUMNS] + ([group] if group else [])
        assert head["x3"] == every["x3"] and all(len(v) == ROWS // 4 for v in head.values())
