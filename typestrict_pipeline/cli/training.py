"""``typestrict training ...``: where a training is, its predictions, cancel, and its deadlines.

* ``list WORKSPACE [--json]``: the workspace's trainings with their state (docs/lifecycle.md),
  deadline and reason.
* ``show TRAINING_ID [--json]``: one training: state, deadline, reason, verdict.
* ``submit TRAINING_ID PREDICTIONS.jsonl [--trained-on-sha256 HEX]``: the model's predictions,
  checked against the split in full before anything is stored (the same code as
  ``POST /v1/trainings/{id}/predictions``); accepted while the training awaits its predictions
  or after a refusal (``failed``).
* ``cancel TRAINING_ID``: before it is judged; its credit comes back.
* ``check TRAINING_ID``: what ``training_sensor`` checks before it requests a verdict run (a
  training registered by its manifest): the first problem, or that it fits.
* ``expire [--now ISO]``: end every training whose deadline has passed, now (what
  ``lifecycle_sensor`` does on its own); each one's credit comes back once.

The store is ``--store`` (default ``TYPESTRICT_STORE_URL``, else ``store.db`` under
``TYPESTRICT_HOME``); the trainings folder is ``${TYPESTRICT_HOME}/trainings``.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from typestrict_pipeline import values
from typestrict_pipeline.cli.common import (
    Wrote,
    add_json,
    add_store,
    identifier,
    now_option,
    print_json,
    print_table,
    say_wrote,
    shown_store,
    store_url,
    value_type,
    write_store,
    writes,
)
from typestrict_pipeline.errors import NotFoundError
from typestrict_pipeline.store import typestrict_home
from typestrict_pipeline.workspaces import require_workspace

TRAINING = identifier("a training id")
WORKSPACE = value_type(values.workspace_id)


def _when(value: dt.datetime | None) -> str:
    return "" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _store_of(engine: Any) -> Any:
    from typestrict_pipeline.api.trainings import TrainingStore
    from typestrict_pipeline.lifecycle.trainings import CLI_WORDS

    # never creates: no Jev needed; its refusals say what to do in the CLI's words
    return TrainingStore(typestrict_home(), engine, {}, words=CLI_WORDS)


def _workspace_of(engine: Any, training_id: str) -> str:
    """The training's workspace: from its lifecycle row, else its manifest or draft (read by the
    rule of every JSON file, :func:`read_json_file`: a FIFO in its place hung the command)."""
    from typestrict_pipeline.errors import InputError
    from typestrict_pipeline.files import read_json_file
    from typestrict_pipeline.lifecycle.trainings import training_status

    found = training_status(engine, training_id)
    if found is not None:
        return found.workspace_id
    folder = typestrict_home() / "trainings" / training_id
    for name in ("manifest.json", "api-draft.json"):
        try:
            doc = read_json_file(folder / name)
        except InputError:  # missing, not a regular file, not JSON: the next one, else none
            continue
        if isinstance(doc, dict) and isinstance(doc.get("workspace_id"), str):
            return str(doc["workspace_id"])
    raise NotFoundError(f"expected a training with id {training_id!r} in the store or under "
                        f"{folder.parent}, got none. List them with `typestrict training list WORKSPACE`")


def _row(training_id: str, view: Any) -> dict[str, Any]:
    return {
        "id": training_id, "state": view.state.value,
        "deadline_at": _when(view.deadline_at) or None, "reason": view.reason,
        "verdict": None if view.model is None else view.model.verdict.value,
        "submissions": 0 if view.status is None else view.status.submissions,
    }


def _list(args: argparse.Namespace) -> int:
    engine = write_store(args)  # reading applies a passed deadline first
    try:
        store = _store_of(engine)
        views = store.views(args.workspace, store.list_ids(args.workspace))  # one sweep, two queries
        rows = [_row(t, view) for t, view in views.items()]
        if not rows:  # an unknown workspace is a typo or the wrong store, not an empty list
            require_workspace(engine, args.workspace)
    finally:
        engine.dispose()
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"workspace {args.workspace} has no trainings")
        return 0
    print_table(f"Trainings of workspace {args.workspace}", ["id", "state", "deadline", "verdict", "reason"],
                [[r["id"], r["state"], r["deadline_at"] or "", r["verdict"] or "", (r["reason"] or "")[:120]]
                 for r in rows])
    return 0


def _show(args: argparse.Namespace) -> int:
    engine = write_store(args)
    try:
        workspace = _workspace_of(engine, args.training_id)
        row = _row(args.training_id, _store_of(engine).view(workspace, args.training_id))
    finally:
        engine.dispose()
    if args.json:
        print_json({**row, "workspace_id": workspace})
        return 0
    print(f"training {row['id']} (workspace {workspace}): {row['state']}")
    if row["deadline_at"]:
        print(f"  deadline        {row['deadline_at']} (then it expires and its credit comes back)")
    if row["verdict"]:
        print(f"  verdict         {row['verdict']}")
    if row["reason"]:
        print(f"  reason          {row['reason']}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    from typestrict_pipeline.files import read_data_file

    path = Path(args.predictions)
    # the rule of every data file: never a FIFO or a device, bounded; a name the system refuses
    # (too long) was "unexpected error OSError ... This is a bug"
    data = read_data_file(path, what="a predictions file (JSON lines, docs/manifest.md)", text=False)
    engine = write_store(args)
    try:
        workspace = _workspace_of(engine, args.training_id)
        store = _store_of(engine)
        store.submit(workspace, args.training_id, data, args.trained_on_sha256, source=str(path))
        view = store.view(workspace, args.training_id)
    finally:
        engine.dispose()
    from typestrict_pipeline.api.trainings import MODEL_PREDICTIONS

    wrote = Wrote(f"the predictions of training {args.training_id} (now {view.state.value})", (args.training_id,),
                  store=shown_store(store_url(args)),
                  files=(str(typestrict_home() / "trainings" / args.training_id / MODEL_PREDICTIONS),))
    if args.json:
        print_json({"training_id": args.training_id, "state": view.state.value,
                    "deadline_at": _when(view.deadline_at), "wrote": wrote.to_json()})
        return 0
    print(f"training {args.training_id}: predictions accepted; {view.state.value} (verdict by "
          f"{_when(view.deadline_at)}, else it expires and its credit comes back)")
    say_wrote(args, wrote)
    return 0


TRAINED_ON_FIX = ("state the SHA-256 of exactly the training rows of the split (their ids sorted, joined by a "
                  "line feed, UTF-8), or leave --trained-on-sha256 out; the verdict is not computed for a "
                  "model that may have seen test rows")


def _sha256(text: str) -> str:
    """``--trained-on-sha256``: 64 hexadecimal characters, read with the command line."""
    import re

    from typestrict_pipeline.errors import InputError

    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        raise InputError("--trained-on-sha256 as 64 hexadecimal characters (a SHA-256)", values.shown(text, 80),
                         TRAINED_ON_FIX)
    return text


def _cancel(args: argparse.Namespace) -> int:
    engine = write_store(args)
    try:
        workspace = _workspace_of(engine, args.training_id)
        ended = _store_of(engine).cancel(workspace, args.training_id)
    finally:
        engine.dispose()
    credit = "its credit came back" if ended.refunded else "no credit moved"
    wrote = Wrote(f"the cancellation of training {ended.training_id} ({credit})", (ended.training_id,),
                  store=shown_store(store_url(args)))
    if args.json:
        print_json({"training_id": ended.training_id, "state": "cancelled", "reason": ended.reason,
                    "refunded": ended.refunded, "wrote": wrote.to_json()})
        return 0
    print(f"training {ended.training_id}: cancelled ({ended.reason}); {credit}")
    say_wrote(args, wrote)
    return 0


def _check(args: argparse.Namespace) -> int:
    from typestrict_pipeline.refund.manifest import load_manifest
    from typestrict_pipeline.refund.preflight import screen_training

    manifest = load_manifest(typestrict_home() / "trainings" / args.training_id / "manifest.json")
    problem = screen_training(manifest, max_bytes=2**63)
    if args.json:
        print_json({"training_id": args.training_id, "fits": problem is None, "problem": problem})
        return 0 if problem is None else 1
    if problem is not None:
        print(f"training {args.training_id}: refused before any run: {problem}")
        return 1
    print(f"training {args.training_id}: its dataset and predictions fit its split")
    return 0


def _expire(args: argparse.Namespace) -> int:
    from typestrict_pipeline.lifecycle.trainings import expire_due, ledger_balance

    now = args.now
    engine = write_store(args)
    try:
        ended = expire_due(engine, now=now, trainings_dir=typestrict_home() / "trainings")
        balance = ledger_balance(engine)
    finally:
        engine.dispose()
    ids = tuple(e.training_id for e in ended)
    store = shown_store(store_url(args))
    wrote = (Wrote(f"the expiry of training(s) {', '.join(ids)}", ids, store=store) if ids
             else Wrote("no training was past its deadline", (), store=store))
    if args.json:
        print_json({"expired": [{"training_id": e.training_id, "workspace_id": e.workspace_id,
                                 "was": e.was.value, "reason": e.reason, "refunded": e.refunded}
                                for e in ended],
                    "ledger": balance.describe(), "balanced": balance.balanced, "wrote": wrote.to_json()})
        return 0 if balance.balanced else 1
    for e in ended:
        print(f"training {e.training_id} ({e.workspace_id}): expired, was {e.was.value}: {e.reason}; "
              + ("its credit came back" if e.refunded else "it was never charged"))
    print(f"{len(ended)} training(s) expired; ledger: {balance.describe()}")
    say_wrote(args, wrote)
    return 0 if balance.balanced else 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``training``."""
    training = subparsers.add_parser("training", help="trainings: state, predictions, cancel, deadlines")
    sub = training.add_subparsers(dest="training_command", required=True)

    p = add_json(add_store(sub.add_parser("list", help="a workspace's trainings and their states")))
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id")
    p.set_defaults(func=_list)

    p = add_json(add_store(sub.add_parser("show", help="one training: state, deadline, reason, verdict")))
    p.add_argument("training_id", type=TRAINING, help="the training id")
    p.set_defaults(func=_show)

    p = writes(add_json(add_store(sub.add_parser(
        "submit", help="the model's predictions, checked against the split before anything is stored"))))
    p.add_argument("training_id", type=TRAINING, help="the training id")
    p.add_argument("predictions", metavar="PREDICTIONS.jsonl", help="the model's predictions (JSON lines)")
    p.add_argument("--trained-on-sha256", type=value_type(_sha256),
                   help="SHA-256 of the ids the model was trained on (see the split)")
    p.set_defaults(func=_submit)

    p = writes(add_json(add_store(sub.add_parser(
        "cancel", help="cancel a training before it is judged (its credit comes back)"))))
    p.add_argument("training_id", type=TRAINING, help="the training id")
    p.set_defaults(func=_cancel)

    # --store is accepted like everywhere (the check reads the training's files, not the store).
    p = add_json(add_store(sub.add_parser(
        "check", help="what training_sensor checks before requesting a verdict run")))
    p.add_argument("training_id", type=TRAINING, help="the training id (its folder under the trainings folder)")
    p.set_defaults(func=_check)

    p = writes(add_json(add_store(sub.add_parser(
        "expire", help="end the trainings whose deadline has passed (credit back)"))))
    p.add_argument("--now", type=now_option, help="the time to expire at (ISO 8601 with a zone; default now)")
    p.set_defaults(func=_expire)


__all__ = ["register"]
