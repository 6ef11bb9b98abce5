"""``typestrict verify AUDIT.json``: check a refund audit file (the same code as verify_audit.py)."""

from __future__ import annotations

import argparse


def _verify(args: argparse.Namespace) -> int:
    from typestrict_pipeline import verify_audit

    return verify_audit.main([*(["--large"] if args.large else []), args.audit])


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``verify`` sub-command."""
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
