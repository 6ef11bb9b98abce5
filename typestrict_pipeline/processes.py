"""Is a run's process still there? A same-host check by process id, safe against id reuse.

No Dagster import: :mod:`resources.launcher` asks this for run monitoring. A process counts as
gone when no process has its id, when it is a zombie (exited, not yet reaped by its parent), or
when the process now holding the id started after the moment the run's process was known to
run (the id was reused). :func:`stop_process_group` ends a service started in a session of its
own (a daemon, a webserver) with what it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

__all__ = ["process_alive", "stop_process_group"]

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
