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

Parts: ``nw``, ``spa``, ``gate``, ``lineage``, ``power``, ``twins``, ``rows``, ``memory``,
``span``, ``unseen``; ``--quick`` runs a few cells of each; ``--process NAME`` (repeatable) keeps
the size parts and ``unseen`` to the named processes of ``battery.PROCESSES``. The tables in ``docs/method/studies.md`` §3.4 come from this script.

``twins`` splits the regime cells that stay above 7% by the regime switches their window saw
(the joint test: the search window; the gate: from the search's last step to the holdout's
end), and runs each beside its never-switching twin (``battery.never_switching``: the same
candidates, each edge constant for good), where a "yes" is right: a window without a switch is
drawn from exactly the twin's distribution, so the twin's rate is what any test with that
power says on such windows. ``floor`` = share of windows without a switch × the twin's rate
(for the gate the twin's search never switches either, so its rate is an upper reading; the
last column, the "yes" said in windows without a switch, is the gate's own reading).

``rows`` re-runs the rows of issue #27's table, each cell pooled over three seeds (the battery's
seed for the cell, then 1 and 2: ``--sims`` × 3 replications), and marks whether it meets the
issue's bar: a point rate ≤ 7% and the upper end of its 95% interval ≤ 8.5% (``meets``), else
``open``. The refund's rows have their own sweeps (``bench.sweep_refund_cluster_calibration``,
``bench.sweep_refund_undeclared``).

``memory`` runs the four claims on long memory (``battery.fractional_block``, ARFIMA(0, d, 0)
at d = 0.2 and 0.3), whose autocovariances are not summable: only a pooled spectrum reads it
(``dependence.memory_fit``); a single series' estimates still read it as short memory. Its
rates are reported beside issue #27's bar, not held to it (docs/method/studies.md §3.4,
"Round 12").

``span`` maps where a persistent part stops being measurable in one window: the one-sided
Newey–West size on a single series of white noise plus a share ``w`` of AR(``φ``) (``w`` 5–50%,
``φ`` 0.90–0.99, T 60–1,000; seeds ``3000 + T + 100·φ + 1000·w``, rounded down). It is reported
beside issue #27's bar, not held to it: where the part takes longer than the window to
decorrelate it sits in the window's mean, the span limit of docs/method/studies.md §10.

``unseen`` runs the four claims on five processes the methods were not built on
(:data:`UNSEEN_PROCESSES`: rare ±6 SD jumps, an oscillating AR(2), persistence that switches
on and off by regime, near-duplicate candidates, skewed lognormal shocks; docs/method/studies.md
§3.4, "Round 18"), each size cell (``--sims`` null replications) printed beside a power cell
(half as many, at least 10) in one row: Newey–West at T 120 and 480 (power: a per-step edge of
2.49/√T, 2.49 SEs of white noise, as in ``power``), "beats luck" at 16 × 240 with 199
resamples (power: one candidate 1 SD better), the gate at H 60 with 8 candidates (power: every
candidate 0.5 SD better) and the lineage over 10 looks of H 60 carrying an 8 × 120 search
(power: an edge of 0.3 SD). Seeds: ``UNSEEN_SEED`` (6000) + the bench's offset for the cell
(T; N + T; H; looks), power cells ``UNSEEN_SEED`` + 500 + the same. ``--quick``: the Newey–West
T 120 row of each process only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from functools import partial

from typestrict_pipeline.study.battery import (
    PROCESSES,
    Process,
    Rate,
    by_switches,
    clopper_pearson,
    gate_rate,
    lineage_rate,
    never_switching,
    newey_west_rate,
    spa_rate,
)

PARTS = ("nw", "spa", "gate", "lineage", "power", "twins", "rows", "memory", "span", "unseen")
#: The ``unseen`` part's processes (round 18), and the base of its seeds.
UNSEEN_PROCESSES = ("jumps", "AR(2) 1.2/−0.5", "switching persistence", "near-duplicates AR(0.7)",
                    "lognormal AR(0.5)")
