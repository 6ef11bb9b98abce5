"""Run every ``bench/bench_*.py`` module's ``main()`` in turn, then list every target.

Writes ``bench/results/latest.json`` (see :mod:`bench.summary`); ``python -m bench.render``
turns it into the table of docs/benchmarks.md. Long benchmarks run a reduced configuration by
default; ``TYPESTRICT_BENCH_FULL=1`` runs the full ones (docs/benchmarks.md says which).
"""

import importlib
import pkgutil
import sys
import time
import traceback
from pathlib import Path

from bench import summary


def main() -> int:
    here = Path(__file__).parent
    started = time.perf_counter()
    summary.start_run()
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.name.startswith("bench_"):
            t = time.perf_counter()
            print(f"== bench/{info.name}.py", flush=True)
            try:
                importlib.import_module(f"bench.{info.name}").main()
            except Exception as exc:  # one broken benchmark must not lose the others' figures
                traceback.print_exc()
                summary.row(info.name, f"{info.name} finished", f"failed: {type(exc).__name__}: {exc}",
                            target="runs to the end", ok=False)
            print(f"   ({time.perf_counter() - t:.0f} s)", flush=True)
    elapsed = time.perf_counter() - started
    summary.end_run(elapsed)
    print(f"\n== targets ({elapsed / 60:.1f} min in all; summary in {summary.results_path()})")
    for r in summary.targets():
        print(f"[{r['status']}] {r['what']}: {r['ours']} (target {r['target']}; {r['ratio']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
