"""Calibration of the study statistics by simulation: the scenarios, and the rates they give.

Used by the seeded tests (``tests/test_study_calibration.py``, small) and by the full sweep
(``python -m typestrict_pipeline.study.calibration``, minutes; its output is the table in
``docs/method/studies.md`` §3.2). Every draw comes from ``numpy.random.default_rng(seed)`` with
the seed printed beside the result.

A null search: ``N`` candidates with the same true score 0.5 over ``T`` out-of-sample steps,
``s_{i,t} = 0.5 + 0.1·(√0.3·c_t + √0.7·x_{i,t})``: ``c`` is noise shared by every candidate on a
step, ``x`` the candidate's own noise; each is a unit-variance AR(1) whose coefficient the
scenario sets. "Near-duplicates": candidates 2..N are ``base_t + 0.1·e_{i,t}`` (19 of 20
candidates nearly the same), candidate 1 independent.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from typestrict_pipeline.reruns.lineage import best_expected_under_noise, confidence_sequence_path
from typestrict_pipeline.study.inference import decorrelation_span, holdout_skip, joint_inference
from typestrict_pipeline.study.stats import differences_from_mean, search_stats

FloatArray = npt.NDArray[np.float64]
BURN = 200


@dataclass(frozen=True)
class Scenario:
    """How the candidates' per-step noise behaves."""

    name: str
    own_ar: float = 0.0
    shared_ar: float = 0.0
    near_duplicates: bool = False


SCENARIOS = (
    Scenario("own AR(1) 0"),
    Scenario("own AR(1) 0.5", own_ar=0.5),
    Scenario("own AR(1) 0.9", own_ar=0.9),
    Scenario("shared AR(1) 0.9", shared_ar=0.9),
    Scenario("near-duplicates", near_duplicates=True),
)


def ar1(rng: np.random.Generator, t: int, n: int, phi: float) -> FloatArray:
    """``n`` unit-variance AR(1) series of length ``t`` (after a burn-in of ``BURN`` steps).

    >>> x = ar1(np.random.default_rng(0), 20_000, 1, 0.5)
    >>> round(float(x.std()), 1), round(float(np.corrcoef(x[1:, 0], x[:-1, 0])[0, 1]), 1)
    (1.0, 0.5)
    """
    e = rng.standard_normal((t + BURN, n))
    x = np.empty_like(e)
    x[0] = e[0]
    scale = math.sqrt(1.0 - phi * phi)
    for s in range(1, t + BURN):
        x[s] = phi * x[s - 1] + scale * e[s]
    return x[BURN:]


def simulate(rng: np.random.Generator, sc: Scenario, n: int, t: int, edge: float = 0.0) -> FloatArray:
    """A ``t × n`` matrix of per-step scores of one search (candidate 0 gets ``edge``, in SDs)."""
    shared = ar1(rng, t, 1, sc.shared_ar)
    own = ar1(rng, t, n, sc.own_ar)
    if sc.near_duplicates and n >= 3:
        own[:, 1:] = (own[:, 1:2] + 0.1 * own[:, 1:]) / math.sqrt(1.01)
    scores = 0.5 + 0.1 * (math.sqrt(0.3) * shared + math.sqrt(0.7) * own)
    scores[:, 0] += 0.1 * edge
    return np.asarray(scores, dtype=np.float64)


def _oos(scores: FloatArray) -> dict[str, dict[str, float]]:
    keys = [f"{t:05d}" for t in range(scores.shape[0])]
    return {str(j): dict(zip(keys, scores[:, j].tolist(), strict=True)) for j in range(scores.shape[1])}