UNSEEN_SEED = 6000
#: The ``span`` part's grid: shares of the persistent part, its AR coefficients, window lengths.
SPAN_WEIGHTS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
SPAN_PHIS = (0.9, 0.95, 0.97, 0.98, 0.99)
SPAN_STEPS = (60, 120, 240, 480, 1000)
#: The ``memory`` part's processes.
MEMORY_PROCESSES = ("long memory d=0.2", "long memory d=0.3")
#: Seeds a ``rows`` cell pools after its battery seed.
ROW_SEEDS = (1, 2)
SIZE_PROCESSES = ("white", "AR(0.6)", "AR(0.9)", "mixture", "mixture 20% AR(0.98)", "regimes",
                  "regimes, AR(0.5)", "regimes, 120 steps", "heavy AR(0.5)", "GARCH",
                  "factor AR(0.9)",
                  "uneven: 10% AR(0.95)", "uneven: half AR(0.9)", "weekly AR(0.8)",
                  "volatility regimes", "MA(−0.6) + 15% AR(0.97)")


def _cells(part: str, sims: int, quick: bool,
           only: tuple[str, ...] = ()) -> Iterator[Callable[[], Rate]]:
    procs = only or (SIZE_PROCESSES[:4] if quick else SIZE_PROCESSES)
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
    elif part == "memory":
        yield from _memory_cells(sims, quick)
    elif part == "span":
        yield from _span_cells(sims, quick)


def _span_cells(sims: int, quick: bool) -> Iterator[Callable[[], Rate]]:
    """The ``span`` part: Newey–West's one-sided size over white noise plus ``w`` AR(``φ``)."""
    for w in SPAN_WEIGHTS[1:2] if quick else SPAN_WEIGHTS:
        for phi in SPAN_PHIS[2:3] if quick else SPAN_PHIS:
            process = Process(f"{w:.0%} AR({phi})", kind="mixture", phi=phi, weight=w)
            for t in SPAN_STEPS[1:2] if quick else SPAN_STEPS:
                yield partial(newey_west_rate, process, t, sims, int(3000 + t + 100 * phi + 1000 * w))


def _memory_cells(sims: int, quick: bool) -> Iterator[Callable[[], Rate]]:
    """The ``memory`` part: each claim on long memory, at the battery's seeds for the cell."""
    for name in MEMORY_PROCESSES[1:] if quick else MEMORY_PROCESSES:
        process = PROCESSES[name]
        for t in ((120,) if quick else (60, 120, 480, 1000)):
            yield partial(newey_west_rate, process, t, sims, 3000 + t)
        for n, t in (((4, 120),) if quick else ((4, 120), (64, 120), (4, 480), (64, 480))):
            yield partial(spa_rate, process, n, t, sims, 1000 + n + t, reps=299)
        for h in ((60,) if quick else (20, 60, 120)):
            yield partial(gate_rate, process, h, sims, 4000 + h)
        for h, looks in (((60, 10),) if quick else ((60, 10), (20, 50))):
            yield partial(lineage_rate, process, h, looks, sims, 5000 + looks)


