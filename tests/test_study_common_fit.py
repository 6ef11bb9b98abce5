"""``dependence.common_fit`` screens its grid (blocks bounded from above, then the points of the
blocks that may matter in single precision) and evaluates only the points near the best in
double precision: the answer is the full double-precision grid's, checked here
against that grid (written out as the method defines it) on seeded series of every kind the
calibration uses (white, shared regimes, AR with heavy tails, a random-walk factor, and the
battery's mixture, long memory and uneven persistence)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from typestrict_pipeline.study import dependence as dep
from typestrict_pipeline.study.battery import PROCESSES

KINDS = ["white", "regimes", "heavy AR", "factor", "mixture", "long memory d=0.2", "uneven: half AR(0.9)"]


def _full_grid(ratios: np.ndarray, t: int) -> tuple[float, float] | None:
    """Every grid point in double precision, the best, the interval's upper end (the method)."""
    q = ratios.shape[0]
    phis = dep._PHI_GRID[1.0 - 2.0 / t >= dep._PHI_GRID]
    if phis.size == 0 or q < 2 or not float(ratios[: dep.max_cosines(t)].mean()) > 1.0:
        return None
    w = np.pi * np.arange(1, q + 1) / t
    shape = (1.0 - phis[:, None] ** 2) / (1.0 - 2.0 * phis[:, None] * np.cos(w)[None, :] + phis[:, None] ** 2)
    p, white = dep._COMMON_PERSISTENT, dep._COMMON_WHITE
    lls = np.empty((phis.size, p.size, white.size))
    for j in range(phis.size):
        f = np.maximum(white[None, :, None] + p[:, None, None] * shape[j][None, None, :], 1e-12)
        lls[j] = -0.5 * (np.log(f).sum(axis=2) + (ratios[None, None, :] / f).sum(axis=2))
    best = float(lls.max())
    level = float(ratios.mean())
    if not 2.0 * (best + 0.5 * (q * math.log(level) + q)) > dep.COMMON_THRESHOLD:
        return None
    contribution = (np.array([dep.mean_variance_ratio(float(f), t) for f in phis])[:, None, None]
                    * p[None, :, None] * np.ones_like(white)[None, None, :])
    inside = lls >= best - dep.COMMON_UPPER / 2.0
    idx = np.unravel_index(int(np.argmax(np.where(inside, contribution, -np.inf))), lls.shape)
    return float(phis[idx[0]]), float(p[idx[1]])


def _series(kind: str, t: int, k: int, rng: np.random.Generator) -> np.ndarray:
    if kind not in ("white", "regimes", "heavy AR", "factor"):  # the battery's own processes
        return PROCESSES[kind].draw(rng, t, k)
    if kind == "white":
        return rng.normal(size=(t, k))
    if kind == "regimes":
        state = np.resize(np.repeat(rng.choice([-1.0, 1.0], size=t // 60 + 2), 60), t)
        return rng.normal(size=(t, k)) + 0.4 * np.outer(state, rng.normal(size=k))
    if kind == "heavy AR":
        e = rng.standard_t(3, size=(t, k))
        x = np.empty_like(e)
        x[0] = e[0]
        for s in range(1, t):
            x[s] = 0.9 * x[s - 1] + e[s]
        return x
    walk = np.cumsum(rng.normal(size=t)) * 0.05
    return rng.normal(size=(t, k)) + np.outer(walk, rng.normal(size=k))


@pytest.mark.parametrize("kind", KINDS)
def test_the_screened_grid_gives_the_full_grids_answer(kind: str) -> None:
    rng = np.random.default_rng(KINDS.index(kind) + 31)
    found = 0
    for t, k in [(60, 4), (120, 16), (240, 2), (480, 64)] * 4:
        a = dep.loading_weighted_average(_series(kind, t, k, rng))
        ratios = dep.cosine_ordinates(a[:, None], t // 2)[:, 0] / (float(a @ a) / t)
        expected = _full_grid(ratios, t)
        assert dep.common_fit(ratios, t) == expected, (kind, t, k)
        found += expected is not None
    if kind == "regimes":
        assert found >= 5  # the persistent case is exercised, not only the "none" answer
