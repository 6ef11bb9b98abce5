"""Opening the domain store: one URL setting, SQLite by default, PostgreSQL in production.

The URL comes from ``TYPESTRICT_STORE_URL``; without it the store is a SQLite file under
``TYPESTRICT_HOME`` (default ``./.typestrict``). ``open_store`` brings the schema to the newest
revision of every migration branch before returning, under a database lock on PostgreSQL so
that concurrent processes never migrate twice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from typestrict_pipeline.errors import StoreError

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_MIGRATION_LOCK_KEY = 0x7473_7472  # arbitrary, constant: "tstr"
_upgraded: set[str] = set()
_upgrade_guard = threading.Lock()


def typestrict_home() -> Path:
    """The local folder for the embedded default (``TYPESTRICT_HOME`` or ``./.typestrict``)."""
    return Path(os.environ.get("TYPESTRICT_HOME", ".typestrict")).resolve()


def default_store_url() -> str:
    """``TYPESTRICT_STORE_URL`` if set, else a SQLite file under :func:`typestrict_home`."""
    url = os.environ.get("TYPESTRICT_STORE_URL")
    if url:
        return url
    return f"sqlite:///{typestrict_home() / 'store.db'}"


def normalize_url(url: str) -> str:
    """Map ``postgresql://`` and ``postgres://`` to the psycopg2 driver.

    SQLAlchemy 2.1 maps a bare ``postgresql://`` to psycopg 3, which is not installed.

    >>> normalize_url("postgresql://u@h:5432/db")
    'postgresql+psycopg2://u@h:5432/db'
    >>> normalize_url("sqlite:///x.db")
    'sqlite:///x.db'
    """
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix):]
    return url


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def create_store_engine(url: str) -> Engine:
    """An engine for ``url`` (normalized), with SQLite made safe for a few local writers."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def alembic_config(engine: Engine) -> Config:
    """An Alembic configuration pointing at our migrations, bound to ``engine``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine) -> None:
    """Apply every pending migration of every branch (``alembic upgrade heads``)."""
    cfg = alembic_config(engine)
    try:
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
                try:
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "heads")
                    conn.commit()
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK_KEY})
                    conn.commit()
        else:
            with engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "heads")
    except SQLAlchemyError as exc:
        raise StoreError(
            f"could not bring the store at {engine.url.render_as_string(hide_password=True)} "
            f"to the current schema: {exc.__class__.__name__}: {exc}. "
            "Check that the database is reachable and that this user may create tables."
        ) from exc


def open_store(url: str | None = None) -> Engine:
    """An engine on the store at ``url`` (default :func:`default_store_url`), schema upgraded.

    The upgrade runs once per URL and process.
    """
    url = normalize_url(url or default_store_url())
    engine = create_store_engine(url)
    with _upgrade_guard:
        if url not in _upgraded:
            upgrade(engine)
            _upgraded.add(url)
    return engine


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits on success, rolls back on error and always closes."""
    session = sessionmaker(bind=engine, expire_on_commit=False)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
