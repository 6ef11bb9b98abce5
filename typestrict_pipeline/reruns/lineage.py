"""The lineage panel: every study of a lineage, and the best expected of k under noise.

Statistics (sources in ``docs/method/reruns.md`` §3):

* each study ``j`` of the lineage (the root and every re-run) has a holdout score ``h_j``, the
  baseline's score ``b_j`` on the same holdout steps and the standard error ``SE_j`` of their
  paired difference ``d_j = h_j − b_j``; pairing on the same steps cancels how hard each slice
  of time was;
* the holdouts are disjoint and new (``typestrict_pipeline.reruns.windows``), so under "no
  persistent edge" the ``d_j`` are independent, mean zero, and of comparable spread;
* **Best expected of k under noise** ``= E[max_j X_j]`` for independent ``X_j ~ N(0, SE_j²)``,
  each study with its own SE (``typestrict_pipeline.study.stats.expected_max_independent``;
  with equal SEs it is ``SE·e(k)``, the exact expected maximum the study leaderboard uses); it is
  on the holdout-minus-baseline scale, and ``b̄ + line`` on the score scale. The holdouts are
  disjoint and new, so under no edge the ``d_j`` are independent; where neighbouring slices of
  an autocorrelated series make them positively dependent, the true expected maximum is lower
  (Slepian's inequality), so the line errs towards saying "within noise", never away from it.
* **Two statements, each true on its own** (docs/method/reruns.md §3):

  1. **Within noise** (the page's rule): the best ``d_j`` (the best holdout score on the score
     scale) is at or below the line. The panel then says the best result is luck, not a winner
     that persisted.
  2. **Persistence**: whether the always-valid 95% lower bound of the pooled edge is above 0.
     The pooled edge ``μ̂_k = Σ w_j d_j / Σ w_j`` with ``w_j = 1/(SE_j² + τ̂²)`` (inverse
     variance, ``τ̂²`` DerSimonian–Laird's between-study variance: random effects), SE
     ``1/√Σw_j``, and its **always-valid 95% lower confidence sequence** (Howard, Ramdas,
     McAuliffe & Sekhon, *Ann. Stat.* 49(2), 2021; the one-sided normal-mixture boundary,
     Robbins 1970): ``S_k = Σ w_j (d_j − μ)`` is a Gaussian martingale with variance
     ``V_k = Σ w_j``; the mixture ``M_k = 2√(ρ/(V_k+ρ))·exp(S_k²/(2(V_k+ρ)))·Φ(S_k/√(V_k+ρ))``
     crosses ``1/α`` with probability at most ``α`` over every ``k`` (Ville's inequality), so
     ``μ ≥ μ̂_k − u(V_k)/V_k`` at every look at once, ``u`` solving ``M = 1/α``. ``ρ`` is fixed by
     the root study's precision (tight near five studies of that precision). Reading the panel
     after every re-run does not inflate it. When the bound cannot be computed (no baseline on
     the holdouts, a zero standard error) the panel says why, never ``n/a`` alone.
* ``mean_j d_j`` with ``SE = √(Σ SE_j²)/k`` uses every study with no selection (equal weights).

``k`` counts every study of the lineage that has a holdout score. A number that cannot be
computed (no baseline, no standard error) is reported as missing with the reason, never as 0.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.lazy import LazyModule
from typestrict_pipeline.study.stats import expected_max_independent

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    from scipy import special
else:
    special = LazyModule("scipy.special")

WITHIN_NOISE_WARNING = (
    "The best result is within noise: the best holdout ({best}, lineage #{seq}) is at or below "
    "Best expected of {k} under noise ({line}). It is luck, not a winner that persisted; keep "
    "collecting data."
)
"""Statement 1, the page's rule (docs/scheduled-reruns.md): shown exactly when best ≤ line."""
PERSISTENCE_NOT_SHOWN = (
    "Persistence not shown yet: the always-valid 95% lower bound of the pooled edge over the "
    "baseline is {lower}, at or below 0, so these {k} studies do not yet show an edge that lasts."
)
PERSISTENCE_SHOWN = (
    "Persistence shown: the always-valid 95% lower bound of the pooled edge over the baseline is "
    "{lower}, above 0 however often the panel is read."
)
PERSISTENCE_UNKNOWN = "Persistence cannot be judged yet: {reason}."
"""Statement 2, in its own words: what the always-valid bound shows (or why it cannot)."""
PERSISTENCE_STATES = ("shown", "not shown", "unknown")
ONE_STUDY_REASON = (
    "one study cannot show an edge that lasts across re-runs (a lead that held through one "
    "holdout may be a period that ended with it); the bound is read from the second study on")
