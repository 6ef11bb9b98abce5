"""Joint inference over a study's candidates × steps matrix, PBO, and the holdout's rules.

Pure functions (no store, no Dagster); sources and the calibration measured by simulation are in
``docs/method/studies.md`` §3–§4.

* :func:`joint_inference`: Hansen's SPA consistent p-value (*JBES* 23(4), 2005) and the
  Romano–Wolf StepM set (*Econometrica* 73(4), 2005) of candidates that beat the benchmark, on
  a stationary bootstrap (Politis & Romano, *JASA* 1994) drawn with arch's public
  ``arch.bootstrap.StationaryBootstrap`` (:func:`bootstrap_counts`), a block length by Politis &
  White (2004, corrected by Patton, Politis & White 2009), ``arch.bootstrap.optimal_block_length``,
  and the arithmetic of ``arch.bootstrap.SPA``/``StepM`` (:class:`SpaDraws`, :func:`stepm_set`)
  with each candidate's resampled spread widened by :func:`small_sample_factor`.
* :func:`pbo_cscv`: the probability of backtest overfitting by combinatorially symmetric
  cross-validation (Bailey, Borwein, López de Prado & Zhu, *J. Comput. Finance* 20(4), 2017).
* :func:`decorrelation_span`: how many steps the candidates' own (de-meaned) per-step scores
  stay correlated; the holdout's inference skips that many steps after the last eval step.
* :func:`holdout_test`: winner − baseline on the holdout with the Newey–West SE, a one-sided
  lower confidence bound, and the holdout length a test of the search's luck-adjusted edge needs.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.errors import NotEnoughDataError
from typestrict_pipeline.lazy import LazyModule
from typestrict_pipeline.study.dependence import (
    SMALL_POOL,
    Dependence,
    column_chunks,
    long_run_variances,
    measure_dependence,
)
from typestrict_pipeline.study.stability import (
    CRITICAL_95,
    MIN_STEPS,
    Stability,
    leaders_stability,
    self_normalised_statistic,
    sign_changes,
)
from typestrict_pipeline.study.stats import (
    ar1_coefficients,
    ar1_variance,
    fixed_b_degrees_of_freedom,
    newey_west_se,
    pooled_ar1_coefficient,
)

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    from scipy import stats
else:
    stats = LazyModule("scipy.stats")

FloatArray = npt.NDArray[np.float64]
PValueType = Literal["consistent", "upper"]

#: The level of every "yes" the leaderboard prints (one-sided where it is a bound).
ALPHA = 0.05
#: Power the minimum holdout length is sized for.
POWER = 0.8
#: Bootstrap resamples of the joint test.
REPS = 1000
#: The autocorrelation below which per-step scores count as decorrelated.
DECORRELATED = 0.05
#: Fewest steps the joint test runs on (below it the header says why it is missing).
MIN_JOINT_STEPS = 10
#: The persistence the joint test's fixed-b allowance reads (``stats.fixed_b_degrees_of_freedom``
#: with this span: at most 1.5 degrees of freedom per 30 steps of window, 6 at T = 120). Half the
#: span a series judged alone takes (``stats.PERSISTENCE_SPAN``): measured in
#: docs/method/studies.md §3.1a, the lone series' 60 steps keep the small-persistent-part mixture
#: at 1–6% but find a 0.3-SD edge among 20 white candidates over 120 steps in 17% of searches
#: instead of 60%; 30 steps keep the mixture at 3.0–6.0% (400 searches a cell) and find it in
#: 43%. AR(0.9) decorrelates to 5% in 29 steps.
JOINT_PERSISTENCE_SPAN = 30


@dataclass(frozen=True)
class JointInference:
    """The SPA p-value and the StepM set of one study (differences from the benchmark).

    Attributes:
        benchmark: what the candidates were compared with, in words.
        candidates: the candidate ids tested (columns), in order.
        steps: the out-of-sample steps every tested candidate scored (rows).
        block_length: the stationary bootstrap's mean block length, chosen from the long-run
            variance of the candidates that matter (:func:`~typestrict_pipeline.study.dependence.measure_dependence`).
        reps: bootstrap resamples; seed: the generator's seed.
        spa_pvalue: the SPA p-value of "no candidate beats the benchmark" the verdict uses
            (``pvalue_type``: Hansen's consistent one, or the upper one for the candidates' mean).
        spa_pvalue_lower, spa_pvalue_upper: the lower and upper (Reality Check) p-values.
        stepm: the candidates in the StepM set at ``ALPHA`` (family-wise), best mean first.
        line_95: the bootstrap's 95% line on the score scale: the benchmark's mean plus the
            consistent 95% critical value of the maximum mean difference.
    """

    benchmark: str
    candidates: tuple[str, ...]
    steps: int
    block_length: float
    reps: int
    seed: int
    spa_pvalue: float
    pvalue_type: str
    spa_pvalue_lower: float
    spa_pvalue_upper: float
    stepm: tuple[str, ...]
    line_95: float
    dependence: Dependence | None = None
    stability: Stability | None = None

    @property
    def unstable(self) -> bool:
        """A leader's mean difference changed during the search period: "beats luck" is not said."""
        return self.stability is not None and not self.stability.stable

    @property
    def beats_luck(self) -> bool:
        """``SPA p ≤ 5%`` over a stable search period: some candidate beats the benchmark beyond
        what the search's luck gives (never said when a leader's edge changed during the period:
        :mod:`typestrict_pipeline.study.stability`)."""
        return self.spa_pvalue <= ALPHA and not self.unstable


