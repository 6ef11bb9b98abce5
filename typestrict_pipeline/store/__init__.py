"""The domain store: our own tables (SQLAlchemy 2 + Alembic), SQLite by default, PostgreSQL in production."""

from typestrict_pipeline.store.base import Base, UTCDateTime, utcnow
from typestrict_pipeline.store.engine import (
    create_store_engine,
    default_store_url,
    normalize_url,
    open_store,
    rows_by_id,
    session_scope,
    store_failure,
    typestrict_home,
    upgrade,
)

__all__ = [
    "Base",
    "UTCDateTime",
    "create_store_engine",
    "default_store_url",
    "normalize_url",
    "open_store",
    "rows_by_id",
    "session_scope",
    "store_failure",
    "typestrict_home",
    "upgrade",
    "utcnow",
]
