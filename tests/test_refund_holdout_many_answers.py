"""A split over thousands of answers keeps its counts sparse: memory in proportion to the rows.

The split counted each unit's rows per answer in one dense ``units × answers`` table: 200,000
rows without groups over 10,000 answers asked for 14.9 GiB (``typestrict split``: "unexpected
error MemoryError ... This is a bug"; with 200 more columns the process was killed at 23 GB).
Beyond ``holdout._DENSE_CELLS`` cells (2 GiB) only the non-zero cells are kept now (7.2 s and
311 MB for that split; docs/manifest.md, "Splits at customers' sizes"). The tests lower the
bound so a small split takes the sparse path, and check it draws the very split the dense
table draws.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest

from typestrict_pipeline.refund import holdout
from typestrict_pipeline.refund.holdout import HoldoutRecord, draw_holdout


def _records(n: int, answers: int, *, groups: bool, seed: int = 0) -> list[HoldoutRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        answer = None if i % 17 == 0 else f"a{min(int(rng.expovariate(1 / (answers / 6))), answers - 1):05d}"
        group = (f"G{rng.randrange(n // 5)}" if rng.random() < 0.8 else None) if groups else None
        out.append(HoldoutRecord(f"r{i:06d}", f"text {i}", answer, group))
    return out


@pytest.mark.parametrize("groups", [False, True])
def test_the_sparse_counts_draw_the_split_the_dense_table_draws(groups: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(3_000, 400, groups=groups)
    dense = draw_holdout(records, decision="d")
    monkeypatch.setattr(holdout, "_DENSE_CELLS", 0, raising=False)
    monkeypatch.setattr(holdout, "_BLOCK_CELLS", 1_000, raising=False)  # blocks of 2 units
    sparse = draw_holdout(records, decision="d")
    assert sparse.rows == dense.rows
    assert sparse.summary == dense.summary


def test_a_split_over_thousands_of_answers_holds_no_dense_table(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(20_000, 2_000, groups=False)  # dense: 20,000 units x 2,000 answers = 320 MB
    monkeypatch.setattr(holdout, "_DENSE_CELLS", 1 << 20, raising=False)
    tracemalloc.start()
    try:
        h = draw_holdout(records, decision="d")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert h.summary.n_test == sum(a.test for a in h.summary.per_answer) and h.summary.n_test > 0
    assert peak < 64 * 1024 * 1024, f"{peak / 2**20:.0f} MiB at the split's peak"
