"""The credits wiring: training_sensor (run keys, partitions, cursor), credit_settlement, retention."""

import datetime as dt
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.credits import (
    credit_settlement,
    parse_now,
    retention_job,
    retention_schedule,
    training_sensor,
    trainings_partitions,
)
from resources.credits import CreditsResource
from resources.refund import RefundTrainingsResource
from resources.store import StoreResource, with_store
from typestrict_pipeline.credits import CreditLedger, EntryKind, ModelState, audit_bytes, get_model
from typestrict_pipeline.credits.models import PIPELINE_VALUES
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.rule import TrainingJudgement, failed_training, judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

# --- helpers --------------------------------------------------------------------------------------


def write_manifest(trainings: Path, training_id: str, *, workspace: str = "demo",
                   keep_if_loses: bool = False, failed: str | None = None) -> Path:
    folder = trainings / training_id
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "manifest_version": 1, "training_id": training_id, "workspace_id": workspace,
        "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text"}},
        "decisions": [{"name": "sentiment", "question": "Is it positive?",
                       "answer_column": "label", "answers": ["no", "yes"]}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"},
                        "model": {"kind": "file", "path": "model.jsonl"}},
        "training": {"status": "failed", "reason": failed} if failed else {"status": "succeeded"},
        "options": {"keep_if_loses": keep_if_loses},
    }
    path = folder / "manifest.json"
    path.write_text(json.dumps(doc))
    return path


def judgement_for(verdict: Verdict) -> TrainingJudgement:
    """A real judgement of the wanted kind (seeded synthetic decision, 200 resamples)."""
    if verdict is Verdict.FAILED:
        return failed_training("the trainer ran out of memory", keep_if_loses=True)
    good = verdict is Verdict.BEATS
    data = synthetic_decision(seed=7, n=120, n_answers=2, model_skill=3.0 if good else 0.2,
                              jev_skill=0.2 if good else 3.0)
    j = judge([data], keep_if_loses=verdict is Verdict.KEPT, resamples=200)
    assert j.verdict is verdict
    return j


@pytest.fixture
def env(typestrict_home: Path, sqlite_url: str) -> dict[str, Any]:
    trainings = typestrict_home / "trainings"
    trainings.mkdir()
    return {
        "home": typestrict_home,
        "trainings": trainings,
        "url": sqlite_url,
        "resources": {
            "store": StoreResource(url=sqlite_url),
            "credits": CreditsResource(retention_days=30),
            "refund_trainings": RefundTrainingsResource(folder=str(trainings),
                                                        audits_folder=str(typestrict_home / "audits")),
        },
    }


def settle(env: dict[str, Any], training_id: str, judgement: TrainingJudgement) -> dg.MaterializeResult[Any]:
    res: RefundTrainingsResource = env["resources"]["refund_trainings"]
    path = write_audit(res.audit_path(training_id),
                       build_audit(judgement, training_id=training_id, model_id=f"m-{training_id}",
                                   jev_id="jev-1"))
    # A context manager: its resources (the store's engine) are torn down here, not by the
    # garbage collector at exit, after their database is closed ("Exception during reset").
    with dg.build_asset_context(partition_key=training_id, resources=env["resources"]) as ctx:
        result = credit_settlement(ctx, verdict=judgement, audit=str(path))
    assert isinstance(result, dg.MaterializeResult)
    return result


# --- the sensor -----------------------------------------------------------------------------------


def test_training_sensor_requests_each_new_manifest_once(env: dict[str, Any]) -> None:
    trainings: Path = env["trainings"]
    # Trainings that failed on our side: nothing of theirs is read before their run (a succeeded
    # one is checked against its split first: tests/test_lifecycle_trainings.py).
    write_manifest(trainings, "tr_b", failed="out of memory")
    write_manifest(trainings, "tr_a", failed="out of memory")
    (trainings / "not_yet").mkdir()  # a folder without a manifest is not a registered training
    res = {k: env["resources"][k] for k in ("refund_trainings", "store")}
    with dg.DagsterInstance.ephemeral() as instance:
        first = training_sensor(dg.build_sensor_context(instance=instance, resources=res))
        assert isinstance(first, dg.SensorResult)
        assert [r.run_key for r in first.run_requests or []] == ["verdict:tr_a", "verdict:tr_b"]
        assert [r.partition_key for r in first.run_requests or []] == ["tr_a", "tr_b"]
        reqs = first.dynamic_partitions_requests or []
        assert len(reqs) == 1 and reqs[0].partitions_def_name == "trainings"
        assert list(reqs[0].partition_keys or []) == ["tr_a", "tr_b"]
        assert first.cursor == '{"v": 2, "pending": ["tr_a", "tr_b"]}'

        # Second tick with the stored cursor: nothing new.
        ctx2 = dg.build_sensor_context(instance=instance, resources=res, cursor=first.cursor)
        second = training_sensor.evaluate_tick(ctx2)
        assert second.run_requests == []
        assert "No new training manifests" in (second.skip_message or "")

        # The daemon applies the partition request; then a new manifest requests only itself,
        # and the cursor forgets the ids whose partition now exists.
        instance.add_dynamic_partitions("trainings", ["tr_a", "tr_b"])
        write_manifest(trainings, "tr_c", failed="out of memory")
        third = training_sensor(dg.build_sensor_context(instance=instance, resources=res,
                                                        cursor=first.cursor))
        assert isinstance(third, dg.SensorResult)
        assert [r.run_key for r in third.run_requests or []] == ["verdict:tr_c"]
        assert list((third.dynamic_partitions_requests or [])[0].partition_keys or []) == ["tr_c"]
        assert third.cursor == '{"v": 2, "pending": ["tr_c"]}'


