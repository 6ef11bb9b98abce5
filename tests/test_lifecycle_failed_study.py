"""A study that failed while a slice of its windows was reserved holds nothing once its process
is gone.

Found by terminating a ``typestrict study run``'s PostgreSQL connections while it ran (each
``pg_terminate_backend`` of the study's own database): 4 of 13 runs ended with the study
``FAILED`` ("OperationalError: server closed the connection unexpectedly") and 8 window runs
still ``RESERVED`` (``steps_reserved`` 240): a slice's store write failed after its reservation,
``study_backtests`` marked the study failed, which released its lease at once, and nothing ever
gave the reservation back (the reaper looked at running and cancelled studies only), though
``FAILED`` is documented to hold nothing. Here the same calls the run makes (start, reserve a
slice, fail) are made by a real process, which then exits: while it lives its reservation is
its own; once it is gone the reaper gives it back, and a resume charges each window once.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from pathlib import Path

from sqlalchemy import select

from typestrict_pipeline.lifecycle.leases import LeaseKind, holder
from typestrict_pipeline.lifecycle.reaper import reap
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.backends import backend_from_config
from typestrict_pipeline.study.limits import usd_to_micro
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.runner import run_study_local
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunRow, RunState, StudyRow, StudyState

ROOT = Path(__file__).resolve().parents[1]

_FAILING_CHILD = textwrap.dedent("""
    import sys
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.runner import plan_runs
    url, sid = sys.argv[1], int(sys.argv[2])
    engine = open_store(url)
    repo.start_study(engine, sid)
    keys = plan_runs(engine, sid)[:4]
    held = repo.reserve_slice(engine, sid, [(k.candidate_id, k.fold, k.window, k.steps, 7 * k.steps) for k in keys],
                              attempts=[f"a:{k.name}" for k in keys])
    assert not isinstance(held, repo.Refused), held
    # the slice's settlement failed on the store (a dropped connection); study_backtests then:
    repo.mark_failed(engine, sid, "OperationalError: server closed the connection unexpectedly")
    print("failed", flush=True)
    sys.stdin.readline()  # the step's process lives on until the parent lets it end
""")


def _held(engine: object, sid: int) -> tuple[int, int, int]:
    with session_scope(engine) as s:  # type: ignore[arg-type]
        study = s.get(StudyRow, sid)
        assert study is not None and study.state == StudyState.FAILED.value
        reserved = len(s.scalars(select(RunRow.id).where(
            RunRow.study_id == sid, RunRow.state == RunState.RESERVED.value)).all())
        return reserved, study.steps_reserved, study.reserved_micro


def test_a_study_failed_holding_a_slice_gives_it_back_once_its_process_is_gone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    sid = create_study_from_config(engine, StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5, 0.6]}),
        start=dt.datetime(2012, 1, 1, tzinfo=dt.UTC), end=dt.datetime(2012, 12, 1, tzinfo=dt.UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=2, max_total_steps=100_000, budget_micro=usd_to_micro("1"),
        backend={"backend": "synthetic", "cost_per_step": 7}), last_backtest=LastBacktest(70, 10))
    proc = subprocess.Popen([sys.executable, "-c", _FAILING_CHILD, url, str(sid)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline().decode()
        assert line.strip() == "failed", line + proc.stdout.read().decode()[-2000:]
        reserved, steps, micro = _held(engine, sid)
        assert reserved == 4 and steps > 0 and micro > 0
        reap(engine)  # its process lives: what it reserved is its own
        assert _held(engine, sid) == (reserved, steps, micro)
        proc.stdin.close()  # the step's process ends (the run failed)
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    reap(engine)  # `typestrict study list`, a new study's creation, lifecycle_job
    assert _held(engine, sid) == (0, 0, 0)
    assert holder(engine, LeaseKind.STUDY, str(sid)) is None
    out = run_study_local(engine, sid, backend_from_config({"backend": "synthetic", "cost_per_step": 7}))
    assert out.state is StudyState.FINISHED
    with session_scope(engine) as s:
        study = s.get(StudyRow, sid)
        runs = list(s.scalars(select(RunRow).where(RunRow.study_id == sid)))
        assert study is not None and study.reserved_micro == 0 and study.steps_reserved == 0
        assert study.spend_micro == sum(r.cost_micro or 0 for r in runs)
        assert not [r for r in runs if r.state == RunState.RESERVED.value]
    engine.dispose()
