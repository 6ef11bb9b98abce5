"""One store per run, end to end, and never a password in a run (issue 5/7, item 1).

Every launcher of the product (each sensor and schedule that requests a run on the store, the
API's run submission, ``typestrict study run``) is given store A: a scratch PostgreSQL database
whose URL is written with a password (the test server trusts its clients, so the password is never
checked, but it must never show). The run it asks for is then executed in process, as the daemon's
run worker would, in an environment whose ``TYPESTRICT_STORE_URL`` names store B: a SQLite file
that does not exist. The run must act on A (its effect is read back from A), B must never be
opened (its folder never appears), and the run's config and tags must name A without its password.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.engine import make_url

from assets.credits import credit_settlement, retention_schedule, training_sensor
from assets.lifecycle import lifecycle_sensor, verdict_refusal_sensor
from assets.refund import VERDICT_JOB_EXECUTION
from assets.studies import study_run_config
from resources.credits import CreditsResource
from resources.refund import RefundTrainingsResource
from resources.store import (
    STORE_TAG,
    StoreResource,
    on_store,
    store_run_request,
    store_tags,
    with_store,
)
from typestrict_pipeline.backtest.tables import LiveDecisionRow
from typestrict_pipeline.credits import CreditLedger, ModelState, get_model
from typestrict_pipeline.lifecycle.leases import LeaseKind, release_in
from typestrict_pipeline.lifecycle.trainings import TrainingState, training_status
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.store.urls import restore_password, without_password
from typestrict_pipeline.study.form import StudyForm, study_config
from typestrict_pipeline.study.service import create_study_from_config
from typestrict_pipeline.study.tables import LockRow, StudyRow, StudyState


def _load(name: str) -> Any:
    """Another test file's helpers, as a module of its own (``run_store_<name>``)."""
    alias = f"run_store_{name}"
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.spec_from_file_location(alias, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


refund_support = _load("test_refund_assets_support")

PASSWORD = "s3cret-Pw-7f1c"


def with_password(url: str, password: str = PASSWORD) -> str:
    """``postgresql+psycopg2://user@host:port/db`` with ``password`` written into it."""
    return make_url(url).set(password=password).render_as_string(hide_password=False)


@dataclass
class Stores:
    a: str
    """Store A as the launcher is given it: with a password."""
    named: str
    """Store A as a run must name it: the same URL without the password."""
    b_folder: Path
    """Store B's folder: ``TYPESTRICT_STORE_URL`` of the executing process points inside it."""
    home: Path
    engine: Engine
    """An engine on store A, to read back what the run did."""

    def b_untouched(self) -> bool:
        return not self.b_folder.exists()  # opening B would have created its folder and file


@pytest.fixture
def stores(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stores]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    b_folder = tmp_path / "store-b"
    monkeypatch.setenv("TYPESTRICT_STORE_URL", f"sqlite:///{b_folder / 'store.db'}")
    engine = open_store(pg_url)
    yield Stores(a=with_password(pg_url), named=pg_url, b_folder=b_folder, home=home, engine=engine)
    engine.dispose()


def assert_names_a(run_config: Mapping[str, Any], tags: Mapping[str, str], stores: Stores) -> None:
    """The run names store A, in its config and its tag, and shows no password anywhere."""
    shown = json.dumps(dict(run_config), default=str) + json.dumps(dict(tags))
    assert PASSWORD not in shown
    assert run_config["resources"]["store"]["config"]["url"] == stores.named
    assert tags[STORE_TAG] == stores.named


def defs() -> dg.Definitions:
    """The code location, resources as the daemon binds them (the store: the environment's)."""
    from typestrict_pipeline.definitions import defs as code_location

    return code_location


# ------------------------------------------------------------------------------------------------
# Sensors and schedules
# ------------------------------------------------------------------------------------------------


def test_training_sensor_asks_for_a_verdict_run_that_settles_in_its_store(stores: Stores) -> None:
    refund_support.make_training(stores.home / "trainings", "tr_a", n=80, seed=3)
    CreditLedger(stores.engine).grant("tests", 1, reference="run-store")
    resources = {"refund_trainings": RefundTrainingsResource(), "store": StoreResource(url=stores.a)}
    with dg.DagsterInstance.ephemeral() as instance:
        tick = training_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert isinstance(tick, dg.SensorResult)
        [request] = tick.run_requests or []
        assert request.partition_key == "tr_a"
        assert_names_a(request.run_config, request.tags, stores)
        # A partitioned job's request with a config of its own replaces the job's default
        # config: the verdict run keeps its in-process executor (docs/operations.md, Executors).
        assert request.run_config == with_store(VERDICT_JOB_EXECUTION, stores.a)
        instance.add_dynamic_partitions("trainings", ["tr_a"])  # what the daemon does with the tick
        result = defs().resolve_job_def("verdict_job").execute_in_process(
            partition_key="tr_a", run_config=request.run_config, tags=request.tags, instance=instance)
    assert result.success
    assert "settlement" in [ln.kind.value for ln in CreditLedger(stores.engine).training_lines("tr_a")]
    assert get_model(stores.engine, "tr_a").model_id == "tr_a"
    assert stores.b_untouched()


def _settle_in_a(stores: Stores, training_id: str) -> dt.datetime:
    """A model settled in store A (verdict ``beats``) with files; when it was settled."""
    trainings = stores.home / "trainings"
    refund_support.make_training(trainings, training_id, n=40, seed=5)
    (trainings / training_id / "model").mkdir()
    (trainings / training_id / "model" / "weights.bin").write_bytes(b"\x00" * 32)
    data = synthetic_decision(seed=7, n=120, n_answers=2, model_skill=3.0, jev_skill=0.2)
    judgement = judge([data], keep_if_loses=False, resamples=200)
    assert judgement.verdict is Verdict.BEATS
    refund = RefundTrainingsResource()
    audit = write_audit(refund.audit_path(training_id),
                        build_audit(judgement, training_id=training_id, model_id=training_id, jev_id="jev"))
    CreditLedger(stores.engine).grant("tests", 1, reference="run-store")
    context = dg.build_asset_context(partition_key=training_id, resources={
        "store": StoreResource(url=stores.a), "credits": CreditsResource(retention_days=30),
        "refund_trainings": refund})
    credit_settlement(context, verdict=judgement, audit=str(audit))
    return get_model(stores.engine, training_id).settled_at


def test_retention_schedule_asks_for_a_sweep_of_its_store(stores: Stores) -> None:
    settled_at = _settle_in_a(stores, "tr_r")
    tick = retention_schedule.evaluate_tick(dg.build_schedule_context(
        scheduled_execution_time=settled_at + dt.timedelta(days=31),
        resources={"store": StoreResource(url=stores.a)}))
    [request] = tick.run_requests or []
    assert_names_a(request.run_config, request.tags, stores)
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs().resolve_job_def("retention_job").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance)
    assert result.success and result.output_for_node("expire_model_files") == 1
    assert get_model(stores.engine, "tr_r").state is ModelState.EXPIRED
    assert not (stores.home / "trainings" / "tr_r" / "model").exists()
    assert stores.b_untouched()


