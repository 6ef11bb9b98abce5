"""A store URL without its password, and the password found again for the same database.

A Dagster run's config and tags are shown to everyone who reads the Dagster UI, so the store URL
a run carries never holds a password (:func:`without_password`). The process that executes the
run gets the password back from its own ``TYPESTRICT_STORE_URL`` when that URL names the same
PostgreSQL database (:func:`restore_password`: same user, host, port and database); otherwise the
URL stays without one and libpq looks for it (``PGPASSWORD``, ``~/.pgpass``). SQLite URLs hold no
password and pass through as they are.
"""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from typestrict_pipeline.store.engine import normalize_url, parse_store_url

DEFAULT_PG_PORT = 5432
"""The port a PostgreSQL URL without one connects to (libpq's default)."""


def _password(url: URL) -> str | None:
    """The URL's password: in its user part, else its ``password=`` query parameter."""
    if url.password:
        return str(url.password)
    value = url.query.get("password")
    if isinstance(value, tuple):
        value = value[-1] if value else None
    return value or None


def without_password(url: str) -> str:
    """``url`` (normalized) with no password: neither in its user part nor in a ``password=``
    query parameter. A SQLite URL is returned as it is.

    >>> without_password("postgresql://ana:s3cret@db.example:5432/store")
    'postgresql+psycopg2://ana@db.example:5432/store'
    >>> without_password("postgresql://ana@db.example/store?password=s3cret&sslmode=require")
    'postgresql+psycopg2://ana@db.example/store?sslmode=require'
    >>> without_password("sqlite:////srv/typestrict/store.db")
    'sqlite:////srv/typestrict/store.db'

    Raises:
        StoreError: not a ``sqlite:///`` or ``postgresql://`` URL (the message never shows a
            password).
    """
    url = normalize_url(url)
    parsed = parse_store_url(url)
    if parsed.get_backend_name() == "sqlite":
        return url
    # URL.set(password=None) keeps the password (None means "unchanged"): replace the field.
    bare = parsed._replace(password=None).difference_update_query(["password"])
    return bare.render_as_string(hide_password=False)


def _identity(url: URL) -> tuple[str | None, str, int, str | None]:
    """What names one PostgreSQL database: user, host (lower case), port (5432 when none is
    written), database."""
    host = url.host or url.query.get("host") or ""
    if isinstance(host, tuple):
        host = host[-1] if host else ""
    return url.username, host.lower(), url.port or DEFAULT_PG_PORT, url.database


def restore_password(url: str, source: str | None) -> str:
    """``url`` with the password of ``source`` when ``url`` is a PostgreSQL URL without one and
    ``source`` names the same user, host, port and database; otherwise ``url`` as it is (libpq
    then reads ``PGPASSWORD`` or ``~/.pgpass``).

    >>> restore_password("postgresql+psycopg2://ana@db:5432/store", "postgresql://ana:s3cret@DB/store")
    'postgresql+psycopg2://ana:s3cret@db:5432/store'
    >>> restore_password("postgresql+psycopg2://ana@db/other", "postgresql://ana:s3cret@db/store")
    'postgresql+psycopg2://ana@db/other'
    >>> restore_password("sqlite:///x.db", "postgresql://ana:s3cret@db/store")
    'sqlite:///x.db'
    """
    if not source:
        return url
    try:
        target, given = make_url(normalize_url(url)), make_url(normalize_url(source))
    except (ArgumentError, ValueError):
        return url  # opening it says what is wrong with it
    if target.get_backend_name() != "postgresql" or given.get_backend_name() != "postgresql":
        return url
    password = _password(given)
    if _password(target) is not None or password is None or _identity(target) != _identity(given):
        return url
    return target.set(password=password).render_as_string(hide_password=False)


__all__ = ["DEFAULT_PG_PORT", "restore_password", "without_password"]
