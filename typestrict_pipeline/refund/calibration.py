"""Seeded simulations of the refund rule's "the gain is real" on grouped test sets.

How often does the rule say "the gain is real" (the bootstrap's 5th percentile of G above zero)
when the model is, in truth, exactly as good as Jev? The refund page builds the rule on 5%. This
module simulates test sets whose examples come in groups, scores them with the product's own
bootstrap (:func:`~typestrict_pipeline.refund.bootstrap.bootstrap_gains`), once resampling
whole groups and once single examples, and counts.

**The simulated test set** (everything drawn from ``numpy.random.Generator(PCG64(seed))``, one
generator per test set, seeded ``seed = base_seed + index``):

* ``G`` groups with the design's sizes (rows ``0 … n−1`` in group order); each row's right answer
  uniform over ``K`` answers.
* Each system ``s`` (model, Jev) gets a latent quality per row
  ``z = mu_s + sigma · (sqrt(rho) · u_{g,s} + sqrt(1 − rho) · e_{i,s})`` with ``u`` (one per group
  and system) and ``e`` (one per row and system) independent standard normals, so ``rho`` is the
  intra-group correlation of each system's quality and of their difference. ``mu_jev = 1``,
  ``mu_model = 1 + shift``, ``sigma = 1.5``.
* The system gives the right answer the probability ``p = 1 / (1 + exp(−z))`` and shares
  ``1 − p`` equally among the other answers.

With ``shift = 0`` the two systems are exchangeable, so the true gain is exactly 0 and every
"the gain is real" is a false yes. With ``shift > 0`` the model is better (power).

>>> d = Design(sizes=(3, 1, 2), rho=0.3)
>>> s = simulate(d, seed=1)
>>> len(s.y), s.groups
(6, (0, 0, 0, 1, 2, 2))
>>> r = rates(Design(sizes=(4,) * 10, rho=0.0), n_sets=2, base_seed=0, resamples=200)
>>> r.n_sets, 0.0 <= r.group <= 1.0
(2, True)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.refund.bootstrap import bootstrap_gains, q05_index
from typestrict_pipeline.refund.metrics import ExampleValues, example_values, gain, point_metrics
from typestrict_pipeline.refund.rule import RESAMPLES, judge_decision
from typestrict_pipeline.refund.smallgroups import t95
from typestrict_pipeline.refund.stream import group_sha256
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow

FloatArray = npt.NDArray[np.float64]
MU = 1.0
SIGMA = 1.5


@dataclass(frozen=True)
class Design:
    """One simulated setting.

    Attributes:
        sizes: the groups' sizes (their sum is the test set's size).
        rho: intra-group correlation of each system's latent quality, in [0, 1).
        shift: the model's latent advantage over Jev (0: no true gain).
        n_answers: K.
    """

    sizes: tuple[int, ...]
    rho: float
    shift: float = 0.0
    n_answers: int = 2


@dataclass(frozen=True)
class Simulated:
    """One simulated test set, ready for the bootstrap (rows in group order)."""

    y: tuple[int, ...]
    model: ExampleValues
    jev: ExampleValues
    groups: tuple[int, ...]


def unequal_sizes(n: int, largest: int, seed: int) -> tuple[int, ...]:
    """Group sizes drawn uniformly from ``1 … largest`` until they hold ``n`` rows (last cut).

    >>> sizes = unequal_sizes(2000, 36, seed=7)
    >>> sum(sizes), min(sizes) >= 1, max(sizes) <= 36
    (2000, True, True)
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    sizes: list[int] = []
    total = 0
    while total < n:
        s = min(int(rng.integers(1, largest + 1)), n - total)
        sizes.append(s)
        total += s
    return tuple(sizes)


def zipf_sizes(n: int, n_groups: int, exponent: float = 1.0) -> tuple[int, ...]:
    """Group sizes proportional to ``1 / rank**exponent`` (Zipf), at least 1 each, summing to ``n``.

    Each group first gets ``max(1, floor(share))`` of its exact share ``n · w_g / Σw``; the rows
    left go one each to the largest remainders (ties to the larger group); no randomness.

    >>> zipf_sizes(200, 10)
    (68, 34, 23, 17, 14, 11, 10, 8, 8, 7)
    >>> sum(zipf_sizes(2000, 100)), min(zipf_sizes(2000, 100))
    (2000, 4)
    """
    if not 1 <= n_groups <= n:
        raise ValueError(f"expected 1 <= n_groups <= n, got {n_groups} groups of {n} rows")
    weights = [1.0 / (g + 1) ** exponent for g in range(n_groups)]
    total = math.fsum(weights)
    shares = [n * w / total for w in weights]
    sizes = [max(1, math.floor(s)) for s in shares]
    left = n - sum(sizes)
    by_remainder = sorted(range(n_groups), key=lambda g: (-(shares[g] - math.floor(shares[g])), g))
    for g in by_remainder[:max(left, 0)]:
        sizes[g] += 1
    while sum(sizes) > n:  # the minimum of 1 overshot: take back from the largest group
        sizes[max(range(n_groups), key=lambda i: (sizes[i], -i))] -= 1
    return tuple(sizes)


