"""A verdict run reads its dataset file a bounded number of times (``refund.runreads``).

Every step of a run gets its own copy of the dataset and of the split, and each re-read the ids
and texts it needed from the file: about 37 passes over the file for a training of two decisions
(each decision's test ids, their rows, their texts, in each step). The run's steps now share
the columns read once, within a byte budget, and the audit is the same bytes either way.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from typestrict_pipeline.errors import DatasetError
from typestrict_pipeline.refund import runreads, table
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import split_decisions
from typestrict_pipeline.refund.manifest import load_manifest

_ASSETS = Path(__file__).with_name("test_refund_assets.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_for_reads", _ASSETS)
assert _spec is not None and _spec.loader is not None
assets_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assets_tests)
support = assets_tests.support

ROWS = 2_000


class Reads:
    """Data rows the CSV reader gave (``ROWS`` of them: one pass) and files it opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records = 0
        self.opens = 0
        records, opener = table._csv_records, table._open_csv_binary

        def counted(reader: Iterator[list[str]], file: str) -> Iterator[Any]:
            for item in records(reader, file):
                self.records += item[1] > 0  # row 0: the header of a file without rows
                yield item

        def counted_open(path: Path, module: str | None) -> Any:
            self.opens += 1
            return opener(path, module)

        monkeypatch.setattr(table, "_csv_records", counted)
        monkeypatch.setattr(table, "_open_csv_binary", counted_open)

    @property
    def passes(self) -> float:
        return self.records / ROWS


TEXT_CHARS = 600
"""Each row's text: the texts (1.2 MB) pass a budget of 1 MiB that the ids (28 kB) and the
test rows' texts (about 600 kB) fit in."""


def _training(home: Path) -> None:
    """Two decisions over ``ROWS`` rows in groups of 4, texts of ``TEXT_CHARS`` characters."""
    support.make_training(home / "trainings", "t1", n=ROWS, decisions=("sentiment", "topic"))
    data = home / "trainings" / "t1" / "data.csv"
    lines = data.read_text(encoding="utf-8").splitlines()
    rows = [line.split(",") for line in lines]
    for row in rows[1:]:
        row[1] = (row[1] + " " + "lorem ipsum " * TEXT_CHARS)[:TEXT_CHARS]
    data.write_text("".join(",".join(row) + "\n" for row in rows), encoding="utf-8")


@dataclass(frozen=True)
class SharedRun:
    """The verdict run of :func:`_training` with every column kept (the default budget)."""

    records: int
    opens: int
    audit: bytes


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """One run for the module's tests that need the default budget's reads or its audit."""
    home = tmp_path_factory.mktemp("shared")
    _training(home)
    with pytest.MonkeyPatch.context() as mp:
        reads = Reads(mp)
        assert assets_tests.run_training(home, "t1").success
    return SharedRun(reads.records, reads.opens, (home / "audits" / "t1.json").read_bytes())


def test_a_verdict_run_reads_its_dataset_file_twice_whatever_its_decisions_and_steps(
        shared_run: SharedRun) -> None:
    """One pass validates the file (and keeps its ids and texts for the run), one reads its
    first rows for the undeclared-groups look (``grouping.scan_dataset``: the header with one
    row, then at most 100,000 rows); the split, both systems' questions, the metrics and the
    audit read no more (before: 37 passes)."""
    assert shared_run.records <= 2 * ROWS + 1, f"{shared_run.records / ROWS:.1f} passes over the file"
    assert shared_run.opens <= 3, f"the file opened {shared_run.opens} times"


@pytest.mark.parametrize(("budget", "passes"), [
    (1 << 20, 3),  # the texts do not fit whole: the test rows' texts are read once, then kept
    (1, 40),  # nothing fits: every step reads again, as before the shared reads
])
def test_a_smaller_budget_reads_more_and_the_audit_is_the_same_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_run: SharedRun, budget: int,
        passes: int) -> None:
    """Whatever the budget keeps, the split, the predictions asked, the metrics and the audit
    are the same, bit for bit, as when the file's columns are all kept."""
    _training(tmp_path)
    monkeypatch.setattr(runreads, "SHARED_READ_BYTES", budget)
    reads = Reads(monkeypatch)
    assert assets_tests.run_training(tmp_path, "t1").success
    assert reads.records <= passes * ROWS + 1, f"{reads.passes:.1f} passes over the file"
    assert (tmp_path / "audits" / "t1.json").read_bytes() == shared_run.audit


def _dataset(tmp_path: Path) -> tuple[Path, Any]:
    _training(tmp_path)
    manifest = load_manifest(tmp_path / "trainings" / "t1" / "manifest.json")
    return manifest.dataset.path, manifest


