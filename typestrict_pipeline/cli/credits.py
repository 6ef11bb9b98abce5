"""``typestrict credits ...`` (balance, ledger, grant, spend, adjust, models, expire) and
``typestrict audit MODEL_ID``.

Every command takes ``--store URL`` (default ``TYPESTRICT_STORE_URL``, else the SQLite file under
``TYPESTRICT_HOME``); the reads (balance, ledger, models) take ``--json`` and refuse an unknown
workspace. See ``docs/credits.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline import values
from typestrict_pipeline.cli.common import (
    Wrote,
    add_json,
    add_store,
    bounded_int,
    identifier,
    now_option,
    print_json,
    print_table,
    read_store,
    say_wrote,
    shown_store,
    store_url,
    value_type,
    write_store,
    writes,
)
from typestrict_pipeline.credits import (
    CreditLedger,
    audit_bytes,
    list_models,
    sweep_retention,
)
from typestrict_pipeline.credits.ledger import MAX_CREDITS_PER_ENTRY
from typestrict_pipeline.credits.models import dagster_storage_from_env, pipeline_value_roots
from typestrict_pipeline.errors import InputError, NotFoundError
from typestrict_pipeline.files import loads_strict
from typestrict_pipeline.store import typestrict_home, utcnow
from typestrict_pipeline.workspaces import require_workspace

WORKSPACE = value_type(values.workspace_id)
TRAINING = identifier("a training id")
REFERENCE = identifier("a reference (e.g. an invoice id)")
# The ledger's bound on one entry (credits.ledger.MAX_CREDITS_PER_ENTRY), read before the store opens.
AMOUNT = bounded_int("an amount of credits", 1, MAX_CREDITS_PER_ENTRY)
SIGNED_AMOUNT = bounded_int("an amount of credits", -MAX_CREDITS_PER_ENTRY, MAX_CREDITS_PER_ENTRY)


def _engine(args: argparse.Namespace) -> Engine:
    return write_store(args)


def _reader(args: argparse.Namespace) -> Engine:
    """The store for a read about ``args.workspace``: it must exist and know the workspace."""
    engine = read_store(args)
    try:
        require_workspace(engine, args.workspace)
    except BaseException:
        engine.dispose()
        raise
    return engine




def _balance(args: argparse.Namespace) -> int:
    engine = _reader(args)
    try:
        ledger = CreditLedger(engine)
        balance = ledger.balance(args.workspace)
        has = ledger.has_account(args.workspace)
        if args.json:
            print_json({"workspace": args.workspace, "balance": balance, "has_account": has})
            return 0
        suffix = "" if has else " (no credit account yet)"
        print(f"workspace {args.workspace}: balance {balance} credit{'s' if balance != 1 else ''}{suffix}")
    finally:
        engine.dispose()
    return 0


def _ledger(args: argparse.Namespace) -> int:
    engine = _reader(args)
    try:
        ledger = CreditLedger(engine)
        lines = ledger.lines(args.workspace, training_id=args.training)
        if args.training and not lines:
            raise NotFoundError(f"expected ledger entries of training {args.training!r} in workspace "
                                f"{args.workspace!r}, got none. List the workspace's entries with "
                                f"`typestrict credits ledger {args.workspace}`.")
        if args.json:
            for ln in lines:
                print(json.dumps(_line_json(ln), sort_keys=True))
        else:
            print_table(f"Ledger of workspace {args.workspace}",
                        ["#", "time (UTC)", "kind", "amount", "balance", "training", "verdict", "reason"],
                        [[ln.id, ln.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
                          ln.kind.value, f"{ln.amount:+d}", ln.balance_after, ln.training_id or "",
                          ln.verdict.value if ln.verdict else "", ln.reason] for ln in lines],
                        right=["#", "amount", "balance"])
            print(f"balance {ledger.balance(args.workspace)} ({len(lines)} entries)")
    finally:
        engine.dispose()
    return 0


def _line_json(ln: Any) -> dict[str, Any]:
    """A ledger entry as JSON-ready values."""
    return {
        "id": ln.id, "workspace_id": ln.workspace_id, "kind": ln.kind.value,
        "reference": ln.reference, "training_id": ln.training_id, "amount": ln.amount,
        "balance_after": ln.balance_after,
        "verdict": ln.verdict.value if ln.verdict else None,
        "reason": ln.reason, "created_at": ln.created_at.isoformat(),
        "audit_sha256": ln.audit_sha256,
    }


def _say_line(args: argparse.Namespace, line: Any, now: dt.datetime) -> None:
    """What a command that writes one ledger entry prints: the entry, in words or as JSON, and
    what it wrote (nothing when the entry was there before: grants, adjustments and spends are
    written once per reference or training, and a repeat returns the first entry)."""
    store = shown_store(store_url(args))
    if line.created_at == now:
        wrote = Wrote(f"ledger entry #{line.id} ({line.kind.value} {line.amount:+d}, workspace "
                      f"{line.workspace_id})", (str(line.id),), store=store)
    else:
        key = f"training {line.training_id}" if line.kind.value == "spend" else f"reference {line.reference}"
        wrote = Wrote(f"ledger entry #{line.id} of {key} was written before, at "
                      f"{line.created_at.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}", (), store=store)
    if args.json:
        print(json.dumps({**_line_json(line), "wrote": wrote.to_json()}, sort_keys=True))
    else:
        print(line.describe())
        say_wrote(args, wrote)


def _grant(args: argparse.Namespace) -> int:
    engine = _engine(args)
    now = utcnow()
    try:
        line = CreditLedger(engine).grant(
            args.workspace, args.amount, reference=args.reference, reason=args.reason, now=now
        )
        _say_line(args, line, now)
    finally:
        engine.dispose()
    return 0


def _spend(args: argparse.Namespace) -> int:
    engine = _engine(args)
    now = utcnow()
    try:
        _say_line(args, CreditLedger(engine).spend(args.workspace, args.training_id, now=now), now)
    finally:
        engine.dispose()
    return 0


def _adjust(args: argparse.Namespace) -> int:
    engine = _engine(args)
    now = utcnow()
    try:
        line = CreditLedger(engine).adjust(
            args.workspace, args.amount, reference=args.reference, reason=args.reason,
            training_id=args.training, now=now,
        )
        _say_line(args, line, now)
    finally:
        engine.dispose()
    return 0


def _unlabeled(engine: Engine, model_id: str, has_audit: bool) -> dict[str, tuple[int, str]]:
    """Each decision's unlabeled rows (count, words) from the model's stored audit (``credits
    models`` only: the dataset module brings pyarrow, which no other credits command needs)."""
    from typestrict_pipeline.refund.dataset import unlabeled_from_split

    if not has_audit:
        return {}
    try:
        doc = loads_strict(audit_bytes(engine, model_id).decode("utf-8"), file="audit")
    except (InputError, NotFoundError, UnicodeDecodeError):
        return {}
    return unlabeled_from_split(doc.get("split") if isinstance(doc, dict) else None)


def _models(args: argparse.Namespace) -> int:
    engine = _reader(args)
    try:
        models = list_models(engine, args.workspace)
        unlabeled = {m.model_id: _unlabeled(engine, m.model_id, m.audit_sha256 is not None)
                     for m in models}
        if args.json:
            print_json([{
                "model_id": m.model_id, "verdict": m.verdict.value, "delivered": m.delivered,
                "state": m.state.value, "expires_at": m.expires_at, "expired_at": m.expired_at,
                "audit_sha256": m.audit_sha256,
                "unlabeled": {d: {"rows": n, "why": why}
                              for d, (n, why) in unlabeled[m.model_id].items()},
            } for m in models])
            return 0
        rows = []
        for m in models:
            files = (f"until {m.expires_at.isoformat()}" if m.state.value == "available"
                     else f"expired {m.expired_at.isoformat() if m.expired_at else ''}")
            rows.append([m.model_id, m.verdict.value, "yes" if m.delivered else "no", files,
                         "yes" if m.audit_sha256 else "no",
                         ", ".join(f"{d}: {n}" for d, (n, _) in unlabeled[m.model_id].items())])
        print_table(f"Models of workspace {args.workspace}",
                    ["model", "verdict", "delivered", "files", "audit", "unlabeled rows"], rows)
        if any(n for found in unlabeled.values() for n, _ in found.values()):
            print("unlabeled rows: their answer cell is empty (the texts NA, null, None are "
                  "answers); they are not in the holdout")
    finally:
        engine.dispose()
    return 0


def _expire(args: argparse.Namespace) -> int:
    root = Path(args.trainings_dir) if args.trainings_dir else typestrict_home() / "trainings"
    storage = Path(args.dagster_storage) if args.dagster_storage else dagster_storage_from_env()
    engine = _engine(args)
    try:
        sweep = sweep_retention(engine, now=args.now or dt.datetime.now(dt.UTC), trainings_dir=root,
                                value_roots=pipeline_value_roots(storage))
        expired = sweep.expired
        ids = tuple(m.model_id for m in expired)
        store = shown_store(store_url(args))
        wrote = (Wrote(f"the expiry of model(s) {', '.join(ids)} (their files deleted)", ids, store=store,
                       files=tuple(str(m.files_path) for m in expired)) if ids
                 else Wrote("no model was due to expire", (), store=store))
        if args.json:
            print_json({"expired": [{"model_id": m.model_id, "deleted": str(m.files_path)} for m in expired],
                        "cleared": [{"training_id": t, "deleted": str(root / t)} for t in sweep.cleared],
                        "orphans": [str(root / name) for name in sweep.orphans],
                        "wrote": wrote.to_json()})
            return 0
        for m in expired:
            print(f"expired {m.model_id}: deleted {m.files_path} and the training's data "
                  f"(kept its manifest and audit)")
        for t in sweep.cleared:
            print(f"cleared {t} (ended without a model): deleted its data in {root / t} (kept its manifest)")
        for name in sweep.orphans:
            print(f"removed {root / name}: left by a creation whose process died before its charge")
        print(f"{len(expired)} model(s) expired"
              + (f", {len(sweep.cleared)} ended training(s) cleared" if sweep.cleared else "")
              + (f", {len(sweep.orphans)} leftover(s) of creations removed" if sweep.orphans else ""))
        say_wrote(args, wrote)
    finally:
        engine.dispose()
    return 0


def _audit(args: argparse.Namespace) -> int:
    engine = read_store(args)
    try:
        data = audit_bytes(engine, args.model_id)
    finally:
        engine.dispose()
    if args.output:
        _write_output(args.output, data)
        _say_written(args, data)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


def _write_output(output: str, data: bytes) -> None:
    """Write ``audit -o FILE`` whole or not at all (:func:`write_atomic`): a failure midway (a
    full disk, a file size limit) leaves the file as it was, never the audit's first bytes in
    place of the old file. A path that is not a regular file (``/dev/null``, a FIFO, a folder)
    or whose folder does not exist is refused before anything is written."""
    from typestrict_pipeline.files import special_kind, write_atomic

    path = Path(output)
    kind = special_kind(path)
    if kind is not None:
        raise InputError("a file path that can be written (a regular file)", f"{output!r}, {kind}",
                         "pick another --output, or leave -o out to print the audit")
    if not path.parent.is_dir():
        raise InputError("a file path that can be written", f"{output!r}, whose folder does not exist",
                         "create the folder, or pick another --output")
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise InputError("a file path that can be written", f"{output!r} ({exc.strerror})",
                         "pick another --output") from None


def _say_written(args: argparse.Namespace, data: bytes) -> None:
    """What ``audit -o FILE`` wrote: the file, its size and SHA-256, the verdict and why."""

    from typestrict_pipeline.refund.explain import verdict_sentence_from_audit

    digest = hashlib.sha256(data).hexdigest()
    doc: Any = None
    try:
        doc = json.loads(data)
        verdict, why = str(doc["overall"]["verdict"]), verdict_sentence_from_audit(doc)
    except (ValueError, KeyError, TypeError):  # an audit of a format this version cannot read
        verdict, why = "?", ""
    wrote = Wrote(f"the audit of {args.model_id}", (args.model_id,), files=(args.output,),
                  detail=f"({len(data):,} bytes, SHA-256 {digest}); verdict {verdict}. {why}".rstrip())
    if args.json:
        print_json({"model_id": args.model_id, "path": str(Path(args.output).resolve()), "bytes": len(data),
                    "sha256": digest, "verdict": verdict, "why": why, "wrote": wrote.to_json()})
        return
    say_wrote(args, wrote)
    # the digest is the one settled (the ledger's): --expect-sha256 checks it is that file
    from typestrict_pipeline.verify_audit import needs_large

    large = "--large " if needs_large(doc) else ""  # else the command fails: "re-run with --large"
    print(f"check it: python3 typestrict_pipeline/verify_audit.py {large}--expect-sha256 {digest} "
          f"{args.output}")


def _reason(text: str) -> str:
    if not text.strip() or len(text) > 500 or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"expected a reason of 1 to 500 printable characters, got {len(text)} characters")
    return text


def _storage_folder(text: str) -> str:
    """``--dagster-storage``: an existing folder. A typo or a file was taken without a word, and
    the sweep then left every expired training's stored values (the customer's texts) in place."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected the Dagster instance's storage folder (${{DAGSTER_HOME}}/storage), got {text!r}, "
            f"{'a file' if path.exists() else 'which does not exist'}. Check the path, or leave the option "
            "out to use DAGSTER_HOME's")
    return text


