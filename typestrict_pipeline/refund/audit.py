"""The audit file: every test example's hash, right answer and both systems' probabilities, plus
every number of the judgement, so ``verify_audit.py`` can rebuild the verdict with the standard
library alone. The format is documented field by field in ``docs/audit-format.md``.

The audit holds no example text and no file path: only SHA-256 hashes of texts (which can be
guessed for short or common texts: see the format doc), answers, probabilities and ids.

>>> import hashlib
>>> from typestrict_pipeline.refund.rule import judge
>>> from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow
>>> rows = tuple(JudgedRow(hashlib.sha256(bytes([i])).hexdigest(), i % 2,
...                        (0.6, 0.4), (0.6, 0.4)) for i in range(10))
>>> j = judge([DecisionData("spam", DecisionKind.SINGLE, ("no", "yes"), rows)], keep_if_loses=False)
>>> audit = build_audit(j, training_id="t1", model_id="m1", jev_id="jev-2026-11")
>>> audit["overall"]["verdict"], audit["decisions"][0]["report"]["n"]
('refund', 10)
>>> audit["decisions"][0]["report"]["gain"]  # a tie is a refund
0.0
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.files import write_atomic
from typestrict_pipeline.refund.bootstrap import BootstrapResult
from typestrict_pipeline.refund.metrics import (
    BRIER_UNITS_LOG2,
    MAX_DROP,
    METRIC_NAMES,
    WEIGHTS,
    WORST_MIN_SUPPORT,
    Counts,
    Metrics,
)
from typestrict_pipeline.refund.rule import RESAMPLES, DecisionReport, TrainingJudgement
from typestrict_pipeline.refund.smallgroups import GROUP_CHECK_METHOD, GroupCheck
from typestrict_pipeline.refund.stream import GROUP_DOMAIN, SEED_DOMAIN, STREAM_DOMAIN, STREAM_NAME
from typestrict_pipeline.refund.trained_on import (
    ID_DOMAIN,
    NOT_STATED,
    TRAINED_ON_DOMAIN,
    Attestation,
)

AUDIT_FORMAT = "typestrict-refund-audit"
AUDIT_VERSION = 4
"""The newest version the producer writes. Version 2 added groups: each test example's group
SHA-256 (when the test has groups) and the bootstrap's unit (``example`` or ``group``). Version 3
adds ``trained_on`` (what the training attested it was trained on) and ``binding_sha256``, the
digest that binds the ids, the attestation, the split, the decisions, the option
``keep_if_loses`` and the verdict together. Version 4 adds the group check (the small-sample
correction for few or unequal groups, :mod:`.smallgroups`): ``params.group_check`` and each
report's ``group_check``. It is written when at least one decision has groups; an audit without
groups is written as version 3, byte for byte as before (nothing in it changed). Audits of
versions 1 to 3 still verify."""
UNGROUPED_AUDIT_VERSION = 3
"""The version of an audit none of whose decisions has groups (failed trainings included)."""

BINDING_DOMAIN = b"typestrict-refund-binding-v1\x00"

SplitSummary = Mapping[str, "int | Mapping[str, int]"]


def audit_version(judgement: TrainingJudgement) -> int:
    """4 when a decision has groups (its report carries the group check), else 3."""
    grouped = any(r.groups is not None for r in judgement.decisions)
    return AUDIT_VERSION if grouped else UNGROUPED_AUDIT_VERSION


def params(version: int = AUDIT_VERSION) -> dict[str, Any]:
    """The rule's fixed parameters as written in an audit of ``version`` (3 or 4; the verifier
    checks them)."""
    out: dict[str, Any] = {
        "resamples": RESAMPLES,
        "weights": {"macro_f1": WEIGHTS[0], "brier_skill": WEIGHTS[1], "selective_acc_80": WEIGHTS[2]},
        "max_drop": {name: _frac(MAX_DROP[name]) for name in METRIC_NAMES},
        "coverage": "4/5",
        "worst_min_support": WORST_MIN_SUPPORT,
        "brier_units_log2": BRIER_UNITS_LOG2,
        "percentile": {"q": "5/100", "method": "order_statistic_ceil"},
        "decisions_needed": "ceil(2n/3)",
        "stream": STREAM_NAME,
        "seed_domain": SEED_DOMAIN.decode("ascii").rstrip("\x00"),
        "stream_domain": STREAM_DOMAIN.decode("ascii").rstrip("\x00"),
        "group_domain": _domain(GROUP_DOMAIN),
        "zero_division": 0,
        "tie_rule": "right_if_right_answer_among_tied_top;else_pred_first_tied_in_answer_order",
        "confidence_order": "confidence_desc,row_asc",
        "id_domain": _domain(ID_DOMAIN),
        "trained_on_domain": _domain(TRAINED_ON_DOMAIN),
        "binding_domain": _domain(BINDING_DOMAIN),
    }
    if version >= 4:
        out["group_check"] = GROUP_CHECK_METHOD
    return out


def _domain(prefix: bytes) -> str:
    return prefix.decode("ascii").rstrip("\x00")


def _frac(f: Fraction) -> str:
    return f"{f.numerator}/{f.denominator}"


def gains_sha256(gains: tuple[float, ...] | list[float]) -> str:
    """SHA-256 of the gains as big-endian IEEE doubles, in resample order."""
    return hashlib.sha256(struct.pack(f">{len(gains)}d", *gains)).hexdigest()


DATA_DOMAIN = b"typestrict-refund-data-v1\x00"


def data_sha256(
    kind: str,
    answers: Sequence[str],
    rows: Sequence[tuple[str, int, int, Sequence[float], Sequence[float]]],
    groups: Sequence[str] | None = None,
) -> str:
    """SHA-256 binding a decision's kind, answers and rows (so no probability can change unseen).

    ``SHA-256(DATA_DOMAIN + kind + NUL + (answer + NUL)… + per row: 32-byte text digest,
    y and n_options as big-endian u32, then p_model and p_jev as big-endian doubles, then, with
    groups only, the 32-byte group digest)``.
    ``rows`` holds ``(text_sha256, y, n_options, p_model, p_jev)`` in canonical order; ``groups``
    the rows' group SHA-256 in the same order (``None``: no groups, the digest of version 1).
    """
    h = hashlib.sha256(DATA_DOMAIN)
    h.update(kind.encode("utf-8") + b"\x00")
    for a in answers:
        h.update(a.encode("utf-8") + b"\x00")
    k = len(answers)
    pack = struct.Struct(f">II{k}d{k}d").pack
    for i, (sha, y, n_options, pm, pj) in enumerate(rows):
        h.update(bytes.fromhex(sha))
        h.update(pack(y, n_options, *pm, *pj))
        if groups is not None:
            h.update(bytes.fromhex(groups[i]))
    return h.hexdigest()


def _metrics(m: Metrics, answers: tuple[str, ...]) -> dict[str, Any]:
    return {
        "macro_f1": m.macro_f1,
        "brier_skill": m.brier_skill,
        "selective_acc_80": m.selective_acc_80,
        "worst_class_f1": m.worst_class_f1,
        "worst_class": None if m.worst_class is None else answers[m.worst_class],
        "exact": {name: (_frac(m.exact[name]) if name in m.exact else None) for name in METRIC_NAMES},
    }


def _counts(c: Counts) -> dict[str, Any]:
    return {
        "tp": list(c.tp),
        "true": list(c.true),
        "pred": list(c.pred),
        "brier_units": c.brier_units,
        "selective_correct": c.selective_correct,
    }


def _bootstrap(b: BootstrapResult) -> dict[str, Any]:
    return {
        "resamples": b.resamples,
        "unit": b.unit.value,
        "n_units": b.n_units,
        "seed": b.seed_hex,
        "q05_index": b.q05_index,
        "q05": b.q05,
        "n_gain_le_0": b.n_gain_le_0,
        "gains_sha256": gains_sha256(b.gains),
        "gains": list(b.gains),
    }


def _group_check(c: GroupCheck | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "n_groups": c.n_groups,
        "effective_groups": c.effective_groups,
        "df": c.df,
        "t": c.t,
        "leave_one_out": list(c.leave_one_out),
        "se": c.se,
        "lower": c.lower,
        "passed": c.passed,
    }


def _decision(r: DecisionReport, version: int) -> dict[str, Any]:
    rows: dict[str, Any] = {
        "sha256": [row.text_sha256 for row in r.rows],
        "y": [row.y for row in r.rows],
    }
    if r.n_options is not None:
        rows["n_options"] = list(r.n_options)
    groups = None if r.groups is None else [row.group_sha256 or "" for row in r.rows]
    if groups is not None:
        rows["group_sha256"] = groups
    rows["p_model"] = [list(row.p_model) for row in r.rows]
    rows["p_jev"] = [list(row.p_jev) for row in r.rows]
    return {
        "name": r.name,
        "kind": r.kind.value,
        "answers": list(r.answers),
        "rows": rows,
        "report": {
            "data_sha256": data_sha256(
                r.kind.value,
                r.answers,
                [
                    (
                        row.text_sha256,
                        row.y,
                        len(r.answers) if row.n_options is None else row.n_options,
                        row.p_model,
                        row.p_jev,
                    )
                    for row in r.rows
                ],
                groups,
            ),
            "n": r.n,
            "f1_answers": list(r.f1_answers),
            "worst_eligible": list(r.worst_eligible),
            "coverage": r.coverage,
            "metrics": {
                "model": _metrics(r.model, r.answers),
                "jev": _metrics(r.jev, r.answers),
            },
            "counts": {"model": _counts(r.model_counts), "jev": _counts(r.jev_counts)},
            "deltas": {name: r.deltas[name] for name in METRIC_NAMES},
            "exact_deltas": {
                name: (_frac(r.exact_deltas[name]) if name in r.exact_deltas else None)
                for name in METRIC_NAMES
            },
            "margins": {name: r.margins[name].value for name in METRIC_NAMES},
            "gain": r.gain,
            "bootstrap": _bootstrap(r.bootstrap),
            **({"group_check": _group_check(r.group_check)} if version >= 4 else {}),
            "gain_is_real": r.gain_is_real,
            "nothing_collapses": r.nothing_collapses,
            "beats": r.beats,
        },
    }


def _check_id(name: str, value: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
        raise InputError(
            f"{name} as a printable string of 1 to 200 characters", repr(value), f"pass the {name}"
        )
    return value


def _check_split(split: SplitSummary) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in split.items():
        if not isinstance(key, str):
            raise InputError("split summary keys as strings", repr(key), "pass counts by name")
        if isinstance(value, Mapping):
            out[key] = _check_split(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[key] = value
        else:
            raise InputError(
                "split summary values as counts (integers >= 0)",
                f"{key}={value!r}",
                "pass counts only: no paths, no texts",
            )
    return out


def build_audit(
    judgement: TrainingJudgement,
    *,
    training_id: str,
    model_id: str,
    jev_id: str,
    split: SplitSummary | None = None,
    trained_on: Attestation = NOT_STATED,
) -> dict[str, Any]:
    """The audit of one training as a JSON-ready dict (deterministic: same inputs, same dict).

    Args:
        judgement: from :func:`~typestrict_pipeline.refund.rule.judge_training`,
            :func:`~typestrict_pipeline.refund.rule.judge` or
            :func:`~typestrict_pipeline.refund.rule.failed_training`.
        training_id: the training's id.
        model_id: the trained model's id.
        jev_id: the Jev model's id (version) it was compared with.
        split: optional split summary, counts only (``{"n_test": 2000, ...}``; one nested level
            allowed, e.g. per decision).
        trained_on: what the training attested it was trained on (checked against the split by
            :func:`~typestrict_pipeline.refund.trained_on.attest`); default: not stated.

    Returns:
        The audit dict (see ``docs/audit-format.md``).

    Raises:
        InputError: an id is empty or not printable, or the split summary holds a non-count.
    """
    version = audit_version(judgement)
    audit: dict[str, Any] = {
        "format": AUDIT_FORMAT,
        "audit_version": version,
        "training_id": _check_id("training_id", training_id),
        "model_id": _check_id("model_id", model_id),
        "jev_id": _check_id("jev_id", jev_id),
        "params": params(version),
        "trained_on": trained_on.as_audit(),
        "split": None if split is None else _check_split(split),
        "decisions": [_decision(r, version) for r in judgement.decisions],
        "overall": {
            "n_decisions": len(judgement.decisions),
            "needed": judgement.needed,
            "won": judgement.won,
            "beats": judgement.beats,
            "settling_decision": judgement.settling_decision,
            "keep_if_loses": judgement.keep_if_loses,
            "verdict": judgement.verdict.value,
            "refunds_credit": judgement.refunds_credit,
            "failure_reason": judgement.failure_reason,
        },
    }
    audit["binding_sha256"] = binding_sha256(audit)
    return audit


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


def binding_sha256(audit: Mapping[str, Any]) -> str:
    """The digest that binds what the rows do not rebuild (format 3, docs/audit-format.md).

    ``SHA-256(BINDING_DOMAIN + t(training_id) + t(model_id) + t(jev_id) + t(trained_on.status)
    + t(ids_sha256 or "") + u64(n_ids or 0) + t(split as sorted compact JSON) + u32(decisions)
    + per decision: t(name) + its 32-byte data_sha256, then t("true"/"false" keep_if_loses)
    + t(verdict) + t("true"/"false" refunds_credit) + t(failure_reason or ""))``, where
    ``t(s)`` is the UTF-8 bytes of ``s`` after their length as a big-endian u32.
    """
    trained, overall = audit["trained_on"], audit["overall"]
    h = hashlib.sha256(BINDING_DOMAIN)
    for value in (audit["training_id"], audit["model_id"], audit["jev_id"], trained["status"],
                  trained["ids_sha256"] or ""):
        h.update(_text(value))
    h.update(struct.pack(">Q", trained["n_ids"] or 0))
    h.update(_text(json.dumps(audit["split"], sort_keys=True, separators=(",", ":"))))
    h.update(struct.pack(">I", len(audit["decisions"])))
    for decision in audit["decisions"]:
        h.update(_text(decision["name"]))
        h.update(bytes.fromhex(decision["report"]["data_sha256"]))
    for value in ("true" if overall["keep_if_loses"] else "false", overall["verdict"],
                  "true" if overall["refunds_credit"] else "false",
                  overall["failure_reason"] or ""):
        h.update(_text(value))
    return h.hexdigest()


def audit_bytes(audit: Mapping[str, Any]) -> bytes:
    """The audit serialised as written: compact UTF-8 JSON, floats by ``repr``, one final newline.

    Raises:
        ValueError: the audit holds NaN or infinity (it never should).
    """
    text = json.dumps(audit, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text + "\n").encode("utf-8")


def write_audit(path: str | os.PathLike[str], audit: Mapping[str, Any]) -> Path:
    """Write the audit atomically (temporary file in the same folder, fsync, ``os.replace``).

    Args:
        path: where the audit goes.
        audit: from :func:`build_audit`.

    Returns:
        The path written.
    """
    return write_atomic(path, audit_bytes(audit))
