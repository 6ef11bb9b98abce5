"""Scratch PostgreSQL databases for the benchmarks: made on the local server, dropped after.

The benchmarks that measure the real PostgreSQL store (or a Dagster instance on it) each need
fresh databases that nothing else touches; :func:`scratch_databases` makes them with unique
names and drops them (``WITH (FORCE)``, so a leftover connection cannot keep one) however the
block ends.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

PG_ADMIN = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
"""The local server's maintenance connection (the test suite's; ``.ci/run`` starts it)."""


def database_url(name: str) -> str:
    """The URL of database ``name`` on :data:`PG_ADMIN`'s server.

    >>> database_url("bench_x")
    'postgresql+psycopg2://postgres@127.0.0.1:5432/bench_x'
    """
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def scratch_databases(prefix: str, *roles: str) -> Iterator[list[str]]:
    """One new database per role (``<prefix>_<tag>_<role>``, a random tag), their URLs in the
    roles' order; dropped when the block ends."""
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    tag = uuid.uuid4().hex[:10]
    names = [f"{prefix}_{tag}_{role}" for role in roles]
    try:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield [database_url(name) for name in names]
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
