"""End to end, in process: manifest → training_sensor → verdict_job (whole refund group, with
credit_settlement) → ledger; re-running a partition never refunds twice."""

import importlib.util
from pathlib import Path
from typing import Any

import dagster as dg

from assets.credits import build_defs as credits_defs
from assets.credits import training_sensor
from assets.refund import build_defs as refund_defs
from resources.credits import CreditsResource
from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
from resources.store import StoreResource
from typestrict_pipeline.credits import CreditLedger, EntryKind, audit_bytes, get_model
from typestrict_pipeline.store import open_store

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support_for_credits", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


def _defs(home: Path, url: str) -> dg.Definitions:
    resources: dict[str, Any] = {
        "refund_trainings": RefundTrainingsResource(
            folder=str(home / "trainings"), audits_folder=str(home / "audits")
        ),
        "refund_jev_client": ManifestSourceClientResource(max_workers=1),
        "refund_model_client": ManifestSourceClientResource(max_workers=1),
        "store": StoreResource(url=url),
        "credits": CreditsResource(),
    }
    return dg.Definitions.merge(refund_defs(), credits_defs(), dg.Definitions(resources=resources))


def test_sensor_to_ledger_end_to_end(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    trainings = home / "trainings"
    support.make_training(trainings, "strong", model_skill=0.95, jev_skill=0.5, seed=1)
    support.make_training(trainings, "weak", model_skill=0.4, jev_skill=0.9, seed=2)
    support.make_training(trainings, "broken", status="failed", seed=3)
    engine = open_store(sqlite_url)
    ledger = CreditLedger(engine)
    ledger.grant("tests", 5, reference="welcome")
    defs = _defs(home, sqlite_url)
    job = defs.resolve_job_def("verdict_job")
    assert "credit_settlement" in {n.name for n in job.graph.node_defs}

    with dg.DagsterInstance.ephemeral() as instance:
        tick = training_sensor(dg.build_sensor_context(
            instance=instance, resources={"refund_trainings": RefundTrainingsResource(
                folder=str(trainings), audits_folder=str(home / "audits")),
                "store": StoreResource(url=sqlite_url)}))
        assert isinstance(tick, dg.SensorResult)
        requests = tick.run_requests or []
        assert [r.run_key for r in requests] == ["verdict:broken", "verdict:strong", "verdict:weak"]
        added = list((tick.dynamic_partitions_requests or [])[0].partition_keys or [])
        assert added == ["broken", "strong", "weak"]
        # What the daemon does with the tick: add the partitions, launch one run per request.
        instance.add_dynamic_partitions("trainings", added)
        for r in requests:
            assert r.partition_key is not None
            assert job.execute_in_process(partition_key=r.partition_key, instance=instance).success
        # A re-materialization of a refunded training (a retry, a re-run): nothing moves.
        again = job.execute_in_process(partition_key="weak", instance=instance)
        assert again.success
        [mat] = [m for m in again.get_asset_materialization_events()
                 if m.asset_key == dg.AssetKey("credit_settlement")]
        meta = {k: v.value for k, v in mat.materialization.metadata.items()}
        assert meta["newly_settled"] is False and meta["verdict"] == "refund"
        # The next tick: nothing new, and the cursor forgets ids whose partition now exists.
        res = {"refund_trainings": RefundTrainingsResource(folder=str(trainings)), "store": StoreResource(url=sqlite_url)}
        nxt = training_sensor.evaluate_tick(
            dg.build_sensor_context(instance=instance, resources=res, cursor=tick.cursor))
        assert nxt.run_requests == [] and nxt.cursor == '{"v": 2, "pending": []}'

    verdicts = {m: get_model(engine, m).verdict.value for m in ("strong", "weak", "broken")}
    assert verdicts == {"strong": "beats", "weak": "refund", "broken": "failed"}
    # 5 granted − 3 charged at registration + 2 returned (refund, failed)
    assert ledger.balance("tests") == 4 == ledger.entries_total("tests")
    for tid in verdicts:
        kinds = [ln.kind for ln in ledger.lines("tests", training_id=tid)]
        assert kinds == [EntryKind.SPEND, EntryKind.SETTLEMENT]
        assert audit_bytes(engine, tid) == (home / "audits" / f"{tid}.json").read_bytes()
    engine.dispose()


def test_a_rerun_with_other_audit_bytes_is_refused_and_the_settled_audit_stands(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Issue 5/7: after the verdict, `keep_if_loses` edited in the manifest and verdict_job run
    again: before, the stored audit file was overwritten by a "kept" audit that verified while the
    ledger and the API said "refund". Now the run is refused before the file is touched, the
    failure names both digests, and the ledger line, the model record and the file agree."""
    import hashlib
    import json

    from typestrict_pipeline import verify_audit

    home = tmp_path / "home"
    trainings = home / "trainings"
    manifest = support.make_training(trainings, "weak", model_skill=0.4, jev_skill=0.9, seed=2)
    engine = open_store(sqlite_url)
    ledger = CreditLedger(engine)
    ledger.grant("tests", 2, reference="welcome")
    job = _defs(home, sqlite_url).resolve_job_def("verdict_job")
    audit_file = home / "audits" / "weak.json"
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("trainings", ["weak"])
        assert job.execute_in_process(partition_key="weak", instance=instance).success
        settled = hashlib.sha256(audit_file.read_bytes()).hexdigest()
        [line] = [ln for ln in ledger.lines("tests", training_id="weak")
                  if ln.kind is EntryKind.SETTLEMENT]
        assert line.verdict is not None and line.verdict.value == "refund"
        assert line.audit_sha256 == settled == get_model(engine, "weak").audit_sha256
        doc = json.loads(manifest.read_text())
        doc["options"]["keep_if_loses"] = True
        manifest.write_text(json.dumps(doc))
        again = job.execute_in_process(partition_key="weak", instance=instance,
                                       raise_on_error=False)
        assert not again.success
        [failure] = [e for e in again.all_events if e.event_type_value == "STEP_FAILURE"]
        said = str(failure.step_failure_data.user_failure_data.description)  # type: ignore[union-attr]
        assert settled in said and "other bytes" in said and "refused" in said
    assert hashlib.sha256(audit_file.read_bytes()).hexdigest() == settled
    assert audit_bytes(engine, "weak") == audit_file.read_bytes()
    assert json.loads(audit_file.read_bytes())["overall"]["verdict"] == "refund"
    assert verify_audit.main(["--expect-sha256", settled, str(audit_file)]) == 0
    assert ledger.balance("tests") == 2 == ledger.entries_total("tests")
    engine.dispose()


def test_a_training_attests_a_subset_of_its_training_rows_and_the_audit_records_it(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Issue 3/7: a customer who honestly trained on 50 of the allowed rows was refused; now any
    subset of the training rows is attested, the audit records its digest, and a stated test row
    stops the verdict with the count and the ids."""
    import json

    from typestrict_pipeline import verify_audit
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.holdout import split_decisions, training_ids
    from typestrict_pipeline.refund.manifest import load_manifest
    from typestrict_pipeline.refund.trained_on import id_sha256, ids_set_sha256
    from typestrict_pipeline.refund.types import Role

    home = tmp_path / "home"
    trainings = home / "trainings"
    honest = support.make_training(trainings, "honest", model_skill=0.95, jev_skill=0.5, seed=1)
    holdouts = split_decisions(load_dataset(load_manifest(honest, data_root=home)))
    fifty = sorted(training_ids(holdouts))[:50]
    (honest.parent / "trained_on.txt").write_text("\n".join(fifty) + "\n")
    doc = json.loads(honest.read_text())
    doc["training"]["trained_on"] = {"ids_file": "trained_on.txt"}
    honest.write_text(json.dumps(doc))
    cheat = support.make_training(trainings, "cheat", model_skill=0.95, jev_skill=0.5, seed=1)
    theirs = split_decisions(load_dataset(load_manifest(cheat, data_root=home)))
    tests_rows = [r.id for r in theirs[0].rows if r.role is Role.TEST][:3]
    doc = json.loads(cheat.read_text())
    doc["training"]["trained_on"] = {"ids": [*sorted(training_ids(theirs))[:10], *tests_rows]}
    cheat.write_text(json.dumps(doc))
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("tests", 2, reference="welcome")
    job = _defs(home, sqlite_url).resolve_job_def("verdict_job")
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("trainings", ["honest", "cheat"])
        assert job.execute_in_process(partition_key="honest", instance=instance).success
        refused = job.execute_in_process(partition_key="cheat", instance=instance,
                                         raise_on_error=False)
        assert not refused.success
        [failure] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
        said = str(failure.step_failure_data.user_failure_data.description)  # type: ignore[union-attr]
    assert "got 3 of the 13 stated ids that are not" in said
    assert all(repr(i) in said for i in tests_rows) and "training.trained_on.ids" in said
    audit = json.loads((home / "audits" / "honest.json").read_bytes())
    assert audit["trained_on"] == {"status": "attested", "n_ids": 50,
                                   "ids_sha256": ids_set_sha256(id_sha256(i) for i in fifty)}
    assert verify_audit.verify(audit) == []
    assert not (home / "audits" / "cheat.json").exists()
    engine.dispose()
