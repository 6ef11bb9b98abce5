"""The studies area's tables (schema: migrations ``studies_0001`` to ``studies_0007``).

* ``study_studies``: one row per study: what it searches, its limits, its layout, its state,
  what it has spent and reserved, its winner and holdout score.
* ``study_candidates``: one row per planned candidate (including discarded ones, with why).
* ``study_runs``: one row per (study, candidate, fold, window) backtest; the unique key is what
  makes re-execution idempotent. Per-step scores are stored with the run.
* ``study_locks``: at most one row per (workspace, workflow): the study in flight. The primary
  key is what refuses a second study, enforced by the database.
* ``study_deleted``: one row per deleted study with what it spent (spend is history: Usage and
  the workspace's usage budget keep counting it, under its id, marked deleted).

Money columns are integer micro-USD. ``NULL`` cost columns mean "created before cost tracking"
(migration ``studies_0002`` leaves older rows ``NULL``) and are shown as no cost, never $0.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from typestrict_pipeline.store import Base, UTCDateTime, utcnow


class StudyState(enum.StrEnum):
    """Where a study is in its life (``docs/lifecycle.md``, "Studies").

    Attributes:
        PENDING: created, lock taken, no run started yet; its creating process holds its lease.
        RUNNING: its run is executing; the process driving it holds its lease.
        FINISHED: every planned run ran; a winner and (normally) a holdout score exist.
        BUDGET_REACHED: a limit stopped it; what ran is kept and ranked (``stop_limit`` says which).
        CANCELLED: cancelled by a person; what ran is kept and ranked.
        FAILED: its run failed; the workflow's lock is released; re-executing the run resumes it
            (finished work is not re-run, nothing is charged twice).
        INTERRUPTED: the process driving it stopped or died (found by its lease: Ctrl-C, SIGTERM,
            ``kill -9``, a reboot); ``error`` says when and why; the lock and its reservations are
            released; re-executing the run resumes it.
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    BUDGET_REACHED = "BUDGET_REACHED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"

    @property
    def is_terminal(self) -> bool:
        """An end no resume leaves (FAILED and INTERRUPTED rest too, but may be resumed)."""
        return self in (StudyState.FINISHED, StudyState.BUDGET_REACHED, StudyState.CANCELLED)

    @property
    def in_flight(self) -> bool:
        """Held by a process (which may have died: the reaper checks its lease)."""
        return self in (StudyState.PENDING, StudyState.RUNNING)

    @property
    def label(self) -> str:
        """How the state reads on the leaderboard (e.g. ``Budget reached``)."""
        return self.value.replace("_", " ").capitalize()


def state_text(state: str) -> str:
    """A study's state as every surface writes it for people (the leaderboard's ``State``, the
    console's state line and lists, ``typestrict usage``): :attr:`StudyState.label`; a state
    that is no study state (a deleted study's ``deleted``) as it is.

    >>> state_text("BUDGET_REACHED"), state_text("FINISHED"), state_text("deleted")
    ('Budget reached', 'Finished', 'deleted')
    """
    try:
        return StudyState(state).label
    except ValueError:
        return state


class CandidateState(enum.StrEnum):
    """A candidate's state: ``PLANNED`` → ``DONE``; or ``DISCARDED`` (with a reason)."""

    PLANNED = "PLANNED"
    DONE = "DONE"
    PARTIAL = "PARTIAL"
    DISCARDED = "DISCARDED"


class WindowKind(enum.StrEnum):
    """Which window of a fold a run covers."""

    TUNE = "TUNE"
    EVAL = "EVAL"
    HOLDOUT = "HOLDOUT"


class RunState(enum.StrEnum):
    """A window run: ``RESERVED`` (cost reserved, running) → ``DONE`` / ``CUT`` / ``FAILED``."""

    RESERVED = "RESERVED"
    DONE = "DONE"
    CUT = "CUT"
    FAILED = "FAILED"


class StudyRow(Base):
    __tablename__ = "study_studies"
    # Ids are never reused after a delete (a schedule must see its deleted study as deleted).
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workspace: Mapped[str] = mapped_column(String(128), index=True)
    workflow: Mapped[str] = mapped_column(String(128), index=True)
    workflow_version: Mapped[str] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    state: Mapped[str] = mapped_column(String(20))
    stop_limit: Mapped[str | None] = mapped_column(String(32), nullable=True)
    space_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    layout_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    config_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    horizon_steps: Mapped[int] = mapped_column(Integer)
    holdout_start: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    holdout_end: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    max_candidates: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_total_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    candidates_planned: Mapped[int] = mapped_column(Integer, default=0)
    steps_used: Mapped[int] = mapped_column(Integer, default=0)
    steps_reserved: Mapped[int] = mapped_column(Integer, default=0)
    winner_candidate_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    holdout_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    holdout_se: Mapped[float | None] = mapped_column(Float, nullable=True)
    holdout_missing_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    dagster_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # studies_0002: cost tracking. NULL spend = a study created before cost tracking existed.
    cost_tracked: Mapped[bool] = mapped_column(Boolean, default=True)
    spend_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    reserved_micro: Mapped[int] = mapped_column(BigInteger, default=0)
    budget_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    estimate_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cost_per_step_num: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cost_per_step_den: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # studies_0004: "Min unseen steps for a re-run" (NULL: never set; studies before 0004).
    min_unseen_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # studies_0005: the baseline on the same holdout slice (NULL: not scored / older studies).
    holdout_baseline: Mapped[float | None] = mapped_column(Float, nullable=True)
    holdout_diff_se: Mapped[float | None] = mapped_column(Float, nullable=True)
    holdout_baseline_missing_reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class CandidateRow(Base):
    __tablename__ = "study_candidates"
    __table_args__ = (UniqueConstraint("study_id", "idx", name="uq_study_candidates_study_idx"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[int] = mapped_column(Integer, index=True)
    idx: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(32))
    label: Mapped[str] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(64))
    params_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    prompts_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    discard_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    cost_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class RunRow(Base):
    __tablename__ = "study_runs"
    __table_args__ = (
        UniqueConstraint("study_id", "candidate_id", "fold", "window", name="uq_study_runs_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[int] = mapped_column(Integer, index=True)
    candidate_id: Mapped[int] = mapped_column(Integer)
    fold: Mapped[int] = mapped_column(Integer)
    window: Mapped[str] = mapped_column(String(8))
    state: Mapped[str] = mapped_column(String(10))
    attempt: Mapped[str] = mapped_column(String(64))
    steps_planned: Mapped[int] = mapped_column(Integer)
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    scores_json: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # studies_0002
    reserved_micro: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class LockRow(Base):
    __tablename__ = "study_locks"

    workspace: Mapped[str] = mapped_column(String(128), primary_key=True)
    workflow: Mapped[str] = mapped_column(String(128), primary_key=True)
    study_id: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class DeletedStudyRow(Base):
    """A deleted study's spend, kept when its study, candidates and runs are deleted."""

    __tablename__ = "study_deleted"

    study_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    workspace: Mapped[str] = mapped_column(String(128), index=True)
    workflow: Mapped[str] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    state: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    deleted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    cost_tracked: Mapped[bool] = mapped_column(Boolean)
    spend_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    budget_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WorkflowParamsRow(Base):
    """A workflow's configuration in a workspace as set by promoting a parameters-only winner."""

    __tablename__ = "study_workflow_params"

    workspace: Mapped[str] = mapped_column(String(128), primary_key=True)
    workflow: Mapped[str] = mapped_column(String(128), primary_key=True)
    params_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    study_id: Mapped[int] = mapped_column(Integer)
    applied_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