def _url(p: argparse.ArgumentParser) -> None:
    add_store(p)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``credits`` and ``audit`` to the ``typestrict`` command."""
    credits = subparsers.add_parser("credits", help="the credit ledger: balances, entries, models")
    sub = credits.add_subparsers(dest="credits_command", required=True)

    p = sub.add_parser("balance", help="a workspace's balance in credits")
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id, e.g. demo")
    add_json(p)
    _url(p)
    p.set_defaults(func=_balance)

    p = sub.add_parser("ledger", help="a workspace's ledger entries, oldest first")
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id, e.g. demo")
    p.add_argument("--training", type=TRAINING, help="only this training's entries")
    p.add_argument("--json", action="store_true", help="one JSON object per line (exact numbers)")
    _url(p)
    p.set_defaults(func=_ledger)

    p = writes(sub.add_parser("grant", help="add credits to a workspace (once per --reference)"))
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id")
    p.add_argument("amount", type=AMOUNT, help=f"credits to add, 1 to {MAX_CREDITS_PER_ENTRY:,}")
    p.add_argument("--reference", type=REFERENCE, required=True, help="idempotency key, e.g. the invoice id")
    p.add_argument("--reason", type=_reason, default="credits added", help="why, in words (default: credits added)")
    add_json(p)
    _url(p)
    p.set_defaults(func=_grant)

    p = writes(sub.add_parser("spend", help="charge a training's credit when it starts (once per training)"))
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id")
    p.add_argument("training_id", type=TRAINING, help="the training that starts")
    add_json(p)
    _url(p)
    p.set_defaults(func=_spend)

    p = writes(sub.add_parser("adjust", help="a manual correction entry (once per --reference)"))
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id")
    p.add_argument("amount", type=SIGNED_AMOUNT, help=f"signed change in credits, ±{MAX_CREDITS_PER_ENTRY:,} at most")
    p.add_argument("--reference", type=REFERENCE, required=True, help="idempotency key, e.g. the ticket id")
    p.add_argument("--reason", type=_reason, required=True, help="why, in words")
    p.add_argument("--training", type=TRAINING, help="the training it corrects, if any")
    add_json(p)
    _url(p)
    p.set_defaults(func=_adjust)

    p = sub.add_parser("models", help="a workspace's model records: verdict, files, audit")
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id, e.g. demo")
    add_json(p)
    _url(p)
    p.set_defaults(func=_models)

    p = writes(sub.add_parser("expire", help="run the retention sweep now (what retention_schedule does)"))
    p.add_argument("--now", type=now_option, help="the sweep's time, ISO 8601 with a zone (default: now)")
    p.add_argument("--trainings-dir", help="refuse to delete outside it (default: ${TYPESTRICT_HOME}/trainings)")
    p.add_argument("--dagster-storage", type=_storage_folder, help="the Dagster instance's storage folder, whose values of each "
                   "expired training are deleted too (default: ${DAGSTER_HOME}/storage when DAGSTER_HOME is set)")
    add_json(p)
    _url(p)
    p.set_defaults(func=_expire)

    if "audit" not in subparsers.choices:
        p = writes(subparsers.add_parser(  # with -o: the file
            "audit", help="print a model's audit JSON, byte-identical to its audit file (any time)"
        ))
        p.add_argument("model_id", type=TRAINING, help="the model id (the training id), e.g. rt-tfidf")
        p.add_argument("-o", "--output", help="write to this file instead of stdout (and say what was written)")
        p.add_argument("--json", action="store_true",
                       help="with -o: what was written, as JSON (without -o the audit itself is JSON)")
        _url(p)
        p.set_defaults(func=_audit)
