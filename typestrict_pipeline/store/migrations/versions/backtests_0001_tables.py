"""backtests: backtests, their steps, metered calls, live decisions, workflow versions.

Revision ID: backtests_0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "backtests_0001"
down_revision = None
branch_labels = ("backtests",)
depends_on = None

_BACKTEST_STATUSES = ("running", "completed", "stopped", "failed")
_STEP_STATUSES = ("ok", "unscored", "failed")
_CALL_KINDS = ("model", "tool", "judge")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "backtest_runs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("start_at", sa.DateTime(), nullable=False),
        sa.Column("end_at", sa.DateTime(), nullable=False),
        sa.Column("step_seconds", sa.Float(), nullable=False),
        sa.Column("dataset", sa.String(256), nullable=False),
        sa.Column("steps_planned", sa.Integer(), nullable=False),
        sa.Column("steps_run", sa.Integer(), nullable=False),
        sa.Column("steps_ok", sa.Integer(), nullable=False),
        sa.Column("steps_unscored", sa.Integer(), nullable=False),
        sa.Column("steps_failed", sa.Integer(), nullable=False),
        sa.Column("mean_score", sa.Float(), nullable=True),
        sa.Column("cost_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("params_json", sa.JSON(), nullable=False),
        sa.Column("prompts_json", sa.JSON(), nullable=False),
        sa.Column("prices_json", sa.JSON(), nullable=False),
        sa.Column("card_json", sa.JSON(), nullable=True),
        sa.Column("dagster_run_id", sa.String(64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_backtest_runs"),
        sa.CheckConstraint("mode = 'HISTORICAL'", name="ck_backtest_runs_historical"),
        sa.CheckConstraint(_in("status", _BACKTEST_STATUSES), name="ck_backtest_runs_status"),
        sa.CheckConstraint("cost_micro_usd >= 0", name="ck_backtest_runs_cost_not_negative"),
    )
    op.create_index("ix_backtest_runs_workspace", "backtest_runs", ["workspace"])
    op.create_index(
        "ix_backtest_runs_version_status",
        "backtest_runs",
        ["workspace", "workflow", "version_id", "status", "finished_at"],
    )
    op.create_table(
        "backtest_steps",
        sa.Column("backtest_id", sa.String(32), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("t", sa.DateTime(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("decision_json", sa.JSON(), nullable=True),
        sa.Column("outcome_json", sa.JSON(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("cost_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("backtest_id", "step_index", name="pk_backtest_steps"),
        sa.CheckConstraint("mode = 'HISTORICAL'", name="ck_backtest_steps_historical"),
        sa.CheckConstraint(_in("status", _STEP_STATUSES), name="ck_backtest_steps_status"),
        sa.CheckConstraint(
            "(status = 'ok' AND score IS NOT NULL) OR (status <> 'ok' AND score IS NULL)",
            name="ck_backtest_steps_score_iff_ok",
        ),
        sa.CheckConstraint(
            "status <> 'failed' OR error IS NOT NULL", name="ck_backtest_steps_failed_has_error"
        ),
    )
    op.create_table(
        "backtest_calls",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("run_kind", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_backtest_calls"),
        sa.CheckConstraint(_in("mode", ("HISTORICAL", "LIVE")), name="ck_backtest_calls_mode"),
        sa.CheckConstraint(
            "(run_kind = 'backtest' AND mode = 'HISTORICAL') OR (run_kind = 'live' AND mode = 'LIVE')",
            name="ck_backtest_calls_run_kind_matches_mode",
        ),
        sa.CheckConstraint(_in("kind", _CALL_KINDS), name="ck_backtest_calls_kind"),
        sa.CheckConstraint(
            "cost_micro_usd >= 0 AND input_tokens >= 0 AND output_tokens >= 0",
            name="ck_backtest_calls_not_negative",
        ),
    )
    op.create_index("ix_backtest_calls_workspace_day", "backtest_calls", ["workspace", "day"])
    op.create_index("ix_backtest_calls_run_id", "backtest_calls", ["run_id"])
    op.create_table(
        "backtest_live_decisions",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("as_of", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("decision_json", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cost_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("params_json", sa.JSON(), nullable=False),
        sa.Column("dagster_run_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_backtest_live_decisions"),
        sa.CheckConstraint("mode = 'LIVE'", name="ck_backtest_live_decisions_live"),
        sa.CheckConstraint(_in("status", ("ok", "failed")), name="ck_backtest_live_decisions_status"),
    )
    op.create_index(
        "ix_backtest_live_decisions_workflow",
        "backtest_live_decisions",
        ["workspace", "workflow", "created_at"],
    )
    op.create_table(
        "backtest_workflow_versions",
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("params_json", sa.JSON(), nullable=False),
        sa.Column("prompts_json", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workflow", "version_id", name="pk_backtest_workflow_versions"),
    )
    op.create_table(
        "backtest_active_versions",
        sa.Column("workspace", sa.String(128), nullable=False),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("activated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workspace", "workflow", name="pk_backtest_active_versions"),
    )


def downgrade() -> None:
    for table in (
        "backtest_active_versions",
        "backtest_workflow_versions",
        "backtest_live_decisions",
        "backtest_calls",
        "backtest_steps",
        "backtest_runs",
    ):
        op.drop_table(table)