def test_training_sensor_skips_an_empty_folder(env: dict[str, Any]) -> None:
    res = {k: env["resources"][k] for k in ("refund_trainings", "store")}
    with dg.DagsterInstance.ephemeral() as instance:
        out = training_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=res))
    assert out.run_requests == []
    assert out.skip_message == (
        f"No new training manifests in {env['trainings']} (0 registered, all requested already)"
    )


def test_training_sensor_refuses_a_foreign_cursor(env: dict[str, Any]) -> None:
    res = {k: env["resources"][k] for k in ("refund_trainings", "store")}
    with dg.DagsterInstance.ephemeral() as instance, pytest.raises(Exception, match="training_sensor cursor"):
        training_sensor(dg.build_sensor_context(instance=instance, resources=res, cursor="12"))


# --- settlement -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "keep", "refunded"),
    [(Verdict.BEATS, False, False), (Verdict.KEPT, True, False),
     (Verdict.REFUND, False, True), (Verdict.FAILED, True, True)],
)
def test_credit_settlement_asset_settles_each_verdict_once(
    env: dict[str, Any], verdict: Verdict, keep: bool, refunded: bool
) -> None:
    engine = open_store(env["url"])
    CreditLedger(engine).grant("demo", 3, reference="welcome")
    write_manifest(env["trainings"], "tr1", keep_if_loses=keep,
                   failed="the trainer ran out of memory" if verdict is Verdict.FAILED else None)
    judgement = judgement_for(verdict)
    first = settle(env, "tr1", judgement)
    again = settle(env, "tr1", judgement)  # re-materialization
    meta = first.metadata or {}
    assert meta["verdict"] == verdict.value and meta["newly_settled"] is True
    assert (again.metadata or {})["newly_settled"] is False
    expected = 3 - 1 + (1 if refunded else 0)
    assert meta["balance"] == dg.MetadataValue.int(expected)
    assert CreditLedger(engine).balance("demo") == expected
    kinds = [ln.kind for ln in CreditLedger(engine).lines("demo", training_id="tr1")]
    assert kinds == [EntryKind.SPEND, EntryKind.SETTLEMENT]
    assert "settlement" in str(meta["ledger"]) and "spend" in str(meta["ledger_lines"])
    check = (first.check_results or [])[0]
    assert check.passed
    model = get_model(engine, "tr1")
    assert model.delivered is (verdict in (Verdict.BEATS, Verdict.KEPT))
    audit_file = env["home"] / "audits" / "tr1.json"
    assert audit_bytes(engine, "tr1") == audit_file.read_bytes()
    if verdict is Verdict.FAILED:
        assert "the trainer ran out of memory" in CreditLedger(engine).lines("demo")[-1].reason
    engine.dispose()


def test_ledger_balances_checks_the_whole_ledger_after_each_settlement(env: dict[str, Any]) -> None:
    """docs/lifecycle.md, rule 3: credit_settlement's ``ledger_balances`` check passes while
    spends = settlements + open trainings, each open one with a deadline, and fails (an ERROR)
    as soon as a charged training waits on nothing: here a charge whose training row is gone (the
    store refuses an open state without a deadline, so a lost row is how it could happen)."""
    from sqlalchemy import delete

    from typestrict_pipeline.lifecycle.tables import TrainingRow
    from typestrict_pipeline.store import session_scope

    engine = open_store(env["url"])
    ledger = CreditLedger(engine)
    ledger.grant("demo", 3, reference="welcome")
    ledger.spend("demo", "tr_open")  # started (as through the API): open, with its deadline
    write_manifest(env["trainings"], "tr1")

    def balances(result: dg.MaterializeResult[Any]) -> dg.AssetCheckResult:
        [check] = [c for c in result.check_results or [] if c.check_name == "ledger_balances"]
        assert check.severity is dg.AssetCheckSeverity.ERROR
        return check

    ok = balances(settle(env, "tr1", judgement_for(Verdict.BEATS)))
    assert ok.passed
    assert ok.description == "spends 2 = settlements 1 + open 1; every open training has a deadline"
    with session_scope(engine) as s:
        s.execute(delete(TrainingRow).where(TrainingRow.training_id == "tr_open"))
    write_manifest(env["trainings"], "tr2")
    lost = balances(settle(env, "tr2", judgement_for(Verdict.REFUND)))
    assert not lost.passed
    assert lost.description == "spends 3 = settlements 2 + open 1; open without a deadline: tr_open"
    engine.dispose()


