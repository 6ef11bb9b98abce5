"""The paired bootstrap of the gain G: vectorised with numpy, bit-identical to plain Python.

Both systems are scored on the same resamples (rows drawn by :mod:`.stream`). Each resample's
metrics are computed only from integer counts: per-answer counts by ``bincount`` over the drawn
rows' codes, the Brier sum as an int64 sum of the drawn rows' integer units, and selective
accuracy by sorting each resample's confidence ranks (a radix sort on small integers) and
counting the right answers among the ``m`` smallest.
The floats are then made exactly as the plain-Python verifier makes them (one correctly rounded
division per quotient, sums left to right in answer order, ``G`` left to right), so the arrays are
equal bit for bit; :func:`gains_python` is the plain reference used by the tests.
Up to 16,384 rows and 48 answers the row bootstrap runs as the group bootstrap below with every row
its own group (the same draws, the same integer counts from one exact float32 matrix product per
block, the same floats); beyond that, per drawn row as just described.

**Group bootstrap.** When the test examples carry groups (``groups[i]`` = the canonical index of
row ``i``'s group, groups ordered by their SHA-256), each resample draws ``G`` whole groups with
replacement from the same SHAKE-256 stream (:mod:`.stream`), the same draw for both systems, and
every metric is recomputed on the rows of the drawn groups (a group drawn twice counts twice). The
resample's size ``n_b`` then varies: macro F1 averages over the answers of the whole test set as
before, ``brier_skill = (2·n_b·2**40 − S_b) / (2·n_b·2**40)``, and ``selective_acc_80`` keeps
``m_b = ceil(4·n_b/5)`` of the resample's ``n_b`` rows, the most confident first (ties by canonical
row position; the copies of one row are interchangeable, so a cut through them is well defined).

>>> from typestrict_pipeline.refund.metrics import example_values
>>> y = [0, 1, 1, 0]
>>> a = example_values(y, [(0.9, 0.1), (0.2, 0.8), (0.6, 0.4), (0.7, 0.3)])
>>> b = example_values(y, [(0.5, 0.5), (0.5, 0.5), (0.5, 0.5), (0.5, 0.5)])
>>> g = bootstrap_gains(y, a, b, 2, bytes(32), 50)
>>> g.tolist() == gains_python(y, a, b, 2, bytes(32), 50)
True
>>> groups = [0, 0, 1, 2]  # rows 0 and 1 share a group
>>> bootstrap_gains(y, a, b, 2, bytes(32), 50, groups).tolist() == gains_python(
...     y, a, b, 2, bytes(32), 50, groups)
True
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from typestrict_pipeline.refund.metrics import (
    BRIER_UNIT,
    WEIGHTS,
    ExampleValues,
    coverage_count,
    f1_answers,
)
from typestrict_pipeline.refund.stream import (
    pick_rows,
    resample_indices,
    resample_indices_python,
    resample_words,
)

_EXACT_FLOAT_INT = 2**53
_CHUNK = 256  # resamples per block: bounds memory at about 10 · _CHUNK · n · 8 bytes
_GROUP_CHUNK = 512  # group resamples per block: memory about 20 · _GROUP_CHUNK · (G + the table's columns) bytes
# (resample, group) counts per block of the table path. Small blocks stay in cache and their
# buffers are reused by the allocator: at 2,000 rows x 2,000 resamples, 2**19 or 2**20 took
# about 8,000 page faults per call (fresh memory every block) against 700, and 1.25x the CPU
_CHUNK_CELLS = 2**18
_MIN_CHUNK = 64  # ... but at least this many resamples (fewer rows make the products slow)
_ROW_TABLE_MAX_ROWS = 2**14  # the row bootstrap takes the table path up to this many rows ...
_ROW_TABLE_MAX_ANSWERS = 48  # ... and answers (its table has about 5K + n/128 columns)
MAX_RESAMPLE_ROWS = 2**22
"""A group resample may hold at most this many rows (``G`` × the largest group), so that every
count and every Brier sum (``n_b · 2**41``) stays an exact 64-bit integer. The product's test
sets (at most 2,000 rows) are far below it."""


def q05_index(resamples: int) -> int:
    """0-based index of the 5th percentile in the ascending G values: ``ceil(5B/100) − 1``.

    >>> q05_index(2000), q05_index(1), q05_index(20), q05_index(21)
    (99, 0, 0, 1)
    """
    return -((-5 * resamples) // 100) - 1


class BootstrapUnit(enum.StrEnum):
    """What one bootstrap draw picks.

    Attributes:
        EXAMPLE: one test example (row); ``n`` draws per resample.
        GROUP: one whole group of test examples; ``G`` draws per resample.
    """

    EXAMPLE = "example"
    GROUP = "group"


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
        unit: what one draw picks (example or group).
        n_units: draws per resample (``n`` rows, or ``G`` groups).
    """

    resamples: int
    seed_hex: str
    gains: tuple[float, ...]
    q05_index: int
    q05: float
    n_gain_le_0: int
    unit: BootstrapUnit = BootstrapUnit.EXAMPLE
    n_units: int = 0

    @property
    def gain_is_real(self) -> bool:
        """``q05 > 0``: the 5th percentile of G is above zero."""
        return self.q05 > 0.0