def _probabilities(y: np.ndarray, z: np.ndarray, k: int) -> list[tuple[float, ...]]:
    p_right = 1.0 / (1.0 + np.exp(-z))
    out: list[tuple[float, ...]] = []
    for yi, p in zip(y.tolist(), p_right.tolist(), strict=True):
        rest = (1.0 - p) / (k - 1)
        vec = [rest] * k
        vec[yi] = p
        out.append(tuple(vec))
    return out


def simulate(design: Design, seed: int) -> Simulated:
    """Draw one test set of ``design`` from ``Generator(PCG64(seed))`` (see the module doc)."""
    y, groups, probs = _draw(design, seed)
    return Simulated(y, example_values(y, probs[0]), example_values(y, probs[1]), groups)


Probs = list[tuple[float, ...]]


Latents = tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], list[tuple[FloatArray, FloatArray]]]


def _latents(design: Design, seed: int) -> Latents:
    """One test set's draws from ``Generator(PCG64(seed))``, in the stream's order: the right
    answers, then per system (model, Jev) the group effects ``u`` and the row noise ``e``
    (module doc). Returns ``(y, groups, [(u_model, e_model), (u_jev, e_jev)])``."""
    if not 0.0 <= design.rho < 1.0:
        raise ValueError(f"expected 0 <= rho < 1, got {design.rho}")
    rng = np.random.Generator(np.random.PCG64(seed))
    sizes = np.asarray(design.sizes, dtype=np.intp)
    groups = np.repeat(np.arange(len(sizes)), sizes)
    n = int(sizes.sum())
    y = rng.integers(0, design.n_answers, size=n)
    effects = []
    for _ in range(2):
        u = rng.standard_normal(len(sizes))
        effects.append((u, rng.standard_normal(n)))
    return y, groups, effects


def _draw(design: Design, seed: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Probs, Probs]]:
    """One test set's right answers, groups and both systems' probabilities (module doc)."""
    y, groups, effects = _latents(design, seed)
    probs = []
    for mu, (u, e) in zip((MU + design.shift, MU), effects, strict=True):
        z = mu + SIGMA * (math.sqrt(design.rho) * u[groups] + math.sqrt(1.0 - design.rho) * e)
        probs.append(_probabilities(y, z, design.n_answers))
    return tuple(y.tolist()), tuple(groups.tolist()), (probs[0], probs[1])


def decision_data(design: Design, seed: int, name: str = "sim", *,
                  declared: bool = True) -> DecisionData:
    """Simulated test set ``seed`` of ``design`` as the :class:`DecisionData` the product judges
    (texts are made-up ids hashed with the set's seed; each group's digest from
    :func:`group_sha256`); the same draws as :func:`simulate`. ``declared=False``: the same
    rows with no group column (groups in the data, none declared).

    >>> d = decision_data(Design(sizes=(2, 1), rho=0.3), seed=1)
    >>> len(d.rows), len({r.group_sha256 for r in d.rows})
    (3, 2)
    >>> {r.group_sha256 for r in decision_data(Design(sizes=(2, 1), rho=0.3), 1,
    ...                                          declared=False).rows}
    {None}
    """
    y, groups, probs = _draw(design, seed)
    rows = tuple(
        JudgedRow(
            hashlib.sha256(f"{seed}-{i}".encode()).hexdigest(), yi, pm, pj, None,
            group_sha256(f"{seed}-g{groups[i]}") if declared else None,
        )
        for i, (yi, pm, pj) in enumerate(zip(y, probs[0], probs[1], strict=True))
    )
    answers = tuple(f"a{k}" for k in range(len(probs[0][0])))
    return DecisionData(name, DecisionKind.SINGLE, answers, rows)


