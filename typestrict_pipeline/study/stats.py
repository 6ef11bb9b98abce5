"""The statistics of a study: expected best of N under noise, standard errors, luck-adjusted scores.

Definitions (sources in ``docs/method/studies.md``):

* ``e(N)`` is the exact expected maximum of ``N`` independent standard normals,
  ``e(N) = ∫₀^∞ [1 − Φ(x)^N − Φ(−x)^N] dx``, computed by adaptive quadrature (scipy ``quad``),
  never by the Bailey–Borwein–López de Prado–Zhu approximation (0.01–0.04 too high for N ≥ 3).
* ``SE_i`` is the standard error of candidate ``i``'s out-of-sample score **minus the candidates'
  mean** on each step, with a Newey–West (Bartlett kernel) long-run variance and a data-driven
  bandwidth (Andrews, Econometrica 1991, AR(1) plug-in), floored at ``horizon − 1`` for
  overlapping outcomes. Noise shared by every candidate on a step cancels in the difference.
* ``Adjusted_i = OOS_i − SE_i·√(N/(N−1))·e(N)``: for candidates whose own noise is exchangeable,
  ``E[max_i X_i − X̄] = σ·e(N)`` and ``SE(X_i − X̄) = σ·√(1 − 1/N)``, so this subtracts what the
  best of N gains by luck.
* The luck line ``L = b̄ + σ₀·√(N/(N−1))·e(N)`` with ``σ₀ = median SE_i`` and ``b̄`` the baseline
  (by default the mean out-of-sample score of all candidates, i.e. "every candidate is the
  same"): the score pure luck would give as the best of that many. A top score at or below it
  is a search that found nothing. Whether the best *beats* luck is the joint bootstrap's call
  (``typestrict_pipeline.study.inference``).
* ``ρ̄`` (shown for information) is the mean pairwise correlation of the candidates' scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.errors import NotEnoughDataError
from typestrict_pipeline.lazy import LazyModule
from typestrict_pipeline.study.dependence import (
    Dependence,
    column_chunks,
    cosine_ordinates,
    fitted_ratios,
    flat_band,
    max_cosines,
    measure_dependence,
)

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    from scipy import integrate, special, stats
else:
    integrate = LazyModule("scipy.integrate")
    special = LazyModule("scipy.special")
    stats = LazyModule("scipy.stats")

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


#: The longest persistence a test of one series is built for, in steps: the test reads its
#: long-run variance as if it had been estimated with a Bartlett bandwidth of at least this
#: many lags (AR(0.95) decorrelates to 5% in 58 steps; two-state regimes of 60 steps on
#: average). A part more persistent than this within the window is, for the window, a level.
PERSISTENCE_SPAN = 60
#: Bartlett-kernel constant of Andrews (1991, Table I / eq. 6.2): ``S_T = 1.1447·(α(1)·T)^(1/3)``.
_ANDREWS_BARTLETT = 1.1447
#: The AR(1) coefficient used in the plug-in is capped here so that a near-unit-root pilot
#: estimate gives a long but finite bandwidth (Andrews 1991, §6 recommends a cap below 1).
_RHO_CAP = 0.97


def newey_west_bandwidth(scores: Sequence[float] | FloatArray, horizon: int = 1,
                         *, dependence: Dependence | None = None) -> int:
    """Bartlett-kernel bandwidth chosen from the **long-run variance**, floored at ``horizon − 1``.

    The series' dependence is measured by :func:`~typestrict_pipeline.study.dependence.measure_dependence`
    (the low-frequency cosine ordinates, not the lag-1 autocorrelation), or carried in from a
    measurement over many series (``dependence``, for example the study's candidates); the
    bandwidth is Andrews' (*Econometrica* 59(3), 1991) ``1.1447·(α(1)·T)^{1/3}`` for the AR(1)
    with the same long-run/short-run variance ratio, and at least the time scale over which the
    spectrum was seen to be flat. Capped at ``T − 1``.

    >>> newey_west_bandwidth([0.0, 1.0] * 50)  # negative autocorrelation: no lags needed
    0
    >>> rng = np.random.default_rng(0); e = rng.normal(size=400); x = np.empty(400); x[0] = e[0]
    >>> for t in range(1, 400): x[t] = 0.8 * x[t - 1] + e[t]
    >>> newey_west_bandwidth(x) > newey_west_bandwidth(e), newey_west_bandwidth(e, horizon=7)
    (True, 6)
    """
    x = np.asarray(scores, dtype=np.float64)
    t = int(x.size)
    if t < 1:
        raise ValueError(f"expected at least one score, got T={t}. Pass a non-empty series.")
    if horizon < 1:
        raise ValueError(f"expected an outcome horizon ≥ 1 step, got {horizon}. Fix the horizon.")
    own = measure_dependence(x[:, None])
    return _bandwidth(t, own.ratio, own.cosines, horizon, dependence)


def long_run_variance(scores: Sequence[float] | FloatArray, horizon: int = 1, *,
                      dependence: Dependence | None = None) -> tuple[float, float]:
    """The long-run variance of ``scores`` and the degrees of freedom behind it.

    The largest of: the Newey–West (Bartlett) estimate at :func:`newey_west_bandwidth`; the
    equal-weighted cosine (EWC) estimate over the flat band of low frequencies (Lazarus, Lewis,
    Stock & Watson, *JBES* 2018); the bias-corrected AR(1) floor
    (:func:`ar1_long_run_variance`); and, when a measurement over many series is carried in
    (``dependence``), its long-run/short-run ratio times this series' variance. The degrees of
    freedom are the band's number of cosines ``q̂`` (EWC is a scaled χ²_q̂), at most
    :func:`fixed_b_degrees_of_freedom` (what a window of ``T`` steps can say about a part that
    takes ``PERSISTENCE_SPAN`` steps to decorrelate).

    >>> lrv, df = long_run_variance(np.random.default_rng(0).normal(size=400))
    >>> 0.8 < lrv < 1.3, df  # 400 steps: 1.5·400/60 = 10 (the band alone would claim 21)
    (True, 10.0)
    """
    x = np.asarray(scores, dtype=np.float64)
    lrv, df = column_long_run_variances(x.reshape(-1, 1), horizon, dependence=dependence)
    return float(lrv[0]), float(df[0])


def column_long_run_variances(matrix: FloatArray, horizon: int = 1, *,
                              dependence: Dependence | None = None,
                              fit_threshold: float = 0.0) -> tuple[FloatArray, FloatArray]:
    """:func:`long_run_variance` of every column of a ``T × k`` array at once (each column
    judged on its own, plus the carried ``dependence``).

    ``fit_threshold``: how much likelihood a column's own spectral fit needs over white noise
    (:func:`~typestrict_pipeline.study.dependence.fitted_ratios`): 0 for a series judged alone
    (any sign of persistence widens its SE: the side a test's level needs); a χ²₂ point where a
    pooled measurement (``dependence``) already covers the persistence the columns share and
    each column's SE should be a point estimate (the leaderboard's Adjusted and luck line).

    >>> m = np.random.default_rng(0).normal(size=(400, 3))
    >>> lrv, df = column_long_run_variances(m, fit_threshold=9.0)
    >>> bool(np.all((lrv > 0.7) & (lrv < 1.4))), df.shape
    (True, (3,))
    """
    x = np.asarray(matrix, dtype=np.float64)
    t, k = x.shape
    if t < 2:
        raise NotEnoughDataError(
            f"expected at least 2 per-step scores to estimate a standard error, got {t}. "
            "Use longer windows or more folds."
        )
    if not np.all(np.isfinite(x)):
        raise ValueError("expected finite per-step scores, got NaN or infinity. Fix the scorer.")
    if horizon < 1:
        raise ValueError(f"expected an outcome horizon ≥ 1 step, got {horizon}. Fix the horizon.")
    lrv = np.empty(k)
    df = np.empty(k)
    for part in column_chunks(k):  # each column on its own: bounded memory, the same numbers
        lrv[part], df[part] = _column_lrv(x[:, part], horizon, dependence, fit_threshold)
    return lrv, df


def _column_lrv(x: FloatArray, horizon: int, dependence: Dependence | None,
                fit_threshold: float) -> tuple[FloatArray, FloatArray]:
    """:func:`column_long_run_variances` of some of the columns (checked finite, ``T ≥ 2``)."""
    t, k = x.shape
    d = x - x.mean(axis=0)
    g0 = (d * d).mean(axis=0)
    if t < 4:
        return np.asarray(g0, dtype=np.float64), np.ones(k)
    safe = np.where(g0 > 0.0, g0, 1.0)
    ords = cosine_ordinates(d, max(2, t // 2)) / safe
    qmax = max_cosines(t)
    bands = np.array([flat_band(ords[:qmax, j], 1.0) for j in range(k)])
    band_mean = np.array([float(ords[: bands[j], j].mean()) for j in range(k)])
    fit, fit_df = fitted_ratios(ords, t, threshold=fit_threshold)
    own = np.maximum(1.0, np.maximum(band_mean, fit))
    own_df = np.where(fit > band_mean, np.minimum(fit_df, float(qmax)), bands.astype(np.float64))
    ratio, df = own, own_df
    if dependence is not None:  # the persistence measured over many series, at this length
        carried = dependence.ratio > own
        pooled_df = ((dependence.df or float(dependence.cosines)) * max(1, dependence.pooled))
        ratio = np.maximum(own, dependence.ratio)
        df = np.where(carried, pooled_df, own_df)
    df = np.minimum(df, np.maximum(1.0, t / ratio - 1.0))
    # The sample variance of a persistent series is biased low (de-meaning): γ̃₀ = γ̂₀/(1 − r/T).
    spectral = ratio * g0 / np.maximum(0.2, 1.0 - ratio / t)
    # Newey–West at the bandwidth chosen from each column's long-run ratio.
    lags = np.array([_bandwidth(t, float(r), int(q), horizon, dependence)
                     for r, q in zip(own, bands, strict=True)])
    size = 1 << (2 * t - 1).bit_length()
    spec = np.fft.rfft(d, n=size, axis=0)
    acov = np.fft.irfft(spec * np.conj(spec), n=size, axis=0)[:t] / t
    ell = np.arange(t, dtype=np.float64)[:, None]
    weights = np.clip(1.0 - ell / (lags[None, :] + 1.0), 0.0, None)
    weights[0] = 0.5
    nw = 2.0 * (weights * acov).sum(axis=0)
    floor = ar1_long_run_variance(d)
    kernel = np.maximum(nw, floor)
    binds = kernel > spectral
    with np.errstate(divide="ignore", invalid="ignore"):
        kern_k = np.where(g0 > 0.0, kernel / safe, 1.0)
    lrv = np.where(binds, kernel, spectral)
    df = np.where(binds, np.minimum(df, np.maximum(1.0, t / kern_k - 1.0)), df)
    df = np.minimum(df, fixed_b_degrees_of_freedom(t, dependence))
    return np.asarray(np.maximum(lrv, 0.0), dtype=np.float64), np.asarray(np.maximum(df, 1.0),
                                                                         dtype=np.float64)


def _bandwidth(t: int, ratio: float, q: int, horizon: int, dependence: Dependence | None) -> int:
    from typestrict_pipeline.study.dependence import _lengths

    _, lags, _ = _lengths(t, ratio, q)
    if dependence is not None:
        lags = max(lags, min(dependence.bandwidth, math.ceil(dependence.time_scale)))
    return max(0, min(t - 1, max(horizon - 1, lags)))


def fixed_b_degrees_of_freedom(t: int, dependence: Dependence | None = None, *,
                               span: int = PERSISTENCE_SPAN) -> float:
    """The most degrees of freedom a long-run variance measured over ``t`` steps may claim:
    ``ν = 1.5·W/min(W, span)``, ``W`` the window that measured the persistence and ``span``
    the persistence allowed for (``PERSISTENCE_SPAN`` for a series judged alone; the joint test
    of many candidates takes ``inference.JOINT_PERSISTENCE_SPAN``, docs/method/studies.md §3.1a).

    A part that takes ``PERSISTENCE_SPAN`` steps to decorrelate shows in a window of ``W`` steps
    only through ``W/PERSISTENCE_SPAN`` independent pieces (for ``W`` ≤ 60: one, carried
    mostly by the window's mean, where no estimate can see it). So the variance is read as a
    Bartlett estimate with a bandwidth of at least ``PERSISTENCE_SPAN`` lags (``b = S/W`` at
    most 1) under fixed-b asymptotics (Kiefer & Vogelsang, *Econometric Theory* 21, 2005), by
    the Student-t approximation with ``ν = 1/(b·∫k²) = 1.5/b`` for the Bartlett kernel (Sun,
    *J. Econometrics* 178, 2014; LLSW 2018 read EWC the same way). ``W`` is the series' own
    ``t``, or, when a measurement over many series is carried in (``dependence``), the steps
    it pooled (``steps × pooled``), which see the persistence a short series cannot.

    >>> fixed_b_degrees_of_freedom(60), fixed_b_degrees_of_freedom(120)
    (1.5, 3.0)
    >>> fixed_b_degrees_of_freedom(1000), fixed_b_degrees_of_freedom(120, span=30)
    (25.0, 6.0)
    """
    window = float(t)
    if dependence is not None:
        window = max(window, float(dependence.steps * max(1, dependence.pooled)))
    return 1.5 * window / min(window, float(span))


def fixed_smoothing_factor(df: float, alpha: float = 0.05) -> float:
    """``t_df(1−α) / z(1−α)``: how much wider a one-sided bound must be when the long-run
    variance is an estimate with ``df`` degrees of freedom (fixed-smoothing asymptotics:
    Kiefer & Vogelsang, *Econometric Theory* 21, 2005; LLSW 2018, Student-t for EWC).

    >>> round(fixed_smoothing_factor(6), 3), round(fixed_smoothing_factor(1e9), 3)
    (1.181, 1.0)
    """
    return float(stats.t.ppf(1.0 - alpha, df) / stats.norm.ppf(1.0 - alpha))


def long_run_se(scores: Sequence[float] | FloatArray, horizon: int = 1, *,
                dependence: Dependence | None = None) -> float:
    """``√(LRV/T)``: the point estimate of the SD of the mean (no fixed-smoothing allowance).

    >>> round(long_run_se(np.random.default_rng(0).normal(size=400)), 2)
    0.05
    """
    x = np.asarray(scores, dtype=np.float64)
    lrv, _ = long_run_variance(x, horizon, dependence=dependence)
    return math.sqrt(lrv / x.size)


def newey_west_se(scores: Sequence[float] | FloatArray, horizon: int = 1, *,
                  dependence: Dependence | None = None) -> float:
    """The standard error of the mean the product tests with: ``mean ± 1.645·SE`` is a one-sided
    95% bound whatever the persistence the long-run variance can see.

    ``SE = √(LRV/T)·t_ν(0.95)/z(0.95)``: :func:`long_run_variance` (chosen from the long-run
    variance, not the lag-1 autocorrelation; with ``dependence`` the persistence measured over a
    study's candidates is carried in) times :func:`fixed_smoothing_factor` at its degrees of
    freedom ``ν``, so that a test of ``mean > 1.645·SE`` holds its level when the variance itself
    is estimated from few effective steps. ``ν`` is at most :func:`fixed_b_degrees_of_freedom`
    (``1.5·T/60`` for a series judged alone): a short window cannot see a persistent part that
    takes ``PERSISTENCE_SPAN`` steps to decorrelate, since most of it sits in the window's mean.

    Args:
        scores: per-step scores (finite numbers), in time order.
        horizon: the outcome horizon in steps (1 when each outcome is the next step's).
        dependence: a measurement over many series to carry in (optional).

    Returns:
        The standard error of the mean.

    Raises:
        NotEnoughDataError: with fewer than 2 scores (the spread is undefined, not zero).

    >>> round(newey_west_se([1.0, 0.0] * 50), 4)  # alternating: no lags; ν = 2.5 of 100 steps
    0.0789
    >>> round(newey_west_se(np.random.default_rng(0).normal(size=400)), 3)  # iid: ≈ 1.1/√400
    0.055
    """
    x = np.asarray(scores, dtype=np.float64)
    lrv, df = long_run_variance(x, horizon, dependence=dependence)
    return math.sqrt(lrv / x.size) * fixed_smoothing_factor(df)


def ar1_coefficients(series: FloatArray) -> FloatArray:
    """Per column of a ``T × k`` array, the lag-1 coefficient of an AR(1) fitted to it with
    Kendall's small-sample bias correction: ``φ̃ = φ̂ + (1 + 3φ̂)/T`` (Kendall, *Biometrika* 41,
    1954), ``φ̂ = γ̂₁/γ̂₀`` clipped below at 0 and ``φ̃`` clipped above at 0.97.

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(2000, 1)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for t in range(1, 2000): x[t] = 0.5 * x[t - 1] + e[t]
    >>> round(float(ar1_coefficients(x)[0]), 1)
    0.5
    """
    t = series.shape[0]
    x = series - series.mean(axis=0)
    g0 = (x * x).mean(axis=0)
    g1 = (x[1:] * x[:-1]).sum(axis=0) / t
    with np.errstate(all="ignore"):
        phi = np.where(g0 > 0.0, g1 / np.where(g0 > 0.0, g0, 1.0), 0.0)
    return kendall_corrected(phi, t)


def pooled_ar1_coefficient(series: FloatArray) -> float:
    """One bias-corrected AR(1) coefficient for many series: the mean over the columns of
    their lag-1 autocorrelations ``γ̂₁/γ̂₀`` (each column counts once, whatever its variance),
    then clipped and corrected as :func:`ar1_coefficients` does; with the sampling error of one
    series averaged away.

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(120, 64)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for t in range(1, 120): x[t] = 0.9 * x[t - 1] + e[t]
    >>> 0.85 < pooled_ar1_coefficient(x) < 0.95
    True
    """
    t, k = series.shape
    total, used = 0.0, 0
    # A fixed block of columns at a time (bounded memory), not dependence.column_chunks: the
    # joint test's chunk size is a setting, and this one number must not move with it.
    for start in range(0, k, 1024):
        x = series[:, start:start + 1024] - series[:, start:start + 1024].mean(axis=0)
        g0 = (x * x).sum(axis=0)
        g1 = (x[1:] * x[:-1]).sum(axis=0)
        keep = g0 > 0.0
        total += float((g1[keep] / g0[keep]).sum())
        used += int(keep.sum())
    return float(kendall_corrected(np.array([total / used if used else 0.0]), t)[0])


def kendall_corrected(phi: FloatArray, t: int) -> FloatArray:
    """Lag-1 coefficients ``φ̂`` clipped below at 0, then Kendall's small-sample correction
    ``φ̂ + (1 + 3φ̂)/T`` (*Biometrika* 41, 1954), capped at 0.97: the one rule behind
    :func:`ar1_coefficients` and :func:`pooled_ar1_coefficient`.

    >>> kendall_corrected(np.array([-0.2, 0.5, 0.99]), 100).round(3).tolist()
    [0.01, 0.525, 0.97]
    """
    phi = np.clip(phi, 0.0, None)
    return np.asarray(np.minimum(_RHO_CAP, phi + (1.0 + 3.0 * phi) / t), dtype=np.float64)


def ar1_variance(g0: FloatArray, phi: FloatArray | float, t: int) -> FloatArray:
    """The long-run variance of an AR(1) with coefficient ``φ`` and sample variance ``γ̂₀``
    over ``T`` steps: ``γ̂₀/(1 − k/T)·k``, ``k = (1+φ)/(1−φ)`` (the first factor: the
    de-meaning's bias of ``γ̂₀``, at most 5×).

    >>> round(float(ar1_variance(np.ones(1), 0.5, 10_000)[0]), 2)
    3.0
    """
    k = (1.0 + np.asarray(phi, dtype=np.float64)) / (1.0 - np.asarray(phi, dtype=np.float64))
    return np.asarray(g0 / np.maximum(0.2, 1.0 - k / t) * k, dtype=np.float64)


def ar1_long_run_variance(series: FloatArray) -> FloatArray:
    """Per column of a ``T × k`` array, the long-run variance of an AR(1) fitted to it with
    Kendall's small-sample bias correction (:func:`ar1_coefficients`): the floor under every
    Newey–West estimate.

    ``γ̃₀ = γ̂₀ / (1 − k/T)`` (the de-meaning's bias, ``k = (1+φ̃)/(1−φ̃)``), and
    ``LRV = γ̃₀·k`` (:func:`ar1_variance`). A short window of persistent scores makes both the
    Bartlett estimate and the bootstrap's spread too small; this floor restores the AR(1) part
    of it.

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(2000, 1)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for t in range(1, 2000): x[t] = 0.5 * x[t - 1] + e[t]
    >>> round(float(ar1_long_run_variance(x)[0]), 0)  # true: 1/(1−0.5)² = 4
    4.0
    """
    t = series.shape[0]
    x = series - series.mean(axis=0)
    g0 = (x * x).mean(axis=0)
    return ar1_variance(g0, ar1_coefficients(series), t)


def expected_max_independent(standard_errors: Sequence[float]) -> float:
    """``E[max_j X_j]`` for independent ``X_j ~ N(0, SE_j²)`` (unequal spreads), by quadrature.

    ``E[max] = ∫₀^∞ [1 − Π Φ(x/SE_j)] dx − ∫_{−∞}^0 Π Φ(x/SE_j) dx``. With equal ``SE_j = s``
    it is ``s·e(k)``; a zero SE is a point mass at 0.

    >>> round(expected_max_independent([1.0, 1.0]), 6) == round(expected_max_normal(2), 6)
    True
    >>> round(expected_max_independent([0.02, 0.0]), 5)  # max(X, 0): s/√(2π)
    0.00798
    """
    ses = [float(s) for s in standard_errors]
    if not ses or any(not math.isfinite(s) or s < 0 for s in ses):
        raise ValueError(f"expected finite standard errors ≥ 0, got {ses!r}. Fix the holdout scoring.")
    if len(ses) == 1:
        return 0.0
    top = max(ses)
    if top == 0.0:
        return 0.0
    pos = [s for s in ses if s > 0.0]
    has_zero = len(pos) < len(ses)

    def log_cdf(x: float) -> float:
        return float(sum(special.log_ndtr(x / s) for s in pos))

    def upper(x: float) -> float:
        return -math.expm1(log_cdf(x))

    def lower(x: float) -> float:
        return 0.0 if has_zero else math.exp(log_cdf(x))

    reach = 40.0 * top
    head, _ = integrate.quad(upper, 0.0, reach, limit=200, epsabs=1e-13 * top, epsrel=1e-10)
    tail, _ = integrate.quad(lower, -reach, 0.0, limit=200, epsabs=1e-13 * top, epsrel=1e-10)
    return float(head - tail)


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
        return _mean_correlation_complete(matrix)
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


def _mean_correlation_complete(matrix: FloatArray) -> float | None:
    """:func:`mean_pairwise_correlation` of a matrix with no missing value, without the
    ``N × N`` correlation matrix: with ``z_i`` the columns centred and scaled to unit length,
    the correlations sum to ``|Σ z_i|²``, so the mean off-diagonal one is
    ``(|Σ z_i|² − Σ |z_i|²) / (N(N − 1))`` (memory ``T × CANDIDATE_CHUNK``, time ``T·N``; the
    sums run column after column, so the chunk size does not change a bit of the result)."""
    total = np.zeros(matrix.shape[0])
    diagonal = 0.0
    kept = 0
    for part in column_chunks(matrix.shape[1]):
        d = matrix[:, part] - matrix[:, part].mean(axis=0)
        norm = np.sqrt((d * d).sum(axis=0))
        for j in np.flatnonzero(norm > 0.0):
            z = d[:, j] / norm[j]
            total += z
            diagonal += float(z @ z)
            kept += 1
    if kept < 2:
        return None
    return float((float(total @ total) - diagonal) / (kept * (kept - 1.0)))


@dataclass(frozen=True)
class CandidateStats:
    """One leaderboard row's numbers (scores are means of per-step scores).

    ``se`` is the Newey–West SE of the candidate's out-of-sample score minus the candidates'
    mean on each step (what the ranking and the luck line need); ``se_raw`` that of its raw
    out-of-sample score.
    """

    candidate_id: str
    oos: float | None
    in_sample: float | None
    gap: float | None
    se: float | None
    adjusted: float | None
    oos_steps: int
    se_raw: float | None = None


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
    found_nothing: bool | None
    best_id: str | None
    #: ``√(N/(N−1))``: turns the SE of a difference from the candidates' mean into the spread
    #: of the candidate's own noise (the mean contains it: ``Var(X_i − X̄) = σ²(1 − 1/N)``).
    scale: float = 1.0


@dataclass(frozen=True)
class ScoreTable:
    """Out-of-sample per-step scores as one ``T × N`` matrix: ``steps`` (sorted) by ``ids``.

    A missing score is NaN; ``counts`` is each candidate's number of scored steps. Build it
    once from a mapping (:meth:`from_mapping`) or from steps numbered as first seen
    (:meth:`from_indexed`, what the leaderboard does from the store without a dictionary per
    candidate).

    >>> table = ScoreTable.from_mapping({"a": {"2": 1.0, "1": 0.5}, "b": {"2": 0.0}})
    >>> table.steps, table.ids, table.counts.tolist(), table.matrix.tolist()
    (('1', '2'), ('a', 'b'), [2, 1], [[0.5, nan], [1.0, 0.0]])
    """

    steps: tuple[str, ...]
    ids: tuple[str, ...]
    matrix: FloatArray
    counts: npt.NDArray[np.int64]

    @classmethod
    def from_mapping(cls, oos: Mapping[str, Mapping[str, float]]) -> ScoreTable:
        """Per candidate, its scores keyed by step (for example the step's ISO time)."""
        seen: dict[str, int] = {}
        columns = {cid: ([seen.setdefault(k, len(seen)) for k in series], list(series.values()))
                   for cid, series in oos.items()}
        return cls.from_indexed(list(seen), columns)

    @classmethod
    def from_indexed(cls, steps: Sequence[str],
                     columns: Mapping[str, tuple[Sequence[int], Sequence[float]]]) -> ScoreTable:
        """Per candidate, the positions of its steps in ``steps`` and the scores on them (for
        columns held as arrays: no string per score; a step twice: the last score counts)."""
        order = sorted(range(len(steps)), key=lambda i: steps[i])
        position = np.empty(len(steps), dtype=np.int64)
        position[order] = np.arange(len(steps))
        matrix = np.full((len(steps), len(columns)), np.nan)
        counts = np.zeros(len(columns), dtype=np.int64)
        for j, (index, values) in enumerate(columns.values()):
            rows = position[np.asarray(index, dtype=np.int64)]
            matrix[rows, j] = np.asarray(values, dtype=np.float64)
            counts[j] = np.unique(rows).size if len(rows) else 0
        return cls(tuple(steps[i] for i in order), tuple(columns), matrix, counts)

    def complete(self) -> tuple[list[str], FloatArray] | None:
        """The candidates scored on every step and their ``T × k`` matrix (``None``: none, or
        fewer than 3 steps)."""
        full = self.counts == len(self.steps)
        if not full.any() or len(self.steps) < 3:
            return None
        return [cid for cid, f in zip(self.ids, full, strict=True) if f], self.matrix[:, full]


def differences_from_mean(matrix: FloatArray) -> FloatArray:
    """Each candidate's per-step score minus the mean of the candidates scored on that step.

    >>> differences_from_mean(np.array([[1.0, 3.0], [2.0, np.nan]])).tolist()
    [[-1.0, 1.0], [0.0, nan]]
    """
    with np.errstate(all="ignore"):
        step_mean = np.nanmean(matrix, axis=1, keepdims=True)
    return np.asarray(matrix - step_mean, dtype=np.float64)


def search_stats(
    oos: Mapping[str, Mapping[str, float]] | ScoreTable,
    in_sample: Mapping[str, Sequence[float]],
    *,
    horizon: int = 1,
    baseline: float | None = None,
    extra_trials: int = 0,
) -> SearchStats:
    """Rank candidates by their luck-adjusted out-of-sample score.

    ``SE_i`` is the Newey–West SE (data-driven bandwidth) of ``d_{i,t} = s_{i,t} − mean_j s_{j,t}``:
    the noise shared by every candidate on a step cancels, so the scale is right whether the
    persistent noise is the candidates' own or shared. ``Adjusted_i = OOS_i − SE_i·√(N/(N−1))·e(N)``
    and the luck line ``b̄ + σ₀·√(N/(N−1))·e(N)`` (``σ₀ = median SE_i``) are then exact when the
    candidates' own noise is exchangeable (``E[max_i X_i − X̄] = σ·e(N)``).

    Args:
        oos: per candidate, its out-of-sample per-step scores keyed by step (for example the
            step's ISO time); keys let candidates with missing windows be aligned. Or the
            same as a :class:`ScoreTable`.
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
    table = oos if isinstance(oos, ScoreTable) else ScoreTable.from_mapping(oos)
    ids, matrix = list(table.ids), table.matrix
    diff = differences_from_mean(matrix)
    full = np.all(np.isfinite(diff), axis=1)
    dep = measure_dependence(diff[full]) if diff.shape[1] >= 2 and full.sum() >= 4 else None
    means: dict[str, float | None] = {}
    ses: dict[str, float | None] = {}
    raw_ses: dict[str, float | None] = {}
    finite = np.isfinite(matrix).all(axis=0)
    whole = np.flatnonzero(finite).tolist()
    if whole and matrix.shape[0] >= 2:  # one vectorised pass over the fully scored columns
        t_all = matrix.shape[0]
        strict = 2.0 * math.log(20.0 * len(whole))  # the pooled measurement covers persistence
        cols = slice(None) if len(whole) == len(ids) else whole  # no copy when all are whole
        raw_lrv, _ = column_long_run_variances(matrix[:, cols], horizon, fit_threshold=strict)
        diff_lrv, _ = column_long_run_variances(diff[:, cols], horizon, dependence=dep,
                                                fit_threshold=strict)
        for pos, j in enumerate(whole):
            means[ids[j]] = float(matrix[:, j].mean())
            raw_ses[ids[j]] = math.sqrt(float(raw_lrv[pos]) / t_all)
            ses[ids[j]] = math.sqrt(float(diff_lrv[pos]) / t_all)
    for j, cid in enumerate(ids):
        if cid in means:
            continue
        ok = np.isfinite(matrix[:, j])
        series = matrix[ok, j]
        means[cid] = float(series.mean()) if series.size else None
        raw_ses[cid] = long_run_se(series, horizon) if series.size >= 2 else None
        ses[cid] = long_run_se(diff[ok, j], horizon, dependence=dep) if series.size >= 2 else None

    scored = [cid for cid in ids if means[cid] is not None]
    n_trials = len(scored) + max(0, extra_trials)
    e_n = expected_max_normal(n_trials) if n_trials >= 1 else None
    has_mean = np.array([means[cid] is not None for cid in ids], dtype=np.bool_)
    rho = (mean_pairwise_correlation(matrix if has_mean.all() else matrix[:, has_mean])
           if scored else None)
    if len(scored) >= 2:
        scale = math.sqrt(len(scored) / (len(scored) - 1.0))
    else:  # one candidate: its difference from the mean is 0; use its raw SE (e(1) = 0 anyway)
        scale = 1.0
        ses = dict(raw_ses)
    defined_se = [s for s in (ses[c] for c in scored) if s is not None]
    sigma0 = float(np.median(defined_se)) if defined_se else None
    b = baseline
    if b is None and scored:
        b = float(np.mean([m for m in (means[c] for c in scored) if m is not None]))
    luck = None
    if e_n is not None and sigma0 is not None and b is not None:
        luck = b + sigma0 * scale * e_n

    rows = [_row(cid, means[cid], ses[cid], raw_ses[cid], in_sample.get(cid, ()), e_n, scale,
                 int(n)) for cid, n in zip(ids, table.counts, strict=True)]
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
        found_nothing=found_nothing,
        best_id=best,
        scale=scale,
    )


def _row(cid: str, m: float | None, se: float | None, se_raw: float | None,
         in_sample: Sequence[float], e_n: float | None, scale: float, steps: int) -> CandidateStats:
    is_series = np.asarray(in_sample, dtype=np.float64)
    is_mean = float(np.mean(is_series)) if is_series.size else None
    adjusted = None
    if m is not None and se is not None and e_n is not None:
        adjusted = m - se * scale * e_n
    gap = None if (is_mean is None or m is None) else is_mean - m
    return CandidateStats(candidate_id=cid, oos=m, in_sample=is_mean, gap=gap, se=se,
                          adjusted=adjusted, oos_steps=steps, se_raw=se_raw)
