"""Backtests: replay a decision workflow over history, step by step, seeing only what was knowable.

Public API (stable; studies build on it):

* :mod:`.pit`: :class:`PointInTimeTable`, :class:`PointInTimeView` (bitemporal data, views at t);
* :mod:`.workflow`: :class:`Workflow`, :class:`Param`, the contexts, :class:`WorkflowRegistry`;
* :mod:`.metering`: :class:`RunMode`, :class:`PriceTable`, :class:`ModelPrice`, metered clients;
* :mod:`.engine`: :func:`run_backtest`, :func:`run_live`, :class:`StepRecord`, :class:`RunCard`;
* :mod:`.store`: persisting backtests, steps, run cards, model calls and live decisions; usage.

See ``docs/method/backtests.md``.
"""

from typestrict_pipeline.backtest.engine import (
    BacktestResult,
    BacktestStatus,
    LiveDecision,
    OnStepError,
    RunCard,
    ScoreBucket,
    StepRecord,
    StepStatus,
    parse_step,
    plan_steps,
    run_backtest,
    run_live,
)
from typestrict_pipeline.backtest.metering import (
    CallKind,
    CallRecord,
    Meter,
    MeteredModel,
    MeteredTool,
    ModelPrice,
    PriceTable,
    RunMode,
    format_usd,
)
from typestrict_pipeline.backtest.pit import PointInTimeTable, PointInTimeView
from typestrict_pipeline.backtest.workflow import (
    DecisionContext,
    OutcomeContext,
    Param,
    ScoreContext,
    Workflow,
    WorkflowFixture,
    WorkflowRegistry,
)

__all__ = [
    "BacktestResult",
    "BacktestStatus",
    "CallKind",
    "CallRecord",
    "DecisionContext",
    "LiveDecision",
    "Meter",
    "MeteredModel",
    "MeteredTool",
    "ModelPrice",
    "OnStepError",
    "OutcomeContext",
    "Param",
    "PointInTimeTable",
    "PointInTimeView",
    "PriceTable",
    "RunCard",
    "RunMode",
    "ScoreBucket",
    "ScoreContext",
    "StepRecord",
    "StepStatus",
    "Workflow",
    "WorkflowFixture",
    "WorkflowRegistry",
    "format_usd",
    "parse_step",
    "plan_steps",
    "run_backtest",
    "run_live",
]
