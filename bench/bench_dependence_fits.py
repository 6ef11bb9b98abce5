"""The studies' dependence fits: the common component's grid and the Whittle grids.

Run: ``.venv/bin/python -m bench.bench_dependence_fits``

Every "beats luck", gate and lineage answer measures dependence first
(``dependence.measure_dependence``): per-candidate and pooled Whittle fits over an AR(1) grid
and a fractional grid, and the common component's fit over a ``φ × persistent × white`` grid
(48 × 60 × 31 points). Two cases, each against the strongest alternative measured here:

1. ``common_fit`` with its screen (``_screened_cells``: upper bounds on 4×4×4 blocks, then on
   2×2×2 blocks of those that may matter, then single precision on their points) against the
   same fit screened by the whole grid in single precision (``_grid_log_likelihoods``, numpy,
   one φ row at a time: what shipped before), both followed by the same double-precision pass.
   Inputs: the loading-weighted averages of 16 searches per process (the battery's long
   memory, mixture and regimes processes; 64 candidates; T = 120 and 480; seed 5); each
   answer must be equal (it is checked here).
2. ``measure_dependence`` on 64 candidates × 480 steps (long memory, seed 6) with the grids'
   data-free terms kept per ``(T, q)`` (``_grid_terms``) against recomputing them on each call
   (the cache emptied before each call).

Times are medians of 5 after a warm-up call, wall clock and this process's CPU seconds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from bench import summary
from bench.timing import median_time


def _inputs(name: str, t: int) -> list[np.ndarray]:
    from typestrict_pipeline.study import dependence as dep
    from typestrict_pipeline.study.battery import PROCESSES

    rng = np.random.default_rng(5)
    out = []
    for _ in range(16):
        m = PROCESSES[name].draw(rng, t, 64)
        a = dep.loading_weighted_average(m - m.mean(axis=1, keepdims=True))
        out.append(dep.cosine_ordinates(a[:, None], t // 2)[:, 0] / (float(a @ a) / t))
    return out


def _full_screen_fit(ratios: np.ndarray, t: int) -> tuple[float, float] | None:
    """``common_fit`` with the whole single-precision grid as its screen (the previous code)."""
    from typestrict_pipeline.study import dependence as dep

    original = dep._screened_cells

    def whole(r: npt.NDArray[np.float64], shape: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.intp], ...]:
        s = dep._grid_log_likelihoods(r, shape)
        return tuple(np.nonzero(s >= s.max() - dep._SCREEN_MARGIN))

    dep._screened_cells = whole  # type: ignore[assignment]  # the previous screen, for the comparison
    try:
        return dep.common_fit(ratios, t)
    finally:
        dep._screened_cells = original


def _fits(fit: Callable[[np.ndarray, int], tuple[float, float] | None], cases: list[np.ndarray],
          t: int) -> list[tuple[float, float] | None]:
    return [fit(r, t) for r in cases]


def _common() -> None:
    from typestrict_pipeline.study import dependence as dep

    for name in ("long memory d=0.2", "mixture", "regimes"):
        for t in (120, 480):
            cases = _inputs(name, t)
            assert [dep.common_fit(r, t) for r in cases] == [_full_screen_fit(r, t) for r in cases]
            ours = median_time(functools.partial(_fits, dep.common_fit, cases, t), 5, warm_up=True)
            whole = median_time(functools.partial(_fits, _full_screen_fit, cases, t), 5, warm_up=True)
            per = [x / len(cases) * 1000.0 for x in (*ours, *whole)]
            summary.row("bench_dependence_fits", f"common_fit, {name}, 64 × {t}, per search",
                        f"{per[0]:.1f} ms wall, {per[1]:.1f} ms CPU",
                        alternative=f"whole grid in single precision: {per[2]:.1f} ms wall, {per[3]:.1f} ms CPU",
                        ratio=f"{per[3] / per[1]:.1f}× less CPU",
                        numbers={"ours_ms": per[1], "whole_ms": per[3]})


def _terms() -> None:
    from typestrict_pipeline.study import dependence as dep
    from typestrict_pipeline.study.battery import PROCESSES

    m = PROCESSES["long memory d=0.2"].draw(np.random.default_rng(6), 480, 64)
    d = m - m.mean(axis=1, keepdims=True)

    def uncached() -> object:
        dep._cached_terms.cache_clear()
        return dep.measure_dependence(d, common=True)

    assert uncached() == dep.measure_dependence(d, common=True)
    ours = median_time(lambda: dep.measure_dependence(d, common=True), 5, warm_up=True)
    every = median_time(uncached, 5, warm_up=True)
    summary.row("bench_dependence_fits", "measure_dependence, long memory, 64 × 480",
                f"{ours[0] * 1000:.1f} ms wall, {ours[1] * 1000:.1f} ms CPU",
                alternative=f"grid terms recomputed each call: {every[0] * 1000:.1f} ms wall, "
                            f"{every[1] * 1000:.1f} ms CPU",
                ratio=f"{every[1] / ours[1]:.1f}× less CPU",
                numbers={"ours_ms": ours[1] * 1000, "uncached_ms": every[1] * 1000})


def main() -> int:
    _common()
    _terms()
    print(f"load average: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
