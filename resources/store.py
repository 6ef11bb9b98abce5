"""The domain store as a Dagster resource (key ``store``), shared by every area.

``url`` defaults to ``TYPESTRICT_STORE_URL``, else the SQLite file under ``TYPESTRICT_HOME``;
both are read when a run or a tick uses the resource, never at import. The same class is the
test implementation: give it a ``sqlite:///...`` URL in a temporary folder (or the real
PostgreSQL test database).

**The store travels with the run.** Whatever launches a run on a store it was given (``typestrict
study run --store URL``, the API, a sensor's or a schedule's run request) puts that URL in the
run's config and names it in the ``typestrict/store`` tag (:func:`on_store`,
:func:`store_run_request`), so the run acts on that store and no other, whatever the environment
of the process that executes it.

**Never a password in a run.** Run config and tags are shown by the Dagster UI, so the URL they
hold has its password removed (:func:`typestrict_pipeline.store.urls.without_password`). When the
run executes, :meth:`StoreResource.resolved_url` takes the password from that process's
``TYPESTRICT_STORE_URL`` if it names the same user, host, port and database; otherwise libpq
looks for it (``PGPASSWORD``, ``~/.pgpass``). See docs/operations.md, "The store of a run".
"""

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from sqlalchemy import Engine

from typestrict_pipeline.store import default_store_url, normalize_url, open_store
from typestrict_pipeline.store.urls import restore_password, without_password


class StoreResource(dg.ConfigurableResource["StoreResource"]):
    """Our own tables (SQLAlchemy + Alembic): SQLite by default, PostgreSQL in production.

    Attributes:
        url: the store URL; None means ``TYPESTRICT_STORE_URL`` or
            ``sqlite:///${TYPESTRICT_HOME}/store.db`` (resolved when used). A PostgreSQL URL
            without a password gets the one of ``TYPESTRICT_STORE_URL`` when that URL names the
            same user, host, port and database.
    """

    url: str | None = None

    def resolved_url(self) -> str:
        """The URL this resource opens (the setting, else the environment's default); it may
        hold a password: never show it (runs carry :func:`without_password` of it)."""
        if self.url:
            return restore_password(normalize_url(self.url), os.environ.get("TYPESTRICT_STORE_URL"))
        return normalize_url(default_store_url())

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
"""The tag naming the store a run acts on (its URL without a password)."""


def with_store(run_config: Mapping[str, Any], url: str) -> dict[str, Any]:
    """``run_config`` with the ``store`` resource set to ``url`` without its password, so the run
    acts on that store whatever the executing process's environment says.

    >>> with_store({"ops": {}}, "postgresql://u:secret@h/db")["resources"]
    {'store': {'config': {'url': 'postgresql+psycopg2://u@h/db'}}}
    """
    out = dict(run_config)
    resources = dict(out.get("resources") or {})
    resources["store"] = {"config": {"url": without_password(url)}}
    out["resources"] = resources
    return out


def store_tags(url: str) -> dict[str, str]:
    """The ``typestrict/store`` tag of a run on ``url`` (without its password).

    >>> store_tags("postgresql://u:secret@h/db")
    {'typestrict/store': 'postgresql+psycopg2://u@h/db'}
    """
    return {STORE_TAG: without_password(url)[:200]}


def on_store(url: str, run_config: Mapping[str, Any] | None = None,
             tags: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The run config and tags of a run acting on the store at ``url``: ``run_config`` with the
    store set (:func:`with_store`) and ``tags`` with :data:`STORE_TAG`. Every launcher (sensors,
    schedules, the CLI, the API) builds its run with this, so none holds a password."""
    return with_store(run_config or {}, url), {**dict(tags or {}), **store_tags(url)}


def store_run_request(url: str, *, run_key: str | None, run_config: Mapping[str, Any] | None = None,
                      tags: Mapping[str, str] | None = None, partition_key: str | None = None) -> dg.RunRequest:
    """A sensor's or a schedule's run request acting on the store at ``url`` (the one the tick
    read: ``store.resolved_url()``), by :func:`on_store`."""
    config, all_tags = on_store(url, run_config, tags)
    return dg.RunRequest(run_key=run_key, run_config=config, tags=all_tags, partition_key=partition_key)


def store_of_run(run_config: Mapping[str, Any], fallback: StoreResource) -> StoreResource:
    """The store a run acted on: the one its config names (:func:`with_store`), else
    ``fallback`` (a run launched without one used the environment's store)."""
    resources = run_config.get("resources")
    store = resources.get("store") if isinstance(resources, Mapping) else None
    config = store.get("config") if isinstance(store, Mapping) else None
    url = config.get("url") if isinstance(config, Mapping) else None
    return StoreResource(url=url) if isinstance(url, str) and url else fallback


def default_resources() -> dict[str, Any]:
    """``{"store": StoreResource()}``: the environment's store."""
    return {"store": StoreResource()}
