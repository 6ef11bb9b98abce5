"""Opening the domain store: one URL setting, SQLite by default, PostgreSQL in production.

The URL comes from ``TYPESTRICT_STORE_URL``; without it the store is a SQLite file under
``TYPESTRICT_HOME`` (default ``./.typestrict``). ``open_store`` brings the schema to the newest
revision of every migration branch before returning, under a database lock on PostgreSQL so
that concurrent processes never migrate twice.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from typestrict_pipeline.errors import StoreError
from typestrict_pipeline.store.base import Base

T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_MIGRATION_LOCK_KEY = 0x7473_7472  # arbitrary, constant: "tstr"
_upgraded: set[tuple[str, tuple[int, int] | None]] = set()
_upgrade_guard = threading.Lock()
_migration_guard = threading.Lock()
"""One migration at a time in this process: Alembic's ``op`` and ``context`` are process-wide
proxies, so two threads migrating two stores at once run each other's operations on the wrong
connection ("table … already exists", "no such table", even a crash of the interpreter)."""
_DAGSTER_ALEMBIC = ("dagster._core.storage.sql", "_alembic_lock")
"""Where Dagster keeps the lock it holds while it stamps its own SQLite storages with Alembic
(a new run's event log, a new instance): held too, when Dagster is loaded in this process."""


def typestrict_home(environ: Mapping[str, str] | None = None) -> Path:
    """The local folder for the embedded default: ``TYPESTRICT_HOME`` (of ``environ``, default
    the process's), else ``./.typestrict``. Set but empty (``TYPESTRICT_HOME=$UNSET``) is unset,
    as for ``TYPESTRICT_STORE_URL``: never the current folder itself.

    >>> typestrict_home({"TYPESTRICT_HOME": ""}) == Path(".typestrict").resolve()
    True
    """
    env = os.environ if environ is None else environ
    return Path(env.get("TYPESTRICT_HOME") or ".typestrict").resolve()


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
    # WAL + NORMAL: a commit no longer waits for fsync; still durable when a process is killed
    # (the study resumes exactly), only a power loss may roll back the last commits, atomically
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


SUPPORTED_SCHEMES = ("sqlite", "postgresql")


def parse_store_url(url: str) -> URL:
    """``url`` parsed, when it is a store URL this product opens (``sqlite:///`` with the built-in
    driver, or ``postgresql://``), else a :class:`StoreError` that never shows a password.

    >>> parse_store_url("postgresql://u@db:5432/store").port
    5432
    >>> parse_store_url("postgresql://u@db:notaport/store")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB, got 'postgresql://u@db:notaport/store'. Fix --store or TYPESTRICT_STORE_URL (docs/operations.md).
    >>> parse_store_url("postgresql://u@db:5432/store?sslmode=require&port=2")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: expected a store URL that names its server and database once, got 'postgresql://u@db:5432/store?sslmode=require&port=2', whose query names port again. Remove 'port=' from the query (after '?').
    >>> parse_store_url("postgresql://u@db:99999/store")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: expected a store URL whose port is a TCP port from 1 to 65535, got 'postgresql://u@db:99999/store'. Write the server's port, 5432 by default, or leave ':PORT' out.
    >>> parse_store_url("postgresql://u@/store?host=/var/run/postgresql").query
    immutabledict({'host': '/var/run/postgresql'})
    >>> parse_store_url("sqlite:////srv/store.db?uri=true&mode=memory")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: expected a store URL sqlite:///PATH naming the store's file and nothing else, got 'sqlite:////srv/store.db?uri=true&mode=memory' (a query after '?'). Remove the '?' and what follows it.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number ("h:x", "[::1")
        parsed = None
    backend = parsed.get_backend_name() if parsed is not None else None
    if parsed is None or backend not in SUPPORTED_SCHEMES:
        shown = _mask(url)
        raise StoreError(
            "expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB, got "
            f"{shown!r}. Fix --store or TYPESTRICT_STORE_URL (docs/operations.md)."
        )
    if backend == "sqlite" and parsed.drivername not in ("sqlite", "sqlite+pysqlite"):
        raise StoreError(
            f"expected the built-in SQLite driver, got {parsed.drivername!r}. "
            "Write the URL as sqlite:///PATH."
        )
    if backend == "sqlite" and parsed.query:
        # The driver reads them: '?uri=true&mode=memory' opened an in-memory database (or a file
        # named 'store.db?mode=memory') while the command said it wrote to store.db, and
        # '?mode=ro' printed the driver's warning with a line of its source.
        raise StoreError(
            f"expected a store URL sqlite:///PATH naming the store's file and nothing else, got "
            f"{_mask(url)!r} (a query after '?'). Remove the '?' and what follows it."
        )
    if backend == "postgresql" and parsed.drivername not in ("postgresql", "postgresql+psycopg2"):
        raise StoreError(
            f"expected the psycopg2 driver for PostgreSQL, got {parsed.drivername!r}. "
            "Write the URL as postgresql://USER@HOST:PORT/DB."
        )
    if backend == "postgresql" and parsed.port is not None and not 1 <= parsed.port <= 65535:
        # libpq's own 'invalid port number' came only when the command connected
        raise StoreError(
            f"expected a store URL whose port is a TCP port from 1 to 65535, got {_mask(url)!r}. "
            "Write the server's port, 5432 by default, or leave ':PORT' out."
        )
    if backend == "postgresql":
        # libpq takes a query's host, port, dbname or user over the URL's own: '...@h:5432/db?port=2'
        # connected to port 2 while every message and log named h:5432.
        named = {"host": parsed.host, "hostaddr": parsed.host, "service": parsed.host,
                 "port": parsed.port, "dbname": parsed.database, "user": parsed.username}
        twice = sorted(k for k in parsed.query if named.get(k))
        if twice:
            raise StoreError(
                f"expected a store URL that names its server and database once, got {_mask(url)!r}, "
                f"whose query names {', '.join(twice)} again. Remove "
                f"{', '.join(repr(k + '=') for k in twice)} from the query (after '?')."
            )
    return parsed


def _mask(url: str) -> str:
    """``url`` with any password hidden and cut to 120 characters (never echo a secret)."""
    head, sep, tail = url.partition("://")
    if sep and "@" in tail:
        userinfo, _, hostpart = tail.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        url = f"{head}://{userinfo}@{hostpart}"
    return url if len(url) <= 120 else url[:117] + "..."


def create_store_engine(url: str) -> Engine:
    """An engine for ``url`` (normalized), with SQLite made safe for a few local writers.

    Raises:
        StoreError: the URL is not a ``sqlite:///`` or ``postgresql://`` URL.
    """
    url = normalize_url(url)
    parsed = parse_store_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            _store_folder(Path(database))
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    event.listen(engine, "before_cursor_execute", refuse_nul)
    return engine


def _store_folder(database: Path) -> None:
    """Make the folder of a SQLite store's file. A file in the way (``TYPESTRICT_HOME`` or a
    folder of ``--store`` naming a file or a FIFO) is one message naming it, exit 2: it was
    ``FileExistsError`` reported as a bug, by every command that may start a store."""
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        from typestrict_pipeline.files import special_kind

        where = str(exc.filename or database.parent)
        kind = special_kind(where) or "a file"
        raise StoreError(
            f"expected a folder to hold the store {database}, got {where!r}, {kind}, in its place. Point "
            "--store, TYPESTRICT_STORE_URL or TYPESTRICT_HOME at a folder, or move that file away."
        ) from None


def refuse_nul(conn: object, cursor: object, statement: str, parameters: Any, context: object,
               executemany: bool) -> None:
    """Refuse a statement whose values hold a NUL character, on every backend alike.

    PostgreSQL cannot store a NUL in text (psycopg2 raises ``ValueError``, a 500 where it
    escapes); SQLite stores it raw, where a later reader may cut the text at it. The edges
    refuse control characters with the field's name first (:mod:`typestrict_pipeline.values`);
    this is the store's own last check, so no path can write one.

    Raises:
        InputError: naming the column the value was meant for.
    """
    rows = parameters if executemany and isinstance(parameters, (list, tuple)) else (parameters,)
    for row in rows:
        if isinstance(row, dict):
            items: Any = row.items()
        elif isinstance(row, (list, tuple)):
            items = enumerate(row)
        else:
            items = ((0, row),)
        for key, value in items:
            kind = type(value)
            if kind is str and "\x00" in value:
                raise _refused_value(context, key, "text without NUL characters", "a NUL (U+0000)",
                                     "remove the NUL character (the store refuses it)")
            if kind is int and not -(2**63) <= value < 2**63:
                raise _refused_value(context, key, "a whole number the store can hold (at most 19 digits)",
                                     f"a number of {len(str(abs(value))) if value.bit_length() < 10_000 else 'thousands of'} digits",
                                     "use a number in range")


def _refused_value(context: object, key: object, expected: str, got: str, fix: str) -> Exception:
    from typestrict_pipeline.errors import InputError

    names = getattr(getattr(context, "compiled", None), "positiontup", None)
    if isinstance(key, int) and names and key < len(names):
        key = str(names[key]).rsplit("__", 1)[0]
    return InputError(expected, f"{got} in the value for {key!r}", fix)


@dataclass(frozen=True)
class StoreFailure:
    """What a database error means for whoever asked (:func:`store_failure`).

    Attributes:
        kind: ``"unavailable"`` (busy, locked, unreachable), ``"read_only"``, ``"value"`` (a
            value the database refused), ``"conflict"`` (a constraint) or ``"bug"``.
        transient: the same request may succeed later (only ``unavailable``).
        message: one line for the user (expected, got, what to do).
    """

    kind: str
    transient: bool
    message: str


_READ_ONLY_WORDS = ("readonly database", "read-only", "read only", "readonlysqltransaction")


def store_failure(exc: BaseException) -> StoreFailure:
    """Classify a SQLAlchemy error: only a busy or unreachable store is worth retrying; a
    read-only store, a refused value or a constraint will fail the same way every time, and
    saying "retry in a moment" for them would be a lie.

    >>> from sqlalchemy.exc import OperationalError, DataError
    >>> store_failure(OperationalError("x", {}, Exception("database is locked"))).transient
    True
    >>> store_failure(OperationalError("x", {}, Exception("attempt to write a readonly database"))).kind
    'read_only'
    >>> store_failure(DataError("x", {}, Exception("integer out of range"))).kind
    'value'
    """
    from sqlalchemy import exc as sa

    orig = getattr(exc, "orig", None) or exc
    name = type(orig).__name__
    words = f"{name} {orig}".lower()
    if any(w in words for w in _READ_ONLY_WORDS):
        return StoreFailure("read_only", False,
                            f"expected a store that can be written, got a read-only one ({name}). Reads "
                            "still work; make the store (the SQLite file and its folder, or the "
                            "database user) writable to change anything")
    if isinstance(exc, sa.DataError):
        return StoreFailure("value", False,
                            f"expected values the store can hold (numbers in range, text without NUL, "
                            f"lengths within the schema), got one it refused ({name}: "
                            f"{' '.join(str(orig).split())[:120]}). Fix the value")
    if isinstance(exc, sa.IntegrityError):
        return StoreFailure("conflict", False,
                            f"expected a change that agrees with what is stored, got a conflict ({name}). "
                            "Reload what you changed and try again")
    if isinstance(exc, (sa.OperationalError, sa.InterfaceError, sa.TimeoutError, sa.DisconnectionError)):
        return StoreFailure("unavailable", True,
                            f"expected the store to answer, got {name} (busy or unreachable). Retry in "
                            "a moment")
    return StoreFailure("bug", False,
                        f"expected the store to accept the request, got {name}. It is logged; tell the "
                        "operator if it persists")


def alembic_config(engine: Engine) -> Config:
    """An Alembic configuration pointing at our migrations, bound to ``engine``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine) -> None:
    """Apply every pending migration of every branch (``alembic upgrade heads``), one store at
    a time in this process (:data:`_migration_guard`) and, on PostgreSQL, across processes (an
    advisory lock)."""
    cfg = alembic_config(engine)
    with migration_lock():
        _upgrade_locked(engine, cfg)


