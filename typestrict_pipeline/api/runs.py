"""Dagster runs launched by the API: the same runs the Dagster UI launches, on the same instance.

The API never executes a study or a backtest itself. :class:`DagsterRuns` submits a run of the
code location's job (``study_job``, ``backtest_<workflow>_job``) exactly as the UI's "Launch run"
does: the run is created on the instance from the job's snapshot and execution plan, with the
code location's origin, and handed to the instance's run coordinator (``instance.submit_run``).
The product's instance queues it, and the Dagster daemon launches it through the instance's run
launcher (:mod:`resources.launcher`). So the run is listed in the UI like any other, runs in its
own process, and outlives the API server: a restart loses nothing.

* The instance is ``DAGSTER_HOME``'s when set, else ``<TYPESTRICT_HOME>/dagster_home`` (where
  ``make demo`` and ``make ui`` keep it; the product's ``dagster.yaml`` is written there when
  there is none, as ``make demo`` does).
* The code location is the one ``workspace.yaml`` names (module ``typestrict_pipeline.definitions``,
  location ``typestrict_pipeline``), loaded once in the API process, on the first launch.
* Every run gets the API's store in its run config (``resources.store.config.url``) and its
  ``typestrict/store`` tag, without a password (``resources.store.on_store``), so it acts on the
  store the request was checked against, and tags naming the workspace and the object it runs
  (:data:`WORKSPACE_TAG`, :data:`OBJECT_TAG`).

Nothing here imports Dagster until a run is launched or read.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.errors import StoreError

MODULE = "typestrict_pipeline.definitions"
LOCATION = "typestrict_pipeline"
REPOSITORY = "__repository__"
WORKSPACE_TAG = "typestrict/workspace"
"""Tag of every run the API launches: the workspace it runs for."""
OBJECT_TAG = "typestrict/object"
"""Tag of every run the API launches: ``backtest:<id>`` or ``study:<id>``."""
ROOT = Path(__file__).resolve().parent.parent.parent
log = logging.getLogger("typestrict.api")


class RunState:
    """How the API names a Dagster run's status (``queued``, ``running`` and the three ends).

    >>> RunState.of("QUEUED"), RunState.of("STARTED"), RunState.of("SUCCESS")
    ('queued', 'running', 'succeeded')
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @staticmethod
    def of(status: str) -> str:
        return {"NOT_STARTED": "queued", "QUEUED": "queued", "MANAGED": "queued",
                "STARTING": "running", "STARTED": "running", "CANCELING": "running",
                "SUCCESS": "succeeded", "FAILURE": "failed", "CANCELED": "cancelled"}.get(status, "queued")


def unstarted(what: str, run_id: str, state: str, again: str) -> str:
    """Why a study or a backtest whose Dagster run ended before it started has ended, in words a
    workspace can act on (the run's executor, code location and daemon are the operator's).

    >>> print(unstarted("backtest", "ab12", "failed", "Run the backtest again"))
    expected the backtest's run ab12 to start it, got the run ended (failed) before the backtest started, so no step ran and nothing was charged. Run the backtest again; if its run keeps failing before it starts, send the platform's operator this message (the run's id is what they look up)
    """
    unit = "window" if what == "study" else "step"
    return (f"expected the {what}'s run {run_id} to start it, got the run ended ({state}) before the {what} "
            f"started, so no {unit} ran and nothing was charged. {again}; if its run keeps failing before it "
            "starts, send the platform's operator this message (the run's id is what they look up)")


@dataclass(frozen=True)
class RunInfo:
    """A launched run as the API shows it: its id, job, state and the object it runs."""

    run_id: str
    job_name: str
    state: str
    workspace: str | None
    object_ref: str | None


