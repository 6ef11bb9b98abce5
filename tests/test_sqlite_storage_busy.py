"""The embedded default's Dagster storage waits for a busy SQLite file instead of failing a write.

Dagster opens its run and schedule databases with pysqlite's 5-second busy timeout; a write that
waited longer failed, and the daemon does not try every failed write again (a run's automatic
retry is given up for good). The product's storage (``resources/sqlite_storage.py``, written by
``sqlite_instance_config``) waits 30 s on every database. Each test holds a database's write lock
for longer than 5 s, from another connection as another process would, and writes through the
instance the product configures.

And a run's end is read by the daemon's cursor (its run retries) only once the run's row says the
run ended: Dagster writes the event log first and the row after, and a retry read in between was
lost for good.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster import DagsterEventType, EventLogEntry
from dagster._core.test_utils import create_run_for_test

from typestrict_pipeline.instance import (
    postgres_instance_config,
    sqlite_instance_config,
    write_instance_yaml,
)

ROOT = Path(__file__).resolve().parent.parent
HELD_S = 6.5  # longer than pysqlite's 5 s, well inside the product's 30 s


def hold_write_lock(db: Path, seconds: float, held: threading.Event | None = None) -> None:
    """Hold SQLite file ``db``'s write lock for ``seconds``, as a writer in another process does
    (``held`` is set once it is held); also used by tests/test_hostile_kill.py."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        if held is not None:
            held.set()
        time.sleep(seconds)
        con.execute("ROLLBACK")
    finally:
        con.close()


@pytest.mark.parametrize("db", ["history/runs.db", "schedules/schedules.db"])
def test_a_write_waits_out_a_busy_database_past_pysqlites_five_seconds(tmp_path: Path, db: str) -> None:
    write_instance_yaml(tmp_path, sqlite_instance_config(tmp_path))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        run = create_run_for_test(instance, job_name="verdict_job")
        held = threading.Event()
        holder = threading.Thread(target=hold_write_lock, args=(tmp_path / db, HELD_S, held))
        holder.start()
        assert held.wait(60)
        started = time.monotonic()
        if db.startswith("history"):
            instance.add_run_tags(run.run_id, {"dagster/will_retry": "true"})  # as a retry writes
        else:
            instance.schedule_storage.purge_asset_evaluations(before=time.time())  # type: ignore[union-attr]
        waited = time.monotonic() - started
        holder.join()
        stored = instance.get_run_by_id(run.run_id)
    assert waited >= 5.0, f"the write did not wait for the lock ({waited:.1f} s)"
    assert stored is not None and stored.tags.get("dagster/will_retry") == (
        "true" if db.startswith("history") else None)


def test_the_shipped_template_names_the_same_storage_as_the_written_instance(tmp_path: Path) -> None:
    shipped = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["storage"]["custom"]
    written = sqlite_instance_config(tmp_path)["storage"]["custom"]
    assert {k: v for k, v in shipped.items() if k != "config"} == {
        k: v for k, v in written.items() if k != "config"}
    assert shipped["config"] == {"base_dir": {"env": "DAGSTER_HOME"}}


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_runs_end_reaches_the_retry_cursor_only_once_its_row_says_so(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on both of the product's storages: on PostgreSQL the two writes are two
    statements (``resources/postgres_storage.py``)."""
    if backend == "postgres":
        monkeypatch.setenv("DAGSTER_PG_URL", request.getfixturevalue("pg_url"))
        write_instance_yaml(tmp_path, postgres_instance_config())
    else:
        write_instance_yaml(tmp_path, sqlite_instance_config(tmp_path))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        run = create_run_for_test(instance, job_name="verdict_job", status=dg.DagsterRunStatus.STARTED)
        failure = dg.DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name="verdict_job",
                                  message="the run's process is gone")
        # The event log first, as Dagster writes a run's end; the run's row still says STARTED.
        instance.event_log_storage.store_event(EventLogEntry(  # type: ignore[no-untyped-call]
            None, "ERROR", "", run.run_id, time.time(), dagster_event=failure))

        def read() -> list[str]:  # what the retry daemon reads after its cursor
            return [e.run_id for e in instance.event_log_storage.get_logs_for_all_runs_by_log_id(
                after_cursor=-1, dagster_event_type=DagsterEventType.RUN_FAILURE).values()]

        assert read() == []  # not yet: a retry read now would find the run started, and skip it
        instance.run_storage.handle_run_event(run.run_id, failure)  # then the row, as Dagster does
        assert read() == [run.run_id]
