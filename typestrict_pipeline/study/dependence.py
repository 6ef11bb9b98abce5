"""How long the scores stay dependent: one measurement that sets every length the study uses.

The block length of the joint test's stationary bootstrap, the Newey–West bandwidth, the
long-run variances the bootstrap is widened to, the holdout's extra embargo and the holdout's
standard error all follow from one measurement of the **long-run variance** of the candidates
that matter, made by :func:`measure_dependence` (a step of its own, before any resampling, so
that chunking the joint test over candidates does not change it). Sources and the argument for
heterogeneous persistence are in ``docs/method/studies.md`` §3.1a.

**Why not the lag-1 autocorrelation.** White noise plus a small, very persistent part (10% of
the variance an AR(0.95)) has a lag-1 autocorrelation of 0.09 and a long-run variance 4.8 times
its variance. A rule driven by ``ρ̂₁`` (Andrews' AR(1) plug-in, Politis–White's flat-top
truncation) sees noise and picks blocks of 1–2 steps. The long-run variance is the spectral
density at frequency 0; it shows where the spectrum is, not where lag 1 is.

**The measurement** (Müller, "HAC corrections for strongly autocorrelated time series",
*JBES* 32(3), 2014; Lazarus, Lewis, Stock & Watson, "HAR inference: recommendations for
practice", *JBES* 36(4), 2018, the equal-weighted cosine estimator):

* each series (a candidate's per-step difference from the benchmark) is projected on the
  cosines ``√(2/T)·cos(πl(t−½)/T)``, ``l = 1..q_max``, ``q_max = max(2, ⌊0.4·T^{2/3}⌋)``
  (LLSW's rule). Each projection ``Y_l`` is, for a spectrum flat over ``[0, πl/T]``, a normal
  with variance the long-run variance; ``Y_l²`` divided by the series' variance is the
  variance ratio at frequency ``πl/T``;
* the ratios are pooled over every candidate and, separately, over **the candidates that
  matter**, the leaders (the ``m`` best mean differences, ``m = max(4, ⌈k/8⌉)``, which include
  the winner); the leaders' value is kept where it is significantly above everyone's (F test at
  5%), so a persistent leader is not averaged away and chance does not widen the rest;
* **the band** ``q̂``: starting at ``q_max``, the band is halved while the pooled ratios of its
  lower half are significantly above those of its upper half (an F test at 10% with the
  pooled degrees of freedom): a spectrum that rises towards 0 — persistence — keeps only the
  lowest frequencies, whatever lag 1 says;
* **the ratio** ``r̂ = LRV/variance`` is the pooled mean over the band, at least 1 (negative
  dependence is not used to shrink an SE);
* the **lengths** follow from ``r̂`` through the AR(1) with the same ratio,
  ``φ = (r̂ − 1)/(r̂ + 1)``: the stationary bootstrap's mean block
  ``((r̂² − 1)/(2r̂))^{2/3}·T^{1/3}`` (Politis & White 2004's optimal block for an AR(1),
  written with ``r̂``), the Bartlett bandwidth ``1.1447·(α(1)·T)^{1/3}`` (Andrews 1991) with
  ``α(1) = ((r̂² − 1)/(2r̂))²``, and the time the dependence takes to fall below 0.05,
  ``⌈ln 0.05 / ln φ⌉``; and the band itself gives a time scale ``T/q̂``, the length over which
  the spectrum was seen to be flat: the block and the span are at least ``T/(2q̂)``;
* **long memory** (:func:`memory_fit`): a pooled spectrum is also fitted with white noise plus
  fractional noise; where that is the likelier model, the ratio is the one the window's mean
  needs, ``R_d(T)`` (:func:`fractional_mean_ratio`), which grows with ``T`` instead of levelling
  off. A single series' own fit does not read it (one series cannot tell ``d`` closely enough:
  docs/method/studies.md §3.4, round 12).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.lazy import LazyModule

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    from scipy import special, stats
else:
    special = LazyModule("scipy.special")
    stats = LazyModule("scipy.stats")

FloatArray = npt.NDArray[np.float64]

#: Twice the log-likelihood gain a pooled spectral fit needs over white noise (0: any sign of
#: persistence in the pooled spectrum counts; pooling already averages the noise away).
POOLED_THRESHOLD = 5.99
#: Up to this many series, each one's own spectral fit counts (with so few, the pooled fit
#: cannot see a small persistent part; a chance fit on one of them costs little power).
SMALL_POOL = 8
#: ... when its likelihood gain over white noise passes χ²₂'s 95% point (a chance fit on a white
#: candidate would widen it and hide a real edge of another).
SMALL_POOL_THRESHOLD = 5.99
#: The F test that halves the band: one-sided level.
BAND_LEVEL = 0.10
#: ... and the least the lower half must exceed the upper half by (5%): pooled over thousands
#: of series the F test finds any slope significant, and the gentle slope of a short-memory
#: spectrum (AR(0.5): 3.00 at 0, 2.95 at the band's edge for T = 1,000) halved the band to one
#: cosine, whose time scale ``T/2`` then set a block of T/3 and an embargo of T/2 (measured at
#: 10,000 candidates). Left unhalved, such a band's mean is at most ~2.5% below the long-run
#: variance at 0 (half the 5%): about 1% on an SE.
BAND_MATERIAL = 1.05
#: The autocorrelation below which scores count as decorrelated (the embargo's span).
DECORRELATED = 0.05
#: Candidates (columns) the per-candidate steps of a study's statistics take at once: their
#: working memory is a few ``T × CANDIDATE_CHUNK`` arrays whatever the number of candidates,
#: and every per-candidate result is the one a single pass gives, bit for bit (each column is
#: computed on its own; ``tests/test_study_statistics_chunked.py`` checks it).
CANDIDATE_CHUNK = 1024


def column_chunks(k: int, size: int | None = None) -> list[slice]:
    """Slices of ``range(k)`` of ``size`` columns (default :data:`CANDIDATE_CHUNK`).

    A last chunk of one column joins the one before it: numpy sums a lone column in another
    order (pairwise) than a column of a wider array (row by row), so a one-column chunk could
    differ from the single pass in the last bit.

    >>> column_chunks(5, 2)
    [slice(0, 2, None), slice(2, 5, None)]
    >>> column_chunks(1, 2), column_chunks(4, 10)
    ([slice(0, 1, None)], [slice(0, 4, None)])
    """
    step = max(2, size if size is not None else CANDIDATE_CHUNK)
    bounds = [*range(0, k, step), k]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


def max_cosines(t: int) -> int:
    """``q_max = max(2, ⌊0.4·T^{2/3}⌋)`` (Lazarus, Lewis, Stock & Watson 2018), at most ``T − 1``.

    >>> max_cosines(60), max_cosines(120), max_cosines(1000)
    (6, 9, 39)
    """
    return max(1, min(t - 1, max(2, int(0.4 * t ** (2.0 / 3.0)))))


@lru_cache(maxsize=64)
def _basis(t: int, q: int) -> FloatArray:
    s = np.arange(t, dtype=np.float64) + 0.5
    j = np.arange(1, q + 1, dtype=np.float64)
    return np.asarray(math.sqrt(2.0 / t) * np.cos(np.pi * np.outer(s, j) / t), dtype=np.float64)


def cosine_ordinates(series: FloatArray, q: int) -> FloatArray:
    """``q × k``: the squared cosine projections ``Y_l²`` of each column of a ``T × k`` array.

    For a spectrum flat over the first ``q`` frequencies, each is the long-run variance times a
    χ²₁ draw, so their mean is the equal-weighted cosine (EWC) long-run variance.

    >>> x = np.random.default_rng(0).normal(size=(4000, 1))
    >>> round(float(cosine_ordinates(x, 200).mean()), 1)  # white noise: LRV = variance = 1
    1.0
    """
    t = series.shape[0]
    y = _basis(t, q).T @ series
    return np.asarray(y * y, dtype=np.float64)


@lru_cache(maxsize=4096)
def _f_critical(d1: float, d2: float) -> float:
    return float(stats.f.ppf(1.0 - BAND_LEVEL, d1, d2))


@lru_cache(maxsize=4096)
def _f_critical_at(level: float, d1: float, d2: float) -> float:
    return float(stats.f.ppf(level, d1, d2))


def flat_band(ratios: FloatArray, df_per_ordinate: float) -> int:
    """How many of the lowest frequencies look flat: halve the band while its lower half is
    significantly (F test, one-sided ``BAND_LEVEL``) and materially (``BAND_MATERIAL``) above
    its upper half.

    Args:
        ratios: the pooled variance ratios at frequencies ``1..q_max`` (lowest first).
        df_per_ordinate: degrees of freedom each pooled ratio carries (1 per series pooled).

    >>> flat_band(np.ones(40), 8.0)
    40
    >>> flat_band(np.array([9.0, 6.0, 3.0, 2.0, 1.5, 1.2, 1.0, 1.0]), 8.0)
    2
    >>> flat_band(np.linspace(3.0, 2.9, 40), 10_000.0)  # significant, not material: kept whole
    40
    """
    nu = int(ratios.size)
    while nu >= 2:
        h = nu // 2
        low = float(ratios[:h].mean())
        high = float(ratios[h:nu].mean())
        crit = max(BAND_MATERIAL, _f_critical(h * df_per_ordinate, (nu - h) * df_per_ordinate))
        if high > 0.0 and low > crit * high:
            nu = h
            continue
        break
    return max(1, nu)


#: The AR(1) coefficients the spectral fit may choose (capped at ``1 − 2/T`` for a series of T).
_PHI_GRID = 1.0 - np.geomspace(0.8, 0.004, 48)  # 0.2 … 0.996, about 11% apart in 1 − φ
#: The share of the variance the persistent part may have.
_SHARE_GRID = np.linspace(0.02, 1.0, 50)


def fitted_ratios(ratios: FloatArray, t: int, *, weight: float = 1.0,
                  threshold: float = 0.0) -> tuple[FloatArray, FloatArray]:
    """Long-run/short-run variance ratios from a spectral fit of white noise plus an AR(1), and
    the degrees of freedom behind each.

    ``ratios`` (``q × k``) are the variance ratios of the cosine frequencies ``1..q`` of ``k``
    series. For each column the normalised spectrum
    ``f(ω) = (1 − a) + a·(1 − φ²)/(1 − 2φ·cos ω + φ²)`` is fitted by the Whittle likelihood
    (Whittle 1953; on cosine ordinates, each ``≈ f(ω_l)·χ²₁``) over a grid of ``φ ≤ 1 − 2/T``
    and shares ``a``; the ratio is ``(1 − a) + a·(1 + φ)/(1 − φ)``. The model is what a small
    persistent part in white noise is (exactly an ARMA(1,1)); AR(1), white noise and two-state
    regimes (a Markov chain has AR(1) autocorrelations) are special cases. It reads the shape
    of the whole spectrum, so a peak narrower than the lowest frequencies is extrapolated to 0
    instead of averaged away. The degrees of freedom are Satterthwaite's (*Biometrics Bulletin*
    2, 1946) for the two parts, the persistent part counting ``T(1 − φ)/(1 + φ)`` effective
    steps: a long-run variance carried by a part that hardly repeats in the window is an
    estimate from very few steps, and the test that uses it must say so.

    A **pooled** spectrum (``weight`` > 1) is also fitted with white noise plus fractional noise
    (long memory, :func:`memory_fit`); where that fit is the likelier one, its ratio is used
    when it is the larger.

    The fit replaces "white noise" only when twice its log-likelihood gain (times ``weight``,
    the number of series a pooled column stands for) exceeds ``threshold``: 0 for one series
    judged alone (any sign of persistence is taken, the conservative side), a χ²₂ point when
    many columns are fitted one by one (a chance fit on one of them must not widen it).

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(1000, 8)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for s in range(1, 1000): x[s] = 0.8 * x[s - 1] + 0.6 * e[s]
    >>> x -= x.mean(axis=0)
    >>> r, df = fitted_ratios(cosine_ordinates(x, 500) / (x * x).mean(axis=0), 1000)
    >>> bool(np.all((r > 5.0) & (r < 14.0))), bool(np.all(df > 20))  # true ratio: 1.8/0.2 = 9
    (True, True)
    """
    k = ratios.shape[1]
    grid = _ar1_grid(ratios, t)
    if grid is None:
        return np.ones(k), np.full(k, float(t))
    phi, share, use = _ar1_choice(ratios, t, *grid, weight=weight, threshold=threshold)
    persistent = share * (1.0 + phi) / (1.0 - phi)
    fitted = np.asarray(np.where(use, (1.0 - share) + persistent, 1.0), dtype=np.float64)
    steps = np.maximum(1.0, t * (1.0 - phi) / (1.0 + phi))
    df = np.asarray(np.where(use, fitted * fitted / (persistent * persistent / steps
                                                     + (1.0 - share) ** 2 / t), float(t)),
                    dtype=np.float64)
    if weight > 1.0:  # a pooled spectrum: long memory is read too (memory_fit)
        memory = memory_fit(ratios, t, weight=weight, threshold=threshold,
                            short_memory=grid[1].max(axis=0))
        if memory is not None:
            m_ratio, m_df = memory
            wider = m_ratio > fitted
            fitted = np.asarray(np.where(wider, m_ratio, fitted), dtype=np.float64)
            df = np.asarray(np.where(wider, m_df, df), dtype=np.float64)
    return fitted, df


def ar1_shapes(phis: FloatArray, t: int, q: int) -> FloatArray:
    """``φ × q``: the unit-variance AR(1) spectrum ``(1 − φ²)/(1 − 2φ·cos ω + φ²)`` at the
    cosine frequencies ``ω = πl/T``, ``l = 1..q`` (the spectral fits' shape; a variance ratio).

    >>> ar1_shapes(np.array([0.0, 0.5]), 100, 2).round(3).tolist()
    [[1.0, 1.0], [2.994, 2.977]]
    """
    w = np.pi * np.arange(1, q + 1) / t
    return np.asarray((1.0 - phis[:, None] ** 2) / (1.0 - 2.0 * phis[:, None] * np.cos(w)[None, :]
                                                   + phis[:, None] ** 2), dtype=np.float64)


#: Up to this many ordinates a grid's data-free terms are kept (:func:`_share_terms`): two
#: ``2,400 × q`` arrays, 9 MB at ``q`` = 240, 20 MB at the bound; longer series recompute them.
_CACHED_ORDINATES = 1024


def _share_terms(shape: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The data-free parts of the Whittle log-likelihood of ``f = (1 − a) + a·shape`` over the
    :data:`_SHARE_GRID` shares ``a``: ``Σ log f`` per ``(shape row, share)`` and ``1/f``
    (``(shape row, share) × q``), read-only.

    >>> log_sum, inverse = _share_terms(np.ones((2, 3)))
    >>> log_sum.shape, inverse.shape, float(abs(log_sum).max())
    ((100,), (100, 3), 0.0)
    """
    q = shape.shape[1]
    a = _SHARE_GRID
    f = ((1.0 - a)[None, :, None] + a[None, :, None] * shape[:, None, :]).reshape(-1, q)
    log_sum, inverse = np.log(f).sum(axis=1), 1.0 / f
    log_sum.flags.writeable = False
    inverse.flags.writeable = False
    return log_sum, inverse


@lru_cache(maxsize=16)
def _cached_terms(kind: str, t: int, q: int) -> tuple[FloatArray, FloatArray]:
    shape = ar1_shapes(_PHI_GRID[1.0 - 2.0 / t >= _PHI_GRID], t, q) if kind == "ar1" else _fractional_shapes(t, q)
    return _share_terms(shape)


def _grid_terms(kind: str, t: int, q: int) -> tuple[FloatArray, FloatArray]:
    """:func:`_share_terms` of the AR(1) grid (``kind`` "ar1", :data:`_PHI_GRID` up to
    ``1 − 2/T``) or of the fractional one ("memory", :func:`_fractional_shapes`) for ``T`` and
    ``q``: the same arrays on every call with the same ``T`` and ``q`` (kept for
    ``q`` ≤ :data:`_CACHED_ORDINATES`), so a fit costs one matrix product per call.

    >>> _grid_terms("ar1", 120, 60)[0] is _grid_terms("ar1", 120, 60)[0]
    True
    """
    if q <= _CACHED_ORDINATES:
        return _cached_terms(kind, t, q)
    return _cached_terms.__wrapped__(kind, t, q)


def _grid_loglik(ratios: FloatArray, terms: tuple[FloatArray, FloatArray]) -> FloatArray:
    """Whittle log-likelihoods, ``(shape row, share) × k``, of the grid whose data-free terms
    are ``terms`` (:func:`_grid_terms`)."""
    log_sum, inverse = terms
    return np.asarray(-0.5 * (log_sum[:, None] + inverse @ ratios), dtype=np.float64)


def whittle_fit(ratios: FloatArray, t: int, *, weight: float = 1.0, threshold: float = 0.0
                ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]] | None:
    """The Whittle fit of :func:`fitted_ratios`, per column: the AR(1) coefficient ``φ``, the
    persistent part's share ``a`` of the variance, and whether the fit is used (it beats white
    noise by ``threshold`` and the lowest frequencies carry more than the variance). ``None``
    when no fit is possible (fewer than 2 ordinates, or ``T`` too short for the grid).

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(2000, 1)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for s in range(1, 2000): x[s] = 0.9 * x[s - 1] + e[s]
    >>> x -= x.mean()
    >>> phi, share, use = whittle_fit(cosine_ordinates(x, 1000) / float((x * x).mean()), 2000)
    >>> 0.85 < float(phi[0]) < 0.95, bool(use[0])
    (True, True)
    """
    grid = _ar1_grid(ratios, t)
    if grid is None:
        return None
    return _ar1_choice(ratios, t, *grid, weight=weight, threshold=threshold)


