"""Killed runs: workers of a study whose run process is ``kill -9``'d stop by themselves.

The study job runs with its default executor (multiprocess, forkserver: each chunk of windows in
its own worker process). Only the run's own process is killed, not its process group, as a crash
or an OOM kill would: the workers must notice (``parent_gone`` in the core window loop), cut the
window in flight, start no other, and exit; the resumed run then finishes the study with each
window's spend charged once. Every wait is bounded and generous (a shared, busy machine); nothing
asserts a duration.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sqlalchemy import Engine, select

from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.backends import backend_from_config
from typestrict_pipeline.study.limits import usd_to_micro
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.runner import parent_gone, run_study_local
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunRow, RunState, StudyRow, StudyState

ROOT = Path(__file__).resolve().parent.parent
UTC = dt.UTC
WAIT_S = 240.0  # generous bound on every wait (never asserted as a duration)

_HELPER = textwrap.dedent("""
    import os
    import dagster as dg
    from assets.studies import study_job
    from resources.store import StoreResource
    from resources.studies import StudyRunnerResource

    def make_study_job():
        return dg.Definitions(jobs=[study_job], resources={
            "store": StoreResource(url=os.environ["STUDY_TEST_STORE_URL"]),
            "study_runner": StudyRunnerResource(),
        }).resolve_job_def("study_job")
""")

_CHILD = textwrap.dedent("""
    import sys, dagster as dg
    from assets.studies import study_run_config
    import kill_helpers_study_job as helper
    sid = int(sys.argv[1])
    config = study_run_config(sid, chunks=2)  # the default executor: forkserver, 2 at once
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(dg.reconstructable(helper.make_study_job), instance=instance,
                                run_config=config)
        print("RUN", result.run_id, result.success, flush=True)
""")


def _config(n: int, budget: int) -> StudyConfig:
    return StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5 + 0.02 * i for i in range(n)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=n, max_total_steps=100_000, budget_micro=budget,
        backend={"backend": "synthetic", "cost_per_step": 7, "sleep_s": 0.05},
    )


def _rows(engine: Engine) -> list[RunRow]:
    with session_scope(engine) as s:
        rows = list(s.execute(select(RunRow)).scalars())
        s.expunge_all()
    return rows


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_parent_gone_is_false_outside_a_multiprocessing_worker() -> None:
    assert parent_gone() is False  # the CLI and in-process runs never stop on their own


def test_workers_of_a_killed_study_run_stop_and_the_resume_charges_each_window_once(
    pg_url: str, tmp_path: Path
) -> None:
    engine = open_store(pg_url)
    # 2 candidates x 2 folds x (tune, eval) = 8 windows of 15 steps, 0.05 s a step, in 2 chunks
    # of 4 windows (one per worker): about 2 s of work left per worker after its first window.
    sid = create_study_from_config(engine, _config(2, usd_to_micro("1")),
                                   last_backtest=LastBacktest(70, 10))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    (tmp_path / "kill_helpers_study_job.py").write_text(_HELPER)
    env = {**os.environ, "DAGSTER_HOME": str(home), "STUDY_TEST_STORE_URL": pg_url,
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(sid)], env=env, cwd=tmp_path,
                             start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and child.poll() is None:
            if any(r.state == RunState.DONE.value for r in _rows(engine)):
                break
            time.sleep(0.05)
        done_at_kill = {r.id for r in _rows(engine) if r.state == RunState.DONE.value}
        assert done_at_kill and child.poll() is None, child.stdout.read() if child.poll() is not None else ""  # type: ignore[union-attr]
        os.kill(child.pid, signal.SIGKILL)  # the run's process only: its workers live on
        child.wait()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and _group_alive(child.pid):
            time.sleep(0.1)
        assert not _group_alive(child.pid), "the killed run's workers are still running"
    finally:
        if _group_alive(child.pid):
            os.killpg(child.pid, signal.SIGKILL)
    rows = _rows(engine)
    done_after = {r.id for r in rows if r.state == RunState.DONE.value}
    # Each of the 2 workers may finish the window it was in (a race with the kill), no more;
    # without the check they would have run their chunk to its end (4 windows each).
    assert len(done_after - done_at_kill) <= 2 and len(done_after) < 8, (done_at_kill, done_after)
    # Resumed here by the core's runner (the Dagster re-execution path is tested in
    # test_study_dagster.py): every window is idempotent on its key, a cut one is re-run.
    run_study_local(engine, sid, backend_from_config({"backend": "synthetic", "cost_per_step": 7}))
    after = {r.id: r for r in _rows(engine)}
    for rid in done_at_kill:
        assert after[rid].state == RunState.DONE.value  # finished before the kill: kept, not re-run
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == StudyState.FINISHED.value
        assert study.reserved_micro == 0 and study.steps_reserved == 0
        # spend = what each attempt really cost (a cut attempt's steps are real money), once
        assert study.spend_micro == sum(r.cost_micro or 0 for r in after.values())
    assert sum(1 for r in after.values() if r.state == RunState.DONE.value) == 8 + 2
    engine.dispose()

