"""Planted canaries: workflows that try to read the future. For the leak tests only.

They are never registered in the code location (so never run live). Each must be stopped with a
:class:`~typestrict_pipeline.errors.LookAheadError` (or, for the one that hides the future in a
module-level copy of the data, caught by the truncation and poisoning tests).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from typestrict_pipeline.backtest.pit import PointInTimeTable
from typestrict_pipeline.backtest.workflow import (
    DecisionContext,
    OutcomeContext,
    ScoreContext,
    Workflow,
)

__all__ = ["CANARIES", "PEEKING_CANARY", "make_smuggling_canary"]

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


def make_smuggling_canary(full: PointInTimeTable) -> Workflow:
    """A canary that closes over the whole table (a global the data layer cannot see).

    Python cannot stop a function from reading a global; the truncation-invariance and
    future-poisoning tests catch it (its decisions change when the future is cut or poisoned),
    which is what they are for.
    """
    known = full.known_times
    values = full.view(full.last_known).column("precipitation")

    def decide(ctx: DecisionContext) -> Any:
        import numpy as np

        from typestrict_pipeline.backtest.pit import to_datetime64

        i = int(np.searchsorted(known, to_datetime64(ctx.t + _DAY), side="right")) - 1
        return bool(values[i] > 0)

    return _canary("canary_smuggler", decide)