@contextmanager
def migration_lock() -> Iterator[None]:
    """Held while anything in this process runs Alembic: this module's lock, then Dagster's
    when Dagster is loaded (:func:`_dagster_alembic_lock`). A caller that runs Alembic commands
    itself (a test of one migration) holds it too."""
    with _migration_guard, _dagster_alembic_lock():
        yield


def _dagster_alembic_lock() -> AbstractContextManager[object]:
    """Dagster's own Alembic lock when Dagster is loaded in this process (a code server, the
    API's run submission, a test), else nothing to hold. Read from ``sys.modules``: the core
    never imports Dagster. Without it a Dagster instance stamping its storage in another thread
    runs its Alembic context under our migration ("no such table: study_candidates").

    >>> _dagster_alembic_lock().__class__.__name__ in {"lock", "nullcontext"}
    True
    """
    module = sys.modules.get(_DAGSTER_ALEMBIC[0])
    lock = getattr(module, _DAGSTER_ALEMBIC[1], None) if module is not None else None
    return lock if isinstance(lock, AbstractContextManager) else nullcontext()


def _upgrade_locked(engine: Engine, cfg: Config) -> None:
    """:func:`upgrade`'s work, with the process's migration lock held."""
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
    except CommandError as exc:
        raise StoreError(
            f"expected a store this version of TypeStrict knows, got one at schema revisions it "
            f"does not ({str(exc)[:120]}). Use the TypeStrict version that wrote it, or restore a "
            "backup (docs/operations.md)."
        ) from None
    except SQLAlchemyError as exc:
        raise StoreError(
            f"could not bring the store at {engine.url.render_as_string(hide_password=True)} "
            f"to the current schema: {exc.__class__.__name__}: {exc}. "
            "Check that the database is reachable and that this user may create tables."
        ) from exc


