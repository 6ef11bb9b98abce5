"""Joint inference over a study's candidates × steps matrix, PBO, and the holdout's rules.

Pure functions (no store, no Dagster); sources and the calibration measured by simulation are in
``docs/method/studies.md`` §3–§4.

* :func:`joint_inference`: Hansen's SPA consistent p-value (*JBES* 23(4), 2005) and the
  Romano–Wolf StepM set (*Econometrica* 73(4), 2005) of candidates that beat the benchmark, with
  ``arch.bootstrap`` (``SPA``, ``StepM``: a stationary bootstrap, Politis & Romano, *JASA* 1994)
  and a block length by Politis & White (2004, corrected by Patton, Politis & White 2009),
  ``arch.bootstrap.optimal_block_length``.
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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.errors import NotEnoughDataError
from typestrict_pipeline.lazy import LazyModule
from typestrict_pipeline.study.stats import ar1_long_run_variance, newey_west_se

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


@dataclass(frozen=True)
class JointInference:
    """The SPA p-value and the StepM set of one study (differences from the benchmark).

    Attributes:
        benchmark: what the candidates were compared with, in words.
        candidates: the candidate ids tested (columns), in order.
        steps: the out-of-sample steps every tested candidate scored (rows).
        block_length: the stationary bootstrap's mean block length (Politis–White, mean over
            the candidates' difference series, at least 1).
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

    @property
    def beats_luck(self) -> bool:
        """``SPA p ≤ 5%``: some candidate beats the benchmark beyond what the search's luck gives."""
        return self.spa_pvalue <= ALPHA


