"""``typestrict store upgrade``: manage the domain store's schema."""

from __future__ import annotations

import argparse

from typestrict_pipeline.cli.common import add_store, store_url
from typestrict_pipeline.store import open_store


def _upgrade(args: argparse.Namespace) -> int:
    engine = open_store(store_url(args))
    print(f"store at {engine.url.render_as_string(hide_password=True)} is at the current schema")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    store = subparsers.add_parser("store", help="manage the domain store")
    sub = store.add_subparsers(dest="store_command", required=True)
    up = sub.add_parser("upgrade", help="bring the store's schema to the current version")
    add_store(up)
    up.set_defaults(func=_upgrade)
