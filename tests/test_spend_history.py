"""Spend is history: deleting or cancelling never changes what was spent (issue 3/7, item 2).

Before, ``typestrict study delete 5`` (a study that had spent $0.0012) took its spend out of
Usage (the workflow's studies fell from 2,400 to 1,200 µ$) and out of the workspace's usage.
Now a deleted study's spend stays under its id, marked deleted, in Usage, in the workspace's
usage budget and in the API; and over random sequences of create, run, cancel and delete,
usage equals the sum of the cost of every priced call the runs made.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import ConflictError
from typestrict_pipeline.reruns.workspace import store_spend_source
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import Window, plan_folds
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import (
    CandidateSpec,
    ShouldStop,
    WindowOutcome,
    run_study_local,
)
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyRow, StudyState, WindowKind
from typestrict_pipeline.usage import workspace_usage

UTC = dt.UTC
LAYOUT = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 6, 1, tzinfo=UTC),
                    step=dt.timedelta(days=1), n_folds=1, tune_steps=5, eval_steps=5,
                    holdout_steps=5)


def _today() -> dt.date:
    return dt.datetime.now(UTC).date()


def _budget_spend(engine: object, since: dt.date) -> int:
    """The budget's spend from the day the test began to today (UTC): a run that crosses
    midnight creates its studies on either day, and both are counted."""
    return store_spend_source(engine)("ws", since, _today())  # type: ignore[arg-type]


@dataclass
class PricedBackend:
    """Each step is one priced model call, recorded here (the calls' ledger the test trusts);
    ``cancel_after`` cancels the study from inside its run after that many calls."""

    engine: object
    cost: int = 7
    cancel_after: int | None = None
    calls: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_window(self, candidate: CandidateSpec, window: Window, kind: WindowKind, *,
                   seal_at: dt.datetime | None, should_stop: ShouldStop) -> WindowOutcome:
        scores: list[tuple[str, float]] = []
        spent = 0
        for i in range(window.steps):
            if should_stop(spent, i):
                return WindowOutcome(scores, spent, i, cut=True)
            with self.lock:
                self.calls.append(self.cost + candidate.index % 3)
                made = len(self.calls)
            spent += self.cost + candidate.index % 3
            scores.append(((window.start + dt.timedelta(days=i)).isoformat(),
                           0.5 + 0.01 * candidate.index))
            if self.cancel_after is not None and made == self.cancel_after:
                study_id = _study_of(self.engine, candidate)
                repo.cancel_study(self.engine, study_id)  # type: ignore[arg-type]
        return WindowOutcome(scores, spent, window.steps)


def _study_of(engine: object, candidate: CandidateSpec) -> int:
    from typestrict_pipeline.study.tables import CandidateRow

    with session_scope(engine) as s:  # type: ignore[arg-type]
        if candidate.candidate_id == repo.BASELINE_CANDIDATE_ID:
            return int(s.query(StudyRow.id).filter(StudyRow.state == "RUNNING").scalar())
        row = s.get(CandidateRow, candidate.candidate_id)
        assert row is not None
        return row.study_id


def _create(engine: object, workflow: str, n: int = 2) -> int:
    return repo.create_study(engine, workspace="ws", workflow=workflow, workflow_version="v1",  # type: ignore[arg-type]
                             space=SearchSpace(grid={"skill": [0.5 + 0.1 * i for i in range(n)]}),
                             layout=LAYOUT, limits=StudyLimits(n, 10_000),
                             last_backtest=repo.LastBacktest(70, 10))


def _usage_total(engine: object) -> int:
    return workspace_usage(engine, "ws").totals().historical_micro  # type: ignore[arg-type]


def test_deleting_a_study_keeps_its_spend_in_usage_the_budget_and_the_api(sqlite_url: str) -> None:
    since = _today()
    engine = open_store(sqlite_url)
    backend = PricedBackend(engine)
    first = _create(engine, "rain")
    run_study_local(engine, first, backend, max_workers=2)
    second = _create(engine, "rain")
    run_study_local(engine, second, backend, max_workers=2)
    before_total = _usage_total(engine)
    by_workflow = workspace_usage(engine, "ws").by_workflow()["rain"].studies_micro
    budget_before = _budget_spend(engine, since)
    assert before_total == by_workflow == sum(backend.calls) == budget_before
    with session_scope(engine) as s:
        spent = s.get(StudyRow, second).spend_micro  # type: ignore[union-attr]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["study", "delete", str(second), "--store-url", sqlite_url]) == 0
    assert _usage_total(engine) == before_total
    assert workspace_usage(engine, "ws").by_workflow()["rain"].studies_micro == by_workflow
    assert _budget_spend(engine, since) == budget_before
    gone = next(s for s in workspace_usage(engine, "ws").studies if s.study_id == second)
    assert gone.deleted and gone.state == "deleted" and gone.spend_micro == spent
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["usage", "ws", "--store-url", sqlite_url]) == 0
    line = next(x for x in out.getvalue().splitlines() if x.lstrip("| ").startswith(f"{second} "))
    assert "deleted" in line
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["usage", "ws", "--json", "--store-url", sqlite_url]) == 0
    data = json.loads(out.getvalue())
    assert data["total"]["studies_micro"] == before_total
    assert [s["deleted"] for s in data["studies"] if s["study_id"] == second] == [True]
    engine.dispose()


OPS = st.lists(st.tuples(st.sampled_from(["create", "run", "cancel", "run_cancelled_midway",
                                           "delete"]),
                         st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=6)


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS)
def test_usage_is_the_sum_of_every_call_whatever_is_cancelled_or_deleted(
    tmp_path_factory: object, ops: list[tuple[str, int, int]]
) -> None:
    since = _today()
    folder: Path = tmp_path_factory.mktemp("spend")  # type: ignore[attr-defined]
    engine = open_store(f"sqlite:///{folder / 'store.db'}")
    backend = PricedBackend(engine)
    studies: list[int] = []
    for op, which, n in ops:
        if op == "create":
            with contextlib.suppress(ConflictError):  # one study at a time per workflow
                studies.append(_create(engine, f"wf{which}", n))
        elif studies:
            sid = studies[which % len(studies)]
            with session_scope(engine) as s:
                row = s.get(StudyRow, sid)
                state = None if row is None else StudyState(row.state)
            if op in ("run", "run_cancelled_midway") and state is StudyState.PENDING:
                backend.cancel_after = (len(backend.calls) + 3 * n) if op != "run" else None
                run_study_local(engine, sid, backend, max_workers=2)
                backend.cancel_after = None
            elif op == "cancel" and state is not None:
                repo.cancel_study(engine, sid)
            elif op == "delete" and state is not None and state not in (
                    StudyState.PENDING, StudyState.RUNNING):
                repo.delete_study(engine, sid)
        assert _usage_total(engine) == sum(backend.calls)
        assert _budget_spend(engine, since) == sum(backend.calls)
    engine.dispose()
