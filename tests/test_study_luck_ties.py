""""Beats luck" is never said of candidates with no edge over the benchmark.

A candidate that scores exactly as the benchmark on every step (a grid value that changes no
decision: common with yes/no decisions and 0/1 scores) re-samples to exactly 0, so the
bootstrap's null maximum ties with the observed one. The p-value counted only the draws above
it, and said p = 0.000, "Beats luck at 5%: yes", of a study whose candidates all scored alike
(seen on a seattle_rain study over a dry summer) or whose best candidate was the version's
defaults themselves.
"""

from __future__ import annotations

import numpy as np

from typestrict_pipeline.study.inference import joint_inference


def test_candidates_that_all_score_alike_do_not_beat_luck() -> None:
    scores = np.ones((20, 2))  # every candidate right on every step: nothing tells them apart
    res = joint_inference(scores, ["1", "2"], scores.mean(axis=1), benchmark_label="mean",
                          seed=0, pvalue_type="upper")
    assert (res.spa_pvalue, res.spa_pvalue_lower, res.spa_pvalue_upper) == (1.0, 1.0, 1.0)
    assert not res.beats_luck
    assert res.stepm == ()


def test_a_candidate_that_is_the_defaults_again_and_worse_ones_do_not_beat_the_defaults() -> None:
    rng = np.random.default_rng(0)
    defaults = (rng.random(60) < 0.7).astype(float)
    worse = [(rng.random(60) < p).astype(float) for p in (0.4, 0.3)]
    scores = np.column_stack([defaults, *worse])  # candidate 1 decides as the defaults do
    res = joint_inference(scores, ["1", "2", "3"], defaults, benchmark_label="defaults",
                          seed=0, pvalue_type="consistent")
    assert res.spa_pvalue == 1.0, res  # was 0.009: "yes" for a best edge of exactly 0
    assert not res.beats_luck
    assert res.stepm == ()


def test_a_real_edge_still_beats_luck() -> None:
    rng = np.random.default_rng(1)
    m = rng.normal(size=(200, 5))
    m[:, 2] += 0.5
    res = joint_inference(m, list("abcde"), np.zeros(200), benchmark_label="zero", seed=0)
    assert res.beats_luck and res.stepm == ("c",)
