"""``typestrict store upgrade|url``: manage the domain store's schema."""

from __future__ import annotations

import argparse

from typestrict_pipeline.store import default_store_url, normalize_url, open_store


def _upgrade(args: argparse.Namespace) -> int:
    url = normalize_url(args.url or default_store_url())
    engine = open_store(url)
    print(f"store at {engine.url.render_as_string(hide_password=True)} is at the current schema")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    store = subparsers.add_parser("store", help="manage the domain store")
    sub = store.add_subparsers(dest="store_command", required=True)
    up = sub.add_parser("upgrade", help="bring the store's schema to the current version")
    up.add_argument("--url", help="store URL (default: TYPESTRICT_STORE_URL or the local SQLite file)")
    up.set_defaults(func=_upgrade)
