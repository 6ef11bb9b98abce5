"""``typestrict api`` (serve the customer HTTP API) and ``typestrict api-key create|revoke|list``.

* ``api [--host 127.0.0.1] [--port 8000] [--store URL] [--home DIR] [--jev-source JSON|@FILE]``:
  serves ``/v1`` with uvicorn (``make api``). ``--jev-source`` is the manifest
  ``predictions.jev`` object used for trainings created through the API (default:
  ``TYPESTRICT_API_JEV_SOURCE``; on the demo's home, the demo's Jev stand-in, said on the first
  line; anywhere else the server does not start without one: :mod:`typestrict_pipeline.api.jev`).
* ``api-key create WORKSPACE [--label TEXT]``: prints the new key once (it is stored hashed and
  can never be shown again); ``api-key revoke KEY_ID_OR_KEY`` (the id or the whole key, only the
  id is ever printed); ``api-key list WORKSPACE`` (ids only). Each refuses a home with no store
  (not the server's: ``--new-store`` to start one on purpose).

The store is ``--store`` (default ``TYPESTRICT_STORE_URL``, else the SQLite file under
``--home``, else under ``TYPESTRICT_HOME``). FastAPI and uvicorn are imported only by ``api``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from typestrict_pipeline.cli.common import Wrote, say_wrote, shown_store, writes
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import (
    default_store_url,
    open_store,
    typestrict_home,
    utcnow,
)


def _store(args: argparse.Namespace) -> str:
    """The store: ``--store``, else ``TYPESTRICT_STORE_URL``, else the SQLite file under ``--home``
    or ``TYPESTRICT_HOME``; checked as every command's (:func:`check_store_url`)."""
    from typestrict_pipeline.cli.common import check_store_url

    if args.store is None and getattr(args, "home", None) and not os.environ.get("TYPESTRICT_STORE_URL"):
        return check_store_url(f"sqlite:///{Path(args.home).resolve() / 'store.db'}")
    return check_store_url(args.store if args.store is not None else default_store_url())


def _serve(args: argparse.Namespace) -> int:
    from typestrict_pipeline.api.app import check_bound_settings
    from typestrict_pipeline.api.jev import JEV_SOURCE_ENV, choose_jev

    check_bound_settings()  # a bound set wrong: one message and exit 2, before anything starts
    home = (Path(args.home) if args.home else typestrict_home()).resolve()
    with choose_jev(home, args.jev_source, os.environ) as jev:  # no Jev: refused before anything
        # The store is checked (and upgraded) here, before the server starts: a broken store or
        # one from a newer version is one message and exit 2, never a server's startup traceback;
        # a home with no store is refused unless --new-store (not a server's home).
        from typestrict_pipeline.cli.common import refuse_new_store

        refuse_new_store(_store(args), told=args.new_store, given=args.store is not None)
        open_store(_store(args)).dispose()
        _check_listen(args.host, args.port)
        import uvicorn

        from typestrict_pipeline.api import create_app
        from typestrict_pipeline.api.app import RATE_LIMIT_ENV
        from typestrict_pipeline.api.ratelimit import RateLimit
        from typestrict_pipeline.api.server import uvicorn_options

        limit = None if args.rate_limit == 0 else RateLimit(args.rate_limit, args.rate_burst)
        said_limit = (("off" if limit is None else limit.describe())
                      + (f", in each of the {args.workers} worker processes" if args.workers > 1 and limit else ""))
        if args.json:  # the start-up lines as one JSON object (uvicorn's own log follows)
            print(json.dumps({"serving": f"http://{args.host}:{args.port}/v1",
                              "schema": f"http://{args.host}:{args.port}/v1/openapi.json",
                              "jev": jev.line, "rate_limit": said_limit}), flush=True)
        else:
            if jev.line:
                print(jev.line, flush=True)
            print(f"typestrict api: serving http://{args.host}:{args.port}/v1 (schema: /v1/openapi.json)",
                  flush=True)
            print(f"typestrict api: rate limit {said_limit}", flush=True)
        if args.workers > 1:  # each worker process builds the app from the environment
            os.environ["TYPESTRICT_STORE_URL"] = _store(args)
            os.environ["TYPESTRICT_HOME"] = str(home)
            os.environ[JEV_SOURCE_ENV] = json.dumps(dict(jev.source))
            os.environ[RATE_LIMIT_ENV] = "off" if limit is None else f"{limit.rate_per_s}/{limit.burst}"
            with _started(args.host, args.port):
                uvicorn.run("typestrict_pipeline.api.app:app_from_env", factory=True, workers=args.workers,
                            host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, **uvicorn_options())
            return 0
        app = create_app(_store(args), home, jev_source=jev.source, rate_limit=limit, warm_runs=True)
        with _started(args.host, args.port):
            uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, **uvicorn_options())
    return 0


