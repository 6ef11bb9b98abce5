"""The audit file: determinism, content (no text), atomic writing, the documented fields."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import stat
from pathlib import Path

import pytest

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.refund.audit import (
    AUDIT_FORMAT,
    audit_bytes,
    build_audit,
    gains_sha256,
    write_audit,
)
from typestrict_pipeline.refund.rule import failed_training, judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import DecisionData

DOCS = Path(__file__).resolve().parent.parent / "docs" / "audit-format.md"


def _decisions() -> list[DecisionData]:
    return [
        synthetic_decision(seed=11, n=90, n_answers=3, name="topic", model_skill=1.5, ties=True),
        synthetic_decision(seed=12, n=70, n_answers=4, name="choice", multiple_choice=True),
    ]


def _audit(decisions: list[DecisionData]) -> bytes:
    j = judge(decisions, keep_if_loses=True)
    return audit_bytes(
        build_audit(j, training_id="tr_1", model_id="mdl_1", jev_id="jev-2026.11",
                    split={"n_test": 160, "per_decision": {"topic": 90, "choice": 70}})
    )


def test_same_inputs_any_row_order_same_bytes() -> None:
    decisions = _decisions()
    first = _audit(decisions)
    for seed in range(3):
        rng = random.Random(seed)
        shuffled = []
        for d in decisions:
            rows = list(d.rows)
            rng.shuffle(rows)
            shuffled.append(dataclasses.replace(d, rows=tuple(rows)))
        assert _audit(shuffled) == first


def test_audit_content() -> None:
    decisions = _decisions()
    raw = _audit(decisions)
    audit = json.loads(raw)
    assert audit["format"] == AUDIT_FORMAT and audit["audit_version"] == 3
    assert (audit["training_id"], audit["model_id"], audit["jev_id"]) == (
        "tr_1", "mdl_1", "jev-2026.11")
    assert audit["split"] == {"n_test": 160, "per_decision": {"topic": 90, "choice": 70}}
    assert [d["name"] for d in audit["decisions"]] == ["topic", "choice"]
    topic = audit["decisions"][0]
    assert topic["rows"]["sha256"] == sorted(topic["rows"]["sha256"])
    assert len(topic["rows"]["p_model"]) == 90 and "n_options" not in topic["rows"]
    choice = audit["decisions"][1]
    assert choice["kind"] == "multiple_choice" and len(choice["rows"]["n_options"]) == 70
    assert all(len(p) == 4 for p in choice["rows"]["p_jev"])
    boot = topic["report"]["bootstrap"]
    assert boot["resamples"] == 2000 and boot["q05_index"] == 99
    assert len(boot["gains"]) == 2000 and boot["gains_sha256"] == gains_sha256(boot["gains"])
    assert boot["q05"] == sorted(boot["gains"])[99]
    assert set(topic["report"]["margins"].values()) <= {"held", "broken", "not_applicable"}
    assert audit["overall"]["verdict"] in {"beats", "kept"}


def test_no_text_and_no_path_in_the_audit(tmp_path: Path) -> None:
    d = synthetic_decision(seed=3, n=20, n_answers=2, name="secret-decision")
    j = judge([d], keep_if_loses=False)
    path = write_audit(tmp_path / "nested" / "audit.json",
                       build_audit(j, training_id="t", model_id="m", jev_id="j"))
    raw = path.read_text()
    assert "secret-decision:3:" not in raw  # the synthetic texts are "name:seed:i"
    assert str(tmp_path) not in raw


def test_write_audit_is_atomic_and_readable(tmp_path: Path) -> None:
    j = failed_training("the trainer crashed")
    audit = build_audit(j, training_id="t", model_id="m", jev_id="j")
    target = tmp_path / "audit.json"
    target.write_text("old")
    assert write_audit(target, audit) == target
    assert target.read_bytes() == audit_bytes(audit)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.json"]  # no temp file left
    with pytest.raises(ValueError):
        write_audit(target, {"x": float("nan")})
    assert target.read_bytes() == audit_bytes(audit)  # the old file survives a failed write
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.json"]


def test_failed_audit() -> None:
    audit = build_audit(failed_training("Jev did not answer", keep_if_loses=True),
                        training_id="t", model_id="m", jev_id="j")
    assert audit["decisions"] == []
    assert audit["overall"] == {
        "n_decisions": 0, "needed": 0, "won": 0, "beats": False, "settling_decision": None,
        "keep_if_loses": True, "verdict": "failed", "refunds_credit": True,
        "failure_reason": "Jev did not answer",
    }


@pytest.mark.parametrize(
    "split", [{"path": "/data/x.csv"}, {"n": -1}, {"n": True}, {"n": 1.5}, {"d": {"x": "y"}}]
)
def test_split_summary_takes_counts_only(split: dict[str, object]) -> None:
    j = failed_training("x")
    with pytest.raises(InputError, match="counts"):
        build_audit(j, training_id="t", model_id="m", jev_id="j", split=split)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 201])
def test_ids_must_be_printable(bad: str) -> None:
    with pytest.raises(InputError, match="printable string"):
        build_audit(failed_training("x"), training_id=bad, model_id="m", jev_id="j")


def _keys(obj: object, out: set[str]) -> set[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
        _keys(obj[0], out)
    return out


def test_every_field_is_documented() -> None:
    audit = json.loads(_audit(_decisions()))
    audit["split"] = {"n_test": 1}  # the split summary's keys are the caller's
    documented = set(re.findall(r"`([a-z_0-9]+)`", DOCS.read_text()))
    missing = sorted(_keys(audit, set()) - documented)
    assert missing == []
