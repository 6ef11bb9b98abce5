"""Are the leaders' edges stable over the search period? A self-normalised change-point test.

A search whose candidates' edges change sign between regimes (a workflow that wins in calm
weeks and loses in busy ones) has a mean over the search period that depends on how the
period happened to split between regimes. No resampling of that period tells how the next one
will split, so the leaderboard does not say "beats luck" over such a period: it says why.

**The test** (Shao & Zhang, "Testing for change points in time series", *JASA* 105, 2010): for
a series ``x_1..x_n`` with partial sums ``S_k``,

``G_n = max_k T_n(k)²/V_n(k)``, ``T_n(k) = n^{−1/2}(S_k − (k/n)S_n)``,
``V_n(k) = n^{−2}[Σ_{t≤k}(S_t − (t/k)S_k)² + Σ_{t>k}(S_{t,n} − ((n−t+1)/(n−k))S_{k+1,n})²]``.

The denominator is built from the same partial sums as the numerator, within each side of the
candidate break, so the statistic needs no long-run variance, no bandwidth and no block length:
its limit under a stable mean is pivotal for any weakly dependent series (critical values of the
paper's Table 1: 29.6, 40.1 and 68.6 at 10%, 5% and 1%; reproduced here by simulation, 20,000
Gaussian series of 500 steps: 29.5, 41.1, 72.7). It is computed in ``O(n)`` per series with
cumulative sums.

**What is tested**: the winner's per-step difference from the benchmark, and each other
candidate the verdict would name (the StepM set; up to ``LEADERS`` in all), each at 0.5%
(``CRITICAL_995``; a Bonferroni family of ≤ 2%: the test over-rejects under strong persistence —
the winner of own-AR(0.9) searches of 480 steps with a real edge was flagged 12% of the time at
the 5% point, and at the 1% point the power of "beats luck" there was 3 points below round 5's —
and a regime's break is large, so the strict point loses little); a series is *unstable* when
its statistic is above its critical value **and** its mean on one side of the break is at or
below the benchmark's (:func:`sign_changes`): an edge that changes sign between regimes, which
is what makes "beats luck" over the whole period meaningless (a persistent excursion of a real
edge that stays ahead does not withhold the "yes").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Shao & Zhang (2010), Table 1: the 95% and 99% points of the limit of ``G_n``.
CRITICAL_95 = 40.1
CRITICAL_99 = 68.6
#: The 99.5% point, by our simulation (40,000 Gaussian series of 400 steps, seed 7): the level
#: the leaders are tested at.
CRITICAL_995 = 86.9
#: How many leaders are tested (the winner and the next ones by mean difference).
LEADERS = 4
#: Shortest series the test is run on.
MIN_STEPS = 20


def self_normalised_statistic(series: FloatArray) -> FloatArray:
    """``G_n`` of each column of an ``n × k`` array (Shao & Zhang 2010).

    >>> x = np.zeros((100, 2)); x[:, 0] = np.random.default_rng(0).normal(size=100)
    >>> x[:, 1] = x[:, 0] + np.r_[np.zeros(50), np.ones(50)] * 2.0
    >>> g = self_normalised_statistic(x)
    >>> bool(g[0] < CRITICAL_95), bool(g[1] > CRITICAL_99)
    (True, True)
    """
    x = np.asarray(series, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n = x.shape[0]
    t = np.arange(1, n + 1, dtype=np.float64)[:, None]

    def spread(partial: FloatArray) -> FloatArray:
        # Σ_{t≤k} (S_t − (t/k)S_k)², for every k, from cumulative sums.
        m = partial / t
        return np.asarray(np.cumsum(partial * partial, axis=0) - 2.0 * m * np.cumsum(t * partial, axis=0)
                          + m * m * np.cumsum(t * t, axis=0), dtype=np.float64)

    forward = np.cumsum(x, axis=0)
    backward = np.cumsum(x[::-1], axis=0)
    k = np.arange(1, n)
    a = spread(forward)[k - 1]
    b = spread(backward)[n - k - 1]
    num = (forward[k - 1] - (k[:, None] / n) * forward[-1]) ** 2 / n
    den = (a + b) / (n * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0.0, num / np.where(den > 0.0, den, 1.0), 0.0)
    return np.asarray(ratio.max(axis=0), dtype=np.float64)


def sign_changes(series: FloatArray) -> npt.NDArray[np.bool_]:
    """Per column: do the means before and after the most likely break (the ``k`` of ``G_n``)
    differ in sign (one of them at or below 0)? An edge that changes sign between regimes.

    >>> x = np.r_[np.ones(50), -np.ones(50)][:, None] + 0.1
    >>> bool(sign_changes(x)[0]), bool(sign_changes(x + 2.0)[0])
    (True, False)
    """
    x = np.asarray(series, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n = x.shape[0]
    forward = np.cumsum(x, axis=0)
    k = np.arange(1, n)
    # The break's location by the CUSUM's largest excursion (the numerator of G_n).
    cusum = np.abs(forward[k - 1] - (k[:, None] / n) * forward[-1])
    at = cusum.argmax(axis=0) + 1
    cols = np.arange(x.shape[1])
    before = forward[at - 1, cols] / at
    after = (forward[-1] - forward[at - 1, cols]) / (n - at)
    return np.asarray(np.minimum(before, after) <= 0.0, dtype=np.bool_)


@dataclass(frozen=True)
class Stability:
    """The stability check of a study's leaders.

    Attributes:
        tested: the candidate ids tested, the winner first.
        statistics: their ``G_n``.
        critical: the critical value each was compared with.
        unstable: the ids whose mean changed over the search period.
    """

    tested: tuple[str, ...]
    statistics: tuple[float, ...]
    critical: tuple[float, ...]
    unstable: tuple[str, ...]

    @property
    def stable(self) -> bool:
        """No tested leader's mean changed."""
        return not self.unstable

    def text(self, label: dict[str, str] | None = None) -> str:
        """In words, for the leaderboard and the gate.

        >>> print(Stability(("3", "1"), (95.0, 12.0), (86.9, 86.9), ("3",)).text({"3": "#3"}))
        the mean difference of #3 from the benchmark changed during the search period (self-normalised change-point statistic 95.0 above its 0.5% critical value 86.9; Shao & Zhang 2010)
        """
        names = label or {}
        parts = []
        for cid, g, crit in zip(self.tested, self.statistics, self.critical, strict=True):
            if cid in self.unstable:
                level = {CRITICAL_95: "5%", CRITICAL_99: "1%"}.get(crit, "0.5%")
                parts.append(f"{names.get(cid, cid)} from the benchmark changed during the search "
                             f"period (self-normalised change-point statistic {g:.1f} above its "
                             f"{level} critical value {crit:.1f}; Shao & Zhang 2010)")
        if not parts:
            return "the leaders' mean differences were stable over the search period"
        return "the mean difference of " + "; and of ".join(parts)


