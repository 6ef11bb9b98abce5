"""The refund rule: judge each decision against Jev, then the training (2/3 of decisions).

A decision *beats* Jev when both hold:

* the gain is real: the 5th percentile (order statistic) of G over the paired bootstrap's 2,000
  resamples is above zero and, when the test examples come in groups, the group jackknife t check
  passes (:mod:`.smallgroups`: ``G − t_{G−1} · se_jackknife > 0``, the small-sample correction
  for few or unequal groups; audit format version 4);
* nothing collapses: no metric of the model is below Jev's by more than its margin (0.02; 0.05 for
  ``worst_class_f1``), compared as exact rationals; the ``worst_class_f1`` margin does not apply
  when no answer has 5 test examples.

A training beats Jev when at least ``ceil(2n/3)`` of its ``n`` decisions beat it; the settling
decision is the first decision won when it beats, the first decision lost otherwise. Then
``beats`` → :attr:`Verdict.BEATS`; otherwise :attr:`Verdict.KEPT` with ``keep_if_loses`` and
:attr:`Verdict.REFUND` without; a training that failed on our side is :attr:`Verdict.FAILED`.

>>> from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow
>>> import hashlib
>>> rows = tuple(
...     JudgedRow(hashlib.sha256(str(i).encode()).hexdigest(), i % 2,
...               (0.9, 0.1) if i % 2 == 0 else (0.1, 0.9), (0.5, 0.5))
...     for i in range(20))
>>> report = judge_decision(DecisionData("spam", DecisionKind.SINGLE, ("no", "yes"), rows))
>>> report.model.macro_f1, report.jev.macro_f1, report.beats
(1.0, 1.0, True)
>>> judge_training([report], keep_if_loses=False).verdict
<Verdict.BEATS: 'beats'>
>>> failed_training("the trainer ran out of memory").verdict.refunds_credit
True
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from typestrict_pipeline.errors import InputError, NotEnoughDataError, PredictionsError
from typestrict_pipeline.refund.bootstrap import (
    BootstrapResult,
    BootstrapUnit,
    bootstrap_gains,
    summarize,
)
from typestrict_pipeline.refund.metrics import (
    MAX_DROP,
    METRIC_NAMES,
    PROB_SUM_TOLERANCE,
    Counts,
    Metrics,
    coverage_count,
    example_values,
    f1_answers,
    full_counts,
    gain,
    point_metrics,
    sums_to_one,
    worst_eligible,
)
from typestrict_pipeline.refund.smallgroups import GroupCheck, group_check
from typestrict_pipeline.refund.stream import bootstrap_seed
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow, Verdict

RESAMPLES = 2000
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class MarginStatus(enum.StrEnum):
    """Whether a metric's "nothing collapses" margin held.

    Attributes:
        HELD: the model is not worse than Jev by more than the margin.
        BROKEN: it is worse by more than the margin.
        NOT_APPLICABLE: ``worst_class_f1`` only, when no answer has 5 test examples.
    """

    HELD = "held"
    BROKEN = "broken"
    NOT_APPLICABLE = "not_applicable"


@dataclass(frozen=True)
class DecisionReport:
    """Every number of one decision's judgement.

    Attributes:
        name: the decision's name.
        kind: single answer list or multiple choice.
        answers: the probability columns.
        rows: the test examples in canonical order (sorted by text SHA-256), vectors padded to
            ``len(answers)`` for multiple choice.
        groups: with groups, each row's group index (groups in ascending order of their
            SHA-256); ``None`` when the bootstrap resamples examples.
        n_options: multiple choice: options offered per row (canonical order); else ``None``.
        f1_answers: answer indices macro F1 averages over.
        worst_eligible: answer indices with at least 5 test examples.
        coverage: ``m = ceil(4n/5)``.
        model: the model's metrics.
        jev: Jev's metrics.
        model_counts: the model's integer counts.
        jev_counts: Jev's integer counts.
        deltas: model − Jev per metric as floats (``None`` where not applicable).
        exact_deltas: the same as exact rationals (absent where not applicable).
        margins: per metric, whether its margin held.
        gain: G on the whole test set.
        bootstrap: the paired bootstrap.
        beats: whether the model beats Jev on this decision.
        group_check: with groups, the group jackknife t check (``None`` without groups).
    """

    name: str
    kind: DecisionKind
    answers: tuple[str, ...]
    rows: tuple[JudgedRow, ...]
    n_options: tuple[int, ...] | None
    groups: tuple[int, ...] | None
    f1_answers: tuple[int, ...]
    worst_eligible: tuple[int, ...]
    coverage: int
    model: Metrics
    jev: Metrics
    model_counts: Counts
    jev_counts: Counts
    deltas: dict[str, float | None]
    exact_deltas: dict[str, Fraction]
    margins: dict[str, MarginStatus]
    gain: float
    bootstrap: BootstrapResult
    beats: bool
    group_check: GroupCheck | None = None

    @property
    def n(self) -> int:
        """The number of test examples."""
        return len(self.rows)

    @property
    def gain_is_real(self) -> bool:
        """The bootstrap's 5th percentile of G is above zero and, with groups, the group check
        passes."""
        return self.bootstrap.gain_is_real and (
            self.group_check is None or self.group_check.passed
        )

    @property
    def nothing_collapses(self) -> bool:
        """No margin is broken."""
        return all(s is not MarginStatus.BROKEN for s in self.margins.values())


@dataclass(frozen=True)
class TrainingJudgement:
    """The verdict of one training.

    Attributes:
        verdict: beats / kept / refund / failed.
        decisions: every decision's report, in the training's order (empty when failed).
        keep_if_loses: the training's option.
        needed: ``ceil(2n/3)`` decisions to win (0 when failed).
        won: decisions won.
        beats: whether the model beats Jev overall.
        settling_decision: the first decision won (beats) or lost (otherwise); ``None`` if failed.
        failure_reason: why the training failed (``FAILED`` only).
    """

    verdict: Verdict
    decisions: tuple[DecisionReport, ...]
    keep_if_loses: bool
    needed: int
    won: int
    beats: bool
    settling_decision: str | None
    failure_reason: str | None = None

    @property
    def refunds_credit(self) -> bool:
        """Whether the training's credit comes back."""
        return self.verdict.refunds_credit