def block_length(differences: FloatArray) -> float:
    """Politis–White stationary-bootstrap block length, the mean over columns (≥ 1).

    >>> x = np.random.default_rng(0).normal(size=(300, 2))
    >>> 1.0 <= block_length(x) < 5.0
    True
    """
    from arch.bootstrap import optimal_block_length

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = optimal_block_length(differences)
    values = np.asarray(frame["stationary"], dtype=np.float64)
    values = values[np.isfinite(values)]
    return max(1.0, float(values.mean())) if values.size else 1.0


def joint_inference(
    scores: FloatArray,
    candidates: Sequence[str],
    benchmark: FloatArray,
    *,
    benchmark_label: str,
    seed: int,
    reps: int = REPS,
    pvalue_type: PValueType = "consistent",
    dependence: Dependence | None = None,
) -> JointInference:
    """SPA and StepM over a ``T × k`` matrix of per-step scores against a benchmark series.

    Args:
        scores: ``T × k`` out-of-sample per-step scores (higher is better), no missing values.
        candidates: the ``k`` column ids.
        benchmark: the benchmark's ``T`` per-step scores on the same steps.
        benchmark_label: what the benchmark is, for the header.
        seed: seeds ``numpy.random.default_rng`` of the bootstrap (the study's seed).
        reps: bootstrap resamples.
        dependence: the measured dependence of the differences (default: measured here with
            :func:`~typestrict_pipeline.study.dependence.measure_dependence`; a caller that
            splits the candidates into chunks measures it once and passes it to every chunk).
        pvalue_type: ``"consistent"`` (Hansen's, against an outside benchmark such as the
            version's defaults) or ``"upper"`` (every candidate re-centred: the least
            favourable null "every candidate has the same skill", right when the benchmark is
            the candidates' own mean, whose differences sum to zero so that one always looks
            "poor" and the consistent re-centring would drop it and over-reject).

    Returns:
        The p-values, the StepM set and the bootstrap's 95% line.

    Raises:
        NotEnoughDataError: fewer than ``MIN_JOINT_STEPS`` steps or no candidate.

    >>> rng = np.random.default_rng(1)
    >>> m = rng.normal(size=(200, 5)); m[:, 2] += 0.5
    >>> res = joint_inference(m, list("abcde"), np.zeros(200), benchmark_label="zero", seed=0)
    >>> res.beats_luck, res.stepm
    (True, ('c',))
    """
    t, k = scores.shape
    if t < MIN_JOINT_STEPS or k < 1:
        raise NotEnoughDataError(
            f"expected at least {MIN_JOINT_STEPS} out-of-sample steps scored by every tested "
            f"candidate, got {t} steps × {k} candidates. Use longer eval windows or more folds."
        )
    diffs = scores - benchmark[:, None]
    dep = dependence if dependence is not None else measure_dependence(diffs, common=True)
    blen = dep.block_length
    block = max(1, round(blen))  # arch's StationaryBootstrap takes a whole mean block length
    draws = spa_draws(diffs, bootstrap_counts(t, block, reps, seed), block, dependence=dep)
    pvals = {kind: draws.pvalue(kind) for kind in ("lower", "consistent", "upper")}
    superior_idx = stepm_set(draws, pvalue_type)
    crit = draws.critical_value(pvalue_type, np.ones(k, dtype=np.bool_))
    means = diffs.mean(axis=0)
    superior = sorted(superior_idx, key=lambda i: -means[i])
    return JointInference(
        benchmark=benchmark_label,
        candidates=tuple(candidates),
        steps=t,
        block_length=blen,
        reps=reps,
        seed=seed,
        spa_pvalue=pvals[pvalue_type],
        pvalue_type=pvalue_type,
        spa_pvalue_lower=pvals["lower"],
        spa_pvalue_upper=pvals["upper"],
        stepm=tuple(candidates[i] for i in superior),
        line_95=float(benchmark.mean()) + crit,
        dependence=dep,
        stability=leaders_stability(diffs, [str(c) for c in candidates], superior_idx),
    )


