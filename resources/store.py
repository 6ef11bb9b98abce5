"""The domain store as a Dagster resource (key ``store``), shared by every area.

``url`` defaults to ``TYPESTRICT_STORE_URL``, else the SQLite file under ``TYPESTRICT_HOME``;
both are read when a run or a tick uses the resource, never at import. The same class is the
test implementation: give it a ``sqlite:///...`` URL in a temporary folder (or the real
PostgreSQL test database).

**The store travels with the run.** Whatever launches a run on a store it was given (``typestrict
study run --store URL``, a sensor's or a schedule's run request) puts that URL in the run's
config (:func:`with_store`) and names it in the ``typestrict/store`` tag (password hidden), so
the run acts on that store and no other, whatever the environment of the process that executes
it. A PostgreSQL password in the URL is then in the run's config: keep it out of the URL
(``~/.pgpass`` or ``PGPASSWORD``) where others read the Dagster UI (docs/operations.md).
"""

from collections.abc import Iterator, Mapping
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


STORE_TAG = "typestrict/store"
"""The tag naming the store a run acts on (its URL, password hidden)."""


def with_store(run_config: Mapping[str, Any], url: str) -> dict[str, Any]:
    """``run_config`` with the ``store`` resource set to ``url`` (normalized), so the run acts on
    that store whatever the executing process's environment says.

    >>> with_store({"ops": {}}, "postgresql://u@h/db")["resources"]
    {'store': {'config': {'url': 'postgresql+psycopg2://u@h/db'}}}
    """
    out = dict(run_config)
    resources = dict(out.get("resources") or {})
    resources["store"] = {"config": {"url": normalize_url(url)}}
    out["resources"] = resources
    return out


def store_tags(url: str) -> dict[str, str]:
    """The ``typestrict/store`` tag of a run on ``url`` (the password hidden).

    >>> store_tags("postgresql://u:secret@h/db")
    {'typestrict/store': 'postgresql+psycopg2://u:***@h/db'}
    """
    from sqlalchemy.engine import make_url

    return {STORE_TAG: make_url(normalize_url(url)).render_as_string(hide_password=True)[:200]}


def default_resources() -> dict[str, Any]:
    """``{"store": StoreResource()}``: the environment's store."""
    return {"store": StoreResource()}
