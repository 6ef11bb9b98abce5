"""What every ``typestrict`` sub-command shares: the store option, ``--json``, bounded arguments,
tables and progress bars.

Every area's CLI module uses these so that one concept has one spelling:

* ``add_store(parser)`` adds ``--store URL`` (default ``TYPESTRICT_STORE_URL``, else ``store.db``
  under ``TYPESTRICT_HOME``); the old spellings ``--url`` and ``--store-url`` still work but are
  not shown in the help. ``read_store(args)`` opens it for a command that only reads (it refuses
  a SQLite file that does not exist instead of creating an empty store), ``write_store(args)``
  for a command that writes.
* ``add_json(parser)`` adds ``--json``; ``print_json(obj)`` prints it (exact numbers).
* ``writes(parser)`` marks a command that writes (to the store, to files); each such command says
  what it wrote in one shape, :class:`Wrote` (``wrote WHAT to WHERE``; ``"wrote"`` in ``--json``).
  The mark is the one list of the commands that write: a test walks the parser for it.
* ``bounded_int``, ``usd``, ``day``, ``identifier``, ``now_option``, ``study_id`` are argparse ``type=`` functions: a value out
  of range is a usage error with a message (exit 2), never a traceback or a write.
* ``print_table(title, columns, rows)``: a table with headers (rich); plain, full-width text when
  stdout is not a terminal.
* ``progress(total, what)``: a rich progress bar on stderr, silent when stdout or stderr is not a
  terminal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typestrict_pipeline import values
from typestrict_pipeline.errors import InputError, StoreError

if TYPE_CHECKING:  # SQLAlchemy is imported by the commands that open a store, not by every parse
    from sqlalchemy import Engine

STORE_HELP = ("the store, as a URL: sqlite:///path/store.db or postgresql://user@host/db "
              "(default: TYPESTRICT_STORE_URL, else store.db under TYPESTRICT_HOME, ./.typestrict)")
# Bounds of the numbers a command takes (documented in docs/cli.md).
MAX_STEPS = 10_000_000
MAX_CANDIDATES = 100_000
EXIT_CANCELLED = 3
"""The exit code of ``backtest run`` and ``study run`` when what they ran was cancelled by another
command (its ``cancel``, the API, the console) while it ran (docs/cli.md, "Exit codes")."""
MAX_USD = 1_000_000
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}")


def add_store(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--store URL`` (and the hidden old spellings ``--url``, ``--store-url``) and
    ``--new-store`` to ``p``."""
    p.add_argument("--store", metavar="URL", dest="store", help=STORE_HELP)
    p.add_argument("--url", "--store-url", dest="store", help=argparse.SUPPRESS)
    p.add_argument("--new-store", action="store_true",
                   help="create the SQLite store if it does not exist yet (without it, a command "
                        "that writes refuses a home with no store: it is not your server's)")
    return p


