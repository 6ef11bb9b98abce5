"""The verdict in words: one plain sentence saying why the credit came back or stayed spent.

The refund rule (``refund.rule``) asks two things of each decision: a gain that holds up under
resampling (the 5th percentile of G over the paired bootstrap above zero and, when the test
examples come in groups, the group check: ``G − t·se`` above zero, ``refund.smallgroups``) and no
metric that collapses (none below Jev's by more than its margin). A number like ``q05 = -0.0012`` answers
the first question only for someone who knows the rule, so every place that shows a verdict (the
Dagster UI, the CLI, the API's result page, the console) also shows this sentence, made here once.

The sentence is built from :class:`DecisionFacts`, which come either from a judgement
(:func:`verdict_sentence`) or from an audit file as written (:func:`verdict_sentence_from_audit`),
so the same words come out of both; a test checks that they agree on the demo's trainings.

>>> facts = DecisionFacts("kind", gain=0.0067, q05=-0.0012, resamples=2000, n_gain_le_0=169,
...                       deltas={"macro_f1": 0.008, "brier_skill": 0.009,
...                               "selective_acc_80": 0.0006, "worst_class_f1": 0.015})
>>> decision_reason(facts)
'better than Jev on all four metrics and on average (G = +0.0067) but not reliably: in 169 of 2,000 resamples the gain was not positive (q05 = -0.0012)'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from typestrict_pipeline.refund.metrics import MAX_DROP, METRIC_NAMES
from typestrict_pipeline.refund.rule import DecisionReport, MarginStatus, TrainingJudgement
from typestrict_pipeline.refund.types import Verdict

__all__ = [
    "DecisionFacts",
    "GroupFacts",
    "decision_reason",
    "facts_from_audit",
    "facts_from_report",
    "unjudged_sentence",
    "verdict_sentence",
    "verdict_sentence_from_audit",
]

_NUMBER_WORDS = {2: "two", 3: "three", 4: "four"}


@dataclass(frozen=True)
class GroupFacts:
    """The group check of a grouped decision (audit format 4, ``report.group_check``).

    Attributes:
        n_groups: G, the distinct groups.
        effective_groups: ``G_eff = ⌊n² / Σ n_g²⌋`` (fewer than G when a few groups hold most rows).
        lower: ``G − t·se``, the check's lower bound (``None`` with a single group).
        passed: ``lower > 0`` (never with a single group).
    """

    n_groups: int
    effective_groups: int
    lower: float | None
    passed: bool


@dataclass(frozen=True)
class DecisionFacts:
    """The numbers of one decision that its reason is made of.

    Attributes:
        name: the decision's name.
        gain: G on the whole test set.
        q05: the 5th percentile of G over the bootstrap's resamples.
        resamples: B (2,000).
        n_gain_le_0: resamples with ``G <= 0``.
        deltas: model − Jev per metric (``None`` where the metric does not apply).
        broken: the metrics whose margin broke, in the rule's metric order.
        group: the group check when the test examples come in groups (``None`` without groups).
    """

    name: str
    gain: float
    q05: float
    resamples: int
    n_gain_le_0: int
    deltas: Mapping[str, float | None] = field(default_factory=dict)
    broken: tuple[str, ...] = ()
    group: GroupFacts | None = None

    @property
    def gain_is_real(self) -> bool:
        """``q05 > 0`` and, with groups, the group check passed, as the rule asks."""
        return self.q05 > 0.0 and (self.group is None or self.group.passed)

    @property
    def beats(self) -> bool:
        """The gain is real and no margin broke."""
        return self.gain_is_real and not self.broken


def facts_from_report(report: DecisionReport) -> DecisionFacts:
    """The facts of a judged decision.

    >>> import hashlib
    >>> from typestrict_pipeline.refund.rule import judge_decision
    >>> from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow
    >>> rows = tuple(JudgedRow(hashlib.sha256(str(i).encode()).hexdigest(), i % 2,
    ...                        (0.9, 0.1) if i % 2 == 0 else (0.1, 0.9), (0.5, 0.5))
    ...              for i in range(20))
    >>> f = facts_from_report(judge_decision(DecisionData("spam", DecisionKind.SINGLE, ("no", "yes"), rows)))
    >>> f.name, f.beats, f.broken
    ('spam', True, ())
    """
    boot = report.bootstrap
    return DecisionFacts(
        name=report.name,
        gain=report.gain,
        q05=boot.q05,
        resamples=boot.resamples,
        n_gain_le_0=boot.n_gain_le_0,
        deltas=dict(report.deltas),
        broken=tuple(m for m in METRIC_NAMES if report.margins[m] is MarginStatus.BROKEN),
        group=None if (c := report.group_check) is None else GroupFacts(
            n_groups=c.n_groups, effective_groups=c.effective_groups, lower=c.lower, passed=c.passed),
    )


def facts_from_audit(decision: Mapping[str, Any]) -> DecisionFacts:
    """The facts of one entry of an audit's ``decisions`` list (see ``docs/audit-format.md``).

    >>> facts_from_audit({"name": "kind", "report": {"gain": 0.0067, "deltas": {"macro_f1": 0.01},
    ...     "margins": {"macro_f1": "held"},
    ...     "bootstrap": {"q05": -0.0012, "resamples": 2000, "n_gain_le_0": 169}}}).n_gain_le_0
    169
    """
    report = decision["report"]
    boot = report["bootstrap"]
    margins = report.get("margins") or {}
    deltas = report.get("deltas") or {}
    check = report.get("group_check")  # version 4, grouped decisions only
    return DecisionFacts(
        name=str(decision["name"]),
        gain=float(report["gain"]),
        q05=float(boot["q05"]),
        resamples=int(boot["resamples"]),
        n_gain_le_0=int(boot["n_gain_le_0"]),
        deltas={m: (None if deltas.get(m) is None else float(deltas[m])) for m in METRIC_NAMES if m in deltas},
        broken=tuple(m for m in METRIC_NAMES if margins.get(m) == MarginStatus.BROKEN.value),
        group=None if check is None else GroupFacts(
            n_groups=int(check["n_groups"]), effective_groups=int(check["effective_groups"]),
            lower=None if check.get("lower") is None else float(check["lower"]),
            passed=bool(check["passed"])),
    )


def _signed(value: float) -> str:
    return f"{value:+.4f}"


def _join(words: Sequence[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _better_everywhere(facts: DecisionFacts) -> str:
    """``" on all four metrics"`` when every metric that applies is strictly better, else ``""``."""
    applicable = [d for d in facts.deltas.values() if d is not None]
    if len(applicable) < 2 or any(d <= 0 for d in applicable):
        return ""
    count = _NUMBER_WORDS.get(len(applicable), str(len(applicable)))
    return f" on all {count} metrics and"


def _collapse_clause(facts: DecisionFacts) -> str:
    parts = []
    for m in facts.broken:
        delta = facts.deltas.get(m)
        drop = "" if delta is None else f" {abs(delta):.4f}"
        parts.append(f"{m} fell{drop} below Jev's, past its {float(MAX_DROP[m]):.2f} margin")
    return _join(parts)


def _group_clause(group: GroupFacts) -> str:
    """Why a gain that held up in the bootstrap is still not sure: the group check failed.

    >>> _group_clause(GroupFacts(12, 3, -0.0123, False))
    'the gain is not sure with only 3 effective groups (of 12): the group check G − t·se = -0.0123 is not above zero'
    >>> _group_clause(GroupFacts(1, 1, None, False))
    'the gain is not sure with only one group: a gain over one group says nothing beyond it'
    """
    if group.lower is None or group.n_groups <= 1:
        return "the gain is not sure with only one group: a gain over one group says nothing beyond it"
    eff = group.effective_groups
    plural = "group" if eff == 1 else "groups"
    of = "" if eff == group.n_groups else f" (of {group.n_groups:,})"
    return (f"the gain is not sure with only {eff:,} effective {plural}{of}: "
            f"the group check G − t·se = {_signed(group.lower)} is not above zero")


def decision_reason(facts: DecisionFacts) -> str:
    """Why one decision was won or lost, as a clause (no capital, no final stop).

    >>> lost = DecisionFacts("sentiment", gain=-0.2393, q05=-0.2565, resamples=2000, n_gain_le_0=2000,
    ...                      deltas={"macro_f1": -0.3612}, broken=("macro_f1",))
    >>> print(decision_reason(lost))
    worse than Jev on average (G = -0.2393; the gain was positive in none of the 2,000 resamples) and macro_f1 fell 0.3612 below Jev's, past its 0.02 margin
    >>> won = DecisionFacts("sentiment", gain=0.1268, q05=0.1097, resamples=2000, n_gain_le_0=0)
    >>> print(decision_reason(won))
    better than Jev on average (G = +0.1268) and reliably: the gain was positive in all 2,000 resamples (q05 = +0.1097), and no metric fell below Jev's by more than its margin
    """
    b = facts.resamples
    gain = _signed(facts.gain)
    q05 = _signed(facts.q05)
    positive = b - facts.n_gain_le_0
    where = f"in all {b:,} resamples" if positive == b else f"in {positive:,} of {b:,} resamples"
    if facts.gain_is_real:
        head = (
            f"better than Jev{_better_everywhere(facts)} on average (G = {gain}) and reliably: "
            f"the gain was positive {where} (q05 = {q05})"
        )
    elif facts.q05 > 0 and facts.gain > 0 and facts.group is not None:
        # the bootstrap alone would have said "reliably"; the group check did not
        head = (
            f"better than Jev{_better_everywhere(facts)} on average (G = {gain}), positive "
            f"{where} (q05 = {q05}), but {_group_clause(facts.group)}"
        )
    elif facts.gain > 0:
        head = (
            f"better than Jev{_better_everywhere(facts)} on average (G = {gain}) but not reliably: "
            f"in {facts.n_gain_le_0:,} of {b:,} resamples the gain was not positive (q05 = {q05})"
        )
    else:
        worse = "worse than" if facts.gain < 0 else "no better than"
        where = f"none of the {b:,}" if positive == 0 else f"{positive:,} of {b:,}"
        head = f"{worse} Jev on average (G = {gain}; the gain was positive in {where} resamples)"
    if facts.broken:
        joiner = ", but " if facts.gain_is_real else " and "
        return head + joiner + _collapse_clause(facts)
    if facts.gain_is_real:
        return head + ", and no metric fell below Jev's by more than its margin"
    return head


def _decisions_clause(subject: str, won: int, n: int, needed: int, beats: bool) -> str:
    need = "both" if n == 2 and needed == 2 else (f"all {n}" if needed == n else f"{needed}")
    if beats:
        return f"{subject} beat Jev on {won} of {n} decisions (it needed {need})"
    return f"{subject} beat Jev on {won} of {n} decisions and needed {need}"


def _sentence(
    verdict: Verdict,
    decisions: Sequence[DecisionFacts],
    *,
    won: int,
    needed: int,
    settling: str | None,
    failure_reason: str | None,
) -> str:
    if verdict is Verdict.FAILED:
        why = (failure_reason or "").strip().rstrip(".") or "no reason given"
        return f"The credit comes back: the training failed on our side ({why})."
    credit = "The credit stays spent" if verdict in (Verdict.BEATS, Verdict.KEPT) else (
        "The credit comes back"
    )
    by_name = {d.name: d for d in decisions}
    deciding = by_name.get(settling or "") or (decisions[0] if decisions else None)
    reason = "" if deciding is None else decision_reason(deciding)
    beats = verdict is Verdict.BEATS
    subject = "it" if verdict is Verdict.KEPT else "the model"
    if len(decisions) > 1 and deciding is not None:
        what = (
            f"{_decisions_clause(subject, won, len(decisions), needed, beats)}; "
            f"{deciding.name} settled it: {reason}"
        )
    elif beats:
        what = f"{subject} beat Jev: {reason}"
    else:
        what = f"{subject} did not beat Jev: {reason}"
    if verdict is Verdict.KEPT:
        return f"{credit}: keep_if_loses was on, so the model is delivered even though {what}."
    return f"{credit}: {what}."


def verdict_sentence(judgement: TrainingJudgement) -> str:
    """Why the training's credit came back or stayed spent, in one sentence.

    Args:
        judgement: from :func:`~typestrict_pipeline.refund.rule.judge_training` (or ``judge``,
            ``failed_training``).

    Returns:
        One sentence: the credit's fate, then the settling decision's reason in words
        (:func:`decision_reason`).

    >>> from typestrict_pipeline.refund.rule import failed_training
    >>> verdict_sentence(failed_training("the trainer ran out of memory"))
    'The credit comes back: the training failed on our side (the trainer ran out of memory).'
    """
    return _sentence(
        judgement.verdict,
        [facts_from_report(r) for r in judgement.decisions],
        won=judgement.won,
        needed=judgement.needed,
        settling=judgement.settling_decision,
        failure_reason=judgement.failure_reason,
    )


def unjudged_sentence(reason: str | None) -> str:
    """Why the credit of a training that ended before it was judged (cancelled by the customer,
    or a deadline passed first) came back: no model was measured, so there is no audit, and it
    did not fail on our side. ``reason``: the training's own (its lifecycle row's).

    >>> unjudged_sentence("cancelled by the customer while awaiting_predictions")
    'The credit comes back: the training ended before it was judged (cancelled by the customer while awaiting predictions).'
    >>> unjudged_sentence(None)
    'The credit comes back: the training ended before it was judged.'
    """
    why = (reason or "").strip().rstrip(".").replace("awaiting_predictions", "awaiting predictions")
    return f"The credit comes back: the training ended before it was judged{f' ({why})' if why else ''}."


def verdict_sentence_from_audit(audit: Mapping[str, Any]) -> str:
    """The same sentence as :func:`verdict_sentence`, read from an audit file's dict.

    Args:
        audit: an audit as written by ``refund.audit.build_audit`` (its ``overall`` and
            ``decisions``).

    Returns:
        One sentence.

    >>> audit = {"overall": {"verdict": "refund", "won": 1, "needed": 2,
    ...                      "settling_decision": "kind", "failure_reason": None},
    ...          "decisions": [
    ...     {"name": "sentiment", "report": {"gain": 0.1169, "deltas": {}, "margins": {},
    ...      "bootstrap": {"q05": 0.0993, "resamples": 2000, "n_gain_le_0": 0}}},
    ...     {"name": "kind", "report": {"gain": 0.0067, "deltas": {}, "margins": {},
    ...      "bootstrap": {"q05": -0.0012, "resamples": 2000, "n_gain_le_0": 169}}}]}
    >>> verdict_sentence_from_audit(audit)
    'The credit comes back: the model beat Jev on 1 of 2 decisions and needed both; kind settled it: better than Jev on average (G = +0.0067) but not reliably: in 169 of 2,000 resamples the gain was not positive (q05 = -0.0012).'
    """
    overall = audit["overall"]
    decisions = [facts_from_audit(d) for d in audit.get("decisions") or []]
    return _sentence(
        Verdict(overall["verdict"]),
        decisions,
        won=int(overall.get("won") or 0),
        needed=int(overall.get("needed") or 0),
        settling=overall.get("settling_decision"),
        failure_reason=overall.get("failure_reason"),
    )
