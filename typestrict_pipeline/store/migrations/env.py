"""Alembic environment: runs online against the connection handed over by ``store.engine``."""

from alembic import context

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only when someone runs the alembic CLI by hand
    raise SystemExit("Run migrations through typestrict_pipeline.store.open_store or `typestrict store upgrade`.")

context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
