"""The domain store as a Dagster resource (key ``store``), shared by every area.

``url`` defaults to ``TYPESTRICT_STORE_URL``, else the SQLite file under ``TYPESTRICT_HOME``;
both are read when a run or a tick uses the resource, never at import. The same class is the
test implementation: give it a ``sqlite:///...`` URL in a temporary folder (or the real
PostgreSQL test database).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
from sqlalchemy import Engine

from typestrict_pipeline.store import default_store_url, normalize_url, open_store


class StoreResource(dg.ConfigurableResource["StoreResource"]):
    """Our own tables (SQLAlchemy + Alembic): SQLite by default, PostgreSQL in production.

    Attributes:
        url: the store URL; None means ``TYPESTRICT_STORE_URL`` or
            ``sqlite:///${TYPESTRICT_HOME}/store.db`` (resolved when used).
    """

    url: str | None = None

    def resolved_url(self) -> str:
        """The URL this resource opens (the setting, else the environment's default)."""
        return normalize_url(self.url or default_store_url())

    def open_engine(self) -> Engine:
        """An engine on the store, schema upgraded to every branch's head; the caller disposes it."""
        return open_store(self.resolved_url())

    @contextmanager
    def engine(self) -> Iterator[Engine]:
        """``with store.engine() as engine:`` an engine disposed on exit (one per run or tick)."""
        engine = self.open_engine()
        try:
            yield engine
        finally:
            engine.dispose()


def default_resources() -> dict[str, Any]:
    """``{"store": StoreResource()}``: the environment's store."""
    return {"store": StoreResource()}
