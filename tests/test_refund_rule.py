"""The refund rule: margins (exact), ties, verdicts, the two-thirds rule and its settling decision."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
from fractions import Fraction

import pytest

from typestrict_pipeline.errors import InputError, NotEnoughDataError
from typestrict_pipeline.refund.rule import (
    DecisionReport,
    MarginStatus,
    decisions_needed,
    failed_training,
    judge,
    judge_decision,
    judge_training,
)
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import (
    DecisionData,
    DecisionKind,
    JudgedRow,
    Verdict,
)


def _h(i: int | str) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


@pytest.fixture(scope="module")
def win() -> DecisionReport:
    report = judge_decision(synthetic_decision(seed=1, n=200, n_answers=3, model_skill=2.0,
                                               jev_skill=0.2))
    assert report.beats
    return report


@pytest.fixture(scope="module")
def loss() -> DecisionReport:
    report = judge_decision(synthetic_decision(seed=2, n=200, n_answers=3, model_skill=0.2,
                                               jev_skill=2.0))
    assert not report.beats
    return report


@pytest.mark.parametrize("n", range(1, 7))
def test_two_thirds_rule_every_pattern(n: int, win: DecisionReport, loss: DecisionReport) -> None:
    needed = decisions_needed(n)
    assert needed == {1: 1, 2: 2, 3: 2, 4: 3, 5: 4, 6: 4}[n]
    for pattern in itertools.product([True, False], repeat=n):
        reports = [
            dataclasses.replace(win if w else loss, name=f"d{i}") for i, w in enumerate(pattern)
        ]
        for keep in (False, True):
            j = judge_training(reports, keep_if_loses=keep)
            won = sum(pattern)
            assert j.won == won and j.needed == needed
            assert j.beats == (won >= needed)
            first = pattern.index(j.beats)
            assert j.settling_decision == f"d{first}"
            if j.beats:
                assert j.verdict is Verdict.BEATS and not j.refunds_credit
            elif keep:
                assert j.verdict is Verdict.KEPT and not j.refunds_credit
            else:
                assert j.verdict is Verdict.REFUND and j.refunds_credit


def test_spec_examples_of_the_two_thirds_rule(win: DecisionReport, loss: DecisionReport) -> None:
    def verdict(pattern: str) -> Verdict:
        reps = [dataclasses.replace(win if c == "W" else loss, name=f"d{i}")
                for i, c in enumerate(pattern)]
        return judge_training(reps, keep_if_loses=False).verdict

    assert verdict("WWWWL") is Verdict.BEATS  # 4 of 5
    assert verdict("WWWLL") is Verdict.REFUND  # 3 of 5 is not enough
    assert verdict("WLW") is Verdict.BEATS  # 2 of 3
    assert verdict("WL") is Verdict.REFUND  # both of 2 needed
    assert verdict("WW") is Verdict.BEATS
    assert verdict("W") is Verdict.BEATS
    assert verdict("L") is Verdict.REFUND


def test_settling_decision_first_lost_when_refund(win: DecisionReport, loss: DecisionReport) -> None:
    reps = [dataclasses.replace(r, name=nm) for r, nm in
            [(win, "a"), (loss, "b"), (win, "c"), (loss, "d")]]
    j = judge_training(reps, keep_if_loses=False)
    assert (j.verdict, j.settling_decision) == (Verdict.REFUND, "b")
    reps = [dataclasses.replace(r, name=nm) for r, nm in [(loss, "a"), (win, "b"), (win, "c")]]
    j = judge_training(reps, keep_if_loses=False)
    assert (j.verdict, j.settling_decision) == (Verdict.BEATS, "b")


def test_identical_systems_tie_and_tie_is_refund() -> None:
    data = synthetic_decision(seed=3, n=100, n_answers=4)
    same = dataclasses.replace(
        data, rows=tuple(dataclasses.replace(r, p_jev=r.p_model) for r in data.rows)
    )
    report = judge_decision(same)
    assert report.gain == 0.0
    assert report.bootstrap.q05 == 0.0 and report.bootstrap.n_gain_le_0 == 2000
    assert not report.beats
    assert all(s is MarginStatus.HELD for s in report.margins.values())
    assert judge_training([report], keep_if_loses=False).verdict is Verdict.REFUND
    assert judge_training([report], keep_if_loses=True).verdict is Verdict.KEPT


def _selective_case(jev_right: int, model_right: int) -> DecisionData:
    """n = 125 (m = 100), every right answer is 0; the 100 confident answers decide selective acc."""
    rows = []
    for i in range(125):
        if i < 100:
            pm = (0.9, 0.1) if i < model_right else (0.1, 0.9)
            pj = (0.9, 0.1) if i < jev_right else (0.1, 0.9)
        else:
            pm = pj = (0.4, 0.6)
        rows.append(JudgedRow(_h(i), 0, pm, pj))
    return DecisionData("sel", DecisionKind.SINGLE, ("yes", "no"), tuple(rows))


def test_margin_boundary_0_71_vs_0_73_passes_exactly() -> None:
    report = judge_decision(_selective_case(jev_right=73, model_right=71))
    assert report.model.selective_acc_80 == 0.71 and report.jev.selective_acc_80 == 0.73
    # in floats the drop looks larger than 0.02 ...
    assert report.deltas["selective_acc_80"] == 0.71 - 0.73 < -0.02
    # ... as exact rationals it is exactly 0.02, which the rule allows
    assert report.exact_deltas["selective_acc_80"] == Fraction(-2, 100)
    assert report.margins["selective_acc_80"] is MarginStatus.HELD
    broken = judge_decision(_selective_case(jev_right=73, model_right=70))
    assert broken.exact_deltas["selective_acc_80"] == Fraction(-3, 100)
    assert broken.margins["selective_acc_80"] is MarginStatus.BROKEN
    assert not broken.beats and not broken.nothing_collapses


def test_a_broken_margin_refunds_even_with_a_real_gain() -> None:
    # The model is far better on answer 0 (common) but collapses on answer 1 (rare, 6 examples).
    rows = []
    for i in range(200):
        y = 1 if i < 6 else 0
        pm = (0.99, 0.01)  # always answers 0, confidently
        pj = (0.3, 0.7) if (y == 1 or i % 3 == 0) else (0.6, 0.4)
        rows.append(JudgedRow(_h(i), y, pm, pj))
    report = judge_decision(DecisionData("collapse", DecisionKind.SINGLE, ("a", "b"), tuple(rows)))
    assert report.model.worst_class_f1 == 0.0 and report.model.worst_class == 1
    assert report.margins["worst_class_f1"] is MarginStatus.BROKEN
    assert not report.beats


def test_worst_class_not_applicable_when_no_answer_has_5_examples() -> None:
    rows = tuple(
        JudgedRow(_h(i), i % 3, tuple(0.8 if k == i % 3 else 0.1 for k in range(3)),
                  (1 / 3, 1 / 3, 1 / 3))
        for i in range(12)  # 4 examples per answer
    )
    report = judge_decision(DecisionData("few", DecisionKind.SINGLE, ("x", "y", "z"), rows))
    assert report.model.worst_class_f1 is None and report.jev.worst_class_f1 is None
    assert report.deltas["worst_class_f1"] is None
    assert report.margins["worst_class_f1"] is MarginStatus.NOT_APPLICABLE
    # a margin that does not apply does not block: the model's better probabilities win
    assert report.nothing_collapses and report.beats


def test_failed_training_refunds_whatever_keep_if_loses_says() -> None:
    for keep in (False, True):
        j = failed_training("  the GPU worker crashed  ", keep_if_loses=keep)
        assert j.verdict is Verdict.FAILED and j.refunds_credit
        assert j.decisions == () and j.failure_reason == "the GPU worker crashed"
    with pytest.raises(InputError, match="non-empty failure reason"):
        failed_training(" ")


def test_report_does_not_depend_on_row_order() -> None:
    data = synthetic_decision(seed=5, n=80, n_answers=3, ties=True)
    rows = list(data.rows)
    random.Random(1).shuffle(rows)
    a = judge_decision(data)
    b = judge_decision(dataclasses.replace(data, rows=tuple(rows)))
    assert a == b


def test_multiple_choice_short_vectors_are_padded() -> None:
    data = synthetic_decision(seed=6, n=60, n_answers=4, multiple_choice=True)
    short = judge_decision(data)
    padded_rows = tuple(
        dataclasses.replace(
            r,
            p_model=r.p_model + (0.0,) * (4 - len(r.p_model)),
            p_jev=r.p_jev + (0.0,) * (4 - len(r.p_jev)),
        )
        for r in data.rows
    )
    padded = judge_decision(dataclasses.replace(data, rows=padded_rows))
    assert short == padded
    assert short.n_options == tuple(r.n_options for r in short.rows)
    assert all(len(r.p_model) == 4 for r in short.rows)


def test_multi_decision_judge(win: DecisionReport) -> None:
    j = judge(
        [
            synthetic_decision(seed=1, n=200, n_answers=3, model_skill=2.0, jev_skill=0.2,
                               name="decision"),
            synthetic_decision(seed=2, n=200, n_answers=3, model_skill=0.2, jev_skill=2.0,
                               name="other"),
        ],
        keep_if_loses=False,
    )
    assert j.decisions[0] == win
    assert (j.won, j.needed, j.verdict, j.settling_decision) == (1, 2, Verdict.REFUND, "other")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"text_sha256": "ABC"}, "64 lowercase hex"),
        ({"y": 3}, "answer index from 0 to 1"),
        ({"y": True}, "answer index"),
        ({"p_model": (0.5, 0.6)}, "summing to 1"),
        ({"p_model": (1.5, -0.5)}, "between 0 and 1"),
        ({"p_model": (float("nan"), 1.0)}, "between 0 and 1"),
        ({"p_jev": (1.0,)}, "2 or 2 probabilities"),
        ({"p_jev": ("0.5", 0.5)}, "a number"),
        ({"n_options": 1}, "None or 2"),
    ],
)
def test_bad_rows_are_rejected_with_a_clear_message(change: dict[str, object], message: str) -> None:
    rows = [JudgedRow(_h(i), i % 2, (0.3, 0.7), (0.5, 0.5)) for i in range(4)]
    rows[2] = dataclasses.replace(rows[2], **change)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=message) as err:
        judge_decision(DecisionData("d", DecisionKind.SINGLE, ("a", "b"), tuple(rows)))
    assert "row 3" in str(err.value) and "Fix" in str(err.value)


def test_multiple_choice_rejects_mass_on_options_not_offered() -> None:
    row = JudgedRow(_h(0), 0, (0.5, 0.4, 0.1), (0.5, 0.5, 0.0), n_options=2)
    with pytest.raises(InputError, match=r"0\.0 at option position 3"):
        judge_decision(DecisionData("mc", DecisionKind.MULTIPLE_CHOICE, ("1", "2", "3"), (row,)))
    row = JudgedRow(_h(0), 2, (0.5, 0.5), (0.5, 0.5), n_options=2)
    with pytest.raises(InputError, match="answer index from 0 to 1"):
        judge_decision(DecisionData("mc", DecisionKind.MULTIPLE_CHOICE, ("1", "2", "3"), (row,)))


def test_empty_decision_and_duplicate_names(win: DecisionReport) -> None:
    with pytest.raises(NotEnoughDataError, match="at least 1 test example"):
        judge_decision(DecisionData("d", DecisionKind.SINGLE, ("a", "b"), ()))
    with pytest.raises(InputError, match="2 distinct answers"):
        judge_decision(DecisionData("d", DecisionKind.SINGLE, ("a", "a"), ()))
    with pytest.raises(InputError, match="unique decision names"):
        judge_training([win, win], keep_if_loses=False)
    with pytest.raises(InputError, match="at least one decision"):
        judge_training([], keep_if_loses=False)