def _ar1_grid(ratios: FloatArray, t: int) -> tuple[FloatArray, FloatArray] | None:
    """The AR(1) family's ``φ`` grid for ``T`` and its Whittle log-likelihoods, ``(φ, a) × k``;
    ``None`` when no fit is possible (fewer than 2 ordinates, or ``T`` too short for the grid)."""
    q = ratios.shape[0]
    phis = _PHI_GRID[1.0 - 2.0 / t >= _PHI_GRID]
    if phis.size == 0 or q < 2:
        return None
    return phis, _grid_loglik(ratios, _grid_terms("ar1", t, q))


def _ar1_choice(ratios: FloatArray, t: int, phis: FloatArray, loglik: FloatArray, *,
                weight: float, threshold: float
                ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """:func:`whittle_fit`'s answer from the grid's log-likelihoods (:func:`_ar1_grid`)."""
    a = _SHARE_GRID
    white = -0.5 * ratios.sum(axis=0)
    best = loglik.argmax(axis=0)
    phi = np.asarray(np.repeat(phis, a.size)[best], dtype=np.float64)
    share = np.asarray(np.tile(a, phis.size)[best], dtype=np.float64)
    # A fit is used only where it beats white noise and the lowest frequencies carry more than
    # the variance (positive dependence: the model cannot describe a spectrum rising to π).
    rising = ratios[: max_cosines(t)].mean(axis=0) > 1.0
    use = np.asarray((2.0 * weight * (loglik.max(axis=0) - white) > threshold) & rising,
                     dtype=np.bool_)
    return phi, share, use


#: The memory parameters ``d`` the long-memory fit may choose (0.025 … 0.475).
_MEMORY_GRID = np.arange(1, 20, dtype=np.float64) * 0.025
#: Long memory is read at the upper end of the one-sided 95% profile-likelihood interval of the
#: window ratio (χ²₁'s 90% point), as the common component is (:data:`COMMON_UPPER`): the
#: variance of a mean grows like ``T^{2d}``, so a ``d`` read low by chance makes a large error.
MEMORY_UPPER = 2.706


def fractional_mean_ratio(d: float, t: int) -> float:
    """``T·Var(x̄)/Var(x)`` of fractional noise ARFIMA(0, ``d``, 0) over ``T`` steps:
    ``1 + 2·Σ_{k<T}(1 − k/T)·ρ_k``, ``ρ_k = Π_{j≤k}(j − 1 + d)/(j − d)`` (Hosking, *Biometrika*
    68, 1981). Unlike a short-memory ratio it has no limit: it grows like ``T^{2d}``.

    >>> fractional_mean_ratio(0.0, 100), round(fractional_mean_ratio(0.3, 480), 1)
    (1.0, 36.7)
    """
    if d <= 0.0 or t < 2:
        return 1.0
    k = np.arange(1, t, dtype=np.float64)
    rho = np.exp(np.cumsum(np.log((k - 1.0 + d) / (k - d))))
    return float(min(float(t), 1.0 + 2.0 * float(((1.0 - k / t) * rho).sum())))


@lru_cache(maxsize=64)
def _fractional_shapes(t: int, q: int) -> FloatArray:
    """``d × q``: fractional noise's spectrum at the cosine frequencies ``πl/T``, over its
    variance: ``|2·sin(ω/2)|^{−2d}·Γ(1−d)²/Γ(1−2d)`` (cached, read-only)."""
    w = np.pi * np.arange(1, q + 1, dtype=np.float64) / t
    d = _MEMORY_GRID[:, None]
    scale = 2.0 * special.gammaln(1.0 - d) - special.gammaln(1.0 - 2.0 * d)
    out = np.asarray(np.exp(-2.0 * d * np.log(2.0 * np.sin(w / 2.0))[None, :] + scale),
                     dtype=np.float64)
    out.flags.writeable = False
    return out


@lru_cache(maxsize=64)
def _memory_windows(t: int) -> FloatArray:
    """:func:`fractional_mean_ratio` at every ``d`` of the grid (cached, read-only)."""
    out = np.array([fractional_mean_ratio(float(d), t) for d in _MEMORY_GRID])
    out.flags.writeable = False
    return out


def memory_fit(ratios: FloatArray, t: int, *, weight: float, threshold: float = 0.0,
               short_memory: FloatArray | None = None
               ) -> tuple[FloatArray, FloatArray] | None:
    """Long memory in a pooled spectrum: the Whittle fit of white noise plus fractional noise,
    ``f(ω) = (1 − a) + a·|2·sin(ω/2)|^{−2d}·Γ(1−d)²/Γ(1−2d)`` (Granger & Joyeux 1980; Hosking
    1981; Whittle estimation of ``d``: Fox & Taqqu, *Annals of Statistics* 14, 1986), per
    column of ``ratios`` (``q × k`` cosine variance ratios, each column standing for
    ``weight`` series).

    Where it beats both the AR(1) fit (:func:`whittle_fit`) and white noise (twice the pooled
    log-likelihood gain above ``threshold``) and the lowest frequencies carry more than the
    variance, the ratio is the window's, ``(1 − a) + a·R_d(T)``
    (:func:`fractional_mean_ratio`), read at the upper end of the profile-likelihood interval
    (:data:`MEMORY_UPPER`); its degrees of freedom are Satterthwaite's with the fractional
    part counting ``T/R_d(T)`` effective steps. Elsewhere the ratio is 1 (not used). ``None``
    when no fit can be made. ``short_memory``: the AR(1) fit's best log-likelihood per column,
    when the caller has computed it (:func:`fitted_ratios`); otherwise it is computed here.

    Summable autocovariances, which every other estimate here assumes, do not hold for long
    memory: a 10%-share AR(1) part and fractional noise with ``d`` = 0.3 can look alike over
    the top frequencies, but over 480 steps the second has a window ratio of 36.7.

    >>> from typestrict_pipeline.study.battery import fractional_block
    >>> x = fractional_block(np.random.default_rng(0), 480, 64, 0.3); x -= x.mean(axis=0)
    >>> r = (cosine_ordinates(x, 240) / (x * x).mean(axis=0)).mean(axis=1, keepdims=True)
    >>> ratio, df = memory_fit(r, 480, weight=64.0)
    >>> 20.0 < float(ratio[0]) < 80.0
    True
    """
    q = ratios.shape[0]
    if short_memory is None:
        grid = _ar1_grid(ratios, t)
        if grid is None:
            return None
        short_memory = grid[1].max(axis=0)
    if q < 2:
        return None
    a = _SHARE_GRID
    best_other = np.maximum(-0.5 * ratios.sum(axis=0), short_memory)  # white noise, AR(1)
    loglik = _grid_loglik(ratios, _grid_terms("memory", t, q))  # (d, a) × k
    contribution = np.repeat(_memory_windows(t), a.size)
    shares = np.tile(a, _MEMORY_GRID.size)
    fitted_all = (1.0 - shares) + shares * contribution  # grid
    best = loglik.max(axis=0)
    inside = loglik >= best[None, :] - MEMORY_UPPER / (2.0 * weight)
    pick = np.argmax(np.where(inside, fitted_all[:, None], -np.inf), axis=0)
    share = shares[pick]
    persistent = share * contribution[pick]
    fitted = (1.0 - share) + persistent
    steps = np.maximum(1.0, t / contribution[pick])
    df = fitted * fitted / (persistent * persistent / steps + (1.0 - share) ** 2 / t)
    rising = ratios[: max_cosines(t)].mean(axis=0) > 1.0
    use = (2.0 * weight * (best - best_other) > threshold) & rising
    return (np.asarray(np.where(use, fitted, 1.0), dtype=np.float64),
            np.asarray(np.where(use, df, float(t)), dtype=np.float64))


def _band_ratio(ratios: FloatArray, pooled: int) -> tuple[int, float]:
    """The flat band of pooled ratios and their mean over it."""
    q = flat_band(ratios, float(pooled))
    return q, float(ratios[:q].mean())


#: Twice the log-likelihood gain over white noise a common component's spectral fit needs
#: (χ²₂'s 95% point: the fit has two parameters; below it the component counts as noise).
COMMON_THRESHOLD = 5.99
#: The common component's persistence is read at the upper end of its one-sided 95% likelihood
#: interval (χ²₁'s 90% point): a search that said "beats luck" under regimes is, by its
#: selection, one whose window saw few switches, where the point estimate of ``φ`` is low.
COMMON_UPPER = 2.706


def mean_variance_ratio(phi: float, t: int) -> float:
    """``T·Var(x̄)/Var(x)`` of a stationary AR(1) ``x`` with coefficient ``φ`` over ``T`` steps:
    ``(1+φ)/(1−φ) − 2φ(1−φ^T)/(T(1−φ)²)``, the exact finite-window long-run ratio (it tends to
    ``(1+φ)/(1−φ)`` as ``T`` grows; at most ``T``).

    >>> round(mean_variance_ratio(0.0, 100), 6), round(mean_variance_ratio(0.9, 10_000), 1)
    (1.0, 19.0)
    >>> round(mean_variance_ratio(0.967, 120), 1)  # a 60-step regime in 120 steps: not 59.6
    45.1
    """
    if phi <= 0.0:
        return 1.0
    full = (1.0 + phi) / (1.0 - phi)
    edge = 2.0 * phi * (1.0 - phi**t) / (t * (1.0 - phi) ** 2)
    return float(min(float(t), max(1.0, full - edge)))


@dataclass(frozen=True)
class CommonComponent:
    """A persistent component the candidates' differences share (issue #27, regimes).

    A regime shared by a search (calm weeks and busy ones) moves every candidate's difference
    from the benchmark by its own loading times one common path. Per candidate it is a small
    part of each step (a lag-1 autocorrelation of 0.08 for the battery's 60-step regimes), so
    no candidate's own spectrum shows it; the loading-weighted cross-sectional average
    ``a_t = Σ_i d̄_i·(d_{i,t} − d̄_i)`` (weights: the candidates' mean differences, so the
    leaders, whose lead the component may have made, weigh most) averages the candidates' own
    noise away and keeps the shared path. It is the first step of a principal-components
    estimate of a one-factor model (Stock & Watson, *JASA* 97, 2002; Bai & Ng, *Econometrica*
    70, 2002), with the loadings read from the means.

    Attributes:
        steps: ``T``.
        phi: the AR(1) coefficient of the persistent part of ``a`` (Whittle fit,
            :func:`whittle_fit`).
        share: that part's variance over the sample variance of ``a`` (:func:`common_fit`; above 1
            when the window sat mostly in one state).
        span: steps until its autocorrelation falls to 5% (``⌈ln 0.05/ln φ⌉``).
        candidates: how many candidates were averaged.
        series: ``a_t``, de-meaned (the loadings of each candidate are read against it).
    """

    steps: int
    phi: float
    share: float
    span: int
    candidates: int
    series: tuple[float, ...] = field(repr=False)

    @property
    def window_ratio(self) -> float:
        """``T·Var(mean)/Var`` of the persistent part over the window (:func:`mean_variance_ratio`)."""
        return mean_variance_ratio(self.phi, self.steps)

    @property
    def degrees_of_freedom(self) -> float:
        """What a long-run variance carried by this part can claim: its effective steps
        ``T(1−φ)/(1+φ)``, and at most the fixed-b reading ``1.5·T/min(T, span)`` (Kiefer &
        Vogelsang 2005; ``stats.fixed_b_degrees_of_freedom``), at least 1."""
        effective = self.steps * (1.0 - self.phi) / (1.0 + self.phi)
        fixed_b = 1.5 * self.steps / min(self.steps, max(1, self.span))
        return max(1.0, min(effective, fixed_b))

    def text(self) -> str:
        """In words, for the leaderboard.

        >>> print(CommonComponent(480, 0.967, 0.6, 89, 16, ()).text())
        a component shared by the 16 candidates decorrelates over 89 steps (AR(1) 0.967, 60% of the loading-weighted average's variance)
        """
        return (f"a component shared by the {self.candidates} candidates decorrelates over "
                f"{self.span} steps (AR(1) {self.phi:.3f}, {100.0 * self.share:.0f}% of the "
                "loading-weighted average's variance)")


#: Up to this many candidates, a candidate's loading on the common component is read on the
#: average without its own term (measured: with 4 candidates the average is mostly the winner's
#: own noise; with 8 the full average is needed to keep regimes at 5%).
COMMON_LEAVE_OUT = 4
#: The common fit's grid: the persistent part's variance over the average's sample variance
#: (above 1 is allowed: a window that sat mostly in one regime shows less variance than the
#: regime has), and the white part's.
_COMMON_PERSISTENT = np.geomspace(0.01, 8.0, 60)
_COMMON_WHITE = np.linspace(0.0, 1.5, 31)


def common_fit(ratios: FloatArray, t: int) -> tuple[float, float] | None:
    """The persistence of a common series from its cosine variance ratios ``ratios`` (``q``,
    lowest first): the Whittle fit of ``w + p·(1−φ²)/(1 − 2φ·cos ω + φ²)`` (a white part and an
    AR(1) part, their levels free: both are variances over the series' sample variance, so a
    window that saw one regime mostly can show a persistent part larger than its own variance),
    read at the **upper end of the one-sided 95% profile-likelihood interval of the long-run
    contribution** ``p·T·v(φ)`` (:func:`mean_variance_ratio`): of the grid points whose
    log-likelihood is within χ²₁(0.90)/2 of the best, the one with the largest contribution.
    ``None`` when the fit does not beat white noise (twice the log-likelihood gain ≤
    :data:`COMMON_THRESHOLD`) or cannot be made. Returns ``(φ, p)``.

    A search that said "beats luck" under regimes is, by that selection, one whose window saw
    few switches and sat longer in one state: there the point estimates of ``φ`` and of the
    persistent variance are low, and the upper end keeps the widening honest.

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(1000, 1)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for s in range(1, 1000): x[s] = 0.9 * x[s - 1] + e[s]
    >>> x -= x.mean()
    >>> phi, p = common_fit(cosine_ordinates(x, 500)[:, 0] / float((x * x).mean()), 1000)
    >>> 0.85 < phi < 0.97, common_fit(rng.normal(size=500) ** 2, 1000)
    (True, None)
    """
    q = ratios.shape[0]
    phis = _PHI_GRID[1.0 - 2.0 / t >= _PHI_GRID]
    if phis.size == 0 or q < 2:
        return None
    if not float(ratios[: max_cosines(t)].mean()) > 1.0:
        return None  # no excess at the low frequencies: not persistent, whatever the fit says
    shape = ar1_shapes(phis, t, q)  # φ × q
    # Only the grid points near the best one matter (the best, and those within the interval's
    # reach of it): found by :func:`_screened_cells`, then every one of them, and only they,
    # evaluated in double precision as the full double-precision grid was (same sums, same order).
    near = _screened_cells(ratios, shape)
    lls = _cell_log_likelihoods(ratios, shape, near)
    best_ll = float(lls.max())
    level = float(ratios.mean())
    white_ll = -0.5 * (q * math.log(level) + q) if level > 0.0 else -np.inf
    if not 2.0 * (best_ll - white_ll) > COMMON_THRESHOLD:
        return None
    contribution = (np.array([mean_variance_ratio(float(f), t) for f in phis])[near[0]]
                    * _COMMON_PERSISTENT[near[1]])
    inside = lls >= best_ll - COMMON_UPPER / 2.0
    pick = int(np.argmax(np.where(inside, contribution, -np.inf)))  # first of ties, grid order
    return float(phis[near[0][pick]]), float(_COMMON_PERSISTENT[near[1][pick]])


#: How far below the single-precision best a grid point may sit and still be evaluated in
#: double precision: the interval's reach (``COMMON_UPPER/2``) plus 1 for rounding, which near
#: the best point is under 0.01 in the log-likelihood (≤ 500 ordinates of order 1, relative 6e-8).
_SCREEN_MARGIN = COMMON_UPPER / 2.0 + 1.0


def _grid_log_likelihoods(ratios: FloatArray, shape: FloatArray) -> npt.NDArray[np.float32]:
    """The Whittle log-likelihood of every (φ, persistent, white) grid point, single precision: the
    whole grid, the reference :func:`_screened_cells` is checked against (it evaluates only the
    points that may matter)."""
    r = ratios.astype(np.float32)
    p = _COMMON_PERSISTENT.astype(np.float32)
    white = _COMMON_WHITE.astype(np.float32)
    shape32 = shape.astype(np.float32)
    lls = np.empty((shape.shape[0], p.size, white.size), dtype=np.float32)
    for j in range(shape.shape[0]):  # φ × p × w × q is large: one φ at a time
        f = white[None, :, None] + p[:, None, None] * shape32[j][None, None, :]
        np.maximum(f, np.float32(1e-12), out=f)
        lls[j] = -0.5 * (np.log(f).sum(axis=2) + (r[None, None, :] / f).sum(axis=2))
    return lls


#: The screen's blocks of grid points (φ, persistent, white), coarse then fine: every coarse
#: block's log-likelihood is bounded from above in one evaluation, then the fine blocks of the
#: coarse ones that may matter (:func:`_block_upper_bounds`).
_SCREEN_BLOCKS = ((4, 4, 4), (2, 2, 2))


def _block_upper_bounds(ratios: FloatArray, shape: FloatArray, size: tuple[int, int, int],
                        blocks: tuple[npt.NDArray[np.intp], ...]) -> FloatArray:
    """An upper bound on the Whittle log-likelihood of every grid point of each block of
    ``size`` grid points (φ, persistent, white) whose block indices are ``blocks``, double
    precision.

    Each ordinate's term ``−½(log f + r/f)`` rises up to ``f = r`` and falls after it, and a
    block's ``f = w + p·shape`` lies between its smallest ``w``, ``p`` and shape and its largest
    (shapes per ordinate over the block's φ rows): the term's largest value over that interval
    is at ``r`` clipped into it, and the sum of those largest values bounds every point of the
    block (the clip at ``1e-12`` is monotone and kept).

    >>> shape = ar1_shapes(_PHI_GRID[:8], 120, 60)
    >>> r = np.random.default_rng(0).exponential(size=60)
    >>> first = (np.array([0]), np.array([0]), np.array([0]))
    >>> bound = _block_upper_bounds(r, shape, (4, 4, 4), first)
    >>> every = _grid_log_likelihoods(r, shape).astype(np.float64)
    >>> bool(bound[0] >= every[:4, :4, :4].max())
    True
    """
    bf, bp, bw = size
    rows = range(0, shape.shape[0], bf)
    low = np.stack([shape[i:i + bf].min(axis=0) for i in rows])  # φ-blocks × q
    high = np.stack([shape[i:i + bf].max(axis=0) for i in rows])
    fb, pb, wb = blocks
    p, w = _COMMON_PERSISTENT, _COMMON_WHITE
    p_high = p[np.minimum(pb * bp + bp, p.size) - 1]
    w_high = w[np.minimum(wb * bw + bw, w.size) - 1]
    lo = np.maximum(w[wb * bw][:, None] + p[pb * bp][:, None] * low[fb], 1e-12)
    hi = np.maximum(w_high[:, None] + p_high[:, None] * high[fb], 1e-12)
    best_f = np.clip(ratios[None, :], lo, hi)
    return np.asarray(-0.5 * (np.log(best_f).sum(axis=1) + (ratios[None, :] / best_f).sum(axis=1)),
                      dtype=np.float64)


def _screened_cells(ratios: FloatArray, shape: FloatArray) -> tuple[npt.NDArray[np.intp], ...]:
    """The grid points (φ, persistent, white indices, in grid order) that may lie within the
    interval's reach (``COMMON_UPPER/2``) of the best one: those whose single-precision
    log-likelihood is within :data:`_SCREEN_MARGIN` of the best single-precision one, looked
    for only in the fine blocks (:data:`_SCREEN_BLOCKS`) whose upper bound
    (:func:`_block_upper_bounds`), and whose coarse block's, reach the best coarse block
    centre's double-precision log-likelihood minus ``COMMON_UPPER/2``. A block below that holds
    no point within the reach, and the best point is in a block above it: so these are the
    points of the whole single-precision grid (:func:`_grid_log_likelihoods`) that matter,
    found at a fraction of its cost (docs/benchmarks.md).

    >>> shape = ar1_shapes(_PHI_GRID[:20], 240, 120)
    >>> rng = np.random.default_rng(1)
    >>> r = rng.exponential(size=120) * (1.0 + 8.0 / np.arange(1, 121))
    >>> near = _screened_cells(r, shape)
    >>> every = _grid_log_likelihoods(r, shape)
    >>> old = np.nonzero(every >= every.max() - _SCREEN_MARGIN)
    >>> lls = _cell_log_likelihoods(r, shape, near)
    >>> set(zip(*near)) >= {c for c, v in zip(zip(*old), _cell_log_likelihoods(r, shape, old))
    ...                     if v >= lls.max() - COMMON_UPPER / 2.0}
    True
    """
    size = (shape.shape[0], _COMMON_PERSISTENT.size, _COMMON_WHITE.size)
    coarse, fine = _SCREEN_BLOCKS
    counts = tuple(-(-n // b) for n, b in zip(size, coarse, strict=True))
    blocks = tuple(g.ravel() for g in np.meshgrid(*(np.arange(c) for c in counts), indexing="ij"))
    centres = tuple(np.minimum(i * b + b // 2, n - 1) for i, b, n in zip(blocks, coarse, size, strict=True))
    best_centre = float(_cell_log_likelihoods(ratios, shape, centres).max())
    # a relative allowance for the bounds' own rounding (double precision: far below 1e-6)
    cut = best_centre - COMMON_UPPER / 2.0 - 1e-6 * (1.0 + abs(best_centre))
    kept = _block_upper_bounds(ratios, shape, coarse, blocks) >= cut
    # the fine blocks of the kept coarse ones (a coarse block is whole fine blocks)
    per = tuple(c // f for c, f in zip(coarse, fine, strict=True))
    offsets = [g.ravel() for g in np.meshgrid(*(np.arange(m) for m in per), indexing="ij")]
    children = tuple((b[kept][:, None] * m + o[None, :]).ravel()
                     for b, m, o in zip(blocks, per, offsets, strict=True))
    inside = np.all([c * f < n for c, f, n in zip(children, fine, size, strict=True)], axis=0)
    children = tuple(c[inside] for c in children)
    kept_fine = _block_upper_bounds(ratios, shape, fine, children) >= cut
    mask = np.zeros(size, dtype=np.bool_)
    for df, dp, dw in itertools.product(*(range(f) for f in fine)):
        mask[np.minimum(children[0][kept_fine] * fine[0] + df, size[0] - 1),
             np.minimum(children[1][kept_fine] * fine[1] + dp, size[1] - 1),
             np.minimum(children[2][kept_fine] * fine[2] + dw, size[2] - 1)] = True
    cells = np.nonzero(mask)
    screened = _cell_log_likelihoods(ratios, shape, cells, single=True)
    near = screened >= screened.max() - _SCREEN_MARGIN
    return tuple(c[near] for c in cells)


def _cell_log_likelihoods(ratios: FloatArray, shape: FloatArray,
                          cells: tuple[npt.NDArray[np.intp], ...], *, single: bool = False) -> FloatArray:
    """The Whittle log-likelihood of the grid points ``cells`` (φ, persistent, white indices),
    double precision (``single``: computed in single precision, as the screen reads them), each
    summed over the ordinates as the whole grid's was."""
    dtype: type[np.floating[Any]] = np.float32 if single else np.float64
    r: npt.NDArray[np.floating[Any]] = ratios.astype(dtype, copy=False)
    s: npt.NDArray[np.floating[Any]] = shape.astype(dtype, copy=False)
    white: npt.NDArray[np.floating[Any]] = _COMMON_WHITE.astype(dtype, copy=False)
    persistent: npt.NDArray[np.floating[Any]] = _COMMON_PERSISTENT.astype(dtype, copy=False)
    f = white[cells[2]][:, None] + persistent[cells[1]][:, None] * s[cells[0]]  # cells × q
    f = np.maximum(f, dtype(1e-12))
    return np.asarray(-0.5 * (np.log(f).sum(axis=1) + (r[None, :] / f).sum(axis=1)), dtype=np.float64)


def loading_weighted_average(differences: FloatArray) -> FloatArray:
    """``a_t = Σ_i d̄_i·d_{i,t}``, de-meaned: the candidates' differences weighted by their mean
    differences (:class:`CommonComponent`), a ``T`` series.

    >>> a = loading_weighted_average(np.array([[1.0, 0.0], [3.0, 0.0]]))
    >>> a.tolist()
    [-2.0, 2.0]
    """
    x = np.asarray(differences, dtype=np.float64)
    a = x @ x.mean(axis=0)
    return np.asarray(a - a.mean(), dtype=np.float64)


def measure_common(differences: FloatArray) -> CommonComponent | None:
    """The persistent component shared by the candidates' differences (:class:`CommonComponent`),
    or ``None`` (fewer than 2 candidates or 4 steps, or the average's spectrum not significantly
    persistent: χ²₂ at 5%, :data:`COMMON_THRESHOLD`).

    >>> rng = np.random.default_rng(0)
    >>> state = np.repeat(rng.choice([-1.0, 1.0], size=8), 60)  # 8 regimes of 60 steps
    >>> d = rng.normal(size=(480, 16)) + 0.3 * np.outer(state, rng.normal(size=16))
    >>> c = measure_common(d)
    >>> c is not None and c.span > 40, measure_common(rng.normal(size=(480, 16)))
    (True, None)
    """
    x = np.asarray(differences, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 4 or x.shape[1] < 2:
        return None
    t, k = x.shape
    a = loading_weighted_average(x)
    var = float(a @ a) / t
    if not var > 0.0:
        return None
    fit = common_fit(cosine_ordinates(a[:, None], max(2, t // 2))[:, 0] / var, t)
    if fit is None:
        return None
    phi, share = fit
    span = math.ceil(math.log(DECORRELATED) / math.log(phi)) if phi > DECORRELATED else 1
    return CommonComponent(t, phi, share, int(min(max(1, span), t - 1)), k,
                           tuple(float(v) for v in a))


@dataclass(frozen=True)
class Dependence:
    """The measured dependence of a study's scores and every length chosen from it.

    Attributes:
        steps: ``T``, the series' length.
        ratio: ``r̂``, long-run variance over variance of the candidates that matter (≥ 1).
        cosines: ``q̂``, the flat band (how many cosine frequencies the LRV averages).
        block_length: the stationary bootstrap's mean block length (steps, ≥ 1).
        bandwidth: Newey–West (Bartlett) lags.
        span: steps after which the scores are decorrelated (the holdout's embargo).
        pooled: how many series the measurement pooled (degrees of freedom per frequency).
        df: degrees of freedom of the ratio per series pooled (the band's cosines, or the
            spectral fit's Satterthwaite degrees of freedom when the fit sets the ratio;
            0 means "the band's").
    """

    steps: int
    ratio: float
    cosines: int
    block_length: float
    bandwidth: int
    span: int
    pooled: int
    df: float = 0.0
    common: CommonComponent | None = None

    @property
    def time_scale(self) -> float:
        """``T/q̂``: the length, in steps, over which the spectrum was seen to be flat."""
        return self.steps / self.cosines

    def for_length(self, t: int) -> int:
        """The cosine band for another series of ``t`` steps with the same time scale (≥ 1).

        >>> Dependence(120, 4.0, 3, 10.0, 8, 12, 20).for_length(60)
        1
        """
        return max(1, min(max_cosines(t), int(t / self.time_scale)))

    def text(self) -> str:
        """In words, for the leaderboard.

        >>> print(Dependence(120, 4.0, 3, 10.0, 8, 12, 20).text())
        long-run/short-run variance 4.00 over the lowest 3 of 9 cosine frequencies (a time scale of 40 steps), pooled over 20 series
        """
        text = (f"long-run/short-run variance {self.ratio:.2f} over the lowest {self.cosines} of "
                f"{max_cosines(self.steps)} cosine frequencies (a time scale of "
                f"{self.time_scale:.0f} steps), pooled over {self.pooled} series")
        if self.common is not None:
            text += ("; " + self.common.text() + ", counted in each candidate's long-run variance "
                     "by its loading on it")
        return text


def _lengths(t: int, ratio: float, q: int) -> tuple[float, int, int]:
    """Block length, Bartlett lags and decorrelation span from ``r̂`` and the band."""
    r = max(1.0, ratio)
    slope = (r * r - 1.0) / (2.0 * r)  # = 2φ/(1 − φ²) for the AR(1) with that ratio
    scale = t / (2.0 * q)
    block = max(1.0, (slope ** (2.0 / 3.0)) * t ** (1.0 / 3.0))
    if q < max_cosines(t):
        block = max(block, scale)
    block = min(block, max(1.0, t / 3.0))
    lags = max(0, math.ceil(1.1447 * (slope * slope * t) ** (1.0 / 3.0)) - 1) if slope > 0 else 0
    if q < max_cosines(t):
        lags = max(lags, math.ceil(scale))
    lags = min(lags, t - 1)
    phi = (r - 1.0) / (r + 1.0)
    span = math.ceil(math.log(DECORRELATED) / math.log(phi)) if phi > DECORRELATED else 1
    if q < max_cosines(t):
        span = max(span, math.ceil(scale))
    return float(block), int(lags), int(min(max(1, span), t - 1))


def measure_dependence(differences: FloatArray, *, leaders: int | None = None,
                       common: bool = False) -> Dependence:
    """Measure the long-run variance of the candidates that matter (see the module docstring).

    Args:
        differences: ``T × k`` per-step differences (candidate − benchmark), no missing values.
        leaders: how many of the best mean differences count as leaders (default
            ``max(4, ⌈k/8⌉)``).

    Returns:
        The ratio, the band and the lengths chosen from them.

    >>> rng = np.random.default_rng(0)
    >>> white = measure_dependence(rng.normal(size=(240, 20)))
    >>> e = rng.normal(size=(240, 20)); ar = np.empty_like(e); ar[0] = e[0]
    >>> for s in range(1, 240): ar[s] = 0.9 * ar[s - 1] + e[s]
    >>> white.block_length < 4, measure_dependence(ar).block_length > 10
    (True, True)
    """
    x = np.asarray(differences, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    t, k = x.shape
    if t < 4:
        return Dependence(t, 1.0, 1, 1.0, 0, 1, k)
    d = x - x.mean(axis=0)
    var = (d * d).mean(axis=0)
    keep = var > 0.0
    if not keep.any():
        return Dependence(t, 1.0, max_cosines(t), 1.0, 0, 1, k)
    qmax = max_cosines(t)
    half = max(2, t // 2)
    ords = cosine_ordinates(d[:, keep], half) / var[keep]  # T/2 × k': variance ratios
    means = x.mean(axis=0)[keep]
    m = min(ords.shape[1], leaders if leaders is not None else max(4, math.ceil(k / 8)))
    top = np.argsort(-means, kind="stable")[:m]
    measured = []
    for group in (ords, ords[:, top]):
        pooled_ratios = group.mean(axis=1)
        q, band = _band_ratio(pooled_ratios[:qmax], group.shape[1])
        fit, fit_df = _pooled_fit(group, t)
        ratio = max(band, fit)
        df = min(fit_df, float(qmax)) if fit > band else float(q)
        measured.append((q, ratio, df, group.shape[1]))
    best_q, best_ratio, best_df, pooled = measured[0]
    lead_q, lead_ratio, lead_df, lead_n = measured[1]
    # The leaders' pool counts where it is significantly above everyone's (F test at 5%): a
    # persistent leader is not averaged away, and four white leaders do not widen by chance.
    crit = _f_critical_at(0.95, max(1.0, lead_df) * lead_n, max(1.0, best_df) * pooled)
    if lead_ratio > crit * best_ratio:
        best_q, best_ratio, best_df, pooled = min(best_q, lead_q), lead_ratio, lead_df, lead_n
    block, lags, span = _lengths(t, best_ratio, best_q)
    return Dependence(t, max(1.0, best_ratio), best_q, block, lags, span, pooled,
                      min(best_df, float(best_q)) if best_ratio <= 1.0 else best_df,
                      measure_common(x) if common else None)


def _pooled_fit(group: FloatArray, t: int) -> tuple[float, float]:
    """:func:`fitted_ratios` with one spectrum shared by the columns of ``group``."""
    k = group.shape[1]
    # The pooled likelihood is k times that of the mean ratio: the same argmax, so fit the mean.
    ratio, df = fitted_ratios(group.mean(axis=1, keepdims=True), t, weight=float(k),
                              threshold=0.0 if k == 1 else POOLED_THRESHOLD)
    return float(ratio[0]), float(df[0])


def long_run_variances(differences: FloatArray, dep: Dependence, *,
                       family: int | None = None) -> tuple[FloatArray, FloatArray]:
    """Per column: the long-run variance to widen to, and the degrees of freedom behind it.

    Each candidate gets the pooled ratio times its own variance (many degrees of freedom); a
    candidate whose own equal-weighted cosine estimate over the band is significantly larger
    (F test at 5%/k) keeps its own (``q̂`` degrees of freedom): a candidate more persistent than
    the pooled ones is widened for it, and chance does not widen the others. A single series
    takes the larger of its band estimate and its spectral fit (:func:`fitted_ratios`).

    >>> d = np.random.default_rng(0).normal(size=(300, 3))
    >>> lrv, df = long_run_variances(d, measure_dependence(d))
    >>> lrv.shape, bool(np.all(lrv > 0)), bool(np.all(df >= 1))
    ((3,), True, True)

    ``family``: how many candidates are tested together (default: the columns given), so that
    a caller taking the candidates in chunks gets each column's own result.
    """
    x = differences - differences.mean(axis=0)
    t = x.shape[0]
    var = (x * x).mean(axis=0)
    safe = np.where(var > 0.0, var, 1.0)
    ords = cosine_ordinates(x, max(2, t // 2)) / safe
    k = x.shape[1] if family is None else family
    band = ords[: dep.cosines].mean(axis=0)
    if k <= SMALL_POOL:  # few series: each one's own spectral fit counts (one alone: any sign)
        fit, fit_df = fitted_ratios(ords, t, threshold=0.0 if k == 1 else SMALL_POOL_THRESHOLD)
        own_ratio = np.maximum(band, fit)
        df_own = np.where(fit > band, np.minimum(fit_df, float(max_cosines(t))),
                          float(dep.cosines))
    else:
        # Many series: the pooled ratio is precise; a column keeps its own band estimate only
        # where it is significantly above the pooled one (F test at 5%/k over the band), so
        # a persistent candidate among white ones is widened and chance does not widen the rest.
        pooled_df = float(dep.cosines * max(1, dep.pooled))
        crit = float(stats.f.ppf(1.0 - 0.05 / k, dep.cosines, pooled_df))
        own_ratio = np.where(band > crit * dep.ratio, band, 1.0)
        df_own = np.full(x.shape[1], float(dep.cosines))
    df_own = np.minimum(df_own, np.maximum(1.0, t / np.maximum(own_ratio, 1.0) - 1.0))
    ratio = np.maximum(own_ratio, dep.ratio)
    # The sample variance of a persistent series is biased low (de-meaning): γ̃₀ = γ̂₀/(1 − r/T).
    lrv = ratio * var / np.maximum(0.2, 1.0 - ratio / t)
    pooled = float(max(1, dep.pooled))
    dep_df = dep.df if dep.df > 0.0 else float(dep.cosines)
    df_pooled = min(dep_df * pooled, pooled * max(1.0, t / dep.ratio - 1.0))
    df = np.where(own_ratio > dep.ratio, df_own, df_pooled)
    if dep.common is not None and len(dep.common.series) == t:
        lrv, df = _with_common(x, differences.mean(axis=0), var, lrv, df, dep.common,
                               leave_out=k <= COMMON_LEAVE_OUT)
    return np.asarray(lrv, dtype=np.float64), np.asarray(np.maximum(1.0, df), dtype=np.float64)


def _with_common(x: FloatArray, means: FloatArray, var: FloatArray, lrv: FloatArray,
                 df: FloatArray, common: CommonComponent, *,
                 leave_out: bool) -> tuple[FloatArray, FloatArray]:
    """Each candidate's long-run variance with its part of the common component counted:
    its loading ``β_i = ⟨x_i, a⟩/⟨a, a⟩`` on the common series ``a`` — with few candidates
    (``leave_out``, up to ``COMMON_LEAVE_OUT``) on ``a₋ᵢ = a − d̄_i·x_i``, the average without its
    own term, since there the average is mostly the winner's own noise, which its own spectral
    fit already counts (measured: own AR(0.9), 4 candidates, T = 480, one 0.5-SD edge found in
    23% of 200 searches with ``a``, 31% with ``a₋ᵢ``, 34% before) — the persistent part's
    variance ``p_i = share·β_i²·Var(a₋ᵢ)``, and ``Var_i − p_i(1 − v) + p_i·T·v``
    (``T·v``: the part's
    window ratio, :func:`mean_variance_ratio`), where it is larger than the candidate's own;
    its degrees of freedom Satterthwaite's for the two parts, the common part claiming
    :attr:`CommonComponent.degrees_of_freedom`."""
    t = x.shape[0]
    a = np.asarray(common.series, dtype=np.float64)
    xa = x.T @ a
    xx = (x * x).sum(axis=0)
    drop = means if leave_out else np.zeros_like(means)
    cross = xa - drop * xx  # ⟨x_i, a₋ᵢ⟩
    own = float(a @ a) - 2.0 * drop * xa + drop * drop * xx  # ⟨a₋ᵢ, a₋ᵢ⟩
    with np.errstate(all="ignore"):
        beta2 = np.where(own > 0.0, cross * cross / np.where(own > 0.0, own, 1.0) ** 2, 0.0)
    part = common.share * beta2 * (np.maximum(own, 0.0) / t)
    ratio = common.window_ratio
    v = ratio / t
    long_part = part * ratio
    rest = np.maximum(var - part * (1.0 - v), 0.0)
    lrv_c = rest + long_part
    with np.errstate(all="ignore"):
        df_c = lrv_c * lrv_c / (long_part * long_part / common.degrees_of_freedom
                                + rest * rest / np.maximum(1.0, df))
    use = lrv_c > lrv
    return (np.asarray(np.where(use, lrv_c, lrv), dtype=np.float64),
            np.asarray(np.where(use, df_c, df), dtype=np.float64))
