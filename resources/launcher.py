"""The run launcher of the product's Dagster instance: Dagster's default, warm, with a health check.

Dagster's ``DefaultRunLauncher`` cannot tell run monitoring whether a run's process is alive,
so a run whose process was killed (``kill -9``, the OOM killer, a crash) stays "started" until
someone marks it failed by hand, unless it was launched by a code server that watches it. This
launcher answers run monitoring's question from the run's own events: the process id that
emitted the run's start event, checked on this host (:func:`typestrict_pipeline.processes.process_alive`,
safe against a reused id). It covers runs started anywhere on the host (launched by the daemon,
the UI or ``dagster job execute``). Named in the instance configuration written by
:mod:`typestrict_pipeline.instance` (``run_launcher``); a deployment whose runs execute on other
hosts needs a launcher of its own (see docs/operations.md).

**Warm start.** The default launcher starts each run in a new interpreter that imports Dagster
and the code location again: about 2 s on the project's machine, as long as a whole verdict.
With ``warm_start`` (on in the product's instance), the first run of a code location is launched
the default way while a warm run server (:mod:`resources.warm_server`) imports the code location
(and ``preload_modules``) once beside it; every later run of that code location is a fork of the
warm server, executed exactly as the default run process executes it. The server is started
again when a source file of the code location changes, so a run never executes stale code. Runs
of other code locations, and any run the server cannot take, go the default way.
"""

import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import dagster as dg
from dagster._core.launcher import (
    CheckRunHealthResult,
    DefaultRunLauncher,
    LaunchRunContext,
    WorkerStatus,
)
from dagster._core.storage.tags import GRPC_INFO_TAG, HIDDEN_TAG_PREFIX
from dagster._serdes import serialize_value
from dagster._serdes.config_class import ConfigurableClassData

from typestrict_pipeline.processes import process_alive

WARM_SERVER = Path(__file__).with_name("warm_server.py")
RUN_PROCESS_TAG = f"{HIDDEN_TAG_PREFIX}typestrict/run_process"
"""Tag of a run started by the warm run server: ``{"pid": n, "at": seconds since the epoch}``.
Hidden from the UI's runs table and run page (Dagster hides the ``.dagster/`` prefix, as for its
own ``.dagster/run_worker``): it is for the launcher, not for a reader."""
_OLD_RUN_PROCESS_TAG = "typestrict/run_process"  # runs launched before the tag was hidden
_REPLY_TIMEOUT_S = 30.0


def run_process_tag(tags: Mapping[str, str]) -> str | None:
    """The warm-started run's process tag (the hidden one, or the one older runs carry).

    >>> run_process_tag({RUN_PROCESS_TAG: "{}"}), run_process_tag({"typestrict/run_process": "[]"})
    ('{}', '[]')
    """
    return tags.get(RUN_PROCESS_TAG, tags.get(_OLD_RUN_PROCESS_TAG))


class WarmServerError(RuntimeError):
    """The warm run server refused, answered nothing, or ended; the run goes the default way."""


