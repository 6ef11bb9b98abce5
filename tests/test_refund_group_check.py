"""The group check (issue 27, item 5; audit format 4): the gain without each group, rebuilt three
ways (the producer's O(n + G·K) walk, the verifier's own copy, and the obvious recomputation of
every metric on the rows left), the same bits; and what it changes in a verdict."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.calibration import zipf_sizes
from typestrict_pipeline.refund.metrics import (
    BRIER_UNIT,
    WEIGHTS,
    example_values,
    f1_answers,
)
from typestrict_pipeline.refund.rule import canonical_rows, group_indices, judge, judge_decision
from typestrict_pipeline.refund.smallgroups import group_check, t95
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups


def _obvious_without(y: Sequence[int], probs: tuple[Sequence[Sequence[float]], ...], k: int,
                     keep: list[int], labels: Sequence[int]) -> float:
    """G on the rows ``keep`` by the metrics' definitions, nothing clever."""
    out: list[tuple[float, float, float]] = []
    for p in probs:
        yy = [y[i] for i in keep]
        ex = example_values(yy, [p[i] for i in keep])
        tp, true, pred, units = [0] * k, [0] * k, [0] * k, 0
        for j, yi in enumerate(yy):
            true[yi] += 1
            pred[ex.pred[j]] += 1
            tp[yi] += ex.correct[j]
            units += ex.brier_units[j]
        macro = 0.0
        for ans in labels:
            den = true[ans] + pred[ans]
            macro += 2 * tp[ans] / den if den else 0.0
        n = len(yy)
        m = (4 * n + 4) // 5
        two_d = 2 * n * BRIER_UNIT
        sel = sum(1 for i in ex.order[:m] if ex.correct[i])
        out.append((macro / len(labels), (two_d - units) / two_d, sel / m))
    (a, b, c), (d, e, f) = out
    return WEIGHTS[0] * (a - d) + WEIGHTS[1] * (b - e) + WEIGHTS[2] * (c - f)


@pytest.mark.parametrize("case", range(24))
def test_three_implementations_give_the_same_bits(case: int) -> None:
    rng = random.Random(case)
    n = rng.randint(2, 90)
    if case % 3 == 0:
        sizes = list(zipf_sizes(n, rng.randint(1, min(n, 20))))
    else:
        sizes = []
        while sum(sizes) < n:
            sizes.append(min(rng.randint(1, 12), n - sum(sizes)))
    data = with_groups(synthetic_decision(seed=500 + case, n=n, n_answers=rng.randint(2, 5),
                                          model_skill=rng.uniform(0.0, 2.0), ties=case % 2 == 0,
                                          multiple_choice=case % 4 == 1), sizes)
    rows, _ = canonical_rows(data)
    groups = group_indices(rows)
    assert groups is not None
    k = len(data.answers)
    y = [r.y for r in rows]
    pm, pj = [r.p_model for r in rows], [r.p_jev for r in rows]
    a, b = example_values(y, pm), example_values(y, pj)
    check = group_check(y, a, b, k, groups, 0.01)
    va, vb = verify_audit.SystemValues(y, pm), verify_audit.SystemValues(y, pj)
    rebuilt = verify_audit.group_check(y, va, vb, k, groups, 0.01)
    assert rebuilt == {"n_groups": check.n_groups, "effective_groups": check.effective_groups,
                       "df": check.df, "t": check.t, "leave_one_out": list(check.leave_one_out),
                       "se": check.se, "lower": check.lower, "passed": check.passed}
    labels = f1_answers(y, k)
    obvious = [_obvious_without(y, (pm, pj), k, [i for i in range(n) if groups[i] != g], labels)
               for g in range(check.n_groups)] if check.n_groups > 1 else []
    assert list(check.leave_one_out) == obvious
    assert check.effective_groups == n * n // sum(s * s for s in sizes)


def test_t_quantiles_are_conservative_and_fall_with_the_degrees_of_freedom() -> None:
    values = [t95(df) for df in range(1, 400)]
    assert values == sorted(values, reverse=True)
    assert values[0] == 6.3138 and values[8] == 1.8332 and values[-1] == 1.6577
    assert all(v > 1.6448536 for v in values)  # never below the normal quantile


def test_a_single_group_never_makes_a_gain_real_though_its_bootstrap_says_so() -> None:
    # every resample draws the one group: q05 = G > 0, the bootstrap alone would say "beats"
    data = with_groups(synthetic_decision(seed=404, n=15, n_answers=2, name="one",
                                          model_skill=2.0, jev_skill=0.3), [15])
    report = judge_decision(data)
    assert report.bootstrap.gain_is_real and report.nothing_collapses
    assert report.group_check is not None and not report.group_check.passed
    assert not report.gain_is_real and not report.beats


def test_many_equal_groups_with_a_clear_gain_still_beat() -> None:
    data = with_groups(synthetic_decision(seed=7, n=400, n_answers=3, model_skill=2.0,
                                          jev_skill=0.3), [8] * 50)
    report = judge_decision(data)
    check = report.group_check
    assert check is not None and (check.n_groups, check.effective_groups, check.df) == (50, 50, 49)
    assert check.t == 1.6839 and check.passed and report.beats  # df 49: the entry for 40


def test_without_groups_nothing_changes_and_the_audit_stays_version_3() -> None:
    plain = synthetic_decision(seed=11, n=90, n_answers=3, name="topic", model_skill=1.5)
    report = judge_decision(plain)
    assert report.group_check is None and report.gain_is_real == report.bootstrap.gain_is_real
    audit = build_audit(judge([plain], keep_if_loses=False), training_id="t", model_id="m",
                        jev_id="j")
    assert audit["audit_version"] == 3 and b"group_check" not in audit_bytes(audit)


def test_a_version_4_audit_catches_an_edited_group_check() -> None:
    data = with_groups(synthetic_decision(seed=9, n=60, n_answers=3, model_skill=1.5,
                                          jev_skill=0.5), list(zipf_sizes(60, 8)))
    audit = build_audit(judge([data], keep_if_loses=False), training_id="t", model_id="m",
                        jev_id="j")
    assert audit["audit_version"] == 4 and verify_audit.verify(audit) == []
    check = audit["decisions"][0]["report"]["group_check"]
    check["leave_one_out"][0] += 1e-12
    assert any("group_check.leave_one_out" in d for d in verify_audit.verify(audit))
