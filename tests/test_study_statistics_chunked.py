"""A study's statistics taken in chunks of candidates give the numbers of one pass, bit for bit.

Issue 24 item 4: the joint inference (SPA, StepM, PBO, the luck line) on 10,000 candidates runs
in bounded memory by taking the candidates (and CSCV's halves) in chunks; a customer's
leaderboard must not depend on the chunk size. Each case runs the same scores with chunks far
larger than the study (one pass) and with small chunks (2, 3 and 5 candidates; PBO's halves 1,
7 and 64 at a time), on scores with uneven dependence: white candidates, own AR(0.9)
candidates, a regime switch, a constant candidate and one with a real edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from typestrict_pipeline.study import dependence, inference
from typestrict_pipeline.study.inference import joint_inference, pbo_cscv
from typestrict_pipeline.study.stats import (
    ScoreTable,
    column_long_run_variances,
    mean_pairwise_correlation,
    search_stats,
)


def _scores(seed: int, t: int = 150, k: int = 23) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.normal(0.5, 0.1, size=(t, k))
    e = rng.normal(0.0, 0.1, size=(t, 4))
    ar = np.empty_like(e)
    ar[0] = e[0]
    for s in range(1, t):
        ar[s] = 0.9 * ar[s - 1] + e[s]
    m[:, 3:7] = 0.5 + ar
    m[:, 9] += np.where(np.arange(t) < t // 2, 0.08, -0.08)  # a regime switch
    m[:, 11] = 0.5  # no spread
    m[:, 17] += 0.06  # a real edge
    return m


def _search(m: np.ndarray) -> tuple[Any, ...]:
    steps = [f"{i:04d}" for i in range(m.shape[0])]
    oos = {str(j): dict(zip(steps, m[:, j].tolist(), strict=True)) for j in range(m.shape[1])}
    res = search_stats(oos, {str(j): m[:10, j].tolist() for j in range(m.shape[1])})
    return (res.rows, res.luck_line, res.sigma0, res.rho_bar, res.e_n, res.baseline)


def _joint(m: np.ndarray) -> tuple[Any, ...]:
    res = joint_inference(m[:, 1:], [str(j) for j in range(1, m.shape[1])], m[:, 0],
                          benchmark_label="candidate #0", seed=11, reps=300)
    return (res.spa_pvalue, res.spa_pvalue_lower, res.spa_pvalue_upper, res.stepm, res.line_95,
            res.block_length, res.dependence, res.stability)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("chunk", [2, 3, 5])
def test_every_number_is_the_same_whatever_the_chunk_of_candidates(
        seed: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _scores(seed)
    whole = (_search(m), _joint(m),
             column_long_run_variances(m, 1, fit_threshold=9.0))
    monkeypatch.setattr(dependence, "CANDIDATE_CHUNK", chunk)
    chunked = (_search(m), _joint(m),
               column_long_run_variances(m, 1, fit_threshold=9.0))
    assert chunked[0] == whole[0]
    assert chunked[1] == whole[1]
    np.testing.assert_array_equal(chunked[2][0], whole[2][0])
    np.testing.assert_array_equal(chunked[2][1], whole[2][1])


def test_chunks_change_the_numbers_nowhere_that_the_test_does_not_look(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: a chunked pass that judged each chunk as its own family
    (the 5%/k of ``long_run_variances``) would widen other candidates."""
    m = _scores(4, k=40)
    m[:, 20:24] = _scores(5, k=40)[:, 3:7] * 1.0  # more persistent candidates among white ones
    whole = _joint(m)
    monkeypatch.setattr(dependence, "CANDIDATE_CHUNK", 3)
    original = dependence.long_run_variances

    def per_chunk_family(differences: np.ndarray, dep: Any, *, family: int | None = None) -> Any:
        return original(differences, dep)  # ignores the family: the bug this guards against

    monkeypatch.setattr(inference, "long_run_variances", per_chunk_family)
    assert _joint(m) != whole


@pytest.mark.parametrize("at_once", [1, 7, 64])
def test_pbo_is_the_same_whatever_the_halves_ranked_at_once(
        at_once: int, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _scores(6, t=240, k=31)
    whole = pbo_cscv(m)
    monkeypatch.setattr(inference, "PBO_COMBINATIONS", at_once)
    assert pbo_cscv(m) == whole
    assert whole is not None and whole.combinations == 12870


def test_the_mean_correlation_is_the_correlation_matrix_mean_without_the_matrix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = _scores(7, k=30)
    m[:, 5] = m[:, 4] * 2.0 + 1.0  # a perfectly correlated pair
    spread = m.std(axis=0) > 0.0
    corr = np.corrcoef(m[:, spread], rowvar=False)
    k = corr.shape[0]
    expected = (corr.sum() - np.trace(corr)) / (k * (k - 1))
    got = mean_pairwise_correlation(m)
    assert got == pytest.approx(expected, abs=1e-13)
    monkeypatch.setattr(dependence, "CANDIDATE_CHUNK", 4)
    assert mean_pairwise_correlation(m) == got


def test_a_score_table_from_numbered_steps_is_the_one_from_a_mapping() -> None:
    m = np.random.default_rng(8).normal(size=(20, 4))
    steps = [f"{i:02d}" for i in range(20)]
    mapping = {str(j): dict(zip(steps, m[:, j].tolist(), strict=True)) for j in range(4)}
    del mapping["2"]["05"]  # a candidate with a missing step
    seen: dict[str, int] = {}  # steps numbered as first seen, in any order (the store's reading)
    indexed = {cid: ([seen.setdefault(k, len(seen)) for k in list(series)[::-1]],
                     list(series.values())[::-1]) for cid, series in mapping.items()}
    a, c = ScoreTable.from_mapping(mapping), ScoreTable.from_indexed(list(seen), indexed)
    assert (a.steps, a.ids) == (c.steps, c.ids) == (tuple(steps), ("0", "1", "2", "3"))
    np.testing.assert_array_equal(a.matrix, c.matrix)
    np.testing.assert_array_equal(a.matrix[:, [0, 1, 3]], m[:, [0, 1, 3]])
    assert np.isnan(a.matrix[5, 2])
    assert a.counts.tolist() == c.counts.tolist() == [20, 20, 19, 20]
    complete = a.complete()
    assert complete is not None and complete[0] == ["0", "1", "3"]


@pytest.mark.parametrize("seed", range(1, 6))
def test_the_embargo_of_thousands_of_short_memory_candidates_stays_short(seed: int) -> None:
    """2,000 candidates of own AR(0.5) (5% autocorrelation after 5 steps) over 480 steps: the
    measured span is 5. The leaders of the span's measurement used to be picked by the rounding
    of de-meaned series' zero means, which picks the series with the most low-frequency
    content: spans of 80–240 steps (T/2), an embargo that swallows half a holdout."""
    from typestrict_pipeline.study.calibration import SCENARIOS, simulate
    from typestrict_pipeline.study.inference import decorrelation_span

    m = simulate(np.random.default_rng(seed), SCENARIOS[1], 2000, 480)
    assert decorrelation_span(m) <= 8