"""Why persistence is not judged after a single study (:func:`few_studies_factor`)."""

#: One-sided level of the lineage's confidence sequence.
CS_ALPHA = 0.05
#: The mixture is tuned for about this many studies of the root study's precision.
CS_TARGET_STUDIES = 5.0
#: Fewest studies whose lag-1 autocorrelation widens the bound (:func:`serial_design_effect`).
SERIAL_MIN_LOOKS = 5
#: The largest widening of the pooled variance for serial agreement (ρ̂ = 0.9).
SERIAL_MAX_EFFECT = 19.0


@dataclass(frozen=True)
class LineageEntry:
    """One study of a lineage, as the panel shows it.

    Attributes:
        seq: position in the lineage (the root is 0).
        study_id: the study's id (None while a claimed re-run has not created its study).
        state: the study's state, as text (``FINISHED``, ``RUNNING``, ``FAILED``, ...).
        window: the holdout it was scored on, as text (dates or steps).
        winner: the winning candidate's label (None when there is none).
        holdout_score: the winner's score on the holdout (None when not scored).
        baseline_score: the baseline's score on the same holdout steps.
        holdout_se: standard error of ``holdout_score − baseline_score``.
        winner_changed: whether the winner differs from the previous study's (None for the root).
    """

    seq: int
    study_id: str | None
    state: str
    window: str
    winner: str | None
    holdout_score: float | None
    baseline_score: float | None
    holdout_se: float | None
    winner_changed: bool | None

    @property
    def edge(self) -> float | None:
        """``holdout_score − baseline_score``, or None when either is missing."""
        if self.holdout_score is None or self.baseline_score is None:
            return None
        return self.holdout_score - self.baseline_score


@dataclass(frozen=True)
class LineageSummary:
    """The numbers under the lineage table.

    Attributes:
        k: studies with a holdout score.
        scale: ``"holdout − baseline"`` when every holdout has a baseline score on the same
            steps, else ``"holdout score"`` (the baseline is then the lineage's mean holdout
            score, the leaderboard's own default "every candidate has the same skill").
        baseline: ``b̄``, the mean baseline (or the mean holdout score on the score scale).
        best: the best ``d_j`` (or the best holdout score on the score scale).
        best_seq: the lineage position of that best study.
        noise_line: Best expected of k under noise on ``scale`` (``median(SE_j)·e(k)`` on the
            difference scale, ``b̄ + median(SE_j)·e(k)`` on the score scale).
        noise_line_score: the line on the score scale, ``b̄ + median(SE_j)·e(k)``.
        within_noise: ``best ≤ noise_line``, the page's rule (None if undefined).
        mean_edge: ``mean_j d_j`` (difference scale only); mean_edge_se: ``√(Σ SE_j²)/k``.
        missing_reason: why the line is undefined, when it is.
        pooled_edge, pooled_se: the inverse-variance pooled edge and its SE.
        cs_lower: the always-valid 95% lower bound of the edge (confidence sequence).
        persistence: ``"shown"`` (``cs_lower > 0``), ``"not shown"`` or ``"unknown"``.
        persistence_reason: why the bound is unknown, in words (None otherwise).
        statements: the panel's two statements, in words (the within-noise one only when it
            holds); every surface (CLI, API, Dagster, console) shows these same sentences.
    """

    k: int
    scale: str
    baseline: float | None
    best: float | None
    best_seq: int | None
    noise_line: float | None
    noise_line_score: float | None
    within_noise: bool | None
    mean_edge: float | None
    mean_edge_se: float | None
    missing_reason: str | None
    pooled_edge: float | None = None
    pooled_se: float | None = None
    cs_lower: float | None = None
    persistence: str = "unknown"
    persistence_reason: str | None = None
    statements: tuple[str, ...] = ()


