"""Faults: concurrent runs of one training on the embedded default, the instance's run monitoring
and retries, and text read as text (``NA`` is an answer, only an empty cell is missing)."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from resources.io import AtomicFilesystemIOManager, AtomicPickleIOManager
from typestrict_pipeline.credits.ledger import CreditLedger
from typestrict_pipeline.instance import TRAINING_TAG, sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.refund.dataset import load_dataset, unlabeled_text
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.store import open_store

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


# ------------------------------------------------------------------------------------------------
# Atomic writes: a reader never sees half a stored value
# ------------------------------------------------------------------------------------------------


def test_a_reader_never_sees_half_a_value_while_another_run_rewrites_it(tmp_path: Path) -> None:
    """One thread rewrites a 4 MB value 40 times while another loads it as fast as it can.

    With Dagster's default manager (open "wb", then write) the reader hits a truncated file
    (EOFError / UnpicklingError) within a few rewrites; with atomic replace it never does.
    """
    manager = AtomicPickleIOManager(base_dir=str(tmp_path))  # type: ignore[no-untyped-call]
    target = tmp_path / "metrics" / "tr_1"
    values = [{"n": i, "blob": bytes([i % 251]) * (4 << 20)} for i in range(2)]
    context = dg.build_output_context(asset_key=dg.AssetKey("metrics"))
    manager.dump_to_path(context, values[0], target)  # type: ignore[arg-type]
    done = threading.Event()
    errors: list[BaseException] = []
    loads = 0

    def read() -> None:
        nonlocal loads
        while not done.is_set():
            try:
                with open(target, "rb") as handle:
                    value = pickle.load(handle)
                assert value["blob"][:1] == bytes([value["n"] % 251])
                loads += 1
            except BaseException as exc:
                errors.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(40):
        manager.dump_to_path(context, values[i % 2], target)  # type: ignore[arg-type]
    done.set()
    reader.join(timeout=120)
    assert not errors, errors[:1]
    assert loads > 0
    assert not [p for p in target.parent.iterdir() if p.name != "tr_1"]  # no temp file left


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TYPESTRICT_STORE_URL", f"sqlite:///{tmp_path / 'home' / 'store.db'}")
    yield tmp_path / "home"


_RUN_ONE = """
import sys
import dagster as dg
from typestrict_pipeline.definitions import defs
instance = dg.DagsterInstance.get()
result = defs.resolve_job_def("verdict_job").execute_in_process(
    partition_key="tr_four", instance=instance, raise_on_error=False,
    tags={"typestrict/training": "tr_four"},
)
for e in result.all_events:
    if e.event_type == dg.DagsterEventType.STEP_FAILURE:
        print(e.step_failure_data.error.to_string(), file=sys.stderr)
