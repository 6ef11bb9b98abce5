"""Studies: e(N), standard errors, the luck-adjusted ranking, and its honesty by simulation."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.errors import InputError, LimitError, NotEnoughDataError
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.limits import (
    StudyLimits,
    estimate_cost_micro,
    estimate_text,
    format_usd,
    usd_to_micro,
)
from typestrict_pipeline.study.space import RandomParam, SearchSpace
from typestrict_pipeline.study.stats import (
    expected_max_normal,
    mean_pairwise_correlation,
    newey_west_se,
    search_stats,
)

UTC = dt.UTC
DAY = dt.timedelta(days=1)


# ------------------------------------------------------------------ e(N)


@pytest.mark.parametrize(
    ("n", "exact"),
    [(1, 0.0), (2, 1 / math.sqrt(math.pi)), (3, 3 / (2 * math.sqrt(math.pi))),
     (5, 1.16296447), (10, 1.53875273), (100, 2.50759364)],
)
def test_expected_max_matches_closed_forms_and_tables(n: int, exact: float) -> None:
    assert expected_max_normal(n) == pytest.approx(exact, abs=1e-7)


def test_expected_max_matches_monte_carlo() -> None:
    rng = np.random.default_rng(20261130)
    for n in (4, 20, 300):
        draws = rng.standard_normal((40_000, n)).max(axis=1)
        se = draws.std() / math.sqrt(draws.size)
        assert abs(draws.mean() - expected_max_normal(n)) < 4 * se


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=1.0, max_value=1e6))
def test_expected_max_is_bounded_and_monotone(n: float) -> None:
    e = expected_max_normal(n)
    assert 0.0 <= e <= math.sqrt(2 * math.log(n)) + 1e-12
    assert expected_max_normal(n * 1.5) > e or n == 1.0


def test_expected_max_refuses_less_than_one() -> None:
    with pytest.raises(ValueError, match="expected a number of candidates n ≥ 1, got 0"):
        expected_max_normal(0)


# ------------------------------------------------------------------ SE and correlation


def test_newey_west_widens_for_positive_autocorrelation() -> None:
    rng = np.random.default_rng(1)
    e = rng.standard_normal(2000)
    ar = np.empty_like(e)
    ar[0] = e[0]
    for t in range(1, e.size):
        ar[t] = 0.6 * ar[t - 1] + e[t]
    naive = ar.std() / math.sqrt(ar.size)
    assert newey_west_se(ar) > 1.5 * naive
    assert newey_west_se(e) == pytest.approx(e.std() / math.sqrt(e.size), rel=0.15)


def test_newey_west_needs_two_scores() -> None:
    with pytest.raises(NotEnoughDataError, match="expected at least 2 per-step scores"):
        newey_west_se([1.0])


def test_mean_pairwise_correlation_undefined_is_none_not_zero() -> None:
    assert mean_pairwise_correlation(np.ones((5, 3))) is None
    m = np.random.default_rng(0).standard_normal((500, 1))
    assert mean_pairwise_correlation(np.hstack([m, m, m])) == pytest.approx(1.0)


# ------------------------------------------------------------------ honesty by simulation

N_SIMS = 300


def _simulate(n: int, t: int, rho: float, edge: float, rng: np.random.Generator) -> np.ndarray:
    common = rng.standard_normal((t, 1))
    own = rng.standard_normal((t, n))
    scores = 0.5 + 0.1 * (math.sqrt(rho) * common + math.sqrt(1 - rho) * own)
    scores[:, 0] += edge
    return scores


def _stats(scores: np.ndarray):
    keys = [str(i) for i in range(scores.shape[0])]
    oos = {f"c{j}": dict(zip(keys, scores[:, j].tolist(), strict=True)) for j in range(scores.shape[1])}
    return search_stats(oos, {})


def test_null_search_raises_found_nothing_about_half_the_time_and_holdout_is_unbiased() -> None:
    """Every candidate has the same true skill (0.5): the flag is raised ≥ ~half the time, and
    the winner's holdout score is unbiased while its out-of-sample score is biased upwards."""
    rng = np.random.default_rng(11)
    flags = 0
    winner_oos_bias: list[float] = []
    holdout_bias: list[float] = []
    for _ in range(N_SIMS):
        res = _stats(_simulate(20, 120, 0.3, 0.0, rng))
        flags += bool(res.found_nothing)
        best = res.rows[0]
        assert best.oos is not None
        winner_oos_bias.append(best.oos - 0.5)
        holdout = 0.5 + 0.1 * rng.standard_normal(60).mean()  # fresh data, same true skill
        holdout_bias.append(holdout - 0.5)
    rate = flags / N_SIMS
    assert rate >= 0.45, rate
    hb = np.asarray(holdout_bias)
    assert abs(hb.mean()) < 3 * hb.std() / math.sqrt(hb.size)
    assert np.mean(winner_oos_bias) > 0.005  # selection bias exists, which the holdout removes