def decisions_needed(n: int) -> int:
    """``ceil(2n/3)``: decisions a model must win out of ``n``.

    >>> [decisions_needed(n) for n in range(1, 7)]
    [1, 2, 2, 3, 4, 4]
    """
    if n < 1:
        raise ValueError(f"expected at least one decision, got {n}")
    return (2 * n + 2) // 3


def _row_error(data: DecisionData, index: int, column: str, expected: str, got: str) -> InputError:
    return PredictionsError(
        expected,
        got,
        f"fix the predictions of decision {data.name!r} (test example {index + 1} as given)",
        row=index + 1,
        column=column,
    )


def _check_probs(
    data: DecisionData, index: int, column: str, p: Sequence[float], n_offered: int, k: int
) -> tuple[float, ...]:
    if len(p) not in (n_offered, k):
        raise _row_error(
            data, index, column, f"{n_offered} or {k} probabilities", f"{len(p)} values"
        )
    out: list[float] = []
    for j, v in enumerate(p):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _row_error(data, index, column, "a number", repr(v))
        f = float(v)
        if not (math.isfinite(f) and 0.0 <= f <= 1.0):
            raise _row_error(data, index, column, "a probability between 0 and 1", repr(v))
        if j >= n_offered and f != 0.0:
            raise _row_error(
                data,
                index,
                column,
                f"0.0 at option position {j + 1} (the example offers {n_offered} options)",
                repr(v),
            )
        out.append(f)
    out.extend([0.0] * (k - len(out)))
    if not sums_to_one(out):
        raise _row_error(
            data, index, column, f"probabilities summing to 1 (±{float(PROB_SUM_TOLERANCE)})",
            repr(math.fsum(out)),
        )
    return tuple(out)