SCALE_EDGE = "holdout − baseline"
SCALE_SCORE = "holdout score"


def best_expected_under_noise(standard_errors: Sequence[float]) -> float:
    """What pure luck gives, on average, as the best of ``k`` honest holdouts above the baseline.

    ``E[max_j X_j]`` for independent ``X_j ~ N(0, SE_j²)``, each study with its own SE.

    Args:
        standard_errors: the ``SE_j``, one per study with a holdout score.

    Raises:
        ValueError: with no standard error, or a negative or non-finite one.

    >>> round(best_expected_under_noise([0.02, 0.02]), 6) == round(0.02 / math.sqrt(math.pi), 6)
    True
    >>> best_expected_under_noise([0.05])  # one holdout: no selection, no luck to subtract
    0.0
    """
    if not standard_errors:
        raise ValueError("expected at least one holdout standard error, got none. Score a holdout first.")
    if any(not math.isfinite(s) or s < 0 for s in standard_errors):
        raise ValueError(
            f"expected finite standard errors ≥ 0, got {list(standard_errors)!r}. Fix the holdout scoring."
        )
    return expected_max_independent(standard_errors)


def mixture_boundary(v: float, rho: float, alpha: float = CS_ALPHA) -> float:
    """``u(V)``: the one-sided normal-mixture boundary, ``M(u, V) = 1/α`` (Howard et al. 2021).

    ``M(s, V) = 2√(ρ/(V+ρ))·exp(s²/(2(V+ρ)))·Φ(s/√(V+ρ))`` is increasing in ``s``; a Gaussian
    martingale ``S`` with variance ``V`` crosses ``u(V)`` at any time with probability ≤ ``α``.

    >>> u = mixture_boundary(1.0, 1.0)
    >>> 3.0 < u < 3.5  # above the fixed-time 1.645: the price of looking after every study
    True
    """
    if v <= 0.0 or rho <= 0.0:
        raise ValueError(f"expected V > 0 and ρ > 0, got V={v!r}, ρ={rho!r}. Pass precisions.")
    return float(mixture_boundaries(np.array([v]), rho, alpha)[0])


def mixture_boundaries(v: npt.NDArray[np.float64], rho: float,
                       alpha: float = CS_ALPHA) -> npt.NDArray[np.float64]:
    """:func:`mixture_boundary` for an array of ``V`` (bisection to 1e-12 relative, 80 steps).

    >>> [round(float(x), 4) for x in mixture_boundaries(np.array([1.0, 4.0]), 1.0)]
    [3.2618, 5.58]
    """
    vr = v + rho
    root = np.sqrt(vr)
    target = math.log(1.0 / alpha) - math.log(2.0) - 0.5 * np.log(rho / vr)
    # In units of √(V+ρ): solve z²/2 + log Φ(z) = target for z ≥ 0 (increasing in z).
    lo = np.zeros_like(vr)
    hi = np.sqrt(2.0 * np.maximum(target, 0.0) + 2.0 * math.log(2.0)) + 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        above = 0.5 * mid * mid + special.log_ndtr(mid) >= target
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return np.asarray(hi * root, dtype=np.float64)


def between_study_variance(edges: Sequence[float], standard_errors: Sequence[float]) -> float:
    """DerSimonian–Laird's between-study variance ``τ̂²`` (*Controlled Clinical Trials* 7, 1986).

    ``Q = Σ w_j (d_j − μ̂)²`` with ``w_j = 1/SE_j²``; ``τ̂² = max(0, (Q − (k − 1)) / (Σw − Σw²/Σw))``:
    how much more the studies' edges differ than their SEs allow. Persistence that outlives a
    holdout (a regime spanning several re-runs) shows here and nowhere else.

    >>> between_study_variance([0.0, 0.0, 0.0], [0.01, 0.01, 0.01])
    0.0
    >>> round(between_study_variance([0.1, -0.1, 0.1, -0.1], [0.01] * 4), 4)
    0.0132
    """
    k = len(edges)
    if k < 2:
        return 0.0
    se = np.asarray(standard_errors, dtype=np.float64)
    d = np.asarray(edges, dtype=np.float64)
    w = 1.0 / (se * se)
    mu = float((w * d).sum() / w.sum())
    q = float((w * (d - mu) ** 2).sum())
    denom = float(w.sum() - (w * w).sum() / w.sum())
    return max(0.0, (q - (k - 1)) / denom) if denom > 0.0 else 0.0