def bootstrap_counts(t: int, block: int, reps: int, seed: int) -> FloatArray:
    """``reps × t``: how many times each step is drawn in each stationary-bootstrap resample.

    The resamples are those of ``arch.bootstrap.StationaryBootstrap(block, arange(t),
    seed=default_rng(seed)).bootstrap(reps)`` (its documented API, applied to the step
    indices), so a resample's mean of any series ``x`` is ``counts[r] @ x / t``.

    >>> c = bootstrap_counts(50, 3, 4, seed=0)
    >>> c.shape, bool(np.all(c.sum(axis=1) == 50))
    ((4, 50), True)
    """
    from arch.bootstrap import StationaryBootstrap

    boot = StationaryBootstrap(block, np.arange(t), seed=np.random.default_rng(seed))
    counts = np.empty((reps, t), dtype=np.float64)
    for r, (pos, _) in enumerate(boot.bootstrap(reps)):
        counts[r] = np.bincount(np.asarray(pos[0], dtype=np.int64), minlength=t)
    return counts


def stationary_bootstrap_variance(diffs: FloatArray, block: float) -> FloatArray:
    """Per column, the variance of ``√T·mean*`` under a stationary bootstrap of mean block
    ``block`` (Politis & Romano 1994, eq. for ``σ²_{T,p}``; what ``arch``'s SPA computes):
    ``γ̂₀ + 2·Σ_{i≥1} κ_i·γ̂_i``, ``κ_i = (1 − i/T)(1 − p)^i + (i/T)(1 − p)^{T−i}``, ``p = 1/block``.

    >>> x = np.random.default_rng(0).normal(size=(2000, 1))
    >>> round(float(stationary_bootstrap_variance(x, 1.0)[0] / x.var()), 6)
    1.0
    """
    t, k = diffs.shape
    size = 1 << (2 * t - 1).bit_length()
    i = np.arange(1, t, dtype=np.float64)
    q = 1.0 - 1.0 / block
    kappa = (1.0 - i / t) * q**i + (i / t) * q ** (t - i)
    out = np.empty(k)
    for part in column_chunks(k):  # each column on its own: bounded memory, the same numbers
        x = diffs[:, part] - diffs[:, part].mean(axis=0)
        spectrum = np.fft.rfft(x, n=size, axis=0)
        acov = np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=0)[:t] / t
        out[part] = acov[0] + 2.0 * (kappa[:, None] * acov[1:]).sum(axis=0)
    return out