def open_store(url: str | None = None, *, create: bool = True) -> Engine:
    """An engine on the store at ``url`` (default :func:`default_store_url`), schema upgraded.

    With ``create=False`` (a command that only reads) a database without a store is refused,
    not given the store's schema: reading creates nothing, on any backend.

    An existing store is checked before it is used, and never silently replaced
    (:func:`check_store`): a SQLite file that is empty, truncated or corrupt, or a database
    holding our tables without their schema version, is refused with a message saying how to
    restore it. A new store is created only where none exists (or by ``typestrict store init``).
    The checks and the upgrade run once per store and process, under a lock.

    Raises:
        StoreError: a bad URL, an unreachable database, or a broken store.
    """
    url = normalize_url(url or default_store_url())
    engine = create_store_engine(url)
    path = _sqlite_path(engine)
    if path is not None and read_only_file(path):
        engine.dispose()
        return _open_read_only(path)
    try:
        with _init_lock(engine):
            key = (url, _identity(engine))
            with _upgrade_guard:
                if key not in _upgraded:
                    check_store(engine)
                    if not create and not _has_version(engine):
                        raise StoreError(
                            f"expected a TypeStrict store at {_mask(url)}, got a database without one "
                            "(no tables of ours). Reading creates nothing: make the store with "
                            "`typestrict store upgrade --store URL` (or any command that writes), or "
                            "point --store at the store you meant")
                    upgrade(engine)
                    _upgraded.add((url, _identity(engine)))
    except BaseException:
        engine.dispose()
        raise
    return engine


