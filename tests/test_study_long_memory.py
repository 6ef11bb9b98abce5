"""Long memory in a search's pooled spectrum (``dependence.memory_fit``).

Fractional noise, ARFIMA(0, d, 0), has autocorrelations that are not summable: the variance of
a T-step mean falls like ``T^(2d−1)``, so the ratio a test of the mean needs, ``T·Var(x̄)/Var``,
grows with T (36.7 at d = 0.3 over 480 steps) where every short-memory fit levels off. The
pooled fit reads it; a short-memory search keeps the ratio it had. Rates in
docs/method/studies.md §3.4 ("Round 12").
"""

from __future__ import annotations

import numpy as np
import pytest

import typestrict_pipeline.study.dependence as dependence
from typestrict_pipeline.study.battery import PROCESSES
from typestrict_pipeline.study.dependence import fractional_mean_ratio, measure_dependence


def _search(process: str, n: int, t: int, seed: int) -> np.ndarray:
    m = PROCESSES[process].draw(np.random.default_rng(seed), t, n)
    return np.asarray(m - m.mean(axis=1, keepdims=True), dtype=np.float64)


def _without_memory(monkeypatch: pytest.MonkeyPatch, d: np.ndarray) -> float:
    with monkeypatch.context() as m:
        m.setattr(dependence, "memory_fit", lambda *a, **k: None)
        return measure_dependence(d).ratio


@pytest.mark.parametrize(("process", "n", "t"), [
    ("long memory d=0.3", 64, 480), ("long memory d=0.3", 16, 480), ("long memory d=0.2", 64, 1000),
])
def test_a_pooled_long_memory_search_gets_its_window_ratio(
        monkeypatch: pytest.MonkeyPatch, process: str, n: int, t: int) -> None:
    # The ratio the mean needs is R_d(T); the short-memory fit alone read a median 0.3–0.5 of it
    # on these searches, the pooled fit with long memory 0.73–1.0 (the grid's d one step low
    # on half of them).
    truth = fractional_mean_ratio(PROCESSES[process].memory, t)
    read, before = [], []
    for s in range(8):
        d = _search(process, n, t, 900 + s)
        read.append(measure_dependence(d).ratio / truth)
        before.append(_without_memory(monkeypatch, d) / truth)
    assert np.median(read) >= 0.7, read
    assert np.median(read) >= 1.5 * np.median(before), (read, before)


@pytest.mark.parametrize("process", ["white", "AR(0.9)", "mixture"])
def test_a_short_memory_search_keeps_its_ratio(monkeypatch: pytest.MonkeyPatch,
                                               process: str) -> None:
    # The power cells of §3.4 (AR(0.9) and the mixture with 64 candidates over 480 steps) are
    # unchanged because their pooled spectrum is not read as long memory.
    for s in range(6):
        d = _search(process, 64, 480, 950 + s)
        assert measure_dependence(d).ratio == _without_memory(monkeypatch, d), (process, s)


def test_the_window_ratio_of_fractional_noise() -> None:
    # Against the autocorrelations of a long simulated series: 1 + 2·Σ(1 − k/T)·ρ_k.
    from typestrict_pipeline.study.battery import fractional_block

    x = fractional_block(np.random.default_rng(3), 200_000, 1, 0.3)[:, 0]
    x = x - x.mean()
    t = 120
    rho = np.array([float(x[k:] @ x[:-k]) / float(x @ x) for k in range(1, t)])
    empirical = 1.0 + 2.0 * float(((1.0 - np.arange(1, t) / t) * rho).sum())
    assert abs(empirical / fractional_mean_ratio(0.3, t) - 1.0) < 0.15
    assert fractional_mean_ratio(0.3, 480) > 2.0 * fractional_mean_ratio(0.3, 120)
