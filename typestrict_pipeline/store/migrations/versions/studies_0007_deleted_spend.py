"""studies: a deleted study's spend stays (spend is history).

Deleting a study removes its candidates and runs, and used to remove its spend from Usage and
from the workspace's usage budget with them. ``study_deleted`` keeps one row per deleted study:
its id, workspace, workflow, name, when it was created and deleted, and what it spent (``NULL``
for a study created before cost tracking), so Usage shows it under its id, marked deleted, and
the budget still counts it.

Revision ID: studies_0007
Revises: studies_0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "studies_0007"
down_revision = "studies_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "study_deleted",
        sa.Column("study_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("workspace", sa.String(128), nullable=False, index=True),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=False),
        sa.Column("cost_tracked", sa.Boolean(), nullable=False),
        sa.Column("spend_micro", sa.BigInteger(), nullable=True),
        sa.Column("budget_micro", sa.BigInteger(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("study_deleted")
