"""The verdict's one plain sentence: why the credit came back or stayed spent."""

import hashlib
import json
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.calibration import zipf_sizes
from typestrict_pipeline.refund.explain import (
    DecisionFacts,
    GroupFacts,
    decision_reason,
    verdict_sentence,
    verdict_sentence_from_audit,
)
from typestrict_pipeline.refund.rule import (
    DecisionReport,
    failed_training,
    judge_decision,
    judge_training,
)
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow, Verdict

# The demo's rt-two-decisions as its audit records it (make demo, seeded: same numbers every time).
TWO_DECISIONS = {
    "overall": {"n_decisions": 2, "needed": 2, "won": 1, "beats": False, "settling_decision": "kind",
                "keep_if_loses": False, "verdict": "refund", "refunds_credit": True,
                "failure_reason": None},
    "decisions": [
        {"name": "sentiment", "report": {
            "gain": 0.116939731026773,
            "deltas": {"macro_f1": 0.1462040037577086, "brier_skill": 0.06029243049306232,
                       "selective_acc_80": 0.12875000000000003, "worst_class_f1": 0.35402258343978976},
            "margins": dict.fromkeys(("macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"), "held"),
            "bootstrap": {"resamples": 2000, "q05": 0.09929058253888406, "n_gain_le_0": 0}}},
        {"name": "kind", "report": {
            "gain": 0.006732758041354481,
            "deltas": {"macro_f1": 0.00786941680293718, "brier_skill": 0.008910165466286313,
                       "selective_acc_80": 0.0006249999999999867, "worst_class_f1": 0.014665889665889664},
            "margins": dict.fromkeys(("macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"), "held"),
            "bootstrap": {"resamples": 2000, "q05": -0.001188503607680269, "n_gain_le_0": 169}}},
    ],
}


def test_rt_two_decisions_says_better_on_average_but_not_reliably() -> None:
    # The case: wins all four metrics on `kind`, refunded because q05 = -0.0012.
    sentence = verdict_sentence_from_audit(TWO_DECISIONS)
    assert sentence == (
        "The credit comes back: the model beat Jev on 1 of 2 decisions and needed both; kind settled it: "
        "better than Jev on all four metrics and on average (G = +0.0067) but not reliably: "
        "in 169 of 2,000 resamples the gain was not positive (q05 = -0.0012)."
    )


def _rows(n: int, skill: float, seed: int) -> tuple[JudgedRow, ...]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        y = i % 2
        right = rng.random() < skill
        p = 0.8 if right else 0.2
        pm = (p, 1 - p) if y == 0 else (1 - p, p)
        pj_right = rng.random() < 0.7
        q = 0.7 if pj_right else 0.3
        pj = (q, 1 - q) if y == 0 else (1 - q, q)
        rows.append(JudgedRow(hashlib.sha256(f"{seed}-{i}".encode()).hexdigest(), y, pm, pj))
    return tuple(rows)


def _report(name: str, skill: float, seed: int = 1, n: int = 200) -> DecisionReport:
    return judge_decision(DecisionData(name, DecisionKind.SINGLE, ("no", "yes"), _rows(n, skill, seed)))


def test_a_judgement_and_its_audit_give_the_same_sentence() -> None:
    reports = [_report("a", 0.95), _report("b", 0.5, 2), _report("c", 0.72, 3)]
    for keep in (False, True):
        for chosen in (reports[:1], reports[1:2], reports, reports[1:]):
            judgement = judge_training(chosen, keep_if_loses=keep)
            audit = json.loads(audit_bytes(build_audit(judgement, training_id="t", model_id="m", jev_id="j")))
            assert verdict_sentence(judgement) == verdict_sentence_from_audit(audit)
    failed = failed_training("the trainer ran out of GPU memory at epoch 2.")
    audit = json.loads(audit_bytes(build_audit(failed, training_id="t", model_id="m", jev_id="j")))
    assert verdict_sentence(failed) == verdict_sentence_from_audit(audit) == (
        "The credit comes back: the training failed on our side (the trainer ran out of GPU memory at epoch 2)."
    )


def test_each_verdict_names_the_credit_and_the_settling_reason() -> None:
    good, bad = _report("a", 0.95), _report("b", 0.4, 2)
    beats = verdict_sentence(judge_training([good], keep_if_loses=False))
    assert beats.startswith("The credit stays spent: the model beat Jev: better than Jev")
    assert "and reliably: the gain was positive in all 2,000 resamples" in beats
    assert beats.endswith("and no metric fell below Jev's by more than its margin.")
    refund = verdict_sentence(judge_training([bad], keep_if_loses=False))
    assert refund.startswith("The credit comes back: the model did not beat Jev: worse than Jev on average")
    assert "past its 0.02 margin" in refund
    kept = verdict_sentence(judge_training([bad], keep_if_loses=True))
    assert kept.startswith(
        "The credit stays spent: keep_if_loses was on, so the model is delivered even though it did not beat Jev: "
    )
    won_two = verdict_sentence(judge_training([good, bad, _report("c", 0.95, 3)], keep_if_loses=False))
    assert won_two.startswith(
        "The credit stays spent: the model beat Jev on 2 of 3 decisions (it needed 2); a settled it: better"
    )


def test_a_real_gain_with_a_broken_margin_says_which_metric_fell() -> None:
    facts = DecisionFacts("d", gain=0.03, q05=0.01, resamples=2000, n_gain_le_0=12,
                          deltas={"macro_f1": 0.09, "brier_skill": 0.01, "selective_acc_80": 0.02,
                                  "worst_class_f1": -0.0712},
                          broken=("worst_class_f1",))
    assert decision_reason(facts) == (
        "better than Jev on average (G = +0.0300) and reliably: the gain was positive in 1,988 of 2,000 "
        "resamples (q05 = +0.0100), but worst_class_f1 fell 0.0712 below Jev's, past its 0.05 margin"
    )