def small_sample_factor(diffs: FloatArray, bootstrap_lrv: FloatArray,
                        dependence: Dependence | None = None, *,
                        family: int | None = None,
                        pooled_ar1: float | None = None) -> FloatArray:
    """Per column, the factor that sets the bootstrap's spread of the mean to its target.

    A stationary bootstrap resamples the sample, so with persistent scores and a short window it
    understates the spread of the mean, and with the long blocks persistence asks for it is
    noisy. Each candidate's resampled deviations are scaled so that their long-run variance is
    the target (the bootstrap then supplies the dependence *between* candidates, which the
    maximum needs). The target is the long-run variance of
    :func:`~typestrict_pipeline.study.dependence.long_run_variances` (the pooled long-run ratio of
    the candidates that matter times the candidate's variance, or its own cosine estimate when
    larger) and never below the bias-corrected AR(1) fit (Kendall, *Biometrika* 41, 1954: the
    candidate's own with up to ``SMALL_POOL`` candidates; with more, the fit pooled over them,
    :func:`~typestrict_pipeline.study.stats.pooled_ar1_coefficient`, except for a candidate whose
    own coefficient is above it by more than ``z_{1−α/k}`` standard errors
    ``√((1 − φ̄²)/T)``: one series' coefficient over a short window is so noisy — sd 0.04–0.05
    at ``φ`` 0.9 and ``T`` 120, and the floor's ``(1+φ)/(1−φ)`` magnifies it — that the
    maximum over many candidates was set by the ones whose window happened to trend, and a
    2-SD edge among 64 AR(0.9) candidates over 120 steps was never found), times
    the ratio of Student-t to normal 95% quantiles at the estimate's degrees of freedom (the
    fixed-smoothing allowance of Kiefer & Vogelsang 2005 / LLSW 2018) or at the AR(1) fit's
    effective sample size ``T·γ̂₀/LRV − 1`` when that floor binds, and never more degrees of
    freedom than :func:`~typestrict_pipeline.study.stats.fixed_b_degrees_of_freedom` allows a
    window of ``T`` steps for a persistence of ``JOINT_PERSISTENCE_SPAN`` steps (the rule
    ``newey_west_se`` follows: a persistent part sits mostly in each candidate's own mean, which
    pooling other candidates does not measure).

    ``family``: the number of candidates tested together when ``diffs`` holds some of them
    (:func:`spa_draws` takes them in chunks; default: the columns given); ``pooled_ar1``: their
    pooled AR(1) coefficient (default: pooled over the columns given).

    >>> d = np.random.default_rng(0).normal(size=(400, 3))
    >>> bool(np.all((small_sample_factor(d, d.var(axis=0)) > 0.8)))
    True
    """
    t = diffs.shape[0]
    dep = dependence if dependence is not None else measure_dependence(diffs)
    target, df = long_run_variances(diffs, dep, family=family)
    floor = ar1_floors(diffs, family=family, pooled_ar1=pooled_ar1)
    x = diffs - diffs.mean(axis=0)
    g0 = (x * x).mean(axis=0)
    with np.errstate(all="ignore"):
        k = np.where(g0 > 0.0, floor / np.where(g0 > 0.0, g0, 1.0), 1.0)  # LRV / variance
    nu_floor = np.maximum(2.0, t / k - 1.0)
    use_floor = floor > target
    lrv = np.where(use_floor, floor, target)
    nu = np.where(use_floor, nu_floor, np.maximum(1.0, df))
    nu = np.minimum(nu, fixed_b_degrees_of_freedom(t, span=JOINT_PERSISTENCE_SPAN))
    t_ratio = stats.t.ppf(1.0 - ALPHA, nu) / stats.norm.ppf(1.0 - ALPHA)
    with np.errstate(all="ignore"):
        ratio = np.where(bootstrap_lrv > 0.0, lrv / np.where(bootstrap_lrv > 0.0, bootstrap_lrv, 1.0), 1.0)
    return np.asarray(np.sqrt(ratio) * t_ratio, dtype=np.float64)


def ar1_floors(diffs: FloatArray, *, family: int | None = None,
               pooled_ar1: float | None = None) -> FloatArray:
    """Per column, the bias-corrected AR(1) long-run variance the joint test never widens below.

    Up to ``SMALL_POOL`` candidates in the family, each column's own
    (:func:`~typestrict_pipeline.study.stats.ar1_long_run_variance`). With more, the AR(1)
    coefficient pooled over the family (``pooled_ar1``, default: over the columns given) times
    the column's own variance, except for a column whose own coefficient is above the pooled
    one by more than ``z_{1−α/k}·√((1 − φ̄²)/T)`` (a one-sided test at ``ALPHA`` per family of
    ``k``): that candidate is more persistent than the others and keeps its own floor.

    >>> rng = np.random.default_rng(0)
    >>> d = rng.normal(size=(120, 64)); d[:, :4] = np.cumsum(rng.normal(size=(120, 4)), axis=0)
    >>> f = ar1_floors(d) / d.var(axis=0)
    >>> bool(f[:4].min() > 20 * f[4:].max())
    True
    """
    t = diffs.shape[0]
    x = diffs - diffs.mean(axis=0)
    g0 = (x * x).mean(axis=0)
    own = ar1_coefficients(diffs)
    floor = ar1_variance(g0, own, t)
    k = family if family is not None else diffs.shape[1]
    if k <= SMALL_POOL:
        return floor
    phi = pooled_ar1 if pooled_ar1 is not None else pooled_ar1_coefficient(diffs)
    margin = stats.norm.ppf(1.0 - ALPHA / k) * math.sqrt(max(1.0 - phi * phi, 1.0 / t) / t)
    return np.asarray(np.where(own > phi + margin, floor, ar1_variance(g0, phi, t)),
                      dtype=np.float64)


