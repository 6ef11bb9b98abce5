"""A verdict run reads its dataset file a bounded number of times (``refund.runreads``).

Every step of a run gets its own copy of the dataset and of the split, and each re-read the ids
and texts it needed from the file: about 37 passes over the file for a training of two decisions
(each decision's test ids, their rows, their texts, in each step). The run's steps now share
the columns read once, within a byte budget, and the audit is the same bytes either way.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
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


def _training(home: Path) -> None:
    support.make_training(home / "trainings", "t1", n=ROWS, decisions=("sentiment", "topic"))


def test_a_verdict_run_reads_its_dataset_file_twice_whatever_its_decisions_and_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass validates the file (and keeps its ids and texts for the run), one reads its
    first rows for the undeclared-groups look (``grouping.scan_dataset``: the header with one
    row, then at most 100,000 rows); the split, both systems' questions, the metrics and the
    audit read no more (before: 37 passes)."""
    _training(tmp_path)
    reads = Reads(monkeypatch)
    result = assets_tests.run_training(tmp_path, "t1")
    assert result.success
    assert reads.records <= 2 * ROWS + 1, f"{reads.passes:.1f} passes over the file"
    assert reads.opens <= 3, f"the file opened {reads.opens} times"


def test_the_audit_is_the_same_bytes_with_or_without_the_shared_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget too small for any column reads the file as before (every step again): the
    split, the predictions asked, the metrics and the audit are the same, bit for bit."""
    shared, alone = tmp_path / "shared", tmp_path / "alone"
    for home in (shared, alone):
        _training(home)
    assert assets_tests.run_training(shared, "t1").success
    monkeypatch.setattr(runreads, "SHARED_READ_BYTES", 1)
    reads = Reads(monkeypatch)
    assert assets_tests.run_training(alone, "t1").success
    assert reads.passes > 10  # the old way: each step reads again
    assert (shared / "audits" / "t1.json").read_bytes() == (alone / "audits" / "t1.json").read_bytes()


def _dataset(tmp_path: Path) -> tuple[Path, Any]:
    manifest_path = support.make_training(tmp_path / "trainings", "t1", n=ROWS)
    manifest = load_manifest(manifest_path)
    return manifest.dataset.path, manifest


def test_a_file_changed_within_the_run_is_refused_even_when_its_columns_are_kept(
        tmp_path: Path) -> None:
    path, manifest = _dataset(tmp_path)
    with runreads.shared_reads("run-a") as cache:
        dataset = load_dataset(manifest)
        assert cache.used > 0  # the ids and texts are kept
        assert dataset.texts.at(np.array([0])) == ["example 0 of training t1"]
        path.write_text(path.read_text(encoding="utf-8") + "ex9999,late,g0,yes\n", encoding="utf-8")
        with pytest.raises(DatasetError, match="a file that changed or went away since"):
            dataset.texts.at(np.array([0]))


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


def test_a_column_larger_than_the_budget_is_read_from_the_file_each_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, manifest = _dataset(tmp_path)
    with runreads.shared_reads("run-small", budget=30_000) as cache:
        dataset = load_dataset(manifest)
        ids_key, texts_key = dataset.id_source.key, dataset.texts.key  # type: ignore[attr-defined]
        assert cache.get(ids_key) is not None  # 2,000 ids of 6 characters fit
        assert cache.get(texts_key) is None and cache.used <= 30_000
        reads = Reads(monkeypatch)
        assert dataset.texts.at(np.array([0, 5])) == ["example 0 of training t1", "example 5 of training t1"]
        assert reads.records == ROWS  # read from the file (its first batch), as without a scope
        assert cache.get(texts_key) is None
        dataset.texts.at(np.array([1]))
        assert reads.records == 2 * ROWS  # and again
        dataset.ids.to_pylist()
        assert reads.records == 2 * ROWS  # the ids are kept
    runreads.drop_shared_reads("run-small")