def _stepm(spa: Any, k: int, pvalue_type: PValueType) -> list[int]:
    """Romano–Wolf StepM on arch's SPA: the steps of ``arch.bootstrap.StepM.compute`` with the
    p-value type chosen (arch's StepM always uses the consistent one)."""
    spa.compute()
    better = [int(i) for i in spa.better_models(ALPHA, pvalue_type)]
    found = better[:]
    while better and len(found) < k:
        selector = np.ones(k, dtype=np.bool_)
        selector[np.array(found)] = False
        spa.subset(selector)
        spa.compute()
        better = [int(i) for i in spa.better_models(ALPHA, pvalue_type)]
        found.extend(better)
    spa.subset(np.ones(k, dtype=np.bool_))
    return sorted(set(found))


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
) -> JointInference:
    """SPA and StepM over a ``T × k`` matrix of per-step scores against a benchmark series.

    Args:
        scores: ``T × k`` out-of-sample per-step scores (higher is better), no missing values.
        candidates: the ``k`` column ids.
        benchmark: the benchmark's ``T`` per-step scores on the same steps.
        benchmark_label: what the benchmark is, for the header.
        seed: seeds ``numpy.random.default_rng`` of the bootstrap (the study's seed).
        reps: bootstrap resamples.
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
    from arch.bootstrap import SPA

    t, k = scores.shape
    if t < MIN_JOINT_STEPS or k < 1:
        raise NotEnoughDataError(
            f"expected at least {MIN_JOINT_STEPS} out-of-sample steps scored by every tested "
            f"candidate, got {t} steps × {k} candidates. Use longer eval windows or more folds."
        )
    diffs = scores - benchmark[:, None]
    blen = block_length(diffs)
    # Losses are negated scores; arch's loss differential is benchmark − model = score − benchmark.
    spa = SPA(-benchmark, -scores, block_size=max(1, round(blen)), reps=reps,
              bootstrap="stationary", seed=np.random.default_rng(seed))
    spa._simulate_values()  # the resampled means (cached; every step below reuses them)
    _floor_bootstrap_spread(spa, diffs)
    superior_idx = _stepm(spa, k, pvalue_type)
    spa.compute()
    pvals = spa.pvalues
    crit = float(spa.critical_values(ALPHA)[pvalue_type])
    means = diffs.mean(axis=0)
    superior = sorted(superior_idx, key=lambda i: -means[i])
    return JointInference(
        benchmark=benchmark_label,
        candidates=tuple(candidates),
        steps=t,
        block_length=blen,
        reps=reps,
        seed=seed,
        spa_pvalue=float(pvals[pvalue_type]),
        pvalue_type=pvalue_type,
        spa_pvalue_lower=float(pvals["lower"]),
        spa_pvalue_upper=float(pvals["upper"]),
        stepm=tuple(candidates[i] for i in superior),
        line_95=float(benchmark.mean()) + crit,
    )


def small_sample_factor(diffs: FloatArray, bootstrap_lrv: FloatArray) -> FloatArray:
    """Per column, how much to widen the bootstrap's spread of the mean (≥ 1).

    A stationary bootstrap resamples the sample, so with persistent scores and a short window it
    understates the spread of the mean (the sample's autocovariances are biased towards 0). The
    floor is the long-run variance of an AR(1) fitted with Kendall's bias correction
    ``φ̃ = φ̂ + (1 + 3φ̂)/T`` (Kendall, *Biometrika* 41, 1954; clipped to [0, 0.97]):
    ``γ̃₀·(1+φ̃)/(1−φ̃)`` with ``γ̃₀`` the variance corrected for the de-meaning, times the ratio
    of Student-t to normal 95% quantiles at the effective sample size ``T·γ̂₀/LRV − 1``
    (a fixed-b-like allowance for estimating that variance from few effective steps).

    >>> d = np.random.default_rng(0).normal(size=(400, 3))
    >>> bool(np.all((small_sample_factor(d, d.var(axis=0)) >= 1.0)))
    True
    """
    t = diffs.shape[0]
    lrv = ar1_long_run_variance(diffs)
    x = diffs - diffs.mean(axis=0)
    g0 = (x * x).mean(axis=0)
    with np.errstate(all="ignore"):
        k = np.where(g0 > 0.0, lrv / np.where(g0 > 0.0, g0, 1.0), 1.0)  # LRV / variance
    nu = np.maximum(2.0, t / k - 1.0)
    t_ratio = stats.t.ppf(1.0 - ALPHA, nu) / stats.norm.ppf(1.0 - ALPHA)
    with np.errstate(all="ignore"):
        ratio = np.where(bootstrap_lrv > 0.0, lrv / np.where(bootstrap_lrv > 0.0, bootstrap_lrv, 1.0), 1.0)
    return np.asarray(np.sqrt(np.maximum(1.0, ratio)) * t_ratio, dtype=np.float64)


def _floor_bootstrap_spread(spa: object, diffs: FloatArray) -> None:
    """Widen arch's resampled deviations ``mean* − mean`` by :func:`small_sample_factor`.

    ``arch.bootstrap.SPA`` (8.0.0) keeps ``_simulated_vals[k, reps, 3]`` = resampled mean minus
    the lower / consistent / upper re-centring, and ``_loss_diff_var``, the stationary
    bootstrap's own long-run variance of each column; the deviation is scaled, the re-centring
    kept. (A test pins the shapes, so an arch upgrade that changes them fails loudly.)
    """
    sim = np.asarray(getattr(spa, "_simulated_vals"))  # noqa: B009 - arch's private cache
    boot_lrv = np.asarray(getattr(spa, "_loss_diff_var"))  # noqa: B009
    factor = small_sample_factor(diffs, boot_lrv)
    upper = diffs.mean(axis=0)
    deviation = sim[:, :, 2].copy()  # resampled mean − the upper (always re-centred) mean
    for j in range(3):
        centre = upper - sim[:, 0, j] + sim[:, 0, 2]
        sim[:, :, j] = factor[:, None] * deviation + (upper - centre)[:, None]
    setattr(spa, "_simulated_vals", sim)  # noqa: B010


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
    pick = np.zeros((len(combos), s))
    np.put_along_axis(pick, combos, 1.0, axis=1)
    ins = pick @ blocks
    oos = (1.0 - pick) @ blocks
    best = ins.argmax(axis=1)
    chosen = oos[np.arange(len(combos)), best]
    # Rank 1..N of the chosen candidate out of sample (ties share the lower rank).
    rank = (oos < chosen[:, None]).sum(axis=1) + 1
    omega = rank / (n + 1.0)
    logits = np.log(omega / (1.0 - omega))
    return Pbo(float((logits <= 0.0).mean()), s, len(combos), tuple(float(x) for x in logits))


def decorrelation_span(scores: FloatArray, horizon: int = 1) -> int:
    """Steps after which the candidates' own per-step scores are decorrelated (≥ ``horizon``).

    The scores are taken as differences from the candidates' mean on each step (the shared part
    of a step, which the holdout's baseline also sees, cancels) and de-meaned per candidate; the
    span is the larger of (a) the first lag at which their pooled autocorrelation is at or below
    ``max(0.05, 2/√(N·T))`` and (b) the AR(1)-implied lag ``⌈ln 0.05 / ln ρ̂₁⌉``; at least the
    outcome horizon, at most ``T − 1``.

    >>> rng = np.random.default_rng(0); e = rng.normal(size=(480, 8)); x = np.empty_like(e)
    >>> x[0] = e[0]
    >>> for t in range(1, 480): x[t] = 0.9 * x[t - 1] + e[t]
    >>> decorrelation_span(rng.normal(size=(480, 8))), 20 <= decorrelation_span(x) <= 40
    (1, True)
    """
    t, n = scores.shape
    if t < 3:
        return horizon
    d = scores - scores.mean(axis=1, keepdims=True) if n >= 2 else scores.copy()
    d = d - d.mean(axis=0)
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
    return int(min(t - 1, max(horizon, first, ar)))


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

    @property
    def confirmed(self) -> bool:
        """The lower bound is above 0: the winner beats the baseline on unseen data."""
        return self.lower_bound > 0.0

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
) -> HoldoutTest:
    """Winner − baseline on the common holdout steps, after skipping the first ``skip`` steps.

    Args:
        winner, baseline: per-step holdout scores keyed by step (ISO times sort in time order).
        skip: holdout steps to leave out at the start (measured span − the layout's embargo).
        horizon: outcome horizon (floors the Newey–West bandwidth).
        edge_to_detect: the search's luck-adjusted edge of the winner (for the power rule).
        long_run_sd: the winner's long-run per-step SD of differences (for the power rule).

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
            f"{len(used)} of {len(common)}. Lengthen the holdout (or the embargo before it)."
        )
    d = np.array([winner[k] - baseline[k] for k in used], dtype=np.float64)
    se = newey_west_se(d, horizon)
    diff = float(d.mean())
    z = float(stats.norm.ppf(1.0 - ALPHA))
    need = None
    if edge_to_detect is not None and long_run_sd is not None:
        need = required_holdout_steps(long_run_sd, edge_to_detect)
    return HoldoutTest(skip, len(used), diff, se, diff - z * se, need, edge_to_detect)