@dataclass(frozen=True)
class SpaDraws:
    """SPA statistics and their bootstrap null draws, on the score scale (Hansen, *JBES* 2005).

    The arithmetic of ``arch.bootstrap.SPA.compute`` (arch 8.0.0, which compares the maximum
    mean difference with the maximum resampled one, unstudentized), on resamples drawn with
    arch's public ``StationaryBootstrap``, with each candidate's resampled deviation widened by
    :func:`small_sample_factor` (a test checks that without the widening the p-values are
    arch's own, bit for bit).

    Attributes:
        mean: per candidate, the mean difference from the benchmark ``d̄_k``.
        deviation: ``reps × k`` resampled deviations ``f_k·(d̄*_k − d̄_k)``.
        scale: ``f_k·ω̂_k/√T``, the widened SE of ``d̄_k`` (``ω̂_k²``: the stationary
            bootstrap's long-run variance); it sets the consistent p-value's threshold.
    """

    mean: FloatArray
    deviation: FloatArray
    scale: FloatArray
    steps: int

    def null_maxima(self, kind: str, active: npt.NDArray[np.bool_]) -> FloatArray:
        """Per resample, the maximum over the active candidates of ``deviation + offset``.

        The offset ``d̄_k − g(d̄_k)`` is ``min(d̄_k, 0)`` (lower), ``d̄_k`` when
        ``d̄_k < −scale_k·√(2 ln ln T)`` else 0 (consistent), 0 (upper: every candidate
        re-centred, White's Reality Check null).
        """
        d = self.mean
        if kind == "lower":
            offset = np.minimum(d, 0.0)
        elif kind == "consistent":
            floor = -self.scale * math.sqrt(2.0 * math.log(math.log(self.steps)))
            offset = np.where(d < floor, d, 0.0)
        else:
            offset = np.zeros_like(d)
        return np.asarray((self.deviation[:, active] + offset[active]).max(axis=1),
                          dtype=np.float64)

    def pvalue(self, kind: str) -> float:
        """Share of resamples whose null maximum exceeds the largest mean difference; 1 when no
        candidate's mean difference is above 0 (the null "no candidate beats the benchmark" is
        then what the sample says: a candidate that scored exactly as the benchmark on every step
        re-samples to exactly 0, so the draws' maximum ties with the statistic, and counting only
        the draws above it gave p = 0, "beats luck", to candidates that had no edge at all)."""
        if not self.mean.max() > 0.0:
            return 1.0
        active = np.ones(self.mean.shape[0], dtype=np.bool_)
        return float((self.null_maxima(kind, active) > self.mean.max()).mean())

    def critical_value(self, kind: str, active: npt.NDArray[np.bool_]) -> float:
        """The ``1 − ALPHA`` percentile of the null maxima over the active candidates."""
        return float(np.percentile(self.null_maxima(kind, active), 100.0 * (1.0 - ALPHA)))


def spa_draws(diffs: FloatArray, counts: FloatArray, block: float, *,
              widen: bool = True, dependence: Dependence | None = None) -> SpaDraws:
    """The SPA statistics and null draws of a ``T × k`` difference matrix.

    Args:
        diffs: ``T × k`` differences candidate − benchmark.
        counts: :func:`bootstrap_counts` of the resamples.
        block: their mean block length.
        widen: apply :func:`small_sample_factor` (off only to compare with arch's SPA).

    >>> d = np.random.default_rng(0).normal(size=(100, 3))
    >>> s = spa_draws(d, bootstrap_counts(100, 1, 50, seed=0), 1.0)
    >>> s.deviation.shape, bool(np.all(s.scale > 0))
    ((50, 3), True)
    """
    t, k = diffs.shape
    if widen and dependence is None:
        dependence = measure_dependence(diffs, common=True)  # one measurement for every chunk
    means = diffs.mean(axis=0)
    # Every resample's mean of every candidate in one product (the BLAS's result for a column
    # depends on where the column sits in the product's panels, so it is never cut).
    deviation = counts @ diffs
    deviation /= t
    deviation -= means
    scale = np.empty(k)
    pooled = pooled_ar1_coefficient(diffs) if widen and k > SMALL_POOL else None
    for part in column_chunks(k):  # each column on its own: bounded memory, the same numbers
        chunk = diffs[:, part]
        omega2 = stationary_bootstrap_variance(chunk, block)
        factor = (small_sample_factor(chunk, omega2, dependence, family=k, pooled_ar1=pooled)
                  if widen else np.ones(chunk.shape[1]))
        deviation[:, part] *= factor
        scale[part] = factor * np.sqrt(np.maximum(omega2, 0.0) / t)
    return SpaDraws(np.asarray(means, dtype=np.float64), deviation, scale, t)


