"""studies: "Min unseen steps for a re-run", set when a study is created.

Studies created before this revision keep ``NULL`` (never set); a schedule enabled on such a
study may set it once (see ``docs/scheduled-reruns.md``).

Revision ID: studies_0004
Revises: studies_0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "studies_0004"
down_revision = "studies_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("study_studies") as batch:
        batch.add_column(sa.Column("min_unseen_steps", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("study_studies") as batch:
        batch.drop_column("min_unseen_steps")
