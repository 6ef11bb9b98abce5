"""reruns: re-run schedules, their ticks, lineages, workspace states, notification settings and outbox.

Revision ID: reruns_0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "reruns_0001"
down_revision = None
branch_labels = ("reruns",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rerun_study_settings",
        sa.Column("study_id", sa.String(64), nullable=False),
        sa.Column("min_unseen_steps", sa.Integer(), nullable=False),
        sa.Column("set_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("study_id", name="pk_rerun_study_settings"),
        sa.CheckConstraint("min_unseen_steps >= 1", name="ck_rerun_study_settings_min_positive"),
    )
    op.create_table(
        "rerun_schedules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workspace_id", sa.String(64), nullable=False),
        sa.Column("workflow_id", sa.String(128), nullable=False),
        sa.Column("root_study_id", sa.String(64), nullable=False),
        sa.Column("lineage_root_id", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("cadence_seconds", sa.Integer(), nullable=False),
        sa.Column("min_unseen_steps", sa.Integer(), nullable=False),
        sa.Column("budget_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("enabled_at", sa.DateTime(), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(), nullable=True),
        sa.Column("cancelled_by", sa.String(255), nullable=True),
        sa.Column("off_reason", sa.Text(), nullable=True),
        sa.Column("last_slot", sa.Integer(), nullable=False),
        sa.Column("last_tick_at", sa.DateTime(), nullable=True),
        sa.Column("last_outcome", sa.String(32), nullable=True),
        sa.Column("last_message", sa.Text(), nullable=True),
        sa.Column("last_run_key", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rerun_schedules"),
        sa.CheckConstraint("cadence_seconds >= 60", name="ck_rerun_schedules_cadence_min"),
        sa.CheckConstraint("min_unseen_steps >= 1", name="ck_rerun_schedules_min_positive"),
        sa.CheckConstraint("budget_micro_usd > 0", name="ck_rerun_schedules_budget_positive"),
    )
    op.create_index("ix_rerun_schedules_workspace_id", "rerun_schedules", ["workspace_id"])
    op.create_index(
        "uq_rerun_schedules_enabled_lineage",
        "rerun_schedules",
        ["lineage_root_id"],
        unique=True,
        sqlite_where=sa.text("state = 'ENABLED'"),
        postgresql_where=sa.text("state = 'ENABLED'"),
    )
    op.create_table(
        "rerun_ticks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("schedule_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("run_key", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rerun_ticks"),
    )
    op.create_index("ix_rerun_ticks_schedule_at", "rerun_ticks", ["schedule_id", "at"])
    op.create_table(
        "rerun_lineage",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("lineage_root_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("schedule_id", sa.Integer(), nullable=True),
        sa.Column("study_id", sa.String(64), nullable=True),
        sa.Column("parent_study_id", sa.String(64), nullable=True),
        sa.Column("run_key", sa.String(200), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("superseded", sa.Boolean(), nullable=False),
        sa.Column("learn_end", sa.Integer(), nullable=True),
        sa.Column("holdout_start", sa.Integer(), nullable=False),
        sa.Column("holdout_end", sa.Integer(), nullable=False),
        sa.Column("unseen_steps", sa.Integer(), nullable=True),
        sa.Column("window_label", sa.String(100), nullable=False),
        sa.Column("winner", sa.String(255), nullable=True),
        sa.Column("holdout_score", sa.Float(), nullable=True),
        sa.Column("baseline_score", sa.Float(), nullable=True),
        sa.Column("holdout_se", sa.Float(), nullable=True),
        sa.Column("winner_changed", sa.Boolean(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rerun_lineage"),
        sa.UniqueConstraint("lineage_root_id", "seq", name="uq_rerun_lineage_root_seq"),
        sa.UniqueConstraint("run_key", name="uq_rerun_lineage_run_key"),
        sa.CheckConstraint("holdout_end >= holdout_start", name="ck_rerun_lineage_window"),
    )
    op.create_index("ix_rerun_lineage_lineage_root_id", "rerun_lineage", ["lineage_root_id"])
    op.create_index("ix_rerun_lineage_study_id", "rerun_lineage", ["study_id"])
    op.create_table(
        "workspace_states",
        sa.Column("workspace_id", sa.String(64), nullable=False),
        sa.Column("subscription", sa.String(32), nullable=False),
        sa.Column("usage_budget_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", name="pk_workspace_states"),
        sa.CheckConstraint("usage_budget_micro_usd >= 0", name="ck_workspace_states_budget_not_negative"),
    )
    op.create_table(
        "notification_settings",
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "kind", name="pk_notification_settings"),
    )
    op.create_table(
        "notification_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dedupe_key", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("recipient", sa.String(255), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notification_outbox"),
        sa.UniqueConstraint("dedupe_key", name="uq_notification_outbox_dedupe_key"),
    )
    op.create_index("ix_notification_outbox_due", "notification_outbox", ["state", "next_attempt_at"])
    op.create_table(
        "rerun_data_ends",
        sa.Column("workspace_id", sa.String(64), nullable=False),
        sa.Column("workflow_id", sa.String(128), nullable=False),
        sa.Column("data_end", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", "workflow_id", name="pk_rerun_data_ends"),
    )


def downgrade() -> None:
    op.drop_table("rerun_data_ends")
    op.drop_table("notification_outbox")
    op.drop_table("notification_settings")
    op.drop_table("workspace_states")
    op.drop_table("rerun_lineage")
    op.drop_table("rerun_ticks")
    op.drop_table("rerun_schedules")
    op.drop_table("rerun_study_settings")
