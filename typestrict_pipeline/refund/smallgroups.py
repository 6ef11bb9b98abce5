"""The group check: a small-sample correction of "the gain is real" when test examples come in groups.

The group bootstrap (:mod:`.bootstrap`) resamples whole groups. With few groups, or groups of
very unequal sizes (a few large ones hold most rows), its spread of G is too narrow and its 5th
percentile says "the gain is real" more often than the 5% the rule is built on (Cameron, Gelbach
& Miller 2008; MacKinnon & Webb 2017). Format version 4 therefore adds a second condition for a
grouped decision, the **group jackknife t check**:

* ``G_(−g)``: the gain G recomputed on every row except those of group ``g`` (the same four
  metric definitions on the ``n − n_g`` remaining rows: macro F1 over the whole test set's
  ``f1_answers``, ``brier_skill`` on ``n − n_g`` rows, ``selective_acc_80`` keeping
  ``ceil(4(n − n_g)/5)`` of them, the most confident first), for every group ``g = 0 … G−1`` in
  canonical order (ascending group SHA-256).
* ``mean = (Σ_g G_(−g)) / G``, ``ss = Σ_g (G_(−g) − mean)²`` (each sum left to right),
  ``var = ss · (G − 1) / G`` (the delete-one-group jackknife variance, the "CV3" cluster-robust
  variance), ``se = sqrt(var)``.
* ``t`` = the one-sided 95% quantile of Student's t with ``df = max(1, G_eff − 1)`` degrees of
  freedom, where ``G_eff = ⌊n² / Σ_g n_g²⌋`` is the effective number of groups (Kish's formula
  for weights ``n_g``: ``G`` when the groups are equal, fewer when a few large groups hold most
  rows), read from :data:`T95` (rounded up at 4 decimals; for degrees of freedom between two
  entries, the entry of the largest listed ``df`` at or below it, which is the larger quantile:
  conservative).
* ``lower = G_hat − t · se``; the check passes when ``lower > 0``. With a single group nothing
  can be said beyond that group: it never passes.

Every float is made in plain Python in a fixed order, so ``verify_audit.py`` (its own copy)
rebuilds the same bits. It costs ``O(n + G·K)``: each left-out group's counts are the whole
set's minus the group's, and the selective cut is found by walking only the group's own rows.

>>> from typestrict_pipeline.refund.metrics import example_values
>>> y = [0, 1, 0, 1, 0, 1]
>>> a = example_values(y, [(0.9, 0.1), (0.2, 0.8), (0.8, 0.2), (0.3, 0.7), (0.7, 0.3), (0.4, 0.6)])
>>> b = example_values(y, [(0.5, 0.5)] * 6)
>>> c = group_check(y, a, b, 2, [0, 0, 1, 1, 2, 2], gain_hat=0.2)
>>> c.n_groups, c.effective_groups, c.df, c.t, len(c.leave_one_out), c.passed
(3, 3, 2, 2.92, 3, True)
>>> group_check(y, a, b, 2, [0, 0, 0, 0, 1, 2], gain_hat=0.2).effective_groups  # 36 // 18
2
>>> group_check(y, a, b, 2, [0] * 6, gain_hat=0.2).passed  # one group: never
False
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from typestrict_pipeline.refund.bootstrap import group_members
from typestrict_pipeline.refund.metrics import BRIER_UNIT, WEIGHTS, ExampleValues, f1_answers

GROUP_CHECK_METHOD = "group_jackknife_t95_v1"
"""The name written in the audit's ``params.group_check`` (format version 4)."""

T95: dict[int, str] = {
    1: "6.3138", 2: "2.9200", 3: "2.3534", 4: "2.1319", 5: "2.0151", 6: "1.9432", 7: "1.8946",
    8: "1.8596", 9: "1.8332", 10: "1.8125", 11: "1.7959", 12: "1.7823", 13: "1.7710",
    14: "1.7614", 15: "1.7531", 16: "1.7459", 17: "1.7397", 18: "1.7341", 19: "1.7292",
    20: "1.7248", 21: "1.7208", 22: "1.7172", 23: "1.7139", 24: "1.7109", 25: "1.7082",
    26: "1.7057", 27: "1.7033", 28: "1.7012", 29: "1.6992", 30: "1.6973", 40: "1.6839",
    50: "1.6760", 60: "1.6707", 80: "1.6642", 100: "1.6603", 120: "1.6577",
}
"""Student's t one-sided 95% quantiles by degrees of freedom, rounded up at 4 decimals (computed
with scipy 1.17.1 ``stats.t.ppf(0.95, df)``; the decimal strings are what the float is read from)."""


def t95(df: int) -> float:
    """The t quantile used for ``df`` degrees of freedom: the entry of the largest listed
    ``df' <= df`` (so at least the true quantile, which falls as ``df`` grows).

    >>> t95(1), t95(9), t95(35), t95(119), t95(5000)
    (6.3138, 1.8332, 1.6973, 1.6603, 1.6577)
    """
    if df < 1:
        raise ValueError(f"expected at least 1 degree of freedom, got {df}")
    return float(T95[max(k for k in T95 if k <= df)])