@dataclass(frozen=True)
class VerdictRates:
    """What :func:`judge_decision` said on simulated test sets (counts, not shares).

    Attributes:
        n_sets: simulated test sets.
        beats: decisions that beat Jev (the verdict, with the group check).
        gain_is_real: decisions whose gain was real (with the group check).
        beats_without_check: decisions that would have beaten Jev on the bootstrap's q05 alone
            (what format versions 2 and 3 said).
        gain_without_check: decisions whose q05 was above zero.
        beats_t_all_groups: decisions that would have beaten Jev had the group check used
            ``G − 1`` degrees of freedom instead of ``G_eff − 1`` (the design alternative
            docs/method/refund.md compares; same q05, same jackknife SE).
    """

    n_sets: int
    beats: int
    gain_is_real: int
    beats_without_check: int
    gain_without_check: int
    beats_t_all_groups: int = 0


def verdict_rates(
    design: Design, *, n_sets: int, base_seed: int, resamples: int = RESAMPLES
) -> VerdictRates:
    """Judge ``n_sets`` simulated grouped test sets with the product's :func:`judge_decision`.

    Set ``i`` is drawn with seed ``base_seed + i`` (:func:`simulate`); its rows are hashed from
    that seed, so every set has its own bootstrap seed.

    >>> r = verdict_rates(Design(sizes=zipf_sizes(60, 10), rho=0.3), n_sets=3, base_seed=5,
    ...                   resamples=200)
    >>> r.n_sets, r.beats <= r.beats_without_check
    (3, True)
    """
    beats = real = beats_old = real_old = beats_all = 0
    for i in range(n_sets):
        seed = base_seed + i
        report = judge_decision(decision_data(design, seed), resamples=resamples)
        beats += report.beats
        real += report.gain_is_real
        old = report.bootstrap.gain_is_real and report.nothing_collapses
        real_old += report.bootstrap.gain_is_real
        beats_old += old
        check = report.group_check
        if old and check is not None and check.se is not None:
            beats_all += report.gain - t95(check.n_groups - 1) * check.se > 0.0
    return VerdictRates(n_sets, beats, real, beats_old, real_old, beats_all)


def group_effects(design: Design, seed: int) -> tuple[FloatArray, FloatArray]:
    """The per-group latent effects ``u`` (model, Jev) that test set ``seed`` was drawn with
    (the draws :func:`simulate` and :func:`decision_data` use).

    >>> d = Design(sizes=(3, 2), rho=0.5)
    >>> u_model, u_jev = group_effects(d, 7)
    >>> u_model.shape, bool((u_model != u_jev).all())
    ((2,), True)
    """
    _, _, ((u_model, _), (u_jev, _)) = _latents(design, seed)
    return u_model, u_jev


GROUPS_GAIN_SEED = 10**9
"""Added to a test set's seed for the fresh rows of :func:`groups_gain`."""


def groups_gain(design: Design, seed: int, per_row: int = 50) -> float:
    """The gain G that the groups of test set ``seed`` give on unlimited examples of them, in
    the test set's proportions: ``per_row`` fresh rows per test row of each group
    (``Generator(PCG64(seed + GROUPS_GAIN_SEED))``), the same group effects
    (:func:`group_effects`), G by the rule's own metrics.

    It is the true gain for a customer whose future examples come from these same groups (the
    customers, documents or sessions of the test set, as often as there), read as independent
    examples; with ``shift = 0`` it averages 0 over test sets, the true gain for new groups.

    >>> g = groups_gain(Design(sizes=(10,) * 20, rho=0.5), 3, per_row=5)
    >>> -1.0 < g < 1.0
    True
    """
    u_model, u_jev = group_effects(design, seed)
    rng = np.random.Generator(np.random.PCG64(seed + GROUPS_GAIN_SEED))
    k = design.n_answers
    groups = np.repeat(np.arange(len(design.sizes)), per_row * np.asarray(design.sizes))
    y = rng.integers(0, k, size=len(groups))
    values = []
    for mu, u in ((MU + design.shift, u_model), (MU, u_jev)):
        e = rng.standard_normal(len(groups))
        z = mu + SIGMA * (math.sqrt(design.rho) * u[groups] + math.sqrt(1.0 - design.rho) * e)
        values.append(example_values(y.tolist(), _probabilities(y, z, k)))
    yl = y.tolist()
    m, j = point_metrics(yl, values[0], k), point_metrics(yl, values[1], k)
    return gain(m.macro_f1 - j.macro_f1, m.brier_skill - j.brier_skill,
                m.selective_acc_80 - j.selective_acc_80)