def _study_form() -> StudyForm:
    return StudyForm(workflow="wx", start="2012-01-01", end="2012-12-01", tune_steps=20, eval_steps=20,
                     holdout_steps=20, grid=["skill=0.5,0.6"], synthetic=True, max_candidates=2,
                     max_total_steps=1000, workspace="w")


def test_lifecycle_sensor_asks_for_a_run_that_ends_what_died_in_its_store(stores: Stores) -> None:
    sid = create_study_from_config(stores.engine, study_config(_study_form()))
    with session_scope(stores.engine) as s:  # its process is gone: no lease, created minutes ago
        release_in(s, LeaseKind.STUDY, str(sid))
        s.execute(update(StudyRow).where(StudyRow.id == sid).values(
            created_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)))
    with dg.DagsterInstance.ephemeral() as instance:
        tick = lifecycle_sensor.evaluate_tick(dg.build_sensor_context(
            instance=instance, resources={"store": StoreResource(url=stores.a)}))
        [request] = tick.run_requests or []
        assert request.tags["typestrict/due"] == f"study:{sid}"
        assert_names_a(request.run_config, request.tags, stores)
        result = defs().resolve_job_def("lifecycle_job").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance)
    assert result.success
    with session_scope(stores.engine) as s:
        assert s.scalar(select(StudyRow.state).where(StudyRow.id == sid)) == StudyState.INTERRUPTED.value
        assert s.scalar(select(func.count()).select_from(LockRow)) == 0
    assert stores.b_untouched()