def test_a_file_changed_within_the_run_is_refused_even_when_its_columns_are_kept(
        tmp_path: Path) -> None:
    path, manifest = _dataset(tmp_path)
    with runreads.shared_reads("run-a") as cache:
        dataset = load_dataset(manifest)
        assert cache.used > 0  # the ids and texts are kept
        assert dataset.texts.at(np.array([0]))[0].startswith("example 0 of training t1 lorem")
        path.write_text(path.read_text(encoding="utf-8") + "ex9999,late,g0,yes,a\n", encoding="utf-8")
        with pytest.raises(DatasetError, match="a file that changed or went away since"):
            dataset.texts.at(np.array([0]))
    with runreads.shared_reads("run-b", budget=1_000) as cache:  # too small for the columns
        dataset = load_dataset(manifest)
        assert dataset.id_source.at(np.array([0])) == ["ex0000"]
        assert cache.kept_rows(dataset.id_source.key)  # type: ignore[attr-defined]
        path.write_text(path.read_text(encoding="utf-8")[:-1] + "x\n", encoding="utf-8")
        with pytest.raises(DatasetError, match="a file that changed or went away since"):
            dataset.id_source.at(np.array([0]))  # a row kept, but the file changed
        with pytest.raises(DatasetError, match="a file that changed or went away since"):
            dataset.positions(["ex0000"])


def test_the_shared_reads_are_one_runs_and_give_what_the_file_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scope's columns serve that scope only; the next scope drops them, and outside a scope
    nothing is kept. What they give is what reading the file gives."""
    _, manifest = _dataset(tmp_path)
    plain = load_dataset(manifest)
    reference = split_decisions(plain)
    with runreads.shared_reads("run-a"):
        dataset = load_dataset(manifest)
        reads = Reads(monkeypatch)
        assert split_decisions(dataset) == reference
        assert dataset.ids.equals(plain.ids) and dataset.texts.values().equals(plain.texts.values())
        assert dataset.examples == plain.examples
        assert reads.records == 0  # all from the kept columns
    with runreads.shared_reads("run-b") as other:
        assert other.used == 0
        dataset.texts.at(np.array([1]))
        assert reads.records == ROWS  # read again, and kept for run-b
        assert other.used > 0
    runreads.drop_shared_reads("run-b")
    assert runreads.active_cache() is None
    with runreads.shared_reads("run-b") as again:
        assert again.used == 0


def test_a_column_larger_than_the_budget_keeps_the_rows_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The texts do not fit whole: the rows read by position are kept (up to the budget), and
    only a row not kept yet is read from the file again."""
    _, manifest = _dataset(tmp_path)
    texts = load_dataset(manifest).texts.values().to_pylist()  # outside the scope: the file's
    rows = np.array([0, 5, 1_999])
    many = np.arange(0, ROWS, 2)  # 1,000 rows of 600 characters: more than the room left
    with runreads.shared_reads("run-small", budget=100_000) as cache:
        dataset = load_dataset(manifest)
        ids_key, texts_key = dataset.id_source.key, dataset.texts.key  # type: ignore[attr-defined]
        assert cache.get(ids_key) is not None  # 2,000 ids of 6 characters fit
        assert cache.get(texts_key) is None and cache.refused(texts_key)
        reads = Reads(monkeypatch)
        assert dataset.texts.at(rows) == [texts[i] for i in rows]
        assert reads.records == ROWS  # read from the file, once
        assert dataset.texts.at(np.array([5])) == [texts[5]]
        assert dataset.texts.at(rows) == [texts[i] for i in rows]
        assert reads.records == ROWS  # kept
        assert dataset.texts.at(many) == [texts[i] for i in many]
        assert reads.records == 2 * ROWS and cache.used <= 100_000
        assert dataset.positions(["ex0005", "ex0000"]) == {"ex0000": 0, "ex0005": 5}
        dataset.ids.to_pylist()
        assert reads.records == 2 * ROWS  # the ids are kept whole
    runreads.drop_shared_reads("run-small")


def test_the_rows_of_ids_kept_are_found_without_a_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither column fits: the ids taken by position are kept, and the rows of those ids are
    found among them (the ids are unique); an id not kept is looked for in the file."""
    _, manifest = _dataset(tmp_path)
    with runreads.shared_reads("run-tiny", budget=20_000) as cache:
        dataset = load_dataset(manifest)
        assert cache.used == 0
        reads = Reads(monkeypatch)
        assert dataset.id_source.at(np.array([3, 7])) == ["ex0003", "ex0007"]
        assert reads.records == ROWS
        assert dataset.positions(["ex0007", "ex0003"]) == {"ex0003": 3, "ex0007": 7}
        assert list(dataset.positions(["ex0007", "ex0003"])) == ["ex0003", "ex0007"]  # row order
        assert reads.records == ROWS
        assert dataset.positions(["ex0007", "ex0008", "nope"]) == {"ex0007": 7, "ex0008": 8}
        assert reads.records == 2 * ROWS
    runreads.drop_shared_reads("run-tiny")


def test_the_apis_split_reads_the_file_twice_and_leaves_a_runs_reads_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET /v1/trainings/{id}/split``'s first view (``api.splits.compute_split``) reads the
    file once to validate it and keep its columns, once for the undeclared-groups look (before:
    five passes, one more for each decision's test rows and one for every id); what it answers
    is the split the file gives, and a run's shared reads are neither used nor dropped."""
    from typestrict_pipeline.api.splits import compute_split

    _, manifest = _dataset(tmp_path)
    with monkeypatch.context() as nothing_kept:  # every read from the file: the file's answers
        nothing_kept.setattr(runreads, "SHARED_READ_BYTES", 1)
        reference = compute_split("t1", manifest)
    with runreads.shared_reads("run-kept") as run_cache:
        run_cache.put(runreads.ColumnKey("/x.csv", "csv", "id", 1, 1), [])
    reads = Reads(monkeypatch)
    assert compute_split("t1", manifest) == reference
    assert reads.records <= 2 * ROWS + 1, f"{reads.passes:.1f} passes over the file"
    assert runreads.active_cache() is None  # nothing kept past the request
    with runreads.shared_reads("run-kept") as again:
        assert again is run_cache  # the run's columns are where they were
    runreads.drop_shared_reads("run-kept")


