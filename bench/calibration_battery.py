"""The studies' calibration battery, large grid (issue #27): sizes and power of every "yes".

Every cell goes through the public functions the product calls (``typestrict_pipeline.study.
battery``): "Beats luck at 5%" (``joint_inference``), the one-sided Newey–West test
(``newey_west_se``), the promotion gate (``promote.gate_decision`` with the search's measured
dependence and stability) and the lineage's always-valid line (``confidence_sequence_path``
over the SEs the runner stores). Each rate is printed with its replications, its exact 95%
interval and its seed, as a Markdown row, as soon as it is done; a size cell **fails** when
its point rate is above 8% at ≥ 400 replications (marked ``FAIL``). Not part of ``make bench``
(it takes long): run it at low priority on a shared machine,

    nice -n 10 .venv/bin/python -m bench.calibration_battery --part nw --sims 400

Parts: ``nw``, ``spa``, ``gate``, ``lineage``, ``power``; ``--quick`` runs a few cells of each.
The tables in ``docs/method/studies.md`` §3.4 come from this script.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from functools import partial

from typestrict_pipeline.study.battery import (
    PROCESSES,
    Rate,
    gate_rate,
    lineage_rate,
    newey_west_rate,
    spa_rate,
)

PARTS = ("nw", "spa", "gate", "lineage", "power")
SIZE_PROCESSES = ("white", "AR(0.6)", "AR(0.9)", "mixture", "mixture 20% AR(0.98)", "regimes",
                  "regimes, AR(0.5)", "regimes, 120 steps", "heavy AR(0.5)", "GARCH",
                  "factor AR(0.9)",
                  "uneven: 10% AR(0.95)")


def _cells(part: str, sims: int, quick: bool) -> Iterator[Callable[[], Rate]]:
    procs = SIZE_PROCESSES[:4] if quick else SIZE_PROCESSES
    if part == "nw":
        for name in procs:
            for t in ((60, 1000) if quick else (20, 60, 120, 480, 1000)):
                yield partial(newey_west_rate, PROCESSES[name], t, sims, 3000 + t)
    elif part == "spa":
        for name in procs:
            for n in ((4, 64) if quick else (4, 16, 64, 512)):
                for t in ((120,) if quick else (60, 120, 480, 1000)):
                    if n == 512 and t > 480:
                        continue
                    yield partial(spa_rate, PROCESSES[name], n, t, sims, 1000 + n + t, reps=299)
    elif part == "gate":
        for name in procs:
            for h in ((60,) if quick else (20, 60, 120)):
                yield partial(gate_rate, PROCESSES[name], h, sims, 4000 + h)
    elif part == "lineage":
        for name in procs:
            for h in ((20, 60) if quick else (20, 60, 120)):
                for looks in ((10,) if quick else (10, 50)):
                    yield partial(lineage_rate, PROCESSES[name], h, looks, sims, 5000 + looks)
    elif part == "power":
        for n, t, edge in ((4, 120, 1.0), (4, 480, 0.5), (64, 120, 1.0), (64, 480, 0.5),
                           (64, 480, 1.0)):
            for name in ("white", "AR(0.6)", "AR(0.9)"):
                yield partial(spa_rate, PROCESSES[name], n, t, sims, 2000 + t, edge=edge, reps=299)
        for name in ("white", "AR(0.6)", "AR(0.9)", "mixture"):
            yield partial(newey_west_rate, PROCESSES[name], 120, sims, 3120,
                          edge=2.49 / 120 ** 0.5)
            yield partial(gate_rate, PROCESSES[name], 60, sims, 4060, edge=0.5)
            yield partial(lineage_rate, PROCESSES[name], 60, 10, sims, 5010, edge=0.3)


def main(argv: list[str] | None = None) -> int:
    """Print the battery's tables (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", action="append", choices=PARTS)
    parser.add_argument("--sims", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if not 10 <= args.sims <= 100_000:
        parser.error(f"--sims: expected 10 to 100000, got {args.sims}")
    started = time.process_time()
    for part in args.part or list(PARTS):
        print(f"\n# {part} ({args.sims} replications a cell)\n")
        print("| claim | process | N | T or H | edge (SD) | rate | 95% interval | replications "
              "| seed | CPU s |")
        print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
        for cell in _cells(part, args.sims, args.quick):
            t = time.process_time()
            r = cell()
            flag = " FAIL" if r.fails else ""
            print(f"{r.row()} {time.process_time() - t:.0f} |{flag}", flush=True)
    print(f"\n(CPU {time.process_time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