def leaders_stability(differences: FloatArray, candidates: Sequence[str],
                      claimed: Sequence[int] = ()) -> Stability | None:
    """Test the winner (best mean difference) and the other candidates the verdict would name
    (``claimed``: the StepM set's column indices) at 0.5% each, at most ``LEADERS`` in all.

    Only candidates a "yes" would speak for are tested: a leader picked by luck under
    persistence has, by its selection, an excursion that looks like a break, and testing it
    would withhold true "yes"es for nothing. Returns ``None`` below ``MIN_STEPS`` steps.

    >>> rng = np.random.default_rng(1)
    >>> d = rng.normal(size=(200, 5)); d[100:, 2] += 1.5
    >>> s = leaders_stability(d, list("abcde"))
    >>> s.tested[0], s.unstable
    ('c', ('c',))
    """
    t, k = differences.shape
    if t < MIN_STEPS or k < 1:
        return None
    means = differences.mean(axis=0)
    winner = int(np.argmax(means))
    others = [int(i) for i in sorted(claimed, key=lambda i: -means[i]) if int(i) != winner]
    order = [winner, *others[: LEADERS - 1]]
    g = self_normalised_statistic(differences[:, order])
    flips = sign_changes(differences[:, order]).tolist()
    crit = [CRITICAL_995] * len(order)
    ids = [str(candidates[i]) for i in order]
    bad = tuple(c for c, v, cv, flip in zip(ids, g.tolist(), crit, flips, strict=True)
                if v > cv and flip)
    return Stability(tuple(ids), tuple(float(v) for v in g), tuple(crit), bad)