def serial_design_effect(residuals: npt.NDArray[np.float64], weights: npt.NDArray[np.float64]) -> float:
    """How much less a run of consecutive studies says than as many independent ones:
    ``(1 + ρ̂)/(1 − ρ̂)``, ``ρ̂`` the lag-1 autocorrelation of the standardised residuals
    ``√w_j·(d_j − μ̂)`` in look order, used when positive and at least ``SERIAL_MIN_LOOKS`` studies
    are in (the variance of the mean of an AR(1) sequence; at most ``SERIAL_MAX_EFFECT``).
    Consecutive re-runs hold out consecutive data: a regime that outlives a holdout makes
    neighbouring studies agree, which the between-study variance alone reads as agreement.

    >>> serial_design_effect(np.array([1.0, -1.0, 1.0, -1.0, 1.0]), np.ones(5))
    1.0
    >>> round(serial_design_effect(np.array([2.0, 1.5, 1.0, -1.0, -1.5, -2.0]), np.ones(6)), 2)
    3.46
    """
    k = residuals.size
    if k < SERIAL_MIN_LOOKS:
        return 1.0
    e = residuals * np.sqrt(weights)
    denom = float((e * e).sum())
    if denom <= 0.0:
        return 1.0
    rho = float((e[1:] * e[:-1]).sum()) / denom
    if rho <= 0.0:
        return 1.0
    return float(min(SERIAL_MAX_EFFECT, (1.0 + rho) / (1.0 - rho)))


def few_studies_factor(k: int, alpha: float = CS_ALPHA) -> float:
    """How much wider a pooled variance estimated from ``k`` studies is read:
    ``(t_{k−1}(1 − α) / z(1 − α))²`` for ``k ≥ 2``; infinite for a single study.

    The between-study variance and the serial agreement are estimated from the ``k`` studies
    themselves, so the pooled edge's standardised value is Student-t with ``k − 1`` degrees of
    freedom rather than normal: the Hartung–Knapp–Sidik–Jonkman reading of a random-effects
    pooling (Hartung & Knapp, *Stat. Med.* 20, 2001; Sidik & Jonkman, *Stat. Med.* 21, 2002),
    which keeps its level with few studies where DerSimonian–Laird's normal reading does not
    (IntHout, Ioannidis & Borm, *BMC Med. Res. Methodol.* 14:25, 2014). A single study says
    nothing of the variance between studies (a regime that lasts one holdout is, in it, an
    edge), so persistence, an edge that lasts across re-runs, is judged from the second study on.

    >>> few_studies_factor(1), round(few_studies_factor(2), 2), round(few_studies_factor(10), 3)
    (inf, 14.73, 1.242)
    >>> round(few_studies_factor(200), 3)
    1.009
    """
    if k < 2:
        return math.inf
    q = 1.0 - alpha
    return float((special.stdtrit(k - 1, q) / special.ndtri(q)) ** 2)