def test_checking_a_training_reads_the_file_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_training`` (``typestrict training check``, the training sensor's screen, the
    verdict run's first step): the validation's pass keeps the columns for the split, the test
    rows and each file of predictions checked against them; the undeclared-groups look reads the
    file's head once more."""
    from typestrict_pipeline.refund.preflight import check_training

    _, manifest = _dataset(tmp_path)
    reads = Reads(monkeypatch)
    checked = check_training(manifest, reach=lambda *a, **k: None, something_to_train_on=True)
    assert checked.dataset is not None and len(checked.holdouts) == 2
    assert reads.records <= 2 * ROWS + 1, f"{reads.passes:.1f} passes over the file"
    assert runreads.active_cache() is None


@pytest.mark.parametrize("system", ["jev", "model"])
def test_a_missing_predictions_file_is_said_before_the_dataset_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, system: str) -> None:
    """A predictions file that is not there is found by its name: the check says so without
    reading the dataset (it read and split the whole dataset first: 9 s and 700 MB at 1,000,000
    rows, to say that a file named in the manifest did not exist)."""
    from typestrict_pipeline.errors import PredictionsError
    from typestrict_pipeline.refund.manifest import PredictionsFileSource
    from typestrict_pipeline.refund.preflight import check_training, screen_training

    _, manifest = _dataset(tmp_path)
    source = manifest.jev if system == "jev" else manifest.model
    assert isinstance(source, PredictionsFileSource)
    source.path.unlink()
    reads = Reads(monkeypatch)
    with pytest.raises(PredictionsError, match=rf"expected an existing predictions file, got no such file. "
                                               rf"Check where {system}'s predictions are in the manifest"):
        check_training(manifest, reach=lambda *a, **k: None, something_to_train_on=True)
    message = screen_training(manifest)
    assert message is not None and "expected an existing predictions file" in message
    assert (reads.opens, reads.records) == (0, 0), "the dataset was read before the missing file was said"


def test_posting_predictions_reads_the_dataset_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``POST /v1/trainings/{id}/predictions`` checks them against the split (the dataset read,
    split, the stated ids attested, each prediction's row found): one pass over the file, whose
    ids are kept for the checks (before: three). A real uvicorn server in this process."""
    spec = importlib.util.spec_from_file_location("api_support_for_reads", Path(__file__).with_name("test_api_support.py"))
    assert spec is not None and spec.loader is not None
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    csv, jev = api.make_dataset(tmp_path, n=ROWS)
    key = api.new_key(store_url, "acme", credits=1)
    with api.ApiServer(store_url, tmp_path / "home", jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as c:
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        made = c.post("/v1/trainings", json=api.TRAINING_BODY)
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        test_ids = set(c.get(f"/v1/trainings/{tid}/split").json()["decisions"][0]["test_ids"])
        preds = [p for p in api.model_predictions(csv, skill=0.9) if p["id"] in test_ids]
        reads = Reads(monkeypatch)
        posted = c.post(f"/v1/trainings/{tid}/predictions", json={"predictions": preds})
        assert posted.status_code == 202, posted.text
    assert reads.records <= ROWS + 1, f"{reads.passes:.1f} passes over the file"


def test_blocks_of_kept_reads_at_once_share_one_allowance() -> None:
    """Two requests reading at once (two threads) keep at most ``SHARED_READ_BYTES`` between
    them: the second finds the allowance taken and keeps nothing (it reads the file as before);
    once the first ends, the next block has it whole."""
    import threading

    entered, leave = threading.Event(), threading.Event()

    def first() -> None:
        with runreads.reads_within() as kept:
            assert kept.budget == runreads.SHARED_READ_BYTES
            entered.set()
            leave.wait(30)

    other = threading.Thread(target=first)
    other.start()
    try:
        assert entered.wait(30)
        with runreads.reads_within() as second:
            assert second.budget == 0
            assert not second.put(runreads.ColumnKey("/d.csv", "csv", "id", 1, 1),
                                  [pa.array(["a"], pa.large_string())])
    finally:
        leave.set()
        other.join(30)
    with runreads.reads_within() as after:
        assert after.budget == runreads.SHARED_READ_BYTES