def read_only_file(path: Path) -> bool:
    """Whether ``path`` is an existing SQLite store this process may read but not write (the
    file, or its folder where SQLite keeps its journal, is read-only for this user).

    >>> read_only_file(Path("/no/such/store.db"))
    False
    """
    try:
        if not path.is_file():
            return False
    except OSError:
        return False
    return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def _open_read_only(path: Path) -> Engine:
    """An engine that reads a read-only SQLite store as it is: checked like any store, never
    upgraded (a store at an older schema is refused: it cannot be brought up to date), opened
    ``mode=ro`` (``immutable`` when no write-ahead log is pending, since SQLite cannot make its
    shared-memory file in a read-only folder). Reads work; a write fails with SQLite's
    "readonly database" error, which :func:`store_failure` words for the user."""
    _check_sqlite_file(path)
    wal = path.with_name(path.name + "-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    uri = f"{path.resolve().as_uri()}?mode=ro" + ("" if pending else "&immutable=1")
    _check_sqlite_contents(path, uri=uri)
    engine = create_engine("sqlite://", creator=lambda: _sqlite3_connect(uri))
    event.listen(engine, "before_cursor_execute", refuse_nul)
    try:
        _require_current_schema(engine, path)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _sqlite3_connect(uri: str) -> Any:
    import sqlite3

    return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)


