"""The paired bootstrap of the gain G: vectorised with numpy, bit-identical to plain Python.

Both systems are scored on the same resamples (rows drawn by :mod:`.stream`). Each resample's
metrics are computed only from integer counts: per-answer counts by ``bincount`` over the drawn
rows' codes, the Brier sum as an int64 sum of the drawn rows' integer units, and selective
accuracy by sorting each resample's confidence ranks (a radix sort on small integers) and
counting the right answers among the ``m`` smallest.
The floats are then made exactly as the plain-Python verifier makes them (one correctly rounded
division per quotient, sums left to right in answer order, ``G`` left to right), so the arrays are
equal bit for bit; :func:`gains_python` is the plain reference used by the tests.

>>> from typestrict_pipeline.refund.metrics import example_values
>>> y = [0, 1, 1, 0]
>>> a = example_values(y, [(0.9, 0.1), (0.2, 0.8), (0.6, 0.4), (0.7, 0.3)])
>>> b = example_values(y, [(0.5, 0.5), (0.5, 0.5), (0.5, 0.5), (0.5, 0.5)])
>>> g = bootstrap_gains(y, a, b, 2, bytes(32), 50)
>>> g.tolist() == gains_python(y, a, b, 2, bytes(32), 50)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.refund.metrics import (
    BRIER_UNIT,
    WEIGHTS,
    ExampleValues,
    coverage_count,
    f1_answers,
)
from typestrict_pipeline.refund.stream import resample_indices, resample_indices_python

_EXACT_FLOAT_INT = 2**53
_CHUNK = 256  # resamples per block: bounds memory at about 10 · _CHUNK · n · 8 bytes


def q05_index(resamples: int) -> int:
    """0-based index of the 5th percentile in the ascending G values: ``ceil(5B/100) − 1``.

    >>> q05_index(2000), q05_index(1), q05_index(20), q05_index(21)
    (99, 0, 0, 1)
    """
    return -((-5 * resamples) // 100) - 1


@dataclass(frozen=True)
class BootstrapResult:
    """The paired bootstrap of one decision.

    Attributes:
        resamples: B.
        seed_hex: the seed (hex) the resamples were drawn from.
        gains: G of every resample, in resample order.
        q05_index: ``ceil(5B/100) − 1``.
        q05: the ``q05_index``-th smallest G (an order statistic, no interpolation).
        n_gain_le_0: how many resamples have ``G <= 0``.
    """

    resamples: int
    seed_hex: str
    gains: tuple[float, ...]
    q05_index: int
    q05: float
    n_gain_le_0: int

    @property
    def gain_is_real(self) -> bool:
        """``q05 > 0``: the 5th percentile of G is above zero."""
        return self.q05 > 0.0


def summarize(gains: Sequence[float], seed: bytes) -> BootstrapResult:
    """Sort the gains and read the 5th percentile (order statistic) and the count of ``G <= 0``."""
    ordered = sorted(gains)
    qi = q05_index(len(ordered))
    return BootstrapResult(
        resamples=len(ordered),
        seed_hex=seed.hex(),
        gains=tuple(float(g) for g in gains),
        q05_index=qi,
        q05=ordered[qi],
        n_gain_le_0=sum(1 for g in ordered if g <= 0.0),
    )


def _system_block(
    block: npt.NDArray[np.intp],
    true: npt.NDArray[np.int64],
    ex: ExampleValues,
    labels: Sequence[int],
    n_answers: int,
    m: int,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One system's three G metrics for a block of resamples.

    Args:
        block: ``block[b, j]`` = the row drawn by draw ``j`` of resample ``b``.
        true: ``true[b, k]`` = draws whose right answer is ``k``.
        ex: the system's per-example values.
        labels: the answers macro F1 averages over.
        n_answers: K.
        m: how many draws selective accuracy keeps.
    """
    b, n = block.shape
    offsets = (np.arange(b, dtype=np.intp) * (2 * n_answers))[:, None]
    # a right example is always predicted as its right answer, so one code per draw,
    # 2·pred + right, counts both "predicted as k" and "right with answer k"
    code = 2 * np.asarray(ex.pred, dtype=np.intp) + np.asarray(ex.correct, dtype=np.intp)
    pc = np.bincount((code[block] + offsets).ravel(), minlength=b * 2 * n_answers)
    pc = pc.reshape(b, n_answers, 2)
    tp = pc[:, :, 1]
    prd = pc[:, :, 0] + tp
    macro = np.zeros(b, dtype=np.float64)
    for k in labels:
        den = (true[:, k] + prd[:, k]).astype(np.float64)
        num = (2 * tp[:, k]).astype(np.float64)
        f = np.zeros(b, dtype=np.float64)
        np.divide(num, den, out=f, where=den > 0)
        macro = macro + f
    macro = macro / np.float64(len(labels))

    units = np.asarray(ex.brier_units, dtype=np.int64)
    s = units[block].sum(axis=1)  # integers: exact in any order
    two_d = 2 * n * BRIER_UNIT
    if two_d <= _EXACT_FLOAT_INT:
        brier = (two_d - s).astype(np.float64) / np.float64(two_d)
    else:  # int -> float would round: divide exactly in Python instead
        brier = np.array([(two_d - int(v)) / two_d for v in s.tolist()], dtype=np.float64)

    # selective accuracy: sort each resample's confidence ranks (radix sort on small ints)
    # and count the right answers among the m smallest ranks
    rank_dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int64
    rank = np.empty(n, dtype=rank_dtype)
    rank[np.asarray(ex.order, dtype=np.intp)] = np.arange(n, dtype=rank_dtype)
    correct_by_rank = np.asarray(ex.correct, dtype=np.int64)[np.asarray(ex.order, dtype=np.intp)]
    ranks = np.sort(rank[block], axis=1, kind="stable")
    sel = correct_by_rank[ranks[:, :m]].sum(axis=1)
    sel_acc = sel.astype(np.float64) / np.float64(m)
    return macro, brier, sel_acc