def test_a_tie_is_no_better() -> None:
    facts = DecisionFacts("d", gain=0.0, q05=0.0, resamples=2000, n_gain_le_0=2000)
    assert decision_reason(facts) == (
        "no better than Jev on average (G = +0.0000; the gain was positive in none of the 2,000 resamples)")


@settings(max_examples=200, deadline=None)
@given(
    gain=st.floats(-1, 1), q05=st.floats(-1, 1), le0=st.integers(0, 2000),
    broken=st.lists(st.sampled_from(["macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"]),
                    unique=True),
)
def test_the_reason_never_contradicts_the_rule(gain: float, q05: float, le0: int, broken: list[str]) -> None:
    facts = DecisionFacts("d", gain=gain, q05=q05, resamples=2000, n_gain_le_0=le0, broken=tuple(broken))
    reason = decision_reason(facts)
    assert ("and reliably" in reason) == (q05 > 0)
    assert ("not reliably" in reason) == (q05 <= 0 < gain)
    assert ("margin" in reason) == (bool(broken) or q05 > 0)
    assert "\n" not in reason and not reason.endswith(".")


# ------------------------------------------------------------------------------------------------
# Grouped decisions (audit format 4): a gain is real only if the group check passes too
# ------------------------------------------------------------------------------------------------


def test_a_grouped_gain_the_group_check_refuses_is_not_called_reliable() -> None:
    # Seeded: 60 rows in 3 Zipf-sized groups (35, 15, 10: 2 effective). The group bootstrap's q05
    # is above zero but the group check's G - t*se is not, so the verdict refunds; the sentence
    # must say why, and say it the same from the judgement and from its audit.
    data = with_groups(synthetic_decision(seed=0, n=60, n_answers=2, name="topic", model_skill=0.9,
                                          jev_skill=0.5), zipf_sizes(60, 3))
    report = judge_decision(data)
    check = report.group_check
    assert report.bootstrap.gain_is_real and report.nothing_collapses
    assert check is not None and not check.passed and check.lower is not None
    assert (check.n_groups, check.effective_groups) == (3, 2)
    judgement = judge_training([report], keep_if_loses=False)
    assert judgement.verdict is Verdict.REFUND
    audit = json.loads(audit_bytes(build_audit(judgement, training_id="t", model_id="m", jev_id="j")))
    assert audit["audit_version"] == 4
    sentence = verdict_sentence(judgement)
    assert verdict_sentence_from_audit(audit) == sentence
    assert sentence.startswith("The credit comes back: the model did not beat Jev: better than Jev")
    assert "reliably" not in sentence and "no metric fell" not in sentence
    assert sentence.endswith(
        "on average (G = +0.1025), positive in all 2,000 resamples (q05 = +0.0453), but the gain is not "
        "sure with only 2 effective groups (of 3): the group check G − t·se = -0.1008 is not above zero."
    )


def test_the_single_group_audit_says_one_group_is_not_sure() -> None:
    # tests/data/audit_v4/one_group.json: one group, so q05 = G > 0, but the check never passes;
    # keep_if_loses was on, so the credit stays spent though the model did not beat Jev.
    audit = json.loads((Path(__file__).parent / "data" / "audit_v4" / "one_group.json").read_text())
    assert verdict_sentence_from_audit(audit) == (
        "The credit stays spent: keep_if_loses was on, so the model is delivered even though it did not "
        "beat Jev: better than Jev on all four metrics and on average (G = +0.1534), positive in all "
        "2,000 resamples (q05 = +0.1534), but the gain is not sure with only one group: a gain over one "
        "group says nothing beyond it."
    )


def test_a_grouped_gain_that_passes_the_check_reads_as_before() -> None:
    audit = json.loads((Path(__file__).parent / "data" / "audit_v4" / "multi.json").read_text())
    assert "topic settled it: better than Jev on all four metrics and on average (G = +0.2975) and " \
        "reliably: the gain was positive in all 2,000 resamples (q05 = +0.2310), and no metric fell" \
        in verdict_sentence_from_audit(audit)


@settings(max_examples=200, deadline=None)
@given(
    gain=st.floats(-1, 1), q05=st.floats(-1, 1), le0=st.integers(0, 2000),
    n_groups=st.integers(1, 60), lower=st.floats(-1, 1),
    broken=st.lists(st.sampled_from(["macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"]),
                    unique=True),
)
def test_a_grouped_reason_never_contradicts_the_rule(
    gain: float, q05: float, le0: int, n_groups: int, lower: float, broken: list[str]
) -> None:
    group = GroupFacts(n_groups=n_groups, effective_groups=max(1, n_groups // 2),
                       lower=None if n_groups == 1 else lower, passed=n_groups > 1 and lower > 0)
    facts = DecisionFacts("d", gain=gain, q05=q05, resamples=2000, n_gain_le_0=le0, broken=tuple(broken),
                          group=group)
    reason = decision_reason(facts)
    real = q05 > 0 and group.passed
    assert facts.gain_is_real == real
    assert ("and reliably" in reason) == real
    assert ("not sure" in reason) == (q05 > 0 and gain > 0 and not group.passed)
    assert ("not reliably" in reason) == (q05 <= 0 < gain)
    assert "\n" not in reason and not reason.endswith(".")
