"""The columnar data path gives today's split, seed, audit rows and errors, bit for bit.

Page: "the same dataset gives the same test examples for every model version". The reference is
today's row-by-row implementation, kept verbatim in ``tests/refund_reference.py``; every dataset
here goes through both ``load_dataset`` → ``split_decisions`` and must give the same summaries
(seed included), the same role, answer, group and unit for every row, the same test examples
(id, text, group, row: what the audit hashes) or the same error, message included.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import string
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from typestrict_pipeline.errors import DatasetError, NotEnoughDataError
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import split_decisions
from typestrict_pipeline.refund.manifest import TrainingManifest, load_manifest
from typestrict_pipeline.refund.types import Role


def _reference() -> ModuleType:
    path = Path(__file__).with_name("refund_reference.py")
    spec = importlib.util.spec_from_file_location("refund_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


REF = _reference()


def _outcome(load: Any, split: Any, manifest: TrainingManifest) -> tuple[str, Any]:
    try:
        dataset = load(manifest)
        holdouts = split(dataset)
    except (DatasetError, NotEnoughDataError) as exc:
        return "error", (type(exc).__name__, str(exc))
    return "ok", (dataset, holdouts)


def assert_same(manifest: TrainingManifest) -> str:
    """Both paths on one manifest: the same result, or the same error. Returns which."""
    kind_ref, ref = _outcome(REF.load_dataset, REF.split_decisions, manifest)
    kind_new, new = _outcome(load_dataset, split_decisions, manifest)
    assert kind_new == kind_ref, (ref, new)
    if kind_ref == "error":
        assert new == ref
        return "error"
    ref_data, ref_splits = ref
    new_data, new_splits = new
    assert len(new_splits) == len(ref_splits)
    for r, n in zip(ref_splits, new_splits, strict=True):
        assert n.summary.as_dict() == r.summary.as_dict()  # seed, counts, per answer
        assert [(x.id, x.role, x.answer, x.group, x.unit) for x in n.rows] == [
            (x.id, x.role, x.answer, x.group, x.unit) for x in r.rows
        ]
        assert n.test_ids == r.test_ids
        test = [i for i, x in enumerate(r.rows) if x.role is Role.TEST]
        # what the audit hashes: the test examples' ids, texts, groups and rows
        assert [(e.id, e.text, e.group, e.row) for e in new_data.examples_at(test)] == [
            (e.id, e.text, e.group, e.row) for e in (ref_data.examples[i] for i in test)
        ]
    for r_labels, n_labels in zip(ref_data.decisions, new_data.decisions, strict=True):
        assert n_labels.labels == r_labels.labels
        assert n_labels.reviews == r_labels.reviews
        assert n_labels.options == r_labels.options
    return "ok"


def write(
    tmp_path: Path,
    rows: list[dict[str, Any]],
    fmt: str,
    decisions: list[dict[str, Any]],
    columns: dict[str, Any],
) -> TrainingManifest:
    data = tmp_path / f"data.{fmt}"
    if fmt == "csv":
        names = list(dict.fromkeys(k for r in rows for k in r)) or ["id", "text"]
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
        "manifest_version": 1, "training_id": "t1", "workspace_id": "demo",
        "dataset": {"path": data.name, "columns": columns},
        "decisions": decisions,
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"},
                        "model": {"kind": "file", "path": "m.jsonl"}},
        "training": {"status": "succeeded"},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return load_manifest(path)


SINGLE = {"name": "sentiment", "question": "q?", "answer_column": "label",
          "answers": ["no", "yes", "maybe"]}
SECOND = {"name": "topic", "question": "q?", "answer_column": "topic", "answers": ["a", "b"],
          "review_column": "topic_review"}
CHOICE = {"name": "title", "question": "q?", "answer_column": "right",
          "options_column": "options"}
REVIEWED = {"name": "reviewed", "question": "q?", "review_column": "rev", "answers": ["no", "yes"]}


# ---- the demo ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_corpus_splits_the_same(tmp_path: Path) -> None:
    from typestrict_pipeline.demo_data.build import demo_frame, write_csv

    frame = demo_frame()  # id, text, movie, sentiment, kind: two decisions, grouped by movie
    data = write_csv(frame, tmp_path / "rt.csv")
    manifest = {
        "manifest_version": 1, "training_id": "t1", "workspace_id": "demo",
        "dataset": {"path": data.name, "columns": {"id": "id", "text": "text", "group": "movie"}},
        "decisions": [
            {"name": "sentiment", "question": "q?", "answer_column": "sentiment",
             "answers": sorted({str(v) for v in frame["sentiment"].dropna()})},
            {"name": "kind", "question": "q?", "answer_column": "kind",
             "answers": sorted({str(v) for v in frame["kind"].dropna()})},
        ],
        "predictions": {"jev": {"kind": "file", "path": "j.jsonl"},
                        "model": {"kind": "file", "path": "m.jsonl"}},
        "training": {"status": "succeeded"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert assert_same(load_manifest(tmp_path / "manifest.json")) == "ok"


# ---- fixtures: the shapes the suite's datasets take, good and bad ------------------------------


def _good() -> list[dict[str, Any]]:
    rows = []
    for i in range(60):
        rows.append({
            "id": f"r{i}", "text": ["Loved it", "dull", "  fine ", 'say "hi"', "x\ty"][i % 5] + f" {i // 3}",
            "label": ["yes", "no", "maybe", ""][i % 4], "grp": ["m1", "m2", "", "m3"][i % 4],
            "topic": "ab"[i % 2], "topic_review": "", "rev": ["yes", "no", ""][i % 3],
            "right": ["red", "green", ""][i % 3], "options": ["red", "green", "blue"][: 2 + i % 2],
        })
    return rows


FIXTURES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]] = {
    "single": (_good(), [SINGLE], {"id": "id", "text": "text"}),
    "grouped": (_good(), [SINGLE], {"id": "id", "text": "text", "group": "grp"}),
    "several decisions": (_good(), [SINGLE, SECOND, CHOICE],
                          {"id": "id", "text": "text", "group": "grp"}),
    "reviewed only": (_good(), [REVIEWED], {"id": "id", "text": "text", "group": "grp"}),
    "multiple choice": (_good(), [CHOICE], {"id": "id", "text": "text"}),
    "empty id": ([{**r, "id": "" if i in (3, 9) else r["id"]} for i, r in enumerate(_good())],
                 [SINGLE], {"id": "id", "text": "text"}),
    "duplicate id": ([{**r, "id": "r1" if i in (4, 7) else r["id"]} for i, r in enumerate(_good())],
                     [SINGLE], {"id": "id", "text": "text"}),
    "invisible id": ([{**r, "id": "a\u200bb" if i == 5 else r["id"]} for i, r in enumerate(_good())],
                     [SINGLE], {"id": "id", "text": "text"}),
    "empty text": ([{**r, "text": " " if i in (2, 8) else r["text"]} for i, r in enumerate(_good())],
                   [SINGLE], {"id": "id", "text": "text"}),
    "unknown answer": ([{**r, "label": "yes!" if i % 7 == 3 else r["label"]}
                        for i, r in enumerate(_good())], [SINGLE], {"id": "id", "text": "text"}),
    "missing column": (_good(), [SINGLE], {"id": "id", "text": "txt"}),
    "one answer": ([{**r, "label": "yes"} for r in _good()], [SINGLE], {"id": "id", "text": "text"}),
    "no labels": ([{**r, "label": ""} for r in _good()], [SINGLE], {"id": "id", "text": "text"}),
    "answer not an option": ([{**r, "right": "pink" if i == 4 else r["right"]}
                              for i, r in enumerate(_good())], [CHOICE], {"id": "id", "text": "text"}),
    "one option": ([{**r, "options": ["red"] if i == 6 else r["options"]}
                    for i, r in enumerate(_good())], [CHOICE], {"id": "id", "text": "text"}),
}


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_fixture_splits_or_fails_the_same(tmp_path: Path, name: str, fmt: str) -> None:
    rows, decisions, columns = FIXTURES[name]
    assert_same(write(tmp_path, rows, fmt, decisions, columns))


def test_typed_cells_fail_the_same(tmp_path: Path) -> None:
    """JSON Lines and Parquet cells that are not text: the same message and row."""
    for i, bad in enumerate([True, 1.5, ["x"], {"a": 1}, 12]):
        rows = [{**r, "label": bad if j == 7 else r["label"]} for j, r in enumerate(_good())]
        folder = tmp_path / f"jsonl{i}"
        folder.mkdir()
        assert_same(write(folder, rows, "jsonl", [SINGLE], {"id": "id", "text": "text"}))
    rows = [{**r, "id": j} for j, r in enumerate(_good())]  # integer ids: their decimal text
    folder = tmp_path / "parquet-int"
    folder.mkdir()
    assert assert_same(write(folder, rows, "parquet", [SINGLE], {"id": "id", "text": "text"})) == "ok"


@pytest.mark.parametrize(("names", "said"), [
    ({"label": "text"}, "the column name 'text' twice (columns 2 and 3)"),
    ({"grp": "", "rev": ""}, "an empty name for columns 4 and 7"),
    ({"topic": " ", "rev": " "}, "a blank name for columns 5 and 7"),
    ({"topic": "id", "rev": "id", "grp": "x", "right": "x"}, "the column name 'id' twice (columns 1 and 5)"),
])
def test_a_header_with_a_name_twice_fails_the_same(tmp_path: Path, names: dict[str, str], said: str) -> None:
    """The reference reader finds a repeated name its own way (every name's positions first)."""
    rows = [{k: r[k] for k in ("id", "text", "label", "grp", "topic", "topic_review", "rev", "right")}
            for r in _good()]
    manifest = write(tmp_path, rows, "csv", [SINGLE], {"id": "id", "text": "text"})
    data = tmp_path / "data.csv"
    head, rest = data.read_bytes().decode("utf-8").split("\r\n", 1)
    data.write_bytes((",".join(names.get(c, c) for c in head.split(",")) + "\r\n" + rest).encode("utf-8"))
    assert assert_same(manifest) == "error"
    _, (_, message) = _outcome(load_dataset, split_decisions, manifest)
    assert said in message, message


# ---- random datasets ---------------------------------------------------------------------------

_WORDS = ["good", "Good", "bad", "film", "FILM", "ﬁne", "fine", 'a "quote"', "tab\there", "é", ""]


@st.composite
def datasets(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    n = draw(st.integers(1, 70)) if draw(st.integers(0, 9)) == 9 else draw(st.integers(8, 70))
    n_groups = draw(st.integers(0, 8))
    ids = draw(st.lists(st.text(string.ascii_lowercase + "0123456789", min_size=1, max_size=3),
                        min_size=n, max_size=n)) if draw(st.integers(0, 4)) == 4 else \
        [f"{i:03d}" for i in range(n)]  # mostly unique ids; sometimes repeats or odd ones
    rows: list[dict[str, Any]] = []
    for i in range(n):
        words = draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3))
        rows.append({
            "id": ids[i],
            "text": f"{' '.join(words)} {i}" if not draw(st.booleans()) else " ".join(words),
            "grp": "" if n_groups == 0 else draw(st.sampled_from(["", *[f"g{k}" for k in range(n_groups)]])),
            "label": ["yes", "no", "", "maybe", ""][(i + draw(st.integers(0, 4))) % 5],
            "topic": ["a", "b", ""][(i + draw(st.integers(0, 2))) % 3],
            "topic_review": ["", "a", "b"][(i + draw(st.integers(0, 2))) % 3],
            "rev": ["yes", "no", ""][(i + draw(st.integers(0, 2))) % 3],
        })
        options = draw(st.sampled_from([["red", "green"], ["red", "green", "blue"],
                                        ["green", "blue", "red"]]))
        rows[-1]["options"] = options
        rows[-1]["right"] = draw(st.sampled_from(["pink"] if draw(st.integers(0, 30)) == 30
                                                 else [*options, "", ""]))
    decisions: list[dict[str, Any]] = draw(st.sampled_from(
        [[SINGLE], [SINGLE, SECOND], [CHOICE], [REVIEWED], [SINGLE, CHOICE, REVIEWED]]))
    columns = {"id": "id", "text": "text"}
    if draw(st.booleans()):
        columns["group"] = "grp"
    return rows, decisions, columns