_LISTEN_FIX = "pass another --port or --host, or stop what listens there"


def _check_listen(host: str, port: int) -> None:
    """Refuse, before the server starts, an address it could not listen on: a host that does not
    resolve, a port in use or one this user may not take. Uvicorn logged these as an ``ERROR``
    line and exited 3 (the code of a cancelled ``backtest run``), or failed with a traceback."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise InputError("--host as an address this machine has", f"{host!r}, which does not resolve ({exc})",
                         "write an IP address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(address)
    except OSError as exc:
        raise InputError(f"an address to listen on at {host}:{port}",
                         f"{exc.strerror or exc} (errno {exc.errno})", _LISTEN_FIX) from None


@contextlib.contextmanager
def _started(host: str, port: int) -> Iterator[None]:
    """Uvicorn's start-up failure (``sys.exit(3)``, what :func:`_check_listen` could not foresee:
    the port taken since) as one of our errors, exit 2, after uvicorn's own ``ERROR`` line."""
    try:
        yield
    except SystemExit as exc:
        if exc.code == 3:  # uvicorn.server.STARTUP_FAILURE
            raise InputError(f"the server to start on {host}:{port}", "a start-up failure (the ERROR line above)",
                             _LISTEN_FIX) from None
        raise


LABEL_MAX_CHARS = 200
"""The longest API key label (the column's size; a longer one was cut without a word)."""

GRACEFUL_SHUTDOWN_S = 5
"""On Ctrl-C or SIGTERM, requests in flight get this long before the server stops anyway."""


def _create(args: argparse.Namespace) -> int:
    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.cli.common import refuse_new_store

    refuse_new_store(_store(args), told=args.new_store, given=args.store is not None)
    engine = open_store(_store(args))
    try:
        new = create_api_key(engine, args.workspace, label=args.label)
    finally:
        engine.dispose()
    wrote = Wrote(f"API key {new.info.key_id} of workspace {new.info.workspace_id}", (new.info.key_id,),
                  store=shown_store(_store(args)))
    if args.json:
        print(json.dumps({"key_id": new.info.key_id, "workspace_id": new.info.workspace_id,
                          "label": new.info.label, "key": new.key, "wrote": wrote.to_json()}, indent=2))
        return 0
    say_wrote(args, wrote)  # first: the key stays the last line (scripts take it with `tail -1`)
    print(f"API key {new.info.key_id} for workspace {new.info.workspace_id} (shown once; store it now):")
    print(new.key)
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from typestrict_pipeline.api.keys import key_id_of, revoke_api_key
    from typestrict_pipeline.cli.common import refuse_new_store

    key_id = key_id_of(args.key)  # an id or a whole key; neither is ever printed beyond the id
    refuse_new_store(_store(args), told=False, given=args.store is not None)
    engine = open_store(_store(args))
    started = utcnow()
    try:
        info = revoke_api_key(engine, key_id)
    finally:
        engine.dispose()
    if info.revoked_at is not None and info.revoked_at >= started:
        wrote = Wrote(f"the revocation of API key {info.key_id} of workspace {info.workspace_id}",
                      (info.key_id,), store=shown_store(_store(args)))
    else:  # revoking is idempotent: a key revoked before is left as it is
        when = "" if info.revoked_at is None else f" at {info.revoked_at.strftime('%Y-%m-%d %H:%M:%S')} UTC"
        wrote = Wrote(f"API key {info.key_id} was revoked before{when}", (), store=shown_store(_store(args)))
    if args.json:
        print(json.dumps({"key_id": info.key_id, "workspace_id": info.workspace_id, "revoked": True,
                          "wrote": wrote.to_json()}, indent=2))
        return 0
    print(f"API key {info.key_id} of workspace {info.workspace_id}: revoked")
    say_wrote(args, wrote)
    return 0