def _unseen_pairs(sims: int, quick: bool,
                  only: tuple[str, ...] = ()) -> Iterator[tuple[Callable[[], Rate], Callable[[], Rate]]]:
    """The ``unseen`` part's (size cell, power cell) pairs (module docstring)."""
    base, power_sims = UNSEEN_SEED, max(10, sims // 2)
    for name in only or UNSEEN_PROCESSES:
        p = PROCESSES[name]
        for t in ((120,) if quick else (120, 480)):
            yield (partial(newey_west_rate, p, t, sims, base + t),
                   partial(newey_west_rate, p, t, power_sims, base + 500 + t, edge=2.49 / t ** 0.5))
        if quick:
            continue
        yield (partial(spa_rate, p, 16, 240, sims, base + 16 + 240, reps=199),
               partial(spa_rate, p, 16, 240, power_sims, base + 500 + 16 + 240, edge=1.0,
                       reps=199))
        yield (partial(gate_rate, p, 60, sims, base + 60, n=8),
               partial(gate_rate, p, 60, power_sims, base + 500 + 60, n=8, edge=0.5))
        yield (partial(lineage_rate, p, 60, 10, sims, base + 10, search=(8, 120)),
               partial(lineage_rate, p, 60, 10, power_sims, base + 500 + 10, edge=0.3,
                       search=(8, 120)))


def beside_row(size: Rate, power: Rate, cpu: float) -> str:
    """One ``unseen`` row: a size cell and, beside it, its power cell (``FAIL``: the size fails).

    >>> print(beside_row(Rate("c", "p", 1, 120, 2, 400, 6120),
    ...                  Rate("c", "p", 1, 120, 80, 200, 6620, edge=0.227), 3.2))
    | c | p | 1 | 120 | 0.005 (0.001–0.018) of 400 | 6120 | edge 0.227: 0.400 (0.332–0.471) of 200, seed 6620 | 3 |
    """
    lo, hi = size.interval
    plo, phi = power.interval
    flag = " FAIL" if size.fails else ""
    return (f"| {size.claim} | {size.process} | {size.n} | {size.t} | {size.rate:.3f} "
            f"({lo:.3f}–{hi:.3f}) of {size.trials} | {size.seed} | edge {power.edge:.3g}: "
            f"{power.rate:.3f} ({plo:.3f}–{phi:.3f}) of {power.trials}, seed {power.seed} | "
            f"{cpu:.0f} |{flag}")


def unseen(sims: int, quick: bool, only: tuple[str, ...] = ()) -> Iterator[str]:
    """The ``unseen`` part's rows, each as soon as its two cells are done."""
    for size_cell, power_cell in _unseen_pairs(sims, quick, only):
        t = time.process_time()
        size, power = size_cell(), power_cell()
        yield beside_row(size, power, time.process_time() - t)


def _split_row(r: Rate, outcomes: list[tuple[int, bool]], twin: Rate) -> str:
    """One row of the ``twins`` table: the cell, its rate by switches, its twin and the floor."""
    parts = []
    for key, (hits, trials) in by_switches(outcomes).items():
        if trials:
            lo, hi = clopper_pearson(hits, trials)
            parts.append(f"{key}: {hits}/{trials} = {hits / trials:.3f} ({lo:.3f}–{hi:.3f})")
    hits0, trials0 = by_switches(outcomes)["0"]
    quiet = trials0 / len(outcomes)
    lo, hi = twin.interval
    return (f"| {r.claim} | {r.process} | {r.n} | {r.t} | {r.rate:.3f} ({r.trials}, seed {r.seed})"
            f" | {'; '.join(parts)} | {twin.rate:.3f} ({lo:.3f}–{hi:.3f}; seed {twin.seed}) | "
            f"{quiet:.3f} × {twin.rate:.3f} = {quiet * twin.rate:.3f} | "
            f"{hits0}/{len(outcomes)} = {hits0 / len(outcomes):.3f} |")


def twins(sims: int, quick: bool) -> Iterator[str]:
    """The ``twins`` part's rows (module docstring): the open regime cells of the joint test
    (N 4, 16, 64 at T = 120; seeds 1000 + N + T as in ``spa``) and of the gate (H 60, 120;
    seeds 4000 + H as in ``gate``), each beside its never-switching twin (seeds + 500)."""
    regimes = PROCESSES["regimes"]
    twin = never_switching(regimes)
    for n in ((16,) if quick else (4, 16, 64)):
        seen: list[tuple[int, bool]] = []
        r = spa_rate(regimes, n, 120, sims, 1000 + n + 120, reps=299, outcomes=seen)
        yield _split_row(r, seen, spa_rate(twin, n, 120, sims, 1500 + n + 120, reps=299))
    for h in ((60,) if quick else (60, 120)):
        seen = []
        r = gate_rate(regimes, h, sims, 4000 + h, outcomes=seen)
        yield _split_row(r, seen, gate_rate(twin, h, sims, 4500 + h))


def _row_cells(quick: bool) -> Iterator[tuple[Callable[..., Rate], int]]:
    """Issue #27's table as (cell of a seed, battery seed) pairs, in the table's order."""
    ns, ts = ((4,), (120,)) if quick else ((4, 16, 64), (120, 480, 1000))
    for name in ("regimes", "mixture"):
        for n in ns:
            for t in ts:
                yield partial(spa_rate, PROCESSES[name], n, t, reps=299), 1000 + n + t
    for name, t in ((("mixture", 60), ("regimes", 60)) if quick else
                    (("mixture", 60), ("mixture", 120), ("mixture", 1000), ("AR(0.9)", 60),
                     ("regimes", 60), ("regimes", 120), ("regimes", 1000))):
        yield partial(newey_west_rate, PROCESSES[name], t), 3000 + t
    for name, h in ((("regimes", 60),) if quick else
                    (("mixture", 60), ("mixture", 120), ("regimes", 20), ("regimes", 60),
                     ("regimes", 120), ("AR(0.9)", 60), ("AR(0.6)", 20))):
        yield partial(gate_rate, PROCESSES[name], h), 4000 + h
    for name, h in ((("regimes", 60),) if quick else
                    (("AR(0.6)", 20), ("AR(0.9)", 60), ("regimes", 60), ("regimes", 120),
                     ("mixture", 60))):
        for looks in ((10,) if quick else (10, 50)):
            yield partial(lineage_rate, PROCESSES[name], h, looks), 5000 + looks


def pooled_row(cell: Callable[..., Rate], seed: int, sims: int) -> str:
    """One ``rows`` line: ``cell`` at ``seed`` and at :data:`ROW_SEEDS`, pooled, with the bar."""
    rates = [cell(sims=sims, seed=s) for s in (seed, *ROW_SEEDS)]
    hits, trials = sum(r.hits for r in rates), sum(r.trials for r in rates)
    lo, hi = clopper_pearson(hits, trials)
    r = rates[0]
    bar = "meets" if hits / trials <= 0.07 and hi <= 0.085 else "open"
    each = " / ".join(f"{x.hits}" for x in rates)
    seeds = " / ".join(str(s) for s in (seed, *ROW_SEEDS))
    return (f"| {r.claim} | {r.process} | {r.n} | {r.t} | {hits / trials:.3f} | {lo:.3f}–{hi:.3f} "
            f"| {trials} | {each} of {r.trials} at seeds {seeds} | {bar} |")


def main(argv: list[str] | None = None) -> int:
    """Print the battery's tables (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", action="append", choices=PARTS)
    parser.add_argument("--sims", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--process", action="append", default=[], metavar="NAME",
                        help="keep the size parts to this process of battery.PROCESSES "
                             "(repeatable; default: every process of the part)")
    args = parser.parse_args(argv)
    if not 10 <= args.sims <= 100_000:
        parser.error(f"--sims: expected 10 to 100000, got {args.sims}")
    unknown = [name for name in args.process if name not in PROCESSES]
    if unknown:
        parser.error(f"--process: expected one of {', '.join(PROCESSES)}, got {unknown[0]!r}")
    started = time.process_time()
    for part in args.part or list(PARTS):
        print(f"\n# {part} ({args.sims} replications a cell)\n")
        if part == "rows":
            print("| claim | process | N | T or H | rate | 95% interval | replications | hits by "
                  "seed | issue #27's bar |")
            print("|---|---|---:|---:|---:|---|---:|---|---|")
            for cell, seed in _row_cells(args.quick):
                print(pooled_row(cell, seed, args.sims), flush=True)
            continue
        if part == "unseen":
            print("| claim | process | N | T or H | rate (95% interval) of replications | seed | "
                  "power: edge (SD), rate (95% interval) of replications, seed | CPU s |")
            print("|---|---|---:|---:|---|---:|---|---:|")
            for row in unseen(args.sims, args.quick, tuple(args.process)):
                print(row, flush=True)
            continue
        if part == "twins":
            print("| claim | process | N | T or H | rate (replications, seed) | by regime switches "
                  "in the window | never-switching twin | floor | said in windows without a "
                  "switch, of all |")
            print("|---|---|---:|---:|---|---|---|---|---|")
            for row in twins(args.sims, args.quick):
                print(row, flush=True)
            continue
        print("| claim | process | N | T or H | edge (SD) | rate | 95% interval | replications "
              "| seed | CPU s |")
        print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
        for cell in _cells(part, args.sims, args.quick, tuple(args.process)):
            t = time.process_time()
            r = cell()
            flag = " FAIL" if r.fails else ""
            print(f"{r.row()} {time.process_time() - t:.0f} |{flag}", flush=True)
    print(f"\n(CPU {time.process_time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
