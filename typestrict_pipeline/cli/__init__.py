"""The ``typestrict`` command line.

Each area adds its sub-commands in its own module under ``typestrict_pipeline/cli/`` through a
``register(subparsers)`` function, listed in ``_AREAS`` below. Nothing is imported from Dagster
here unless a sub-command needs it, so ``typestrict verify`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from typestrict_pipeline.errors import TypeStrictError

# Modules under typestrict_pipeline.cli that define register(subparsers).
_AREAS = ("refund", "credits", "store", "backtest", "study", "schedule", "data")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="typestrict",
        description="Refund verdicts against Jev, backtests and studies.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for area in _AREAS:
        try:
            module = importlib.import_module(f"typestrict_pipeline.cli.{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"typestrict_pipeline.cli.{area}":
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``typestrict``; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except TypeStrictError as exc:
        print(f"typestrict: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
