"""`python -m demo`: run every part of the demo in order on the embedded default.

Everything is written under ``.typestrict/demo`` (a local Dagster home with SQLite storage and a
SQLite domain store), which is recreated on each run so the demo always starts clean.
"""

import importlib
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

PARTS = ("refund", "credits", "backtest", "study", "reruns")


def main() -> int:
    root = Path(".typestrict/demo").resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    started = time.perf_counter()
    for name in PARTS:
        try:
            module = importlib.import_module(f"demo.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"demo.{name}":
                continue
            raise
        run: Callable[[Path], int] = module.run  # every part exposes run(root) -> exit code
        code = run(root)
        if code != 0:
            print(f"demo part {name!r} failed with exit code {code}", file=sys.stderr)
            return code
    print(f"\nmake demo: finished in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