def test_the_live_schedule_asks_for_a_decision_stored_in_its_store(stores: Stores) -> None:
    schedule = defs().resolve_schedule_def("live_seattle_rain_schedule")
    tick = schedule.evaluate_tick(dg.build_schedule_context(
        scheduled_execution_time=dt.datetime(2026, 12, 1, 0, 5, tzinfo=dt.UTC),
        resources={"store": StoreResource(url=stores.a)}))
    [request] = tick.run_requests or []
    assert_names_a(request.run_config, request.tags, stores)
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs().resolve_job_def("live_seattle_rain_job").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance)
    assert result.success
    with session_scope(stores.engine) as s:
        assert s.scalar(select(func.count()).select_from(LiveDecisionRow)) == 1
    assert stores.b_untouched()


def test_a_refused_verdict_run_is_recorded_in_the_store_that_run_acted_on(stores: Stores) -> None:
    trainings = stores.home / "trainings"
    refund_support.make_training(trainings, "tr_short", n=80, seed=4)
    model = trainings / "tr_short" / "model.jsonl"
    model.write_bytes(b"".join(model.read_bytes().splitlines(keepends=True)[:20]))  # the customer's fault
    config, tags = on_store(stores.a, tags={"typestrict/training": "tr_short"})
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("trainings", ["tr_short"])
        result = defs().resolve_job_def("verdict_job").execute_in_process(
            partition_key="tr_short", run_config=config, tags=tags, instance=instance, raise_on_error=False)
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
        assert run is not None
        [record] = instance.get_records_for_run(result.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
        event = record.event_log_entry.dagster_event
        assert event is not None
        context = dg.build_run_status_sensor_context(
            sensor_name="verdict_refusal_sensor", dagster_event=event,
            dagster_instance=instance, dagster_run=run,
            # The daemon's own store resource is the environment's (store B).
            resources={"store": StoreResource(), "refund_trainings": RefundTrainingsResource()},
        ).for_run_failure()
        assert verdict_refusal_sensor(context) is None
    status = training_status(stores.engine, "tr_short")
    assert status is not None and status.state is TrainingState.FAILED
    assert stores.b_untouched()


def test_a_scheduled_rerun_runs_in_the_store_its_sensor_claimed_it_in(
        stores: Stores, ephemeral_instance: dg.DagsterInstance) -> None:
    reruns = _load("test_reruns_dagster")
    world = reruns._world(stores.a, ephemeral_instance)
    world.arrive(10)
    tick = world.tick(reruns.T0)
    [request] = tick.run_requests
    assert_names_a(request.run_config, request.tags, stores)
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs().resolve_job_def("study_rerun_job").execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance)
    assert result.success
    from typestrict_pipeline.reruns.service import lineage_entries

    assert [e.state for e in lineage_entries(world.engine, world.root)] == ["FINISHED", "FINISHED"]
    world.engine.dispose()
    assert stores.b_untouched()


# ------------------------------------------------------------------------------------------------
# The API and the CLI
# ------------------------------------------------------------------------------------------------


def test_an_api_launched_study_run_names_its_store_and_runs_there(stores: Stores, tmp_path: Path) -> None:
    from typestrict_pipeline.api.runs import DagsterRuns

    sid = create_study_from_config(stores.engine, study_config(_study_form()))
    runs = DagsterRuns(tmp_path / "dagster_home", stores.a)
    try:
        run_id = runs.submit("study_job", study_run_config(sid), workspace="w", object_ref=f"study:{sid}")
        run = runs.instance.get_run_by_id(run_id)  # queued: no daemon here, so it is run below
        assert run is not None
        assert_names_a(run.run_config, run.tags, stores)
        assert run.tags["typestrict/workspace"] == "w"
        # The run worker's process: its environment names store B.
        result = defs().resolve_job_def("study_job").execute_in_process(
            run_config=run.run_config, tags=run.tags, instance=runs.instance)
    finally:
        runs.close()
    assert result.success
    with session_scope(stores.engine) as s:
        assert s.scalar(select(StudyRow.state).where(StudyRow.id == sid)) == StudyState.FINISHED.value
    assert stores.b_untouched()