@dataclass(frozen=True)
class UndeclaredRates:
    """What :func:`judge_decision` said on grouped test sets with and without the group column
    (counts of ``n_sets``).

    Attributes:
        n_sets: simulated test sets.
        beats_undeclared: "beats" with no group column (each example resampled on its own).
        beats_declared: "beats" on the same rows with their groups declared.
        undeclared_own_groups_gain: of the ``beats_undeclared``, the sets whose own groups give
            a positive gain on unlimited examples of them (:func:`groups_gain`): the same rows,
            read as independent examples of those groups, where the "beats" is right.
        own_groups_gain: sets whose own groups give a positive gain, of all ``n_sets``.
    """

    n_sets: int
    beats_undeclared: int
    beats_declared: int
    undeclared_own_groups_gain: int
    own_groups_gain: int


def undeclared_rates(design: Design, *, n_sets: int, base_seed: int,
                     resamples: int = RESAMPLES, per_row: int = 50) -> UndeclaredRates:
    """Judge ``n_sets`` grouped test sets (seeds ``base_seed + i``) twice with the product's
    :func:`judge_decision`, without and with their group column, and read each undeclared
    "beats" against the gain its own groups give (:func:`groups_gain`).

    >>> r = undeclared_rates(Design(sizes=(10,) * 20, rho=0.5), n_sets=2, base_seed=1,
    ...                      resamples=200, per_row=2)
    >>> r.n_sets, r.undeclared_own_groups_gain <= r.beats_undeclared
    (2, True)
    """
    undeclared = declared = right = positive = 0
    for i in range(n_sets):
        seed = base_seed + i
        beats = judge_decision(decision_data(design, seed, declared=False),
                               resamples=resamples).beats
        declared += judge_decision(decision_data(design, seed), resamples=resamples).beats
        own = groups_gain(design, seed, per_row) > 0.0
        undeclared += beats
        right += beats and own
        positive += own
    return UndeclaredRates(n_sets, undeclared, declared, right, positive)


@dataclass(frozen=True)
class Rates:
    """How often "the gain is real" was declared.

    Attributes:
        n_sets: simulated test sets.
        group: share declared with the group bootstrap.
        example: share declared with the row (example) bootstrap (``None`` if not run).
    """

    n_sets: int
    group: float
    example: float | None


def gain_is_real(sim: Simulated, n_answers: int, seed: bytes, resamples: int, by_group: bool) -> bool:
    """The rule's first condition on one simulated set: 5th percentile of G above zero."""
    g = bootstrap_gains(
        sim.y, sim.model, sim.jev, n_answers, seed, resamples, sim.groups if by_group else None
    )
    return float(np.sort(g)[q05_index(resamples)]) > 0.0


def rates(
    design: Design,
    *,
    n_sets: int,
    base_seed: int,
    resamples: int = RESAMPLES,
    with_examples: bool = True,
) -> Rates:
    """Share of ``n_sets`` simulated test sets where "the gain is real" is declared.

    Args:
        design: the setting.
        n_sets: how many test sets (set ``i`` is drawn with seed ``base_seed + i``; its
            bootstrap seed is ``i`` as 32 big-endian bytes).
        base_seed: the first test set's seed.
        resamples: bootstrap resamples (the rule's 2,000 by default).
        with_examples: also run the row bootstrap on the same sets.

    Returns:
        The :class:`Rates`.
    """
    hits_group = 0
    hits_example = 0
    for i in range(n_sets):
        sim = simulate(design, base_seed + i)
        seed = i.to_bytes(32, "big")
        hits_group += gain_is_real(sim, design.n_answers, seed, resamples, by_group=True)
        if with_examples:
            hits_example += gain_is_real(sim, design.n_answers, seed, resamples, by_group=False)
    return Rates(
        n_sets=n_sets,
        group=hits_group / n_sets,
        example=hits_example / n_sets if with_examples else None,
    )


def binomial_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a rate ``hits / n`` (the Monte Carlo error of a simulated rate).

    >>> lo, hi = binomial_interval(50, 1000)
    >>> round(lo, 4), round(hi, 4)
    (0.0381, 0.0653)
    """
    if n < 1:
        raise ValueError(f"expected n >= 1, got {n}")
    p = hits / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return mid - half, mid + half


def mean_sizes(sizes: Sequence[int]) -> float:
    """Mean group size (for reports).

    >>> mean_sizes([1, 2, 3])
    2.0
    """
    return sum(sizes) / len(sizes)
