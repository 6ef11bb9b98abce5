"""Property tests of the holdout (hypothesis): fairness, shares, cap, order invariance, seed."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typestrict_pipeline.refund.holdout import (
    TEST_FRACTION,
    HoldoutRecord,
    HoldoutSource,
    draw_holdout,
    holdout_seed,
)
from typestrict_pipeline.refund.types import Role

ANSWERS = ["a", "b", "c", "d"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def datasets(draw: st.DrawFn, *, min_labeled: int = 3, max_rows: int = 250) -> list[HoldoutRecord]:
    n = draw(st.integers(min_value=min_labeled, max_value=max_rows))
    k = draw(st.integers(min_value=2, max_value=4))
    grouped = draw(st.booleans())
    n_groups = draw(st.integers(min_value=1, max_value=max(1, n // 2))) if grouped else 0
    unlabeled_share = draw(st.sampled_from([0.0, 0.0, 0.2]))
    skew = draw(st.lists(st.integers(1, 6), min_size=k, max_size=k))
    weighted = [ANSWERS[i] for i in range(k) for _ in range(skew[i])]
    records = []
    for i in range(n):
        answer: str | None = draw(st.sampled_from(weighted))
        if unlabeled_share and draw(st.floats(0, 1)) < unlabeled_share:
            answer = None
        group = f"g{draw(st.integers(0, n_groups - 1))}" if grouped else None
        if grouped and draw(st.integers(0, 9)) == 0:
            group = None  # an empty group cell: its own group
        records.append(HoldoutRecord(id=f"r{i}", text=f"text {i} {answer}", answer=answer, group=group))
    labeled = sum(1 for r in records if r.answer is not None)
    if labeled < min_labeled:
        records = [HoldoutRecord(r.id, r.text, r.answer or "a", r.group) for r in records]
    return records


def _groups(records: list[HoldoutRecord], roles: dict[str, Role], role: Role) -> set[str]:
    return {r.group for r in records if r.group is not None and roles[r.id] is role}


@SETTINGS
@given(datasets())
def test_no_group_is_on_both_sides(records: list[HoldoutRecord]) -> None:
    h = draw_holdout(records, decision="d")
    roles = {r.id: r.role for r in h.rows}
    assert not _groups(records, roles, Role.TEST) & _groups(records, roles, Role.TRAIN)
    # ... nor excluded rows of a test group in training
    test_groups = _groups(records, roles, Role.TEST)
    assert all(roles[r.id] is not Role.TRAIN for r in records if r.group in test_groups)


@SETTINGS
@given(datasets())
def test_each_answer_keeps_its_share_within_one_example(records: list[HoldoutRecord]) -> None:
    h = draw_holdout(records, decision="d")
    labeled = Counter(r.answer for r in records if r.answer is not None)
    test = Counter(r.answer for r in h.rows if r.role is Role.TEST)
    n = sum(labeled.values())
    assert not h.summary.capped
    assert h.summary.n_test == (n * TEST_FRACTION + Fraction(1, 2)).__floor__()
    for answer, n_a in labeled.items():
        assert abs(test[answer] - n_a * TEST_FRACTION) < 1, (answer, n_a, test[answer])
    assert all(r.answer is not None for r in h.rows if r.role is Role.TEST)


@SETTINGS
@given(datasets(min_labeled=30), st.integers(min_value=1, max_value=5))
def test_cap_keeps_the_shares(records: list[HoldoutRecord], cap: int) -> None:
    h = draw_holdout(records, decision="d", cap=cap)
    labeled = Counter(r.answer for r in records if r.answer is not None)
    n = sum(labeled.values())
    assert h.summary.capped  # 20% of >= 30 is >= 6 > 5
    assert h.summary.n_test == cap
    test = Counter(r.answer for r in h.rows if r.role is Role.TEST)
    for answer, n_a in labeled.items():
        assert abs(test[answer] - Fraction(cap * n_a, n)) < 1


def test_the_real_2000_cap_keeps_shares() -> None:
    records = [HoldoutRecord(f"r{i}", f"t{i}", ANSWERS[(i * 7) % 13 % 3], None) for i in range(12_000)]
    h = draw_holdout(records, decision="d")
    labeled = Counter(r.answer for r in records)
    test = Counter(r.answer for r in h.rows if r.role is Role.TEST)
    assert h.summary.capped and h.summary.n_test == 2000
    for answer, n_a in labeled.items():
        assert abs(test[answer] - Fraction(2000 * n_a, 12_000)) < 1


@SETTINGS
@given(datasets(), st.randoms(use_true_random=False))
def test_same_test_set_under_any_row_permutation(records: list[HoldoutRecord], rnd: random.Random) -> None:
    shuffled = list(records)
    rnd.shuffle(shuffled)
    a = draw_holdout(records, decision="d")
    b = draw_holdout(shuffled, decision="d")
    assert a.test_ids == b.test_ids
    assert a.ids(Role.EXCLUDED) == b.ids(Role.EXCLUDED)
    assert a.summary == b.summary


@SETTINGS
@given(datasets(), st.data())
def test_seed_changes_with_content_and_decision(records: list[HoldoutRecord], data: st.DataObject) -> None:
    seed = holdout_seed(records, decision="d", source=HoldoutSource.LABELED)
    i = data.draw(st.integers(0, len(records) - 1))
    r = records[i]
    field = data.draw(st.sampled_from(["id", "text", "answer", "group"]))
    changed = {
        "id": HoldoutRecord(r.id + "x", r.text, r.answer, r.group),
        "text": HoldoutRecord(r.id, r.text + " ", r.answer, r.group),
        "answer": HoldoutRecord(r.id, r.text, "zz" if r.answer != "zz" else "a", r.group),
        "group": HoldoutRecord(r.id, r.text, r.answer, (r.group or "") + "x"),
    }[field]
    other = [*records[:i], changed, *records[i + 1 :]]
    assert holdout_seed(other, decision="d", source=HoldoutSource.LABELED) != seed
    assert holdout_seed(records, decision="e", source=HoldoutSource.LABELED) != seed
    assert holdout_seed(records, decision="d", source=HoldoutSource.REVIEWED) != seed


@SETTINGS
@given(datasets())
def test_deterministic_and_complete(records: list[HoldoutRecord]) -> None:
    a = draw_holdout(records, decision="d")
    b = draw_holdout(list(records), decision="d")
    assert a == b
    assert [r.id for r in a.rows] == [r.id for r in records]  # every row, input order
    s = a.summary
    assert s.n_test + s.n_train + s.n_excluded == len(records)
    assert all(r.role is Role.EXCLUDED for r in a.rows if r.answer is None)
