"""The product's run launcher starts runs warm: forks of a process that imported the code location.

A real Dagster instance (SQLite, in a temporary folder) with the launcher the product's instance
names (``resources.launcher.WatchedRunLauncher``, ``warm_start``), a small code location written
to a temporary folder and loaded the way the daemon loads ``workspace.yaml`` (a code server
process). Runs are created and launched through the instance as the run queue launches them.
Every wait is bounded; no assertion on time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.workspace.context import BaseWorkspaceRequestContext, WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget

from resources.launcher import RUN_PROCESS_TAG

WAIT_S = 120.0

LOCATION = '''
import os
import time
from pathlib import Path

import dagster as dg

VERSION = {version}


@dg.op(config_schema={{"out": str, "hold": bool}})
def report(context: dg.OpExecutionContext) -> None:
    out = Path(context.op_config["out"])
    out.write_text(f"{{os.getpid()}} {{VERSION}}")
    while context.op_config["hold"] and not out.with_suffix(".go").exists():
        time.sleep(0.05)


@dg.job(executor_def=dg.in_process_executor)
def warm_job() -> None:
    report()


defs = dg.Definitions(jobs=[warm_job])
'''


def _write_location(folder: Path, version: int) -> None:
    path = folder / "warm_loc.py"
    path.write_text(LOCATION.format(version=version))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + version))  # a new mtime, even within a tick


@pytest.fixture()
def location(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    _write_location(folder, 1)
    return folder


@pytest.fixture()
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    launcher = {"module": "resources.launcher", "class": "WatchedRunLauncher",
                "config": {"warm_start": True}}
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home"),
                              overrides={"run_launcher": launcher}) as found:
        yield found


def _launch(instance: dg.DagsterInstance, workspace: BaseWorkspaceRequestContext, out: Path,
            hold: bool = False) -> str:
    remote = workspace.get_code_location("warm_loc").get_repository("__repository__").get_full_job("warm_job")
    run = instance.create_run(
        job_name="warm_job", run_id=None, run_config={"ops": {"report": {"config": {"out": str(out), "hold": hold}}}},
        resolved_op_selection=None, step_keys_to_execute=None, status=None, tags={}, root_run_id=None,
        parent_run_id=None, job_snapshot=remote.job_snapshot, execution_plan_snapshot=None,
        parent_job_snapshot=None, remote_job_origin=remote.get_remote_origin(),
        job_code_origin=remote.get_python_origin(), asset_selection=None, asset_check_selection=None,
        op_selection=None, asset_graph=workspace.asset_graph)
    instance.launch_run(run.run_id, workspace)
    return run.run_id


def _wait(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish within {WAIT_S:.0f} s")


def _messages(instance: dg.DagsterInstance, run_id: str) -> str:
    return "\n".join(e.message or "" for e in instance.all_logs(run_id))


def _wait_ready(instance: dg.DagsterInstance, workspace: BaseWorkspaceRequestContext, tmp: Path) -> str:
    """Launch runs until one starts warm (the first goes the default way while the server loads)."""
    for attempt in range(60):
        run_id = _launch(instance, workspace, tmp / f"probe{attempt}.txt")
        run = _wait(instance, run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS, _messages(instance, run_id)
        if RUN_PROCESS_TAG in run.tags:
            return run_id
        time.sleep(0.5)
    raise AssertionError("no run started warm after 60 launches")


@pytest.mark.slow
def test_runs_after_the_first_are_forks_of_the_warm_server_and_never_run_stale_code(
    instance: dg.DagsterInstance, location: Path, tmp_path: Path
) -> None:
    target = ModuleTarget(module_name="warm_loc", attribute=None, working_directory=str(location),
                          location_name="warm_loc")
    with WorkspaceProcessContext(instance, target) as context:
        workspace = context.create_request_context()
        first = _launch(instance, workspace, tmp_path / "first.txt")
        first_run = _wait(instance, first)
        assert first_run.status == dg.DagsterRunStatus.SUCCESS
        assert RUN_PROCESS_TAG not in first_run.tags  # the default way: the server was not ready

        warm = _wait_ready(instance, workspace, tmp_path)
        warm_run = instance.get_run_by_id(warm)
        assert warm_run is not None
        pid = json.loads(warm_run.tags[RUN_PROCESS_TAG])["pid"]
        out = sorted(tmp_path.glob("probe*.txt"))[-1].read_text().split()
        assert out == [str(pid), "1"]  # the op ran in the forked process, on the loaded code
        assert "forked from the warm run server" in _messages(instance, warm)
        assert pid != os.getpid()

        # Terminating a warm run cancels it (the UI's Terminate button calls the same method).
        held = _launch(instance, workspace, tmp_path / "held.txt", hold=True)
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "held.txt").exists():
            assert time.monotonic() < deadline, _messages(instance, held)
            time.sleep(0.1)
        held_run = instance.get_run_by_id(held)
        assert held_run is not None and RUN_PROCESS_TAG in held_run.tags
        assert instance.run_launcher.terminate(held)
        assert _wait(instance, held).status == dg.DagsterRunStatus.CANCELED

        # A changed source file: the next run goes the default way on the new code, and the
        # server is started again from it.
        _write_location(location, 2)
        changed = _launch(instance, workspace, tmp_path / "changed.txt")
        assert _wait(instance, changed).status == dg.DagsterRunStatus.SUCCESS
        assert "warm_loc.py changed" in _messages(instance, changed)
        assert (tmp_path / "changed.txt").read_text().split()[1] == "2"
        again = _wait_ready(instance, workspace, tmp_path)
        assert sorted(tmp_path.glob("probe*.txt"))[-1].read_text().split()[1] == "2", again


@pytest.mark.slow
def test_a_code_location_that_starts_a_thread_on_import_is_never_forked(
    instance: dg.DagsterInstance, location: Path, tmp_path: Path
) -> None:
    """A fork copies only the forking thread: the server refuses, and the launcher stops asking."""
    path = location / "warm_loc.py"
    path.write_text(path.read_text() + "\nimport threading\n\nthreading.Thread(target=time.sleep, "
                    "args=(600,), name='poller', daemon=True).start()\n")
    target = ModuleTarget(module_name="warm_loc", attribute=None, working_directory=str(location),
                          location_name="warm_loc")
    with WorkspaceProcessContext(instance, target) as context:
        workspace = context.create_request_context()
        said: list[str] = []
        for attempt in range(60):
            run_id = _launch(instance, workspace, tmp_path / f"run{attempt}.txt")
            run = _wait(instance, run_id)
            assert run.status == dg.DagsterRunStatus.SUCCESS and RUN_PROCESS_TAG not in run.tags
            said.append(_messages(instance, run_id))
            if "warm start is off for this code location" in said[-1]:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the launcher kept trying the warm run server")
    refusal = next(m for m in said if "could not start this run" in m)
    assert "importing the code location started threads (poller); forking is unsafe" in refusal