def bootstrap_gains(
    y: Sequence[int],
    model: ExampleValues,
    jev: ExampleValues,
    n_answers: int,
    seed: bytes,
    resamples: int,
) -> npt.NDArray[np.float64]:
    """G of every resample (numpy, vectorised), bit-identical to :func:`gains_python`.

    Args:
        y: right answers in canonical row order.
        model: the trained model's :class:`ExampleValues`.
        jev: Jev's :class:`ExampleValues`.
        n_answers: the number of answers.
        seed: the 32-byte bootstrap seed.
        resamples: B.

    Returns:
        A float64 array of B gains, in resample order.
    """
    n = len(y)
    labels = f1_answers(y, n_answers)
    m = coverage_count(n)
    ya = np.asarray(y, dtype=np.intp)
    idx = resample_indices(seed, n, resamples)
    out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, _CHUNK):
        block = idx[start : start + _CHUNK]
        nb = block.shape[0]
        offsets = (np.arange(nb, dtype=np.intp) * n_answers)[:, None]
        true = np.bincount((ya[block] + offsets).ravel(), minlength=nb * n_answers)
        true = true.reshape(nb, n_answers)
        mf_m, bs_m, sa_m = _system_block(block, true, model, labels, n_answers, m)
        mf_j, bs_j, sa_j = _system_block(block, true, jev, labels, n_answers, m)
        g = WEIGHTS[0] * (mf_m - mf_j)
        g = g + WEIGHTS[1] * (bs_m - bs_j)
        g = g + WEIGHTS[2] * (sa_m - sa_j)
        out[start : start + nb] = g
    return out


def _metrics_python(
    draws: Sequence[int],
    y: Sequence[int],
    ex: ExampleValues,
    labels: Sequence[int],
    n_answers: int,
    rank: Sequence[int],
    m: int,
) -> tuple[float, float, float]:
    n = len(y)
    tp = [0] * n_answers
    true = [0] * n_answers
    prd = [0] * n_answers
    s = 0
    for i in draws:
        true[y[i]] += 1
        prd[ex.pred[i]] += 1
        if ex.correct[i]:
            tp[y[i]] += 1
        s += ex.brier_units[i]
    macro = 0.0
    for k in labels:
        den = true[k] + prd[k]
        macro += 2 * tp[k] / den if den else 0.0
    macro = macro / len(labels)
    two_d = 2 * n * BRIER_UNIT
    kept = sorted(rank[i] for i in draws)[:m]
    sel = sum(1 for r in kept if ex.correct[ex.order[r]])
    return macro, (two_d - s) / two_d, sel / m


def gains_python(
    y: Sequence[int],
    model: ExampleValues,
    jev: ExampleValues,
    n_answers: int,
    seed: bytes,
    resamples: int,
) -> list[float]:
    """The plain-Python reference of :func:`bootstrap_gains` (slow, obvious; used by the tests)."""
    n = len(y)
    labels = f1_answers(y, n_answers)
    m = coverage_count(n)
    ranks = []
    for ex in (model, jev):
        rank = [0] * n
        for pos, i in enumerate(ex.order):
            rank[i] = pos
        ranks.append(rank)
    out: list[float] = []
    for draws in resample_indices_python(seed, n, resamples):
        mf_m, bs_m, sa_m = _metrics_python(draws, y, model, labels, n_answers, ranks[0], m)
        mf_j, bs_j, sa_j = _metrics_python(draws, y, jev, labels, n_answers, ranks[1], m)
        out.append(
            WEIGHTS[0] * (mf_m - mf_j) + WEIGHTS[1] * (bs_m - bs_j) + WEIGHTS[2] * (sa_m - sa_j)
        )
    return out