def clopper_pearson(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson, *Biometrika* 1934) two-sided interval of a binomial rate.

    >>> lo, hi = clopper_pearson(20, 400)
    >>> round(lo, 4), round(hi, 4)
    (0.0308, 0.0762)
    >>> clopper_pearson(0, 10)[0]
    0.0
    """
    a = (1.0 - level) / 2.0
    lo = 0.0 if hits == 0 else float(stats.beta.ppf(a, hits, trials - hits + 1))
    hi = 1.0 if hits == trials else float(stats.beta.ppf(1.0 - a, hits + 1, trials - hits))
    return lo, hi


@dataclass(frozen=True)
class SearchRates:
    """Rates over ``sims`` simulated searches of one cell."""

    beats_luck: float
    found_nothing: float
    edge_in_stepm: float
    sims: int

    @property
    def beats_luck_interval(self) -> tuple[float, float]:
        """95% Clopper–Pearson interval of the "Beats luck at 5%" rate."""
        return clopper_pearson(round(self.beats_luck * self.sims), self.sims)


def search_rates(sc: Scenario, n: int, t: int, sims: int, seed: int, *, edge: float = 0.0,
                 reps: int = 499) -> SearchRates:
    """How often "Beats luck at 5%" and "this search found nothing" are said (and, with an edge,
    how often candidate 0 is in the StepM set). The benchmark is the candidates' mean.

    >>> r = search_rates(SCENARIOS[0], 5, 120, 4, seed=1, reps=99)
    >>> r.sims, 0.0 <= r.beats_luck <= 1.0
    (4, True)
    """
    rng = np.random.default_rng(seed)
    yes = nothing = found = 0
    for i in range(sims):
        m = simulate(rng, sc, n, t, edge)
        ids = [str(j) for j in range(n)]
        res = joint_inference(m, ids, m.mean(axis=1), benchmark_label="mean", seed=seed + i,
                              reps=reps, pvalue_type="upper")
        yes += res.beats_luck
        found += "0" in res.stepm
        nothing += bool(search_stats(_oos(m), {}).found_nothing)
    return SearchRates(yes / sims, nothing / sims, found / sims, sims)


def adjusted_scale_ratio(sc: Scenario, n: int, t: int, sims: int, seed: int) -> float:
    """Mean estimated SE of ``OOS_i − mean`` over its true spread across searches (1 = right).

    >>> 0.5 < adjusted_scale_ratio(SCENARIOS[0], 5, 240, 40, seed=3) < 1.5
    True
    """
    rng = np.random.default_rng(seed)
    est: list[float] = []
    means: list[float] = []
    for _ in range(sims):
        m = simulate(rng, sc, n, t)
        d = differences_from_mean(m)
        row = next(r for r in search_stats(_oos(m), {}).rows if r.candidate_id == "0")
        est.append(float(row.se) if row.se is not None else float("nan"))  # the leaderboard's SE
        means.append(float(d[:, 0].mean()))
    return float(np.mean(est) / np.std(means))


@dataclass(frozen=True)
class HoldoutBias:
    """The winner's holdout bias (in SDs of a candidate's own per-step noise), with and without
    leaving out the measured decorrelation span, and Monte Carlo SEs (paired for the gap)."""

    measured: float
    measured_se: float
    horizon_only: float
    horizon_only_se: float
    gap_se: float
    mean_skip: float


def holdout_bias(n: int, t: int, holdout: int, own_ar: float, sims: int, seed: int) -> HoldoutBias:
    """How far the winner's holdout score sits above its true skill when no candidate has an edge.

    The winner is the best Adjusted on ``t`` eval steps (shared noise 30%, own AR(1) ``own_ar``);
    after an embargo of 1 step (the outcome horizon) the holdout runs ``holdout`` steps. The
    baseline and the shared noise cancel in winner − baseline on the same steps and are
    independent of the selection, so the bias is measured on the winner's own noise: the mean
    of its holdout steps, all of them (horizon only) or after the first ``span − 1`` (the
    leaderboard's rule, ``span`` = :func:`decorrelation_span` of the eval scores).

    >>> b = holdout_bias(5, 120, 60, 0.0, 20, seed=4)
    >>> abs(b.measured) < 4 * b.measured_se + 0.05
    True
    """
    rng = np.random.default_rng(seed)
    total = t + 1 + holdout
    measured: list[float] = []
    horizon: list[float] = []
    skips: list[int] = []
    for _ in range(sims):
        shared = ar1(rng, t, 1, 0.0)
        own = ar1(rng, total, n, own_ar)
        search = 0.5 + 0.1 * (math.sqrt(0.3) * shared + math.sqrt(0.7) * own[:t])
        res = search_stats(_oos(search), {})
        assert res.best_id is not None
        w = int(res.best_id)
        # the leaderboard's skip, kept to 2 steps short of the holdout: a mean needs 2 steps
        skip = min(holdout_skip(decorrelation_span(search), 1, 1), holdout - 2)
        hold = own[t + 1:, w]
        measured.append(float(hold[skip:].mean()))
        horizon.append(float(hold.mean()))
        skips.append(skip)
    m, h = np.asarray(measured), np.asarray(horizon)
    root = math.sqrt(sims)
    return HoldoutBias(float(m.mean()), float(m.std() / root), float(h.mean()), float(h.std() / root),
                       float((h - m).std() / root), float(np.mean(skips)))


def lineage_false_reassurance(looks: int, lineages: int, seed: int,
                              ses: Sequence[float] = (0.01, 0.02, 0.03),
                              *, compare_old: bool = True) -> tuple[float, float | None]:
    """Share of no-edge lineages shown *without* the warning at some look among ``looks``.

    Each re-run's edge is ``N(0, SE_j²)`` with ``SE_j`` drawn from ``ses``. Returns (the rate
    under the confidence-sequence warning, the rate under the old rule "best ≤ line" or None
    without ``compare_old``; that rule needs a quadrature per look, the slow part).

    >>> new, old = lineage_false_reassurance(10, 60, seed=5)
    >>> old is not None and new < old
    True
    """
    rng = np.random.default_rng(seed)
    new = old = 0
    for _ in range(lineages):
        se = rng.choice(np.asarray(ses, dtype=np.float64), size=looks)
        d = rng.normal(0.0, se)
        _, _, low = confidence_sequence_path(d.tolist(), se.tolist())
        shown_new = bool(np.any(low > 0.0))
        shown_old = False
        for k in range(1, looks + 1 if compare_old else 1):
            shown_old |= float(d[:k].max()) > best_expected_under_noise(se[:k].tolist())
        new += shown_new
        old += shown_old
    return new / lineages, (old / lineages if compare_old else None)


PARTS = ("null", "power", "scale", "holdout", "lineage")


def _verdict(lo: float, hi: float, bound: float = 0.07) -> str:
    return "below" if hi <= bound else ("ABOVE" if lo > bound else "undecided")


def _cell(args: tuple[Scenario, int, int, int, int, int, float]) -> SearchRates:
    sc, n, t, sims, seed, reps, edge = args
    return search_rates(sc, n, t, sims, seed, reps=reps, edge=edge)


def _null(sims: int, seed: int, reps: int, scenarios: Sequence[Scenario],
          ns: Sequence[int], ts: Sequence[int], jobs: int) -> None:  # pragma: no cover - the script
    print(f"# Null searches ({sims} per cell, {reps} resamples, seed {seed}; benchmark: the "
          "candidates' mean, upper SPA p-value; 95% Clopper–Pearson intervals; 'vs 7%': below "
          "= the whole interval at or below 7%, ABOVE = the whole interval above it)\n")
    print("| Scenario | N | T | Beats luck at 5% | 95% interval | vs 7% | found nothing (seed-literal) |")
    print("|---|---:|---:|---:|---|---|---:|")
    cells = [(sc, n, t, sims, seed, reps, 0.0) for sc in scenarios for n in ns for t in ts]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for (sc, n, t, *_), r in zip(cells, pool.map(_cell, cells), strict=True):
            lo, hi = r.beats_luck_interval
            print(f"| {sc.name} | {n} | {t} | {r.beats_luck:.3f} | {lo:.3f}–{hi:.3f} | "
                  f"{_verdict(lo, hi)} | {r.found_nothing:.3f} |", flush=True)


def _power(sims: int, seed: int, reps: int, scenarios: Sequence[Scenario],
           ns: Sequence[int], jobs: int) -> None:  # pragma: no cover - the documented script
    print("\n# Power: one candidate with a true edge (in per-step SDs of the score), "
          f"{sims} searches per cell\n")
    print("| Scenario | N | T | edge | Beats luck at 5% | 95% interval | edge in StepM set |")
    print("|---|---:|---:|---:|---:|---|---:|")
    cells = [(sc, n, t, sims, seed, reps, edge) for sc in scenarios for n in ns
             for t, edge in ((120, 0.5), (480, 0.25))]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for (sc, n, t, *_, edge), r in zip(cells, pool.map(_cell, cells), strict=True):
            lo, hi = r.beats_luck_interval
            print(f"| {sc.name} | {n} | {t} | {edge} | {r.beats_luck:.3f} | {lo:.3f}–{hi:.3f} | "
                  f"{r.edge_in_stepm:.3f} |", flush=True)


def _scale(sims: int, seed: int) -> None:  # pragma: no cover - the documented script
    print("\n# Adjusted's scale: mean estimated SE / true spread of OOS_i − mean (N = 20)\n")
    print("| Scenario | T = 120 | T = 480 |")
    print("|---|---:|---:|")
    for sc in SCENARIOS:
        a, b = (adjusted_scale_ratio(sc, 20, t, sims, seed) for t in (120, 480))
        print(f"| {sc.name} | {a:.3f} | {b:.3f} |", flush=True)


def _holdout(sims: int, seed: int) -> None:  # pragma: no cover - the documented script
    print("\n# Winner's holdout bias (SDs of a candidate's own noise), N = 20, T = 120\n")
    print("| own AR(1) | holdout steps | horizon-only embargo | measured span | steps left out |")
    print("|---:|---:|---:|---:|---:|")
    for phi in (0.5, 0.9):
        for length in (20, 60, 120):
            b = holdout_bias(20, 120, length, phi, sims, seed)
            print(f"| {phi} | {length} | {b.horizon_only:+.3f} ± {b.horizon_only_se:.3f} | "
                  f"{b.measured:+.3f} ± {b.measured_se:.3f} | {b.mean_skip:.1f} |", flush=True)


def _lineage(sims: int, seed: int) -> None:  # pragma: no cover - the documented script
    new, _ = lineage_false_reassurance(10, sims, seed, compare_old=False)
    _, old = lineage_false_reassurance(10, min(sims, 500), seed)
    print(f"\n# Lineage, 10 looks, no edge: false reassurance {new:.4f} ({sims} lineages) with "
          f"the confidence sequence; {old:.3f} ({min(sims, 500)} lineages) with 'best above "
          "the line'\n")


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - the documented script
    """``python -m typestrict_pipeline.study.calibration [--sims 400] [--reps 299] [--jobs 2] [--part …]``."""
    parser = argparse.ArgumentParser(description="the studies' calibration sweep (minutes)")
    parser.add_argument("--sims", type=int, default=400, choices=range(10, 20_001), metavar="10..20000")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--reps", type=int, default=299, choices=range(99, 10_001), metavar="99..10000")
    parser.add_argument("--jobs", type=int, default=1, choices=range(1, 65), metavar="1..64",
                        help="worker processes for the null and power cells (same results)")
    parser.add_argument("--part", action="append", choices=PARTS,
                        help="run only these parts (repeatable); default: all")
    parser.add_argument("--scenario", action="append", choices=[sc.name for sc in SCENARIOS],
                        help="only these scenarios (repeatable); default: all")
    parser.add_argument("--n", action="append", type=int, choices=(2, 5, 20, 64))
    parser.add_argument("--t", action="append", type=int, choices=(60, 120, 480))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    parts = args.part or list(PARTS)
    scenarios = [sc for sc in SCENARIOS if not args.scenario or sc.name in args.scenario]
    if "null" in parts:
        _null(args.sims, args.seed, args.reps, scenarios, args.n or (2, 5, 20, 64),
              args.t or (60, 120, 480), args.jobs)
    if "power" in parts:
        _power(args.sims, args.seed, args.reps, scenarios,
               args.n or (2, 5, 20, 64), args.jobs)
    if "scale" in parts:
        _scale(args.sims, args.seed)
    if "holdout" in parts:
        _holdout(10 * args.sims, args.seed)
    if "lineage" in parts:
        _lineage(100 * args.sims, args.seed)
    print(f"(took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