def summarize(
    gains: Sequence[float],
    seed: bytes,
    unit: BootstrapUnit = BootstrapUnit.EXAMPLE,
    n_units: int = 0,
) -> BootstrapResult:
    """Sort the gains and read the 5th percentile (order statistic) and the count of ``G <= 0``.

    >>> r = summarize([0.2, -0.1, 0.3], bytes(32), BootstrapUnit.GROUP, 3)
    >>> r.q05, r.n_gain_le_0, r.unit.value
    (-0.1, 1, 'group')
    """
    ordered = sorted(gains)
    qi = q05_index(len(ordered))
    return BootstrapResult(
        resamples=len(ordered),
        seed_hex=seed.hex(),
        gains=tuple(float(g) for g in gains),
        q05_index=qi,
        q05=ordered[qi],
        n_gain_le_0=sum(1 for g in ordered if g <= 0.0),
        unit=unit,
        n_units=n_units,
    )


def _macro_f1(
    true: npt.NDArray[np.int64], pc: npt.NDArray[np.int64], labels: Sequence[int]
) -> npt.NDArray[np.float64]:
    """Macro-F1 of each resample from its counts: ``true[b, k]`` rows with answer k and
    ``pc[b, k] = (predicted k but wrong, right with answer k)``; a class never seen nor predicted
    scores 0. One order of float operations, shared by the row and the group bootstrap."""
    tp = pc[:, :, 1]
    prd = pc[:, :, 0] + tp
    cols = np.asarray(labels, dtype=np.intp)
    den = (true[:, cols] + prd[:, cols]).astype(np.float64)
    num = (2 * tp[:, cols]).astype(np.float64)
    f = np.zeros(den.shape, dtype=np.float64)
    np.divide(num, den, out=f, where=den > 0)
    macro = np.zeros(pc.shape[0], dtype=np.float64)
    for j in range(cols.shape[0]):  # left to right in answer order, as the verifier sums
        macro = macro + f[:, j]
    return macro / np.float64(len(labels))


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
    macro = _macro_f1(true, pc, labels)

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
    groups: Sequence[int] | None = None,
) -> npt.NDArray[np.float64]:
    """G of every resample (numpy, vectorised), bit-identical to :func:`gains_python`.

    Args:
        y: right answers in canonical row order.
        model: the trained model's :class:`ExampleValues`.
        jev: Jev's :class:`ExampleValues`.
        n_answers: the number of answers.
        seed: the 32-byte bootstrap seed.
        resamples: B.
        groups: ``None`` to resample rows; else each row's group index ``0 … G−1`` (groups in
            canonical order, every index used) to resample whole groups.

    Returns:
        A float64 array of B gains, in resample order.
    """
    if groups is not None:
        return _group_gains(y, model, jev, n_answers, seed, resamples, groups)
    n = len(y)
    if _row_table_fits(n, n_answers):
        # every row its own group: the group bootstrap's float32 table path draws the same rows
        # (the stream with G = n) and makes the same floats, with 1.6x less CPU at 2,000 x 20
        return _table_gains(y, model, jev, n_answers, seed, resamples, np.arange(n, dtype=np.intp), n)
    return _row_gains(y, model, jev, n_answers, seed, resamples)


