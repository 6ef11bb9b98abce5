"""Dataset loading: each bad input gets one clear error naming file, row and column."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from typestrict_pipeline.errors import DatasetError, NotEnoughDataError
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.manifest import TrainingManifest, load_manifest
from typestrict_pipeline.refund.types import DecisionKind

SINGLE = {
    "name": "sentiment",
    "question": "Is the review positive?",
    "answer_column": "label",
    "answers": ["no", "yes"],
}
CHOICE = {
    "name": "title",
    "question": "Which title fits?",
    "answer_column": "right",
    "options_column": "options",
}


def setup(
    tmp_path: Path,
    rows: list[dict[str, Any]],
    *,
    fmt: str = "csv",
    decisions: list[dict[str, Any]] | None = None,
    columns: dict[str, Any] | None = None,
) -> TrainingManifest:
    data = tmp_path / f"data.{fmt}"
    if fmt == "csv":
        names = list(dict.fromkeys(k for r in rows for k in r))
        with data.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=names)
            writer.writeheader()
            for r in rows:
                writer.writerow(
                    {k: (json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()}
                )
    elif fmt == "jsonl":
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), data)
    manifest = {
        "manifest_version": 1,
        "training_id": "t1",
        "workspace_id": "demo",
        "dataset": {"path": data.name, "columns": columns or {"id": "id", "text": "text"}},
        "decisions": decisions or [SINGLE],
        "predictions": {
            "jev": {"kind": "file", "path": "jev.jsonl"},
            "model": {"kind": "file", "path": "m.jsonl"},
        },
        "training": {"status": "succeeded"},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return load_manifest(path)


def good_rows() -> list[dict[str, Any]]:
    return [
        {"id": "a", "text": "I loved it", "label": "yes", "grp": "m1"},
        {"id": "b", "text": "Dull.", "label": "no", "grp": "m1"},
        {"id": "c", "text": "  fine  ", "label": "", "grp": ""},
    ]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_loads_every_format(tmp_path: Path, fmt: str) -> None:
    m = setup(tmp_path, good_rows(), fmt=fmt, columns={"id": "id", "text": "text", "group": "grp"})
    ds = load_dataset(m)
    assert [e.id for e in ds.examples] == ["a", "b", "c"]
    assert [e.row for e in ds.examples] == [1, 2, 3]
    assert ds.examples[2].text == "  fine  "  # kept exactly: it is hashed as sent
    assert [e.group for e in ds.examples] == ["m1", "m1", None]  # an empty group: its own group
    labels = ds.decision("sentiment")
    assert labels.labels == ("yes", "no", None) and labels.n_labeled == 2 and labels.n_reviewed == 0


def test_integer_ids_from_jsonl_are_text(tmp_path: Path) -> None:
    rows = [{"id": 1, "text": "x", "label": "yes"}, {"id": 2, "text": "y", "label": "no"}]
    ds = load_dataset(setup(tmp_path, rows, fmt="jsonl"))
    assert [e.id for e in ds.examples] == ["1", "2"]


def test_missing_column_suggests_a_close_name(tmp_path: Path) -> None:
    rows = [{"id": "a", "text": "x", "lable": "yes"}]
    with pytest.raises(DatasetError) as info:
        load_dataset(setup(tmp_path, rows))
    msg = str(info.value)
    assert "data.csv, column 'label': expected a column named 'label'" in msg
    assert "no such column; the file has ['id', 'text', 'lable']" in msg
    assert "(did you mean 'lable'?)" in msg
    assert info.value.column == "label" and info.value.row is None


def test_a_missing_column_among_a_million_lists_twenty_and_counts_the_rest(tmp_path: Path) -> None:
    """A header of a million columns: the message lists the first 20 and says how many more, instead
    of every name (the old message was 10.9 MB)."""
    manifest = setup(tmp_path, [{"id": "a", "text": "x", "label": "yes"}])
    names = [f"c{i}" for i in range(1_000_000)]
    manifest.dataset.path.write_text(",".join(names) + "\n" + ",".join("1" for _ in names) + "\n",
                                     encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_dataset(manifest)
    msg = str(info.value)
    assert "expected a column named 'id'" in msg
    assert "no such column; the file has ['c0', 'c1', " in msg and "'c19', … and 999,980 more]" in msg
    assert "'c20'" not in msg and len(msg) < 1_000


def test_misnamed_column_by_case(tmp_path: Path) -> None:
    rows = [{"ID": "a", "text": "x", "label": "yes"}]
    with pytest.raises(
        DatasetError, match=r"column 'id': expected a column named 'id'.*\(did you mean 'ID'\?\)"
    ):
        load_dataset(setup(tmp_path, rows))


def test_empty_text(tmp_path: Path) -> None:
    rows = [
        *good_rows(),
        {"id": "d", "text": "   ", "label": "yes"},
        {"id": "e", "text": "", "label": "no"},
    ]
    with pytest.raises(
        DatasetError,
        match=r"data.csv, row 4, column 'text': expected a non-empty text on every row, got an empty text \(rows 4, 5\)",
    ):
        load_dataset(setup(tmp_path, rows))


def test_duplicate_ids(tmp_path: Path) -> None:
    rows = [*good_rows(), {"id": "b", "text": "again", "label": "yes"}]
    with pytest.raises(
        DatasetError,
        match=r"data.csv, row 4, column 'id': expected unique ids, got 'b' again \(first at row 2\)",
    ):
        load_dataset(setup(tmp_path, rows))


def test_empty_id(tmp_path: Path) -> None:
    rows = [*good_rows(), {"id": "", "text": "z", "label": "yes"}]
    with pytest.raises(
        DatasetError, match=r"row 4, column 'id': expected a non-empty id on every row"
    ):
        load_dataset(setup(tmp_path, rows))


def test_answer_outside_the_decision(tmp_path: Path) -> None:
    rows = [
        *good_rows(),
        {"id": "d", "text": "meh", "label": "Yes"},
        {"id": "e", "text": "ok", "label": "Yes"},
    ]
    with pytest.raises(DatasetError) as info:
        load_dataset(setup(tmp_path, rows))
    msg = str(info.value)
    assert (
        "data.csv, row 4, column 'label': expected one of the answers of decision 'sentiment' ['no', 'yes'], got 'Yes' (rows 4, 5)"
    ) in msg
    assert "(did you mean 'yes'?)" in msg


def test_fewer_than_two_answers_in_the_data(tmp_path: Path) -> None:
    rows = [{"id": "a", "text": "x", "label": "yes"}, {"id": "b", "text": "y", "label": "yes"}]
    with pytest.raises(
        DatasetError,
        match=r"data.csv, column 'label': expected at least 2 different answers among the labeled examples of decision 'sentiment', got only \['yes'\]",
    ):
        load_dataset(setup(tmp_path, rows))


def test_no_labeled_and_no_reviewed_examples(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "text": "x", "label": "", "rev": ""},
        {"id": "b", "text": "y", "label": "", "rev": ""},
    ]
    m = setup(tmp_path, rows, columns={"id": "id", "text": "text", "review_label": "rev"})
    with pytest.raises(
        NotEnoughDataError,
        match=r"data.csv: expected labeled examples or examples a person labeled in review for decision 'sentiment' \(columns \['label', 'rev'\]\), got none",
    ):
        load_dataset(m)


def test_review_labels_are_checked_too(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "text": "x", "label": "", "rev": "yes"},
        {"id": "b", "text": "y", "label": "", "rev": "perhaps"},
    ]
    m = setup(tmp_path, rows, columns={"id": "id", "text": "text", "review_label": "rev"})
    with pytest.raises(
        DatasetError,
        match=r"row 2, column 'rev': expected one of the answers of decision 'sentiment'",
    ):
        load_dataset(m)


def test_reviewed_only_dataset_loads(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "text": "x", "rev": "yes"},
        {"id": "b", "text": "y", "rev": "no"},
        {"id": "c", "text": "z", "rev": ""},
    ]
    decision = {"name": "sentiment", "question": "q?", "answers": ["no", "yes"]}
    m = setup(
        tmp_path,
        rows,
        decisions=[decision],
        columns={"id": "id", "text": "text", "review_label": "rev"},
    )
    labels = load_dataset(m).decision("sentiment")
    assert labels.n_labeled == 0 and labels.reviews == ("yes", "no", None)


def mc_rows() -> list[dict[str, Any]]:
    return [
        {
            "id": "a",
            "text": "A heist film",
            "right": "Ocean's",
            "options": ["Ocean's", "Heat", "Up"],
        },
        {"id": "b", "text": "A balloon house", "right": "Up", "options": ["Up", "Cars"]},
    ]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_multiple_choice_loads(tmp_path: Path, fmt: str) -> None:
    ds = load_dataset(setup(tmp_path, mc_rows(), fmt=fmt, decisions=[CHOICE]))
    labels = ds.decision("title")
    assert labels.spec.kind is DecisionKind.MULTIPLE_CHOICE
    assert labels.options == (("Ocean's", "Heat", "Up"), ("Up", "Cars"))


def test_options_missing_on_some_examples(tmp_path: Path) -> None:
    rows = [*mc_rows(), {"id": "c", "text": "Space", "right": "", "options": ""}]
    with pytest.raises(
        DatasetError,
        match=r"data.csv, row 3, column 'options': expected options on every example of multiple-choice decision 'title', got no options \(row 3\)",
    ):
        load_dataset(setup(tmp_path, rows, decisions=[CHOICE]))


def test_right_answer_not_among_the_options(tmp_path: Path) -> None:
    rows = mc_rows()
    rows[1]["right"] = "Heat"
    with pytest.raises(
        DatasetError,
        match=r"data.csv, row 2, column 'right': expected one of this example's options for decision 'title' \['Up', 'Cars'\], got 'Heat' \(row 2\). Fix the cell, or add the right answer to the example's options",
    ):
        load_dataset(setup(tmp_path, rows, decisions=[CHOICE]))


@pytest.mark.parametrize(
    ("cell", "pattern"),
    [
        ("Up, Cars", r"row 2, column 'options': expected a JSON list of options"),
        (["Up"], r"row 2, column 'options': expected at least 2 options, got 1"),
        (["Up", "Up"], r"row 2, column 'options': expected each option listed once"),
    ],
)
def test_bad_options(tmp_path: Path, cell: Any, pattern: str) -> None:
    rows = mc_rows()
    rows[1]["options"] = cell
    with pytest.raises(DatasetError, match=pattern):
        load_dataset(setup(tmp_path, rows, decisions=[CHOICE]))


def test_missing_file_and_bad_jsonl(tmp_path: Path) -> None:
    m = setup(tmp_path, good_rows())
    m.dataset.path.unlink()
    with pytest.raises(
        DatasetError, match=r"data.csv: expected an existing dataset file, got no such file"
    ):
        load_dataset(m)
    m = setup(tmp_path, good_rows(), fmt="jsonl")
    m.dataset.path.write_text('{"id": "a", "text": "x"}\n{"id": "b", oops\n', encoding="utf-8")
    with pytest.raises(
        DatasetError,
        match=r"data.jsonl, row 2, character 13: expected valid JSON, got invalid JSON",
    ):
        load_dataset(m)


def test_non_text_cell_in_jsonl(tmp_path: Path) -> None:
    rows = [{"id": "a", "text": 3.5, "label": "yes"}]
    with pytest.raises(
        DatasetError, match=r"row 1, column 'text': expected a text as text, got float 3.5"
    ):
        load_dataset(setup(tmp_path, rows, fmt="jsonl"))


def test_csv_with_a_byte_order_mark(tmp_path: Path) -> None:
    m = setup(tmp_path, good_rows())
    raw = m.dataset.path.read_bytes()
    m.dataset.path.write_bytes(b"\xef\xbb\xbf" + raw)  # as saved by some spreadsheet tools
    assert [e.id for e in load_dataset(m).examples] == ["a", "b", "c"]


def test_a_csv_cell_past_the_bound_is_refused_by_row_by_both_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typestrict_pipeline.refund.manifest import DatasetFormat
    from typestrict_pipeline.refund.table import read_table

    monkeypatch.setenv("TYPESTRICT_MAX_CSV_CELL_CHARS", "1000")  # the default is 32 Mi characters
    rows = good_rows()
    rows[1]["text"] = "a, \"quoted\"\nlong text " + "y" * 978  # 1,000 characters, quoted in the file
    assert len(rows[1]["text"]) == 1000
    m = setup(tmp_path, rows)
    assert load_dataset(m).examples[1].text == rows[1]["text"]  # a cell of the bound is read
    rows[1]["text"] += "y"
    m = setup(tmp_path, rows)
    said = (r"data\.csv, row 2: expected cells of at most 1,000 characters, got a longer cell \(or a "
            r"quote left open, which runs the cell on to the next quote\)\. Check the quotes on that "
            r"row, or raise TYPESTRICT_MAX_CSV_CELL_CHARS")
    with pytest.raises(DatasetError, match=said):
        load_dataset(m)  # read in batches
    with pytest.raises(DatasetError, match=said):
        read_table(m.dataset.path, DatasetFormat.CSV)  # read whole
    # A quote left open on row 2 runs on through the rows below: refused after 1,000 characters.
    lines = ["id,text,label", "a,ok,yes", 'b,"open quote,no'] + [f"r{i},text {i},no" for i in range(200)]
    m.dataset.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"data\.csv, row 2: expected cells of at most 1,000"):
        load_dataset(m)


def test_a_csv_line_past_the_bound_is_refused_and_never_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracemalloc

    from typestrict_pipeline.refund.manifest import DatasetFormat
    from typestrict_pipeline.refund.table import iter_column_batches, read_table

    monkeypatch.setenv("TYPESTRICT_MAX_CSV_CELL_CHARS", "32768")  # lines of 65,536 characters
    m = setup(tmp_path, good_rows())
    with m.dataset.path.open("a", encoding="utf-8") as handle:  # 16 MB on one line, unquoted
        handle.write("d," + "x" * (16 << 20) + ",yes,m1\n")
    said = (r"data\.csv, row 4: expected lines of at most 65,536 characters \(2 times the bound "
            r"of a cell\), got a longer line \(no line end in the first 65,537 characters of line 5 of "
            r"the file\)\. Check that this is the right file, or raise TYPESTRICT_MAX_CSV_CELL_CHARS")
    tracemalloc.start()
    try:
        with pytest.raises(DatasetError, match=said):
            for _ in iter_column_batches(m.dataset.path, DatasetFormat.CSV, ["id", "text"]):
                pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 6 << 20  # the bound and a 1 MiB chunk's worth, not the 16 MB line
    with pytest.raises(DatasetError, match=said):
        read_table(m.dataset.path, DatasetFormat.CSV)
    with pytest.raises(DatasetError, match=said):
        load_dataset(m)


def test_reading_a_parquet_file_in_batches_holds_about_one_batch(tmp_path: Path) -> None:
    """The batch reader lets each row group go once read. pyarrow's pre-buffering keeps every
    column chunk it read for the reader's lifetime (apache/arrow#39808): a 100-million-row file
    held 2.4 GB that way. Here a file of 64 row groups must not be held whole."""
    import numpy as np
    import pyarrow.compute as pc

    from typestrict_pipeline.refund.manifest import DatasetFormat
    from typestrict_pipeline.refund.table import iter_column_batches

    rows, group = 64 * 8192, 8192
    numbers = pa.array(np.random.default_rng(0).integers(0, 10**12, rows)).cast(pa.string())
    ids = pc.binary_join_element_wise("r", pa.array(np.arange(rows)).cast(pa.string()), "")
    texts = pc.binary_join_element_wise("a text with the number", numbers, "and words", " ")
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"id": ids, "text": texts}), path, row_group_size=group)
    size = path.stat().st_size
    base, peak, seen = pa.total_allocated_bytes(), 0, 0
    for batch in iter_column_batches(path, DatasetFormat.PARQUET, ["id", "text"], batch_rows=group):
        seen += batch.length
        peak = max(peak, pa.total_allocated_bytes() - base)
    assert seen == rows
    assert peak < size / 4, (
        f"expected the reader to hold about one row group ({size // 64:,} bytes of the file), "
        f"got {peak:,} bytes held while reading a {size:,}-byte file"
    )


def _write_many(tmp_path: Path, ids: list[str], *, row_group_size: int) -> TrainingManifest:
    """A Parquet dataset of ``len(ids)`` rows in several row groups (distinct texts, 2 answers)."""
    n = len(ids)
    texts = [f"review number {i} of the file" for i in range(n)]
    labels = ["yes" if i % 3 else "no" for i in range(n)]
    m = setup(tmp_path, [{"id": "x", "text": "y", "label": "no"}], fmt="parquet")
    pq.write_table(pa.table({"id": ids, "text": texts, "label": labels}), m.dataset.path,
                   row_group_size=row_group_size)
    return m


def test_a_loaded_parquet_dataset_holds_no_ids_and_reads_them_again(tmp_path: Path) -> None:
    """The ids are not kept (13 bytes a row of Arrow text, 1.3 GB at 100 million rows): what needs
    them (the test ids, the examples) reads them again, from the row groups holding the rows."""
    from typestrict_pipeline.refund.holdout import split_decisions

    n = 120_000
    ids = [f"customer-review-{i:012d}-of-the-export" for i in range(n)]  # 40 bytes each
    m = _write_many(tmp_path, ids, row_group_size=10_000)
    base = pa.total_allocated_bytes()
    dataset = load_dataset(m)
    (holdout,) = split_decisions(dataset)
    held = pa.total_allocated_bytes() - base
    assert held < n * 40 / 4, f"expected the ids ({n * 40:,} bytes) not to be held, got {held:,}"
    assert len(holdout.test_ids) == 2000
    assert set(holdout.test_ids) <= set(ids)
    rows = [n - 1, 3, 55_555, 3, 10_000, 9_999]  # any order, repeats, row-group edges
    got = [(e.id, e.text, e.row) for e in dataset.examples_at(rows)]
    assert got == [(ids[r], f"review number {r} of the file", r + 1) for r in rows]
    assert dataset.positions([ids[77_777], "nope", ids[0]]) == {ids[77_777]: 77_777, ids[0]: 0}


def test_a_repeated_id_far_apart_is_found_with_its_rows(tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(70_000)]
    ids[65_000] = "r4"  # 2nd batch: first at row 5
    ids[69_999] = "r4"
    ids[66_000] = "r1"  # first at row 2, but row 65,001 comes first
    with pytest.raises(
        DatasetError,
        match=r"data.parquet, row 65001, column 'id': expected unique ids, got 'r4' again "
        r"\(first at row 5; 3 duplicate rows in all\)",
    ):
        load_dataset(_write_many(tmp_path, ids, row_group_size=20_000))


def test_ids_read_again_from_a_file_written_since_are_refused(tmp_path: Path) -> None:
    from typestrict_pipeline.refund.holdout import split_decisions

    ids = [f"r{i}" for i in range(100)]
    m = _write_many(tmp_path, ids, row_group_size=30)
    (holdout,) = split_decisions(load_dataset(m))
    pq.write_table(pa.table({"id": ids[::-1], "text": ["t"] * 100, "label": ["no"] * 100}),
                   m.dataset.path)
    with pytest.raises(DatasetError, match="expected the dataset file as it was when it was validated"):
        holdout.test_ids  # noqa: B018 - reading the ids again is what is refused
