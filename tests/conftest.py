"""Shared fixtures: the real PostgreSQL server, a private local home, a fresh domain store.

A service that does not answer fails the test (it is never skipped): this machine and CI
always run PostgreSQL, so its absence is a fault to fix, not a reason to pass.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    import dagster as dg


def _import_anyio_now() -> None:
    """Import every submodule anyio loads lazily, here, in the main thread, at start-up.

    anyio (a pytest plugin, so pytest rewrites its modules' asserts on import) imports a
    submodule on its first use: the first file response with a ``Range`` imported
    ``anyio._core._fileio`` inside a server thread, where pytest's rewrite ran ``ast.parse``
    while another thread parsed too, and CPython 3.11.7 raised ``SystemError: AST constructor
    recursion depth mismatch`` (the 500 of one clean-clone run). Outside pytest the modules come
    from their bytecode and nothing is parsed."""
    import anyio

    for name in dir(anyio):
        getattr(anyio, name)


_import_anyio_now()

PG_HOST = os.environ.get("TYPESTRICT_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("TYPESTRICT_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("TYPESTRICT_TEST_PG_USER", "postgres")
PG_ADMIN_DB = os.environ.get("TYPESTRICT_TEST_PG_DB", "test")


def _pg_url(database: str) -> str:
    return f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


@pytest.fixture(scope="session")
def pg_admin_engine() -> Iterator[Engine]:
    """A connection to the server's ``test`` database, used to create and drop scratch databases."""
    engine = create_engine(_pg_url(PG_ADMIN_DB), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        engine.dispose()
        pytest.fail(
            f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_ADMIN_DB}) did not answer: {exc}. "
            "Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start "
            "(a missing service is a failure, never a skip)."
        )
    yield engine
    engine.dispose()


@contextmanager
def _scratch_database(admin: Engine) -> Iterator[str]:
    """The URL of a brand-new, empty PostgreSQL database, dropped on exit."""
    name = f"ts_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield _pg_url(name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def pg_url(pg_admin_engine: Engine) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database for one test; dropped afterwards."""
    with _scratch_database(pg_admin_engine) as url:
        yield url


@pytest.fixture
def second_pg_url(pg_admin_engine: Engine) -> Iterator[str]:
    """Another brand-new database beside ``pg_url`` (e.g. the domain store apart from the Dagster
    instance's own storage); dropped afterwards."""
    with _scratch_database(pg_admin_engine) as url:
        yield url


@pytest.fixture
def typestrict_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``TYPESTRICT_HOME`` (and no store URL override) for one test."""
    home = tmp_path / "typestrict-home"
    home.mkdir()
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    return home


@pytest.fixture
def ephemeral_instance() -> Iterator[dg.DagsterInstance]:
    """An ephemeral Dagster instance, disposed when the test ends.

    Left to the garbage collector, an ephemeral instance's run storage closes its held SQLite
    connection in whichever thread happens to collect it: seen as "Exception during reset or
    similar ... SQLite objects created in a thread can only be used in that same thread" logged
    inside a later test's API server thread, which that test (rightly) read as a traceback."""
    import dagster as dg

    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite store URL in a fresh temporary folder."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test over both store backends: SQLite and the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


#: The files that took longest in a whole-suite run (wall seconds on a loaded 2-core machine,
#: 2026-12-01: 320, 303, 235, 216, 182, 136, 112, 109, 104, 96, 94, 93), started first in this
#: order so that the last minutes of ``make test`` are not one worker alone on a long file.
LONGEST_FIRST = (
    "tests/test_console_browser.py",
    "tests/test_cli_readme.py",
    "tests/test_hostile_kill.py",
    "tests/test_study_calibration.py",
    "tests/test_calibration_battery.py",
    "tests/test_ui_browser.py",
    "tests/test_study_dagster.py",
    "tests/test_api_dagster.py",
    "tests/test_operations_daemon.py",
    "tests/test_lifecycle_servers.py",
    "tests/test_warm_launcher.py",
    "tests/test_api.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the tests for ``make test``'s four pytest-xdist workers (``--dist loadfile``).

    ``loadfile`` sends each test file to one worker as a whole, so a module-scoped fixture (the
    README test's demo home, the browser tests' served UI, the API fuzz app, ...) is built once,
    as in a single process. (``--dist loadgroup`` with an ``xdist_group`` mark per file was
    meant to do that, but pytest 9.2 keeps a test's id where pytest-xdist 3.8 no longer writes
    the group, so the marks were ignored and both workers built such fixtures.) The files of
    ``LONGEST_FIRST`` run first in that order, then the other files with a ``slow`` test, each
    in collection order, so the longest files start early.

    Nothing is skipped or changed inside a test; only where and when it runs.
    """
    slow = {_file(i) for i in items if i.get_closest_marker("slow")}
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> tuple[int, int]:
        name = _file(item)
        return (rank.get(name, len(rank)), 0 if name in slow else 1)

    items.sort(key=key)


#: Files that run on one pytest-xdist worker, one after the other, as one unit: the README's
#: test and the browser console's each start from the checkout ``make demo`` leaves, and on one
#: worker they share one ``make demo`` (``tests/demo_checkout.demo_checkout`` puts its home back
#: as made for the second); on two workers each would run its own (about 75 s of CPU each).
ONE_WORKER = ("tests/test_console_browser.py", "tests/test_cli_readme.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which answers for every mode
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the files of :data:`ONE_WORKER` one unit of work (in the
    order :func:`pytest_collection_modifyitems` gives); any other mode as pytest-xdist makes it."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _LoadFileSharingTheDemo(LoadFileScheduling):  # type: ignore[misc]  # untyped package
        def _split_scope(self, nodeid: str) -> str:
            name = super()._split_scope(nodeid)
            return ONE_WORKER[0] if name in ONE_WORKER else name

    return _LoadFileSharingTheDemo(config, log)


def _file(item: pytest.Item) -> str:
    """The test file of an item, as in its node id (``tests/test_x.py``)."""
    return item.nodeid.split("::", 1)[0]


class _StopSignals:
    """Every test starts with the stop signals of a user at a terminal, and leaves them so.

    ``make test`` may itself run as a background job of a shell without job control (a CI
    runner, ``make test &`` in a script): such a shell starts it with SIGINT ignored, and every
    process the tests start would inherit that (a Ctrl-C test's command would never see its
    Ctrl-C). Worse, Dagster's in-process execution ends by giving SIGTERM SIGINT's handler, so
    after the first ``execute_in_process`` in a worker SIGTERM was ignored too, and every server
    or command a later test started in that worker ignored ``kill`` (seen: a webserver and a
    code server that outlived SIGTERM; ``stop_process_group``'s doctest getting SIGKILL's code).
    So SIGINT gets Python's default handler when it was ignored, and after each test SIGINT and
    SIGTERM get back the handlers they had before it (``processes.keep_stop_signals``). The
    product does the same where it runs Dagster in process (``typestrict study run``).
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        from typestrict_pipeline.processes import keep_stop_signals

        with keep_stop_signals():
            return (yield)


def pytest_configure(config: pytest.Config) -> None:
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.pluginmanager.register(_StopSignals(), "typestrict-stop-signals")
