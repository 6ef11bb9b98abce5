"""The verdict's one plain sentence: why the credit came back or stayed spent."""

import hashlib
import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.explain import (
    DecisionFacts,
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
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow

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