def stepm_set(draws: SpaDraws, kind: PValueType) -> list[int]:
    """Romano–Wolf StepM (*Econometrica* 2005) as ``arch.bootstrap.StepM.compute`` runs it, with
    the p-value type chosen: reject every active candidate whose mean difference exceeds the
    active set's critical value (and 0: a candidate not ahead of the benchmark beats nothing),
    drop them, repeat until none is rejected.

    >>> d = np.random.default_rng(0).normal(size=(100, 3)); d[:, 1] += 1.0
    >>> stepm_set(spa_draws(d, bootstrap_counts(100, 1, 200, seed=0), 1.0), "upper")
    [1]
    """
    active = np.ones(draws.mean.shape[0], dtype=np.bool_)
    found: list[int] = []
    while active.any():
        crit = draws.critical_value(kind, active)
        new = active & (draws.mean > crit) & (draws.mean > 0.0)  # a candidate not ahead beats nothing
        if not new.any():
            break
        found.extend(int(i) for i in np.flatnonzero(new))
        active &= ~new
    return sorted(found)


#: CSCV's halves (of ``C(S, S/2)``, 12,870 at ``S = 16``) ranked at once: bounds PBO's memory
#: to about ``3 × PBO_COMBINATIONS × N`` floats (each half is ranked on its own: the same numbers).
PBO_COMBINATIONS = 256


@dataclass(frozen=True)
class Pbo:
    """The probability of backtest overfitting by CSCV, with its inputs."""

    pbo: float
    blocks: int
    combinations: int
    logits: tuple[float, ...]


def cscv_blocks(t: int) -> int | None:
    """The number of row blocks ``S`` for CSCV: the largest even ``S ≤ 16`` with ≥ 10 steps each.

    >>> cscv_blocks(480), cscv_blocks(60), cscv_blocks(39)
    (16, 6, None)
    """
    for s in range(16, 3, -2):
        if t // s >= 10:
            return s
    return None


