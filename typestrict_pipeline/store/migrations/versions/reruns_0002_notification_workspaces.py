"""reruns: a notification choice belongs to one workspace (or, ``""``, to every workspace).

A person's choice was one row per person and kind, so one workspace turning a person's
notification off (Settings → Notifications, ``PUT /v1/notifications/{person}``) turned it off
for the schedules that person owns in every other workspace. ``workspace_id`` joins the key:
a workspace's choice is about its own schedules; ``""`` is the choice made for every workspace
(``typestrict schedule notifications``), which every existing row becomes, so nothing anyone
receives changes with the upgrade.

Revision ID: reruns_0002
Revises: reruns_0001
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "reruns_0002"
down_revision = "reruns_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("notification_settings", recreate="always") as batch:
        batch.add_column(sa.Column("workspace_id", sa.String(64), nullable=False, server_default=""))
        batch.drop_constraint("pk_notification_settings", type_="primary")
        batch.create_primary_key("pk_notification_settings", ["workspace_id", "user_id", "kind"])


def downgrade() -> None:
    # A workspace's own choices cannot be kept in the one-row-per-person table: only the
    # every-workspace choices go back.
    op.execute("DELETE FROM notification_settings WHERE workspace_id <> ''")
    with op.batch_alter_table("notification_settings", recreate="always") as batch:
        batch.drop_constraint("pk_notification_settings", type_="primary")
        batch.drop_column("workspace_id")
        batch.create_primary_key("pk_notification_settings", ["user_id", "kind"])