def confidence_sequence_path(edges: Sequence[float], standard_errors: Sequence[float],
                             alpha: float = CS_ALPHA) -> tuple[npt.NDArray[np.float64], ...]:
    """After each look ``k = 1..K``: the pooled edge, its SE and the always-valid lower bound
    (the panel shows the last; simulations read every look).

    At look ``k`` every study's variance is ``SE_j² + τ̂_k²``, ``τ̂_k²`` the between-study
    variance of the first ``k`` studies (:func:`between_study_variance`; a random-effects
    pooling): studies that disagree more than their SEs allow widen the bound instead of
    passing for a persistent edge. With agreeing studies ``τ̂² = 0`` and this is the fixed-effect
    inverse-variance pooling. The bound reads the pooled variance :func:`few_studies_factor`
    times wider (Student-t with ``k − 1`` degrees of freedom), so after a single study it is
    −∞ (no persistence across re-runs can be shown by one); the SE returned is the pooled one,
    without that factor.

    ``ρ`` (the mixture's precision) is ``CS_TARGET_STUDIES`` times the first study's precision
    divided by ``2 ln(1/α) + ln(1 + 2 ln(1/α))`` (Howard et al. 2021, §3.5: the boundary is
    tightest near that many studies); it depends on the first SE only, never on the edges.

    >>> est, se, low = confidence_sequence_path([0.05, 0.04, 0.06], [0.01, 0.01, 0.01])
    >>> [round(float(x), 3) for x in est], bool(low[-1] > 0)
    ([0.05, 0.045, 0.05], True)
    """
    if not edges or len(edges) != len(standard_errors):
        raise ValueError(f"expected one SE per edge, got {len(edges)} edges and "
                         f"{len(standard_errors)} SEs. Pass matching lists.")
    se = np.asarray(standard_errors, dtype=np.float64)
    if not np.all(np.isfinite(se)) or np.any(se <= 0.0):
        raise ValueError(f"expected standard errors > 0, got {list(standard_errors)!r}. "
                         "A study with a zero SE cannot be pooled.")
    d = np.asarray(edges, dtype=np.float64)
    log_a = math.log(1.0 / alpha)
    rho = CS_TARGET_STUDIES / float(se[0] * se[0]) / (2.0 * log_a + math.log(1.0 + 2.0 * log_a))
    k_all = d.size
    est = np.empty(k_all)
    v = np.empty(k_all)
    for k in range(1, k_all + 1):
        tau2 = between_study_variance(d[:k].tolist(), se[:k].tolist())
        w = 1.0 / (se[:k] * se[:k] + tau2)
        est[k - 1] = float((w * d[:k]).sum()) / float(w.sum())
        v[k - 1] = float(w.sum()) / serial_design_effect(d[:k] - est[k - 1], w)
    low = np.full(k_all, -np.inf)
    if k_all > 1:
        vb = v[1:] / np.array([few_studies_factor(k, alpha) for k in range(2, k_all + 1)])
        low[1:] = est[1:] - mixture_boundaries(vb, rho, alpha) / vb
    return est, 1.0 / np.sqrt(v), low


def confidence_sequence_lower(edges: Sequence[float], standard_errors: Sequence[float],
                              alpha: float = CS_ALPHA) -> tuple[float, float, float]:
    """Pooled inverse-variance edge, its SE, and the always-valid lower bound after these looks.

    >>> est, se, low = confidence_sequence_lower([0.05, 0.04, 0.06], [0.01, 0.01, 0.01])
    >>> round(est, 3), round(se, 4), low > 0
    (0.05, 0.0058, True)
    >>> confidence_sequence_lower([0.01], [0.02])[2] < 0
    True
    """
    est, se, low = confidence_sequence_path(edges, standard_errors, alpha)
    return float(est[-1]), float(se[-1]), float(low[-1])


