"""Leak tests, run for every registered workflow, plus the planted canaries that must be stopped.

A workflow added to ``default_registry()`` is picked up here automatically (it must have a
fixture to be registered at all).
"""

import pytest

from typestrict_pipeline.backtest.leaks import check_leaks
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
