"""The warm run server: one process that has imported a code location, forking a run per request.

Dagster's default launcher starts every run in a new interpreter that imports Dagster and the
code location again (about 2 s on the project's machine, as long as a whole verdict). This
server pays that once: it imports the code location (and any modules named to preload), then
forks one child per run, which executes the run exactly as the default launcher's run process
does (``core_execute_run``, the run's own executor). Started and spoken to only by
:class:`resources.launcher.WatchedRunLauncher`, through its standard input and output, one JSON
object per line:

* first line in: ``{"origin": <serialized JobPythonOrigin>, "preload": [module, ...]}``;
  reply ``{"ready": true, "pid": n}`` once imported, or ``{"error": "..."}`` and exit;
* then per run: ``{"run_id": "...", "instance_ref": <serialized InstanceRef>}``; reply
  ``{"pid": n}`` (the run's process), or ``{"stale": "<file>"}`` and exit when a source file of
  the code location changed since the import (the launcher starts a fresh server), or
  ``{"error": "..."}``.

The server stays single-threaded (a fork copies only the calling thread) and opens no storage
before forking; it refuses to start if importing the code location started a thread. It reaps
its finished children, and exits when its standard input closes (the launcher's process ended);
runs still going carry on. Runs by the project's own code only: no import of the project here,
so this file runs under any code location's interpreter (``python warm_server.py``).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import random
import select
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_RUN_MACHINERY = (
    "dagster._core.instance.factory",
    "dagster._core.storage.root",
    "dagster._core.storage.local_compute_log_manager",
    "dagster._core.executor.in_process",
    "dagster._core.execution.plan.active",
    "dagster._core.system_config.composite_descent",
    "dagster._grpc.impl",
)
"""Dagster's own modules a run process imports to execute a run (opening the instance, the
compute logs, the executor): imported here once, when present (Dagster may move them)."""

_POLL_S = 1.0
"""How often, at most, finished children are reaped while no request comes."""


def _reply(message: dict[str, Any]) -> None:
    sys.__stdout__.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
    sys.__stdout__.flush()  # type: ignore[union-attr]


def _requests() -> Iterator[dict[str, Any]]:
    """Lines from standard input, reaping finished children between them; ends at end of input."""
    fd = sys.stdin.fileno()
    buffer = b""
    while True:
        _reap()
        readable, _, _ = select.select([fd], [], [], _POLL_S)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _project_files(working_directory: str) -> dict[str, int]:
    """Source files of loaded modules under the code location's working directory, with mtimes."""
    root = Path(working_directory).resolve()
    found: dict[str, int] = {}
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not name:
            continue
        path = Path(name).resolve()
        if path.is_relative_to(root):
            try:
                found[str(path)] = path.stat().st_mtime_ns
            except OSError:
                continue
    return found


def _changed(files: dict[str, int]) -> str | None:
    for name, mtime in files.items():
        try:
            if Path(name).stat().st_mtime_ns != mtime:
                return name
        except OSError:
            return name
    return None


def _load(origin_json: str, preload: list[str]) -> dict[str, int]:
    """Import Dagster, the code location and ``preload``; resolve the run's job once."""
    from dagster._core.origin import JobPythonOrigin
    from dagster._serdes import deserialize_value
    from dagster._utils.hosted_user_process import recon_job_from_origin

    origin = deserialize_value(origin_json, JobPythonOrigin)
    working_directory = getattr(origin.repository_origin.code_pointer, "working_directory", None) or os.getcwd()
    if working_directory not in sys.path:
        sys.path.insert(0, working_directory)
    recon_job_from_origin(origin).get_definition()
    for name in _RUN_MACHINERY:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    for name in preload:
        importlib.import_module(name)
    return _project_files(working_directory)


def _execute(run_id: str, instance_ref_json: str) -> int:
    """In the forked child: execute the run as the default launcher's run process does."""
    from dagster._core.events import EngineEventData
    from dagster._core.instance import DagsterInstance
    from dagster._core.instance.ref import InstanceRef
    from dagster._grpc.impl import core_execute_run
    from dagster._serdes import deserialize_value
    from dagster._utils.error import serializable_error_info_from_exc_info
    from dagster._utils.hosted_user_process import recon_job_from_origin
    from dagster._utils.interrupts import capture_interrupts

    ref = deserialize_value(instance_ref_json, InstanceRef)
    with capture_interrupts(), DagsterInstance.from_ref(ref) as instance:
        run = instance.get_run_by_id(run_id)
        if run is None or run.job_code_origin is None:
            return 1
        pid = os.getpid()
        try:
            recon_job = recon_job_from_origin(run.job_code_origin)
        except Exception:
            instance.report_engine_event(
                "The warm run server could not load the run's job.", run,
                EngineEventData.engine_error(serializable_error_info_from_exc_info(sys.exc_info())))
            instance.report_run_failed(run, "The warm run server could not load the run's job.")
            return 1
        instance.report_engine_event(f"Started process for run (pid: {pid}).", run,
                                     EngineEventData.in_process(pid))
        try:
            for _ in core_execute_run(recon_job, run, instance, inject_env_vars=False):
                pass
        except Exception:
            pass  # core_execute_run wrote the failure to the run's event log before raising
        finally:
            instance.report_engine_event(f"Process for run exited (pid: {pid}).", run)
    return 0


def _fork_run(request: dict[str, Any]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(2, 1)  # the reply channel is the server's; the run writes to the log stream
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        random.seed()
        code = _execute(str(request["run_id"]), str(request["instance_ref"]))
    except BaseException:  # the child never returns into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher ends us by closing our input
    requests = _requests()
    try:
        first = next(requests)
        files = _load(str(first["origin"]), [str(m) for m in first.get("preload", [])])
    except StopIteration:
        return 0
    except Exception as exc:
        _reply({"error": f"could not import the code location: {type(exc).__name__}: {exc}"})
        return 1
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        _reply({"error": f"importing the code location started threads ({names}); forking is unsafe"})
        return 1
    # Python's recipe for a process that forks without exec: what the imports made is moved out
    # of the collector's reach, so a run's collections neither walk it (0.1-0.2 s each) nor
    # copy its pages (typestrict_pipeline/heap.py)
    gc.collect()
    gc.freeze()
    _reply({"ready": True, "pid": os.getpid()})
    for request in requests:
        changed = _changed(files)
        if changed is not None:
            _reply({"stale": changed})
            return 0
        try:
            _reply({"pid": _fork_run(request)})
        except (OSError, KeyError) as exc:
            _reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
