"""credits: a settlement line records the SHA-256 of the audit it settled.

The model record already keeps the audit's bytes and digest; the ledger's own line now carries
the digest too, so the append-only ledger alone says which audit file was settled (and
``verify_audit.py --expect-sha256`` can check a copy against it). Older settlement lines keep
NULL.

Revision ID: credits_0003
Revises: credits_0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "credits_0003"
down_revision = "credits_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("credit_entries") as batch:
        batch.add_column(sa.Column("audit_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("credit_entries") as batch:
        batch.drop_column("audit_sha256")
