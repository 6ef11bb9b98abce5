"""console: each creating form's one-time id, so a form sent twice does its work once.

Revision ID: console_0002_submissions
Revises: console_0001_sessions
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "console_0002_submissions"
down_revision = "console_0001_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_submissions",
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("form_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("location", sa.String(1000), nullable=True),
        sa.PrimaryKeyConstraint("workspace_id", "form_id", name="pk_console_submissions"),
    )
    op.create_index("ix_console_submissions_created_at", "console_submissions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_console_submissions_created_at", table_name="console_submissions")
    op.drop_table("console_submissions")
