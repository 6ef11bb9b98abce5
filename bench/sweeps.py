"""The refund sweeps' shared command line (``bench.sweep_refund_*``): ``--sets`` and ``--only``.

>>> args = sweep_arguments(sweep_parser("Title.\\n", sets=400), ["--only", "Zipf"])
>>> args.sets, args.only
(400, 'Zipf')
"""

from __future__ import annotations

import argparse

#: Most simulated test sets a setting may ask for.
MAX_SETS = 100_000


def sweep_parser(doc: str | None, *, sets: int) -> argparse.ArgumentParser:
    """A parser titled by the first line of ``doc``, with ``--sets`` (default ``sets``) and
    ``--only``; a sweep adds its own options before :func:`sweep_arguments`."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--sets", type=int, default=sets, help="simulated test sets per setting")
    parser.add_argument("--only", default="", help="only the settings whose label contains this")
    return parser


def sweep_arguments(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; ``--sets`` outside 1 to :data:`MAX_SETS` is a usage error (exit 2)."""
    args = parser.parse_args(argv)
    if not 1 <= args.sets <= MAX_SETS:
        parser.error(f"--sets: expected 1 to {MAX_SETS}, got {args.sets}")
    return args