def _require_current_schema(engine: Engine, path: Path) -> None:
    """Refuse a read-only store whose schema is not this version's (it cannot be upgraded)."""
    from alembic.script import ScriptDirectory
    from alembic.script.revision import RevisionError

    script = ScriptDirectory.from_config(alembic_config(engine))
    heads = set(script.get_heads())
    try:
        with engine.connect() as conn:
            have = {r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))}
    except SQLAlchemyError as exc:
        raise _broken(str(path), f"a read-only file without a readable schema version "
                      f"({type(getattr(exc, 'orig', exc)).__name__})") from None
    try:  # every revision the stored heads stand on (their ancestors and dependencies)
        reached = {r.revision for r in script.iterate_revisions(tuple(sorted(have)), "base")}
    except (CommandError, RevisionError):
        raise StoreError(
            f"{path}: expected a store this version of TypeStrict knows, got one at schema revisions it "
            f"does not ({', '.join(sorted(have))[:160]}). Use the TypeStrict version that wrote it."
        ) from None
    if not heads <= reached:
        raise StoreError(
            f"{path}: expected a store at this version's schema, got a read-only store at "
            f"{sorted(have)[:3]}: it cannot be upgraded while it is read-only. Make the file and its "
            "folder writable (or use the TypeStrict version that wrote it)."
        )


def _sqlite_path(engine: Engine) -> Path | None:
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    if not database or database == ":memory:":
        return None
    return Path(database)


def _identity(engine: Engine) -> tuple[int, int] | None:
    path = _sqlite_path(engine)
    if path is None or not path.exists():
        return None
    info = path.stat()
    return (info.st_dev, info.st_ino)


@contextmanager
def _init_lock(engine: Engine) -> Iterator[None]:
    """An exclusive lock on the SQLite store's folder while it is checked or created (no-op
    otherwise): two processes opening a store that does not exist yet must not see each other's
    half-created file as a broken store. The folder itself is locked, so no lock file is left."""
    path = _sqlite_path(engine)
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


SQLITE_HEADER = b"SQLite format 3\x00"
RESTORE_HINT = (
    "A store is never replaced silently: restore it from a backup (docs/operations.md, "
    "\"Backup and restore\"), or move the file away and run `typestrict store init` to start "
    "an empty store"
)


def connect_problem(exc: BaseException, url: URL) -> str:
    """What is missing when a database cannot be reached, in the product's message shape.

    >>> from sqlalchemy.engine import make_url
    >>> u = make_url("postgresql+psycopg2://ts@127.0.0.1:5432/nosuch")
    >>> connect_problem(Exception('FATAL:  database "nosuch" does not exist'), u)
    "expected the database 'nosuch' on 127.0.0.1:5432, got no such database. Create it (createdb -h 127.0.0.1 -p 5432 nosuch, or CREATE DATABASE nosuch) or fix the database name in --store / TYPESTRICT_STORE_URL."
    >>> connect_problem(Exception('FATAL:  role "ghost" does not exist'), u)
    "expected the database user 'ghost' to log in on 127.0.0.1:5432, got no such role. Create it (createuser -h 127.0.0.1 -p 5432 ghost, or CREATE ROLE ghost LOGIN) or fix the user in --store / TYPESTRICT_STORE_URL."
    """
    text = str(getattr(exc, "orig", None) or exc)
    server = f"{url.host or 'localhost'}:{url.port or 5432}"
    m = re.search(r'database "([^"]+)" does not exist', text)
    if m:
        name = m.group(1)
        return (f"expected the database '{name}' on {server}, got no such database. Create it "
                f"(createdb -h {url.host or 'localhost'} -p {url.port or 5432} {name}, or CREATE DATABASE "
                f"{name}) or fix the database name in --store / TYPESTRICT_STORE_URL.")
    m = re.search(r'(?:role|user) "([^"]+)"', text)
    if m and "does not exist" in text:
        name = m.group(1)
        return (f"expected the database user '{name}' to log in on {server}, got no such role. Create it "
                f"(createuser -h {url.host or 'localhost'} -p {url.port or 5432} {name}, or CREATE ROLE "
                f"{name} LOGIN) or fix the user in --store / TYPESTRICT_STORE_URL.")
    if m and "authentication failed" in text:
        return (f"expected the database user '{m.group(1)}' to log in on {server}, got its password "
                "refused. Fix the password in --store / TYPESTRICT_STORE_URL (postgresql://user:password@"
                "host/db) or in PGPASSWORD / ~/.pgpass.")
    if "Connection refused" in text or "could not connect" in text or "timeout expired" in text:
        return (f"expected a PostgreSQL server answering on {server}, got no answer. Start the server "
                "or fix the host and port in --store / TYPESTRICT_STORE_URL.")
    cause = type(getattr(exc, "orig", None) or exc).__name__
    return (f"expected a reachable database, got {cause}: {' '.join(text.split())[:200]}. "
            "Check the URL, that the server runs and that this user may connect.")


