"""studies: the baseline scored on the same holdout slice as the winner.

``holdout_baseline`` is the baseline's mean score on the holdout, ``holdout_diff_se`` the
Newey–West standard error of the per-step difference winner − baseline, and
``holdout_baseline_missing_reason`` why the baseline has no score (budget reached, ...).
Studies finished before this revision keep ``NULL`` (no baseline was scored).

Revision ID: studies_0005
Revises: studies_0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "studies_0005"
down_revision = "studies_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("study_studies") as batch:
        batch.add_column(sa.Column("holdout_baseline", sa.Float(), nullable=True))
        batch.add_column(sa.Column("holdout_diff_se", sa.Float(), nullable=True))
        batch.add_column(sa.Column("holdout_baseline_missing_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("study_studies") as batch:
        batch.drop_column("holdout_baseline_missing_reason")
        batch.drop_column("holdout_diff_se")
        batch.drop_column("holdout_baseline")
