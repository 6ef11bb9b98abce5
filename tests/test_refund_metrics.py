"""The four refund metrics, cross-checked against scikit-learn and brute force, ties included."""

from __future__ import annotations

import math
import random
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import brier_score_loss, f1_score

from typestrict_pipeline.refund.metrics import (
    BRIER_UNIT,
    coverage_count,
    example_values,
    f1_answers,
    full_counts,
    gain,
    point_metrics,
    worst_eligible,
)


def _tied_probs(rng: random.Random, k: int, y: int) -> tuple[float, ...]:
    w = [float(rng.randrange(0, 3)) for _ in range(k)]
    if rng.random() < 0.5:
        w[y] += float(rng.randrange(0, 2))
    if sum(w) == 0.0:
        w = [1.0] * k
    s = sum(w)
    return tuple(x / s for x in w)


def _smooth_probs(rng: random.Random, k: int, y: int) -> tuple[float, ...]:
    w = [rng.random() for _ in range(k)]
    w[y] += rng.random()
    s = sum(w)
    return tuple(x / s for x in w)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], list[tuple[float, ...]], int]:
    k = draw(st.integers(2, 7))
    n = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    tied = draw(st.booleans())
    rng = random.Random(seed)
    y = [rng.randrange(k) for _ in range(n)]
    make = _tied_probs if tied else _smooth_probs
    return y, [make(rng, k, yi) for yi in y], k


@settings(max_examples=300, deadline=None)
@given(cases())
def test_macro_f1_and_brier_match_sklearn(case: tuple[list[int], list[tuple[float, ...]], int]) -> None:
    y, probs, k = case
    ex = example_values(y, probs)
    m = point_metrics(y, ex, k)
    labels = list(f1_answers(y, k))
    # our predicted answer: the right one when it is among the tied top, else np.argmax
    expected_pred = [
        yi if p[yi] == max(p) else int(np.argmax(np.asarray(p))) for yi, p in zip(y, probs, strict=True)
    ]
    assert list(ex.pred) == expected_pred
    ref_f1 = f1_score(y, expected_pred, labels=labels, average="macro", zero_division=0)
    assert m.macro_f1 == pytest.approx(ref_f1, rel=0, abs=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows sum to 1 within rounding; sklearn may warn
        ref_brier = brier_score_loss(
            y, np.asarray(probs), labels=list(range(k)), scale_by_half=True
        )
    assert m.brier_skill == pytest.approx(1.0 - ref_brier, rel=0, abs=1e-12)
    # the published float is the exact rational rounded once
    assert m.brier_skill == float(m.exact["brier_skill"])
    assert m.selective_acc_80 == float(m.exact["selective_acc_80"])
    assert m.macro_f1 == pytest.approx(float(m.exact["macro_f1"]), rel=1e-15)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_selective_accuracy_and_worst_class_brute_force(
    case: tuple[list[int], list[tuple[float, ...]], int],
) -> None:
    y, probs, k = case
    n = len(y)
    ex = example_values(y, probs)
    m = point_metrics(y, ex, k)
    keep = math.ceil(Fraction(4 * n, 5))
    assert coverage_count(n) == keep
    order = sorted(range(n), key=lambda i: (-max(probs[i]), i))
    right = [probs[i][y[i]] == max(probs[i]) for i in range(n)]
    assert m.selective_acc_80 == sum(right[i] for i in order[:keep]) / keep
    eligible = [c for c in range(k) if y.count(c) >= 5]
    assert list(worst_eligible(y, k)) == eligible
    if not eligible:
        assert m.worst_class_f1 is None and m.worst_class is None
        assert "worst_class_f1" not in m.exact
    else:
        per = f1_score(y, list(ex.pred), labels=eligible, average=None, zero_division=0)
        assert m.worst_class_f1 == pytest.approx(float(np.min(per)), abs=1e-12)
        assert m.worst_class == eligible[int(np.argmin(per))]


def test_right_answer_tied_for_top_counts_as_right_for_both() -> None:
    y = [1, 0]
    ex = example_values(y, [(0.5, 0.5), (0.5, 0.5)])
    assert ex.correct == (True, True)
    assert ex.pred == (1, 0)


def test_wrong_answer_predicts_first_tied_in_answer_order() -> None:
    ex = example_values([0], [(0.2, 0.4, 0.4)])
    assert ex.correct == (False,)
    assert ex.pred == (1,)


def test_f1_averages_over_answers_present_among_right_answers_only() -> None:
    # answer 2 is never right: predicting it is only an error, it is not averaged over
    y = [0, 0, 1, 1]
    probs = [(0.9, 0.05, 0.05), (0.1, 0.1, 0.8), (0.1, 0.8, 0.1), (0.1, 0.8, 0.1)]
    ex = example_values(y, probs)
    m = point_metrics(y, ex, 3)
    assert f1_answers(y, 3) == (0, 1)
    # F1(0) = 2*1/(2+1) = 2/3, F1(1) = 2*2/(2+2) = 1
    assert m.exact["macro_f1"] == (Fraction(2, 3) + 1) / 2
    assert m.macro_f1 == f1_score(y, list(ex.pred), labels=[0, 1], average="macro", zero_division=0)


def test_brier_units_are_the_quantised_left_to_right_sum() -> None:
    p = (0.1, 0.2, 0.7)
    ex = example_values([2], [p])
    b = 0.0
    for k, pk in enumerate(p):
        d = pk - (1.0 if k == 2 else 0.0)
        b += d * d
    assert ex.brier_units == (round(b * BRIER_UNIT),)
    counts = full_counts([2], ex, 3)
    assert counts.brier_units == ex.brier_units[0]


def test_confidence_ties_are_broken_by_canonical_position() -> None:
    # five rows, m = 4: the fifth-ranked answer is dropped; equal confidence -> lower position first
    y = [0, 0, 0, 0, 0]
    probs = [(0.4, 0.6)] * 4 + [(0.6, 0.4)]
    ex = example_values(y, probs)
    assert ex.order == (0, 1, 2, 3, 4)
    m = point_metrics(y, ex, 2)
    assert m.selective_acc_80 == 0.0  # rows 0..3 kept, all wrong
    ex2 = example_values(y, [(0.6, 0.4)] + [(0.4, 0.6)] * 4)
    assert point_metrics(y, ex2, 2).selective_acc_80 == 0.25


def test_gain_weights_left_to_right() -> None:
    assert gain(0.1, 0.2, 0.3) == 0.5 * 0.1 + 0.3 * 0.2 + 0.2 * 0.3
    assert gain(0.0, 0.0, 0.0) == 0.0
