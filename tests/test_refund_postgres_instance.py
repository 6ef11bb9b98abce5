"""The Dagster instance on the real PostgreSQL server: the shipped template, and the URL form."""

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from assets.refund import REFUND_ASSETS, REFUND_CHECKS, verdict_job
from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
from resources.store import StoreResource
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.instance import (
    check_pg_url,
    postgres_instance_config,
    write_instance_yaml,
)
from typestrict_pipeline.refund.types import Verdict

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

TEMPLATE = Path(__file__).resolve().parent.parent / "deploy" / "dagster.postgres.yaml"


def _materialize(home: Path, training_id: str, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    instance.add_dynamic_partitions("trainings", [training_id])
    resources: dict[str, Any] = {
        "refund_trainings": RefundTrainingsResource(
            folder=str(home / "trainings"), audits_folder=str(home / "audits")
        ),
        "refund_jev_client": ManifestSourceClientResource(max_workers=1),
        "refund_model_client": ManifestSourceClientResource(max_workers=1),
        "store": StoreResource(url=f"sqlite:///{home / 'store.db'}"),
    }
    defs = dg.Definitions(
        assets=list(REFUND_ASSETS), asset_checks=list(REFUND_CHECKS), jobs=[verdict_job], resources=resources
    )
    return defs.resolve_job_def("verdict_job").execute_in_process(
        partition_key=training_id, instance=instance
    )


@pytest.mark.postgres
def test_the_shipped_template_stores_a_verdict_run_in_postgres(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = make_url(pg_url)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(TEMPLATE, dagster_home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("DAGSTER_PG_HOST", str(url.host))
    monkeypatch.setenv("DAGSTER_PG_PORT", str(url.port))
    monkeypatch.setenv("DAGSTER_PG_USERNAME", str(url.username))
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", url.password or "")
    monkeypatch.setenv("DAGSTER_PG_DB", str(url.database))
    support.make_training(tmp_path / "trainings", "tr_pg", model_skill=0.95, jev_skill=0.55, seed=21)

    instance = dg.DagsterInstance.get()
    try:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PatientPostgresEventLogStorage"
        result = _materialize(tmp_path, "tr_pg", instance)
        assert result.success
        assert result.output_for_node("verdict").verdict is Verdict.BEATS
        run_id = result.run_id
        latest = instance.get_latest_materialization_event(dg.AssetKey("verdict"))
        assert latest is not None and latest.run_id == run_id
        materialization = latest.asset_materialization
        assert materialization is not None
        meta = materialization.metadata
        assert meta["verdict"].value == "beats"
    finally:
        instance.dispose()

    # Read it back from PostgreSQL itself: the run, the materializations, the checks, the partition.
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            status = conn.execute(
                text("SELECT status FROM runs WHERE run_id = :r"), {"r": run_id}
            ).scalar_one()
            assert status == "SUCCESS"
            materialized = conn.execute(
                text(
                    "SELECT count(*) FROM event_logs WHERE run_id = :r "
                    "AND dagster_event_type = 'ASSET_MATERIALIZATION'"
                ),
                {"r": run_id},
            ).scalar_one()
            assert materialized == 7
            checks = conn.execute(
                text(
                    "SELECT check_name FROM asset_check_executions WHERE run_id = :r ORDER BY check_name"
                ),
                {"r": run_id},
            ).scalars().all()
            assert list(checks) == ["gain_is_real", "nothing_collapses"]
            partitions = conn.execute(
                text("SELECT partition FROM dynamic_partitions WHERE partitions_def_name = 'trainings'")
            ).scalars().all()
            assert list(partitions) == ["tr_pg"]
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_url_form_written_by_the_helper(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dagster_home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url)
    written = write_instance_yaml(dagster_home, postgres_instance_config())
    assert "postgres_url" in written.read_text() and pg_url not in written.read_text()
    support.make_training(tmp_path / "trainings", "tr_pg_failed", status="failed")
    instance = dg.DagsterInstance.get()
    try:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        result = _materialize(tmp_path, "tr_pg_failed", instance)
        assert result.output_for_node("verdict").verdict is Verdict.FAILED
        assert instance.get_run_by_id(result.run_id) is not None
    finally:
        instance.dispose()


def test_a_bare_postgresql_url_is_refused_with_the_fix() -> None:
    with pytest.raises(InputError, match=r"postgresql\+psycopg2://u:\*\*\*@db:5432/dagster"):
        check_pg_url("postgresql://u:secret@db:5432/dagster")
    with pytest.raises(InputError, match="DAGSTER_PG_URL, or all of DAGSTER_PG_HOST"):
        postgres_instance_config({"DAGSTER_PG_HOST": "db"})


def test_the_shipped_sqlite_template_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(TEMPLATE.with_name("dagster.yaml"), dagster_home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    instance = dg.DagsterInstance.get()
    try:
        # Dagster's SQLite storage, whose run and schedule databases wait 30 s for a busy file
        assert type(instance.run_storage).__name__ == "PatientSqliteRunStorage"
        assert type(instance.schedule_storage).__name__ == "PatientSqliteScheduleStorage"
        assert (dagster_home / "history" / "runs.db").is_file()  # Dagster's files, where they were
        settings = instance.get_concurrency_config()
        assert settings.run_queue_config is not None
        assert settings.run_queue_config.max_concurrent_runs == 2
        assert settings.pool_config.default_pool_limit == 1
    finally:
        instance.dispose()
