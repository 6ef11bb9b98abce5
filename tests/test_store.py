"""The domain store opens and migrates on both backends, and stores times as UTC."""

import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import inspect

from typestrict_pipeline.errors import StoreError
from typestrict_pipeline.store import UTCDateTime, normalize_url, open_store
from typestrict_pipeline.store.engine import init_store


def test_open_store_migrates_both_backends(store_url: str) -> None:
    engine = open_store(store_url)
    tables = set(inspect(engine).get_table_names())
    assert "alembic_version" in tables
    engine.dispose()


def test_open_store_twice_is_idempotent(store_url: str) -> None:
    open_store(store_url).dispose()
    open_store(store_url).dispose()


def test_naive_datetimes_are_refused() -> None:
    t = UTCDateTime()
    with pytest.raises(ValueError, match="timezone-aware"):
        t.process_bind_param(dt.datetime(2026, 1, 1), None)  # type: ignore[arg-type]
    aware = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert t.process_bind_param(aware, None) == dt.datetime(2026, 1, 1, 10)  # type: ignore[arg-type]


def test_postgres_url_gets_psycopg2_driver() -> None:
    assert normalize_url("postgres://x@y/z") == "postgresql+psycopg2://x@y/z"


def _migrate_at_once(a: Path, b: Path) -> list[str]:
    """A first ``open_store`` of ``a`` and ``init_store`` of ``b`` in two threads at once; the
    errors they raised."""
    errors: list[str] = []

    def run(make: Callable[[], object]) -> None:
        try:
            make()
        except StoreError as exc:  # pragma: no cover - the failure the test below catches
            errors.append(str(exc)[:300])

    threads = [threading.Thread(target=run, args=(lambda: open_store(f"sqlite:///{a}").dispose(),)),
               threading.Thread(target=run, args=(lambda: init_store(f"sqlite:///{b}"),))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


def test_two_stores_created_at_once_in_one_process_both_migrate(tmp_path: Path) -> None:
    """``typestrict store init`` and another thread's first ``open_store`` at the same moment, on
    two new stores (a server's thread and a command in one process): Alembic's proxies are
    process-wide, so unguarded they ran each other's operations ("table … already exists", "no
    such table: main.backtest_runs", or a crash of the interpreter)."""
    for round_ in range(6):
        a, b = tmp_path / f"a{round_}" / "store.db", tmp_path / f"b{round_}" / "store.db"
        assert _migrate_at_once(a, b) == [], f"round {round_}"
        for path in (a, b):
            engine = open_store(f"sqlite:///{path}")
            try:
                assert {"backtest_runs", "study_studies", "credit_entries"} <= set(inspect(engine).get_table_names())
            finally:
                engine.dispose()


def test_stores_migrate_while_dagster_stamps_its_own_storage_in_another_thread(tmp_path: Path) -> None:
    """A process that holds Dagster and our store (a code server, the API submitting runs): Dagster
    stamps each new SQLite storage with Alembic in its own thread while our migration runs.
    Without sharing Dagster's lock, 12 of 20 stores failed ("no such table: study_candidates")
    and Dagster's stamping failed too (``KeyError('script')``)."""
    from dagster._core.storage.runs.sqlite import SqliteRunStorage

    stop = threading.Event()
    dagster_errors: list[str] = []

    def dagster_storages() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                SqliteRunStorage.from_local(str(tmp_path / "dagster" / str(n))).dispose()
            except Exception as exc:  # pragma: no cover - the failure this test catches
                dagster_errors.append(repr(exc)[:300])

    thread = threading.Thread(target=dagster_storages)
    thread.start()
    ours: list[str] = []
    try:
        for i in range(10):
            try:
                open_store(f"sqlite:///{tmp_path / 'ours' / str(i) / 'store.db'}").dispose()
            except StoreError as exc:  # pragma: no cover - the failure this test catches
                ours.append(str(exc)[:300])
    finally:
        stop.set()
        thread.join(timeout=120)
    assert ours == [] and dagster_errors == []
