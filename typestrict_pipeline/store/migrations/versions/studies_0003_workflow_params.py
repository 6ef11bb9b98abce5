"""studies: a workflow's configuration as set by promoting a parameters-only winner.

Revision ID: studies_0003
Revises: studies_0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "studies_0003"
down_revision = "studies_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "study_workflow_params",
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("params_json", sa.JSON(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("applied_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workspace", "workflow", name="pk_study_workflow_params"),
    )


def downgrade() -> None:
    op.drop_table("study_workflow_params")