def canonical_rows(data: DecisionData) -> tuple[tuple[JudgedRow, ...], tuple[int, ...] | None]:
    """Validate a decision's rows and put them in canonical order (sorted by text SHA-256).

    Rows with the same hash are ordered by the rest of their content, so any input order gives
    the same result. Multiple-choice vectors are padded with 0.0 to ``len(answers)``.

    Args:
        data: the decision.

    Returns:
        The canonical rows and, for multiple choice, each row's option count.

    Raises:
        InputError: a malformed decision (answers, hashes, answer indices, probabilities).
        NotEnoughDataError: no test examples.
    """
    k = len(data.answers)
    if not isinstance(data.name, str) or not data.name:
        raise InputError("a non-empty decision name", repr(data.name), "name the decision")
    if k < 2 or len(set(data.answers)) != k:
        raise InputError(
            "at least 2 distinct answers",
            repr(data.answers),
            f"give decision {data.name!r} its answer list",
        )
    if not data.rows:
        raise NotEnoughDataError(
            f"expected at least 1 test example for decision {data.name!r}, got 0. "
            "Label more examples or judge the training as failed."
        )
    mc = data.kind is DecisionKind.MULTIPLE_CHOICE
    grouped = data.rows[0].group_sha256 is not None
    checked: list[tuple[JudgedRow, int]] = []
    for i, row in enumerate(data.rows):
        if not isinstance(row.text_sha256, str) or not _SHA256_HEX.fullmatch(row.text_sha256):
            raise _row_error(
                data, i, "text_sha256", "64 lowercase hex digits", repr(row.text_sha256)
            )
        g = row.group_sha256
        if (g is not None) != grouped or (g is not None and not (
            isinstance(g, str) and _SHA256_HEX.fullmatch(g)
        )):
            expected = "64 lowercase hex digits (every row has a group)" if grouped else (
                "None (the first row has no group)"
            )
            raise _row_error(data, i, "group_sha256", expected, repr(g))
        offered = k
        if mc:
            if row.n_options is not None:
                offered = row.n_options
            elif len(row.p_model) < k:
                offered = len(row.p_model)
            if isinstance(offered, bool) or not isinstance(offered, int) or not 1 <= offered <= k:
                raise _row_error(data, i, "n_options", f"an option count from 1 to {k}", repr(offered))
        elif row.n_options not in (None, k):
            raise _row_error(data, i, "n_options", f"None or {k}", repr(row.n_options))
        if isinstance(row.y, bool) or not isinstance(row.y, int) or not 0 <= row.y < offered:
            raise _row_error(data, i, "y", f"an answer index from 0 to {offered - 1}", repr(row.y))
        pm = _check_probs(data, i, "p_model", row.p_model, offered, k)
        pj = _check_probs(data, i, "p_jev", row.p_jev, offered, k)
        checked.append(
            (JudgedRow(row.text_sha256, row.y, pm, pj, offered if mc else None, g), offered)
        )
    checked.sort(
        key=lambda t: (t[0].text_sha256, t[0].y, t[0].p_model, t[0].p_jev, t[1], t[0].group_sha256 or "")
    )
    rows = tuple(r for r, _ in checked)
    return rows, (tuple(o for _, o in checked) if mc else None)


def group_indices(rows: Sequence[JudgedRow]) -> tuple[int, ...] | None:
    """Each row's group index, groups in ascending order of their SHA-256 (``None``: no groups).

    >>> r = [JudgedRow("0" * 64, 0, (1.0, 0.0), (1.0, 0.0), None, g) for g in ("b" * 64, "a" * 64, "b" * 64)]
    >>> group_indices(r)
    (1, 0, 1)
    """
    if not rows or rows[0].group_sha256 is None:
        return None
    index = {g: i for i, g in enumerate(sorted({r.group_sha256 or "" for r in rows}))}
    return tuple(index[r.group_sha256 or ""] for r in rows)


def judge_decision(data: DecisionData, *, resamples: int = RESAMPLES) -> DecisionReport:
    """Judge one decision: four metrics per system, margins, G, the paired bootstrap.

    Args:
        data: the decision's test examples with both systems' probabilities.
        resamples: bootstrap resamples B (the refund page says 2,000; the verifier insists).

    Returns:
        The :class:`DecisionReport`.

    Raises:
        InputError: malformed data (see :func:`canonical_rows`).
        NotEnoughDataError: no test examples.
    """
    if resamples < 1:
        raise ValueError(f"expected resamples >= 1, got {resamples}")
    rows, n_options = canonical_rows(data)
    k = len(data.answers)
    y = [r.y for r in rows]
    ex_m = example_values(y, [r.p_model for r in rows])
    ex_j = example_values(y, [r.p_jev for r in rows])
    met_m = point_metrics(y, ex_m, k)
    met_j = point_metrics(y, ex_j, k)
    deltas: dict[str, float | None] = {}
    exact: dict[str, Fraction] = {}
    margins: dict[str, MarginStatus] = {}
    for name in METRIC_NAMES:
        vm, vj = met_m.value(name), met_j.value(name)
        if vm is None or vj is None:
            deltas[name] = None
            margins[name] = MarginStatus.NOT_APPLICABLE
            continue
        deltas[name] = vm - vj
        d = met_m.exact[name] - met_j.exact[name]
        exact[name] = d
        margins[name] = MarginStatus.HELD if d >= -MAX_DROP[name] else MarginStatus.BROKEN
    g = gain(met_m.macro_f1 - met_j.macro_f1, met_m.brier_skill - met_j.brier_skill,
             met_m.selective_acc_80 - met_j.selective_acc_80)
    seed = bootstrap_seed(data.name, (r.text_sha256 for r in rows))
    groups = group_indices(rows)
    unit, n_units = (
        (BootstrapUnit.EXAMPLE, len(rows)) if groups is None
        else (BootstrapUnit.GROUP, max(groups) + 1)
    )
    gains = bootstrap_gains(y, ex_m, ex_j, k, seed, resamples, groups)
    boot = summarize(gains.tolist(), seed, unit, n_units)
    check = None if groups is None else group_check(y, ex_m, ex_j, k, groups, g)
    real = boot.gain_is_real and (check is None or check.passed)
    beats = real and all(s is not MarginStatus.BROKEN for s in margins.values())
    return DecisionReport(
        name=data.name,
        kind=data.kind,
        answers=tuple(data.answers),
        rows=rows,
        n_options=n_options,
        groups=groups,
        f1_answers=f1_answers(y, k),
        worst_eligible=worst_eligible(y, k),
        coverage=coverage_count(len(y)),
        model=met_m,
        jev=met_j,
        model_counts=full_counts(y, ex_m, k),
        jev_counts=full_counts(y, ex_j, k),
        deltas=deltas,
        exact_deltas=exact,
        margins=margins,
        gain=g,
        bootstrap=boot,
        beats=beats,
        group_check=check,
    )