def _row_gains(
    y: Sequence[int],
    model: ExampleValues,
    jev: ExampleValues,
    n_answers: int,
    seed: bytes,
    resamples: int,
) -> npt.NDArray[np.float64]:
    """The row bootstrap per drawn row (bincounts, int64 Brier sums, a radix sort of ranks): the
    path for many rows or answers, where the table of :func:`_table_gains` grows too wide."""
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
        out[start : start + nb] = _gain((mf_m, bs_m, sa_m), (mf_j, bs_j, sa_j))
    return out


def _metrics_python(
    draws: Sequence[int],
    y: Sequence[int],
    ex: ExampleValues,
    labels: Sequence[int],
    n_answers: int,
    rank: Sequence[int],
) -> tuple[float, float, float]:
    n = len(draws)
    m = coverage_count(n)
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
    groups: Sequence[int] | None = None,
) -> list[float]:
    """The plain-Python reference of :func:`bootstrap_gains` (slow, obvious; used by the tests)."""
    n = len(y)
    labels = f1_answers(y, n_answers)
    ranks = []
    for ex in (model, jev):
        rank = [0] * n
        for pos, i in enumerate(ex.order):
            rank[i] = pos
        ranks.append(rank)
    out: list[float] = []
    if groups is None:
        resamples_rows = resample_indices_python(seed, n, resamples)
    else:
        members = group_members(groups)
        resamples_rows = [
            [i for g in drawn for i in members[g]]
            for drawn in resample_indices_python(seed, len(members), resamples)
        ]
    for draws in resamples_rows:
        mf_m, bs_m, sa_m = _metrics_python(draws, y, model, labels, n_answers, ranks[0])
        mf_j, bs_j, sa_j = _metrics_python(draws, y, jev, labels, n_answers, ranks[1])
        out.append(
            WEIGHTS[0] * (mf_m - mf_j) + WEIGHTS[1] * (bs_m - bs_j) + WEIGHTS[2] * (sa_m - sa_j)
        )
    return out


def group_members(groups: Sequence[int]) -> list[list[int]]:
    """Each group's rows (ascending), from each row's group index; every index must be used.

    >>> group_members([1, 0, 1])
    [[1], [0, 2]]
    """
    n_groups = max(groups) + 1 if len(groups) else 0
    members: list[list[int]] = [[] for _ in range(n_groups)]
    for i, g in enumerate(groups):
        members[g].append(i)
    if any(not rows for rows in members):
        raise ValueError("expected every group index 0 … G−1 to hold at least one row")
    return members