def test_study_run_on_dagster_runs_in_its_store_with_no_password_in_the_run(stores: Stores) -> None:
    from typestrict_pipeline.cli.study import run_study_on_dagster

    (stores.home / "dagster_home").mkdir()
    (stores.home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    b = os.environ["TYPESTRICT_STORE_URL"]
    sid = create_study_from_config(stores.engine, study_config(_study_form()))
    assert run_study_on_dagster(sid, store_url=stores.a) is True
    assert os.environ["TYPESTRICT_STORE_URL"] == b  # the command's store was set for its run only
    with dg.DagsterInstance.from_config(str(stores.home / "dagster_home")) as instance:
        [run] = instance.get_runs()
        assert_names_a(run.run_config, run.tags, stores)
    with session_scope(stores.engine) as s:
        assert s.scalar(select(StudyRow.state).where(StudyRow.id == sid)) == StudyState.FINISHED.value
    assert stores.b_untouched()


# ------------------------------------------------------------------------------------------------
# The password: never in a run, found again where the run executes
# ------------------------------------------------------------------------------------------------

URLS_WITH_PASSWORDS = [
    ("postgresql://ana:s3cret@db.example:5432/typestrict", "s3cret",
     "postgresql+psycopg2://ana@db.example:5432/typestrict"),
    ("postgres://ana:p%40ss%3Aw0rd@db.example/typestrict", "p%40ss%3Aw0rd",
     "postgresql+psycopg2://ana@db.example/typestrict"),
    ("postgresql+psycopg2://ana@db.example/typestrict?password=q-secret&sslmode=require", "q-secret",
     "postgresql+psycopg2://ana@db.example/typestrict?sslmode=require"),
    ("postgresql://ana:both1@db.example/typestrict?password=both2", "both",
     "postgresql+psycopg2://ana@db.example/typestrict"),
]


@pytest.mark.parametrize(("url", "secret", "named"), URLS_WITH_PASSWORDS)
def test_no_password_is_ever_in_a_runs_config_or_tags(url: str, secret: str, named: str) -> None:
    requests = [store_run_request(url, run_key="k", run_config={"ops": {"x": {"config": {"n": 1}}}},
                                  tags={"typestrict/area": "t"}, partition_key="p")]
    config, tags = on_store(url, {"ops": {}}, {"typestrict/area": "t"})
    shown = [json.dumps(with_store({}, url)), json.dumps(store_tags(url)), json.dumps(config), json.dumps(tags)]
    shown += [json.dumps(r.run_config) + json.dumps(dict(r.tags)) for r in requests]
    for text in shown:
        assert secret not in text and "password" not in text and "***" not in text
    assert config["resources"]["store"]["config"]["url"] == named == tags[STORE_TAG]
    assert requests[0].run_config["resources"]["store"]["config"]["url"] == named
    assert requests[0].run_config["ops"] == {"x": {"config": {"n": 1}}}  # the rest is kept
    assert requests[0].tags["typestrict/area"] == "t" and requests[0].partition_key == "p"


def test_a_sqlite_url_is_carried_as_it_is(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a store' / 'store.db'}"
    config, tags = on_store(url)
    assert config["resources"]["store"]["config"]["url"] == url == tags[STORE_TAG] == without_password(url)


def test_the_store_resource_takes_the_password_of_the_same_database_only(
    pg_url: str, second_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TYPESTRICT_STORE_URL", with_password(pg_url).replace("+psycopg2", ""))
    same = StoreResource(url=without_password(with_password(pg_url)))
    assert make_url(same.resolved_url()).password == PASSWORD
    with same.engine() as engine:  # the engine that acts on the store holds it
        assert engine.url.password == PASSWORD and engine.url.database == make_url(pg_url).database
    # Another database, user or port on the same server: the URL stays without a password
    # (libpq then reads PGPASSWORD or ~/.pgpass).
    other_db = StoreResource(url=second_pg_url)
    assert make_url(other_db.resolved_url()).password is None
    with other_db.engine() as engine:
        assert engine.url.password is None and engine.url.database == make_url(second_pg_url).database
    a = make_url(pg_url)
    for other in (a.set(username="someone_else"), a.set(port=(a.port or 5432) + 1), a.set(host="elsewhere")):
        assert make_url(StoreResource(url=other.render_as_string()).resolved_url()).password is None
    # A URL that has its own password keeps it.
    own = StoreResource(url=with_password(pg_url, "its-own"))
    assert make_url(own.resolved_url()).password == "its-own"
    # The password given as a query parameter is found too; no port written means 5432.
    monkeypatch.setenv("TYPESTRICT_STORE_URL", "postgresql://ana@db.example/typestrict?password=q-secret")
    assert make_url(StoreResource(url="postgresql://ana@db.example:5432/typestrict").resolved_url()).password \
        == "q-secret"
    # A SQLite environment or an unset one gives nothing.
    monkeypatch.setenv("TYPESTRICT_STORE_URL", "sqlite:///elsewhere.db")
    assert make_url(StoreResource(url=pg_url).resolved_url()).password is None
    monkeypatch.delenv("TYPESTRICT_STORE_URL")
    assert restore_password(pg_url, None) == pg_url
