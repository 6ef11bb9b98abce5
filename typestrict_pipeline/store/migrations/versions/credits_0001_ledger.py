"""credits: accounts, the append-only credit ledger, model records (retention and audits).

Revision ID: credits_0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "credits_0001"
down_revision = None
branch_labels = ("credits",)
depends_on = None

_ENTRY_KINDS = ("grant", "spend", "settlement", "adjustment")
_MODEL_STATES = ("available", "expired")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "credit_accounts",
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("balance", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", name="pk_credit_accounts"),
        sa.CheckConstraint("balance >= 0", name="ck_credit_accounts_balance_not_negative"),
    )
    op.create_table(
        "credit_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reference", sa.String(200), nullable=False),
        sa.Column("training_id", sa.String(200), nullable=True),
        sa.Column("amount", sa.Integer(), nullable=False),
        sa.Column("balance_after", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.String(32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_credit_entries"),
        sa.UniqueConstraint("kind", "reference", name="uq_credit_entries_kind_reference"),
        sa.CheckConstraint(_in("kind", _ENTRY_KINDS), name="ck_credit_entries_credit_entry_kind"),
        sa.CheckConstraint(
            "balance_after >= 0", name="ck_credit_entries_balance_after_not_negative"
        ),
    )
    op.create_index("ix_credit_entries_workspace_id_id", "credit_entries", ["workspace_id", "id"])
    op.create_index("ix_credit_entries_training_id", "credit_entries", ["training_id"])
    op.create_table(
        "model_records",
        sa.Column("model_id", sa.String(200), nullable=False),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("keep_if_loses", sa.Boolean(), nullable=False),
        sa.Column("delivered", sa.Boolean(), nullable=False),
        sa.Column("files_path", sa.Text(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("settled_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("expired_at", sa.DateTime(), nullable=True),
        sa.Column("audit_json", sa.LargeBinary(), nullable=True),
        sa.Column("audit_sha256", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("model_id", name="pk_model_records"),
        sa.CheckConstraint(_in("state", _MODEL_STATES), name="ck_model_records_model_state"),
    )
    op.create_index("ix_model_records_workspace_id", "model_records", ["workspace_id"])
    op.create_index(
        "ix_model_records_state_expires_at", "model_records", ["state", "expires_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_model_records_state_expires_at", table_name="model_records")
    op.drop_index("ix_model_records_workspace_id", table_name="model_records")
    op.drop_table("model_records")
    op.drop_index("ix_credit_entries_training_id", table_name="credit_entries")
    op.drop_index("ix_credit_entries_workspace_id_id", table_name="credit_entries")
    op.drop_table("credit_entries")
    op.drop_table("credit_accounts")
