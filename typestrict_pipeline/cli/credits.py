"""``typestrict credits ...`` (balance, ledger, grant, spend, adjust, models, expire) and
``typestrict audit MODEL_ID``.

Every command takes ``--url`` (default ``TYPESTRICT_STORE_URL``, else the SQLite file under
``TYPESTRICT_HOME``). See ``docs/credits.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from sqlalchemy import Engine

from typestrict_pipeline.credits import (
    CreditLedger,
    audit_bytes,
    expire_models,
    list_models,
)
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import default_store_url, normalize_url, open_store, typestrict_home


def _engine(args: argparse.Namespace) -> Engine:
    return open_store(normalize_url(args.url or default_store_url()))


def _now(value: str | None) -> dt.datetime:
    if not value:
        return dt.datetime.now(dt.UTC)
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InputError(
            "an ISO 8601 time with a zone, e.g. 2026-01-31T04:00:00+00:00", repr(value), "add the zone"
        )
    return parsed.astimezone(dt.UTC)


def _balance(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        ledger = CreditLedger(engine)
        balance = ledger.balance(args.workspace)
        suffix = "" if ledger.has_account(args.workspace) else " (no credit account yet)"
        print(f"workspace {args.workspace}: balance {balance} credit{'s' if balance != 1 else ''}{suffix}")
    finally:
        engine.dispose()
    return 0


def _ledger(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        ledger = CreditLedger(engine)
        lines = ledger.lines(args.workspace, training_id=args.training)
        if args.json:
            for ln in lines:
                print(json.dumps({
                    "id": ln.id, "workspace_id": ln.workspace_id, "kind": ln.kind.value,
                    "reference": ln.reference, "training_id": ln.training_id, "amount": ln.amount,
                    "balance_after": ln.balance_after,
                    "verdict": ln.verdict.value if ln.verdict else None,
                    "reason": ln.reason, "created_at": ln.created_at.isoformat(),
                }, sort_keys=True))
        else:
            for ln in lines:
                print(ln.describe())
            print(f"balance {ledger.balance(args.workspace)} ({len(lines)} entries)")
    finally:
        engine.dispose()
    return 0


def _grant(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        line = CreditLedger(engine).grant(
            args.workspace, args.amount, reference=args.reference, reason=args.reason
        )
        print(line.describe())
    finally:
        engine.dispose()
    return 0


def _spend(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        print(CreditLedger(engine).spend(args.workspace, args.training_id).describe())
    finally:
        engine.dispose()
    return 0


def _adjust(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        line = CreditLedger(engine).adjust(
            args.workspace, args.amount, reference=args.reference, reason=args.reason,
            training_id=args.training,
        )
        print(line.describe())
    finally:
        engine.dispose()
    return 0


def _models(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        for m in list_models(engine, args.workspace):
            files = (f"files until {m.expires_at.isoformat()}" if m.state.value == "available"
                     else f"files expired {m.expired_at.isoformat() if m.expired_at else ''}")
            audit = "audit" if m.audit_sha256 else "no audit"
            print(f"{m.model_id}  {m.verdict.value}  {'delivered' if m.delivered else 'not delivered'}  "
                  f"{files}  {audit}")
    finally:
        engine.dispose()
    return 0


def _expire(args: argparse.Namespace) -> int:
    root = Path(args.trainings_dir) if args.trainings_dir else typestrict_home() / "trainings"
    engine = _engine(args)
    try:
        expired = expire_models(engine, now=_now(args.now), allowed_root=root)
        for m in expired:
            print(f"expired {m.model_id}: deleted {m.files_path}")
        print(f"{len(expired)} model(s) expired")
    finally:
        engine.dispose()
    return 0


def _audit(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        data = audit_bytes(engine, args.model_id)
    finally:
        engine.dispose()
    if args.output:
        Path(args.output).write_bytes(data)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


def _url(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="store URL (default: TYPESTRICT_STORE_URL or the local SQLite file)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``credits`` and ``audit`` to the ``typestrict`` command."""
    credits = subparsers.add_parser("credits", help="the credit ledger: balances, entries, models")
    sub = credits.add_subparsers(dest="credits_command", required=True)

    p = sub.add_parser("balance", help="a workspace's balance in credits")
    p.add_argument("workspace")
    _url(p)
    p.set_defaults(func=_balance)

    p = sub.add_parser("ledger", help="a workspace's ledger entries, oldest first")
    p.add_argument("workspace")
    p.add_argument("--training", help="only this training's entries")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    _url(p)
    p.set_defaults(func=_ledger)

    p = sub.add_parser("grant", help="add credits to a workspace (once per --reference)")
    p.add_argument("workspace")
    p.add_argument("amount", type=int)
    p.add_argument("--reference", required=True, help="idempotency key, e.g. the invoice id")
    p.add_argument("--reason", default="credits added")
    _url(p)
    p.set_defaults(func=_grant)

    p = sub.add_parser("spend", help="charge a training's credit when it starts (once per training)")
    p.add_argument("workspace")
    p.add_argument("training_id")
    _url(p)
    p.set_defaults(func=_spend)

    p = sub.add_parser("adjust", help="a manual correction entry (once per --reference)")
    p.add_argument("workspace")
    p.add_argument("amount", type=int)
    p.add_argument("--reference", required=True, help="idempotency key, e.g. the ticket id")
    p.add_argument("--reason", required=True)
    p.add_argument("--training", help="the training it corrects, if any")
    _url(p)
    p.set_defaults(func=_adjust)

    p = sub.add_parser("models", help="a workspace's model records: verdict, files, audit")
    p.add_argument("workspace")
    _url(p)
    p.set_defaults(func=_models)

    p = sub.add_parser("expire", help="run the retention sweep now (what retention_schedule does)")
    p.add_argument("--now", help="the sweep's time, ISO 8601 with a zone (default: now)")
    p.add_argument("--trainings-dir", help="refuse to delete outside it (default: ${TYPESTRICT_HOME}/trainings)")
    _url(p)
    p.set_defaults(func=_expire)

    if "audit" not in subparsers.choices:
        p = subparsers.add_parser(
            "audit", help="print a model's audit JSON, byte-identical to its audit file (any time)"
        )
        p.add_argument("model_id", help="the model id (the training id)")
        p.add_argument("-o", "--output", help="write to this file instead of stdout")
        _url(p)
        p.set_defaults(func=_audit)