class _WarmServer:
    """A running :mod:`resources.warm_server`, spoken to by JSON lines over its stdin/stdout."""

    def __init__(self, origin: Any, preload: Sequence[str]) -> None:
        pointer = origin.repository_origin.code_pointer
        self.process = subprocess.Popen(
            [origin.executable_path, str(WARM_SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            cwd=getattr(pointer, "working_directory", None) or None)
        self._buffer = b""
        self.ready = False
        self._send({"origin": serialize_value(origin), "preload": list(preload)})

    def _send(self, message: Mapping[str, Any]) -> None:
        stdin: IO[bytes] | None = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
        except OSError as exc:
            raise WarmServerError(f"the warm run server is gone ({exc})") from exc

    def _read(self, timeout: float) -> dict[str, Any] | None:
        """The next reply, or None when none came within ``timeout`` seconds."""
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([stdout.fileno()], [], [], max(left, 0.0))
            if not readable:
                return None
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                raise WarmServerError(f"the warm run server ended (exit code {self.process.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def poll_ready(self) -> bool:
        """Whether the server has imported the code location (never waits)."""
        if not self.ready:
            reply = self._read(0.0)
            if reply is not None and not reply.get("ready"):
                raise WarmServerError(str(reply.get("error", reply)))
            self.ready = reply is not None
        return self.ready

    def start_run(self, run_id: str, instance_ref: str) -> int:
        """Fork the run's process; its id."""
        self._send({"run_id": run_id, "instance_ref": instance_ref})
        reply = self._read(_REPLY_TIMEOUT_S)
        if reply is None:
            raise WarmServerError(f"the warm run server did not answer within {_REPLY_TIMEOUT_S:.0f} s")
        if "stale" in reply:
            raise WarmServerError(f"{reply['stale']} changed since the server imported it")
        if "pid" not in reply:
            raise WarmServerError(str(reply.get("error", reply)))
        return int(reply["pid"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class WatchedRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose runs' processes run monitoring can check (same host), warm."""

    def __init__(self, inst_data: ConfigurableClassData | None = None, warm_start: bool = False,
                 preload_modules: Sequence[str] = ()) -> None:
        super().__init__(inst_data=inst_data)
        self._warm_start = warm_start
        self._preload = list(preload_modules)
        self._servers: dict[str, _WarmServer] = {}
        self._refused: dict[str, str] = {}  # code locations whose server failed to warm up: why
        self._lock = threading.Lock()

    @classmethod
    def config_type(cls) -> Any:
        return {
            "warm_start": dg.Field(bool, is_required=False, default_value=False, description=(
                "Start runs as forks of a process that has imported the code location once.")),
            "preload_modules": dg.Field([str], is_required=False, default_value=[], description=(
                "Modules the warm run server imports besides the code location (the runs' heavy "
                "libraries).")),
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> "WatchedRunLauncher":
        return cls(inst_data=inst_data, warm_start=bool(config_value.get("warm_start", False)),
                   preload_modules=list(config_value.get("preload_modules", [])))

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if not (self._warm_start and self._launch_warm(run)):
            super().launch_run(context)

    def _launch_warm(self, run: dg.DagsterRun) -> bool:
        """Start ``run`` from its code location's warm server; False when it must go the default way."""
        origin = run.job_code_origin
        if origin is None:
            return False
        key = serialize_value(origin.repository_origin)
        with self._lock:
            if key in self._refused:
                self._instance.report_engine_event(
                    f"Launched the default way: warm start is off for this code location until the "
                    f"daemon restarts (its warm run server could not warm up: {self._refused[key]}).",
                    run, cls=self.__class__)
                return False
            server = self._servers.get(key)
            try:
                if server is None:
                    self._servers[key] = _WarmServer(origin, self._preload)
                    return False  # this run goes the default way while the server warms up
                if not server.poll_ready():
                    return False
                started = time.time()
                pid = server.start_run(run.run_id, serialize_value(self._instance.get_ref()))
            except (WarmServerError, OSError) as exc:
                self._servers.pop(key, None)
                if server is not None:
                    server.close()
                    if not server.ready:  # it could not import the code location: do not retry
                        self._refused[key] = str(exc)
                self._instance.report_engine_event(
                    f"The warm run server could not start this run ({exc}); launching it the default way.",
                    run, cls=self.__class__)
                return False
        self._instance.add_run_tags(run.run_id, {RUN_PROCESS_TAG: json.dumps({"pid": pid, "at": started})})
        self._instance.report_engine_event(
            f"Launched in process {pid}, forked from the warm run server (process "
            f"{server.process.pid}) that had imported the code location.", run, cls=self.__class__)
        self._run_ids.add(run.run_id)
        return True

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        tag = run_process_tag(run.tags) if run is not None else None
        if run is None or run.is_finished or tag is None or GRPC_INFO_TAG in run.tags:
            return bool(super().terminate(run_id))  # type: ignore[no-untyped-call]
        found = json.loads(tag)
        self._instance.report_run_canceling(run)
        if not process_alive(int(found["pid"]), running_at=float(found["at"])):
            self._instance.report_engine_event(
                f"The run's process {found['pid']} is gone; run monitoring marks the run failed.",
                run, cls=self.__class__)
            return False
        os.kill(int(found["pid"]), signal.SIGINT)  # the run stops at its next step boundary
        return True

    def dispose(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        records = self._instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1
        ).records
        event = records[0].event_log_entry if records else None
        pid = event.dagster_event.pid if event and event.dagster_event else None
        if event is None or pid is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, "the run has not reported its process yet")
        if process_alive(pid, running_at=event.timestamp):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"process {pid} is running")
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"the run's process {pid} is gone (killed or crashed) before the run finished; "
            "its retries, if any, follow (run_retries)",
        )
