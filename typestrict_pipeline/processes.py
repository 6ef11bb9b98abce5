"""Is a run's process still there? A same-host check by process id, safe against id reuse.

No Dagster import: :mod:`resources.launcher` asks this for run monitoring. A process counts as
gone when no process has its id, when it is a zombie (exited, not yet reaped by its parent), or
when the process now holding the id started after the moment the run's process was known to
run (the id was reused). :func:`stop_process_group` ends a service started in a session of its
own (a daemon, a webserver) with what it started.

:class:`ProcessIdentity` names one process for good: its host, the host's boot, its id and the
clock tick it started at (``/proc/<pid>/stat`` field 22). Two processes can share an id one after
the other, never an id *and* a start tick on one boot, so :func:`identity_alive` is exact where
:func:`process_alive` needs a moment and a slack. The lifecycle's leases
(:mod:`typestrict_pipeline.lifecycle.leases`) store it for every backtest, study and claim.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Liveness",
    "ProcessIdentity",
    "ancestor_identity",
    "identity_alive",
    "identity_of",
    "keep_stop_signals",
    "process_alive",
    "restore_stop_signals",
    "stop_handlers",
    "stop_process_group",
    "stop_request",
    "stop_signals_received",
    "this_process",
]

_SLACK_S = 2.0
"""Clock ticks and event timestamps differ slightly: a process started up to this long after
the moment is still taken as the same process."""


def _linux_start_and_state(pid: int) -> tuple[float, str] | None:
    """The process's start time (seconds since the epoch) and state letter, from ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and ')'
    try:
        state, start_ticks = fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None
    return boot + start_ticks / os.sysconf("SC_CLK_TCK"), state


def _boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), or ``""`` where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> tuple[int, str] | None:
    """The process's start time in clock ticks since boot and its state letter, from ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class ProcessIdentity:
    """One process, named so that a reused process id is never taken for it.

    Attributes:
        host: the host name (``socket.gethostname()``).
        boot_id: the host's boot id (a reboot makes every earlier identity dead).
        pid: the process id.
        start_ticks: when it started, in clock ticks since boot (``-1`` when unknown).
    """

    host: str
    boot_id: str
    pid: int
    start_ticks: int

    def describe(self) -> str:
        """``process 123 on host h``."""
        return f"process {self.pid} on host {self.host}"


class Liveness(enum.StrEnum):
    """What a process check can say.

    Attributes:
        ALIVE: the very process runs (same host, same boot, same id and start tick).
        DEAD: it is gone: no such process, a zombie, an id reused by a later process, or the host
            rebooted since.
        UNKNOWN: it runs on another host: only its heartbeat can tell.
    """

    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


def this_process() -> ProcessIdentity:
    """The calling process's identity.

    >>> me = this_process()
    >>> me.pid == os.getpid(), identity_alive(me)
    (True, <Liveness.ALIVE: 'alive'>)
    """
    found = _start_ticks(os.getpid())
    return ProcessIdentity(socket.gethostname(), _boot_id(), os.getpid(), found[0] if found else -1)


def identity_of(pid: int) -> ProcessIdentity | None:
    """The identity of process ``pid`` on this host now (None: no such process, or no ``/proc``).

    >>> identity_of(os.getpid()) == this_process()
    True
    """
    found = _start_ticks(pid)
    if found is None or found[1] in ("Z", "X"):
        return None
    return ProcessIdentity(socket.gethostname(), _boot_id(), pid, found[0])


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return int(stat[stat.rfind(")") + 2:].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def ancestor_identity(pid: int, *, levels: int = 4) -> ProcessIdentity | None:
    """The identity of ``pid`` if it is this process or one of its ancestors (up to ``levels``
    up), else None: a run's process seen from one of its step processes, never a stranger that
    happens to have that id.

    >>> ancestor_identity(os.getppid()) == identity_of(os.getppid())
    True
    >>> ancestor_identity(2**22 + 12345) is None
    True
    """
    current: int | None = os.getpid()
    for _ in range(levels + 1):
        if current is None or current <= 0:
            return None
        if current == pid:
            return identity_of(pid)
        current = _parent(current)
    return None


def identity_alive(identity: ProcessIdentity) -> Liveness:
    """Whether the process ``identity`` names still runs (see :class:`Liveness`).

    >>> import dataclasses
    >>> me = this_process()
    >>> identity_alive(dataclasses.replace(me, start_ticks=me.start_ticks + 1))  # a reused id
    <Liveness.DEAD: 'dead'>
    >>> identity_alive(dataclasses.replace(me, host="elsewhere"))
    <Liveness.UNKNOWN: 'unknown'>
    """
    if identity.host != socket.gethostname():
        return Liveness.UNKNOWN
    if identity.boot_id and identity.boot_id != _boot_id():
        return Liveness.DEAD
    if identity.pid <= 0:
        return Liveness.DEAD
    try:
        os.kill(identity.pid, 0)
    except ProcessLookupError:
        return Liveness.DEAD
    except PermissionError:
        pass  # another user's process: it exists
    found = _start_ticks(identity.pid)
    if found is None:
        # No /proc (not Linux: the id alone must do) or the process ended between the two looks.
        return Liveness.DEAD if _gone(identity.pid) else Liveness.ALIVE
    ticks, state = found
    if state in ("Z", "X"):
        return Liveness.DEAD
    if identity.start_ticks >= 0 and ticks != identity.start_ticks:
        return Liveness.DEAD
    return Liveness.ALIVE


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def process_alive(pid: int, *, running_at: float | None = None) -> bool:
    """Whether process ``pid`` is alive on this host (and is the one that ran at ``running_at``).

    Args:
        pid: the process id.
        running_at: a moment (seconds since the epoch) the process was known to be running; a
            process with this id that started later is another process.

    >>> import time
    >>> process_alive(os.getpid(), running_at=time.time())
    True
    >>> process_alive(2**22 + 12345)
    False
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    found = _linux_start_and_state(pid)
    if found is None:
        return True
    started, state = found
    if state in ("Z", "X"):
        return False
    return running_at is None or started <= running_at + _SLACK_S


