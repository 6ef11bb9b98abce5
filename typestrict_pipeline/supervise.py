"""Run a server with its whole process tree, and stop all of it on Ctrl-C or SIGTERM, in bounded time.

``python -m typestrict_pipeline.supervise [--grace S] -- COMMAND ARGS...`` is how ``make ui`` and
``make api`` start their servers. ``dagster dev`` alone does not stop on SIGTERM sent to ``make``:
``make`` forwards it to its shell, the shell dies, and ``dagster dev`` with its webserver, daemon
and code servers lives on, not answering (seen two minutes later). The supervisor fixes it by
construction:

* the command runs in a **session of its own**, so every process it starts (and theirs) is found
  by its session id, even one that changed its process group;
* on SIGINT (Ctrl-C: the terminal sends it to ``make`` and to the supervisor, not to the command's
  session), SIGTERM (``make`` forwards it to its child, the supervisor: the recipe ``exec``s it) or
  SIGHUP (the terminal closed), every process of the session gets SIGTERM; what is left after
  ``--grace`` seconds (default 5) gets SIGKILL; the supervisor exits ``128 + signal`` once the
  session is empty. So the whole tree is gone within ``grace`` + 1 s, whatever it does with the
  signal;
* when the command ends by itself, what it left behind in its session is stopped the same way (no
  orphan), and the supervisor exits with the command's code.

No Dagster import; Linux finds a session's processes in ``/proc`` (elsewhere the process group).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

__all__ = ["DEFAULT_GRACE_S", "main", "session_members", "stop_session"]

DEFAULT_GRACE_S = 5.0
"""Seconds the tree has to stop after SIGTERM before SIGKILL (well inside the 10 s promised)."""


def _processes() -> list[tuple[int, str, int, int]]:
    """Every process in ``/proc``: pid, state, parent pid and session id (none off Linux).

    >>> [p for p in _processes() if p[0] == os.getpid()][0][3] == os.getsid(0)
    True
    """
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text(encoding="ascii", errors="replace")
            fields = stat[stat.rfind(")") + 2:].split()
            out.append((int(name), fields[0], int(fields[1]), int(fields[3])))
        except (OSError, IndexError, ValueError):
            continue
    return out


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (zombies excluded), from ``/proc``.

    >>> session_members(os.getsid(0)).count(os.getpid())
    1
    """
    return [pid for pid, state, _, session in _processes()
            if session == sid and state not in ("Z", "X")]


def _signal_all(sid: int, sig: int) -> None:
    members = session_members(sid)
    if not members and not Path("/proc").is_dir():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, sig)
        return
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_session(sid: int, leader: subprocess.Popen[bytes] | None = None, *,
                 grace_s: float = DEFAULT_GRACE_S) -> float:
    """SIGTERM to every process of session ``sid``, SIGKILL to what is left after ``grace_s``;
    returns the seconds it took for the session to be empty (at most ``grace_s`` + about 1 s).

    >>> proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
    ...                         start_new_session=True)
    >>> stop_session(proc.pid, proc) < DEFAULT_GRACE_S
    True
    """
    started = time.monotonic()
    _signal_all(sid, signal.SIGTERM)
    deadline = started + grace_s
    killed = False
    while True:
        if leader is not None:
            leader.poll()  # reap the leader, so it does not linger as a zombie
        if not session_members(sid) and (leader is None or leader.returncode is not None):
            return time.monotonic() - started
        now = time.monotonic()
        if now >= deadline and not killed:
            _signal_all(sid, signal.SIGKILL)
            killed = True
        if now >= deadline + 5:
            return now - started  # only unkillable (D-state) processes remain
        time.sleep(0.05)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C, ``kill`` (and ``make`` forwarding it) and a closed terminal."""


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_stopping: list[int] = []
"""The stop signal being handled (at most one): set by the first, read by the later ones."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    """The first stop signal interrupts the wait for the command; every later one returns at
    once, so the cleanup it started always runs to its end.

    Two signals are the usual case, not a corner: Ctrl-C reaches ``make`` and the supervisor
    together and ``make`` sends its child the same signal again; ``kill -TERM -PGID`` likewise.
    On a busy machine the second can land after the first has been raised and before the
    cleanup begins, and it must not cut the cleanup short (an orphaned server was seen so).

    >>> _stopping.clear()
    >>> try:
    ...     _raise_stop(signal.SIGTERM, None)
    ... except _Stop as stop:
    ...     print(signal.Signals(stop.signum).name)
    SIGTERM
    >>> _raise_stop(signal.SIGINT, None)  # the second: nothing raised
    >>> _stopping.clear()
    """
    if _stopping:
        return
    _stopping.append(signum)
    raise _Stop(signum)


def _child_sessions(parent: int) -> list[int]:
    """The children of ``parent`` that lead a session of their own (from ``/proc``).

    >>> proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
    ...                         start_new_session=True)
    >>> proc.pid in _child_sessions(os.getpid())
    True
    >>> _ = stop_session(proc.pid, proc)
    """
    return [pid for pid, _, ppid, session in _processes() if ppid == parent and session == pid]


def run(command: Sequence[str], *, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Run ``command`` in its own session until it ends or a stop signal comes; returns the exit
    code (the command's, or ``128 + signal``)."""
    _stopping.clear()
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_stop)
    child: subprocess.Popen[bytes] | None = None
    try:
        try:
            child = subprocess.Popen(list(command), start_new_session=True)
        except OSError as exc:
            print(f"supervise: expected a command to run, got {command[0]!r} ({exc.strerror}). "
                  "Check the command", file=sys.stderr)
            return 127
        code = child.wait()
        if session_members(child.pid):  # the command ended and left processes behind: no orphans
            stop_session(child.pid, None, grace_s=grace_s)
        return code
    except _Stop as stop:
        return _stop_everything(command, child, stop.signum, grace_s)


def _stop_everything(command: Sequence[str], child: subprocess.Popen[bytes] | None, signum: int,
                     grace_s: float) -> int:
    """Stop the command's session (or, if the signal came while it was being started, the
    session of every child of this process), say so, and return ``128 + signum``."""
    started = time.monotonic()
    if child is not None:
        stop_session(child.pid, child, grace_s=grace_s)
    else:
        for sid in _child_sessions(os.getpid()):
            stop_session(sid, None, grace_s=grace_s)
    name = signal.Signals(signum).name
    print(f"supervise: {name}: stopped {command[0]} and every process it started "
          f"in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 128 + signum


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m typestrict_pipeline.supervise",
        description="Run COMMAND in a session of its own; on Ctrl-C, SIGTERM or SIGHUP stop its "
                    "whole process tree (SIGTERM, then SIGKILL after --grace seconds).")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S,
                        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE_S:g})")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not 0 < args.grace <= 60:
        parser.error("expected -- COMMAND ARGS... and a --grace from 0 to 60 seconds")
    return run(command, grace_s=args.grace)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
