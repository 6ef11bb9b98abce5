"""credits: the database checks each entry's shape (training entries reference their training,
amounts per kind).

With these, ``UNIQUE (kind, reference)`` is exactly "one spend and one settlement per training
id" in the database itself, and no entry can carry an amount its kind does not allow.

Revision ID: credits_0002
Revises: credits_0001
Create Date: 2026-11-30
"""

from alembic import op

revision = "credits_0002"
down_revision = "credits_0001"
branch_labels = None
depends_on = None

CHECKS = {
    "ck_credit_entries_training_entries_reference_training": (
        "kind NOT IN ('spend', 'settlement') "
        "OR (training_id IS NOT NULL AND reference = training_id)"
    ),
    "ck_credit_entries_amount_fits_kind": (
        "(kind = 'grant' AND amount > 0) OR (kind = 'spend' AND amount = -1) "
        "OR (kind = 'settlement' AND amount IN (0, 1)) OR (kind = 'adjustment' AND amount <> 0)"
    ),
}


def upgrade() -> None:
    with op.batch_alter_table("credit_entries") as batch:
        for name, condition in CHECKS.items():
            batch.create_check_constraint(name, condition)


def downgrade() -> None:
    with op.batch_alter_table("credit_entries") as batch:
        for name in CHECKS:
            batch.drop_constraint(name, type_="check")
