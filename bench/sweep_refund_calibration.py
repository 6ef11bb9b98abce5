"""Refund: the larger calibration sweep behind docs/method/refund.md ("Groups: calibration").

For each setting, ``--sets`` simulated test sets of 2,000 examples (see
:mod:`typestrict_pipeline.refund.calibration` for the model and the seeds) are judged by the
product's bootstrap (B = 2,000), resampling whole groups and, on the same sets, single examples;
it prints one Markdown row per setting as soon as it is done, with the Wilson 95% interval of the
Monte Carlo rate. Not part of ``make bench`` (it takes a long time: about 0.5 s of CPU per set).

Run: ``.venv/bin/python -m bench.sweep_refund_calibration --sets 400``
"""

from __future__ import annotations

import sys
import time

from bench.sweeps import sweep_arguments, sweep_parser
from typestrict_pipeline.refund.calibration import (
    Design,
    binomial_interval,
    mean_sizes,
    rates,
    unequal_sizes,
)

N = 2000


def _settings(power: bool) -> list[tuple[str, Design]]:
    equal = (10,) * 200
    unequal = unequal_sizes(N, 36, seed=36)
    out = []
    for rho in (0.0, 0.1, 0.3):
        out.append((f"200 groups of 10, rho {rho}", Design(sizes=equal, rho=rho)))
        out.append((f"{len(unequal)} groups of 1-36, rho {rho}", Design(sizes=unequal, rho=rho)))
    if power:
        # shift 1.0 gives G near +0.12, the size of the demo winners' gain
        for shift in (0.2, 0.3, 1.0):
            out.append((f"{len(unequal)} groups of 1-36, rho 0.1, shift {shift}",
                        Design(sizes=unequal, rho=0.1, shift=shift)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = sweep_parser(__doc__, sets=200)
    parser.add_argument("--no-power", action="store_true", help="only the true-G = 0 settings")
    args = sweep_arguments(parser, argv)
    print(f"{args.sets} simulated test sets of {N} examples per setting, B = 2,000; "
          "base seeds 1000, 2000, ... (one per setting)")
    print("| setting | mean group size | declared, group bootstrap (95% MC interval) | "
          "declared, row bootstrap |")
    print("|---|---:|---:|---:|")
    for j, (label, design) in enumerate(_settings(not args.no_power)):
        if args.only not in label:
            continue
        t = time.process_time()
        r = rates(design, n_sets=args.sets, base_seed=1000 * (j + 1))
        lo, hi = binomial_interval(round(r.group * r.n_sets), r.n_sets)
        assert r.example is not None
        print(f"| {label} | {mean_sizes(design.sizes):.1f} | {100 * r.group:.1f}% "
              f"({100 * lo:.1f}–{100 * hi:.1f}%) | {100 * r.example:.1f}% |  "
              f"<!-- {time.process_time() - t:.0f} s CPU -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
