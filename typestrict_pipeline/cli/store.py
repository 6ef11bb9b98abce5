"""``typestrict store upgrade|init``: manage the domain store's schema.

``upgrade`` opens the store (creating it only where none exists) and brings its schema to the
current version; an existing store that is empty, truncated or corrupt is refused. ``init`` is
the one explicit way to start an empty store where a broken one is: it moves the broken SQLite
file aside (never deletes it) and creates a new store.
"""

from __future__ import annotations

import argparse
import json

from typestrict_pipeline.cli.common import (
    Wrote,
    add_json,
    add_store,
    say_wrote,
    shown_store,
    sqlite_path,
    store_url,
    writes,
)
from typestrict_pipeline.store import open_store
from typestrict_pipeline.store.engine import init_store


def _revisions(url: str) -> frozenset[str]:
    """The schema revisions of the store at ``url`` now, read without writing anything (none:
    no store there yet, or one :func:`open_store` will refuse with its own message)."""
    import sqlite3

    from sqlalchemy import inspect, text
    from sqlalchemy.exc import SQLAlchemyError

    from typestrict_pipeline.store.engine import create_store_engine

    path = sqlite_path(url)
    if path is not None:
        if not path.is_file():
            return frozenset()
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
            try:
                return frozenset(r[0] for r in conn.execute("SELECT version_num FROM alembic_version"))
            finally:
                conn.close()
        except sqlite3.Error:
            return frozenset()
    engine = create_store_engine(url)
    try:
        with engine.connect() as c:
            if "alembic_version" not in inspect(c).get_table_names():
                return frozenset()
            return frozenset(str(r[0]) for r in c.execute(text("SELECT version_num FROM alembic_version")))
    except SQLAlchemyError:
        return frozenset()
    finally:
        engine.dispose()


def _upgrade(args: argparse.Namespace) -> int:
    url = store_url(args)
    before = _revisions(url)
    engine = open_store(url)
    where = engine.url.render_as_string(hide_password=True)
    engine.dispose()
    after = _revisions(url)
    now = f"revision{'s' if len(after) > 1 else ''} {', '.join(sorted(after))}"  # one per area's branch
    if before == after:
        wrote = Wrote(f"its schema is current ({now})", (), store=where)
    elif before:
        wrote = Wrote(f"the schema upgrade from revision{'s' if len(before) > 1 else ''} "
                      f"{', '.join(sorted(before))} to {now}", tuple(sorted(after - before)), store=where)
    else:
        wrote = Wrote(f"the store's tables (schema {now})", tuple(sorted(after)), store=where)
    if args.json:
        print(json.dumps({"store": where, "schema": "current", "wrote": wrote.to_json()}))
    else:
        print(f"store at {where} is at the current schema")
        say_wrote(args, wrote)
    return 0


def _init(args: argparse.Namespace) -> int:
    url = store_url(args)
    result = init_store(url)
    where = shown_store(url)
    if result.created:
        moved = "" if result.moved_to is None else f" (the broken file moved to {result.moved_to})"
        wrote = Wrote(f"the tables of a new, empty store{moved}", (where,), store=where)
    else:
        wrote = Wrote("a store is there already, left as it was", (), store=where)
    if args.json:
        print(json.dumps({"created": result.created,
                          "moved_to": None if result.moved_to is None else str(result.moved_to),
                          "message": result.message, "wrote": wrote.to_json()}))
    else:
        print(result.message)
        say_wrote(args, wrote)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    store = subparsers.add_parser("store", help="manage the domain store")
    sub = store.add_subparsers(dest="store_command", required=True)
    up = writes(sub.add_parser("upgrade", help="bring the store's schema to the current version"))
    add_json(add_store(up))
    up.set_defaults(func=_upgrade)
    init = writes(sub.add_parser(
        "init",
        help="create an empty store; a broken SQLite file there is moved aside, never deleted",
    ))
    add_json(add_store(init))
    init.set_defaults(func=_init)