@dataclass(frozen=True)
class GroupCheck:
    """The group jackknife t check of one grouped decision.

    Attributes:
        n_groups: G.
        effective_groups: ``G_eff = ⌊n² / Σ n_g²⌋`` (``G`` for equal groups).
        df: ``max(1, G_eff − 1)`` (0 with one group).
        t: the t quantile used (``None`` with one group).
        leave_one_out: ``G_(−g)`` for each group in canonical order (empty with one group).
        se: the jackknife standard error of G (``None`` with one group).
        lower: ``G_hat − t · se`` (``None`` with one group).
        passed: ``lower > 0`` (never with one group).
    """

    n_groups: int
    effective_groups: int
    df: int
    t: float | None
    leave_one_out: tuple[float, ...]
    se: float | None
    lower: float | None
    passed: bool


class _System:
    """One system's whole-set counts and what removing one group takes away."""

    def __init__(self, y: Sequence[int], ex: ExampleValues, n_answers: int) -> None:
        self.tp = [0] * n_answers
        self.true = [0] * n_answers
        self.pred = [0] * n_answers
        self.units = 0
        for i, yi in enumerate(y):
            self.true[yi] += 1
            self.pred[ex.pred[i]] += 1
            if ex.correct[i]:
                self.tp[yi] += 1
            self.units += ex.brier_units[i]
        n = len(y)
        self.rank = [0] * n
        self.right_before = [0] * (n + 1)  # right answers among the first p rows by confidence
        for pos, i in enumerate(ex.order):
            self.rank[i] = pos
            self.right_before[pos + 1] = self.right_before[pos] + (1 if ex.correct[i] else 0)
        self.ex = ex

    def without(
        self, y: Sequence[int], rows: Sequence[int], labels: Sequence[int], n_left: int
    ) -> tuple[float, float, float]:
        """(macro F1, brier_skill, selective_acc_80) on every row but ``rows`` (``n_left`` rows)."""
        tp, true, pred = list(self.tp), list(self.true), list(self.pred)
        units = self.units
        ex = self.ex
        for i in rows:
            true[y[i]] -= 1
            pred[ex.pred[i]] -= 1
            if ex.correct[i]:
                tp[y[i]] -= 1
            units -= ex.brier_units[i]
        macro = 0.0
        for k in labels:
            den = true[k] + pred[k]
            macro += 2 * tp[k] / den if den else 0.0
        macro = macro / len(labels)
        two_d = 2 * n_left * BRIER_UNIT
        brier = (two_d - units) / two_d
        # the m most confident remaining rows: position p of the m-th row not in the group, with
        # j of the group's rows before it (the group's ranks ascending)
        m = (4 * n_left + 4) // 5
        ranks = sorted(self.rank[i] for i in rows)
        j = 0
        while j < len(ranks) and ranks[j] <= m - 1 + j:
            j += 1
        p = m - 1 + j
        right_removed = 0
        for r in ranks[:j]:
            right_removed += 1 if ex.correct[ex.order[r]] else 0
        sel = self.right_before[p + 1] - right_removed
        return macro, brier, sel / m


def group_check(
    y: Sequence[int],
    model: ExampleValues,
    jev: ExampleValues,
    n_answers: int,
    groups: Sequence[int],
    gain_hat: float,
) -> GroupCheck:
    """The group jackknife t check (module doc) of one grouped decision.

    Args:
        y: right answers in canonical row order.
        model: the model's per-example values.
        jev: Jev's.
        n_answers: K.
        groups: each row's group index ``0 … G−1`` (groups in canonical order, every index used).
        gain_hat: G on the whole test set (the report's ``gain``).

    Returns:
        The :class:`GroupCheck`.
    """
    members = group_members(groups)
    n_groups = len(members)
    n = len(y)
    effective = n * n // sum(len(rows) * len(rows) for rows in members)
    if n_groups < 2:
        return GroupCheck(n_groups, effective, 0, None, (), None, None, False)
    df = max(1, effective - 1)
    labels = f1_answers(y, n_answers)
    sm, sj = _System(y, model, n_answers), _System(y, jev, n_answers)
    loo: list[float] = []
    for rows in members:
        n_left = n - len(rows)
        mf_m, bs_m, sa_m = sm.without(y, rows, labels, n_left)
        mf_j, bs_j, sa_j = sj.without(y, rows, labels, n_left)
        loo.append(WEIGHTS[0] * (mf_m - mf_j) + WEIGHTS[1] * (bs_m - bs_j)
                   + WEIGHTS[2] * (sa_m - sa_j))
    total = 0.0
    for v in loo:
        total += v
    mean = total / n_groups
    ss = 0.0
    for v in loo:
        d = v - mean
        ss += d * d
    se = math.sqrt(ss * (n_groups - 1) / n_groups)
    t = t95(df)
    lower = gain_hat - t * se
    return GroupCheck(n_groups, effective, df, t, tuple(loo), se, lower, lower > 0.0)