def example_bootstrap(report: DecisionReport) -> BootstrapResult:
    """The same decision's bootstrap resampling single examples: what rows alone would say.

    For comparison only (the demo and the method page show how whole groups move q05); the
    verdict of a grouped decision uses :attr:`DecisionReport.bootstrap`.

    >>> import hashlib
    >>> from typestrict_pipeline.refund.stream import group_sha256
    >>> rows = tuple(JudgedRow(hashlib.sha256(str(i).encode()).hexdigest(), i % 2,
    ...                        (0.8, 0.2) if i % 3 else (0.2, 0.8), (0.5, 0.5), None,
    ...                        group_sha256(str(i // 4))) for i in range(40))
    >>> r = judge_decision(DecisionData("d", DecisionKind.SINGLE, ("no", "yes"), rows))
    >>> r.bootstrap.unit.value, example_bootstrap(r).unit.value, r.bootstrap.n_units
    ('group', 'example', 10)
    """
    y = [r.y for r in report.rows]
    k = len(report.answers)
    ex_m = example_values(y, [r.p_model for r in report.rows])
    ex_j = example_values(y, [r.p_jev for r in report.rows])
    seed = bootstrap_seed(report.name, (r.text_sha256 for r in report.rows))
    gains = bootstrap_gains(y, ex_m, ex_j, k, seed, report.bootstrap.resamples)
    return summarize(gains.tolist(), seed, BootstrapUnit.EXAMPLE, len(y))


def judge_training(
    reports: Sequence[DecisionReport], *, keep_if_loses: bool
) -> TrainingJudgement:
    """Combine the decisions' reports: beats on at least ``ceil(2n/3)`` of them.

    Args:
        reports: one report per decision, in the training's decision order (at least one,
            names unique).
        keep_if_loses: the training's "keep the model even if it does not beat Jev" option.

    Returns:
        The :class:`TrainingJudgement` (``BEATS``, ``KEPT`` or ``REFUND``).

    Raises:
        InputError: no reports, or two with the same name.
    """
    if not reports:
        raise InputError("at least one decision report", "none", "judge every decision first")
    names = [r.name for r in reports]
    if len(set(names)) != len(names):
        raise InputError("unique decision names", repr(names), "give each decision its own name")
    won = sum(1 for r in reports if r.beats)
    needed = decisions_needed(len(reports))
    beats = won >= needed
    settling = next(r.name for r in reports if r.beats == beats)
    verdict = Verdict.BEATS if beats else (Verdict.KEPT if keep_if_loses else Verdict.REFUND)
    return TrainingJudgement(
        verdict=verdict,
        decisions=tuple(reports),
        keep_if_loses=keep_if_loses,
        needed=needed,
        won=won,
        beats=beats,
        settling_decision=settling,
    )


def judge(
    decisions: Sequence[DecisionData], *, keep_if_loses: bool, resamples: int = RESAMPLES
) -> TrainingJudgement:
    """Judge every decision of a training and combine them (see :func:`judge_training`)."""
    return judge_training(
        [judge_decision(d, resamples=resamples) for d in decisions], keep_if_loses=keep_if_loses
    )


def failed_training(reason: str, *, keep_if_loses: bool = False) -> TrainingJudgement:
    """The judgement of a training that failed on our side: ``FAILED``, the credit comes back.

    Args:
        reason: what failed, for the user and the audit (no secrets, no file paths).
        keep_if_loses: the training's option (recorded; it does not change the verdict).

    Returns:
        A ``FAILED`` :class:`TrainingJudgement` with no decisions.

    >>> failed_training("Jev did not answer", keep_if_loses=True).verdict
    <Verdict.FAILED: 'failed'>
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InputError("a non-empty failure reason", repr(reason), "say why the training failed")
    return TrainingJudgement(
        verdict=Verdict.FAILED,
        decisions=(),
        keep_if_loses=keep_if_loses,
        needed=0,
        won=0,
        beats=False,
        settling_decision=None,
        failure_reason=reason.strip(),
    )
