"""Which workspaces a store knows, so that a command asked about an unknown one says so.

A workspace has no table of its own: it exists once anything was recorded for it (a credit
account, a model record, a backtest, a live decision, an activated version, a study, a
subscription state). A read about a workspace none of these mention is a typo or the wrong
store, not an empty workspace.
"""

from __future__ import annotations

from sqlalchemy import Engine, inspect, text

from typestrict_pipeline.errors import NotFoundError

# (table, workspace column) of every table that records something for a workspace.
WORKSPACE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("credit_accounts", "workspace_id"),
    ("model_records", "workspace_id"),
    ("backtest_runs", "workspace"),
    ("backtest_live_decisions", "workspace"),
    ("backtest_active_versions", "workspace"),
    ("study_studies", "workspace"),
    ("workspace_states", "workspace_id"),
)


def known_workspaces(engine: Engine) -> list[str]:
    """Every workspace the store has recorded anything for, sorted.

    >>> from sqlalchemy import create_engine
    >>> e = create_engine("sqlite://")
    >>> with e.begin() as c:
    ...     _ = c.execute(text("CREATE TABLE study_studies (workspace TEXT)"))
    ...     _ = c.execute(text("INSERT INTO study_studies VALUES ('demo'), ('acme'), ('demo')"))
    >>> known_workspaces(e)
    ['acme', 'demo']
    """
    present = set(inspect(engine).get_table_names())
    found: set[str] = set()
    with engine.connect() as conn:
        for table, column in WORKSPACE_COLUMNS:
            if table in present:
                found.update(str(v) for (v,) in conn.execute(text(f"SELECT DISTINCT {column} FROM {table}")))
    return sorted(found)


def require_workspace(engine: Engine, workspace: str) -> None:
    """Raise :class:`NotFoundError` naming the known workspaces when ``workspace`` is unknown.

    >>> from sqlalchemy import create_engine
    >>> require_workspace(create_engine("sqlite://"), "demo")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.NotFoundError: expected a workspace the store knows, got 'demo' (this store knows none yet). Check the name, or the store (--store / TYPESTRICT_STORE_URL / TYPESTRICT_HOME).
    """
    known = known_workspaces(engine)
    if workspace in known:
        return
    listed = ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
    which = f"known: {listed}" if known else "this store knows none yet"
    raise NotFoundError(
        f"expected a workspace the store knows, got {workspace!r} ({which}). Check the name, or "
        "the store (--store / TYPESTRICT_STORE_URL / TYPESTRICT_HOME)."
    )
