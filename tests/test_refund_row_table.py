"""The row bootstrap's two paths give the same bits: the group table path with every row its own
group (float32 matrix product, block search for selective accuracy) and the per-row path
(bincounts, int64 sums, radix sort), both equal to plain Python, on random inputs and edge cases."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.refund import bootstrap
from typestrict_pipeline.refund.bootstrap import (
    _row_gains,
    _row_table_fits,
    _table_gains,
    bootstrap_gains,
    gains_python,
)
from typestrict_pipeline.refund.metrics import ExampleValues, example_values

# probabilities on a coarse grid, so ties for the top (and across rows) are common
_GRID = (0.0, 0.125, 0.25, 0.5, 0.75, 1.0)


def _bits(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


@st.composite
def decisions(draw: st.DrawFn, max_rows: int = 60) -> tuple[list[int], ExampleValues, ExampleValues, int]:
    k = draw(st.integers(min_value=2, max_value=5))
    n = draw(st.integers(min_value=1, max_value=max_rows))
    one_class = draw(st.booleans())
    first = draw(st.integers(min_value=0, max_value=k - 1))
    y = [first] * n if one_class else draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))

    def probs() -> list[list[float]]:
        rows = []
        for _ in range(n):
            raw = draw(st.lists(st.sampled_from(_GRID), min_size=k, max_size=k))
            total = sum(raw)
            rows.append([1.0 / k] * k if total == 0 else [p / total for p in raw])
        return rows

    return y, example_values(y, probs()), example_values(y, probs()), k


def _both_paths(
    y: list[int], a: ExampleValues, b: ExampleValues, k: int, seed: bytes, resamples: int
) -> tuple[list[float], list[float]]:
    n = len(y)
    table = _table_gains(y, a, b, k, seed, resamples, np.arange(n, dtype=np.intp), n).tolist()
    return table, _row_gains(y, a, b, k, seed, resamples).tolist()


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(decisions(), st.binary(min_size=32, max_size=32), st.integers(min_value=1, max_value=40))
def test_table_path_equals_per_row_path_and_plain_python(
    case: tuple[list[int], ExampleValues, ExampleValues, int], seed: bytes, resamples: int
) -> None:
    y, a, b, k = case
    table, rows = _both_paths(y, a, b, k, seed, resamples)
    assert _bits(table) == _bits(rows) == _bits(gains_python(y, a, b, k, seed, resamples))
    assert _bits(bootstrap_gains(y, a, b, k, seed, resamples).tolist()) == _bits(table)


@pytest.mark.parametrize(
    ("n", "k", "kind"),
    [(1, 2, "mixed"), (2, 2, "one class"), (3, 2, "mixed"), (5, 2, "all tied"),
     (40, 2, "one class"), (400, 3, "all tied"), (2000, 20, "mixed"), (700, 2, "mixed")],
)
def test_edge_cases_and_the_window_fallback_are_exact(n: int, k: int, kind: str) -> None:
    # "all tied": every confidence equal, so selective accuracy cuts by row position only
    rng = np.random.default_rng(n * 31 + k)
    y = [0] * n if kind == "one class" else rng.integers(0, k, size=n).tolist()
    if kind == "all tied":
        pa = pb = [[1.0 / k] * k for _ in range(n)]
    else:
        pa = rng.dirichlet(np.ones(k), size=n).tolist()
        pb = rng.dirichlet(np.ones(k) * 3, size=n).tolist()
    a, b = example_values(y, pa), example_values(y, pb)
    seed = bytes(range(32))
    table, rows = _both_paths(y, a, b, k, seed, 300)
    assert _bits(table) == _bits(rows)
    if n <= 400:
        assert _bits(rows) == _bits(gains_python(y, a, b, k, seed, 300))


def test_the_full_search_fallback_is_exact_for_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # with one row per group the least confident window (n/4 + 4·sqrt(n) + 16 rows) is never too
    # light in practice; force every resample onto the search of every row
    def nothing_reached(
        counts_ext: np.ndarray, per_block: np.ndarray, sums: object, drop: np.ndarray
    ) -> np.ndarray:
        return np.full(counts_ext.shape[0], -1, dtype=np.int64)

    rng = np.random.default_rng(5)
    n, k = 300, 4
    y = rng.integers(0, k, size=n).tolist()
    a = example_values(y, rng.dirichlet(np.ones(k), size=n).round(2).tolist())
    b = example_values(y, rng.dirichlet(np.ones(k), size=n).round(1).tolist())
    expected = _bits(gains_python(y, a, b, k, bytes(32), 200))
    monkeypatch.setattr(bootstrap, "_dropped_right_blocks", nothing_reached)
    assert _bits(bootstrap_gains(y, a, b, k, bytes(32), 200).tolist()) == expected


def test_dispatch_bounds() -> None:
    assert _row_table_fits(1, 2) and _row_table_fits(2000, 20)
    assert not _row_table_fits(0, 2)
    assert not _row_table_fits(bootstrap._ROW_TABLE_MAX_ROWS + 1, 2)
    assert not _row_table_fits(2000, bootstrap._ROW_TABLE_MAX_ANSWERS + 1)