def summarize(entries: Sequence[LineageEntry]) -> LineageSummary:
    """The summary line of the lineage panel, with its two statements.

    >>> e = [LineageEntry(0, "a", "FINISHED", "w0", "x", 0.62, 0.55, 0.03, None),
    ...      LineageEntry(1, "b", "FINISHED", "w1", "y", 0.60, 0.57, 0.03, True)]
    >>> s = summarize(e)
    >>> s.k, s.scale, round(s.best, 3), round(s.noise_line, 4), round(s.pooled_edge, 3)
    (2, 'holdout − baseline', 0.07, 0.0169, 0.05)
    >>> s.within_noise, s.persistence  # above the line, but the bound is not above 0 yet
    (False, 'not shown')
    """
    scored = [e for e in entries if e.holdout_score is not None]
    k = len(scored)
    if k == 0:
        return _missing(0, "no study of this lineage has a holdout score yet")
    no_se = [e.seq for e in scored if e.holdout_se is None]
    if no_se:
        return _missing(k, f"studies {no_se} have a holdout score without a standard error")
    ses = [float(e.holdout_se) for e in scored if e.holdout_se is not None]
    luck = best_expected_under_noise(ses)
    if all(e.baseline_score is not None for e in scored):
        edges = [(float(e.holdout_score) - float(e.baseline_score), e.seq)  # type: ignore[arg-type]
                 for e in scored]
        best, best_seq = max(edges)
        b_bar = statistics.fmean(float(e.baseline_score) for e in scored)  # type: ignore[arg-type]
        pooled = pooled_se = lower = None
        zero = [e.seq for e, s in zip(scored, ses, strict=True) if s <= 0.0]
        reason = None
        if zero:
            reason = (f"the holdout difference of lineage {_seqs(zero)} has a standard error of 0 "
                      "(winner and baseline scored alike at every step), so no edge can be pooled")
        else:
            pooled, pooled_se, lower = confidence_sequence_lower([d for d, _ in edges], ses)
            if lower == -math.inf:  # a single study: no bound (few_studies_factor)
                lower, reason = None, ONE_STUDY_REASON
        return _with_statements(LineageSummary(
            k=k,
            scale=SCALE_EDGE,
            baseline=b_bar,
            best=best,
            best_seq=best_seq,
            noise_line=luck,
            noise_line_score=b_bar + luck,
            within_noise=best <= luck,
            mean_edge=statistics.fmean(d for d, _ in edges),
            mean_edge_se=math.sqrt(sum(s * s for s in ses)) / k,
            missing_reason=None,
            pooled_edge=pooled,
            pooled_se=pooled_se,
            cs_lower=lower,
            persistence="unknown" if lower is None else ("shown" if lower > 0.0 else "not shown"),
            persistence_reason=reason,
        ))
    scores = [(float(e.holdout_score), e.seq) for e in scored]  # type: ignore[arg-type]
    best, best_seq = max(scores)
    b_bar = statistics.fmean(h for h, _ in scores)
    unscored = [e.seq for e in scored if e.baseline_score is None]
    return _with_statements(LineageSummary(
        k=k,
        scale=SCALE_SCORE,
        baseline=b_bar,
        best=best,
        best_seq=best_seq,
        noise_line=b_bar + luck,
        noise_line_score=b_bar + luck,
        within_noise=best <= b_bar + luck,
        mean_edge=None,
        mean_edge_se=None,
        missing_reason=None,
        persistence_reason=(f"no baseline was scored on the holdout of lineage {_seqs(unscored)}, "
                            "so there is no edge over the baseline to pool"),
    ))


def _seqs(seqs: Sequence[int]) -> str:
    return ", ".join(f"#{q}" for q in seqs)


def _missing(k: int, reason: str) -> LineageSummary:
    return _with_statements(LineageSummary(
        k, SCALE_SCORE, None, None, None, None, None, None, None, None, reason,
        persistence_reason=reason))


def _with_statements(s: LineageSummary) -> LineageSummary:
    """``s`` with its statements: "within noise" when the page's rule says so, then what the
    always-valid bound shows (or why it cannot)."""
    out: list[str] = []
    signed = s.scale == SCALE_EDGE
    if s.within_noise:
        out.append(WITHIN_NOISE_WARNING.format(best=_num(s.best, signed), seq=s.best_seq, k=s.k,
                                               line=_num(s.noise_line, signed)))
    if s.persistence == "shown":
        out.append(PERSISTENCE_SHOWN.format(lower=_num(s.cs_lower, True)))
    elif s.persistence == "not shown":
        out.append(PERSISTENCE_NOT_SHOWN.format(lower=_num(s.cs_lower, True), k=s.k))
    else:
        out.append(PERSISTENCE_UNKNOWN.format(reason=s.persistence_reason or "no bound"))
    return dataclasses.replace(s, statements=tuple(out))


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def _cells(e: LineageEntry) -> list[str]:
    """holdout, baseline, holdout − baseline, winner changed: words where a number is missing."""
    holdout = "not scored" if e.holdout_score is None else _num(e.holdout_score)
    baseline = ("not scored" if e.baseline_score is None else _num(e.baseline_score))
    edge = e.edge
    if edge is None:
        edge_text = "not scored" if e.holdout_score is None else "no baseline"
    else:
        edge_text = f"{edge:+.4f}" + ("" if e.holdout_se is None else f" ± {e.holdout_se:.4f}")
    changed = "—" if e.winner_changed is None else ("yes" if e.winner_changed else "no")
    return [holdout, baseline, edge_text, changed]