def add_json(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--json``: print machine-readable JSON (exact numbers) instead of a table."""
    p.add_argument("--json", action="store_true", help="print JSON (exact numbers) instead of a table")
    return p


def writes(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark ``p`` as a command that writes (to the store, to files or folders): it says what it
    wrote with :func:`say_wrote` (some only write with an option: ``audit -o``, ``schedule
    workspace --subscription``). This mark is the one list of the commands that write."""
    p.set_defaults(writes=True)
    return p


def is_writing(p: argparse.ArgumentParser) -> bool:
    """Whether ``p`` was marked by :func:`writes`."""
    return bool(p.get_default("writes"))


@dataclass(frozen=True)
class Wrote:
    """What a command that writes wrote, said in one shape by every such command: one line
    ``wrote WHAT to WHERE`` (``wrote nothing to WHERE: WHY`` when there was nothing to write), and
    with ``--json`` the field ``"wrote": {"what", "ids", "store", "files"}``.

    Attributes:
        what: what was written, in words, with its ids ("API key 0123456789abcdef of workspace
            demo"); when ``ids`` is empty, why nothing was written.
        ids: the ids of what was written (empty: nothing was written).
        store: the store written, as its URL with the password hidden (None: no store).
        files: the files or folders written (or deleted), as the command names them.
        detail: words after WHERE (the audit's size and digest).

    >>> Wrote("API key 0123 of workspace demo", ("0123",), store="sqlite:////h/store.db").line()
    'wrote API key 0123 of workspace demo to the store /h/store.db'
    >>> Wrote("rows 3 of t", ("d/t",), files=("/h/d/t.csv",)).line()
    'wrote rows 3 of t to /h/d/t.csv'
    >>> Wrote("no training was past its deadline", (), store="postgresql://u:***@h/d").line()
    'wrote nothing to the store postgresql://u:***@h/d: no training was past its deadline'
    """

    what: str
    ids: tuple[str, ...]
    store: str | None = None
    files: tuple[str, ...] = ()
    detail: str = ""

    def where(self) -> str:
        """The store (a SQLite store by its file) and the files, in words."""
        places = []
        if self.store is not None:
            path = sqlite_path(self.store)
            places.append(f"the store {path if path is not None else self.store}")
        places.extend(self.files)
        return " and ".join(places) or "nowhere"

    def line(self) -> str:
        """The one line a command prints (without ``--json``)."""
        if not self.ids:
            return f"wrote nothing to {self.where()}: {self.what}"
        return f"wrote {self.what} to {self.where()}" + (f" {self.detail}" if self.detail else "")

    def to_json(self) -> dict[str, Any]:
        """The ``"wrote"`` field of ``--json`` (files as absolute paths)."""
        return {"what": self.what, "ids": list(self.ids), "store": self.store,
                "files": [str(Path(f).resolve()) for f in self.files]}


def shown_store(url: str) -> str:
    """A store URL as it is shown: the password hidden.

    >>> shown_store("postgresql+psycopg2://u:secret@h/d")
    'postgresql+psycopg2://u:***@h/d'
    """
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def say_wrote(args: argparse.Namespace, wrote: Wrote) -> None:
    """Print what a command wrote (without ``--json``; with it, the command puts
    ``wrote.to_json()`` in its JSON object under ``"wrote"``)."""
    if not getattr(args, "json", False):
        print(wrote.line())


def check_store_url(url: str) -> str:
    """``url`` normalized when it is a store URL (the store's own rule,
    :func:`typestrict_pipeline.store.engine.parse_store_url`: scheme, driver, port) that names a
    store a command can use: a SQLite file or a PostgreSQL database, never an in-memory SQLite
    database (what a command wrote there would be gone when it ends).

    >>> check_store_url("postgresql://u@h/db")
    'postgresql+psycopg2://u@h/db'
    >>> check_store_url("mysql://u:secret@h/db")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.StoreError: expected a store URL sqlite:///PATH or postgresql://USER@HOST:PORT/DB, got 'mysql://u:***@h/db'. Fix --store or TYPESTRICT_STORE_URL (docs/operations.md).
    >>> check_store_url("sqlite://")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a store URL naming the store's file, sqlite:///PATH, got 'sqlite://', an in-memory database that is gone when the command ends. Write the file's path, e.g. --store sqlite:////srv/typestrict/store.db.
    """
    from typestrict_pipeline.store import normalize_url
    from typestrict_pipeline.store.engine import parse_store_url

    url = normalize_url(url)
    parsed = parse_store_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise InputError("a store URL naming the store's file, sqlite:///PATH",
                         f"{url[:200]!r}, an in-memory database that is gone when the command ends",
                         "write the file's path, e.g. --store sqlite:////srv/typestrict/store.db")
    return url


def store_url(args: argparse.Namespace) -> str:
    """The store URL a command uses: ``--store``, else ``TYPESTRICT_STORE_URL``, else the local file."""
    from typestrict_pipeline.store import default_store_url

    return check_store_url(getattr(args, "store", None) or default_store_url())


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL (``None`` for another database or an in-memory one).

    >>> sqlite_path("sqlite:////tmp/x/store.db")
    PosixPath('/tmp/x/store.db')
    >>> sqlite_path("postgresql+psycopg2://u@h/d") is None
    True
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def read_store(args: argparse.Namespace) -> Engine:
    """The store for a command that only reads; a SQLite file that does not exist is refused
    (reading never creates an empty store)."""
    from typestrict_pipeline.store import open_store

    url = store_url(args)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise StoreError(
            f"expected a store at {path}, got no such file. Run `make demo` to make the demo's "
            "store there, or point at yours with --store URL (or TYPESTRICT_STORE_URL / "
            "TYPESTRICT_HOME)."
        )
    return open_store(url, create=False)


def write_store(args: argparse.Namespace) -> Engine:
    """The store for a command that writes (keys, credits, backtests, studies, schedules...).

    A SQLite store that does not exist is refused unless ``--new-store`` is given: run from
    another folder, the default home (``./.typestrict``) is not the server's, and writing there
    would silently start a second store that the server never reads (keys it rejects, credits it
    never sees). A PostgreSQL database is the operator's to create, so its tables are made.
    """
    from typestrict_pipeline.store import open_store

    url = store_url(args)
    refuse_new_store(url, told=bool(getattr(args, "new_store", False)),
                     given=getattr(args, "store", None) is not None)
    return open_store(url)


def refuse_new_store(url: str, *, told: bool, given: bool = False) -> None:
    """Refuse to start a SQLite store at ``url`` that does not exist, unless ``told``.

    Args:
        url: the store's URL.
        told: ``--new-store`` was given.
        given: the URL came from ``--store`` (else from the environment or the default home).

    Raises:
        StoreError: the file does not exist and ``told`` is False (the message names the file,
            where its name came from, and the three ways on).
    """
    import os

    path = sqlite_path(url)
    if told or path is None or path.exists():
        return
    if given:
        origin = " (--store)"
    elif os.environ.get("TYPESTRICT_STORE_URL"):
        origin = " (TYPESTRICT_STORE_URL)"
    elif os.environ.get("TYPESTRICT_HOME"):
        origin = " (under TYPESTRICT_HOME)"
    else:
        origin = f" (the default home, ./.typestrict of this folder, {Path.cwd()})"
    raise StoreError(
        f"expected the store of your server's home, got no store at {path}{origin}: this command "
        "would start a new, empty store there that no server or demo reads (an API key made in it "
        "is refused by your server). Run it from the server's folder, or name the server's store "
        "with --store URL (or TYPESTRICT_HOME / TYPESTRICT_STORE_URL); to start a new store here "
        "on purpose, pass --new-store"
    )


def print_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON (times as ISO 8601, other objects by ``str``)."""
    print(json.dumps(obj, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if hasattr(value, "value"):
        return value.value
    return str(value)


def value_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=`` from a parser of :mod:`typestrict_pipeline.values`: its
    :class:`InputError` becomes argparse's usage error (exit 2, the same message)."""
    def run(text: str) -> Any:
        try:
            return parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return run


def bounded_int(what: str, lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type=``: a whole number from ``lo`` to ``hi``, written in ASCII digits
    (:func:`typestrict_pipeline.values.integer`).

    >>> bounded_int("steps", 1, 100)("7")
    7
    >>> bounded_int("steps", 1, 100)("10**30")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected steps as a whole number from 1 to 100, got '10**30'. Write a whole number from 1 to 100.
    """
    return value_type(lambda text: values.integer(text, what, lo=lo, hi=hi))


def usd(text: str) -> str:
    """An argparse ``type=``: a finite USD amount from 0 to ``MAX_USD``, at most 6 decimals
    (:func:`typestrict_pipeline.values.money_micro`).

    Returns the text (the core parses it exactly into micro-USD).

    >>> usd("0.05")
    '0.05'
    >>> usd("1e400")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a USD amount from 0 to 1,000,000 with at most 6 decimals (e.g. 0.25), got '1e400'. Write the amount in dollars, e.g. 0.25.
    """
    value_type(values.money_micro)(text)
    return text.strip().lstrip("$").strip()


def positive_float(what: str, hi: float) -> Callable[[str], float]:
    """An argparse ``type=``: a finite number from 0 to ``hi``.

    >>> positive_float("seconds", 60)("0.5")
    0.5
    """
    return value_type(lambda text: values.number(text, what, lo=0.0, hi=hi, fix="write a number in range"))


def step(text: str) -> str:
    """An argparse ``type=``: a step size such as ``1d``, ``12h``, ``30m``, ``45s``, ``1w``, at most
    a year (:func:`typestrict_pipeline.values.duration`); returns the text (the core parses it).

    >>> step("1d")
    '1d'
    >>> step("99999999999d")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a step size like 1d, 12h, 30m, 45s or 1w, at most 366 days, got '99999999999d'. Write a whole number then the unit (s, m, h, d or w).
    """
    value_type(values.duration)(text)
    return text


def day(text: str) -> dt.date:
    """An argparse ``type=``: a calendar day ``YYYY-MM-DD`` (:func:`typestrict_pipeline.values.day`).

    >>> day("2014-02-28")
    datetime.date(2014, 2, 28)
    >>> day("2014-13-45")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a day as YYYY-MM-DD (e.g. 2014-12-31) from 1900-01-01 to 2199-12-31, got '2014-13-45', which is not a calendar date. Fix the day.
    """
    parsed: dt.date = value_type(values.day)(text)
    return parsed


def study_id(text: str) -> int:
    """An argparse ``type=``, the one rule of a study id on the command line (every ``study`` and
    ``schedule`` command that takes one): the API's rule (:func:`typestrict_pipeline.values.row_id`),
    its decimal digits as listed, from 1 to the store's 2,147,483,647. ``012`` and ``+12`` named
    study 12 here while the API answered them 404; ``2**62`` passed and overflowed PostgreSQL's column.

    >>> study_id("12")
    12
    >>> study_id("abc")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a study id as a whole number from 1 to 2,147,483,647 in ASCII digits, with no sign or leading zero, got 'abc'. Pass an id that `typestrict study list` shows.
    """
    parsed: int = value_type(lambda t: values.row_id_value(
        t, "a study id", fix="pass an id that `typestrict study list` shows"))(text)
    return parsed


def schedule_id(text: str) -> int:
    """An argparse ``type=``: a schedule id, by the rule of :func:`study_id`.

    >>> schedule_id("3")
    3
    """
    parsed: int = value_type(lambda t: values.row_id_value(
        t, "a schedule id", fix="pass an id that `typestrict schedule status` shows"))(text)
    return parsed


def now_option(text: str) -> dt.datetime:
    """An argparse ``type=``, the one rule of every ``--now`` (the time a sweep or a tick acts as
    of: ``credits expire``, ``training expire``, ``schedule tick``): an ISO 8601 time with its
    zone, from 1900 to 2199 (:func:`typestrict_pipeline.values.timestamp` with ``zone``). A time
    without a zone would be read as UTC wherever the operator is, and expire, refund or fire
    hours early or late.

    >>> now_option("2026-01-31T04:00:00+02:00")
    datetime.datetime(2026, 1, 31, 2, 0, tzinfo=datetime.timezone.utc)
    >>> now_option("2026-01-31T04:00:00")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected --now as an ISO 8601 time with a zone from 1900-01-01 to 2199-12-31 (2015-01-01T00:00Z, 2015-01-01T00:00+02:00), got '2026-01-31T04:00:00', which has no zone. Write the time with its zone, e.g. --now 2026-01-31T04:00:00Z; leave --now out to act as of now.
    """
    parsed: dt.datetime = value_type(lambda t: values.timestamp(
        t, "--now", zone=True,
        fix="write the time with its zone, e.g. --now 2026-01-31T04:00:00Z; leave --now out to act as of now"))(text)
    return parsed


def identifier(what: str) -> Callable[[str], str]:
    """An argparse ``type=``: a name of letters, digits and ``_ . @ + -`` (at most 128, no ``..``).

    >>> identifier("a workspace")("demo")
    'demo'
    >>> identifier("a training id")("../../etc")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a training id (letters, digits, _ . @ + -; at most 128; no '..'), got '../../etc'
    """
    def parse(text: str) -> str:
        if not _IDENTIFIER.fullmatch(text) or ".." in text:
            raise argparse.ArgumentTypeError(
                f"expected {what} (letters, digits, _ . @ + -; at most 128; no '..'), got {text[:60]!r}")
        return text

    return parse


def check_range(start: dt.datetime | dt.date, end: dt.datetime | dt.date, *, what: str = "range") -> None:
    """Refuse a reversed range with the words a person uses.

    >>> check_range(dt.date(2015, 1, 2), dt.date(2015, 1, 1))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a start before the end of the range, got the start 2015-01-02 after the end 2015-01-01. Swap them.
    """
    if start > end:
        raise InputError(f"a start before the end of the {what}",
                         f"the start {start.isoformat()} after the end {end.isoformat()}", "swap them")


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                *, right: Sequence[str] = ()) -> None:
    """Print a table with a header row (rich); ``right`` names the columns aligned right.

    On a terminal it fits the terminal's width; otherwise every cell is printed whole (no
    colour, no trailing spaces), so the output can be read by a script or a pager. Every cell
    and the title are printed as they are written, never read as rich markup: a ledger reason
    ``[/]`` or a key label ``[red]x[/red]`` is shown as typed (markup failed the whole table, or
    was taken away from the text).
    """
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None if title is None else Text(title), box=box.SIMPLE_HEAD, title_justify="left",
                  pad_edge=False, show_edge=False)
    for name in columns:
        table.add_column(Text(name), justify="right" if name in right else "left",
                         no_wrap=not sys.stdout.isatty())
    for row in rows:
        table.add_row(*(Text("" if v is None else str(v)) for v in row))
    if sys.stdout.isatty():
        Console().print(table)
        return
    buffer = io.StringIO()
    Console(file=buffer, width=10_000, color_system=None, highlight=False).print(table)
    print("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


def quiet() -> bool:
    """True when progress must stay silent: stdout or stderr is not a terminal."""
    return not (sys.stdout.isatty() and sys.stderr.isatty())


@contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for ``total`` units; yields ``update(done)``. Silent when
    :func:`quiet`."""
    if quiet() or total <= 0:
        yield lambda _done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        from rich.markup import escape

        task = bar.add_task(escape(what), total=total)  # the words as written, never markup
        yield lambda done: bar.update(task, completed=min(done, total))
