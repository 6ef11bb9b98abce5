"""The reruns area's tables: schedules, their ticks, lineages, workspaces, notifications.

Schema changes are Alembic migrations ``reruns_0001_*`` (branch ``reruns``). No foreign key leaves
this area: study, workflow and workspace ids are plain strings.
"""

from __future__ import annotations

import datetime as dt
import enum

from sqlalchemy import (
    BigInteger,
    Boolean,
    Enum,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.store import Base, UTCDateTime, utcnow


class ScheduleState(enum.StrEnum):
    """A re-run schedule's state."""

    ENABLED = "ENABLED"
    CANCELLED = "CANCELLED"  # by a person
    OFF = "OFF"  # turned itself off (the root study was deleted)


class TickOutcome(enum.StrEnum):
    """What one evaluation of a schedule did."""

    FIRED = "FIRED"
    SKIPPED = "SKIPPED"


class LineageState(enum.StrEnum):
    """A lineage entry's state (the root is FINISHED from the start)."""

    PENDING = "PENDING"  # claimed by a tick, its run not started yet
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class OutboxState(enum.StrEnum):
    """A notification's delivery state."""

    PENDING = "PENDING"
    SENT = "SENT"
    DEAD = "DEAD"  # gave up after the maximum number of attempts (kept, visible, re-queueable)


def _enum(cls: type[enum.Enum]) -> Enum:
    return Enum(cls, native_enum=False, length=32, validate_strings=True, create_constraint=False)


class StudyRerunSetting(Base):
    """A study's "Min unseen steps for a re-run", set when the study is created."""

    __tablename__ = "rerun_study_settings"

    study_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    min_unseen_steps: Mapped[int] = mapped_column(Integer)
    set_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RerunSchedule(Base):
    """A schedule that re-runs a finished study as data arrive."""

    __tablename__ = "rerun_schedules"
    __table_args__ = (
        # One enabled schedule per lineage, enforced by the database (partial unique index).
        Index(
            "uq_rerun_schedules_enabled_lineage",
            "lineage_root_id",
            unique=True,
            sqlite_where=text("state = 'ENABLED'"),
            postgresql_where=text("state = 'ENABLED'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workspace_id: Mapped[str] = mapped_column(String(64), index=True)
    workflow_id: Mapped[str] = mapped_column(String(128))
    root_study_id: Mapped[str] = mapped_column(String(64))
    lineage_root_id: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(255))
    cadence_seconds: Mapped[int] = mapped_column(Integer)
    min_unseen_steps: Mapped[int] = mapped_column(Integer)
    budget_micro_usd: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[ScheduleState] = mapped_column(_enum(ScheduleState))
    enabled_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    cancelled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    cancelled_by: Mapped[str | None] = mapped_column(String(255), nullable=True)
    off_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_slot: Mapped[int] = mapped_column(Integer, default=-1)
    last_tick_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_outcome: Mapped[TickOutcome | None] = mapped_column(_enum(TickOutcome), nullable=True)
    last_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_run_key: Mapped[str | None] = mapped_column(String(200), nullable=True)


class RerunTick(Base):
    """One evaluation of one schedule (the history ``typestrict schedule status`` shows)."""

    __tablename__ = "rerun_ticks"
    __table_args__ = (Index("ix_rerun_ticks_schedule_at", "schedule_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule_id: Mapped[int] = mapped_column(Integer)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    source: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[TickOutcome] = mapped_column(_enum(TickOutcome))
    kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    message: Mapped[str] = mapped_column(Text)
    run_key: Mapped[str | None] = mapped_column(String(200), nullable=True)


class LineageRow(Base):
    """One study of a lineage: the root (seq 0) or a re-run (seq ≥ 1)."""

    __tablename__ = "rerun_lineage"
    __table_args__ = (
        UniqueConstraint("lineage_root_id", "seq", name="uq_rerun_lineage_root_seq"),
        UniqueConstraint("run_key", name="uq_rerun_lineage_run_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lineage_root_id: Mapped[str] = mapped_column(String(64), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    schedule_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    study_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    parent_study_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    run_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    state: Mapped[LineageState] = mapped_column(_enum(LineageState))
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)
    learn_end: Mapped[int | None] = mapped_column(Integer, nullable=True)
    holdout_start: Mapped[int] = mapped_column(Integer)
    holdout_end: Mapped[int] = mapped_column(Integer)
    unseen_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    window_label: Mapped[str] = mapped_column(String(100))
    winner: Mapped[str | None] = mapped_column(String(255), nullable=True)
    holdout_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    holdout_se: Mapped[float | None] = mapped_column(Float, nullable=True)
    winner_changed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Workspace(Base):
    """A workspace's subscription state and usage budget (per calendar month, UTC)."""

    __tablename__ = "workspace_states"

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    subscription: Mapped[SubscriptionState] = mapped_column(_enum(SubscriptionState))
    usage_budget_micro_usd: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class NotificationSetting(Base):
    """A person's choice for one kind of notification, for one workspace's schedules or, with
    ``workspace_id`` ``""``, every workspace's (the operator's, from the CLI); absent: on."""

    __tablename__ = "notification_settings"

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True, default="")
    user_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64), primary_key=True)
    enabled: Mapped[bool] = mapped_column(Boolean)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class OutboxMessage(Base):
    """A notification waiting for (or done with) delivery; the unique key makes it once-only."""

    __tablename__ = "notification_outbox"
    __table_args__ = (
        UniqueConstraint("dedupe_key", name="uq_notification_outbox_dedupe_key"),
        Index("ix_notification_outbox_due", "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dedupe_key: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(64))
    recipient: Mapped[str] = mapped_column(String(255))
    subject: Mapped[str] = mapped_column(String(255))
    body: Mapped[str] = mapped_column(Text)
    state: Mapped[OutboxState] = mapped_column(_enum(OutboxState))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    claimed_until: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    sent_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class DataEndRow(Base):
    """Per workspace and workflow: decision steps before ``data_end`` have a known outcome."""

    __tablename__ = "rerun_data_ends"

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    data_end: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