def stop_process_group(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Stop ``proc``, started with ``start_new_session=True``, and every process of its group.

    SIGTERM first (a ``dagster-daemon`` shuts its code server and runs down), SIGKILL when the
    group's leader has not exited after ``timeout_s`` seconds; nothing when it already exited.

    >>> import sys
    >>> proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
    ...                         start_new_session=True)
    >>> stop_process_group(proc)
    >>> proc.returncode == -signal.SIGTERM
    True
    """
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a user stops a command with (Ctrl-C, ``kill``)."""


StopHandlers = dict[int, Any]
"""SIGINT's and SIGTERM's handlers, as :func:`signal.getsignal` gives them."""


def stop_handlers() -> StopHandlers:
    """The stop signals' handlers now (to give back with :func:`restore_stop_signals`)."""
    return {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}


def restore_stop_signals(saved: StopHandlers) -> None:
    """Give the stop signals the handlers in ``saved`` (main thread only: elsewhere nothing).

    >>> saved = stop_handlers()
    >>> _ = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    >>> restore_stop_signals(saved)
    >>> signal.getsignal(signal.SIGTERM) is saved[signal.SIGTERM]
    True
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in saved.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


@contextlib.contextmanager
def keep_stop_signals() -> Iterator[None]:
    """Run the block, then give SIGINT and SIGTERM back the handlers they had before it.

    Dagster's in-process execution (``execute_in_process``, ``execute_job``) maps SIGTERM to
    whatever SIGINT's handler is when it ends. Where SIGINT is ignored (a command started in
    the background by a shell without job control, or by ``nohup``), SIGTERM is then ignored
    too: the command could no longer be stopped with ``kill``, and every process it started
    afterwards would inherit the ignored SIGTERM. Only in the main thread (elsewhere handlers
    cannot change, and nothing is done).

    >>> before = signal.getsignal(signal.SIGTERM)
    >>> with keep_stop_signals():
    ...     _ = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    >>> signal.getsignal(signal.SIGTERM) is before
    True
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    back = stop_handlers()
    try:
        yield
    finally:
        restore_stop_signals(back)


def stop_request(signum: int) -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` a stop signal becomes in a command: its text names SIGTERM (the
    CLI then exits 143, "stopped by SIGTERM"); Ctrl-C's has none (exit 130).

    >>> str(stop_request(signal.SIGTERM)), str(stop_request(signal.SIGINT))
    ('SIGTERM (a request to stop)', '')
    """
    return KeyboardInterrupt("SIGTERM (a request to stop)") if signum == signal.SIGTERM else KeyboardInterrupt()


@contextlib.contextmanager
def stop_signals_received() -> Iterator[list[int]]:
    """The stop signals (SIGINT, SIGTERM) that arrive during the block, in order, whoever handles
    them: Dagster's in-process execution turns one into a failed step
    (``DagsterExecutionInterruptedError``) and keeps no trace of which it was.

    Read from the interpreter's wakeup fd, where it writes each signal's number as the signal
    arrives (whatever Python handler then runs); a wakeup fd set before is given back, with what
    arrived meanwhile. Main thread only (elsewhere the list stays empty).

    >>> previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    >>> with stop_signals_received() as got:
    ...     signal.raise_signal(signal.SIGTERM)
    >>> _ = signal.signal(signal.SIGTERM, previous)
    >>> got == [signal.SIGTERM]
    True
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    try:
        before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        try:
            yield received
        finally:
            signal.set_wakeup_fd(before)
            arrived = b""
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(read, 512):
                    arrived += chunk
            if before != -1 and arrived:
                with contextlib.suppress(OSError):
                    os.write(before, arrived)
            received.extend(n for n in arrived if n in STOP_SIGNALS)
    finally:
        os.close(read)
        os.close(write)
