"""The split's pass 1 at customers' sizes: the units that fit are taken together, so the test of
a block of units restarts once per quota that fills up, not once per unit taken (2,000 takes of
one-row units restarted a block of 4,096 units 2,000 times a decision: with 16 decisions over a
million rows, 2 s of 40). The units taken, and what is left of the quotas, are the one-by-one
greedy's exactly."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.refund.holdout import _pass1, _UnitCounts


def _one_by_one(counts: _UnitCounts, remaining: npt.NDArray[np.int64]) -> list[int]:
    """The rule as written in the method: each unit in rank order taken when it fits."""
    taken: list[int] = []
    for u in range(counts.n):
        if remaining.sum() == 0:
            break
        row = counts.block(u)[0]
        if np.all(row <= remaining):
            taken.append(u)
            remaining -= row
    return taken


class _Counting(_UnitCounts):
    blocks = 0

    def block(self, pos: int) -> npt.NDArray[np.int64]:
        _Counting.blocks += 1
        return super().block(pos)


def test_two_thousand_one_row_units_are_taken_in_a_few_block_tests() -> None:
    rng = np.random.default_rng(7)
    n, a = 1_000_000, 3
    table = np.zeros((n, a), dtype=np.int64)
    table[np.arange(n), rng.integers(0, a, size=n)] = 1
    counts = _Counting(n, a, table=table)
    remaining = np.array([700, 700, 600], dtype=np.int64)
    _Counting.blocks = 0
    taken = _pass1(counts, remaining)
    assert len(taken) == 2_000 and remaining.tolist() == [0, 0, 0]
    assert _Counting.blocks <= 3 * a  # one by one it was 2,000
    expected = np.array([700, 700, 600], dtype=np.int64)
    assert taken == _one_by_one(_UnitCounts(n, a, table=table), expected)


def test_the_taken_units_are_the_one_by_one_greedys() -> None:
    rng = np.random.default_rng(11)
    for trial in range(120):
        n, a = int(rng.integers(1, 6_000)), int(rng.integers(1, 6))
        table = rng.poisson(0.8, size=(n, a)).astype(np.int64)
        if trial % 2:
            table[table.sum(axis=1) == 0, 0] = 1
        quotas = rng.integers(0, max(2, n // 3), size=a).astype(np.int64)
        ours, theirs = quotas.copy(), quotas.copy()
        dense = _UnitCounts(n, a, table=table)
        assert _pass1(dense, ours) == _one_by_one(dense, theirs), trial
        assert ours.tolist() == theirs.tolist()


def test_sparse_counts_take_the_same_units() -> None:
    rng = np.random.default_rng(3)
    n, a = 5_000, 300
    answer = rng.integers(0, a, size=n).astype(np.int64)
    table = np.zeros((n, a), dtype=np.int64)
    table[np.arange(n), answer] = rng.integers(1, 4, size=n)
    sparse = _UnitCounts(n, a, indptr=np.arange(n + 1, dtype=np.int64), answer=answer,
                         count=table[np.arange(n), answer].copy())
    quotas = rng.integers(0, 8, size=a).astype(np.int64)
    ours, theirs = quotas.copy(), quotas.copy()
    assert _pass1(sparse, ours) == _one_by_one(_UnitCounts(n, a, table=table), theirs)
    assert ours.tolist() == theirs.tolist()
