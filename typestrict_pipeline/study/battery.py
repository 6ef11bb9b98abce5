"""The studies' calibration battery: dependent processes, and the rates of every "yes" on them.

Every rate is measured through the public functions the product itself calls:

* the leaderboard's "Beats luck at 5%": :func:`typestrict_pipeline.study.inference.joint_inference`
  (benchmark: the candidates' mean, upper p-value, as ``leaderboard._joint`` calls it);
* the Newey–West standard error: :func:`typestrict_pipeline.study.stats.newey_west_se` (a
  one-sided 5% test ``mean > 1.645·SE``);
* the promotion gate: a null search ranked by :func:`~typestrict_pipeline.study.stats.search_stats`,
  the winner's and the active version's holdout continuing the same processes, the measured span
  (:func:`~typestrict_pipeline.study.inference.decorrelation_span`) and
  :func:`~typestrict_pipeline.study.inference.holdout_test` (``confirmed``);
* the lineage: consecutive holdouts of one continuing difference series, each study's SE the one
  the runner stores (:func:`~typestrict_pipeline.study.inference.holdout_standard_error`), and
  :func:`typestrict_pipeline.reruns.lineage.confidence_sequence_path`: "persists" is said when
  the always-valid lower bound is above 0 at some look.

A **process** draws a ``T × n`` block of per-step noise (unit variance where it has one) for
``n`` independent series; the battery adds structure (candidates, edges) on top. Every draw
comes from ``numpy.random.default_rng(seed)``; a cell's seed is printed beside its rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
from scipy import signal, special, stats

from typestrict_pipeline.study.dependence import Dependence
from typestrict_pipeline.study.stability import Stability

FloatArray = npt.NDArray[np.float64]
BURN = 300


def ar_block(rng: np.random.Generator, t: int, n: int, phi: float,
             innovations: str = "normal", lag: int = 1) -> FloatArray:
    """``n`` unit-variance AR series ``x_t = phi·x_{t−lag} + √(1−phi²)·e_t`` of length ``t``
    (burn-in ``BURN`` × ``lag`` steps), filtered in C.

    ``innovations``: ``"normal"``, ``"t3"`` (Student-t with 3 degrees of freedom, scaled to
    unit variance: heavy tails) or ``"lognormal"`` (lognormal(0, 1) shocks centred and scaled to
    unit variance: skewness 6.2, so a long right tail and many small negative steps). ``lag`` > 1 is a seasonal AR: each step's noise carries over
    to the same step of the next cycle (``lag`` 7: a weekly pattern in daily steps), so the
    autocorrelation is ``phi^k`` at lags ``k·lag`` and 0 at every other lag, lag 1 included,
    while the long-run variance is ``(1+phi)/(1−phi)`` times the variance, as at lag 1.

    >>> x = ar_block(np.random.default_rng(0), 20_000, 1, 0.5)
    >>> round(float(x.std()), 1), round(float(np.corrcoef(x[1:, 0], x[:-1, 0])[0, 1]), 1)
    (1.0, 0.5)
    >>> w = ar_block(np.random.default_rng(0), 20_000, 1, 0.8, lag=7)[:, 0]
    >>> [round(float(np.corrcoef(w[k:], w[:-k])[0, 1]), 1) for k in (1, 7, 14)]
    [0.0, 0.8, 0.6]
    >>> s = ar_block(np.random.default_rng(0), 20_000, 1, 0.5, "lognormal")[:, 0]
    >>> round(float(s.std()), 1), float(stats.skew(s)) > 2.0
    (1.0, True)
    """
    if lag < 1 or not -1.0 < phi < 1.0:
        raise ValueError(f"expected a lag ≥ 1 and |phi| < 1, got lag {lag}, phi {phi}. "
                         "Use, e.g., lag 7 and phi 0.8.")
    burn = BURN * lag
    if innovations == "t3":
        e = rng.standard_t(3, size=(t + burn, n)) / math.sqrt(3.0)
    elif innovations == "lognormal":
        e = ((rng.lognormal(0.0, 1.0, size=(t + burn, n)) - math.exp(0.5))
             / math.sqrt((math.e - 1.0) * math.e))
    else:
        e = rng.standard_normal((t + burn, n))
    if phi == 0.0:
        return np.asarray(e[burn:], dtype=np.float64)
    a = np.zeros(lag + 1)
    a[0], a[lag] = 1.0, -phi
    x = signal.lfilter([math.sqrt(1.0 - phi * phi)], a, e, axis=0)
    return np.asarray(x[burn:], dtype=np.float64)


def ma_block(rng: np.random.Generator, t: int, n: int, theta: float) -> FloatArray:
    """``n`` unit-variance MA(1) series ``(e_t + theta·e_{t−1})/√(1+theta²)`` of length ``t``;
    ``theta`` 0 is white noise, drawn exactly as ``ar_block(rng, t, n, 0.0)``; lag 1 is
    ``theta/(1+theta²)`` (−0.44 at −0.6).

    >>> x = ma_block(np.random.default_rng(0), 20_000, 1, -0.6)[:, 0]
    >>> round(float(x.std()), 1), round(float(np.corrcoef(x[1:], x[:-1])[0, 1]), 2)
    (1.0, -0.45)
    """
    if theta == 0.0:
        return ar_block(rng, t, n, 0.0)
    e = rng.standard_normal((t + 1, n))
    return np.asarray((e[1:] + theta * e[:-1]) / math.sqrt(1.0 + theta * theta),
                      dtype=np.float64)


def garch_block(rng: np.random.Generator, t: int, n: int, alpha: float = 0.1,
                beta: float = 0.85) -> FloatArray:
    """``n`` GARCH(1,1) series with Student-t(5) shocks, unit unconditional variance.

    >>> x = garch_block(np.random.default_rng(0), 50_000, 1)
    >>> 0.8 < float(x.var()) < 1.2
    True
    """
    omega = 1.0 - alpha - beta
    z = rng.standard_t(5, size=(t + BURN, n)) / math.sqrt(5.0 / 3.0)
    h = np.ones(n)
    out = np.empty((t + BURN, n))
    for s in range(t + BURN):
        out[s] = math.sqrt(1.0) * np.sqrt(h) * z[s]
        h = omega + alpha * out[s] ** 2 + beta * h
    return np.asarray(out[BURN:], dtype=np.float64)


#: Lags of the truncated MA(∞) filter of :func:`fractional_block`.
MEMORY_LAGS = 4096


def fractional_block(rng: np.random.Generator, t: int, n: int, d: float) -> FloatArray:
    """``n`` unit-variance fractionally integrated series ARFIMA(0, ``d``, 0) of length ``t``:
    long memory, autocorrelation decaying like ``k^(2d−1)`` (Granger & Joyeux 1980; Hosking
    1981), so the variance of a ``T``-step mean falls like ``T^(2d−1)``, not ``1/T``.

    Drawn as white noise through the MA(∞) weights ``ψ_k = Γ(k+d)/(Γ(k+1)Γ(d))`` truncated at
    ``MEMORY_LAGS`` lags (rescaled to unit variance), by FFT convolution.

    >>> x = fractional_block(np.random.default_rng(0), 20_000, 1, 0.3)
    >>> round(float(x.std()), 1), round(float(np.corrcoef(x[1:, 0], x[:-1, 0])[0, 1]), 1)
    (1.0, 0.4)
    """
    if not 0.0 < d < 0.5:
        raise ValueError(f"expected a memory parameter d in (0, 0.5), got {d}. Use, e.g., 0.3.")
    k = np.arange(MEMORY_LAGS, dtype=np.float64)
    psi = np.exp(special.gammaln(k + d) - special.gammaln(k + 1.0) - special.gammaln(d))
    psi /= math.sqrt(float((psi * psi).sum()))
    e = rng.standard_normal((t + MEMORY_LAGS, n))
    x = signal.fftconvolve(e, psi[:, None], mode="full", axes=0)
    return np.asarray(x[MEMORY_LAGS:MEMORY_LAGS + t], dtype=np.float64)


def regime_path(rng: np.random.Generator, t: int, duration: float, n: int = 1) -> FloatArray:
    """``t × n`` two-state Markov regime paths in {−1, +1} (mean duration ``duration`` steps,
    symmetric), independent across columns.

    >>> r = regime_path(np.random.default_rng(0), 10_000, 50.0)
    >>> set(np.unique(r).tolist()) == {-1.0, 1.0}, abs(float(r.mean())) < 0.3
    (True, True)
    """
    switch = rng.random((t + BURN, n)) < 1.0 / duration
    state = (np.cumsum(switch, axis=0) + (rng.random(n) < 0.5)) % 2
    return np.asarray(2.0 * state[BURN:] - 1.0, dtype=np.float64)


def ar2_block(rng: np.random.Generator, t: int, n: int, phi1: float, phi2: float) -> FloatArray:
    """``n`` unit-variance AR(2) series ``x_t = phi1·x_{t−1} + phi2·x_{t−2} + e_t`` of length
    ``t`` (burn-in ``BURN`` steps), divided by the square root of the stationary variance
    ``(1−phi2)/((1+phi2)((1−phi2)² − phi1²))``; lag 1 is ``phi1/(1−phi2)``.

    With complex roots (``phi1² + 4·phi2 < 0``) the autocorrelation oscillates while it decays:
    at 1.2 / −0.5, lag 1 reads 0.8 (as AR(0.8)) but lag 4 is already slightly negative, and the
    long-run variance is 3.0 times the variance (AR(0.8)'s: 9).

    >>> x = ar2_block(np.random.default_rng(0), 20_000, 1, 1.2, -0.5)[:, 0]
    >>> [round(float(np.corrcoef(x[k:], x[:-k])[0, 1]), 2) for k in (1, 2, 4)]
    [0.8, 0.46, -0.06]
    >>> round(float(x.std()), 1)
    1.0
    """
    if not (phi2 > -1.0 and phi1 + phi2 < 1.0 and phi2 - phi1 < 1.0):
        raise ValueError(f"expected a stationary AR(2), got phi1 {phi1}, phi2 {phi2}. Use, e.g., "
                         "1.2 and -0.5.")
    var = (1.0 - phi2) / ((1.0 + phi2) * ((1.0 - phi2) ** 2 - phi1 * phi1))
    e = rng.standard_normal((t + BURN, n))
    x = signal.lfilter([1.0 / math.sqrt(var)], [1.0, -phi1, -phi2], e, axis=0)
    return np.asarray(x[BURN:], dtype=np.float64)


def switching_block(rng: np.random.Generator, t: int, n: int, phi: float, duration: float, *,
                    shared: bool = True) -> tuple[FloatArray, FloatArray]:
    """``n`` unit-variance series whose persistence switches: ``x_t = φ_t·x_{t−1} + √(1−φ_t²)·e_t``
    with ``φ_t`` = ``phi`` in one regime and 0 in the other (white noise), on a two-state regime
    path of mean duration ``duration`` steps (:func:`regime_path`; burn-in ``BURN`` steps).

    Returns the ``t × n`` block and its ``t × 1`` regime path (``shared``: one path for all
    series) or ``t × n`` paths (one each), +1 where the series is persistent. The variance is 1
    in both regimes; only the dependence switches. Computed without a loop over steps: an AR(1)
    filter ``z`` over all steps, then ``x_t = z_t − phi^(t−s+1)·z_{s−1}`` with ``s`` the last
    white step at or before ``t`` (where the AR restarts from ``x_s = e_s``).

    >>> x, path = switching_block(np.random.default_rng(0), 20_000, 1, 0.95, 60.0)
    >>> on = path[1:, 0] > 0.0
    >>> def lag1(m):
    ...     return float(np.corrcoef(x[1:, 0][m], x[:-1, 0][m])[0, 1])
    >>> round(lag1(on), 2), abs(lag1(~on)) < 0.05, round(float(x.std()), 1)
    (0.94, True, 1.0)
    """
    if not 0.0 < phi < 1.0:
        raise ValueError(f"expected an AR coefficient in (0, 1), got {phi}. Use, e.g., 0.95.")
    steps = t + BURN
    path = regime_path(rng, steps, duration, 1 if shared else n)
    e = rng.standard_normal((steps, n))
    on = np.broadcast_to(path > 0.0, e.shape)
    z = signal.lfilter([1.0], [1.0, -phi], np.where(on, math.sqrt(1.0 - phi * phi) * e, e), axis=0)
    idx = np.broadcast_to(np.arange(steps)[:, None], e.shape)
    last = np.maximum.accumulate(np.where(on, -1, idx), axis=0)  # −1: no white step yet
    before = np.take_along_axis(np.vstack([np.zeros((1, n)), z]), np.maximum(last, 0), axis=0)
    x = z - np.power(phi, idx - last + 1) * before
    return np.asarray(x[BURN:], dtype=np.float64), np.asarray(path[BURN:], dtype=np.float64)


@dataclass(frozen=True)
class Process:
    """A kind of per-step noise of ``n`` series (each series a candidate's own noise).

    Attributes:
        name: the label of the battery's tables.
        phi: AR(1) coefficient (``kind`` ``"ar"``, ``"heavy"``).
        kind: ``"ar"``, ``"heavy"`` (AR with t3 shocks), ``"mixture"`` (``√(1−w)``·white +
            ``√w``·AR(``phi``), ``w`` = ``weight``), ``"garch"``, ``"regimes"`` (a shared regime
            path; each series' mean is ``±amplitude`` by regime, its sign and size its own,
            plus white noise), ``"factor"`` (a shared AR(``phi``) factor with loadings of
            ``±√weight`` per series, plus white noise: persistent noise that does not cancel in
            differences), ``"hetero"`` (a ``weight`` share of the series AR(``phi``), the rest
            white: uneven persistence), ``"fractional"`` (long memory: ARFIMA(0, ``memory``, 0),
            :func:`fractional_block`), ``"seasonal"`` (AR(``phi``) at lag ``period`` only,
            :func:`ar_block` with ``lag``: a weekly pattern that lag 1 does not see at all),
            ``"volatility"`` (white noise whose scale switches between 0.5 and 2 on a shared
            regime path of mean ``duration`` steps: the spread changes, the mean never does),
            ``"jumps"`` (white noise plus, at a ``weight`` share of steps, a jump of
            ``±amplitude`` SDs, scaled to unit variance: rare outliers, kurtosis ≈ 10 at 1% and
            6), ``"ar2"`` (AR(2) with coefficients ``phi``, ``phi2``, :func:`ar2_block`: complex
            roots make the persistence oscillate), ``"switching"`` (AR(``phi``) in one regime,
            white in the other, on a shared regime path of mean ``duration`` steps,
            :func:`switching_block`: the dependence switches, the variance does not),
            ``"duplicates"`` (near-duplicate candidates: a ``weight`` share of the variance a
            shared AR(``phi``), the rest each series' own AR(``phi``)), ``"lognormal"``
            (AR(``phi``) with skewed lognormal shocks, :func:`ar_block`).
        ma: for ``"mixture"``, the white part is an MA(1) ``e_t + ma·e_{t−1}`` scaled to unit
            variance instead (0: white, the same draws as before): a negative ``ma`` makes lag
            1 negative, hiding the persistent part from it even more.
        weight, amplitude, duration, memory, period, phi2: see ``kind``.
    """

    name: str
    kind: str = "ar"
    phi: float = 0.0
    weight: float = 0.1
    amplitude: float = 0.3
    duration: float = 60.0
    memory: float = 0.3
    period: int = 7
    ma: float = 0.0
    tags: tuple[str, ...] = field(default=())
    phi2: float = 0.0

    def draw(self, rng: np.random.Generator, t: int, n: int, *, shared: bool = True,
             paths: list[FloatArray] | None = None) -> FloatArray:
        """A ``t × n`` block of this noise: ``n`` candidates of one search (``shared``: one regime
        path, one factor for all), or ``n`` independent series (``shared=False``).

        ``paths``: for ``"regimes"``, ``"volatility"`` and ``"switching"``, the ``t × 1`` shared
        regime path (``t × n`` independent ones) is appended to it; the draws are the same with
        or without it.

        >>> PROCESSES["mixture"].draw(np.random.default_rng(0), 50, 3).shape
        (50, 3)
        """
        if self.kind == "ar":
            return ar_block(rng, t, n, self.phi)
        if self.kind == "heavy":
            return ar_block(rng, t, n, self.phi, "t3")
        if self.kind == "mixture":
            w = self.weight
            return math.sqrt(1.0 - w) * ma_block(rng, t, n, self.ma) + math.sqrt(w) * ar_block(
                rng, t, n, self.phi)
        if self.kind == "garch":
            return garch_block(rng, t, n)
        if self.kind == "regimes":
            path = regime_path(rng, t, self.duration, 1 if shared else n)
            if paths is not None:
                paths.append(path)
            edges = self.amplitude * rng.standard_normal(n)
            return np.asarray(path * edges[None, :] + ar_block(rng, t, n, self.phi),
                              dtype=np.float64)
        if self.kind == "factor":
            f = ar_block(rng, t, 1 if shared else n, self.phi)
            load = math.sqrt(self.weight) * rng.choice([-1.0, 1.0], size=n) * rng.random(n)
            return np.asarray(f * load[None, :] + ar_block(rng, t, n, 0.0), dtype=np.float64)
        if self.kind == "hetero":
            out = ar_block(rng, t, n, 0.0)
            k = max(1, round(self.weight * n))
            cols = rng.choice(n, size=k, replace=False)
            out[:, cols] = ar_block(rng, t, k, self.phi)
            return out
        if self.kind == "fractional":
            return fractional_block(rng, t, n, self.memory)
        if self.kind == "seasonal":
            return ar_block(rng, t, n, self.phi, lag=self.period)
        if self.kind == "volatility":
            path = regime_path(rng, t, self.duration, 1 if shared else n)
            if paths is not None:
                paths.append(path)
            return np.asarray(np.where(path > 0.0, 2.0, 0.5) * ar_block(rng, t, n, 0.0),
                              dtype=np.float64)
        if self.kind == "jumps":
            size = self.amplitude
            jumps = (rng.random((t, n)) < self.weight) * rng.choice([-size, size], size=(t, n))
            return np.asarray((rng.standard_normal((t, n)) + jumps)
                              / math.sqrt(1.0 + self.weight * size * size), dtype=np.float64)
        if self.kind == "ar2":
            return ar2_block(rng, t, n, self.phi, self.phi2)
        if self.kind == "switching":
            x, path = switching_block(rng, t, n, self.phi, self.duration, shared=shared)
            if paths is not None:
                paths.append(path)
            return x
        if self.kind == "duplicates":
            common = ar_block(rng, t, 1 if shared else n, self.phi)
            return np.asarray(math.sqrt(self.weight) * common + math.sqrt(1.0 - self.weight)
                              * ar_block(rng, t, n, self.phi), dtype=np.float64)
        if self.kind == "lognormal":
            return ar_block(rng, t, n, self.phi, "lognormal")
        raise ValueError(f"expected a known process kind, got {self.kind!r}. Use one of "
                         "ar, heavy, mixture, garch, regimes, factor, hetero, fractional, "
                         "seasonal, volatility, jumps, ar2, switching, duplicates, lognormal.")


PROCESSES: dict[str, Process] = {p.name: p for p in (
    Process("white"),
    Process("AR(0.6)", phi=0.6),
    Process("AR(0.9)", phi=0.9),
    Process("mixture", kind="mixture", phi=0.95, weight=0.1),
    Process("regimes", kind="regimes", amplitude=0.3, duration=60.0),
    Process("regimes, AR(0.5)", kind="regimes", amplitude=0.3, duration=40.0, phi=0.5),
    Process("regimes, 120 steps", kind="regimes", amplitude=0.3, duration=120.0),
    Process("heavy AR(0.5)", kind="heavy", phi=0.5),
    Process("GARCH", kind="garch"),
    Process("factor AR(0.9)", kind="factor", phi=0.9, weight=0.5),
    Process("uneven: 10% AR(0.95)", kind="hetero", phi=0.95, weight=0.1),
    Process("uneven: half AR(0.9)", kind="hetero", phi=0.9, weight=0.5),
    Process("mixture 20% AR(0.98)", kind="mixture", phi=0.98, weight=0.2),
    Process("long memory d=0.2", kind="fractional", memory=0.2),
    Process("long memory d=0.3", kind="fractional", memory=0.3),
    Process("weekly AR(0.8)", kind="seasonal", phi=0.8, period=7),
    Process("volatility regimes", kind="volatility", duration=60.0),
    Process("MA(−0.6) + 15% AR(0.97)", kind="mixture", phi=0.97, weight=0.15, ma=-0.6),
    # Round 18 (docs/method/studies.md §3.4): five processes the methods were not built on.
    Process("jumps", kind="jumps", weight=0.01, amplitude=6.0),
    Process("AR(2) 1.2/−0.5", kind="ar2", phi=1.2, phi2=-0.5),
    Process("switching persistence", kind="switching", phi=0.95, duration=60.0),
    Process("near-duplicates AR(0.7)", kind="duplicates", phi=0.7, weight=0.9),
    Process("lognormal AR(0.5)", kind="lognormal", phi=0.5),
)}


def never_switching(process: Process) -> Process:
    """The twin of a ``"regimes"`` process whose regime never switches: each candidate's edge
    is a constant ``amplitude·N(0, 1)`` per-step SDs for all time.

    A window of ``process`` in which the regime did not switch is drawn from exactly this
    distribution (the state's sign times a symmetric normal edge is the same normal edge), so
    any test says "yes" on such windows exactly as often as on the twin, where the candidates
    really differ for good and a "yes" is right.

    >>> twin = never_switching(PROCESSES["regimes"])
    >>> seen: list[FloatArray] = []
    >>> _ = twin.draw(np.random.default_rng(0), 500, 3, paths=seen)
    >>> twin.name, switch_count(seen)
    ('regimes, never switching', 0)
    """
    if process.kind != "regimes":
        raise ValueError(f"expected a regimes process, got kind {process.kind!r}. Pass one of "
                         "the battery's regime processes, such as PROCESSES['regimes'].")
    return replace(process, name=f"{process.name}, never switching", duration=math.inf)


def switch_count(paths: Sequence[FloatArray], start: int = 0) -> int:
    """Regime switches in ``paths`` (as :meth:`Process.draw` appends them) from step ``start``
    on (0 when there is no path: a process without regimes).

    >>> switch_count([np.array([[1.0], [1.0], [-1.0], [1.0]])]), switch_count([])
    (2, 0)
    >>> switch_count([np.array([[1.0], [-1.0], [-1.0], [1.0]])], start=1)
    1
    """
    return sum(int(np.count_nonzero(np.diff(p[start:], axis=0))) for p in paths)


def by_switches(outcomes: Sequence[tuple[int, bool]]) -> dict[str, tuple[int, int]]:
    """Hits and trials of ``outcomes`` (switches, yes) by the regime switches seen: ``"0"``,
    ``"1"`` and ``"2+"``.

    >>> by_switches([(0, True), (0, False), (1, False), (3, True)])
    {'0': (1, 2), '1': (0, 1), '2+': (1, 1)}
    """
    out = {"0": (0, 0), "1": (0, 0), "2+": (0, 0)}
    for k, yes in outcomes:
        key = "0" if k == 0 else "1" if k == 1 else "2+"
        hits, trials = out[key]
        out[key] = (hits + yes, trials + 1)
    return out


def clopper_pearson(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson, *Biometrika* 1934) two-sided interval of a binomial rate.

    >>> lo, hi = clopper_pearson(20, 400)
    >>> round(lo, 4), round(hi, 4)
    (0.0308, 0.0762)
    """
    a = (1.0 - level) / 2.0
    lo = 0.0 if hits == 0 else float(stats.beta.ppf(a, hits, trials - hits + 1))
    hi = 1.0 if hits == trials else float(stats.beta.ppf(1.0 - a, hits + 1, trials - hits))
    return lo, hi


@dataclass(frozen=True)
class Rate:
    """How often a claim was made in ``trials`` simulated cases (seeded)."""

    claim: str
    process: str
    n: int
    t: int
    hits: int
    trials: int
    seed: int
    edge: float = 0.0

    @property
    def rate(self) -> float:
        """hits / trials."""
        return self.hits / self.trials

    @property
    def interval(self) -> tuple[float, float]:
        """95% Clopper–Pearson interval."""
        return clopper_pearson(self.hits, self.trials)

    @property
    def fails(self) -> bool:
        """The battery's bar for a size cell: a point rate above 8% at ≥ 400 replications."""
        return self.edge == 0.0 and self.trials >= 400 and self.rate > 0.08

    def row(self) -> str:
        """One Markdown row: claim, process, N, T, edge, rate, interval, replications, seed."""
        lo, hi = self.interval
        return (f"| {self.claim} | {self.process} | {self.n} | {self.t} | {self.edge:g} | "
                f"{self.rate:.3f} | {lo:.3f}–{hi:.3f} | {self.trials} | {self.seed} |")


def spa_rate(process: Process, n: int, t: int, sims: int, seed: int, *, edge: float = 0.0,
             reps: int = 299, outcomes: list[tuple[int, bool]] | None = None) -> Rate:
    """How often the leaderboard says "Beats luck at 5%" on a search of ``n`` candidates.

    Scores ``0.5 + 0.1·noise``; candidate 0 gets ``edge`` per-step SDs more (0: a null search).
    The benchmark is the candidates' mean (upper p-value), as when the defaults did not run.
    ``outcomes``: each search's (regime switches in its window, "yes") is appended to it
    (switches 0 for a process without regimes); the searches are the same with or without it.

    >>> spa_rate(PROCESSES["white"], 4, 60, 3, seed=1, reps=99).trials
    3
    """
    from typestrict_pipeline.study.inference import joint_inference

    rng = np.random.default_rng(seed)
    hits = 0
    ids = [str(j) for j in range(n)]
    for i in range(sims):
        seen: list[FloatArray] = []
        m = 0.5 + 0.1 * process.draw(rng, t, n, paths=seen)
        m[:, 0] += 0.1 * edge
        res = joint_inference(m, ids, m.mean(axis=1), benchmark_label="mean", seed=seed + i,
                              reps=reps, pvalue_type="upper")
        hits += bool(res.beats_luck)
        if outcomes is not None:
            outcomes.append((switch_count(seen), bool(res.beats_luck)))
    return Rate("Beats luck at 5%", process.name, n, t, hits, sims, seed, edge)


def newey_west_rate(process: Process, t: int, sims: int, seed: int, *, edge: float = 0.0) -> Rate:
    """How often a one-sided 5% test ``mean > 1.645·newey_west_se`` rejects a zero mean.

    >>> newey_west_rate(PROCESSES["white"], 60, 5, seed=1).trials
    5
    """
    from typestrict_pipeline.study.stats import newey_west_se

    rng = np.random.default_rng(seed)
    x = process.draw(rng, t, sims, shared=False) + edge
    z = float(stats.norm.ppf(0.95))
    hits = sum(float(x[:, j].mean()) > z * newey_west_se(x[:, j]) for j in range(sims))
    return Rate("Newey–West one-sided 5%", process.name, 1, t, int(hits), sims, seed, edge)


def search_evidence(search: FloatArray) -> tuple[Dependence, Stability | None]:
    """What the leaderboard hands the gate and the runner from a search's ``T × n`` scores: the
    dependence measured on the differences from the candidates' mean and the leaders' stability
    (``joint_inference`` computes both the same way; the bootstrap is not needed for them).

    >>> dep, st = search_evidence(np.random.default_rng(0).normal(size=(120, 5)))
    >>> dep.ratio >= 1.0, st is not None
    (True, True)
    """
    from typestrict_pipeline.study.dependence import measure_dependence
    from typestrict_pipeline.study.stability import leaders_stability

    diffs = search - search.mean(axis=1, keepdims=True)
    return measure_dependence(diffs), leaders_stability(diffs, [str(j) for j in range(search.shape[1])])
    # (the StepM set needs the bootstrap; without it only the winner is tested, as when StepM
    # names no other candidate)


def gate_rate(process: Process, holdout: int, sims: int, seed: int, *, n: int = 20, t: int = 120,
              edge: float = 0.0, outcomes: list[tuple[int, bool]] | None = None) -> Rate:
    """How often the promotion gate promotes the winner of a search (``n`` × ``t`` eval steps).

    The winner is the best Adjusted (``search_stats``); after a 1-step embargo, its holdout
    continues its own process; the active version is an independent series of the same
    process. With ``edge`` 0 no candidate is better than the active version (a null winner);
    with ``edge`` > 0 every candidate is ``edge`` per-step SDs better (power). The gate is
    ``promote.gate_decision`` with the measured span (``decorrelation_span`` − 1 steps left
    out), the search's dependence and the leaders' stability, as ``promote.evaluation_gate``:
    when the span leaves fewer than 2 holdout steps the gate refuses, as the product does.
    ``outcomes``: each replication's (regime switches from the search's last step to the
    holdout's end, promoted) is appended to it; the replications are the same with or without
    it.

    >>> gate_rate(PROCESSES["white"], 20, 3, seed=1, n=4, t=60).trials
    3
    """
    from typestrict_pipeline.study.inference import decorrelation_span, holdout_skip
    from typestrict_pipeline.study.promote import gate_decision
    from typestrict_pipeline.study.stats import search_stats

    rng = np.random.default_rng(seed)
    hits = 0
    total = t + 1 + holdout
    keys = [f"{s:05d}" for s in range(total)]
    for _ in range(sims):
        seen: list[FloatArray] = []
        noise = process.draw(rng, total, n + 1, paths=seen)  # column n: the active version
        scores = 0.5 + 0.1 * noise
        scores[:, :n] += 0.1 * edge
        search = scores[:t, :n]
        oos = {str(j): dict(zip(keys[:t], search[:, j].tolist(), strict=True)) for j in range(n)}
        best = search_stats(oos, {}).best_id
        w = int(best) if best is not None else 0
        skip = holdout_skip(decorrelation_span(search), 1, 1)  # the layout: 1-step embargo
        dep, stable = search_evidence(search)
        hold = slice(t + 1, total)
        won = dict(zip(keys[hold], scores[hold, w].tolist(), strict=True))
        act = dict(zip(keys[hold], scores[hold, n].tolist(), strict=True))
        passed = gate_decision(won, act, skip=skip, dependence=dep,
                               stability=stable).passed
        hits += passed
        if outcomes is not None:
            outcomes.append((switch_count(seen, start=t - 1), passed))
    return Rate("gate promotes", process.name, n, holdout, hits, sims, seed, edge)


def lineage_rate(process: Process, holdout: int, looks: int, sims: int, seed: int, *,
                 edge: float = 0.0, search: tuple[int, int] | None = (20, 120),
                 outcomes: list[tuple[int, bool]] | None = None,
                 first_looks: list[int] | None = None) -> Rate:
    """How often the lineage panel says a winner persists (no warning) at some look.

    One continuing series of per-step differences winner − baseline (``0.1·noise``, plus
    ``edge`` per-step SDs) is cut into ``looks`` consecutive holdouts of ``holdout`` steps;
    each study's edge is its holdout mean and its SE the one the runner stores
    (``inference.holdout_standard_error`` with the dependence its search measured: a fresh
    ``search`` = (candidates, steps) block of the same process per study; ``None``: no search
    to carry from). ``outcomes``: each replication's (regime switches up to the end of the
    first look that said "persists", or of the last look, persists) is appended to it;
    ``first_looks``: for each "persists", the first look (1-based) that said it. The
    replications are the same with or without them.

    >>> lineage_rate(PROCESSES["white"], 20, 5, 3, seed=1, search=(4, 60)).trials
    3
    """
    from typestrict_pipeline.reruns.lineage import confidence_sequence_path
    from typestrict_pipeline.study.inference import holdout_standard_error

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        seen: list[FloatArray] = []
        d = 0.1 * (process.draw(rng, holdout * looks, 1, shared=False, paths=seen)[:, 0] + edge)
        blocks = d.reshape(looks, holdout)
        edges = blocks.mean(axis=1).tolist()
        ses = []
        for b in blocks:
            dep = None
            if search is not None:
                dep, _ = search_evidence(process.draw(rng, search[1], search[0]))
            ses.append(holdout_standard_error(b, dependence=dep))
        _, _, low = confidence_sequence_path(edges, ses)
        said = np.flatnonzero(low > 0.0)
        hits += bool(said.size)
        end = (int(said[0]) + 1 if said.size else looks) * holdout
        if outcomes is not None:
            outcomes.append((switch_count([p[:end] for p in seen]), bool(said.size)))
        if first_looks is not None and said.size:
            first_looks.append(int(said[0]) + 1)
    return Rate(f"lineage persists ({looks} looks)", process.name, 1, holdout, hits, sims, seed,
                edge)


def render(rates: Sequence[Rate]) -> str:
    """A Markdown table of rates.

    >>> print(render([Rate("c", "p", 1, 60, 2, 40, 7)]).splitlines()[2])
    | c | p | 1 | 60 | 0 | 0.050 | 0.006–0.169 | 40 | 7 |
    """
    head = ["| claim | process | N | T or H | edge (SD) | rate | 95% interval | replications | seed |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    return "\n".join(head + [r.row() for r in rates])
