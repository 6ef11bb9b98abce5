"""Pure core of scheduled re-runs: tick decisions (every message), windows of a chain, lineage statistics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline.reruns.decide import (
    Fire,
    PreviousOutcome,
    Skip,
    SkipKind,
    SubscriptionState,
    TickState,
    decide_tick,
    rerun_run_key,
)
from typestrict_pipeline.reruns.lineage import (
    SCALE_EDGE,
    SCALE_SCORE,
    WITHIN_NOISE_WARNING,
    LineageEntry,
    best_expected_under_noise,
    between_study_variance,
    confidence_sequence_path,
    render_panel,
    serial_design_effect,
    summarize,
)
from typestrict_pipeline.reruns.windows import (
    RerunWindows,
    StepWindow,
    check_chain,
    plan_rerun_windows,
)
from typestrict_pipeline.study.stats import expected_max_normal

BASE = TickState(
    lineage_root_id="12",
    next_seq=1,
    root_exists=True,
    root_budget_micro_usd=2_000_000,
    subscription=SubscriptionState.ACTIVE,
    usage_budget_micro_usd=50_000_000,
    usage_spent_micro_usd=1_000_000,
    previous=PreviousOutcome.FINISHED,
    previous_study_id="12",
    previous_holdout_end=100,
    workflow_in_flight=False,
    available_end=107,
    min_unseen_steps=20,
    embargo_steps=1,
)


@pytest.mark.parametrize(
    ("change", "kind", "message"),
    [
        ({}, SkipKind.NOT_ENOUGH_DATA, "Not enough unseen data yet: 7 of 20 steps"),
        ({"available_end": 100}, SkipKind.NOT_ENOUGH_DATA, "Not enough unseen data yet: 0 of 20 steps"),
        ({"available_end": 119}, SkipKind.NOT_ENOUGH_DATA, "Not enough unseen data yet: 19 of 20 steps"),
        ({"workflow_in_flight": True, "available_end": 200}, SkipKind.IN_FLIGHT, "A study or backtest was in flight"),
        ({"previous": PreviousOutcome.IN_PROGRESS, "available_end": 200}, SkipKind.IN_FLIGHT, "A study or backtest was in flight"),
        ({"previous": PreviousOutcome.NOT_FINISHED, "available_end": 200}, SkipKind.PREVIOUS_NOT_FINISHED,
         "The previous study in the lineage did not finish"),
        ({"root_budget_micro_usd": None, "available_end": 200}, SkipKind.NO_USD_BUDGET, "The root study has no USD budget"),
        ({"root_exists": False}, SkipKind.ROOT_DELETED, "The root study was deleted"),
        ({"subscription": SubscriptionState.EXPIRED, "available_end": 200}, SkipKind.SUBSCRIPTION_EXPIRED,
         "Workspace subscription expired"),
        ({"usage_spent_micro_usd": 50_000_000, "available_end": 200}, SkipKind.USAGE_EXHAUSTED, "Workspace usage budget exhausted"),
    ],
)
def test_every_skip_reason_has_the_page_message(change: dict[str, object], kind: SkipKind, message: str) -> None:
    outcome = decide_tick(dataclasses.replace(BASE, **change))  # type: ignore[arg-type]
    assert isinstance(outcome, Skip)
    assert (outcome.kind, outcome.message) == (kind, message)
    assert outcome.turns_schedule_off is (kind is SkipKind.ROOT_DELETED)


def test_usage_just_below_the_budget_still_fires() -> None:
    outcome = decide_tick(dataclasses.replace(BASE, usage_spent_micro_usd=49_999_999, available_end=120))
    assert isinstance(outcome, Fire)


def test_the_first_blocking_reason_wins() -> None:
    everything_wrong = dataclasses.replace(
        BASE, root_exists=False, root_budget_micro_usd=None, subscription=SubscriptionState.EXPIRED,
        usage_spent_micro_usd=10**9, previous=PreviousOutcome.NOT_FINISHED, workflow_in_flight=True,
    )
    order = [
        ("root_exists", True, SkipKind.NO_USD_BUDGET),
        ("root_budget_micro_usd", 1, SkipKind.SUBSCRIPTION_EXPIRED),
        ("subscription", SubscriptionState.ACTIVE, SkipKind.USAGE_EXHAUSTED),
        ("usage_spent_micro_usd", 0, SkipKind.PREVIOUS_NOT_FINISHED),
        ("previous", PreviousOutcome.FINISHED, SkipKind.IN_FLIGHT),
        ("workflow_in_flight", False, SkipKind.NOT_ENOUGH_DATA),
    ]
    state = everything_wrong
    first = decide_tick(state)
    assert isinstance(first, Skip) and first.kind is SkipKind.ROOT_DELETED
    for field, value, expected in order:
        state = dataclasses.replace(state, **{field: value})  # type: ignore[arg-type]
        got = decide_tick(state)
        assert isinstance(got, Skip) and got.kind is expected, field


def test_fire_has_a_stable_run_key_and_new_windows() -> None:
    state = dataclasses.replace(BASE, available_end=125)
    a, b = decide_tick(state), decide_tick(state)
    assert isinstance(a, Fire) and a == b
    assert a.run_key == rerun_run_key("12", 1) == "study-rerun:12:1"
    assert a.parent_study_id == "12" and a.seq == 1
    assert a.windows.holdout == StepWindow(105, 125)
    assert a.windows.learn_end == 104  # the folds may learn from the previous holdout (steps < 100)
    # More data before the run starts does not change which re-run the key names.
    later = decide_tick(dataclasses.replace(state, available_end=140))
    assert isinstance(later, Fire) and later.run_key == a.run_key


def test_chain_of_three_reruns_windows() -> None:
    """Root holdout [80, 100); min 20; embargo 1; data arrive in batches; three re-runs fire."""
    root = StepWindow(80, 100)
    arrivals = [107, 120, 130, 145, 150, 171]
    prev_end, seq, fired = root.end, 1, []
    skips = []
    for available in arrivals:
        out = decide_tick(dataclasses.replace(
            BASE, next_seq=seq, previous_holdout_end=prev_end, available_end=available))
        if isinstance(out, Skip):
            skips.append(out.message)
            continue
        assert isinstance(out, Fire)
        fired.append(out.windows)
        prev_end, seq = out.windows.holdout.end, seq + 1
    assert skips == [
        "Not enough unseen data yet: 7 of 20 steps",
        "Not enough unseen data yet: 10 of 20 steps",
        "Not enough unseen data yet: 5 of 20 steps",
    ]
    assert [w.holdout for w in fired] == [StepWindow(100, 120), StepWindow(125, 145), StepWindow(151, 171)]
    assert [w.learn_end for w in fired] == [99, 124, 150]
    check_chain(root, fired, 20)
    # Every holdout is new: disjoint from every earlier holdout, and after it.
    holdouts = [root] + [w.holdout for w in fired]
    for i, later in enumerate(holdouts[1:], start=1):
        for earlier in holdouts[:i]:
            assert not later.overlaps(earlier) and later.start >= earlier.end
    # Each re-run's folds may learn from the previous holdout, never from their own holdout.
    for prev_h, w in zip(holdouts, fired, strict=False):
        assert w.learn_end >= prev_h.end - 1 and w.learn_end <= w.holdout.start


def test_check_chain_names_the_broken_rerun() -> None:
    bad = [plan_rerun_windows(100, 120, 20), RerunWindows(learn_end=110, holdout=StepWindow(110, 130), unseen_steps=20)]
    with pytest.raises(ValueError, match="re-run 2: expected a holdout starting at or after step 120"):
        check_chain(StepWindow(80, 100), bad, 20)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    root_end=st.integers(0, 500),
    min_unseen=st.integers(1, 60),
    embargo=st.integers(0, 5),
    batches=st.lists(st.integers(0, 90), min_size=1, max_size=25),
)
def test_property_holdouts_are_new_full_length_and_disjoint(
    root_end: int, min_unseen: int, embargo: int, batches: list[int]
) -> None:
    prev_end, available, fired = root_end, root_end, []
    for batch in batches:
        available += batch
        w = plan_rerun_windows(prev_end, available, min_unseen, embargo)
        if w is None:
            assert available - prev_end < min_unseen
            continue
        assert w.holdout.length == min_unseen  # never a shorter window
        assert w.holdout.start >= prev_end and w.holdout.end == available
        assert w.learn_end <= w.holdout.start - embargo or w.learn_end == 0
        fired.append(w)
        prev_end = w.holdout.end
    check_chain(StepWindow(max(0, root_end - min_unseen), root_end), fired, min_unseen)


def test_plan_refuses_a_non_positive_minimum() -> None:
    with pytest.raises(ValueError, match="Min unseen steps for a re-run"):
        plan_rerun_windows(0, 10, 0)


# ---- lineage statistics -------------------------------------------------------------------


def _entry(seq: int, h: float | None, b: float | None, se: float | None, changed: bool | None = None) -> LineageEntry:
    return LineageEntry(seq, str(seq), "FINISHED", f"w{seq}", f"c{seq}", h, b, se, changed)


def test_noise_line_uses_each_studys_own_se() -> None:
    """E[max_j X_j], X_j ~ N(0, SE_j²) independent: SE·e(k) with equal SEs; with unequal SEs
    the Monte Carlo of that maximum (seed 2027), not median(SE)·e(k)."""
    ses = [0.01, 0.04, 0.02, 0.03, 0.05]
    assert expected_max_normal(5) == pytest.approx(1.163, abs=5e-4)  # the note's table (§1.1)
    assert best_expected_under_noise([0.02, 0.02]) == pytest.approx(0.02 / math.sqrt(math.pi))
    assert best_expected_under_noise([0.03] * 5) == pytest.approx(0.03 * expected_max_normal(5))
    draws = np.random.default_rng(2027).normal(0.0, 1.0, size=(400_000, 5)) * np.array(ses)
    mc = draws.max(axis=1)
    assert best_expected_under_noise(ses) == pytest.approx(mc.mean(), abs=4 * mc.std() / math.sqrt(mc.size))
    assert best_expected_under_noise(ses) > 0.03 * expected_max_normal(5)  # the median understated it


def test_the_two_statements_are_each_true_on_their_own() -> None:
    """Within noise follows the page's rule (best ≤ line); persistence follows the always-valid
    bound. Above the line with a bound at or below 0: no "within noise", "not shown yet"."""
    se = 0.02
    line = se * expected_max_normal(3)
    lucky = [_entry(0, 0.5, 0.5, se), _entry(1, 0.5 + line + 0.01, 0.5, se), _entry(2, 0.49, 0.5, se)]
    s = summarize(lucky)
    assert s.scale == SCALE_EDGE and s.k == 3 and s.best_seq == 1
    assert s.best is not None and s.noise_line is not None and s.best > s.noise_line
    assert s.within_noise is False and s.cs_lower is not None and s.cs_lower <= 0
    assert s.persistence == "not shown"
    assert s.mean_edge_se == pytest.approx(math.sqrt(3 * se * se) / 3)
    assert s.pooled_edge == pytest.approx((line + 0.01 - 0.01) / 3)
    panel = render_panel(lucky)
    assert "within noise" not in panel and "Persistence not shown yet" in panel
    persistent = [_entry(j, 0.56, 0.5, se) for j in range(4)]
    p = summarize(persistent)
    assert p.within_noise is False and p.cs_lower is not None and 0 < p.cs_lower < 0.06
    assert p.persistence == "shown" and "Persistence shown" in render_panel(persistent)


def test_one_study_does_not_judge_persistence_and_agreeing_studies_only_raise_the_bound() -> None:
    """Issue 27: a lead that held through one holdout may be a regime that ended with it, so a
    single study says persistence cannot be judged yet (why, in words); from the second study
    on the bound reads the pooled variance as Student-t with k − 1 degrees of freedom, so each
    further study that agrees raises the bound, and four studies 3 SE above 0 show it where
    three do not yet."""
    se = 0.02
    one = summarize([_entry(0, 0.62, 0.5, se)])  # 6 SE above the baseline
    assert one.persistence == "unknown" and one.cs_lower is None
    assert one.pooled_edge == pytest.approx(0.12) and one.pooled_se == pytest.approx(se)
    assert one.statements[-1] == ("Persistence cannot be judged yet: one study cannot show an "
                                  "edge that lasts across re-runs (a lead that held through one "
                                  "holdout may be a period that ended with it); the bound is "
                                  "read from the second study on.")
    assert "Persistence cannot be judged yet: one study" in render_panel([_entry(0, 0.62, 0.5, se)])
    _, _, low = confidence_sequence_path([0.06] * 8, [se] * 8)
    assert low[0] == -math.inf and bool(np.all(np.diff(low[1:]) > 0))
    assert summarize([_entry(j, 0.56, 0.5, se) for j in range(3)]).persistence == "not shown"


def test_neighbouring_studies_that_agree_count_as_fewer_studies() -> None:
    """Issue 27: a regime that lasts about one holdout makes consecutive re-runs agree with their
    neighbours while the lineage wanders. The same ten edges in look order (a run of positive
    studies, then a run of negative ones) get a wider bound than interleaved, where the random
    effects alone would pool them identically; from the fifth study on."""
    se = [0.01] * 10
    runs = [0.03, 0.028, 0.031, 0.027, 0.03, 0.026, -0.005, -0.004, -0.006, -0.003]
    mixed = [runs[i] for i in (0, 6, 1, 7, 2, 8, 3, 9, 4, 5)]
    est_runs, se_runs, low_runs = confidence_sequence_path(runs, se)
    est_mixed, se_mixed, low_mixed = confidence_sequence_path(mixed, se)
    assert est_runs[-1] == pytest.approx(est_mixed[-1])  # the same pooled edge
    assert se_runs[-1] > 1.5 * se_mixed[-1] and low_runs[-1] < low_mixed[-1]
    four = confidence_sequence_path(runs[:4], se[:4])
    assert serial_design_effect(np.array(runs[:4]), np.ones(4)) == 1.0  # too few to judge
    assert four[1][-1] == pytest.approx(1.0 / math.sqrt(sum(
        1.0 / (0.01**2 + between_study_variance(runs[:4], se[:4])) for _ in range(4))))


@pytest.mark.parametrize("k", [10, 20, 40])
def test_a_best_holdout_at_095_of_the_line_is_within_noise(k: int) -> None:
    """Issue 3/7: 10 re-runs whose best is 0.95x the line (0.0439 against 0.0462) showed no
    warning (same at 20 and 40): the page says a best at or below the line is luck."""
    se = 0.0462 / expected_max_normal(10)
    line = best_expected_under_noise([se] * k)
    entries = [_entry(j, 0.5 + (0.95 * line if j == 3 else -0.01), 0.5, se) for j in range(k)]
    s = summarize(entries)
    assert s.best == pytest.approx(0.95 * line) and s.noise_line == pytest.approx(line)
    assert s.within_noise is True
    expected = WITHIN_NOISE_WARNING.format(best=f"{0.95 * line:+.4f}", seq=3, k=k, line=f"{line:+.4f}")
    assert s.statements[0] == expected and expected in render_panel(entries)
    if k == 10:
        assert "(+0.0439, lineage #3)" in expected and "(+0.0462)" in expected


def test_a_bound_that_cannot_be_computed_says_why_and_is_no_warning() -> None:
    """Issue 3/7: the demo's lineage 3 (best +0.1000, line +0.0447) warned that the bound "is at
    or below 0" while printing it as `n/a ± n/a`."""
    entries = [_entry(0, 0.60, 0.50, 0.0), _entry(1, 0.55, 0.53, 0.04)]
    s = summarize(entries)
    assert s.best == pytest.approx(0.1) and s.noise_line is not None
    assert s.best is not None and s.best > s.noise_line
    assert s.within_noise is False and s.cs_lower is None and s.persistence == "unknown"
    panel = render_panel(entries)
    assert "n/a" not in panel and "within noise" not in panel
    assert "Persistence cannot be judged yet: the holdout difference of lineage #0 has a standard error of 0" in panel
    scoreless = summarize([_entry(0, 0.6, None, 0.02)])
    assert scoreless.persistence == "unknown" and "no baseline was scored" in scoreless.statements[-1]


