"""lifecycle: leases (who works on what, safe against reused process ids), training states with
their deadlines, and the backtest statuses ``interrupted`` and ``cancelled``.

Revision ID: lifecycle_0001
Revises:
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "lifecycle_0001"
down_revision = None
branch_labels = ("lifecycle",)
depends_on = ("backtests_0001",)

_OLD_STATUSES = ("running", "completed", "stopped", "failed")
_NEW_STATUSES = (*_OLD_STATUSES, "interrupted", "cancelled")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "lifecycle_leases",
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("object_id", sa.String(200), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("boot_id", sa.String(64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("start_ticks", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.String(32), nullable=False),
        sa.Column("acquired_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "object_id", name="pk_lifecycle_leases"),
    )
    op.create_table(
        "training_lifecycle",
        sa.Column("training_id", sa.String(200), nullable=False),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("deadline_at", sa.DateTime(), nullable=True),
        sa.Column("submissions", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("training_id", name="pk_training_lifecycle"),
        # Every state that is not an end has a deadline: nothing waits for ever.
        sa.CheckConstraint(
            "state IN ('settled', 'expired', 'cancelled') OR deadline_at IS NOT NULL",
            name="ck_training_lifecycle_open_states_have_a_deadline",
        ),
        sa.CheckConstraint(
            _in("state", ("awaiting_predictions", "judging", "failed", "settled", "expired",
                          "cancelled")),
            name="ck_training_lifecycle_known_state",
        ),
    )
    op.create_index("ix_training_lifecycle_workspace_id", "training_lifecycle", ["workspace_id"])
    op.create_index("ix_training_lifecycle_state", "training_lifecycle", ["state"])
    op.create_index("ix_training_lifecycle_deadline_at", "training_lifecycle", ["deadline_at"])
    with op.batch_alter_table("backtest_runs") as batch:
        batch.drop_constraint("ck_backtest_runs_status", type_="check")
        batch.create_check_constraint("ck_backtest_runs_status", _in("status", _NEW_STATUSES))


def downgrade() -> None:
    with op.batch_alter_table("backtest_runs") as batch:
        batch.drop_constraint("ck_backtest_runs_status", type_="check")
        batch.create_check_constraint("ck_backtest_runs_status", _in("status", _OLD_STATUSES))
    op.drop_index("ix_training_lifecycle_deadline_at", table_name="training_lifecycle")
    op.drop_index("ix_training_lifecycle_state", table_name="training_lifecycle")
    op.drop_index("ix_training_lifecycle_workspace_id", table_name="training_lifecycle")
    op.drop_table("training_lifecycle")
    op.drop_table("lifecycle_leases")