def dagster_home_for(home: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The instance's folder: ``DAGSTER_HOME`` when set, else ``<home>/dagster_home``.

    >>> dagster_home_for(Path("/h"), {})
    PosixPath('/h/dagster_home')
    >>> dagster_home_for(Path("/h"), {"DAGSTER_HOME": "/d"})
    PosixPath('/d')
    """
    env = os.environ if environ is None else environ
    explicit = env.get("DAGSTER_HOME")
    return Path(explicit).resolve() if explicit else home / "dagster_home"


class DagsterRuns:
    """Submit and read the API's Dagster runs on one instance (thread-safe; one per server).

    Args:
        dagster_home: the instance's folder (see :func:`dagster_home_for`).
        store_url: the store every launched run acts on.
    """

    def __init__(self, dagster_home: Path, store_url: str) -> None:
        self.dagster_home = dagster_home
        self.store_url = store_url
        self._lock = threading.Lock()
        self._instance: Any = None
        self._context: Any = None

    def _ensure(self) -> tuple[Any, Any]:
        """The instance and the workspace process context, made on first use."""
        with self._lock:
            if self._instance is None:
                import dagster as dg
                from dagster._core.remote_origin import InProcessCodeLocationOrigin
                from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
                from dagster._core.workspace.context import WorkspaceProcessContext
                from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

                from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml

                if not (self.dagster_home / "dagster.yaml").is_file():
                    write_instance_yaml(self.dagster_home, sqlite_instance_config(self.dagster_home))
                instance = dg.DagsterInstance.from_config(str(self.dagster_home))
                origin = InProcessCodeLocationOrigin(
                    LoadableTargetOrigin(executable_path=sys.executable, module_name=MODULE,
                                         working_directory=str(ROOT)),
                    location_name=LOCATION)
                self._context = WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget([origin]))
                self._instance = instance
            return self._instance, self._context

    @property
    def instance(self) -> Any:
        """The instance, to read or cancel runs.

        Raises:
            ApiError: 503 ``dagster_unavailable``: it could not be loaded (nothing changed).
        """
        try:
            return self._ensure()[0]
        except Exception as exc:
            raise dagster_unavailable("to read the runs of the server's Dagster instance", exc,
                                      after="nothing was changed") from None

    def warm(self) -> None:
        """Load the instance and the code location now (the server does it in a thread as it
        starts, so the first launch does not wait for it); a failure is left for a launch to say."""
        try:
            self._ensure()[1].create_request_context().get_code_location(LOCATION)
        except Exception:  # reported, with the product's message, by the launch that needs it
            return

    def submit(self, job_name: str, run_config: Mapping[str, Any], *, workspace: str,
               object_ref: str, tags: Mapping[str, str] | None = None) -> str:
        """Create a run of ``job_name`` as the UI does and hand it to the run coordinator; its id.

        Raises:
            StoreError: the code location does not load or has no such job (an operator's fault).
        """
        import importlib

        from dagster._core.storage.dagster_run import DagsterRunStatus
        from dagster._core.utils import make_new_run_id

        on_store = importlib.import_module("resources.store").on_store  # the wiring, by name
        instance, context = self._ensure()
        request = context.create_request_context()
        location = request.get_code_location(LOCATION)
        if location is None:  # pragma: no cover - the in-process location loads or raises
            raise StoreError(f"expected the code location {LOCATION!r} to load, got none")
        repository = location.get_repository(REPOSITORY)
        if not repository.has_job(job_name):
            raise StoreError(f"expected the code location to define job {job_name!r}, got none. "
                             "Deploy the current code location")
        remote_job = repository.get_full_job(job_name)
        config, store_tags = on_store(self.store_url, run_config, tags)
        plan = location.get_execution_plan(remote_job, config, step_keys_to_execute=None,
                                           known_state=None, instance=instance)
        run = instance.create_run(
            job_name=job_name, run_id=make_new_run_id(), run_config=config,
            resolved_op_selection=None, step_keys_to_execute=None, status=DagsterRunStatus.NOT_STARTED,
            tags={**remote_job.tags, **store_tags, WORKSPACE_TAG: workspace, OBJECT_TAG: object_ref},
            root_run_id=None, parent_run_id=None, job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(), asset_selection=None,
            asset_check_selection=None, op_selection=None, asset_graph=request.asset_graph)
        instance.submit_run(run.run_id, request)
        return str(run.run_id)

    def runs_for(self, workspace: str, object_ref: str | None = None) -> list[RunInfo]:
        """The API's runs for ``workspace`` (of one object when given), newest first."""
        import dagster as dg

        tags = {WORKSPACE_TAG: workspace}
        if object_ref is not None:
            tags[OBJECT_TAG] = object_ref
        runs = self.instance.get_runs(filters=dg.RunsFilter(tags=tags), limit=500)
        return [_info(r) for r in runs]

    def get(self, run_id: str) -> RunInfo | None:
        run = self.instance.get_run_by_id(run_id)
        return None if run is None else _info(run)

    def cancel(self, run_id: str) -> bool:
        """Stop a run: a queued one leaves the queue, a running one is terminated (its process
        stops at its next step boundary, what ran stays). False when it had already ended."""
        instance = self.instance
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        if RunState.of(run.status.value) == RunState.QUEUED:
            return bool(instance.run_coordinator.cancel_run(run_id))
        return bool(instance.run_launcher.terminate(run_id))

    def close(self, wait_s: float = 2.0) -> None:
        """Release the instance and the code location. A load still under way (the start-up
        warm-up) is not waited for beyond ``wait_s``: the server stops on time, and what the
        loading thread holds ends with the process."""
        if not self._lock.acquire(timeout=wait_s):
            return
        try:
            if self._context is not None:
                self._context.__exit__(None, None, None)
            if self._instance is not None:
                self._instance.dispose()
            self._context = self._instance = None
        finally:
            self._lock.release()


def _info(run: Any) -> RunInfo:
    return RunInfo(run_id=str(run.run_id), job_name=str(run.job_name), state=RunState.of(run.status.value),
                   workspace=run.tags.get(WORKSPACE_TAG), object_ref=run.tags.get(OBJECT_TAG))


DAGSTER_RETRY_AFTER_S = 30
"""The ``Retry-After`` of a request the Dagster instance could not serve (503 ``dagster_unavailable``)."""


def dagster_unavailable(expected: str, exc: BaseException, *, after: str) -> ApiError:
    """The Dagster instance failed a request (unreachable, misconfigured): said to the customer
    without the raw failure, whose text (it may name the server's folders) goes to the server's
    log only. A 503 with ``Retry-After``: the same request can succeed later.

    >>> str(dagster_unavailable("study 7's Dagster run to be queued", OSError("/srv/x: nope"),
    ...                         after="nothing was spent"))
    "expected study 7's Dagster run to be queued, got the server's Dagster instance unavailable (the details are in the server's log). Nothing was spent; retry later (Retry-After), and tell the operator if it persists"
    """
    log.error("the Dagster instance failed: expected %s", expected, exc_info=exc)
    message = (f"expected {expected}, got the server's Dagster instance unavailable (the details "
               f"are in the server's log). {after[:1].upper()}{after[1:]}; retry later "
               "(Retry-After), and tell the operator if it persists")
    return ApiError(503, "dagster_unavailable", message,
                    headers={"Retry-After": str(DAGSTER_RETRY_AFTER_S)})


__all__ = ["DAGSTER_RETRY_AFTER_S", "LOCATION", "OBJECT_TAG", "WORKSPACE_TAG", "DagsterRuns", "RunInfo",
           "RunState", "dagster_home_for", "dagster_unavailable"]