def pbo_cscv(scores: FloatArray) -> Pbo | None:
    """PBO by combinatorially symmetric cross-validation over a ``T × N`` score matrix.

    The rows are cut into ``S`` contiguous blocks (:func:`cscv_blocks`); for each of the
    ``C(S, S/2)`` halves, the candidate with the best in-sample mean is ranked out-of-sample,
    ``ω = rank/(N+1)`` and ``λ = ln(ω/(1−ω))``; PBO is the share of ``λ ≤ 0`` (the in-sample best
    is at or below the out-of-sample median). ``None`` with fewer than 2 candidates or 40 steps.

    >>> rng = np.random.default_rng(0)
    >>> noise = pbo_cscv(rng.normal(size=(240, 10)))
    >>> skill = rng.normal(size=(240, 10)); skill[:, 0] += 1.0
    >>> noise.pbo > 0.2, pbo_cscv(skill).pbo
    (True, 0.0)
    """
    t, n = scores.shape
    s = cscv_blocks(t)
    if s is None or n < 2:
        return None
    size = t // s
    blocks = scores[: s * size].reshape(s, size, n).sum(axis=1)  # S × N block sums
    combos = np.array(list(itertools.combinations(range(s), s // 2)), dtype=np.int64)
    others = np.array([[b for b in range(s) if b not in set(c)] for c in combos], dtype=np.int64)
    rank = np.empty(len(combos), dtype=np.int64)
    # The halves in slices: memory 3 × PBO_COMBINATIONS × N, not 2 × C(S, S/2) × N; each half's
    # block sums added in block order (not a matrix product, whose rounding depends on the
    # product's shape), so the slice size changes no number.
    for start in range(0, len(combos), PBO_COMBINATIONS):
        part = slice(start, start + PBO_COMBINATIONS)
        ins, oos = _half_sums(blocks, combos[part]), _half_sums(blocks, others[part])
        chosen = oos[np.arange(len(ins)), ins.argmax(axis=1)]
        # Rank 1..N of the chosen candidate out of sample (ties share the lower rank).
        rank[part] = (oos < chosen[:, None]).sum(axis=1) + 1
    omega = rank / (n + 1.0)
    logits = np.log(omega / (1.0 - omega))
    return Pbo(float((logits <= 0.0).mean()), s, len(combos), tuple(float(x) for x in logits))


def _half_sums(blocks: FloatArray, halves: npt.NDArray[np.int64]) -> FloatArray:
    """Per half (a row of block numbers), the sum of its blocks' rows, added in block order."""
    total = blocks[halves[:, 0]]
    for b in range(1, halves.shape[1]):
        total += blocks[halves[:, b]]
    return np.asarray(total, dtype=np.float64)


def decorrelation_span(scores: FloatArray, horizon: int = 1) -> int:
    """Steps after which the candidates' own per-step scores are decorrelated (≥ ``horizon``).

    The scores are taken as differences from the candidates' mean on each step (the shared part
    of a step, which the holdout's baseline also sees, cancels) and de-meaned per candidate; the
    span is the largest of (a) the first lag at which their pooled autocorrelation is at or below
    ``max(0.05, 2/√(N·T))``, (b) the AR(1)-implied lag ``⌈ln 0.05 / ln ρ̂₁⌉`` and (c) the same lag
    for the AR(1) with the measured long-run/short-run variance ratio
    (:func:`~typestrict_pipeline.study.dependence.measure_dependence`: a small persistent part
    lag 1 does not see); at least the outcome horizon, at most ``T − 1``.

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(480, 8)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for t in range(1, 480): x[t] = 0.9 * x[t - 1] + e[t]
    >>> decorrelation_span(rng.normal(size=(480, 8))) <= 2, 20 <= decorrelation_span(x) <= 40
    (True, True)
    """
    t, n = scores.shape
    if t < 3:
        return horizon
    centred = scores - scores.mean(axis=1, keepdims=True) if n >= 2 else scores.copy()
    d = centred - centred.mean(axis=0)
    var = float((d * d).sum())
    if var <= 0.0:
        return horizon
    band = max(DECORRELATED, 2.0 / math.sqrt(n * t))
    first = t - 1
    rho1 = 0.0
    for lag in range(1, t - 1):
        acf = float((d[lag:] * d[:-lag]).sum()) / var
        if lag == 1:
            rho1 = acf
        if acf <= band:
            first = lag
            break
    ar = math.ceil(math.log(DECORRELATED) / math.log(min(rho1, 0.99))) if rho1 > DECORRELATED else 1
    # The long-run variance's AR(1)-equivalent decay, its leaders the best mean differences
    # (``d`` has none left: picked by the rounding of its zero means, the leaders were the
    # series with the most low-frequency content, which set a span of T/2 at 10,000
    # candidates of AR(0.5)).
    measured = measure_dependence(centred).span
    return int(min(t - 1, max(horizon, first, ar, measured)))


def holdout_skip(span: int | None, horizon: int, embargo: int) -> int:
    """Holdout steps to leave out at its start: the measured span (:func:`decorrelation_span`;
    the outcome horizon when none was measured) beyond the layout's embargo. The leaderboard's
    holdout line, the promotion gate and the calibration battery all take it from here; when it
    leaves fewer than 2 steps, :func:`holdout_test` refuses rather than test inside the span.

    >>> holdout_skip(22, 1, 1), holdout_skip(None, 3, 1), holdout_skip(1, 1, 5)
    (21, 2, 0)
    """
    return max(0, (span or horizon) - embargo)


@dataclass(frozen=True)
class HoldoutTest:
    """Winner − baseline on the holdout steps after the measured embargo.

    Attributes:
        skipped: holdout steps left out at its start (the measured span beyond the layout's
            embargo). steps: steps used.
        diff: mean winner − baseline on them; se: its Newey–West SE (the leaderboard's estimator).
        lower_bound: the one-sided 95% lower confidence bound ``diff − z₀.₉₅·SE``.
        required_steps: holdout steps a one-sided 5% test needs to detect the search's
            luck-adjusted edge with 80% power (None when that edge is ≤ 0 or unknown).
        edge_to_detect: that edge (the winner's Adjusted minus the candidates' mean).
    """

    skipped: int
    steps: int
    diff: float
    se: float
    lower_bound: float
    required_steps: int | None
    edge_to_detect: float | None
    change_statistic: float | None = None

    @property
    def stable(self) -> bool:
        """The difference's mean did not change sign over the holdout (self-normalised
        change-point test at 5%, Shao & Zhang 2010, on a difference whose mean before or after
        the break is at or below 0; always true below its 20 steps)."""
        return self.change_statistic is None or self.change_statistic <= CRITICAL_95

    @property
    def confirmed(self) -> bool:
        """The lower bound is above 0 and the difference was stable: the winner beats the
        baseline on unseen data."""
        return self.lower_bound > 0.0 and self.stable

    @property
    def short(self) -> bool:
        """Fewer steps than the power rule asks for."""
        return self.required_steps is not None and self.steps < self.required_steps


def required_holdout_steps(long_run_sd: float, edge: float, *, alpha: float = ALPHA,
                           power: float = POWER) -> int | None:
    """``⌈((z_{1−α} + z_{power})·σ_LR/δ)²⌉``: steps a one-sided test of edge ``δ`` needs.

    >>> required_holdout_steps(0.1, 0.05)  # (1.645 + 0.842)² · 4 = 24.7
    25
    >>> required_holdout_steps(0.1, 0.0) is None
    True
    """
    if not (edge > 0.0 and math.isfinite(edge) and math.isfinite(long_run_sd)):
        return None
    z = float(stats.norm.ppf(1.0 - alpha) + stats.norm.ppf(power))
    return max(2, math.ceil((z * long_run_sd / edge) ** 2))


def holdout_test(
    winner: Mapping[str, float],
    baseline: Mapping[str, float],
    *,
    skip: int,
    horizon: int = 1,
    edge_to_detect: float | None = None,
    long_run_sd: float | None = None,
    dependence: Dependence | None = None,
) -> HoldoutTest:
    """Winner − baseline on the common holdout steps, after skipping the first ``skip`` steps.

    Args:
        winner, baseline: per-step holdout scores keyed by step (ISO times sort in time order).
        skip: holdout steps to leave out at the start (measured span − the layout's embargo).
        horizon: outcome horizon (floors the Newey–West bandwidth).
        edge_to_detect: the search's luck-adjusted edge of the winner (for the power rule).
        long_run_sd: the winner's long-run per-step SD of differences (for the power rule).
        dependence: the persistence measured over the study's candidates
            (``JointInference.dependence``), carried into the holdout's SE: a holdout of a few
            dozen steps cannot show a small persistent part by itself.

    Raises:
        NotEnoughDataError: fewer than 2 common steps remain after the skip.

    >>> w = {f"{t:03d}": 0.6 + 0.01 * (t % 3) for t in range(40)}
    >>> b = {f"{t:03d}": 0.5 for t in range(40)}
    >>> r = holdout_test(w, b, skip=5)
    >>> r.steps, round(r.diff, 3), r.confirmed
    (35, 0.11, True)
    """
    common = sorted(set(winner) & set(baseline))
    used = common[skip:]
    if len(used) < 2:
        raise NotEnoughDataError(
            f"expected at least 2 holdout steps after the measured embargo of {skip} steps, got "
            f"{len(used)} of {len(common)}: the scores stay correlated for longer than the "
            f"holdout. Lengthen the holdout to at least {skip + 2} steps (or the embargo before "
            "it)."
        )
    d = np.array([winner[k] - baseline[k] for k in used], dtype=np.float64)
    se = holdout_standard_error(d, horizon, dependence=dependence)
    diff = float(d.mean())
    z = float(stats.norm.ppf(1.0 - ALPHA))
    need = None
    if edge_to_detect is not None and long_run_sd is not None:
        need = required_holdout_steps(long_run_sd, edge_to_detect)
    change = None
    if d.size >= MIN_STEPS and bool(sign_changes(d)[0]):  # only a lead that came and went
        change = float(self_normalised_statistic(d)[0])
    return HoldoutTest(skip, len(used), diff, se, diff - z * se, need, edge_to_detect, change)


def holdout_standard_error(differences: Sequence[float] | FloatArray, horizon: int = 1, *,
                           dependence: Dependence | None = None) -> float:
    """The SE of a holdout's mean per-step difference that the product prints and stores (the
    runner's ``holdout_se`` and ``holdout_diff_se``, so the lineage's too).

    :func:`~typestrict_pipeline.study.stats.newey_west_se` with the persistence measured over
    the study's candidates carried in (``dependence``): the long-run ratio of the search, many
    series long, is a far better estimate than the holdout's own few dozen steps can give, and
    it is what makes the lineage's per-study SEs carry persistence.

    >>> d = np.random.default_rng(0).normal(size=60)
    >>> holdout_standard_error(d) >= 0.1
    True
    """
    return newey_west_se(np.asarray(differences, dtype=np.float64), horizon, dependence=dependence)
