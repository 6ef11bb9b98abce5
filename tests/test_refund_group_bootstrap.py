"""The group bootstrap: whole groups drawn, numpy == plain Python == the verifier, audit v2."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import struct
from pathlib import Path
from typing import Any

import pytest

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.bootstrap import BootstrapUnit, bootstrap_gains, gains_python
from typestrict_pipeline.refund.metrics import example_values
from typestrict_pipeline.refund.rule import canonical_rows, group_indices, judge, judge_decision
from typestrict_pipeline.refund.stream import (
    bootstrap_seed,
    group_sha256,
    resample_indices_python,
)
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups
from typestrict_pipeline.refund.types import DecisionData, JudgedRow

V1 = Path(__file__).parent / "data" / "audit_v1"


def _bits(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def _sizes(rng: random.Random, n: int, largest: int) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(min(rng.randint(1, largest), n - sum(sizes)))
    return sizes


@pytest.mark.parametrize("case", range(30))
def test_group_gains_numpy_python_and_verifier_agree_bit_for_bit(case: int) -> None:
    rng = random.Random(case)
    n = rng.randrange(1, 90)
    data = synthetic_decision(
        seed=500 + case, n=n, n_answers=rng.randrange(2, 6), ties=case % 2 == 0,
        multiple_choice=case % 5 == 0, skew=rng.choice([0.0, 3.0]),
        model_skill=rng.random() * 2, jev_skill=rng.random() * 2,
    )
    largest = rng.choice([1, 2, 5, 36, n])
    data = with_groups(data, _sizes(rng, n, largest))
    rows, _ = canonical_rows(data)
    groups = group_indices(rows)
    assert groups is not None
    y = [r.y for r in rows]
    k = len(data.answers)
    a = example_values(y, [r.p_model for r in rows])
    b = example_values(y, [r.p_jev for r in rows])
    seed = bootstrap_seed(data.name, [r.text_sha256 for r in rows])
    fast = bootstrap_gains(y, a, b, k, seed, 300, groups).tolist()
    assert _bits(fast) == _bits(gains_python(y, a, b, k, seed, 300, groups))
    va = verify_audit.SystemValues(y, [r.p_model for r in rows])
    vb = verify_audit.SystemValues(y, [r.p_jev for r in rows])
    assert _bits(verify_audit.group_gains(y, va, vb, k, seed, 300, list(groups))) == _bits(fast)


def test_a_group_drawn_twice_counts_twice() -> None:
    # two groups: {row 0} and {rows 1, 2}; a resample drawing the big group twice holds 4 rows
    y = [1, 1, 1]  # one answer, so macro F1 averages over the same answers in both views
    model = example_values(y, [(0.1, 0.9), (0.2, 0.8), (0.6, 0.4)])
    jev = example_values(y, [(0.5, 0.5)] * 3)
    groups = [0, 1, 1]
    seed = next(
        s.to_bytes(32, "big") for s in range(1000)
        if resample_indices_python(s.to_bytes(32, "big"), 2, 1) == [[1, 1]]
    )
    g = gains_python(y, model, jev, 2, seed, 1, groups)
    # the rows drawn: 1, 2, 1, 2 (n_b = 4, m_b = ceil(3.2) = 4)
    rows = [1, 2, 1, 2]
    direct = gains_python([y[i] for i in rows],
                          example_values([y[i] for i in rows], [(0.2, 0.8), (0.6, 0.4)] * 2),
                          example_values([y[i] for i in rows], [(0.5, 0.5)] * 4),
                          2, bytes(32), 1, [0, 0, 0, 0])
    assert g == direct  # one group holding all four rows, drawn once: the same resample
    assert bootstrap_gains(y, model, jev, 2, seed, 1, groups).tolist() == g


def test_selective_acc_80_keeps_ceil_four_fifths_of_each_resample() -> None:
    # one group of 3 rows drawn once: n_b = 3, m_b = ceil(2.4) = 3; model right on 2 of 3
    y = [0, 0, 0]
    model = example_values(y, [(0.9, 0.1), (0.8, 0.2), (0.3, 0.7)])
    jev = example_values(y, [(0.9, 0.1), (0.8, 0.2), (0.7, 0.3)])
    g = gains_python(y, model, jev, 2, bytes(32), 1, [0, 0, 0])[0]
    # macro F1 over answer 0 only: model 2·2/(3+2) = 0.8, Jev 1.0; selective 2/3 vs 3/3
    brier_m = (2 * 3 * 2**40 - sum(model.brier_units)) / (2 * 3 * 2**40)
    brier_j = (2 * 3 * 2**40 - sum(jev.brier_units)) / (2 * 3 * 2**40)
    assert g == 0.5 * (0.8 - 1.0) + 0.3 * (brier_m - brier_j) + 0.2 * (2 / 3 - 1.0)


def test_row_order_and_group_order_do_not_matter() -> None:
    data = with_groups(synthetic_decision(seed=3, n=80, n_answers=3, model_skill=1.5), [8] * 10)
    shuffled = list(data.rows)
    random.Random(1).shuffle(shuffled)
    a = judge_decision(data)
    b = judge_decision(dataclasses.replace(data, rows=tuple(shuffled)))
    assert a.bootstrap.gains == b.bootstrap.gains and a.bootstrap.unit is BootstrapUnit.GROUP
    assert a.bootstrap.n_units == 10


def test_without_groups_every_number_is_what_version_1_wrote() -> None:
    decisions = [
        synthetic_decision(seed=24, n=45, n_answers=3, name="a", model_skill=2.0, jev_skill=0.3),
        synthetic_decision(seed=25, n=30, n_answers=2, name="b", model_skill=0.1, jev_skill=1.5),
        synthetic_decision(seed=26, n=40, n_answers=5, name="c", skew=3.0, model_skill=2.0,
                           jev_skill=0.3),
    ]
    now = build_audit(judge(decisions, keep_if_loses=False), training_id="tr_v1",
                      model_id="mdl_v1", jev_id="jev-1",
                      split={"n_test": 100, "per_decision": {"a": 45}})
    old = json.loads((V1 / "multi.json").read_bytes())
    for d_now, d_old in zip(now["decisions"], old["decisions"], strict=True):
        boot = d_now["report"]["bootstrap"]
        assert (boot.pop("unit"), boot.pop("n_units")) == ("example", len(d_now["rows"]["y"]))
        assert d_now == d_old
    assert now["overall"] == old["overall"]


@pytest.mark.parametrize("name", ["single", "multi", "choice", "failed"])
def test_version_1_audits_still_verify(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_audit.main([str(V1 / f"{name}.json")]) == 0
    assert "OK" in capsys.readouterr().out
    audit = json.loads((V1 / f"{name}.json").read_bytes())
    if audit["decisions"]:
        audit["decisions"][0]["report"]["gain"] += 1e-12
        assert verify_audit.verify(audit) != []


@pytest.fixture(scope="module")
def grouped_audit() -> dict[str, Any]:
    rng = random.Random(9)
    data = with_groups(
        synthetic_decision(seed=9, n=120, n_answers=3, model_skill=1.5, jev_skill=0.5),
        _sizes(rng, 120, 36), prefix="movie-",
    )
    plain = synthetic_decision(seed=10, n=40, n_answers=2, name="other")
    return build_audit(judge([data, plain], keep_if_loses=False), training_id="t",
                       model_id="m", jev_id="j")


def test_audit_v2_carries_group_hashes_never_keys_and_verifies(
    grouped_audit: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = audit_bytes(grouped_audit)
    assert b"movie-" not in raw
    dec, other = grouped_audit["decisions"]
    assert dec["report"]["bootstrap"]["unit"] == "group"
    assert dec["rows"]["group_sha256"][0] in {group_sha256(f"movie-{j}") for j in range(120)}
    assert "group_sha256" not in other["rows"]
    assert other["report"]["bootstrap"]["unit"] == "example"
    path = tmp_path / "a.json"
    path.write_bytes(raw)
    assert verify_audit.main([str(path)]) == 0, capsys.readouterr()


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["rows"]["group_sha256"].__setitem__(0, "0" * 64),  # move a row to a new group
        lambda d: d["rows"]["group_sha256"].__setitem__(
            0, d["rows"]["group_sha256"][-1]),  # merge a row into another group
        lambda d: d["report"]["bootstrap"].__setitem__("n_units", 3),
    ],
)
def test_any_change_of_groups_is_caught(grouped_audit: dict[str, Any], change: Any) -> None:
    audit = copy.deepcopy(grouped_audit)
    change(audit["decisions"][0])
    assert verify_audit.verify(audit) != []


def test_unit_and_group_list_must_agree(grouped_audit: dict[str, Any]) -> None:
    audit = copy.deepcopy(grouped_audit)
    audit["decisions"][0]["report"]["bootstrap"]["unit"] = "example"
    with pytest.raises(verify_audit.Malformed, match="rows: expected fields"):
        verify_audit.verify(audit)
    audit = copy.deepcopy(grouped_audit)
    audit["decisions"][0]["report"]["bootstrap"]["unit"] = "cluster"
    with pytest.raises(verify_audit.Malformed, match="unit"):
        verify_audit.verify(audit)


def test_rows_must_all_have_a_group_or_none() -> None:
    data = with_groups(synthetic_decision(seed=1, n=6, n_answers=2), [3, 3])
    rows = list(data.rows)
    rows[2] = dataclasses.replace(rows[2], group_sha256=None)
    with pytest.raises(Exception, match="group_sha256"):
        judge_decision(DecisionData(data.name, data.kind, data.answers, tuple(rows)))
    rows[2] = JudgedRow(rows[2].text_sha256, rows[2].y, rows[2].p_model, rows[2].p_jev, None, "X")
    with pytest.raises(Exception, match="group_sha256"):
        judge_decision(DecisionData(data.name, data.kind, data.answers, tuple(rows)))


@pytest.mark.parametrize("sizes", [[300] * 2, [1] * 400 + [200], [10] * 60,
                                   [10] * 200, [1] * 1500 + [5] * 100])
def test_selective_window_and_its_fallback_are_exact(sizes: list[int]) -> None:
    # 600 rows: the search looks at the ~380 least confident rows first; with a few big groups
    # drawn unevenly they weigh too little and every row is searched instead. 2,000 rows: the
    # window is cut into larger blocks (bootstrap.block_rows: 37 rows for 200 groups, 105 for
    # 1,600; 32 in the smaller cases)
    data = with_groups(synthetic_decision(seed=4, n=sum(sizes), n_answers=3, model_skill=1.2),
                       sizes)
    rows, _ = canonical_rows(data)
    groups = group_indices(rows)
    y = [r.y for r in rows]
    a = example_values(y, [r.p_model for r in rows])
    b = example_values(y, [r.p_jev for r in rows])
    fast = bootstrap_gains(y, a, b, 3, bytes(32), 40, groups).tolist()
    assert _bits(fast) == _bits(gains_python(y, a, b, 3, bytes(32), 40, groups))

