"""The statistics of a study: expected best of N under noise, standard errors, luck-adjusted scores.

Definitions (sources in ``docs/method/studies.md``):

* ``e(N)`` is the exact expected maximum of ``N`` independent standard normals,
  ``e(N) = ∫₀^∞ [1 − Φ(x)^N − Φ(−x)^N] dx``, computed by adaptive quadrature (scipy ``quad``),
  never by the Bailey–Borwein–López de Prado–Zhu approximation (0.01–0.04 too high for N ≥ 3).
* ``SE_i`` is the standard error of candidate ``i``'s mean out-of-sample per-step score, with a
  Newey–West (Bartlett kernel) long-run variance so that autocorrelated step scores are not
  treated as independent (Newey & West, Econometrica 1987; bandwidth rule of Newey & West,
  Rev. Econ. Stud. 1994, floored at ``horizon − 1`` for overlapping outcomes).
* ``ρ̄`` is the mean pairwise correlation of the candidates' out-of-sample per-step scores.
* ``Adjusted_i = OOS_i − SE_i·√(1−ρ̄)·e(N)``: for equicorrelated scores
  ``E[max] = √(1−ρ)·e(N)`` exactly, so this subtracts what the best of N would gain by luck.
* The luck line ``L = b̄ + σ₀·√(1−ρ̄)·e(N)`` with ``σ₀ = median SE_i`` and ``b̄`` the baseline
  (by default the mean out-of-sample score of all candidates, i.e. "every candidate is the
  same"): the score pure luck would give as the best of that many. A top score at or below it
  is a search that found nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import integrate, special, stats

from typestrict_pipeline.errors import NotEnoughDataError

FloatArray = npt.NDArray[np.float64]


@lru_cache(maxsize=4096)
def _expected_max_normal_cached(n: float) -> float:
    if n == 1.0:
        return 0.0

    def integrand(x: float) -> float:
        # 1 − Φ(x)^N − Φ(−x)^N, with logs so that large N keeps full precision.
        upper = -math.expm1(n * float(special.log_ndtr(x)))
        lower = math.exp(n * float(special.log_ndtr(-x)))
        return upper - lower

    knee = math.sqrt(2.0 * math.log(max(n, 2.0)))
    # The integrand is ~1 below the knee and decays like a Gaussian tail above it.
    head, _ = integrate.quad(integrand, 0.0, knee, limit=200, epsabs=1e-13, epsrel=1e-12)
    tail, _ = integrate.quad(integrand, knee, knee + 40.0, limit=200, epsabs=1e-13, epsrel=1e-12)
    return float(head + tail)


def expected_max_normal(n: float) -> float:
    """The exact expected maximum of ``n`` independent standard normal draws, ``e(n)``.

    Computed by quadrature of ``∫₀^∞ [1 − Φ(x)^n − Φ(−x)^n] dx`` and cached per ``n``. Works for
    a non-integer ``n`` ≥ 1 (an effective number of trials).

    Args:
        n: how many draws; a real number ≥ 1.

    Returns:
        ``e(n)``; ``e(1) = 0``, ``e(2) = 1/√π``.

    Raises:
        ValueError: when ``n`` is below 1 or not finite.

    >>> round(expected_max_normal(2), 6) == round(1 / math.sqrt(math.pi), 6)
    True
    >>> round(expected_max_normal(10), 3), round(expected_max_normal(100), 3)
    (1.539, 2.508)
    """
    value = float(n)
    if not math.isfinite(value) or value < 1.0:
        raise ValueError(
            f"expected a number of candidates n ≥ 1, got {n!r}. "
            "Count every candidate scored on out-of-sample data (at least one)."
        )
    return _expected_max_normal_cached(value)


def luck_quantile_normal(n: float, q: float = 0.95) -> float:
    """The ``q`` quantile of the maximum of ``n`` standard normals, ``Φ⁻¹(q^(1/n))``.

    Pure noise beats ``e(n)`` about half the time; this is the line it beats with probability
    ``1 − q``.

    >>> round(luck_quantile_normal(10), 3)
    2.568
    """
    if n < 1 or not 0.0 < q < 1.0:
        raise ValueError(f"expected n ≥ 1 and 0 < q < 1, got n={n!r}, q={q!r}. Fix the arguments.")
    return float(stats.norm.ppf(q ** (1.0 / n)))


def newey_west_bandwidth(t: int, horizon: int = 1) -> int:
    """Bartlett-kernel bandwidth: ``max(horizon − 1, ⌊4·(T/100)^(2/9)⌋)``, below ``T``.

    The automatic rule is Newey & West (1994); the floor ``horizon − 1`` covers outcomes that
    overlap ``horizon`` steps (their scores are correlated by construction).

    >>> newey_west_bandwidth(365), newey_west_bandwidth(100, horizon=7)
    (5, 6)
    """
    if t < 1:
        raise ValueError(f"expected at least one score, got T={t}. Pass a non-empty series.")
    if horizon < 1:
        raise ValueError(f"expected an outcome horizon ≥ 1 step, got {horizon}. Fix the horizon.")
    auto = int(4.0 * (t / 100.0) ** (2.0 / 9.0))  # floor: the base is positive
    return max(0, min(t - 1, max(horizon - 1, auto)))


def newey_west_se(scores: Sequence[float] | FloatArray, horizon: int = 1) -> float:
    """Standard error of the mean of ``scores`` with a Newey–West (Bartlett) long-run variance.

    ``SE = √(LRV / T)`` with ``LRV = γ₀ + 2·Σ_{l=1..L} (1 − l/(L+1))·γ_l`` (autocovariances with
    divisor ``T``), which is never negative.

    Args:
        scores: per-step scores (finite numbers), in time order.
        horizon: the outcome horizon in steps (1 when each outcome is the next step's).

    Returns:
        The standard error of the mean.

    Raises:
        NotEnoughDataError: with fewer than 2 scores (the spread is undefined, not zero).

    >>> round(newey_west_se([1.0, 0.0] * 50), 4)  # alternating: negative autocorrelation
    0.0224
    >>> round(newey_west_se(np.random.default_rng(0).normal(size=400)), 3)  # iid: ≈ 1/√400
    0.049
    """
    x = np.asarray(scores, dtype=np.float64)
    t = int(x.size)
    if t < 2:
        raise NotEnoughDataError(
            f"expected at least 2 per-step scores to estimate a standard error, got {t}. "
            "Use longer windows or more folds."
        )
    if not np.all(np.isfinite(x)):
        raise ValueError("expected finite per-step scores, got NaN or infinity. Fix the scorer.")
    d = x - x.mean()
    lag = newey_west_bandwidth(t, horizon)
    lrv = float(d @ d) / t
    for ell in range(1, lag + 1):
        gamma = float(d[ell:] @ d[:-ell]) / t
        lrv += 2.0 * (1.0 - ell / (lag + 1.0)) * gamma
    return math.sqrt(max(lrv, 0.0) / t)


def mean_pairwise_correlation(matrix: FloatArray) -> float | None:
    """Mean off-diagonal Pearson correlation of the columns of a ``T × N`` score matrix.

    Missing values (NaN) are handled pairwise. Columns with no spread have no correlation and
    are left out. Returns ``None`` when no pair has a defined correlation (fewer than two
    candidates, or all constant), so the caller decides; it is never silently 0.

    >>> m = np.array([[1.0, 1.0], [2.0, 2.5], [3.0, 2.9]])
    >>> round(mean_pairwise_correlation(m), 3)
    0.948
    """
    if matrix.ndim != 2:
        raise ValueError(f"expected a T × N matrix, got shape {matrix.shape}. Pass a 2-D array.")
    n = matrix.shape[1]
    if n >= 2 and matrix.shape[0] >= 3 and bool(np.all(np.isfinite(matrix))):
        spread = matrix.std(axis=0) > 0.0
        if int(spread.sum()) >= 2:
            corr = np.corrcoef(matrix[:, spread], rowvar=False)
            k = int(np.shape(corr)[0])
            return float((corr.sum() - np.trace(corr)) / (k * (k - 1)))
        return None
    total = 0.0
    pairs = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = matrix[:, i], matrix[:, j]
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.sum() < 3:
                continue
            av, bv = a[ok], b[ok]
            sa, sb = av.std(), bv.std()
            if sa == 0.0 or sb == 0.0:
                continue
            total += float(((av - av.mean()) * (bv - bv.mean())).mean() / (sa * sb))
            pairs += 1
    if pairs == 0:
        return None
    return total / pairs


@dataclass(frozen=True)
class CandidateStats:
    """One leaderboard row's numbers (scores are means of per-step scores)."""

    candidate_id: str
    oos: float | None
    in_sample: float | None
    gap: float | None
    se: float | None
    adjusted: float | None
    oos_steps: int


@dataclass(frozen=True)
class SearchStats:
    """The leaderboard's statistics: rows ranked by Adjusted, the luck line, the flag."""

    rows: tuple[CandidateStats, ...]
    n_trials: int
    e_n: float | None
    rho_bar: float | None
    sigma0: float | None
    baseline: float | None
    luck_line: float | None
    luck_line_95: float | None
    found_nothing: bool | None
    best_id: str | None


def search_stats(
    oos: Mapping[str, Mapping[str, float]],
    in_sample: Mapping[str, Sequence[float]],
    *,
    horizon: int = 1,
    baseline: float | None = None,
    extra_trials: int = 0,
) -> SearchStats:
    """Rank candidates by their luck-adjusted out-of-sample score.

    Args:
        oos: per candidate, its out-of-sample per-step scores keyed by step (for example the
            step's ISO time); keys let candidates with missing windows be aligned.
        in_sample: per candidate, its in-sample per-step scores.
        horizon: outcome horizon in steps (floors the Newey–West bandwidth).
        baseline: the score of "no skill" on the same steps (chance rate or the incumbent);
            ``None`` uses the mean out-of-sample score of all candidates (the null "every
            candidate has the same skill").
        extra_trials: trials to count in ``N`` beyond the candidates given (for example
            candidates discarded after being scored); the literature insists all are counted.

    Returns:
        The ranked rows and the header statistics. Candidates whose SE is undefined (fewer than
        2 out-of-sample steps) have no Adjusted score and rank last.

    >>> rng = np.random.default_rng(7)
    >>> steps = [str(t) for t in range(200)]
    >>> oos = {f"c{i}": dict(zip(steps, rng.normal(0.5, 0.1, 200))) for i in range(5)}
    >>> res = search_stats(oos, {k: [0.6] * 10 for k in oos})
    >>> res.n_trials, round(res.e_n, 3), res.rows[0].adjusted < res.rows[0].oos
    (5, 1.163, True)
    """
    keys = sorted({k for series in oos.values() for k in series})
    ids = list(oos)
    index = {k: i for i, k in enumerate(keys)}
    matrix = np.full((len(keys), len(ids)), np.nan)
    for j, cid in enumerate(ids):
        for k, v in oos[cid].items():
            matrix[index[k], j] = float(v)

    means: dict[str, float | None] = {}
    ses: dict[str, float | None] = {}
    for cid in ids:
        series = [float(oos[cid][k]) for k in keys if k in oos[cid]]
        means[cid] = float(np.mean(series)) if series else None
        ses[cid] = newey_west_se(series, horizon) if len(series) >= 2 else None

    scored = [cid for cid in ids if means[cid] is not None]
    n_trials = len(scored) + max(0, extra_trials)
    e_n = expected_max_normal(n_trials) if n_trials >= 1 else None
    rho = mean_pairwise_correlation(matrix[:, [ids.index(c) for c in scored]]) if scored else None
    # One candidate (or no defined pair): no correlation to use; e(1) = 0 anyway, otherwise
    # treat as independent (ρ̄ = 0), the conservative choice for ρ̄ ≥ 0.
    rho_used = 0.0 if rho is None else min(rho, 1.0)
    shrink = math.sqrt(max(0.0, 1.0 - rho_used))
    defined_se = [s for s in (ses[c] for c in scored) if s is not None]
    sigma0 = float(np.median(defined_se)) if defined_se else None
    b = baseline
    if b is None and scored:
        b = float(np.mean([m for m in (means[c] for c in scored) if m is not None]))
    luck = None
    luck95 = None
    if e_n is not None and sigma0 is not None and b is not None:
        luck = b + sigma0 * shrink * e_n
        luck95 = b + sigma0 * shrink * luck_quantile_normal(n_trials)

    rows: list[CandidateStats] = []
    for cid in ids:
        m, se = means[cid], ses[cid]
        is_series = list(in_sample.get(cid, ()))
        is_mean = float(np.mean(is_series)) if is_series else None
        adjusted = None
        if m is not None and se is not None and e_n is not None:
            adjusted = m - se * shrink * e_n
        gap = None if (is_mean is None or m is None) else is_mean - m
        rows.append(
            CandidateStats(
                candidate_id=cid,
                oos=m,
                in_sample=is_mean,
                gap=gap,
                se=se,
                adjusted=adjusted,
                oos_steps=len(oos[cid]),
            )
        )
    rows.sort(key=lambda r: (r.adjusted is None, -(r.adjusted or 0.0), r.candidate_id))
    best = rows[0].candidate_id if rows and rows[0].adjusted is not None else None
    top = max((m for m in means.values() if m is not None), default=None)
    found_nothing = None if (luck is None or top is None) else top <= luck
    if baseline is None and n_trials < 2:
        found_nothing = None  # one candidate against its own mean: no search to judge
    return SearchStats(
        rows=tuple(rows),
        n_trials=n_trials,
        e_n=e_n,
        rho_bar=rho,
        sigma0=sigma0,
        baseline=b,
        luck_line=luck,
        luck_line_95=luck95,
        found_nothing=found_nothing,
        best_id=best,
    )