def _broken(where: str, got: str) -> StoreError:
    return StoreError(f"{where}: expected a TypeStrict store, got {got}. {RESTORE_HINT}.")


def check_store(engine: Engine) -> None:
    """Refuse an existing store that is not intact; do nothing where no store exists yet.

    SQLite: a 0-byte file, a file without the SQLite header, a size that is not whole pages
    (truncated), a failed ``PRAGMA quick_check``, or tables without ``alembic_version``.
    PostgreSQL: our tables without ``alembic_version``.

    Raises:
        StoreError: what is wrong, and how to restore (never a SQLAlchemy traceback).

    >>> import tempfile, pathlib
    >>> db = pathlib.Path(tempfile.mkdtemp()) / "store.db"
    >>> _ = db.write_bytes(b"")
    >>> check_store(create_store_engine(f"sqlite:///{db}"))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: ...store.db: expected a TypeStrict store, got an empty file (0 bytes). A store is never replaced silently: ...
    """
    path = _sqlite_path(engine)
    if path is not None:
        _check_sqlite_file(path)
        if path.exists():
            _check_sqlite_contents(path)
        return
    where = engine.url.render_as_string(hide_password=True)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
    except SQLAlchemyError as exc:
        raise StoreError(f"could not open the store at {where}: {connect_problem(exc, engine.url)}") from None
    if "alembic_version" not in tables and tables & set(Base.metadata.tables):
        raise _broken(where, f"tables without a schema version ({sorted(tables)[:5]})")


