"""Study wall time: 64 candidates × 4 folds over a year of daily steps, a trivial workflow.

Run: ``.venv/bin/python -m bench.bench_study_walltime``

The workflow is trivial (no model: ``decide`` reads the last known value), so nearly all the
time that is not the engine's own step loop is orchestration: planning, the database
reservations and settlements, Dagster's steps and events. Layout: 2014-01-01 → 2015-01-01,
4 folds × (60 tune + 45 eval days), 1-day gap and embargo, a 60-day holdout: 64 × 420 + 60 =
26,940 steps in 513 window runs. Measured in the same run:

* the straightforward alternative: the same 512 search windows run with the engine in a plain
  loop (no store, no Dagster) — the floor;
* the study on Dagster in process, chunked (the default: 2 chunk steps), as the reference run
  before each alternative (interleaved, ratios within a pair: the machine is shared), after one
  in-process run that is not counted (imports, the instance's first tables);
* what a UI launch gets: the job's default executor (the warm multiprocess executor: each step
  forked from the run process, 2 at once, 2 chunks), the run launched by the product's run
  launcher on the product's instance (``typestrict_pipeline.instance``), so its run process is a
  fork of the warm run server, as every launch after a code location's first is; timed from the
  launch to the run's end (the run queue's wait, 0.1-0.4 s, is ``bench_verdict_daemon``'s);
* the alternatives, each run by ``execute_job`` in this process: multiprocess with forkserver
  preloading the code location (the job's default before the warm executor, 2 at once, 2
  chunks); multiprocess with spawn (2 at once, 2 chunks); what a UI launch got before study_job
  had an executor config (Dagster's default: spawn, one process per core, one step per
  candidate: bounded to the first 8 candidates unless ``TYPESTRICT_BENCH_FULL=1``); in process
  with one step per candidate (the old default).

Orchestration share = 1 − work / (wall × workers), with work = Σ over window runs of the time
between its reservation and its settlement (the engine's run plus the settlement write).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DAY = dt.timedelta(days=1)
UTC = dt.UTC
START = dt.datetime(2014, 1, 1, tzinfo=UTC)
END = dt.datetime(2015, 1, 1, tzinfo=UTC)
N_CANDIDATES = 64
ROOT = Path(__file__).resolve().parent.parent


def _decide(ctx: Any) -> Any:
    return float(ctx.data["x"].last("v")) > float(ctx.params["threshold"])


def _outcome(ctx: Any) -> Any:
    return float(ctx.data["x"].get("v", ctx.t)) > 0.0


def _score(decision: Any, happened: Any, ctx: Any) -> float:
    return 1.0 if decision == happened else 0.0


def trivial_setup() -> Any:
    """The trivial workflow on 500 days of synthetic daily data (seeded)."""
    from typestrict_pipeline.backtest.pit import PointInTimeTable
    from typestrict_pipeline.backtest.workflow import Param, Workflow
    from typestrict_pipeline.study.backends import WorkflowSetup

    n = 500
    t0 = START - 60 * DAY
    rng = np.random.default_rng(20141)
    table = PointInTimeTable("x", event_time=[t0 + i * DAY for i in range(n)],
                             known_time=[t0 + (i + 1) * DAY for i in range(n)],
                             columns={"v": rng.standard_normal(n).tolist()})
    wf = Workflow("bench_trivial", decide=_decide, outcome=_outcome, score=_score, tables=("x",),
                  horizon=DAY, outcome_description="whether the next value is positive",
                  params={"threshold": Param(0.0, "say positive above this")})
    return WorkflowSetup(workflow=wf, data={"x": table})


def _config(backend: dict[str, Any], n_candidates: int = N_CANDIDATES) -> Any:
    from typestrict_pipeline.study.service import StudyConfig
    from typestrict_pipeline.study.space import SearchSpace

    space = SearchSpace(grid={"threshold": [round(-1.0 + 2.0 * i / (N_CANDIDATES - 1), 6)
                                            for i in range(n_candidates)]})
    return StudyConfig(workspace="bench", workflow="bench_trivial", workflow_version="v",
                       space=space, start=START, end=END, step=DAY, n_folds=4, tune_steps=60,
                       eval_steps=45, holdout_steps=60, max_candidates=n_candidates,
                       max_total_steps=10**7, backend=backend)


BACKEND = {"backend": "engine", "setup": "bench.bench_study_walltime:trivial_setup",
           "max_in_flight": 1}


def _work_seconds(engine: Any, study_id: int) -> float:
    from sqlalchemy import select

    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study.tables import RunRow

    with session_scope(engine) as s:
        rows = s.execute(select(RunRow).where(RunRow.study_id == study_id)).scalars().all()
        return sum((r.finished_at - r.started_at).total_seconds() for r in rows if r.finished_at)


def plain_loop() -> tuple[float, int]:
    """The floor: every search window through the engine in a loop, nothing stored."""
    from typestrict_pipeline.backtest.engine import run_backtest

    setup = trivial_setup()
    layout = _config(BACKEND).layout()
    steps = 0
    started = time.perf_counter()
    for i in range(N_CANDIDATES):
        thr = -1.0 + 2.0 * i / (N_CANDIDATES - 1)
        for fold in layout.folds:
            for win in (fold.tune, fold.eval):
                res = run_backtest(setup.workflow, data=setup.data, start=win.start,
                                   end=win.end - DAY, step=DAY, params={"threshold": thr},
                                   max_in_flight=1)
                steps += len(res.steps)
    return time.perf_counter() - started, steps


EXECUTORS: dict[str, dict[str, Any] | None] = {
    "in_process": None,  # execute_in_process: the executor config only sets the chunk count (2)
    "default": None,  # the job's own default (what a UI launch gets): fork, 2 at once
    "forkserver": {"multiprocess": {"max_concurrent": 2, "start_method": {"forkserver": {
        "preload_modules": ["typestrict_pipeline.definitions", "scipy.stats", "scipy.integrate",
                            "matplotlib.figure", "matplotlib.backends.backend_agg"]}}}},
    "spawn": {"multiprocess": {"max_concurrent": 2, "start_method": {"spawn": {}}}},
    # Dagster's default before study_job had one: spawn, one per core (named: the job's own
    # executor now forks when no start method is given)
    "ui_before": {"multiprocess": {"start_method": {"spawn": {}}}},
}


def dagster_study(url: str, executor: str, fanout: str,
                  n_candidates: int = N_CANDIDATES) -> tuple[float, float, int, int]:
    """(wall seconds, work seconds, steps, Dagster steps) of one study through ``study_job``
    (``n_candidates`` of the 64: the bounded rows run the first few only)."""
    import dagster as dg

    from assets.studies import study_run_config
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.repository import get_study
    from typestrict_pipeline.study.service import create_study_from_config

    engine = open_store(url)
    sid = create_study_from_config(engine, _config(BACKEND, n_candidates))
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    config: dict[str, Any] = {**study_run_config(sid, fanout), **quiet}
    if EXECUTORS[executor] is not None:
        config["execution"] = {"config": EXECUTORS[executor]}
    started = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        if executor == "in_process":
            from typestrict_pipeline.definitions import defs

            result: Any = defs.resolve_job_def("study_job").execute_in_process(
                run_config=config, instance=instance)
        else:
            result = dg.execute_job(dg.reconstructable(_bench_job), instance=instance,
                                    run_config=config)
        ok = result.success
        n_steps = len({e.step_key for e in result.all_events
                       if e.step_key and e.step_key.startswith("study_backtests")})
    wall = time.perf_counter() - started
    assert ok, "the study run failed"
    with session_scope(engine) as s:
        steps = get_study(s, sid).steps_used
    work = _work_seconds(engine, sid)
    engine.dispose()
    return wall, work, steps, n_steps


class Launcher:
    """Runs of ``study_job`` launched through the instance's run launcher, as the run queue
    launches them, on the code location ``workspace.yaml`` names (loaded by a code server)."""

    def __init__(self) -> None:
        import dagster as dg
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import ModuleTarget

        self.instance = dg.DagsterInstance.get()
        target = ModuleTarget(module_name="typestrict_pipeline.definitions", attribute=None,
                              working_directory=str(ROOT), location_name="typestrict_pipeline")
        self._context = WorkspaceProcessContext(self.instance, target)

    def close(self) -> None:
        self._context.__exit__(None, None, None)
        self.instance.dispose()

    def launch(self, run_config: dict[str, Any]) -> tuple[float, Any]:
        """(seconds from the launch to the run's end, the finished run)."""
        import dagster as dg

        workspace = self._context.create_request_context()
        remote = workspace.get_code_location("typestrict_pipeline").get_repository(
            "__repository__").get_full_job("study_job")
        run = self.instance.create_run(
            job_name="study_job", run_id=None, run_config=run_config, resolved_op_selection=None,
            step_keys_to_execute=None, status=None, tags=dict(remote.tags), root_run_id=None,
            parent_run_id=None, job_snapshot=remote.job_snapshot, execution_plan_snapshot=None,
            parent_job_snapshot=None, remote_job_origin=remote.get_remote_origin(),
            job_code_origin=remote.get_python_origin(), asset_selection=None,
            asset_check_selection=None, op_selection=None, asset_graph=workspace.asset_graph)
        started = time.time()
        self.instance.launch_run(run.run_id, workspace)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            record = self.instance.get_run_record_by_id(run.run_id)
            if record is not None and record.dagster_run.is_finished:
                assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS, "the run failed"
                return float(record.end_time or time.time()) - started, record.dagster_run
            time.sleep(0.1)  # the wall time is the run's own end_time, not when this look saw it
        raise TimeoutError(f"run {run.run_id} did not finish in 600 s")

    def warm_up(self, url: str) -> int:
        """Launch small studies until one runs in a fork of the warm run server (the code
        location's first run goes the default way while the server loads); how many it took."""
        from resources.launcher import RUN_PROCESS_TAG

        for attempt in range(1, 31):
            _, run = self.launch(self._config(url, 2))
            if RUN_PROCESS_TAG in run.tags:
                return attempt
            time.sleep(0.5)
        raise AssertionError("no run started warm after 30 launches")

    @staticmethod
    def _config(url: str, n_candidates: int) -> dict[str, Any]:
        from assets.studies import study_run_config
        from typestrict_pipeline.store import open_store
        from typestrict_pipeline.study.service import create_study_from_config

        engine = open_store(url)
        sid = create_study_from_config(engine, _config(BACKEND, n_candidates))
        engine.dispose()
        return {**study_run_config(sid), "loggers": {"console": {"config": {"log_level": "ERROR"}}}}

    def study(self, url: str, n_candidates: int = N_CANDIDATES) -> tuple[float, float, int, int]:
        """(wall seconds, work seconds, steps, Dagster steps) of one launched study."""
        from typestrict_pipeline.store import open_store, session_scope
        from typestrict_pipeline.study.repository import get_study

        config = self._config(url, n_candidates)
        sid = int(config["ops"]["study_plan"]["config"]["study_id"])
        wall, run = self.launch(config)
        n_steps = len({e.step_key for e in self.instance.all_logs(run.run_id)
                       if e.step_key and e.step_key.startswith("study_backtests")})
        engine = open_store(url)
        with session_scope(engine) as s:
            steps = get_study(s, sid).steps_used
        work = _work_seconds(engine, sid)
        engine.dispose()
        return wall, work, steps, n_steps


def _bench_job() -> Any:
    from typestrict_pipeline.definitions import defs

    return defs.resolve_job_def("study_job")


# (label, executor, fan-out, worker processes, candidates): each alternative runs right after an
# in-process reference run of the same candidates, and its ratio is to that reference (the
# machine is shared: load drifts). The old UI default (spawn, one fresh interpreter per
# candidate step, ~3 s each) is bounded: it runs the first OLD_UI_CANDIDATES candidates only
# (all their windows, one step each), against an in-process run of the same candidates; the
# full 64 take 2 min on a quiet machine (TYPESTRICT_BENCH_FULL=1 runs them).
OLD_UI_CANDIDATES = N_CANDIDATES if os.environ.get("TYPESTRICT_BENCH_FULL") else 8
ROUNDS = (
    ("job default, launched: warm multiprocess (fork) x2, 2 chunks", "default", "chunk", 2,
     N_CANDIDATES),
    ("multiprocess forkserver x2, 2 chunks (the job default before)", "forkserver", "chunk", 2,
     N_CANDIDATES),
    ("multiprocess spawn x2, 2 chunks", "spawn", "chunk", 2, N_CANDIDATES),
    ("old UI default (spawn, one per core), one step per candidate", "ui_before", "candidate", 2,
     OLD_UI_CANDIDATES),
    ("in process, one step per candidate (the old default)", "in_process", "candidate", 1,
     N_CANDIDATES),
)
NAME = "bench_study_walltime"


def _share(wall: float, work: float, workers: int) -> float:
    return max(0.0, 1.0 - work / (wall * workers))


def _record(label: str, ref: tuple[float, float, int, int], alt: tuple[float, float, int, int],
            workers: int, n_candidates: int, floor: float) -> None:
    from bench.summary import row

    size = f"{n_candidates} x 4 study" + ("" if n_candidates == N_CANDIDATES else
                                        f" (bounded: the first {n_candidates} of 64 candidates)")
    nums = {"ref_wall": ref[0], "ref_work": ref[1], "alt_wall": alt[0], "alt_work": alt[1],
            "plain_loop": floor, "candidates": n_candidates}
    ratio = alt[0] / ref[0]
    target, ok = "", None
    if label.startswith("job default"):
        target, ok = "<= 1.5x in process", ratio <= 1.5
    row(NAME, f"{size}: {label}", f"{alt[0]:.1f} s wall ({alt[3]} steps, orchestration "
        f"{_share(alt[0], alt[1], workers):.0%})",
        alternative=f"in process, 2 chunks {ref[0]:.1f} s", ratio=f"{ratio:.2f}x in process",
        target=target, ok=ok, numbers=nums)


def main() -> None:
    from bench.summary import row
    from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml

    tmp = Path(tempfile.mkdtemp(prefix="bench_study_"))
    home = tmp / "dagster_home"
    os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir()
    write_instance_yaml(home, sqlite_instance_config(home))  # the product's instance
    os.environ["TYPESTRICT_HOME"] = str(tmp)
    url = f"sqlite:///{tmp / 'store.db'}"
    os.environ["TYPESTRICT_STORE_URL"] = url
    launcher: Launcher | None = None
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores)")
        floor, steps = plain_loop()
        print(f"plain engine loop (512 search windows, no store, no Dagster): {floor:.1f} s for "
              f"{steps} steps ({steps / floor:,.0f} steps/s)")
        cold = dagster_study(url, "in_process", "chunk")
        print(f"  in process, first run (not counted: imports, the instance's tables): "
              f"{cold[0]:.1f} s")
        launcher = Launcher()
        print(f"  launched runs until one started warm: {launcher.warm_up(url)}")
        shares: list[float] = []
        for label, executor, fanout, workers, n_cand in ROUNDS:
            ref = dagster_study(url, "in_process", "chunk", n_cand)
            alt = (launcher.study(url, n_cand) if executor == "default"
                   else dagster_study(url, executor, fanout, n_cand))
            if n_cand == N_CANDIDATES:
                shares.append(_share(ref[0], ref[1], 1))
            for name, (wall, work, st, n), w in (("in process, 2 chunks (reference)", ref, 1),
                                                 (label, alt, workers)):
                print(f"  {name:<62}: {wall:6.1f} s wall, {n:3d} steps, {st} steps "
                      f"({st / wall:,.0f}/s), work {work:.1f} s, orchestration "
                      f"{_share(wall, work, w):.0%}, {wall / floor:.1f}x the plain loop")
            print(f"  -> ratio {alt[0] / ref[0]:.2f}x the in-process reference "
                  f"(load {os.getloadavg()[0]:.1f})")
            _record(label, ref, alt, workers, n_cand, floor)
        mid = statistics.median(shares)
        row(NAME, "64 x 4 study in process, 2 chunks: orchestration share (median of the "
            "reference runs)", f"{mid:.0%} (runs: " + ", ".join(f"{x:.0%}" for x in shares) + ")",
            alternative=f"plain engine loop {floor:.1f} s", target="<= 50%", ok=mid <= 0.5,
            numbers={"share_median": mid, "plain_loop": floor})
    finally:
        if launcher is not None:
            launcher.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
