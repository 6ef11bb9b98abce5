"""Leak tests, run for every registered workflow, plus the planted canaries that must be stopped.

A workflow added to ``default_registry()`` is picked up here automatically (it must have a
fixture to be registered at all).
"""

import datetime as dt
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.backtest.engine import replay_decisions
from typestrict_pipeline.backtest.leaks import check_leaks
from typestrict_pipeline.backtest.pit import PointInTimeTable
from typestrict_pipeline.backtest.workflow import Workflow
from typestrict_pipeline.backtest.workflows import default_registry
from typestrict_pipeline.backtest.workflows.canary import CANARIES, make_caching_canary
from typestrict_pipeline.backtest.workflows.weather import WEATHER
from typestrict_pipeline.errors import LookAheadError

REGISTERED = list(default_registry())


def test_the_registry_is_not_empty_and_canaries_are_not_registered() -> None:
    names = {wf.name for wf in REGISTERED}
    assert "seattle_rain" in names
    assert not names & {c.name for c in CANARIES} and "canary_cache" not in names


@pytest.mark.parametrize("workflow", REGISTERED, ids=lambda wf: f"{wf.name}@{wf.version_id}")
def test_registered_workflow_has_no_look_ahead(workflow: Workflow) -> None:
    """Truncation invariance and future poisoning, at three cuts, on the workflow's own fixture."""
    assert workflow.fixture is not None
    with workflow.fixture() as fixture:
        report = check_leaks(workflow, fixture)
    assert report.decisions_compared > 100
    assert report.ok, report.summary()


@pytest.mark.parametrize("canary", CANARIES, ids=lambda wf: wf.name)
def test_planted_canary_reading_the_future_is_stopped(canary: Workflow) -> None:
    assert WEATHER.fixture is not None
    with WEATHER.fixture() as fixture, pytest.raises(
        LookAheadError,
        match=r"table 'weather': expected a read of rows known at or before the step's time "
        r"2012-01-16T00:00:00Z, got a read of .*which was not known yet",
    ):
        check_leaks(canary, fixture)


def test_a_canary_with_a_cache_across_steps_is_caught_by_truncation_and_poisoning() -> None:
    """Every view it gets is clean; its memo is not. The two tests must flag it (they can fail)."""
    assert WEATHER.fixture is not None
    with WEATHER.fixture() as fixture:
        report = check_leaks(make_caching_canary(), fixture)
    assert not report.ok
    assert {f.test for f in report.findings} == {"truncation", "poisoning"}
    assert "depend on the future" in report.summary()


# --- the data layer's guarantee as a property, on irregular data -------------------------------

_T0 = dt.datetime(2022, 1, 1, tzinfo=dt.UTC)
_H = dt.timedelta(hours=1)


def _greedy(ctx: Any) -> Any:
    """Reads the view every way it can: whole column, tail, rows since, latest version per event."""
    view = ctx.data["obs"]
    col = view.column("v")
    rows = view.rows(since=ctx.t - 5 * _H)
    ev = view.column("event_time")
    latest = {}
    for e in ev[-5:]:
        latest[str(e)] = float(view.get("v", e.astype("datetime64[us]").item().replace(tzinfo=dt.UTC)))
    return (len(view), float(col.sum()), view.tail(3, "v").tolist(), len(rows["v"]), latest)


@settings(max_examples=25, deadline=None)
@given(
    # Revisions are rows about the same event known later; two rows about one event known at one
    # time are one fact or refused (PointInTimeTable), so (event, lag) is unique here.
    rows=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30), st.integers(-50, 50)),
                  min_size=1, max_size=80, unique_by=lambda r: (r[0], r[1])),
    cut=st.integers(5, 60),
    block=st.integers(1, 8),
    seed=st.integers(0, 1000),
)
def test_decisions_never_depend_on_rows_known_after_the_cut(
    rows: list[tuple[int, int, int]], cut: int, block: int, seed: int
) -> None:
    """Random late and revised rows: cutting or poisoning the future never changes a decision."""
    events = [_T0 + e * _H for e, _lag, _v in rows]
    known = [_T0 + (e + lag) * _H for e, lag, _v in rows]
    table = PointInTimeTable("obs", event_time=events, known_time=known,
                             columns={"v": np.array([float(v) for *_x, v in rows])}, block_rows=block)
    wf = Workflow("greedy", decide=_greedy, outcome=lambda c: None, score=lambda d, o, c: 0.0,
                  tables=("obs",), horizon=_H, outcome_description="none")
    start = max(table.first_known, _T0)
    end = _T0 + cut * _H
    if end < start:
        return
    n = (end - start) // _H
    end = start + n * _H
    full = replay_decisions(wf, data=table, start=start, end=end, step=_H, max_in_flight=4)
    cut_at = start + (n // 2) * _H
    for variant in (table.truncated(cut_at), table.poisoned(cut_at, seed=seed)):
        again = replay_decisions(wf, data=variant, start=start, end=cut_at, step=_H, max_in_flight=1)
        assert [r.decision for r in again] == [r.decision for r in full[: len(again)]]
