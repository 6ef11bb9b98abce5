"""Run every ``bench/bench_*.py`` module's ``main()`` in turn, then list every target.

Writes ``bench/results/latest.json`` (see :mod:`bench.summary`); ``python -m bench.render``
turns it into the table of docs/benchmarks.md. Long benchmarks run a reduced configuration by
default; ``TYPESTRICT_BENCH_FULL=1`` runs the full ones (docs/benchmarks.md says which).

Each module runs in a fresh interpreter (``python -m bench.<module>``): a module that sets
``DAGSTER_HOME``/``TYPESTRICT_HOME`` or leaves a server thread behind cannot change the next
module's figures (per-process CPU seconds count every thread of the process).
"""

import pkgutil
import subprocess
import sys
import time
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
            code = subprocess.run([sys.executable, "-m", f"bench.{info.name}"],
                                  cwd=here.parent, check=False).returncode
            if code != 0:  # one broken benchmark must not lose the others' figures
                summary.row(info.name, f"{info.name} finished", f"failed: exit code {code}",
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
