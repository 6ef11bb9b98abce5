"""Refund: few or unequal groups, the sweep behind docs/method/refund.md ("Few or unequal groups").

For each setting, ``--sets`` simulated grouped test sets (the model and seeds of
:mod:`typestrict_pipeline.refund.calibration`: intra-group correlation ``rho`` of each system's
latent quality; with ``shift = 0`` the two systems are exchangeable, so every "beats" is a false
yes) are judged end to end by the product's :func:`~typestrict_pipeline.refund.rule.judge_decision`
(B = 2,000). It prints one Markdown row per setting as soon as it is done: the false (or, with a
shift, true) "beats" rate with the group check (audit format 4) and what the group bootstrap's
q05 alone said (formats 2 and 3), each with its Wilson 95% Monte Carlo interval. Group sizes:
equal, or Zipf (proportional to ``1/rank**s``, :func:`~typestrict_pipeline.refund.calibration.zipf_sizes`).
Not part of ``make bench`` (about 0.02 s of CPU per set of 200 examples, 0.25 s per set of 2,000).

Run: ``.venv/bin/python -m bench.sweep_refund_cluster_calibration --sets 400``
(``--only "2000 ex"`` for the settings whose label contains that text).
"""

from __future__ import annotations

import sys
import time

from bench.sweeps import sweep_arguments, sweep_parser
from typestrict_pipeline.refund.calibration import (
    Design,
    binomial_interval,
    unequal_sizes,
    verdict_rates,
    zipf_sizes,
)


def _settings() -> list[tuple[str, Design]]:
    out: list[tuple[str, Design]] = []
    for rho in (0.1, 0.3):
        out.append((f"10 equal groups, 2000 ex, rho {rho}", Design(sizes=(200,) * 10, rho=rho)))
        for g in (10, 20, 100):
            out.append((f"{g} Zipf groups, 2000 ex, rho {rho}",
                        Design(sizes=zipf_sizes(2000, g), rho=rho)))
    for rho in (0.0, 0.3, 0.6):
        for g in (10, 20, 50):
            out.append((f"{g} Zipf groups, 200 ex, rho {rho}",
                        Design(sizes=zipf_sizes(200, g), rho=rho)))
        out.append((f"20 Zipf(s=1.5) groups, 200 ex, rho {rho}",
                    Design(sizes=zipf_sizes(200, 20, exponent=1.5), rho=rho)))
    for shift in (0.5, 1.0):
        for g in (10, 20):
            out.append((f"power: {g} Zipf groups, 2000 ex, rho 0.3, shift {shift}",
                        Design(sizes=zipf_sizes(2000, g), rho=0.3, shift=shift)))
            out.append((f"power: {g} Zipf groups, 200 ex, rho 0.3, shift {shift}",
                        Design(sizes=zipf_sizes(200, g), rho=0.3, shift=shift)))
    # many unequal groups: the earlier sweep's power setting (docs/method/refund.md, "Groups")
    many = unequal_sizes(2000, 36, seed=36)
    for shift in (0.0, 0.3):
        out.append((f"{'power: ' if shift else ''}{len(many)} groups of 1-36, 2000 ex, rho 0.1, "
                    f"shift {shift}", Design(sizes=many, rho=0.1, shift=shift)))
    # settings the group check was not built on (2026-12-07; appended, so the settings above
    # keep their seeds): bimodal sizes, more answers, a steeper Zipf, few large groups
    unseen = [("15 groups of 2 + 15 of 130, 1980 ex, rho 0.5", (2,) * 15 + (130,) * 15, 0.5, 2),
              ("40 groups of 50, 2000 ex, rho 0.2, 5 answers", (50,) * 40, 0.2, 5),
              ("15 Zipf(s=1.5) groups, 2000 ex, rho 0.4", zipf_sizes(2000, 15, exponent=1.5), 0.4, 2),
              ("12 groups of 160, 1920 ex, rho 0.8, 3 answers", (160,) * 12, 0.8, 3)]
    for shift in (0.0, 0.5):
        for label, sizes, rho, k in unseen:
            out.append((f"{'power: ' if shift else ''}unseen: {label}, shift {shift}",
                        Design(sizes=sizes, rho=rho, shift=shift, n_answers=k)))
    return out


def _rate(hits: int, n: int) -> str:
    lo, hi = binomial_interval(hits, n)
    return f"{100 * hits / n:.1f}% ({100 * lo:.1f}–{100 * hi:.1f}%)"


def main(argv: list[str] | None = None) -> int:
    args = sweep_arguments(sweep_parser(__doc__, sets=400), argv)
    print(f"{args.sets} simulated test sets per setting, judged by judge_decision (B = 2,000); "
          "base seeds 5,000,000 + 100,000 x setting")
    print("| setting | G_eff | 'beats' with the group check (95% MC) | "
          "q05 alone (formats 2-3) (95% MC) | check with t(G-1) instead |")
    print("|---|---:|---:|---:|---:|")
    for j, (label, design) in enumerate(_settings()):
        if args.only not in label:
            continue
        t = time.process_time()
        r = verdict_rates(design, n_sets=args.sets, base_seed=5_000_000 + 100_000 * j)
        n = sum(design.sizes)
        g_eff = n * n // sum(s * s for s in design.sizes)
        print(f"| {label} | {g_eff} | {_rate(r.beats, r.n_sets)} | "
              f"{_rate(r.beats_without_check, r.n_sets)} | "
              f"{100 * r.beats_t_all_groups / r.n_sets:.1f}% |  "
              f"<!-- {time.process_time() - t:.0f} s CPU -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
