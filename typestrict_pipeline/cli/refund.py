"""``typestrict verify AUDIT.json``: check a refund audit file (the same code as verify_audit.py).
``typestrict split MANIFEST.json``: read and check a training's dataset and show its split (a bar
on a terminal while a large file is read)."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any


def _verify(args: argparse.Namespace) -> int:
    from typestrict_pipeline import verify_audit

    return verify_audit.main([*(["--large"] if args.large else []), args.audit])


def _split(args: argparse.Namespace) -> int:
    from typestrict_pipeline.cli.common import print_json, print_table, progress
    from typestrict_pipeline.progress import Progress
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.holdout import split_decisions
    from typestrict_pipeline.refund.manifest import load_manifest

    manifest = load_manifest(args.manifest)
    with contextlib.ExitStack() as stack:
        bar: dict[str, Any] = {}

        def report(p: Progress) -> None:
            if "update" not in bar and p.total:
                bar["update"] = stack.enter_context(progress(p.total, p.what))
            if "update" in bar:
                bar["update"](p.done)

        holdouts = split_decisions(load_dataset(manifest, progress=report))
    summaries = [h.summary.as_dict() for h in holdouts]
    if args.json:
        print_json(summaries)
        return 0
    print_table(None, ["decision", "source", "rows", "labeled", "test", "train", "excluded",
                 "test groups", "capped", "seed"],
                [[s["decision"], s["source"], s["n_rows"], s["n_labeled"], s["n_test"],
                  s["n_train"], s["n_excluded"], s["groups_test"], "yes" if s["capped"] else "no",
                  s["seed_sha256"][:16]] for s in summaries])
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``verify`` and ``split`` sub-commands."""
    verify = subparsers.add_parser(
        "verify",
        help="rebuild a refund audit file's numbers and verdict, exactly",
        description=(
            "Rebuild every number of a refund audit file from its rows (seed, resamples, "
            "metrics, G, 5th percentile, margins, the 2/3 rule, the verdict) and compare them "
            "exactly. Exit 0 when all match, 1 when anything differs, 2 when the file is not "
            "an audit. Same code as the standalone verify_audit.py."
        ),
    )
    verify.add_argument("audit", metavar="AUDIT.json", help="the audit file")
    verify.add_argument(
        "--large",
        action="store_true",
        help="verify an audit past the default bounds (more than 4,000 test examples or 80,000 "
        "examples x answers in all); slower",
    )
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
    split.add_argument("--json", action="store_true",
                       help="print each decision's split summary as JSON (exact numbers)")
    split.set_defaults(func=_split)