def _exact_quotients(num: npt.NDArray[np.int64], den: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``num / den`` correctly rounded per element (float64 division when both are exact floats)."""
    small = den <= _EXACT_FLOAT_INT
    out = np.empty(num.shape[0], dtype=np.float64)
    out[small] = num[small].astype(np.float64) / den[small].astype(np.float64)
    for i in np.flatnonzero(~small).tolist():
        out[i] = int(num[i]) / int(den[i])
    return out


@dataclass(frozen=True)
class _GroupSums:
    """One system's per-group integer sums (the bootstrap recombines them per resample).

    The least confident ``window`` rows are cut into blocks of :func:`block_rows` rows (least
    confident first): ``blocks[g, j]`` / ``blocks[g, nblk + j]`` count group ``g``'s rows / right
    rows in block ``j``, so one matrix product gives every resample's weight per block, and only
    the block holding the cut is looked at row by row (``tail_groups``, ``tail_right``; padding
    rows point at the empty group ``G``).
    """

    codes: npt.NDArray[np.int64]  # (G, 2K): per answer k, [2k] wrong-and-predicted-k, [2k+1] right
    units: npt.NDArray[np.int64]  # (G,): Brier units
    group_right: npt.NDArray[np.int64]  # (G,): right answers
    by_rank: npt.NDArray[np.intp]  # group of each row, rows in this system's confidence order
    correct_by_rank: npt.NDArray[np.int64]
    blocks: npt.NDArray[np.int64]  # (G, 2·nblk)
    tail_groups: npt.NDArray[np.intp]  # (nblk, block rows)
    tail_right: npt.NDArray[np.int64]  # (nblk, block rows)


def block_rows(n_groups: int, window: int) -> int:
    """Rows per block of the selective-accuracy search: ``sqrt(n_groups · window) / 10`` within
    32 … 128.

    Smaller blocks make the row-by-row search of the cut's block shorter but add two table
    columns per block to every resample's matrix product (``n_groups`` multiply-adds each): the
    cost ``block + n_groups · window / block`` is least near the square root. Measured (CPU, B =
    2,000): 200 groups of 10 rows, K = 20: 17.4 ms at 128, 14.7 ms at 32-48; the row bootstrap
    of 10,000 rows: 0.45 s at 128, 0.56 s at 32. Any size gives the same bits.

    >>> block_rows(200, 695), block_rows(2000, 695), block_rows(10000, 2916)
    (37, 117, 128)
    """
    return int(min(128, max(32, math.isqrt(n_groups * window) // 10)))


def _group_sums(
    ex: ExampleValues, gidx: npt.NDArray[np.intp], n_groups: int, n_answers: int
) -> _GroupSums:
    code = 2 * np.asarray(ex.pred, dtype=np.intp) + np.asarray(ex.correct, dtype=np.intp)
    codes = np.zeros((n_groups, 2 * n_answers), dtype=np.int64)
    np.add.at(codes, (gidx, code), 1)
    units = np.zeros(n_groups, dtype=np.int64)
    np.add.at(units, gidx, np.asarray(ex.brier_units, dtype=np.int64))
    order = np.asarray(ex.order, dtype=np.intp)
    correct = np.asarray(ex.correct, dtype=np.int64)
    group_right = np.bincount(gidx, weights=correct, minlength=n_groups).astype(np.int64)
    n = len(order)
    window = min(n, n // 4 + 4 * int(np.sqrt(n)) + 16)
    block = block_rows(n_groups, window)
    n_blocks = -(-window // block)
    tail_groups = np.full(n_blocks * block, n_groups, dtype=np.intp)
    tail_right = np.zeros(n_blocks * block, dtype=np.int64)
    tail_groups[:window] = gidx[order[::-1][:window]]
    tail_right[:window] = correct[order[::-1][:window]]
    blocks = np.zeros((n_groups + 1, 2 * n_blocks), dtype=np.int64)
    block_of = np.arange(n_blocks * block, dtype=np.intp) // block
    np.add.at(blocks, (tail_groups, block_of), 1)
    np.add.at(blocks, (tail_groups, n_blocks + block_of), tail_right)
    return _GroupSums(
        codes,
        units,
        group_right,
        gidx[order],
        correct[order],
        blocks[:n_groups],
        tail_groups.reshape(n_blocks, block),
        tail_right.reshape(n_blocks, block),
    )


def _dropped_right(
    counts: npt.NDArray[np.int64],
    sums: _GroupSums,
    drop: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Right answers among the ``drop[b]`` least confident drawn rows, searching every row.

    The fallback of :func:`_dropped_right_blocks` (resamples whose window weighs too little).
    """
    by_rank = sums.by_rank[::-1]  # least confident first
    right = sums.correct_by_rank[::-1].astype(np.int64)
    weight = counts[:, by_rank]
    # one cumulative sum for both: weight in the low 32 bits, right answers in the high ones
    # (a resample holds fewer than 2**22 rows, so neither half overflows)
    cum = np.cumsum(weight | ((weight * right) << 32), axis=1)
    cum_w = cum & 0xFFFFFFFF
    out = np.zeros(counts.shape[0], dtype=np.int64)
    rows_ = np.flatnonzero(drop > 0)
    if rows_.size:
        cut = np.argmax(cum_w[rows_] >= drop[rows_, None], axis=1)
        w_cut = weight[rows_, cut]
        c_cut = right[cut]
        before = cum_w[rows_, cut] - w_cut
        out[rows_] = (cum[rows_, cut] >> 32) - w_cut * c_cut + (drop[rows_] - before) * c_cut
    return out


def _dropped_right_blocks(
    counts_ext: npt.NDArray[np.int64],
    per_block: npt.NDArray[np.int64],
    sums: _GroupSums,
    drop: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Right answers among the ``drop[b]`` least confident drawn rows of each resample.

    ``per_block[b]`` holds resample ``b``'s weight per block then its right answers per block
    (``counts @ sums.blocks``); ``counts_ext`` has one extra, empty group. The cut's block is
    found from the blocks' cumulative weights and searched row by row. ``-1`` where the window
    weighs less than ``drop[b]`` (the caller then searches every row).
    """
    n_blocks = sums.tail_groups.shape[0]
    cw = np.cumsum(per_block[:, :n_blocks], axis=1)
    cr = np.cumsum(per_block[:, n_blocks:], axis=1)
    out = np.zeros(counts_ext.shape[0], dtype=np.int64)
    reach = cw[:, -1] >= drop
    out[~reach] = -1
    rows_ = np.flatnonzero((drop > 0) & reach)
    if rows_.size:
        d = drop[rows_]
        blk = np.argmax(cw[rows_] >= d[:, None], axis=1)
        w_blk = per_block[rows_, blk]
        w_before = cw[rows_, blk] - w_blk
        r_before = cr[rows_, blk] - per_block[rows_, n_blocks + blk]
        # the cut's block, row by row, one column per resample (so every cumulative step is one
        # vector addition): weight in the low 32 bits, right answers in the high ones
        flat = np.ascontiguousarray(counts_ext).reshape(-1)
        w = flat[sums.tail_groups[blk].T + rows_ * counts_ext.shape[1]]  # (block rows, r)
        right = sums.tail_right[blk].T
        cum = np.cumsum(w | ((w * right) << 32), axis=0)
        cum_w = (cum & 0xFFFFFFFF) + w_before
        cut = (cum_w < d).sum(axis=0)  # the first row reaching drop (cum_w never decreases)
        at = np.arange(rows_.size)
        w_cut, c_cut = w[cut, at], right[cut, at]
        before = cum_w[cut, at] - w_cut
        out[rows_] = r_before + (cum[cut, at] >> 32) - w_cut * c_cut + (d - before) * c_cut
    return out


def _group_system_block(
    counts_ext: npt.NDArray[np.int64],
    sums_at: tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]
    ],
    true: npt.NDArray[np.int64],
    n_b: npt.NDArray[np.int64],
    sums: _GroupSums,
    labels: Sequence[int],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One system's three G metrics for a block of group resamples.

    ``counts_ext[b, g]`` = draws of group ``g`` (plus one empty group); ``sums_at`` = the
    resamples' ``(codes, right answers, per-block sums)`` from the shared matrix product, and
    their Brier sums.
    """
    nb = counts_ext.shape[0]
    codes_b, total_right, per_block, brier_sum = sums_at
    pc = codes_b.reshape(nb, -1, 2)
    macro = _macro_f1(true, pc, labels)

    two_d = 2 * n_b * BRIER_UNIT
    brier = _exact_quotients(two_d - brier_sum, two_d)

    # selective accuracy: the rows in confidence order, each weighted by how many times its
    # group was drawn; keep m_b = ceil(4 n_b / 5) of them (a cut may fall inside a row's copies).
    # Right answers kept = all right answers − those among the n_b − m_b least confident, which
    # are found from the least confident end within a window (all rows when it is too short).
    m_b = (4 * n_b + 4) // 5
    drop = n_b - m_b
    dropped = _dropped_right_blocks(counts_ext, per_block, sums, drop)
    short = dropped < 0
    if short.any():
        dropped[short] = _dropped_right(counts_ext[short, :-1], sums, drop[short])
    sel = total_right - dropped
    sel_acc = sel.astype(np.float64) / m_b.astype(np.float64)
    return macro, brier, sel_acc


def _gain(
    model: tuple[npt.NDArray[np.float64], ...], jev: tuple[npt.NDArray[np.float64], ...]
) -> npt.NDArray[np.float64]:
    """G from both systems' (macro F1, brier_skill, selective accuracy), in the verifier's order.

    >>> one = np.ones(1)
    >>> _gain((one, one, one), (one * 0, one * 0, one * 0)).tolist() == [sum(WEIGHTS)]
    True
    """
    g = WEIGHTS[0] * (model[0] - jev[0])
    g = g + WEIGHTS[1] * (model[1] - jev[1])
    return g + WEIGHTS[2] * (model[2] - jev[2])


def _group_table(
    true_g: npt.NDArray[np.int64], size: npt.NDArray[np.int64], systems: Sequence[_GroupSums]
) -> tuple[npt.NDArray[np.float32], list[slice]]:
    """Every per-group sum the resamples need, side by side as one float32 matrix.

    Every entry, every product and every partial sum is a non-negative integer at most the
    resample's size, below ``MAX_RESAMPLE_ROWS`` = 2**22 < 2**24, so one float32 matrix product
    computes all of them exactly, in any summation order.
    Returns the matrix and the column slices: true counts, size, then per system codes, right
    answers, per-block sums.
    """
    parts: list[npt.NDArray[np.int64]] = [true_g, size[:, None]]
    for s in systems:
        parts += [s.codes, s.group_right[:, None], s.blocks]
    bounds = np.cumsum([0] + [p.shape[1] for p in parts]).tolist()
    return (
        np.concatenate(parts, axis=1).astype(np.float32),
        [slice(a, b) for a, b in itertools.pairwise(bounds)],
    )


@functools.cache
def _blas() -> ThreadpoolController:
    """The BLAS thread pools of this process (found once; about 1 ms)."""
    return ThreadpoolController()


def _group_gains(
    y: Sequence[int],
    model: ExampleValues,
    jev: ExampleValues,
    n_answers: int,
    seed: bytes,
    resamples: int,
    groups: Sequence[int],
) -> npt.NDArray[np.float64]:
    members = group_members(groups)
    n_groups = len(members)
    if n_groups * max(len(r) for r in members) >= MAX_RESAMPLE_ROWS:
        raise ValueError(
            f"expected groups × largest group below {MAX_RESAMPLE_ROWS} rows, got "
            f"{n_groups} × {max(len(r) for r in members)}"
        )
    gidx = np.asarray(groups, dtype=np.intp)
    return _table_gains(y, model, jev, n_answers, seed, resamples, gidx, n_groups)


def _row_table_fits(n: int, n_answers: int) -> bool:
    """Whether the row bootstrap takes the table path (:func:`_table_gains`, each row a group).

    Both paths give the same bits; the table's float32 matrix product costs about ``5K + n/128``
    multiply-adds per drawn row and its per-block columns grow with ``n``, so beyond these sizes
    the per-row path (bincount, int64 sums, radix sort) is faster or lighter.

    >>> _row_table_fits(2000, 20), _row_table_fits(2000, 300), _row_table_fits(70000, 3)
    (True, False, False)
    """
    return 1 <= n <= _ROW_TABLE_MAX_ROWS and n_answers <= _ROW_TABLE_MAX_ANSWERS


def _table_gains(
    y: Sequence[int],
    model: ExampleValues,
    jev: ExampleValues,
    n_answers: int,
    seed: bytes,
    resamples: int,
    gidx: npt.NDArray[np.intp],
    n_groups: int,
) -> npt.NDArray[np.float64]:
    """G of every resample of ``n_groups`` groups (``gidx[i]`` = row ``i``'s group, every index
    used, groups × largest group below ``MAX_RESAMPLE_ROWS``) from per-group sums and one float32
    matrix product per block; with ``gidx = 0 … n−1`` it is the row bootstrap."""
    words = resample_words(seed, n_groups, resamples)
    labels = f1_answers(y, n_answers)
    size = np.bincount(gidx, minlength=n_groups).astype(np.int64)
    true_g = np.zeros((n_groups, n_answers), dtype=np.int64)
    np.add.at(true_g, (gidx, np.asarray(y, dtype=np.intp)), 1)
    systems = (_group_sums(model, gidx, n_groups, n_answers), _group_sums(jev, gidx, n_groups, n_answers))
    table, cols = _group_table(true_g, size, systems)
    out = np.empty(resamples, dtype=np.float64)
    # the products are small (a chunk × G × about 200 columns): BLAS threads only spin on them.
    # The limit is process-wide while it lasts; two overlapping calls in threads may leave BLAS
    # on one thread afterwards (speed only: the products are exact on any number of threads)
    with _blas().limit(limits=1, user_api="blas"):
        _group_chunks(words, n_groups, table, cols, systems, labels, out)
    return out


def _group_chunks(
    words: npt.NDArray[np.uint32],
    n_groups: int,
    table: npt.NDArray[np.float32],
    cols: Sequence[slice],
    systems: Sequence[_GroupSums],
    labels: Sequence[int],
    out: npt.NDArray[np.float64],
) -> None:
    """G of every group resample into ``out``, ``_GROUP_CHUNK`` resamples at a time (fewer, down
    to ``_MIN_CHUNK``, when that would exceed ``_CHUNK_CELLS`` counts)."""
    resamples = words.shape[0]
    width = n_groups + 1  # one extra, never drawn group: the padding of the last block
    chunk = min(_GROUP_CHUNK, resamples, max(_MIN_CHUNK, _CHUNK_CELLS // width))
    picked = np.empty((chunk, n_groups), dtype=np.uint64)  # one buffer, reused (stays in cache)
    offsets = (np.arange(chunk, dtype=np.uint64) * np.uint64(width))[:, None]
    units = np.stack([s.units for s in systems])  # (systems, G)
    for start in range(0, resamples, chunk):
        block = words[start : start + chunk]
        nb = block.shape[0]
        # each draw's group, shifted to its resample's own range of bins, in place
        flat = pick_rows(block, n_groups, out=picked[:nb])
        flat += offsets[:nb]
        counts_ext = np.bincount(flat.reshape(-1).view(np.int64), minlength=nb * width)
        counts_ext = counts_ext.astype(np.int64, copy=False).reshape(nb, width)
        sums_b = (counts_ext[:, :-1].astype(np.float32) @ table).astype(np.int64)
        true, n_b = sums_b[:, cols[0]], sums_b[:, cols[1]][:, 0]
        # both systems' Brier sums in one pass over the counts (int64: exact in any order)
        brier_sums = np.einsum("bg,sg->sb", counts_ext[:, :-1], units)
        metrics = [
            _group_system_block(
                counts_ext,
                (
                    sums_b[:, cols[2 + 3 * i]],
                    sums_b[:, cols[3 + 3 * i]][:, 0],
                    sums_b[:, cols[4 + 3 * i]],
                    brier_sums[i],
                ),
                true,
                n_b,
                s,
                labels,
            )
            for i, s in enumerate(systems)
        ]
        out[start : start + nb] = _gain(metrics[0], metrics[1])
