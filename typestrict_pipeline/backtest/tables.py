"""The backtests area's tables (schema: migration ``backtests_0001``).

* ``backtest_runs``: one row per backtest: its configuration, status and run card. ``mode`` is
  always ``HISTORICAL`` (a check constraint).
* ``backtest_steps``: one row per step that ran: decision, outcome, score, cost, status, error;
  ``mode`` always ``HISTORICAL``; a score exists exactly when the status is ``ok``.
* ``backtest_calls``: one row per metered call (model, tool, judge; every retry), with its mode
  (``HISTORICAL`` or ``LIVE``), tokens and micro-USD; usage is aggregated from it.
* ``backtest_live_decisions``: live decisions only: ``mode`` is always ``LIVE`` (a check
  constraint), so no historical record can be read back as live.
* ``backtest_workflow_versions``: the versions that ran (parameters and prompts).
* ``backtest_active_versions``: at most one active version per (workspace, workflow): the primary
  key enforces it.

Money columns are integer micro-USD. Times are aware UTC (``UTCDateTime``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from typestrict_pipeline.store import Base, UTCDateTime, utcnow

__all__ = [
    "ActiveVersionRow",
    "BacktestRow",
    "CallRow",
    "LiveDecisionRow",
    "StepRow",
    "WorkflowVersionRow",
]


class BacktestRow(Base):
    """One backtest."""

    __tablename__ = "backtest_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace: Mapped[str] = mapped_column(String(128), index=True)
    workflow: Mapped[str] = mapped_column(String(128))
    version_id: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    start_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    end_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    step_seconds: Mapped[float] = mapped_column(Float)
    dataset: Mapped[str] = mapped_column(String(256))
    steps_planned: Mapped[int] = mapped_column(Integer)
    steps_run: Mapped[int] = mapped_column(Integer, default=0)
    steps_ok: Mapped[int] = mapped_column(Integer, default=0)
    steps_unscored: Mapped[int] = mapped_column(Integer, default=0)
    steps_failed: Mapped[int] = mapped_column(Integer, default=0)
    mean_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost_micro_usd: Mapped[int] = mapped_column(BigInteger, default=0)
    params_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    prompts_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    prices_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    card_json: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    dagster_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class StepRow(Base):
    """One step of a backtest."""

    __tablename__ = "backtest_steps"

    backtest_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    step_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    t: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    mode: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    decision_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    outcome_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost_micro_usd: Mapped[int] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class CallRow(Base):
    """One metered call (model, tool or judge attempt)."""

    __tablename__ = "backtest_calls"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workspace: Mapped[str] = mapped_column(String(128))
    workflow: Mapped[str] = mapped_column(String(128))
    version_id: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16))
    run_kind: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[str] = mapped_column(String(32))
    step_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    input_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    cost_micro_usd: Mapped[int] = mapped_column(BigInteger)
    latency_s: Mapped[float] = mapped_column(Float)
    attempt: Mapped[int] = mapped_column(Integer)
    ok: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    day: Mapped[str] = mapped_column(String(10))


class LiveDecisionRow(Base):
    """One live decision."""

    __tablename__ = "backtest_live_decisions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace: Mapped[str] = mapped_column(String(128))
    workflow: Mapped[str] = mapped_column(String(128))
    version_id: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16))
    as_of: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(16))
    decision_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    cost_micro_usd: Mapped[int] = mapped_column(BigInteger)
    params_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    dagster_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WorkflowVersionRow(Base):
    """A workflow version that ran somewhere (its parameters and prompts)."""

    __tablename__ = "backtest_workflow_versions"

    workflow: Mapped[str] = mapped_column(String(128), primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    params_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    prompts_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ActiveVersionRow(Base):
    """The active (live) version of a workflow in a workspace."""

    __tablename__ = "backtest_active_versions"

    workspace: Mapped[str] = mapped_column(String(128), primary_key=True)
    workflow: Mapped[str] = mapped_column(String(128), primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64))
    activated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
