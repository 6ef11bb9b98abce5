"""Planted canaries: workflows that try to read the future. For the leak tests only.

They are never registered in the code location (so never run live). The peeking ones must be
stopped with a :class:`~typestrict_pipeline.errors.LookAheadError`; the caching one, whose every
view is clean, must be caught by the truncation and poisoning tests.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from typestrict_pipeline.backtest.workflow import (
    DecisionContext,
    OutcomeContext,
    ScoreContext,
    Workflow,
)

__all__ = ["CANARIES", "PEEKING_CANARY", "make_caching_canary"]

_DAY = dt.timedelta(days=1)


def _peek_decide(ctx: DecisionContext) -> Any:
    """Reads tomorrow's precipitation: the row about ``t`` is only known at ``t + 1 day``."""
    return float(ctx.data["weather"].get("precipitation", ctx.t)) > 0


def _rows_decide(ctx: DecisionContext) -> Any:
    """Asks for the rows known until tomorrow."""
    rows = ctx.data["weather"].rows(until=ctx.t + _DAY)
    return bool(rows["precipitation"][-1] > 0)


def _at_decide(ctx: DecisionContext) -> Any:
    """Asks for a view as of tomorrow."""
    return float(ctx.data["weather"].at(ctx.t + _DAY).last("precipitation")) > 0


def _outcome(ctx: OutcomeContext) -> Any:
    return float(ctx.data["weather"].get("precipitation", ctx.t)) > 0


def _score(decision: Any, happened: Any, ctx: ScoreContext) -> float:
    return 1.0 if decision == happened else 0.0


def _canary(name: str, decide: Any) -> Workflow:
    return Workflow(name=name, decide=decide, outcome=_outcome, score=_score, tables=("weather",),
                    horizon=_DAY, outcome_description="whether the next day had precipitation")


PEEKING_CANARY = _canary("canary_peek", _peek_decide)
CANARIES = (
    PEEKING_CANARY,
    _canary("canary_rows_until_tomorrow", _rows_decide),
    _canary("canary_view_as_of_tomorrow", _at_decide),
)


def make_caching_canary() -> Workflow:
    """A "stateless" canary with a cache that outlives its steps and its runs.

    It remembers the newest row any of its steps has seen and decides from that row, not from
    its own view: a memo that is never reset. Within one run, a concurrent step can see a later
    step's row; across runs, a later run starts from the previous run's last row. The data layer
    cannot see this (each view is clean); the truncation and poisoning tests catch it.
    """
    newest: dict[str, Any] = {}

    def decide(ctx: DecisionContext) -> Any:
        view = ctx.data["weather"]
        known = view.last("known_time")
        if "known" not in newest or known > newest["known"]:
            newest["known"] = known
            newest["rain"] = bool(view.last("precipitation") > 0)
        return newest["rain"]

    return _canary("canary_cache", decide)
