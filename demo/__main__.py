"""`python -m demo [--replace]` (`make demo`): run every part of the demo, in order, on the embedded default.

Everything is written into the default home, ``TYPESTRICT_HOME`` (``./.typestrict`` when unset):
the SQLite store ``store.db``, the Dagster home ``dagster_home/`` (SQLite storage), the demo's
trainings and audits. So the README's commands (``.venv/bin/typestrict credits balance demo``,
``make ui``, ...) see the demo's state without any setting. One store per home: every part
writes to ``<home>/store.db``.

A re-run replaces only what the previous demo made and keeps everything else; it refuses when
the store or the Dagster history changed since (see ``demo/home.py``), unless ``--replace``
(``make demo REPLACE=1``).
"""

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from demo import home as demo_home
from demo import runs

PARTS = ("refund", "credits", "backtest", "study", "reruns")


def _say_plan(p: demo_home.HomePlan, replace: bool) -> bool:
    """Print what the run replaces and keeps; False when it must stop."""
    print(f"make demo: writing into {p.home} (TYPESTRICT_HOME, default ./.typestrict)")
    if p.blockers and not replace:
        print("make demo: stopped, nothing was deleted. Since the previous demo"
              + (f" ({p.previous})" if p.previous else "") + " this home changed:", file=sys.stderr)
        for b in p.blockers:
            print(f"  - {b}", file=sys.stderr)
        print("The demo would replace the store and the Dagster history, and lose that. Keep them by "
              "setting another home (TYPESTRICT_HOME=/some/where make demo), or replace them with:\n"
              "  make demo REPLACE=1", file=sys.stderr)
        return False
    if p.replaces:
        print("  replaces the previous demo's " + (f"({p.previous}) " if p.previous else "")
              + ", ".join(p.replaces))
    if p.blockers:
        print("  REPLACE=1: also drops " + "; ".join(p.blockers))
    if p.keeps:
        print("  keeps what it did not make: " + ", ".join(p.keeps))
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.splitlines()[0])
    parser.add_argument("--replace", action="store_true",
                        help="replace the demo's store and Dagster history even if they changed since")
    args = parser.parse_args(argv)
    runs.remember_stop_signals()  # before any Dagster call changes them
    from typestrict_pipeline.demo_data.build import DEMO_TRAININGS
    from typestrict_pipeline.store import typestrict_home

    if os.environ.pop("TYPESTRICT_STORE_URL", None):
        print("make demo: TYPESTRICT_STORE_URL is ignored; the demo uses the SQLite store of its home")
    root = typestrict_home()
    ids = [t.training_id for t in DEMO_TRAININGS]
    if not _say_plan(demo_home.plan(root, ids), args.replace):
        return 2
    demo_home.clear(root, ids)
    root.mkdir(parents=True, exist_ok=True)
    os.environ["TYPESTRICT_HOME"] = str(root)
    os.environ["DAGSTER_HOME"] = str(root / "dagster_home")
    started = time.perf_counter()
    for name in PARTS:
        try:
            module = importlib.import_module(f"demo.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"demo.{name}":
                continue
            raise
        run: Callable[[Path], int] = module.run  # every part exposes run(root) -> exit code
        try:
            code = run(root)  # its Dagster runs go through demo.runs.execute: stoppable
        except KeyboardInterrupt:
            print(f"\nmake demo: stopped during part {name!r} (a stop signal). The home keeps what was "
                  "written so far; run `make demo` again to rebuild it.", file=sys.stderr)
            return 130
        if code != 0:
            print(f"demo part {name!r} failed with exit code {code}", file=sys.stderr)
            return code
    demo_home.finish(root, ids)
    print(f"\nmake demo: finished in {time.perf_counter() - started:.1f} s. Next: `make ui` for the "
          "Dagster UI, and the commands of the README's \"Using it\" table, e.g. "
          "`.venv/bin/typestrict credits balance demo`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