@settings(max_examples=80, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=datasets(), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_random_datasets_split_or_fail_the_same(
    tmp_path_factory: pytest.TempPathFactory, case: Any, fmt: str
) -> None:
    rows, decisions, columns = case
    event(assert_same(write(tmp_path_factory.mktemp("ds"), rows, fmt, decisions, columns)))


# ---- customers' sizes, in small: batches, spills to disk, passes a few rows at a time ----------


@pytest.fixture
def small_bounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[str]]:
    """Every bound of the data path made tiny, so a 60-row dataset crosses each of them: batches
    of 16 rows, spill buckets on disk past 64 bytes, passes over 7 rows and 5 values at a time,
    the group column's dictionaries merged past 3 values.
    Returns the temporary folder the spills go to (it must be left empty) and the spill folders
    made in it."""
    import tempfile

    from typestrict_pipeline.refund import dataset, holdout, spill, splitrows, table

    monkeypatch.setattr(table, "BATCH_ROWS", 16)
    monkeypatch.setattr(dataset, "MERGE_WORDS", 3)
    monkeypatch.setattr(spill, "MEMORY_BYTES", 64)
    monkeypatch.setattr(holdout, "_ROWS", 7)
    monkeypatch.setattr(splitrows, "_CHUNK", 5)
    folder = tmp_path_factory.mktemp("spill")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    made = []
    mkdtemp = tempfile.mkdtemp

    def counted(*args: Any, **kwargs: Any) -> str:
        made.append(str(mkdtemp(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", counted)
    return folder, made


@pytest.mark.parametrize("name", ["grouped", "several decisions", "reviewed only", "single",
                                  "duplicate id", "unknown answer"])
def test_small_bounds_split_or_fail_the_same(
    tmp_path: Path, small_bounds: tuple[Path, list[str]], name: str
) -> None:
    """The seed digests, text keys and id keys spilled to disk in buckets and the split's passes
    in slices give the reference's split (or error), and leave no file behind."""
    rows, decisions, columns = FIXTURES[name]
    spills, made = small_bounds
    for fmt in ("csv", "parquet"):
        folder = tmp_path / fmt
        folder.mkdir()
        assert_same(write(folder, rows, fmt, decisions, columns))
        assert made  # the bounds were crossed: records went to disk
        assert list(spills.iterdir()) == []


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=datasets())
def test_small_bounds_random_datasets(
    tmp_path_factory: pytest.TempPathFactory, small_bounds: tuple[Path, list[str]], case: Any
) -> None:
    rows, decisions, columns = case
    event(assert_same(write(tmp_path_factory.mktemp("ds"), rows, "parquet", decisions, columns)))
    assert list(small_bounds[0].iterdir()) == []


# ---- the seed's digests hashed in a worker process (refund.rowseed.SeedHasher) -----------------


@pytest.fixture
def seed_worker(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every load hashes its seed digests in a worker process (as from ``WORKER_ROWS`` rows on);
    returns a list that grows by one per worker started."""
    from typestrict_pipeline.refund import dataset, rowseed

    monkeypatch.setattr(dataset, "WORKER_ROWS", 0)
    started: list[int] = []
    start = rowseed.SeedHasher._start

    def counted(self: rowseed.SeedHasher) -> Any:
        if self._proc is None:
            started.append(1)
        return start(self)

    monkeypatch.setattr(rowseed.SeedHasher, "_start", counted)
    return started


@pytest.mark.parametrize("name", ["grouped", "several decisions", "reviewed only", "multiple choice",
                                  "duplicate id", "unknown answer", "empty text"])
def test_seed_worker_splits_or_fails_the_same(
    tmp_path: Path, seed_worker: list[int], name: str
) -> None:
    rows, decisions, columns = FIXTURES[name]
    for fmt in ("csv", "jsonl", "parquet"):
        folder = tmp_path / fmt
        folder.mkdir()
        assert_same(write(folder, rows, fmt, decisions, columns))
    assert seed_worker


def test_seed_worker_with_small_bounds(
    tmp_path: Path, small_bounds: tuple[Path, list[str]], seed_worker: list[int]
) -> None:
    """The worker spills its digests past the parent's bound, in the parent's temporary folder,
    and leaves nothing behind."""
    spills, _ = small_bounds
    for name in ("grouped", "several decisions", "multiple choice"):
        rows, decisions, columns = FIXTURES[name]
        folder = tmp_path / name
        folder.mkdir()
        assert_same(write(folder, rows, "parquet", decisions, columns))
        assert list(spills.iterdir()) == []
    assert seed_worker


@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=datasets())
def test_seed_worker_random_datasets(
    tmp_path_factory: pytest.TempPathFactory, seed_worker: list[int], case: Any
) -> None:
    rows, decisions, columns = case
    event(assert_same(write(tmp_path_factory.mktemp("ds"), rows, "parquet", decisions, columns)))


def test_seed_worker_gives_the_local_seeds_and_reports_its_failure() -> None:
    import hashlib

    from typestrict_pipeline.refund.rowseed import LocalSeeds, SeedHasher

    data = "".join(json.dumps([f"r{i}", f"t\u00e9{i}", "yes", None], ensure_ascii=False,
                              separators=(",", ":")) + "\n" for i in range(1000)).encode()
    prefixes = [b"a\0", b"b\0"]
    local, worker = LocalSeeds(2), SeedHasher(2)
    for seeds in (local, worker):
        seeds.add(0, data, 1000)
        seeds.add(0, memoryview(data)[:0], 0)
    expected = hashlib.sha256(prefixes[0] + b"".join(sorted(
        hashlib.sha256(m).digest() for m in data.split(b"\n")[:-1]))).digest()
    assert local.seeds(prefixes) == worker.seeds(prefixes) == [
        expected, hashlib.sha256(prefixes[1]).digest()]
    broken = SeedHasher(1)
    broken.add(0, b"a\nb\n", 3)  # three messages announced, two sent
    with pytest.raises(RuntimeError, match="expected 3 newline-ended messages, got 2"):
        broken.seeds([b"p"])
    broken.close()


def test_no_worker_process_hashes_in_the_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no process can be started, the load hashes the seed digests itself, the same."""
    import subprocess

    from typestrict_pipeline.refund import dataset

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no processes here")

    monkeypatch.setattr(dataset, "WORKER_ROWS", 0)
    monkeypatch.setattr(subprocess, "Popen", refused)
    rows, decisions, columns = FIXTURES["several decisions"]
    assert assert_same(write(tmp_path, rows, "parquet", decisions, columns)) == "ok"


# ---- reads of the dataset file -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_split_reads_a_grouped_file_a_few_times_whatever_its_number_of_groups(
        tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 2 tops up each answer's quota from the next groups in rank order; it read the ids of
    one group at a time, each a pass over the file up to that group's rows (below: 200 passes
    for one decision; the demo's movies: 6 for its two decisions, in every split of a verdict
    run). The ids of the next groups are read together: the split stays the same (the reference),
    and the file is read a few times, not once per group."""
    from typestrict_pipeline.refund.sources import FileTexts

    # 1,000 pairs (a 'yes' and a 'no' row) and one group of 1,000 'yes' rows: pass 1 takes 200
    # pairs ('no' is full), the big group does not fit, and pass 2 tops 'yes' up by 200 rows from
    # the next pairs, one pair at a time, until it reaches the big group (with this dataset's
    # seed, after all 200: 200 reads of the ids before)
    rows = [{"id": f"r{i}", "text": f"text {i}", "grp": f"p{i // 2}", "label": ("yes", "no")[i % 2]}
            for i in range(2_000)]
    rows += [{"id": f"r{i}", "text": f"text {i}", "grp": "zz", "label": "yes"} for i in range(2_000, 3_000)]
    manifest = write(tmp_path, rows, fmt, [SINGLE], {"id": "id", "text": "text", "group": "grp"})
    assert assert_same(manifest) == "ok"
    reads: list[str] = []
    original = FileTexts.batches

    def counted(self: FileTexts) -> Any:
        reads.append(self.column)
        return original(self)

    monkeypatch.setattr(FileTexts, "batches", counted)
    split_decisions(load_dataset(manifest))
    assert len(reads) <= 8, f"the split read the file {len(reads)} times ({reads.count('id')} for ids)"
    # A read of ids that stops short of the next units (their rows above the bound) gives the same split
    from typestrict_pipeline.refund import holdout

    monkeypatch.setattr(holdout, "_ID_ROWS", 3)
    assert assert_same(manifest) == "ok"
