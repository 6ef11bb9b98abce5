"""The ``typestrict`` command line.

Each area adds its sub-commands in its own module under ``typestrict_pipeline/cli/`` through a
``register(subparsers)`` function, listed in ``_AREAS`` below. A command imports only the area
it names: ``COMMANDS`` says which module adds each top-level command, so ``typestrict credits
balance demo`` never imports the API (FastAPI), the studies or the backtests; a command line
that names no command (``--help``, ``--version``, nothing, a typo) gets every area, as its help
and its usage error list them all. Nothing is imported from Dagster here unless a sub-command
needs it, so ``typestrict verify`` starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from typestrict_pipeline.errors import TypeStrictError

# Modules under typestrict_pipeline.cli that define register(subparsers), in the order of the help.
_AREAS = ("refund", "credits", "store", "backtest", "study", "schedule", "api", "data", "training")

COMMANDS: dict[str, tuple[str, ...]] = {
    "verify": ("refund",),
    "split": ("refund",),
    "credits": ("credits",),
    "audit": ("credits",),
    "store": ("store",),
    "backtest": ("backtest",),
    "run": ("backtest",),
    "usage": ("backtest",),
    "study": ("study", "schedule"),  # schedule.py adds study status|lineage|schedule
    "schedule": ("schedule",),
    "api": ("api",),
    "api-key": ("api",),
    "data": ("data",),
    "training": ("training",),
}
"""Each top-level command and the areas (of ``_AREAS``, in its order) whose ``register`` adds it
or adds to it. ``tests/test_cli_startup.py`` checks it against what the modules register: a
command added to a module and not here is still found (by the full parser), only not fast."""


def areas_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The areas a command line needs: those of the command its first word names, else all of
    them (an option first, such as ``-h credits``, nothing, an unknown or mistyped command).

    >>> areas_for(["credits", "balance", "demo"]), areas_for(["study", "list"])
    (('credits',), ('study', 'schedule'))
    >>> areas_for(["-h", "credits"]) == areas_for([]) == areas_for(["credit"]) == _AREAS
    True
    """
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]]
    return _AREAS


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``typestrict`` parser for the command line ``argv``: the commands of the areas it
    needs (:func:`areas_for`); without ``argv``, every command.

    >>> from typestrict_pipeline.cli.parser import _choices
    >>> _choices(build_parser(["verify", "x.json"]))
    ['verify', 'split']
    """
    areas = areas_for(argv)
    parser, complete = _parser(areas)
    if not complete and areas != _AREAS:  # an area left out of this install: as if no command was named
        parser, _ = _parser(_AREAS)
    return parser


def _parser(areas: Sequence[str]) -> tuple[argparse.ArgumentParser, bool]:
    """A parser with the commands of ``areas``, and whether every one of these modules exists
    (one left out of the install is skipped)."""
    from typestrict_pipeline import __version__
    from typestrict_pipeline.cli.parser import Parser

    parser = Parser(
        prog="typestrict",
        description="Refund verdicts against Jev, backtests and studies.",
    )
    parser.add_argument("--version", action="version", version=f"typestrict {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    complete = True
    for area in areas:
        try:
            module = importlib.import_module(f"typestrict_pipeline.cli.{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"typestrict_pipeline.cli.{area}":
                complete = False
                continue
            raise
        module.register(subparsers)
    return parser, complete


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``typestrict``; returns the process exit code.

    Exit codes: 0 done; 1 the command ran and found a problem (or an unexpected error, a bug,
    reported in one line); 2 a usage error or one of our errors (the message says what to fix);
    130 interrupted (Ctrl-C), 143 stopped by SIGTERM. A closed pipe (``... --json | head -3``) ends quietly. No command
    prints a traceback unless ``TYPESTRICT_DEBUG=1``: not with stdout or stderr closed (``>&-``: what would
    be printed there is dropped), nor on a full disk (``> /dev/full``, a quota: exit 2, one line), nor on a path the
    system refuses (too long, no permission: exit 2, the path named).
    """
    _open_closed_streams()
    try:
        _stop_on_sigterm()
        from typestrict_pipeline.cli.parser import parse

        given = list(sys.argv[1:] if argv is None else argv)
        args = parse(build_parser(given), given)
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except TypeStrictError as exc:
        return _fail(f"typestrict: {exc}", 2)
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2 (its message printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BrokenPipeError:
        # The reader went away (``| head``): stop writing, say nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt as exc:
        if "SIGTERM" in str(exc):
            return _fail("typestrict: stopped by SIGTERM; what was stored before stays stored", 143)
        return _fail("typestrict: interrupted; what was stored before stays stored", 130)
    except OSError as exc:
        if exc.errno in _NO_ROOM:
            where = f" to {exc.filename}" if exc.filename else ""
            return _fail(f"typestrict: expected room to write{where}, got {exc.strerror or exc} (errno "
                         f"{exc.errno}). Free space, or raise the quota or the file size limit, and run the "
                         "command again; what was stored before stays stored.", 2)
        if exc.errno in _BAD_PATH and exc.filename:
            name = str(exc.filename)
            shown = repr(name) if len(name) <= 200 else f"{name[:200]!r}… ({len(name):,} characters)"
            return _fail(f"typestrict: expected a path the system can open, got {shown}: {exc.strerror} (errno "
                         f"{exc.errno}). Check the path you gave (an option, TYPESTRICT_HOME, "
                         "TYPESTRICT_STORE_URL, TYPESTRICT_DATASETS_DIR) and its permissions.", 2)
        return _unexpected(exc)
    except Exception as exc:  # the last line of defence: one line, no traceback
        return _unexpected(exc)


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""A write refused for want of room: the disk (or stdout's, ``> /dev/full``), a quota, a file size limit."""

_BAD_PATH = (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS)
"""A path the system refuses (too long, a symlink loop, through a file, no permission, read-only):
the path came from the user (an option or the environment), never a bug of ours."""


def _open_closed_streams() -> None:
    """Python leaves ``sys.stdout`` (``sys.stderr``) None when the command starts with it closed
    (``typestrict ... >&-``); the first print then failed with a traceback. It reads as
    ``/dev/null`` instead: the command runs, what it would print there is dropped."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (for the process's life)


def _stop_on_sigterm() -> None:
    """SIGTERM stops a command like Ctrl-C does (the work in flight ends ``interrupted``, with
    why), instead of killing it where it stands. Only in the main thread of the process."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    from typestrict_pipeline.processes import stop_request

    def stop(signum: int, frame: object) -> None:
        raise stop_request(signum)

    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, stop)


def _fail(message: str, code: int) -> int:
    with contextlib.suppress(BrokenPipeError, OSError):
        sys.stdout.flush()
    print(message, file=sys.stderr)
    return code


def _unexpected(exc: Exception) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    if os.environ.get("TYPESTRICT_DEBUG"):
        traceback.print_exc()
    detail = " ".join(str(exc).split())[:300]
    if isinstance(exc, SQLAlchemyError):
        from typestrict_pipeline.store import store_failure

        failure = store_failure(exc)
        if failure.kind in ("read_only", "value", "conflict"):
            return _fail(f"typestrict: {failure.message}.", 2)
        return _fail(
            f"typestrict: the store failed: {exc.__class__.__name__}: {detail}. Check that the "
            "store (--store / TYPESTRICT_STORE_URL) is reachable and is a TypeStrict store; "
            "see docs/operations.md for backup and restore.", 2)
    return _fail(
        f"typestrict: unexpected error {exc.__class__.__name__}: {detail}. This is a bug: please "
        "report it with the command you ran (TYPESTRICT_DEBUG=1 shows the traceback).", 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
