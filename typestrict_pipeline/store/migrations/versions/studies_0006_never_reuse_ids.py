"""studies: study ids are never reused after a study is deleted (SQLite AUTOINCREMENT).

SQLite's default rowid reuses the largest id once that row is deleted, so a new study could
take the id of a deleted one, and a schedule of the deleted study would re-run the new one
instead of saying "The root study was deleted". ``AUTOINCREMENT`` makes ids strictly
increasing. PostgreSQL sequences never reuse ids: nothing to do there.

Revision ID: studies_0006
Revises: studies_0005
Create Date: 2026-11-30
"""

from alembic import op

revision = "studies_0006"
down_revision = "studies_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("study_studies", recreate="always",
                              table_kwargs={"sqlite_autoincrement": True}):
        pass


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("study_studies", recreate="always"):
        pass
