"""studies: cost tracking (spend, reservations, USD budget and estimate, per-run and per-candidate cost).

Rows that exist before this revision were created before cost tracking: their cost columns
stay NULL and ``cost_tracked`` is false, so they show no cost instead of a misleading $0.

Revision ID: studies_0002
Revises: studies_0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "studies_0002"
down_revision = "studies_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("study_studies") as batch:
        batch.add_column(sa.Column("cost_tracked", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("spend_micro", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("reserved_micro", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("budget_micro", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("estimate_micro", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("cost_per_step_num", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("cost_per_step_den", sa.BigInteger(), nullable=True))
        batch.create_check_constraint("reserved_not_negative", "reserved_micro >= 0")
    with op.batch_alter_table("study_candidates") as batch:
        batch.add_column(sa.Column("cost_micro", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("study_runs") as batch:
        batch.add_column(sa.Column("reserved_micro", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("cost_micro", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("study_runs") as batch:
        batch.drop_column("cost_micro")
        batch.drop_column("reserved_micro")
    with op.batch_alter_table("study_candidates") as batch:
        batch.drop_column("cost_micro")
    with op.batch_alter_table("study_studies") as batch:
        batch.drop_constraint("ck_study_studies_reserved_not_negative", type_="check")
        for col in ("cost_per_step_den", "cost_per_step_num", "estimate_micro", "budget_micro",
                    "reserved_micro", "spend_micro", "cost_tracked"):
            batch.drop_column(col)
