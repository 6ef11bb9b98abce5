"""Refund: groups in the data, none declared: what any judgement of the rows alone must say.

For each setting, ``--sets`` simulated grouped test sets (the model and seeds of
:mod:`typestrict_pipeline.refund.calibration`; ``shift = 0``, so for new groups the two systems
are exchangeable and the true gain is 0) are judged by the product's
:func:`~typestrict_pipeline.refund.rule.judge_decision` (B = 2,000) twice: without a group
column, as a customer who did not declare one sends them, and with it. Each undeclared "beats"
is then read against the gain that set's own groups give on unlimited examples of them
(:func:`~typestrict_pipeline.refund.calibration.groups_gain`, 50 fresh rows per test row,
in the test set's proportions): the very
same rows are also independent examples of a customer whose future examples come from those
same groups, where the gain is that one and a "beats" with a positive own-groups gain is right.
No function of the rows can tell the two readings apart; only the declared group column does.

Prints one Markdown row per setting (Wilson 95% intervals). Not part of ``make bench``
(about 1.5 s of CPU per set of 2,000 examples).

Run: ``.venv/bin/python -m bench.sweep_refund_undeclared --sets 400``
"""

from __future__ import annotations

import time

from bench.sweeps import sweep_arguments, sweep_parser
from typestrict_pipeline.refund.calibration import (
    Design,
    binomial_interval,
    undeclared_rates,
    zipf_sizes,
)

BASE_SEED = 27_000
"""Set ``i`` of setting ``s`` is drawn with seed ``BASE_SEED + 1000·s + i``."""


def _settings() -> list[tuple[str, Design]]:
    out = [(f"200 groups of 10, rho {rho}", Design(sizes=(10,) * 200, rho=rho))
           for rho in (0.3, 0.5, 0.7)]
    out.append(("100 Zipf groups, 2000 ex, rho 0.5", Design(sizes=zipf_sizes(2000, 100), rho=0.5)))
    return out


def _rate(hits: int, n: int) -> str:
    lo, hi = binomial_interval(hits, n)
    return f"{hits}/{n} = {hits / n:.3f} ({lo:.3f}–{hi:.3f})"


def main(argv: list[str] | None = None) -> int:
    """Print the table (module docstring)."""
    args = sweep_arguments(sweep_parser(__doc__, sets=400), argv)
    print("| setting | beats, no group column | beats, groups declared | undeclared beats whose "
          "own groups gain | own groups gain, all sets | seeds | CPU s |")
    print("|---|---|---|---|---|---|---:|")
    for s, (label, design) in enumerate(_settings()):
        if args.only not in label:
            continue
        t = time.process_time()
        base = BASE_SEED + 1000 * s
        r = undeclared_rates(design, n_sets=args.sets, base_seed=base)
        print(f"| {label} | {_rate(r.beats_undeclared, r.n_sets)} | "
              f"{_rate(r.beats_declared, r.n_sets)} | "
              f"{_rate(r.undeclared_own_groups_gain, max(1, r.beats_undeclared))} | "
              f"{_rate(r.own_groups_gain, r.n_sets)} | {base}–{base + r.n_sets - 1} | "
              f"{time.process_time() - t:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
