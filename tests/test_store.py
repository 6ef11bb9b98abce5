"""The domain store opens and migrates on both backends, and stores times as UTC."""

import datetime as dt

import pytest
from sqlalchemy import inspect

from typestrict_pipeline.store import UTCDateTime, normalize_url, open_store


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
