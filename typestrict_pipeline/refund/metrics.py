"""The four refund metrics, computed exactly enough that any reimplementation gets the same floats.

The definitions (``docs/method/refund.md`` has the reasons and sources):

* Per example and system: ``conf = max(p)``; the example is *right* when ``p[y] == conf`` (a right
  answer tied for the top counts as right); the predicted answer is ``y`` when right, otherwise the
  first answer (in the decision's answer order) whose probability equals ``conf``; the Brier score
  ``b = Σ_k d*d`` with ``d = p_k − [k = y]`` added left to right, then quantised to the integer
  ``round(b · 2**40)`` (half to even).
* ``macro_f1``: the mean of ``F_k = 2·TP_k / (2·TP_k + FP_k + FN_k)`` (0 when that is 0/0) over
  the answers present among the right answers of the whole test set (``f1_answers``), added left to
  right in answer order, then divided by their number.
* ``brier_skill = (2D − S) / 2D`` with ``S`` the sum of quantised Brier scores and ``D = n · 2**40``,
  i.e. ``1 − mean Brier / 2`` in one correctly rounded division.
* ``selective_acc_80``: keep the ``m = ceil(4n/5)`` most confident answers (confidence descending,
  ties by canonical row position), score right ones ``/ m``.
* ``worst_class_f1``: the lowest ``F_k`` among answers with at least 5 test examples (first in answer
  order on ties); ``None`` (not applicable) when there is no such answer.

Every float is a correctly rounded quotient of integers, or a left-to-right sum of such, so numpy
and plain Python give the same bits. Exact rationals (:class:`fractions.Fraction`) are kept for the
margins.

>>> ex = example_values([0, 1, 1], [(0.9, 0.1), (0.5, 0.5), (0.8, 0.2)])
>>> ex.pred, ex.correct
((0, 1, 0), (True, True, False))
>>> m = point_metrics([0, 1, 1], ex, 2)
>>> m.macro_f1, m.selective_acc_80, m.worst_class_f1
(0.6666666666666666, 0.6666666666666666, None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

BRIER_UNITS_LOG2 = 40
BRIER_UNIT = 2**BRIER_UNITS_LOG2
WORST_MIN_SUPPORT = 5
COVERAGE = Fraction(4, 5)
WEIGHTS = (0.5, 0.3, 0.2)  # macro_f1, brier_skill, selective_acc_80
METRIC_NAMES = ("macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1")
GAIN_FORMULA = " + ".join(f"{w} × Δ{name}" for w, name in zip(WEIGHTS, METRIC_NAMES, strict=False))
"""The weighted gain as the refund page writes it, for every surface that shows it (the result
pages, the verdict's Dagster metadata): ``0.5 × Δmacro_f1 + 0.3 × Δbrier_skill + 0.2 ×
Δselective_acc_80`` (shown after ``G = ``)."""
PROB_SUM_TOLERANCE = Fraction(1, 100)
"""The one probability tolerance: a vector's values, added exactly, are within 0.01 of 1."""
MAX_DROP: dict[str, Fraction] = {
    "macro_f1": Fraction(2, 100),
    "brier_skill": Fraction(2, 100),
    "selective_acc_80": Fraction(2, 100),
    "worst_class_f1": Fraction(5, 100),
}


def sums_to_one(values: Sequence[float]) -> bool:
    """Whether probabilities (as given, never renormalised) add up to 1 within 0.01.

    The one tolerance of the product (prediction files, the judgement, the audit and its
    verifier): ``|Σ p − 1| <= 1/100`` with the sum of the given doubles taken *exactly* (so a
    boundary case does not depend on float rounding). It accepts what real model outputs look
    like: probabilities rounded to 4 decimals (each off by at most 0.00005, so up to 200 answers),
    float32 outputs, renormalisation noise; it refuses logits, percentages and all-zero vectors.

    >>> sums_to_one([0.3333, 0.3333, 0.3333]), sums_to_one([0.33, 0.33, 0.33])  # rounded
    (True, True)
    >>> sums_to_one([0.7, 0.2]), sums_to_one([70.0, 30.0]), sums_to_one([0.0, 0.0])
    (False, False, False)
    """
    total = math.fsum(values)  # correctly rounded; only near the boundary is the exact sum needed
    if abs(total - 1.0) < 0.0099:
        return True
    if abs(total - 1.0) > 0.0101 or not math.isfinite(total):
        return False
    return abs(sum((Fraction(v) for v in values), Fraction(0)) - 1) <= PROB_SUM_TOLERANCE


@dataclass(frozen=True)
class ExampleValues:
    """What one system says about each test example, computed once (canonical row order).

    Attributes:
        conf: the top probability.
        correct: whether the right answer is among the tied top probabilities.
        pred: the predicted answer index (the right one when ``correct``).
        brier_units: the example's Brier score in integer units of ``2**-40``.
        order: row positions sorted by confidence descending, then position ascending.
    """

    conf: tuple[float, ...]
    correct: tuple[bool, ...]
    pred: tuple[int, ...]
    brier_units: tuple[int, ...]
    order: tuple[int, ...]


def example_values(y: Sequence[int], probs: Sequence[Sequence[float]]) -> ExampleValues:
    """Per-example confidence, rightness, predicted answer, quantised Brier and confidence order.

    Args:
        y: the right answer index of each row.
        probs: each row's probabilities over the decision's answers (already validated).

    Returns:
        The system's :class:`ExampleValues`.

    >>> example_values([1], [(0.25, 0.75)]).brier_units
    (137438953472,)
    """
    conf: list[float] = []
    correct: list[bool] = []
    pred: list[int] = []
    units: list[int] = []
    for yi, p in zip(y, probs, strict=True):
        top = max(p)
        right = p[yi] == top
        conf.append(top)
        correct.append(right)
        pred.append(yi if right else list(p).index(top))
        b = 0.0
        for k, pk in enumerate(p):
            d = pk - 1.0 if k == yi else pk
            b += d * d
        units.append(round(b * BRIER_UNIT))
    order = sorted(range(len(conf)), key=lambda i: (-conf[i], i))
    return ExampleValues(tuple(conf), tuple(correct), tuple(pred), tuple(units), tuple(order))


def f1_answers(y: Sequence[int], n_answers: int) -> tuple[int, ...]:
    """The answers macro F1 averages over: those present among the right answers, in answer order.

    >>> f1_answers([2, 0, 2], 4)
    (0, 2)
    """
    present = set(y)
    return tuple(k for k in range(n_answers) if k in present)


def worst_eligible(y: Sequence[int], n_answers: int) -> tuple[int, ...]:
    """The answers with at least ``WORST_MIN_SUPPORT`` (5) test examples, in answer order.

    >>> worst_eligible([0] * 5 + [1] * 4, 2)
    (0,)
    """
    support = [0] * n_answers
    for yi in y:
        support[yi] += 1
    return tuple(k for k in range(n_answers) if support[k] >= WORST_MIN_SUPPORT)


def coverage_count(n: int) -> int:
    """``m = ceil(4n/5)``: how many of the most confident answers ``selective_acc_80`` keeps.

    >>> [coverage_count(n) for n in (1, 4, 5, 6, 2000)]
    [1, 4, 4, 5, 1600]
    """
    return (4 * n + 4) // 5


@dataclass(frozen=True)
class Counts:
    """The integer counts every metric of one system is computed from.

    Attributes:
        tp: per answer, right examples whose right answer it is.
        true: per answer, examples whose right answer it is.
        pred: per answer, examples predicted as it.
        brier_units: the sum ``S`` of quantised Brier scores.
        selective_correct: right answers among the ``m`` most confident.
    """

    tp: tuple[int, ...]
    true: tuple[int, ...]
    pred: tuple[int, ...]
    brier_units: int
    selective_correct: int


def full_counts(y: Sequence[int], ex: ExampleValues, n_answers: int) -> Counts:
    """Counts on the whole test set (every row once).

    >>> c = full_counts([0, 1], example_values([0, 1], [(1.0, 0.0), (1.0, 0.0)]), 2)
    >>> c.tp, c.true, c.pred, c.selective_correct
    ((1, 0), (1, 1), (2, 0), 1)
    """
    tp = [0] * n_answers
    true = [0] * n_answers
    pred = [0] * n_answers
    for yi, ok, pi in zip(y, ex.correct, ex.pred, strict=True):
        true[yi] += 1
        pred[pi] += 1
        if ok:
            tp[yi] += 1
    m = coverage_count(len(y))
    sel = sum(1 for i in ex.order[:m] if ex.correct[i])
    return Counts(tuple(tp), tuple(true), tuple(pred), sum(ex.brier_units), sel)


@dataclass(frozen=True)
class Metrics:
    """One system's four metrics (floats as published) and their exact rational values.

    Attributes:
        macro_f1: see module docstring.
        brier_skill: see module docstring.
        selective_acc_80: see module docstring.
        worst_class_f1: ``None`` when no answer has 5 test examples (not applicable).
        worst_class: the index of the answer that gave ``worst_class_f1`` (``None`` likewise).
        exact: each metric as an exact rational (``worst_class_f1`` absent when not applicable).
    """

    macro_f1: float
    brier_skill: float
    selective_acc_80: float
    worst_class_f1: float | None
    worst_class: int | None
    exact: dict[str, Fraction]

    def value(self, metric: str) -> float | None:
        """The float value of ``metric`` (one of ``METRIC_NAMES``)."""
        v: float | None = getattr(self, metric)
        return v


def _f1(tp: int, true: int, pred: int) -> float:
    den = true + pred
    return 2 * tp / den if den else 0.0


def macro_f1_from_counts(counts: Counts, labels: Sequence[int]) -> float:
    """``macro_f1`` from counts: F1 per answer in ``labels`` added left to right, divided by ``len``."""
    s = 0.0
    for k in labels:
        s += _f1(counts.tp[k], counts.true[k], counts.pred[k])
    return s / len(labels)


def point_metrics(y: Sequence[int], ex: ExampleValues, n_answers: int) -> Metrics:
    """The four metrics of one system on the whole test set.

    Args:
        y: right answers (canonical row order).
        ex: the system's :class:`ExampleValues`.
        n_answers: the number of answers (probability columns).

    Returns:
        :class:`Metrics`, with exact rationals for the margins.
    """
    n = len(y)
    counts = full_counts(y, ex, n_answers)
    labels = f1_answers(y, n_answers)
    eligible = worst_eligible(y, n_answers)
    m = coverage_count(n)
    two_d = 2 * n * BRIER_UNIT

    def f1_exact(k: int) -> Fraction:
        den = counts.true[k] + counts.pred[k]
        return Fraction(2 * counts.tp[k], den) if den else Fraction(0)

    exact: dict[str, Fraction] = {
        "macro_f1": sum((f1_exact(k) for k in labels), Fraction(0)) / len(labels),
        "brier_skill": Fraction(two_d - counts.brier_units, two_d),
        "selective_acc_80": Fraction(counts.selective_correct, m),
    }
    worst: float | None = None
    worst_class: int | None = None
    if eligible:
        worst_class = min(eligible, key=lambda k: (f1_exact(k), k))
        worst = _f1(counts.tp[worst_class], counts.true[worst_class], counts.pred[worst_class])
        exact["worst_class_f1"] = f1_exact(worst_class)
    return Metrics(
        macro_f1=macro_f1_from_counts(counts, labels),
        brier_skill=(two_d - counts.brier_units) / two_d,
        selective_acc_80=counts.selective_correct / m,
        worst_class_f1=worst,
        worst_class=worst_class,
        exact=exact,
    )


def gain(mf_delta: float, bs_delta: float, sa_delta: float) -> float:
    """``G = 0.5·Δmacro_f1 + 0.3·Δbrier_skill + 0.2·Δselective_acc_80``, evaluated left to right.

    >>> gain(0.1, 0.0, 0.0)
    0.05
    """
    return WEIGHTS[0] * mf_delta + WEIGHTS[1] * bs_delta + WEIGHTS[2] * sa_delta
