"""Run every ``bench/bench_*.py`` module's ``main()`` in turn."""

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.name.startswith("bench_"):
            print(f"== bench/{info.name}.py")
            importlib.import_module(f"bench.{info.name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