def test_the_line_errs_towards_within_noise_when_holdouts_are_dependent() -> None:
    """Seeded (2031): positively dependent d_j (equicorrelated 0.5, as neighbouring slices of an
    autocorrelated series) have a smaller expected maximum than the line (Slepian)."""
    rng = np.random.default_rng(2031)
    k, se, rho, draws = 6, 0.02, 0.5, 200_000
    common = rng.normal(size=(draws, 1))
    x = se * (math.sqrt(rho) * common + math.sqrt(1 - rho) * rng.normal(size=(draws, k)))
    assert x.max(axis=1).mean() < best_expected_under_noise([se] * k) - 5 * se / math.sqrt(draws)


def test_without_baselines_the_line_is_on_the_score_scale() -> None:
    entries = [_entry(0, 0.60, None, 0.02), _entry(1, 0.64, None, 0.02, True)]
    s = summarize(entries)
    assert s.scale == SCALE_SCORE
    assert s.noise_line == pytest.approx(0.62 + 0.02 * expected_max_normal(2))
    assert s.best == pytest.approx(0.64) and s.within_noise is False  # 0.64 > 0.62 + 0.0113
    close = summarize([_entry(0, 0.60, None, 0.05), _entry(1, 0.64, None, 0.05, True)])
    assert close.within_noise is True  # 0.64 ≤ 0.62 + 0.05·0.564


def test_undefined_numbers_are_missing_not_zero() -> None:
    assert summarize([]).noise_line is None
    s = summarize([_entry(0, 0.6, 0.5, None)])
    assert s.noise_line is None and "standard error" in (s.missing_reason or "")
    assert "n/a (studies [0] have a holdout score without a standard error)" in render_panel(
        [_entry(0, 0.6, 0.5, None)])
    running = LineageEntry(1, None, "PENDING", "w1", None, None, None, None, None)
    assert summarize([_entry(0, 0.6, 0.5, 0.02), running]).k == 1


def test_noise_line_matches_monte_carlo_of_pure_noise() -> None:
    """Seeded (seed 2026): the mean of the best of k pure-noise edges is the line, to MC error."""
    rng = np.random.default_rng(2026)
    k, se, draws = 4, 0.03, 200_000
    best = (rng.normal(0.0, se, size=(draws, k))).max(axis=1).mean()
    assert best == pytest.approx(best_expected_under_noise([se] * k), abs=3 * se / math.sqrt(draws) * 2)
