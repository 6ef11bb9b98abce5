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
