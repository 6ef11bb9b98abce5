"""``typestrict verify AUDIT.json``: check a refund audit file (the same code as verify_audit.py).

``--model MODEL_ID`` checks the audit the store (``--store``) keeps for that model instead of a
file; ``--json`` prints the result as one JSON object (the differences, the verdict and the
verdict's sentence).

``typestrict split MANIFEST.json``: read and check a training's dataset and show its split (a bar
on a terminal while a large file is read).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from typestrict_pipeline.cli.common import add_json, add_store, identifier, read_store
from typestrict_pipeline.errors import InputError

if TYPE_CHECKING:  # the command imports the refund's modules when it runs (cli.COMMANDS)
    from typestrict_pipeline.refund.dataset import Dataset
    from typestrict_pipeline.refund.holdout import Holdout


def _stored_audit(args: argparse.Namespace) -> str:
    """The model's stored audit, written to a private temporary file; its path."""
    from typestrict_pipeline.credits import audit_bytes

    engine = read_store(args)
    try:
        data = audit_bytes(engine, args.model)
    finally:
        engine.dispose()
    fd, path = tempfile.mkstemp(prefix=f"audit-{args.model}-", suffix=".json")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _json_result(path: str, shown: str, large: bool) -> int:
    from typestrict_pipeline import verify_audit
    from typestrict_pipeline.refund.explain import verdict_sentence_from_audit

    out: dict[str, Any] = {"audit": shown}
    try:
        audit = verify_audit.load(path)
        diffs = verify_audit.verify(audit, large=large)
    except verify_audit.Unreadable as exc:  # nothing checked: the verifier's exit 4, as without --json
        print(json.dumps({**out, "ok": False, "valid": None, "error": str(exc)}, indent=2))
        return verify_audit.EXIT_CANNOT_CHECK
    except verify_audit.Malformed as exc:
        print(json.dumps({**out, "ok": False, "valid": False, "error": str(exc)}, indent=2))
        return 2
    except (RecursionError, TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        print(json.dumps({**out, "ok": False, "valid": False,
                          "error": f"unexpected structure ({type(exc).__name__})"}, indent=2))
        return 2
    overall = audit["overall"]
    out.update({"ok": not diffs, "valid": True, "differences": diffs, "verdict": overall.get("verdict"),
                "settling_decision": overall.get("settling_decision")})
    if not diffs:
        from typestrict_pipeline.refund.grouping import resampling_lines_from_audit

        out["why"] = verdict_sentence_from_audit(audit)
        out["resampling_unit"] = resampling_lines_from_audit(audit)
    print(json.dumps(out, indent=2))
    return 0 if not diffs else 1


def _verify(args: argparse.Namespace) -> int:
    from typestrict_pipeline import verify_audit

    if (args.audit is None) == (args.model is None):
        raise InputError("an audit file or --model MODEL_ID (one of them)",
                         "both" if args.audit else "neither", "pass AUDIT.json, or --model rt-tiny")
    path = args.audit or _stored_audit(args)
    shown = args.audit or f"the stored audit of {args.model}"
    try:
        if args.json:
            return _json_result(path, shown, args.large)
        code = verify_audit.main([*(["--large"] if args.large else []), path])
        if code == 0:  # the verdict in words, under the verifier's own line
            from typestrict_pipeline.refund.explain import verdict_sentence_from_audit
            from typestrict_pipeline.refund.grouping import resampling_lines_from_audit

            doc = verify_audit.load(path)
            print(verdict_sentence_from_audit(doc))
            unit = resampling_lines_from_audit(doc)
            if unit:
                print(unit)
        return code
    finally:
        if args.audit is None:
            os.unlink(path)


def _nothing_to_train_on(dataset: Dataset, holdouts: Sequence[Holdout]) -> str | None:
    """Why no row is left to train on (the refusal of a training's creation through the API,
    the console and ``training check``, :func:`~typestrict_pipeline.refund.holdout.check_something_to_train_on`),
    or None when some row is: the split shows it (its train column all 0) with the reason."""
    from typestrict_pipeline.errors import DatasetError
    from typestrict_pipeline.refund.holdout import check_something_to_train_on, training_mask

    if training_mask(holdouts).any():
        return None
    try:
        check_something_to_train_on(dataset)
    except DatasetError as exc:
        return str(exc)
    return None


def _split(args: argparse.Namespace) -> int:
    from typestrict_pipeline.cli.common import print_json, print_table, progress
    from typestrict_pipeline.progress import Progress
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.grouping import grouping_lines, resampling_line, scan_dataset
    from typestrict_pipeline.refund.holdout import split_decisions
    from typestrict_pipeline.refund.manifest import load_manifest
    from typestrict_pipeline.refund.runreads import reads_within

    manifest = load_manifest(args.manifest)
    with contextlib.ExitStack() as stack:
        bar: dict[str, Any] = {}

        def report(p: Progress) -> None:
            if "update" not in bar and p.total:
                bar["update"] = stack.enter_context(progress(p.total, p.what))
            if "update" in bar:
                bar["update"](p.done)

        with reads_within():  # the validation's pass keeps the ids and texts for the split
            dataset = load_dataset(manifest, progress=report)
            holdouts = split_decisions(dataset)
            nothing = _nothing_to_train_on(dataset, holdouts)
    # Before anything is judged: the unit the verdict will resample, and signs of groups the
    # manifest does not declare (refund/grouping.py; warnings only, no number changes).
    scan = scan_dataset(manifest)
    group = manifest.dataset.columns.group
    summaries = [{**h.summary.as_dict(), "group": group,
                  "grouping_warnings": [w.as_dict() for w in scan.warnings]} for h in holdouts]
    if args.json:
        print_json(summaries)
        return 0
    print(f"group column: {group!r}" if group is not None else "group column: none declared")
    print(resampling_line([(h.decision, "example" if group is None else "group", None)
                           for h in holdouts], group))
    for line in grouping_lines(scan):
        print(line)
    if nothing is not None:
        print(f"warning: {nothing}")
    print_table(None, ["decision", "source", "rows", "labeled", "test", "train", "excluded",
                 "test groups", "capped", "seed"],
                [[s["decision"], s["source"], s["n_rows"], s["n_labeled"], s["n_test"],
                  s["n_train"], s["n_excluded"], s["groups_test"], "yes" if s["capped"] else "no",
                  s["seed_sha256"][:16]] for s in summaries])
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``verify`` and ``split`` sub-commands."""
    from typestrict_pipeline import verify_audit as va

    exits = (va.EXIT_OK, va.EXIT_DIFFERS, va.EXIT_MALFORMED, va.EXIT_CANNOT_CHECK)  # no --expect-sha256 here
    verify = subparsers.add_parser(
        "verify",
        help="rebuild a refund audit file's numbers and verdict, exactly",
        description=(
            "Rebuild every number of a refund audit file from its rows (seed, resamples, "
            "metrics, G, 5th percentile, margins, the 2/3 rule, the verdict) and compare them "
            "exactly. Same code as the standalone verify_audit.py, and its exit status: "
            + "; ".join(f"{code}: {va.EXIT_CODES[code]}" for code in exits)
            + ". A wrong command line of this command is 2, as every command's."
        ),
    )
    verify.add_argument("audit", metavar="AUDIT.json", nargs="?", help="the audit file")
    verify.add_argument("--model", type=identifier("a model id"), metavar="MODEL_ID",
                        help="check the audit the store (--store) keeps for this model instead of a file")
    verify.add_argument(
        "--large",
        action="store_true",
        help="verify an audit past the default bounds (more than 4,000 test examples or 80,000 "
        "examples x answers in all); slower",
    )
    add_json(add_store(verify))
    verify.set_defaults(func=_verify)

    split = subparsers.add_parser(
        "split",
        help="read and check a training's dataset; show each decision's held-out test examples",
        description=(
            "Read the dataset a training manifest names (CSV, Parquet or JSON Lines, in bounded "
            "batches), check every cell as the verdict does, and show each decision's split: "
            "the test examples held out, the training rows, the seed. Nothing is written. A "
            "progress bar on a terminal while a Parquet file is read."
        ),
    )
    split.add_argument("manifest", metavar="MANIFEST.json", help="the training manifest")
    # --store is accepted like everywhere (the split reads the manifest's files, not the store).
    add_json(add_store(split))
    split.set_defaults(func=_split)
