"""``typestrict store upgrade|init``: manage the domain store's schema.

``upgrade`` opens the store (creating it only where none exists) and brings its schema to the
current version; an existing store that is empty, truncated or corrupt is refused. ``init`` is
the one explicit way to start an empty store where a broken one is: it moves the broken SQLite
file aside (never deletes it) and creates a new store.
"""

from __future__ import annotations

import argparse
import json

from typestrict_pipeline.cli.common import add_json, add_store, store_url
from typestrict_pipeline.store import open_store
from typestrict_pipeline.store.engine import init_store


def _upgrade(args: argparse.Namespace) -> int:
    engine = open_store(store_url(args))
    where = engine.url.render_as_string(hide_password=True)
    engine.dispose()
    if args.json:
        print(json.dumps({"store": where, "schema": "current"}))
    else:
        print(f"store at {where} is at the current schema")
    return 0


def _init(args: argparse.Namespace) -> int:
    result = init_store(store_url(args))
    if args.json:
        print(json.dumps({"created": result.created,
                          "moved_to": None if result.moved_to is None else str(result.moved_to),
                          "message": result.message}))
    else:
        print(result.message)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    store = subparsers.add_parser("store", help="manage the domain store")
    sub = store.add_subparsers(dest="store_command", required=True)
    up = sub.add_parser("upgrade", help="bring the store's schema to the current version")
    add_json(add_store(up))
    up.set_defaults(func=_upgrade)
    init = sub.add_parser(
        "init",
        help="create an empty store; a broken SQLite file there is moved aside, never deleted",
    )
    add_json(add_store(init))
    init.set_defaults(func=_init)