def test_real_edge_ranks_first_far_more_often_than_chance() -> None:
    rng = np.random.default_rng(12)
    first = 0
    flags = 0
    for _ in range(N_SIMS):
        res = _stats(_simulate(20, 120, 0.3, 0.04, rng))
        first += res.rows[0].candidate_id == "c0"
        flags += bool(res.found_nothing)
    assert first / N_SIMS > 0.8  # chance would be 1/20 = 0.05
    assert flags / N_SIMS < 0.1


def test_adjusted_orders_by_luck_corrected_score_and_one_candidate_has_no_luck() -> None:
    rng = np.random.default_rng(3)
    res = _stats(_simulate(1, 50, 0.0, 0.0, rng))
    assert res.e_n == 0.0
    assert res.rows[0].adjusted == res.rows[0].oos
    assert res.found_nothing is None  # no search to judge, not "found nothing"


# ------------------------------------------------------------------ folds


def test_folds_respect_gap_embargo_and_holdout_order() -> None:
    lay = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2014, 1, 1, tzinfo=UTC),
                     step=DAY, n_folds=5, tune_steps=90, eval_steps=30, holdout_steps=60,
                     horizon_steps=2, gap_steps=3, embargo_steps=4)
    prev_eval_end = None
    for f in lay.folds:
        assert f.eval.start - f.tune.end == 3 * DAY
        assert f.eval.end - f.eval.start == 30 * DAY
        if prev_eval_end is not None:
            assert f.eval.start == prev_eval_end  # contiguous, disjoint
        prev_eval_end = f.eval.end
    assert lay.holdout.start - lay.folds[-1].eval.end == 4 * DAY
    assert lay.holdout.end == dt.datetime(2014, 1, 1, tzinfo=UTC)
    assert lay.seal_at == lay.holdout.start
    assert lay.search_steps_per_candidate == 5 * (90 + 30)


def test_folds_refuse_a_gap_shorter_than_the_horizon_and_too_little_data() -> None:
    kw = dict(start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 6, 1, tzinfo=UTC),
              step=DAY, n_folds=2, tune_steps=10, eval_steps=10, holdout_steps=10)
    with pytest.raises(InputError, match="expected gap_steps to be a whole number ≥ 3"):
        plan_folds(**kw, horizon_steps=3, gap_steps=1)  # type: ignore[arg-type]
    with pytest.raises(NotEnoughDataError, match=r"expected at least .* steps of data"):
        plan_folds(**{**kw, "tune_steps": 200})  # type: ignore[arg-type]
    with pytest.raises(NotEnoughDataError, match="Not enough unseen data yet: 7 of 10 steps"):
        plan_folds(**kw, earliest_holdout_start=dt.datetime(2012, 5, 25, tzinfo=UTC))  # type: ignore[arg-type]


# ------------------------------------------------------------------ spaces and limits


def test_space_combines_grid_random_draws_and_prompts_deterministically() -> None:
    space = SearchSpace(grid={"a": [1, 2]}, random={"b": RandomParam(0.0, 1.0)}, random_draws=3,
                        seed=42, prompts={"decide": ["P1", "P2"]})
    kept, dropped = space.expand()
    assert len(kept) == 2 * 3 * 2 and not dropped
    again, _ = space.expand()
    assert [c.key for c in kept] == [c.key for c in again]
    assert {c.params["b"] for c in kept} == {c.params["b"] for c in again}
    assert len({c.params["b"] for c in kept}) == 3


def test_limits_are_required_and_budget_arithmetic_is_exact() -> None:
    with pytest.raises(LimitError, match="expected Max total steps"):
        StudyLimits(4, None).validate()
    with pytest.raises(LimitError, match=r"expected a USD budget above"):
        StudyLimits(4, 10, 0).validate()
    assert usd_to_micro("0.000001") == 1
    assert estimate_cost_micro(7, 3, 3) == 7
    assert estimate_cost_micro(1, 3, 1) == 1  # rounds up, never down
    assert format_usd(None) == "—"
    # the page's sentence, verbatim ("the holdout" counts the winner's and the baseline's runs)
    assert estimate_text(10_000, 2, 2) == "≈ $0.01 for 2 candidates × 2 folds × 2 windows + the holdout"
