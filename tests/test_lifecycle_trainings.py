"""A training's life through the API, the CLI and the pipeline: predictions refused before
anything is stored or charged, a refusal by a verdict run that the customer fixes, deadlines that
settle the credit exactly once, cancel, and the ledger balancing after each (docs/lifecycle.md).

Each "Why" of issue 1/7 about trainings is reproduced here and failed on the code before it:
predictions that do not cover the test set were accepted (202), judged "judging" for ever,
corrections refused (409), the credit never returned; predictions that never arrive kept the
credit spent for ever.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import select

from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
from typestrict_pipeline.credits import CreditLedger, get_model
from typestrict_pipeline.errors import ConflictError, PredictionsError
from typestrict_pipeline.lifecycle.trainings import (
    DEFAULT_DEADLINES,
    TrainingState,
    expire_due,
    ledger_balance,
    training_status,
)
from typestrict_pipeline.refund.trained_on import TrainedOnError, trained_on_sha256
from typestrict_pipeline.reruns.tables import OutboxMessage
from typestrict_pipeline.store import open_store, session_scope


def _load(name: str) -> Any:
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


support = _load("test_api_support")
assets_support = _load("test_refund_assets_support")
BODY = support.TRAINING_BODY


def _lines(predictions: list[dict[str, Any]]) -> bytes:
    return ("".join(json.dumps(p) + "\n" for p in predictions)).encode()


def _kinds(engine: Any, workspace: str) -> list[tuple[str, int]]:
    return [(ln.kind.value, ln.amount) for ln in CreditLedger(engine).lines(workspace)]


@pytest.fixture
def setup(tmp_path: Path, sqlite_url: str) -> Any:
    home = tmp_path / "home"
    home.mkdir()
    csv, jev = support.make_dataset(tmp_path, seed=3)
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("acme", 3, reference="lifecycle-tests")
    store = TrainingStore(home, engine, {"kind": "file", "path": str(jev)})
    store.area("acme").save("reviews.csv", csv)
    yield home, csv, jev, engine, store
    engine.dispose()


def _create(store: TrainingStore) -> str:
    tid: str = store.create("acme", TrainingRequest(dataset=BODY["dataset"], decisions=BODY["decisions"],
                                                    options=BODY["options"]))
    return tid


# ------------------------------------------------------------------------------------------------
# Why 1: predictions that do not cover the test set
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_predictions_missing_the_test_set_are_refused_and_corrected_ones_are_judged(
        tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    csv, jev = support.make_dataset(tmp_path, seed=0)
    key = support.new_key(sqlite_url, "acme", credits=1)
    with support.ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as c:
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        tid = c.post("/v1/trainings", json=BODY).json()["id"]
        split = c.get(f"/v1/trainings/{tid}/split").json()
        test_ids = set(split["decisions"][0]["test_ids"])
        every = support.model_predictions(csv, skill=0.97)
        train_only = [p for p in every if p["id"] not in test_ids]  # what a model that saw the
        r = c.post(f"/v1/trainings/{tid}/predictions", json={"predictions": train_only})  # train set sends
        assert r.status_code == 422, r.text
        message = r.json()["error"]["message"]
        assert f"none for {len(test_ids)} of them" in message
        assert "nothing was stored or charged" in message.lower()
        read = c.get(f"/v1/trainings/{tid}").json()
        assert read["state"] == "awaiting_predictions" and read["deadline_at"]
        folder = home / "trainings" / tid
        assert not (folder / "manifest.json").exists()
        assert not (folder / "predictions" / "model.jsonl").exists()
        assert c.get("/v1/workspaces/acme").json()["balance"] == 0  # the start's charge only

        r = c.post(f"/v1/trainings/{tid}/predictions", json={"predictions": every})  # corrected
        assert r.status_code == 202, r.text
        assert r.json()["state"] == "judging" and r.json()["submissions"] == 1
        assert support.run_verdicts(home, sqlite_url) == [tid]
        assert c.get(f"/v1/trainings/{tid}").json()["state"] == "settled"
    engine = open_store(sqlite_url)
    try:
        assert _kinds(engine, "acme") == [("grant", 1), ("spend", -1), ("settlement", 0)]
        assert ledger_balance(engine).balanced
    finally:
        engine.dispose()


def test_predictions_for_ids_that_do_not_exist_are_counted_and_nothing_is_stored(setup: Any) -> None:
    home, _csv, _jev, engine, store = setup
    tid = _create(store)
    ghosts = [{"id": f"ghost{i}", "decision": "sentiment", "probabilities": {"yes": 0.5, "no": 0.5}}
              for i in range(20_000)]
    with pytest.raises(PredictionsError) as refused:
        store.submit("acme", tid, _lines(ghosts), None)
    text = str(refused.value)
    assert text.startswith("the request's predictions, row 1, column 'id': expected an id of the "
                           "dataset, got 'ghost0'")
    assert "20,000 predictions for ids the dataset does not have (first: 'ghost0', 'ghost1'" in text
    assert "40 of the 40 test examples of decision 'sentiment' without a prediction" in text
    assert "nothing was stored or charged" in text.lower()
    assert training_status(engine, tid).state is TrainingState.AWAITING_PREDICTIONS  # type: ignore[union-attr]
    # What the training's creation wrote (its draft, data, Jev's answers and the look for
    # undeclared groups made before judging), and nothing of the refused predictions.
    assert sorted(p.name for p in (home / "trainings" / tid).rglob("*") if p.is_file()) == [
        "api-draft.json", "dataset.csv", "grouping.json", "jev.jsonl"]
    assert CreditLedger(engine).balance("acme") == 2


def test_the_cli_submits_with_the_same_checks(setup: Any, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from typestrict_pipeline.cli import main

    home, csv, _jev, engine, store = setup
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    url = str(engine.url)
    tid = _create(store)
    every = support.model_predictions(csv, skill=0.9)
    short = tmp_path / "short.jsonl"
    short.write_bytes(_lines(every[:150]))
    assert main(["training", "submit", tid, str(short), "--store", url]) == 2
    err = capsys.readouterr().err
    assert f"typestrict: {short}, column 'id': expected a prediction for every test example" in err
    assert "none for" in err and "nothing was stored or charged" in err.lower()
    full = tmp_path / "full.jsonl"
    full.write_bytes(_lines(every))
    assert main(["training", "submit", tid, str(full), "--store", url]) == 0
    assert "predictions accepted; judging" in capsys.readouterr().out
    assert main(["training", "show", tid, "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "judging" and shown["submissions"] == 1


# ------------------------------------------------------------------------------------------------
# Why 2: predictions that never arrive; a verdict that never completes
# ------------------------------------------------------------------------------------------------


def test_a_training_whose_predictions_never_arrive_expires_and_its_credit_comes_back_once(
        setup: Any) -> None:
    home, csv, _jev, engine, store = setup
    tid = _create(store)
    status = training_status(engine, tid)
    assert status is not None and status.deadline_at is not None
    deadline = status.deadline_at
    assert deadline - status.created_at == DEFAULT_DEADLINES.predictions
    assert expire_due(engine, now=deadline - dt.timedelta(seconds=1), trainings_dir=home / "trainings") == []
    assert CreditLedger(engine).balance("acme") == 2
    ended = expire_due(engine, now=deadline, trainings_dir=home / "trainings")
    assert [(e.training_id, e.was, e.refunded) for e in ended] == [
        (tid, TrainingState.AWAITING_PREDICTIONS, True)]
    assert expire_due(engine, now=deadline + dt.timedelta(days=30), trainings_dir=home / "trainings") == []
    assert CreditLedger(engine).balance("acme") == 3
    settled = [ln for ln in CreditLedger(engine).lines("acme") if ln.kind.value == "settlement"]
    assert len(settled) == 1 and settled[0].amount == 1 and settled[0].verdict is not None
    assert "expired: no predictions arrived by its deadline" in settled[0].reason
    assert get_model(engine, tid).verdict.value == "failed"
    view = store.view("acme", tid)
    assert view.state is TrainingState.EXPIRED and view.deadline_at is None
    assert "7 days after it started" in (view.reason or "")
    with session_scope(engine) as s:  # the operators are told, once
        told = list(s.scalars(select(OutboxMessage).where(OutboxMessage.kind == "training_expired")))
        assert [m.dedupe_key for m in told] == [f"training_expired:{tid}"]
        assert "its credit came back" in told[0].subject
    with pytest.raises(ConflictError, match="expired"):
        store.submit("acme", tid, _lines(support.model_predictions(csv, skill=0.9)), None)
    assert ledger_balance(engine).balanced


def test_the_api_applies_a_passed_deadline_when_it_shows_the_training(setup: Any) -> None:
    _home, _csv, _jev, engine, store = setup
    tid = _create(store)
    status = training_status(engine, tid)
    assert status is not None and status.deadline_at is not None
    deadline = status.deadline_at
    assert store.view("acme", tid, now=deadline - dt.timedelta(minutes=1)).state is TrainingState.AWAITING_PREDICTIONS
    assert store.view("acme", tid, now=deadline).state is TrainingState.EXPIRED
    assert CreditLedger(engine).balance("acme") == 3


def test_a_verdict_that_never_completes_expires_and_a_late_verdict_moves_no_credit(setup: Any) -> None:
    from typestrict_pipeline.credits import SettlementRequest, settle_training
    from typestrict_pipeline.refund.types import Verdict

    home, csv, _jev, engine, store = setup
    tid = _create(store)
    store.submit("acme", tid, _lines(support.model_predictions(csv, skill=0.9)), None)
    status = training_status(engine, tid)
    assert status is not None and status.state is TrainingState.JUDGING and status.deadline_at is not None
    assert status.deadline_at - status.updated_at == DEFAULT_DEADLINES.verdict
    [ended] = expire_due(engine, now=status.deadline_at, trainings_dir=home / "trainings")
    assert ended.was is TrainingState.JUDGING and ended.refunded
    assert "its verdict did not complete by its deadline" in ended.reason
    # The verdict run finally settles "beats": the first settlement (the expiry) is final.
    late = settle_training(engine, SettlementRequest("acme", tid, Verdict.BEATS, "beats", keep_if_loses=False,
                                                     model_dir=home / "trainings" / tid / "model",
                                                     audit_json=b"{}"))
    assert late.settlement.verdict_changed and not late.settlement.newly_settled
    assert CreditLedger(engine).balance("acme") == 3
    assert training_status(engine, tid).state is TrainingState.EXPIRED  # type: ignore[union-attr]
    assert ledger_balance(engine).balanced


def test_the_daemon_expires_an_overdue_training_with_nobody_acting(tmp_path: Path, sqlite_url: str) -> None:
    """What runs in Dagster by default: ``lifecycle_sensor`` sees the passed deadline and asks
    for ``lifecycle_job``, whose run expires the training (credit back once, operators told) and
    says the ledger balances; the next tick has nothing to do."""
    from assets.lifecycle import lifecycle_job, lifecycle_sensor
    from resources.refund import RefundTrainingsResource
    from resources.store import StoreResource

    engine = open_store(sqlite_url)
    ledger = CreditLedger(engine)
    ledger.grant("acme", 2, reference="lifecycle-daemon")
    started = dt.datetime.now(dt.UTC) - DEFAULT_DEADLINES.predictions - dt.timedelta(minutes=1)
    ledger.spend("acme", "tr_overdue", now=started)  # its predictions never came
    ledger.spend("acme", "tr_waiting")  # still before its deadline: left alone
    resources = {"store": StoreResource(url=sqlite_url),
                 "refund_trainings": RefundTrainingsResource(folder=str(tmp_path / "trainings"))}
    defs = dg.Definitions(jobs=[lifecycle_job], sensors=[lifecycle_sensor], resources=resources)
    with dg.DagsterInstance.ephemeral() as instance:
        tick = lifecycle_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=resources))
        [request] = tick.run_requests or []
        assert request.tags["typestrict/due"] == "training:tr_overdue"
        result = defs.resolve_job_def("lifecycle_job").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance)
        assert result.success and result.output_for_node("end_overdue_and_dead") == 1
        [output] = [e.step_output_data for e in result.all_events if e.is_successful_output]
        meta = {k: v.value for k, v in output.metadata.items()}
        assert meta["expired"] == "tr_overdue"
        assert meta["ledger_balances"] == "spends 2 = settlements 1 + open 1; every open training has a deadline"
        again = lifecycle_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=resources))
        assert again.run_requests == [] and "Nothing overdue or dead: 1 open training(s)" in (again.skip_message or "")
    assert training_status(engine, "tr_overdue").state is TrainingState.EXPIRED  # type: ignore[union-attr]
    assert training_status(engine, "tr_waiting").state is TrainingState.AWAITING_PREDICTIONS  # type: ignore[union-attr]
    assert ledger.balance("acme") == 1  # 2 - 2 started + 1 back
    with session_scope(engine) as s:
        told = list(s.scalars(select(OutboxMessage.subject).where(OutboxMessage.kind == "training_expired")))
    assert told == ["Training tr_overdue expired; its credit came back"]
    engine.dispose()


# ------------------------------------------------------------------------------------------------
# Cancel
# ------------------------------------------------------------------------------------------------


def test_cancel_returns_the_credit_before_judging_and_is_refused_after(setup: Any) -> None:
    _home, csv, _jev, engine, store = setup
    first, second = _create(store), _create(store)
    ended = store.cancel("acme", first)
    assert ended.state is TrainingState.CANCELLED and ended.refunded
    with pytest.raises(ConflictError, match="cancelled"):
        store.cancel("acme", first)
    store.submit("acme", second, _lines(support.model_predictions(csv, skill=0.9)), None)
    with pytest.raises(ConflictError, match=r"judging\. Its verdict follows on its own"):
        store.cancel("acme", second)
    assert CreditLedger(engine).balance("acme") == 2  # 3 - 2 started + 1 returned
    balance = ledger_balance(engine)
    assert balance.balanced and [t for t, _, _ in balance.open_trainings] == [second]


# ------------------------------------------------------------------------------------------------
# A refusal by the verdict run, fixed by a corrected submission (with its own run)
# ------------------------------------------------------------------------------------------------


def _tick_and_run(instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any],
                  cursor: str | None) -> tuple[list[str], str | None, str | None]:
    """One training_sensor tick, its partition requests applied, its runs executed in process
    (a failed one handed to verdict_refusal_sensor, as the daemon does)."""
    sensor = defs.resolve_sensor_def("training_sensor")
    tick = sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor,
                                          definitions=defs))
    if not isinstance(tick, dg.SensorResult):
        return [], cursor, getattr(tick, "skip_message", None)
    for request in tick.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = defs.resolve_job_def("verdict_job")
    keys = []
    for run in tick.run_requests or []:
        assert run.partition_key is not None
        result = job.execute_in_process(partition_key=run.partition_key, instance=instance,
                                        tags=dict(run.tags), raise_on_error=False)
        if not result.success:
            support.refusal(instance, result.run_id, resources)
        keys.append(str(run.run_key))
    return keys, tick.cursor, None


@pytest.mark.slow
def test_a_refused_verdict_run_makes_the_training_failed_and_corrected_predictions_are_judged(
        setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from assets import area_definitions
    from resources import default_resources

    home, csv, _jev, engine, store = setup
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.setenv("TYPESTRICT_STORE_URL", str(engine.url))
    tid = _create(store)
    every = support.model_predictions(csv, skill=0.97)
    store.submit("acme", tid, _lines(every), None)
    # The manifest is edited by hand after the submission (it now says the model was trained on
    # test rows): the run's own check refuses it, for a reason the customer fixes.
    manifest = home / "trainings" / tid / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["training"]["trained_on_sha256"] = trained_on_sha256(["ex0000"])
    manifest.write_text(json.dumps(doc))
    right = store.split("acme", tid).training_ids_sha256
    resources = default_resources()
    defs = dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=resources))
    with dg.DagsterInstance.ephemeral() as instance:
        keys, cursor, _ = _tick_and_run(instance, defs, resources, None)
        assert keys == [f"verdict:{tid}"]
        view = store.view("acme", tid)
        assert view.state is TrainingState.FAILED
        assert "may have seen test rows" in (view.reason or "")
        assert view.deadline_at is not None  # it waits for a correction, not for ever
        with pytest.raises(TrainedOnError):  # the same wrong digest is refused at the door now
            store.submit("acme", tid, _lines(every), None)
        store.submit("acme", tid, _lines(every), right)  # corrected: accepted in `failed`
        assert store.view("acme", tid).state is TrainingState.JUDGING
        keys, cursor, _ = _tick_and_run(instance, defs, resources, cursor)
        assert keys == [f"verdict:{tid}:2"]  # a run of its own
        assert store.view("acme", tid).state is TrainingState.SETTLED
        keys, cursor, skip = _tick_and_run(instance, defs, resources, cursor)
        assert keys == [] and skip is not None and skip.startswith("No new training manifests")
    assert [k for k, _ in _kinds(engine, "acme")] == ["grant", "spend", "settlement"]
    assert ledger_balance(engine).balanced


def test_the_sensor_refuses_a_manifest_that_does_not_fit_its_split_until_it_is_corrected(
        tmp_path: Path, sqlite_url: str) -> None:
    from assets.credits import training_sensor
    from resources.refund import RefundTrainingsResource
    from resources.store import StoreResource

    trainings = tmp_path / "trainings"
    assets_support.make_training(trainings, "tr_short", n=120, seed=5)
    model = trainings / "tr_short" / "model.jsonl"
    good = model.read_bytes()
    model.write_bytes(b"".join(good.splitlines(keepends=True)[:30]))
    res = {"refund_trainings": RefundTrainingsResource(folder=str(trainings)),
           "store": StoreResource(url=sqlite_url)}
    with dg.DagsterInstance.ephemeral() as instance:
        first = training_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=res))
        assert first.run_requests == [] and not first.dynamic_partitions_requests
        assert "Refused now: tr_short:" in (first.skip_message or "")
        assert "without a prediction" in (first.skip_message or "") or "none for" in (first.skip_message or "")
        cursor = first.cursor
        assert cursor is not None and json.loads(cursor)["refused"].keys() == {"tr_short"}
        again = training_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=res,
                                                                       cursor=cursor))
        assert again.run_requests == [] and "Refused now" not in (again.skip_message or "")
        assert "1 refused until their files change" in (again.skip_message or "")
        model.write_bytes(good)  # corrected
        fixed = training_sensor(dg.build_sensor_context(instance=instance, resources=res, cursor=cursor))
        assert isinstance(fixed, dg.SensorResult)
        assert [r.run_key for r in fixed.run_requests or []] == ["verdict:tr_short"]
        assert "refused" not in json.loads(fixed.cursor or "{}")