sys.exit(0 if result.success else 1)
"""


@pytest.mark.slow
def test_four_concurrent_materializations_of_one_training_all_succeed_and_settle_once(
    home: Path, tmp_path: Path
) -> None:
    """Four processes materialize one training at once: the code location's own definitions,
    one SQLite Dagster instance, one SQLite store (the embedded default)."""
    support.make_training(home / "trainings", "tr_four", n=80, seed=5)
    CreditLedger(open_store()).grant("tests", 5, reference="four")
    dagster_home = tmp_path / "dh"
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home)}
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    instance.add_dynamic_partitions("trainings", ["tr_four"])
    instance.dispose()
    procs = [
        subprocess.Popen([sys.executable, "-c", _RUN_ONE], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outcomes = [(p.wait(timeout=900), p.stderr.read() if p.stderr else "") for p in procs]
    assert [code for code, _ in outcomes] == [0] * 4, [err[-2000:] for _, err in outcomes]
    stored = dagster_home / "storage" / "metrics" / "tr_four"
    assert pickle.loads(stored.read_bytes()).reports  # a whole value
    ledger = CreditLedger(open_store())
    lines = ledger.training_lines("tr_four")
    assert sum(1 for line in lines if line.kind.value == "settlement") == 1
    assert ledger.balance("tests") == ledger.entries_total("tests")


def test_the_code_location_stores_values_with_the_atomic_io_manager() -> None:
    from typestrict_pipeline.definitions import defs

    assert isinstance((defs.resources or {})["io_manager"], AtomicFilesystemIOManager)


# ------------------------------------------------------------------------------------------------
# The instance the product writes: run monitoring, retries, one run per training
# ------------------------------------------------------------------------------------------------


def test_the_instance_config_turns_on_run_monitoring_and_retries_and_dagster_accepts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_instance_yaml(tmp_path, sqlite_instance_config(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    instance = dg.DagsterInstance.get()
    try:
        assert instance.run_monitoring_enabled
        assert instance.run_retries_enabled
        assert instance.run_retries_retry_on_asset_or_op_failure is False
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None
        limits = queue.tag_concurrency_limits
        assert {"key": TRAINING_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits
    finally:
        instance.dispose()
    from typestrict_pipeline.definitions import defs

    tags = defs.resolve_job_def("verdict_job").tags
    assert tags["dagster/max_retries"] == "2" and tags["dagster/retry_strategy"] == "FROM_FAILURE"


# ------------------------------------------------------------------------------------------------
# Text is text
# ------------------------------------------------------------------------------------------------


def _na_training(folder: Path, rows: list[str], fmt: str = "csv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "manifest_version": 1, "training_id": "tr_na", "workspace_id": "w",
        "dataset": {"path": f"data.{fmt}", "columns": {"id": "id", "text": "text", "group": "party"}},
        "decisions": [{"name": "party", "question": "Which party?", "answer_column": "answer",
                       "answers": ["NA", "null", "None", "SNP"]}],
        "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}},
        "training": {"status": "failed", "reason": "not needed here"},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / f"data.{fmt}").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder / "manifest.json"


def test_na_null_and_none_are_answers_and_only_an_empty_cell_is_missing(tmp_path: Path) -> None:
    answers = ["NA", "null", "None", "SNP", ""]
    rows = ["id,text,party,answer"] + [
        f"{i},speech {i},{answers[i % 5] or 'NA'},{answers[i % 5]}" for i in range(40)
    ]
    data = load_dataset(load_manifest(_na_training(tmp_path, rows)))
    labels = data.decision("party").labels
    assert labels[:5] == ("NA", "null", "None", "SNP", None)
    assert data.decision("party").n_labeled == 32
    assert {ex.group for ex in data.examples} == {"NA", "null", "None", "SNP"}
    assert unlabeled_text(32, 40) == (
        "8 of 40 rows: their answer cell is empty (the texts NA, null, None are answers)"
    )


def test_in_json_lines_the_text_na_is_an_answer_and_json_null_is_missing(tmp_path: Path) -> None:
    rows = [json.dumps({"id": i, "text": f"t{i}", "party": "NA", "answer": a})
            for i, a in enumerate(["NA", None, "None", "SNP", "null"])]
    data = load_dataset(load_manifest(_na_training(tmp_path, rows, fmt="jsonl")))
    assert data.decision("party").labels == ("NA", None, "None", "SNP", "null")
    assert [ex.id for ex in data.examples] == ["0", "1", "2", "3", "4"]


def test_dataset_metadata_says_how_many_rows_are_unlabeled_and_why(
        tmp_path: Path, ephemeral_instance: dg.DagsterInstance) -> None:
    from assets.refund import REFUND_ASSETS, REFUND_CHECKS, verdict_job
    from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
    from resources.store import StoreResource

    path = support.make_training(tmp_path / "trainings", "tr_gaps", n=80, seed=2)
    csv = path.parent / "data.csv"
    lines = csv.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ","  # one empty answer
    csv.write_text("\n".join(lines) + "\n")
    for name in ("model.jsonl", "jev.jsonl"):
        kept = [x for x in (path.parent / name).read_text().splitlines() if '"ex0000"' not in x]
        (path.parent / name).write_text("\n".join(kept) + "\n")
    instance = ephemeral_instance
    instance.add_dynamic_partitions("trainings", ["tr_gaps"])
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
        partition_key="tr_gaps", instance=instance,
        op_selection=["dataset", "holdout", "jev_predictions", "model_predictions", "metrics",
                      "verdict", "audit"],
    )
    meta = {
        str(m.asset_key.to_user_string() if m.asset_key else ""): {
            k: v.value for k, v in m.materialization.metadata.items()
        }
        for m in result.get_asset_materialization_events()
    }
    expected = "1 of 80 rows: their answer cell is empty (the texts NA, null, None are answers)"
    assert meta["dataset"]["unlabeled[sentiment]"] == expected
    assert meta["holdout"]["sentiment: unlabeled"] == expected
    assert meta["verdict"]["unlabeled[sentiment]"] == expected  # the verdict says it too
    # ... and the audit, as counts only (its format holds no text)
    [audit_file] = (tmp_path / "audits").rglob("*.json")
    audit = json.loads(audit_file.read_text(encoding="utf-8"))
    assert audit["split"]["sentiment"]["n_unlabeled"] == 1
    assert audit["split"]["sentiment"]["n_rows"] == 80


# ------------------------------------------------------------------------------------------------
# A training left unsettled is flagged
# ------------------------------------------------------------------------------------------------


def test_a_training_whose_run_failed_is_flagged_as_unsettled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ephemeral_instance: dg.DagsterInstance
) -> None:
    import datetime as dt

    import assets.refund as refund_assets
    from assets.refund import REFUND_ASSETS, REFUND_CHECKS, unsettled_trainings_sensor, verdict_job
    from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
    from resources.store import StoreResource

    path = support.make_training(tmp_path / "trainings", "tr_stuck", n=60, seed=4)
    (path.parent / "model.jsonl").write_text("")  # the run fails at its first step
    instance = ephemeral_instance
    instance.add_dynamic_partitions("trainings", ["tr_stuck"])
    defs = dg.Definitions(
        assets=list(REFUND_ASSETS), asset_checks=list(REFUND_CHECKS), jobs=[verdict_job],
        resources={
            "refund_trainings": RefundTrainingsResource(folder=str(tmp_path / "trainings")),
            "refund_jev_client": ManifestSourceClientResource(),
            "refund_model_client": ManifestSourceClientResource(),
            "store": StoreResource(url=f"sqlite:///{tmp_path / 'store.db'}"),
        },
    )
    result = defs.resolve_job_def("verdict_job").execute_in_process(
        partition_key="tr_stuck", instance=instance, raise_on_error=False
    )
    assert not result.success
    skip = unsettled_trainings_sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(skip, dg.SkipReason)  # not yet 2 hours
    monkeypatch.setattr(refund_assets, "UNSETTLED_AFTER", dt.timedelta(0))
    flagged = unsettled_trainings_sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(flagged, dg.SensorResult)
    [event] = flagged.asset_events
    assert isinstance(event, dg.AssetObservation) and event.partition == "tr_stuck"
    assert str(event.metadata["unsettled"].value).startswith("tr_stuck: unsettled for 0.0 h after 1 run(s) (last FAILURE)")