LINEAGE_COLUMNS = ("#", "Study", "State", "Window", "Winner", "Holdout score", "Baseline",
                   "Holdout − baseline", "Winner changed")
"""The lineage panel's columns, one set for every door that draws it as a table (the console's
study page, ``typestrict schedule lineage``, Dagster's metadata): the page's words, "every re-run
with the window it was scored on, its winner, its holdout score and whether the winner changed",
with the baseline it is compared to."""


def state_words(state: str) -> str:
    """A lineage entry's state as people read it, on every door: a study's state as the
    leaderboard writes it (:func:`~typestrict_pipeline.study.tables.state_text`), what follows
    it kept. The API's JSON keeps the code (``RUNNING``, ``FINISHED (set aside)``).

    >>> state_words("RUNNING"), state_words("FINISHED (set aside)"), state_words("PENDING")
    ('Running', 'Finished (set aside)', 'Pending')
    """
    from typestrict_pipeline.study.tables import state_text

    code, space, rest = state.partition(" ")
    return state_text(code) + space + rest


def lineage_cells(e: LineageEntry) -> list[str]:
    """One entry's cells under :data:`LINEAGE_COLUMNS`, as every door writes them.

    >>> lineage_cells(LineageEntry(1, "7", "RUNNING", "2015-01-01 – 2015-01-20", None, None, None, None, None))
    ['1', '7', 'Running', '2015-01-01 – 2015-01-20', '—', 'not scored', 'not scored', 'not scored', '—']
    """
    return [str(e.seq), e.study_id or "—", state_words(e.state), e.window, e.winner or "—", *_cells(e)]


def render_panel(entries: Sequence[LineageEntry]) -> str:
    """The lineage panel as plain text (the CLI prints it; Dagster shows it as Markdown).

    >>> e = [LineageEntry(0, "a", "FINISHED", "2015-01-01..2015-01-20", "x", 0.6, 0.55, 0.03, None)]
    >>> print(next(x for x in render_panel(e).splitlines() if x.startswith("Best expected")))
    Best expected of 1 under noise: +0.0000 (holdout − baseline)
    """
    header = list(LINEAGE_COLUMNS)
    rows = [lineage_cells(e) for e in entries]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.extend(_summary_lines(summarize(entries)))
    return "\n".join(lines)


def render_markdown(entries: Sequence[LineageEntry]) -> str:
    """The lineage panel as a Markdown table (Dagster metadata)."""
    s = summarize(entries)
    out = ["| " + " | ".join(LINEAGE_COLUMNS) + " |", "|" + "---|" * len(LINEAGE_COLUMNS)]
    out += ["| " + " | ".join(lineage_cells(e)) + " |" for e in entries]
    out.append("")
    out.extend(line + "  " for line in _summary_lines(s))
    return "\n".join(out)


def _summary_lines(s: LineageSummary) -> list[str]:
    if s.noise_line is None:
        return [f"Best expected of {s.k} under noise: n/a ({s.missing_reason})", *s.statements]
    signed = s.scale == SCALE_EDGE
    lines = [f"Best expected of {s.k} under noise: {_num(s.noise_line, signed)} ({s.scale})"]
    if signed:
        lines.append(
            f"Best {s.scale}: {_num(s.best, True)} (lineage #{s.best_seq}); "
            f"mean over all {s.k}: {_num(s.mean_edge, True)} ± {_num(s.mean_edge_se)}"
        )
        if s.pooled_edge is not None:
            lines.append(
                f"Pooled edge over the baseline (inverse-variance, all {s.k}): "
                f"{_num(s.pooled_edge, True)} ± {_num(s.pooled_se)}; always-valid 95% lower bound "
                f"{_num(s.cs_lower, True)} (confidence sequence: valid however often the panel is "
                "read)"
            )
    else:
        lines.append(
            f"Best {s.scale}: {_num(s.best)} (lineage #{s.best_seq}); baseline: the lineage's mean "
            f"holdout score {_num(s.baseline)} (no baseline was scored on the holdouts)"
        )
    lines.extend(s.statements)
    return lines