def _list(args: argparse.Namespace) -> int:
    from typestrict_pipeline.api.keys import list_api_keys
    from typestrict_pipeline.cli.common import print_table, sqlite_path

    path = sqlite_path(_store(args))
    if path is not None and not path.exists():
        raise InputError(f"a store at {path}", "no such file", "run `make demo`, or pass --store URL")
    engine = open_store(_store(args), create=False)  # reading creates nothing
    try:
        keys = list_api_keys(engine, args.workspace)
        if not keys:  # an unknown workspace is a typo or the wrong store, not an empty list
            from typestrict_pipeline.workspaces import require_workspace

            require_workspace(engine, args.workspace)
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps([{"key_id": k.key_id, "workspace_id": k.workspace_id, "label": k.label,
                           "created_at": k.created_at.isoformat(),
                           "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None}
                          for k in keys], indent=2))
        return 0
    print_table(f"API keys of workspace {args.workspace}", ["key id", "created (UTC)", "state", "label"],
                [[k.key_id, k.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                  f"revoked {k.revoked_at.strftime('%Y-%m-%d %H:%M:%S')}" if k.revoked_at else "active",
                  k.label] for k in keys])
    print(f"{len(keys)} key(s)")
    return 0


def _store_option(p: argparse.ArgumentParser) -> None:
    from typestrict_pipeline.cli.common import add_json, add_store

    add_store(p)
    if not any("--json" in a.option_strings for a in p._actions):
        add_json(p)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``api`` and ``api-key``."""
    p = subparsers.add_parser("api", help="serve the customer HTTP API (/v1) with uvicorn")
    from typestrict_pipeline import values
    from typestrict_pipeline.cli.common import bounded_int, positive_float, value_type
    from typestrict_pipeline.cli.parser import not_empty

    host = value_type(values.listen_host)
    # an empty value is the one rule of every empty value (parser.not_empty), then the address's
    p.add_argument("--host", default="127.0.0.1", type=lambda text: host(not_empty(text)),
                   help="address to listen on: an IP address or a host name (default 127.0.0.1)")

    # the rule of every whole number of the command line (ASCII digits, bounded): int() took
    # '１２' (full-width digits) as port 12, and '0x10' got argparse's "invalid int value"
    p.add_argument("--port", type=bounded_int("a TCP port", 1, 65535), default=8000,
                   help="TCP port, 1 to 65535 (default 8000)")
    p.add_argument("--workers", type=bounded_int("a number of worker processes", 1, 64), default=1,
                   help="worker processes, 1 to 64 (default 1; more than 1 runs the app factory per worker)")
    p.add_argument("--home", help="TYPESTRICT_HOME (trainings, audits, workspaces' files)")
    p.add_argument("--jev-source", help="Jev's manifest predictions.jev object, as JSON or @FILE")
    from typestrict_pipeline.api.ratelimit import DEFAULT_BURST, DEFAULT_RATE_PER_S

    p.add_argument("--rate-limit", type=positive_float("requests a second", 100_000.0), default=DEFAULT_RATE_PER_S,
                   help=f"requests a second each API key may make, sustained (default {DEFAULT_RATE_PER_S:g}; "
                        "0 turns the limit off)")
    p.add_argument("--rate-burst", type=bounded_int("a burst of requests", 1, 1_000_000), default=DEFAULT_BURST,
                   help=f"requests a key may make at once after a pause (default {DEFAULT_BURST})")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level (default info; requests are not logged)")
    _store_option(p)
    p.set_defaults(func=_serve)

    keys = subparsers.add_parser("api-key", help="API keys per workspace: create, revoke, list")
    sub = keys.add_subparsers(dest="api_key_command", required=True)
    from typestrict_pipeline.cli.common import identifier

    workspace = identifier("a workspace id")  # the rule of every command's workspace
    c = sub.add_parser("create", help="create a key for a workspace (printed once)")
    c.add_argument("workspace", type=workspace, help="the workspace the key belongs to")
    c.add_argument("--label", default="", type=value_type(lambda text: values.check_text(
        text, "an API key's label", max_chars=LABEL_MAX_CHARS, empty=True)),
                   help=f"a note to recognise the key by (at most {LABEL_MAX_CHARS} characters, printed by `api-key list`)")
    _store_option(writes(c))
    c.set_defaults(func=_create)
    r = sub.add_parser("revoke", help="revoke a key by its id (the 16 hex characters after tsk_) or the whole key")
    r.add_argument("key", metavar="KEY_ID_OR_KEY",
                   help="the key's id (the 16 hex characters after tsk_, see `api-key list`) or the whole key; "
                        "nothing of it but the id is ever printed")
    _store_option(writes(r))
    r.set_defaults(func=_revoke)
    ls = sub.add_parser("list", help="a workspace's keys (ids and labels, never the keys)")
    ls.add_argument("workspace", type=workspace, help="the workspace whose keys to list")
    _store_option(ls)
    ls.set_defaults(func=_list)