def _check_sqlite_contents(path: Path, *, uri: str | None = None) -> None:
    """``PRAGMA quick_check`` and the tables, through a read-only connection (nothing changes)."""
    import sqlite3

    where = str(path)
    try:
        conn = sqlite3.connect(uri or f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise _broken(where, f"a file SQLite cannot read ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not result or result[0] != "ok":
        shown = str(result[0] if result else None)[:80]
        raise _broken(where, f"a damaged SQLite file (quick_check: {shown})")
    if tables and "alembic_version" not in tables:
        raise _broken(where, f"tables without a schema version ({sorted(tables)[:5]})")


def _check_sqlite_file(path: Path) -> None:
    if not path.exists():
        return
    if not path.is_file():
        raise _broken(str(path), "something that is not a file")
    size = path.stat().st_size
    if size == 0:
        raise _broken(str(path), "an empty file (0 bytes)")
    with open(path, "rb") as handle:
        head = handle.read(100)
    if not head.startswith(SQLITE_HEADER):
        raise _broken(str(path), "a file that is not a SQLite database")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if len(head) < 100 or page < 512 or size % page:
        raise _broken(str(path), f"a truncated SQLite file ({size} bytes, pages of {page})")


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


IN_CHUNK = 500
"""Ids one ``IN (...)`` of :func:`rows_by_id` holds (SQLite's and PostgreSQL's bound-parameter
limits are far above it)."""


def rows_by_id(engine: Engine, key: Any, ids: Sequence[str], read: Callable[[Any], T],
               *where: Any) -> dict[str, T]:
    """``read(row)`` of every row whose ``key`` column is one of ``ids`` (and matches ``where``),
    by that id: one query per :data:`IN_CHUNK` ids, where a lookup each would be a query each (a
    list's page of trainings, models or backtests).

    >>> import pathlib, tempfile
    >>> from typestrict_pipeline.lifecycle.tables import TrainingRow
    >>> from typestrict_pipeline.lifecycle.trainings import start_training
    >>> engine = open_store(f"sqlite:///{pathlib.Path(tempfile.mkdtemp()) / 's.db'}")
    >>> from typestrict_pipeline.credits import CreditLedger
    >>> _ = CreditLedger(engine).grant("acme", 2, reference="doc")
    >>> _ = [start_training(engine, "acme", t) for t in ("tr_a", "tr_b")]
    >>> rows_by_id(engine, TrainingRow.training_id, ["tr_b", "tr_none", "tr_a"], lambda r: r.state)
    {'tr_a': 'awaiting_predictions', 'tr_b': 'awaiting_predictions'}
    """
    out: dict[str, T] = {}
    entity = key.class_
    with session_scope(engine) as session:
        for start in range(0, len(ids), IN_CHUNK):
            chunk = list(ids[start:start + IN_CHUNK])
            for row in session.scalars(select(entity).where(key.in_(chunk), *where)):
                out[str(getattr(row, key.key))] = read(row)
    return out


@dataclass(frozen=True)
class InitResult:
    """What :func:`init_store` did.

    Attributes:
        created: a new store was created.
        moved_to: where a broken SQLite file was moved (None: nothing was moved).
        message: one line for the user.
    """

    created: bool
    moved_to: Path | None
    message: str


def init_store(url: str | None = None, *, now: dt.datetime | None = None) -> InitResult:
    """Create an empty store at ``url``; an intact store is left as it is.

    A broken SQLite file (empty, truncated, corrupt) is renamed to
    ``<name>.broken-<UTC time>`` beside it (never deleted), then a new store is created. A
    broken PostgreSQL database is refused: restore it or drop its tables by hand.

    >>> import tempfile, pathlib
    >>> db = pathlib.Path(tempfile.mkdtemp()) / "store.db"
    >>> _ = db.write_bytes(b"")
    >>> r = init_store(f"sqlite:///{db}")
    >>> r.created, r.moved_to is not None and r.moved_to.name.startswith("store.db.broken-")
    (True, True)
    >>> init_store(f"sqlite:///{db}").created
    False
    """
    url = normalize_url(url or default_store_url())
    engine = create_store_engine(url)
    shown = engine.url.render_as_string(hide_password=True)
    path = _sqlite_path(engine)
    moved: Path | None = None
    try:
        if path is not None:
            _refuse_non_file(path)
        with _init_lock(engine):
            try:
                check_store(engine)
                existed = path.exists() if path is not None else _has_version(engine)
            except StoreError:
                if path is None:
                    raise
                stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
                moved = path.with_name(f"{path.name}.broken-{stamp}")
                engine.dispose()
                path.rename(moved)
                for suffix in ("-wal", "-shm"):
                    side = path.with_name(path.name + suffix)
                    if side.exists():
                        side.rename(moved.with_name(moved.name + suffix))
                existed = False
            upgrade(engine)
    finally:
        engine.dispose()
    with _upgrade_guard:
        _upgraded.discard((url, None))
    if existed:
        return InitResult(False, None, f"a store already exists at {shown}; nothing replaced")
    where = f" (the broken file was moved to {moved})" if moved is not None else ""
    return InitResult(True, moved, f"created an empty store at {shown}{where}")


def _refuse_non_file(path: Path) -> None:
    """Refuse a store path that exists but is not a regular file (followed through symlinks).

    ``store init`` sets aside only a broken *file*: a directory, a FIFO, a device (``/dev/null``),
    a socket or a symlink loop at the store's path is never renamed, opened or written.

    >>> _refuse_non_file(Path("/dev/null"))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: /dev/null: expected a regular file (or no file) for the store, got a character device. Nothing was moved or written: choose another path, or move it yourself.
    """
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not path.is_symlink():
            return
        kind = "a symlink to nothing"
    except OSError as exc:  # a symlink loop, a path through a file, no permission
        kind = f"a path that cannot be followed ({exc.strerror or type(exc).__name__})"
    else:
        if stat.S_ISREG(mode):
            return
        kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO (named pipe)",
                 stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
                 stat.S_ISSOCK: "a socket"}
        kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    raise StoreError(
        f"{path}: expected a regular file (or no file) for the store, got {kind}. Nothing was "
        "moved or written: choose another path, or move it yourself."
    )


def _has_version(engine: Engine) -> bool:
    with engine.connect() as conn:
        return "alembic_version" in inspect(conn).get_table_names()
