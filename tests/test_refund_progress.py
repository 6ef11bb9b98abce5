"""Progress of a long dataset read: the core's reports, the CLI's bar, Dagster's log lines and
observations every 10%, and the latest report where the console reads it (read_progress)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from typestrict_pipeline.progress import Progress, read_progress, training_key
from typestrict_pipeline.refund.dataset import READING, load_dataset
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.table import BATCH_ROWS

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support_progress", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


def _parquet_training(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(n)],
        "text": [f"text number {i}" for i in range(n)],
        "label": ["yes" if i % 3 else "no" for i in range(n)],
    }), folder / "data.parquet")
    manifest = {
        "manifest_version": 1, "training_id": "big", "workspace_id": "demo",
        "dataset": {"path": "data.parquet", "columns": {"id": "id", "text": "text"}},
        "decisions": [{"name": "s", "question": "q?", "answer_column": "label",
                       "answers": ["no", "yes"]}],
        "predictions": {"jev": {"kind": "file", "path": "j.jsonl"},
                        "model": {"kind": "file", "path": "m.jsonl"}},
        "training": {"status": "succeeded"},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder / "manifest.json"


def test_a_parquet_read_reports_every_batch_up_to_its_total(tmp_path: Path) -> None:
    n = 150_000  # at least three batches (65,536 rows at most, fewer once 1 Mi characters)
    seen: list[Progress] = []
    load_dataset(load_manifest(_parquet_training(tmp_path, n)), progress=seen.append)
    done = [p.done for p in seen]
    assert done[0] == 0 and done[-1] == n and len(done) >= 4, done
    assert all(0 < b - a <= BATCH_ROWS for a, b in itertools.pairwise(done)), done
    assert {p.total for p in seen} == {n} and {p.what for p in seen} == {READING}
    assert seen[-1].line() == f"{READING}: 100% (150,000 of 150,000 rows)"


def test_the_cli_split_draws_no_bar_off_a_terminal_and_prints_the_split(tmp_path: Path) -> None:
    manifest = _parquet_training(tmp_path, 5_000)
    done = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "split", str(manifest),
                           "--json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no bar when not on a terminal
    [summary] = json.loads(done.stdout)
    assert summary["n_rows"] == 5_000 and summary["n_test"] == 1_000


def test_dagster_logs_and_observes_the_read_and_the_console_can_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ephemeral_instance: dg.DagsterInstance
) -> None:
    from assets.refund import REFUND_ASSETS, REFUND_CHECKS, verdict_job
    from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
    from resources.store import StoreResource

    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path / "home"))
    support.make_training(tmp_path / "trainings", "tr_progress", n=240)
    instance = ephemeral_instance
    instance.add_dynamic_partitions("trainings", ["tr_progress"])
    defs = dg.Definitions(
        assets=list(REFUND_ASSETS), asset_checks=list(REFUND_CHECKS), jobs=[verdict_job],
        resources={
            "refund_trainings": RefundTrainingsResource(
                folder=str(tmp_path / "trainings"), audits_folder=str(tmp_path / "audits")),
            "refund_jev_client": ManifestSourceClientResource(max_workers=1),
            "refund_model_client": ManifestSourceClientResource(max_workers=1),
            "store": StoreResource(url=f"sqlite:///{tmp_path / 'store.db'}"),
        },
    )
    result = defs.resolve_job_def("verdict_job").execute_in_process(
        partition_key="tr_progress", instance=instance)
    assert result.success
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    assert f"{READING}: 100% (240 of 240 rows)" in messages
    observed = [
        e.dagster_event.event_specific_data.asset_observation  # type: ignore[union-attr]
        for e in instance.all_logs(result.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION)
    ]
    assert observed and observed[-1].asset_key == dg.AssetKey("dataset")
    assert observed[-1].metadata["percent"].value == 100.0
    latest = read_progress(tmp_path / "home", result.run_id)
    assert latest == Progress(READING, 240, 240)
    # the console's training page knows the training, not its run: the same report under its key
    assert read_progress(tmp_path / "home", training_key("tr_progress")) == latest