def test_a_changed_verdict_is_another_audit_refused_and_reported(env: dict[str, Any]) -> None:
    """Issue 5/7: a re-run whose audit would have other bytes never replaces the settled one."""
    engine = open_store(env["url"])
    CreditLedger(engine).grant("demo", 1, reference="welcome")
    write_manifest(env["trainings"], "tr1")
    first = settle(env, "tr1", judgement_for(Verdict.BEATS))
    settled = str((first.metadata or {})["audit_sha256"])
    [line] = [ln for ln in CreditLedger(engine).lines("demo", training_id="tr1")
              if ln.kind is EntryKind.SETTLEMENT]
    assert line.audit_sha256 == settled == get_model(engine, "tr1").audit_sha256
    assert f"audit_sha256={settled}" in line.describe()
    with pytest.raises(dg.Failure) as refused:
        settle(env, "tr1", judgement_for(Verdict.REFUND))
    assert settled in str(refused.value.description) and "other bytes" in str(
        refused.value.description)
    assert refused.value.metadata["settled_audit_sha256"].value == settled
    assert get_model(engine, "tr1").audit_sha256 == settled
    assert CreditLedger(engine).balance("demo") == 0
    engine.dispose()


# --- retention ------------------------------------------------------------------------------------


def test_retention_schedule_passes_its_tick_time_as_now(sqlite_url: str) -> None:
    tick = dt.datetime(2026, 4, 2, 4, 0, tzinfo=dt.UTC)
    req = retention_schedule(dg.build_schedule_context(
        scheduled_execution_time=tick, resources={"store": StoreResource(url=sqlite_url)}))
    assert isinstance(req, dg.RunRequest)
    assert req.run_key == "retention:2026-04-02T04:00"
    # The sweep acts on the store the schedule read (tests/test_run_store.py runs it).
    assert req.run_config == with_store(
        {"ops": {"expire_model_files": {"config": {"now": "2026-04-02T04:00:00+00:00"}}}}, sqlite_url)
    assert retention_schedule.cron_schedule == "0 4 * * *"


def test_retention_job_expires_files_but_keeps_the_audit(env: dict[str, Any], ephemeral_instance: dg.DagsterInstance) -> None:
    engine = open_store(env["url"])
    CreditLedger(engine).grant("demo", 2, reference="welcome")
    write_manifest(env["trainings"], "tr1", keep_if_loses=True)
    files = env["trainings"] / "tr1" / "model"
    files.mkdir()
    (files / "weights.bin").write_bytes(b"\x00" * 64)
    settle(env, "tr1", judgement_for(Verdict.KEPT))
    settled_at = get_model(engine, "tr1").settled_at
    audit_before = audit_bytes(engine, "tr1")

    instance = ephemeral_instance
    # The training's data beside its model, and the pipeline's values stored for it (the IO
    # manager's <storage>/<asset>/<partition>): retention deletes them too, the manifest stays.
    (env["trainings"] / "tr1" / "data.csv").write_text("id,text,label\nr1,the customer's words,yes\n")
    values = [Path(instance.storage_directory()) / name / "tr1" for name in PIPELINE_VALUES]
    for path in values:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"pickled rows")

    def run(now: dt.datetime) -> int:
        out = retention_job.execute_in_process(
            run_config={"ops": {"expire_model_files": {"config": {"now": now.isoformat()}}}},
            resources={k: env["resources"][k] for k in ("store", "refund_trainings", "credits")},
            instance=instance,
        )
        assert out.success
        return int(out.output_for_node("expire_model_files"))

    assert run(settled_at + dt.timedelta(days=30) - dt.timedelta(seconds=1)) == 0
    assert files.exists() and get_model(engine, "tr1").state is ModelState.AVAILABLE
    assert run(settled_at + dt.timedelta(days=30)) == 1
    assert not files.exists()
    assert sorted(p.name for p in (env["trainings"] / "tr1").iterdir()) == ["manifest.json"]
    assert not any(p.exists() for p in values)
    model = get_model(engine, "tr1")
    assert model.state is ModelState.EXPIRED and not model.downloadable
    assert audit_bytes(engine, "tr1") == audit_before == (env["home"] / "audits" / "tr1.json").read_bytes()
    assert run(settled_at + dt.timedelta(days=31)) == 0  # idempotent
    engine.dispose()


def test_parse_now_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="expected now as an ISO 8601 time with a zone"):
        parse_now("2026-01-01T00:00:00")
    with pytest.raises(ValueError, match="from 1900-01-01 to 2199-12-31"):
        parse_now("9999-12-31T23:59:59+00:00")
    assert parse_now("2026-01-01T01:00:00+01:00") == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_partitions_are_the_refund_areas() -> None:
    assert trainings_partitions == dg.DynamicPartitionsDefinition(name="trainings")
    assert credit_settlement.partitions_def == trainings_partitions
    assert credit_settlement.group_names_by_key[dg.AssetKey("credit_settlement")] == "refund"
    assert {k.to_user_string() for k in credit_settlement.dependency_keys} == {"verdict", "audit"}
