"""studies: studies, candidates, window runs, the one-study-per-workflow lock (no cost yet).

Revision ID: studies_0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "studies_0001"
down_revision = None
branch_labels = ("studies",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "study_studies",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("workflow_version", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("stop_limit", sa.String(32), nullable=True),
        sa.Column("space_json", sa.JSON(), nullable=False),
        sa.Column("layout_json", sa.JSON(), nullable=False),
        sa.Column("config_json", sa.JSON(), nullable=False),
        sa.Column("horizon_steps", sa.Integer(), nullable=False),
        sa.Column("holdout_start", sa.DateTime(), nullable=False),
        sa.Column("holdout_end", sa.DateTime(), nullable=False),
        sa.Column("max_candidates", sa.Integer(), nullable=True),
        sa.Column("max_total_steps", sa.Integer(), nullable=True),
        sa.Column("candidates_planned", sa.Integer(), nullable=False),
        sa.Column("steps_used", sa.Integer(), nullable=False),
        sa.Column("steps_reserved", sa.Integer(), nullable=False),
        sa.Column("winner_candidate_id", sa.Integer(), nullable=True),
        sa.Column("holdout_score", sa.Float(), nullable=True),
        sa.Column("holdout_se", sa.Float(), nullable=True),
        sa.Column("holdout_missing_reason", sa.Text(), nullable=True),
        sa.Column("dagster_run_id", sa.String(64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_study_studies"),
        sa.CheckConstraint("steps_used >= 0 AND steps_reserved >= 0", name="steps_not_negative"),
    )
    op.create_index("ix_study_studies_workspace", "study_studies", ["workspace"])
    op.create_index("ix_study_studies_workflow", "study_studies", ["workflow"])
    op.create_table(
        "study_candidates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(32), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(64), nullable=False),
        sa.Column("params_json", sa.JSON(), nullable=False),
        sa.Column("prompts_json", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("discard_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_study_candidates"),
        sa.ForeignKeyConstraint(["study_id"], ["study_studies.id"], name="fk_study_candidates_study_id_study_studies"),
        sa.UniqueConstraint("study_id", "idx", name="uq_study_candidates_study_idx"),
    )
    op.create_index("ix_study_candidates_study_id", "study_candidates", ["study_id"])
    op.create_table(
        "study_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("fold", sa.Integer(), nullable=False),
        sa.Column("window", sa.String(8), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("attempt", sa.String(64), nullable=False),
        sa.Column("steps_planned", sa.Integer(), nullable=False),
        sa.Column("steps_done", sa.Integer(), nullable=False),
        sa.Column("scores_json", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_study_runs"),
        sa.ForeignKeyConstraint(["study_id"], ["study_studies.id"], name="fk_study_runs_study_id_study_studies"),
        sa.UniqueConstraint("study_id", "candidate_id", "fold", "window", name="uq_study_runs_key"),
    )
    op.create_index("ix_study_runs_study_id", "study_runs", ["study_id"])
    op.create_table(
        "study_locks",
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workspace", "workflow", name="pk_study_locks"),
    )


def downgrade() -> None:
    op.drop_table("study_locks")
    op.drop_table("study_runs")
    op.drop_table("study_candidates")
    op.drop_table("study_studies")
