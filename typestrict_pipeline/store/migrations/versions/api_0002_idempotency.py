"""api: Idempotency-Key claims and answers, per workspace (typestrict_pipeline/api/idempotency.py).

Revision ID: api_0002_idempotency
Revises: api_0001_keys
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "api_0002_idempotency"
down_revision = "api_0001_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_idempotency",
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("claim_id", sa.String(32), nullable=False),
        sa.Column("method", sa.String(10), nullable=False),
        sa.Column("path", sa.String(200), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("headers", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("workspace_id", "key", name="pk_api_idempotency"),
    )
    op.create_index("ix_api_idempotency_claimed_at", "api_idempotency", ["claimed_at"])


def downgrade() -> None:
    op.drop_index("ix_api_idempotency_claimed_at", table_name="api_idempotency")
    op.drop_table("api_idempotency")
