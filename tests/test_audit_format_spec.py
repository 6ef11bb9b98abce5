"""docs/audit-format.md is the audit format's specification, and the tests read it as such.

* Its field tables are the verifier's field list (paths and types), and every field of that list
  is edited in real audits: a value changed is exit 1 (a few bounded fields: 1 or 2), a field
  removed or of another type is exit 2, and any edit checked with ``--expect-sha256`` is exit 3.
* Its exit-status table is the verifier's, one status per class of damage.
* Every formula is a Python code block that is run here on real audits (every old version's
  fixtures, audits of today's producer, one built through the split with groups) and must rebuild
  their digests.
* Its example is rebuilt from its six rows.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.rule import failed_training, judge
from typestrict_pipeline.refund.stream import resample_indices_python
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups
from typestrict_pipeline.refund.trained_on import (
    Attestation,
    AttestationStatus,
    id_sha256,
    ids_set_sha256,
)
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "audit-format.md").read_text(encoding="utf-8")
DATA = Path(__file__).parent / "data"
OLD = sorted((DATA / "audit_v1").glob("*.json")) + sorted((DATA / "audit_v2").glob("*.json"))
CURRENT = sorted((DATA / "audit_v3").glob("*.json")) + sorted((DATA / "audit_v4").glob("*.json"))
TRAINED_IDS = [f"row-{i}" for i in range(40)]


# --------------------------------------------------------------------------- reading the page


def _tables() -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """Every Markdown table with the heading above it: (heading, header cells, rows)."""
    heading = ""
    lines = DOC.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            yield heading, header, rows
            continue
        i += 1


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _unquote(cell: str) -> str:
    return cell[1:-1] if cell.startswith("`") and cell.endswith("`") else cell


def documented_fields() -> dict[str, str]:
    """Every field the page's tables document: path -> type (params: the type of its value)."""
    out: dict[str, str] = {}
    for heading, header, rows in _tables():
        if header[0] != "field":
            continue
        if heading.strip() == "## Top level":
            prefixes = [""]
        else:
            prefixes = [p + "." for p in re.findall(r"`([^`]+)`", heading)]
            assert prefixes, heading
        for row in rows:
            name = _unquote(row[0])
            if header[1] == "value":
                t = verify_audit.describe(verify_audit._spec_of(json.loads(_unquote(row[1]))))
            else:
                t = row[1]
            for prefix in prefixes:
                out[prefix + name] = t
    return out


def test_the_field_tables_are_the_verifiers_field_list() -> None:
    documented = documented_fields()
    expected = verify_audit.field_list(verify_audit.AUDIT_VERSIONS[-1])
    assert {p: documented.get(p) for p in expected} == expected
    assert sorted(set(documented) - set(expected)) == []


def test_the_exit_status_table_is_the_verifiers() -> None:
    tables = [rows for _, header, rows in _tables() if header[:2] == ["exit", "class"]]
    assert len(tables) == 1
    assert [int(r[0]) for r in tables[0]] == sorted(verify_audit.EXIT_CODES)
    assert len({r[1] for r in tables[0]}) == len(tables[0])  # one class per status


def _formulas() -> dict[str, str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
    out: dict[str, str] = {}
    for block in blocks:
        first = block.splitlines()[0]
        assert first.startswith("# formula: "), f"a Python block that is not a formula: {first!r}"
        out[first.removeprefix("# formula: ").strip()] = block
    return out


FORMULAS = _formulas()


def test_every_formula_is_a_python_block_that_is_run_here() -> None:
    assert set(FORMULAS) == {
        "seed", "stream", "group draws", "report numbers", "gains_sha256", "data_sha256",
        "group_sha256", "trained_on", "binding_sha256", "file_sha256", "group check",
    }
    # no formula left as pseudo-code outside the blocks the tests run
    for block in re.findall(r"```\n(.*?)```", DOC, flags=re.S):
        assert "SHA-256(" not in block and "sha256(" not in block, block


def _run(name: str, **names: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {"hashlib": hashlib, "json": json, "struct": struct, "B": 2000, **names}
    exec(compile(FORMULAS[name], f"audit-format.md:{name}", "exec"), scope)
    return scope


# --------------------------------------------------------------------------- real audits


def _v3_audits() -> dict[str, dict[str, Any]]:
    win: dict[str, Any] = {"model_skill": 2.0, "jev_skill": 0.3}
    # small decisions: every field is edited and verified about three times
    grouped = with_groups(synthetic_decision(seed=71, n=12, n_answers=3, name="topic", **win),
                          [3] * 4)
    choice = synthetic_decision(seed=72, n=8, n_answers=4, name="choice", multiple_choice=True,
                                ties=True, **win)
    skewed = synthetic_decision(seed=73, n=12, n_answers=2, name="spam", model_skill=0.0,
                                jev_skill=2.0)
    attested = Attestation(AttestationStatus.ATTESTED, len(TRAINED_IDS),
                           ids_set_sha256(id_sha256(i) for i in TRAINED_IDS))
    split: dict[str, Any] = {"topic": {"n_test": 12, "n_train": 60}, "n_test": 32}
    return {
        "multi": build_audit(judge([grouped, choice, skewed], keep_if_loses=True),
                             training_id="tr_spec", model_id="mdl_spec", jev_id="jev-1",
                             split=split, trained_on=attested),
        "single": build_audit(judge([skewed], keep_if_loses=False), training_id="tr_s",
                              model_id="mdl_s", jev_id="jev-1"),
        "failed": build_audit(failed_training("the trainer ran out of memory"),
                              training_id="tr_f", model_id="mdl_f", jev_id="jev-1",
                              trained_on=attested),
    }


V3 = _v3_audits()


def _real_audits() -> list[tuple[str, dict[str, Any]]]:
    out = [(p.parent.name + "/" + p.name, json.loads(p.read_bytes())) for p in OLD + CURRENT]
    out += [(f"v3/{k}", json.loads(audit_bytes(a))) for k, a in V3.items()]
    return out


REAL = _real_audits()


def test_the_fixtures_of_every_version_verify() -> None:
    versions = {a["audit_version"] for _, a in REAL}
    assert versions == set(verify_audit.AUDIT_VERSIONS)
    for name, audit in REAL:
        assert verify_audit.verify(audit) == [], name


@pytest.mark.parametrize(("name", "audit"), REAL, ids=[n for n, _ in REAL])
def test_the_formulas_rebuild_the_digests_of_real_audits(name: str, audit: dict[str, Any]) -> None:
    for decision in audit["decisions"]:
        report, boot = decision["report"], decision["report"]["bootstrap"]
        seed = _run("seed", decision=decision)["seed"]
        assert seed.hex() == boot["seed"]
        n = len(decision["rows"]["y"])
        if boot.get("unit", "example") == "example":
            draws = _run("stream", decision=decision, seed=seed)["draws"]
            assert draws == resample_indices_python(seed, n, 2000)
        else:
            scope = _run("group draws", decision=decision, seed=seed)
            assert scope["G"] == boot["n_units"]
            assert scope["group_draws"] == resample_indices_python(seed, scope["G"], 2000)
        numbers = _run("report numbers", decision=decision, audit=audit)
        assert numbers["coverage"] == report["coverage"]
        assert (numbers["q05"], numbers["q05_index"], numbers["n_gain_le_0"]) == (
            boot["q05"], boot["q05_index"], boot["n_gain_le_0"])
        assert numbers["needed"] == audit["overall"]["needed"]
        assert _run("gains_sha256", decision=decision)["gains_sha256"] == boot["gains_sha256"]
        assert _run("data_sha256", decision=decision)["data_sha256"] == report["data_sha256"]
        if audit["audit_version"] >= 4:
            _check_group_formula(decision)
    if audit["audit_version"] >= 3:
        assert _run("binding_sha256", audit=audit)["binding_sha256"] == audit["binding_sha256"]
        if audit["trained_on"]["status"] == "attested":
            scope = _run("trained_on", ids=TRAINED_IDS)
            assert (scope["ids_sha256"], scope["n_ids"]) == (audit["trained_on"]["ids_sha256"],
                                                             audit["trained_on"]["n_ids"])


def _check_group_formula(decision: dict[str, Any]) -> None:
    """The page's "group check" block rebuilds the report's group check (and its verdict part)."""
    report = decision["report"]
    if report["bootstrap"]["unit"] == "example":
        assert report["group_check"] is None
        return
    scope = _run("group check", decision=decision)
    rebuilt = {key: scope[key] for key in ("effective_groups", "df", "t", "leave_one_out", "se",
                                           "lower", "passed")}
    rebuilt["n_groups"] = scope["G"]
    assert rebuilt == report["group_check"]
    assert report["gain_is_real"] == (report["bootstrap"]["q05"] > 0.0 and scope["passed"])


def test_the_group_checks_t_table_is_the_producers_and_the_verifiers() -> None:
    from typestrict_pipeline.refund.smallgroups import T95

    table = _run("group check", decision={"rows": {"y": [0], "p_model": [[1.0, 0.0]],
                                                   "p_jev": [[1.0, 0.0]],
                                                   "group_sha256": ["0" * 64]},
                                          "answers": ["a", "b"], "report": {"gain": 0.0}})
    assert table["T95"] == T95 == verify_audit.T95
    assert table["passed"] is False and table["t"] is None  # one group: never real


def test_version_4_is_written_with_groups_and_version_3_without() -> None:
    assert V3["multi"]["audit_version"] == 4 and V3["multi"]["params"]["group_check"]
    assert V3["single"]["audit_version"] == 3 and "group_check" not in V3["single"]["params"]
    assert V3["failed"]["audit_version"] == 3
    assert "group_check" not in V3["single"]["decisions"][0]["report"]
    grouped, choice, _ = V3["multi"]["decisions"]
    assert grouped["report"]["group_check"]["n_groups"] == 4 and choice["report"]["group_check"] is None


def test_the_group_formula_rebuilds_a_pipeline_audit_from_the_data(tmp_path: Path) -> None:
    """Through the split: groups from the data's group column, rows without a group by id."""
    from tests.test_refund_assets_support import make_training
    from typestrict_pipeline.refund.dataset import load_dataset
    from typestrict_pipeline.refund.holdout import split_decisions
    from typestrict_pipeline.refund.manifest import load_manifest
    from typestrict_pipeline.refund.predictions import build_decision_data, read_predictions

    path = make_training(tmp_path, "tr_groups", n=120, seed=5)
    csv = path.parent / "data.csv"
    lines: list[str] = csv.read_text().splitlines()
    for i in range(1, 13):  # twelve rows with an empty group cell: each its own group, by id
        row = lines[i].split(",")
        row[2] = ""
        lines[i] = ",".join(row)
    csv.write_text("\n".join(lines) + "\n")
    manifest = load_manifest(path, data_root=tmp_path)
    dataset = load_dataset(manifest)
    holdout = split_decisions(dataset)[0]
    data = build_decision_data(dataset, holdout, model=read_predictions(path.parent / "model.jsonl",
                                                                        "model"),
                               jev=read_predictions(path.parent / "jev.jsonl", "jev"))
    audit = json.loads(audit_bytes(build_audit(judge([data], keep_if_loses=False),
                                               training_id="tr_groups", model_id="m",
                                               jev_id="j")))
    decision = audit["decisions"][0]
    assert decision["report"]["bootstrap"]["unit"] == "group"
    cells = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    by_text = {hashlib.sha256(cells[i][1].encode("utf-8")).hexdigest(): i for i in cells}
    rebuilt = []
    for text_sha in decision["rows"]["sha256"]:
        row_id = by_text[text_sha]
        group = cells[row_id][2] or None
        rebuilt.append(_run("group_sha256", group=group, row_id=row_id)["group_sha256"])
    assert rebuilt == decision["rows"]["group_sha256"]
    assert any(cells[by_text[h]][2] == "" for h in decision["rows"]["sha256"])  # both kinds
    assert verify_audit.verify(audit) == []


def test_the_settled_digest_is_the_files_sha256(tmp_path: Path) -> None:
    raw = audit_bytes(V3["multi"])
    expected = _run("file_sha256", raw=raw)["file_sha256"]
    path = tmp_path / "a.json"
    path.write_bytes(raw)
    assert verify_audit.main(["--expect-sha256", expected, str(path)]) == 0
    assert verify_audit.main([f"--expect-sha256={expected.upper()}", str(path)]) == 0


def test_the_example_is_what_the_producer_writes() -> None:
    example = json.loads(re.search(r"```json\n(.*?)```", DOC, flags=re.S).group(1))  # type: ignore[union-attr]
    rows = example["decisions"][0]["rows"]
    data = DecisionData("sentiment", DecisionKind.SINGLE, tuple(example["decisions"][0]["answers"]),
                        tuple(JudgedRow(h, y, tuple(pm), tuple(pj)) for h, y, pm, pj in zip(
                            rows["sha256"], rows["y"], rows["p_model"], rows["p_jev"],
                            strict=True)))
    ids = [f"r{i:02d}" for i in range(1, 25)]
    built = build_audit(judge([data], keep_if_loses=False), training_id=example["training_id"],
                        model_id=example["model_id"], jev_id=example["jev_id"],
                        split=example["split"],
                        trained_on=Attestation(AttestationStatus.ATTESTED, 24,
                                               ids_set_sha256(id_sha256(i) for i in ids)))
    gains = example["decisions"][0]["report"]["bootstrap"]["gains"]
    assert gains[-1] == "..."
    built_gains = built["decisions"][0]["report"]["bootstrap"]["gains"]
    assert built_gains[: len(gains) - 1] == gains[:-1]
    built["decisions"][0]["report"]["bootstrap"]["gains"] = gains
    assert built == example


# --------------------------------------------------------------------------- tampering


def _parent_key(audit: dict[str, Any], path: str) -> tuple[Any, Any] | None:
    node: Any = audit
    parts = path.split(".")
    for part in parts[:-1]:
        name = part.removesuffix("[]")
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
        if part.endswith("[]"):
            candidates = [d for d in node if _parent_key(d, ".".join(parts[parts.index(part) + 1:]))]
            if not candidates:
                return None
            return _parent_key(candidates[0], ".".join(parts[parts.index(part) + 1:]))
    last = parts[-1]
    if isinstance(node, dict) and last in node:
        return node, last
    return None


def _value_of(t: str) -> Any:
    """A value of type ``t`` (in the page's words)."""
    return {"int": 1, "float": 0.5, "bool": True, "string": "x", "hex digest": "0" * 64,
            "rational": "1/3"}.get(t, "x")


def _edited(value: Any, t: str) -> Any:
    """Another value of the same type (None when the type allows no other)."""
    if t == "object of counts or null":
        return {"n_test": 1} if value is None else None
    if t.endswith(" or null"):
        return None if value is not None else _value_of(t.removesuffix(" or null"))
    if t.startswith('"'):
        choices = [c.strip('"') for c in t.split(" or ")]
        others = [c for c in choices if c != value]
        return others[0] if others else None
    if t.startswith("list of") and isinstance(value, list):
        if not value:
            return [_value_of(t.removeprefix("list of ").rstrip("s"))]
        inner = t.removeprefix("list of ")
        if inner == "objects":  # the decisions: one left out, or one more
            return value[:-1] if len(value) > 1 else [*value, dict(value[0], name="other")]
        inner = inner.replace("lists of", "list of", 1) if inner.startswith("lists") else (
            {"ints": "int", "floats": "float", "strings": "string", "hex digests": "hex digest",
             "rationals": "rational"}[inner])
        return [_edited(value[0], inner), *value[1:]]
    if t == "object" and isinstance(value, dict):
        return None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value - 1e-9 if value > 0.5 else value + 1e-9
    if t == "hex digest":
        return ("1" if value[0] == "0" else "0") + value[1:]
    if t == "rational":
        num, den = value.split("/")
        return f"{int(num) + 1}/{den}"
    if isinstance(value, str):
        return value + "x"
    raise AssertionError((value, t))


def _wrong_type(t: str) -> Any:
    if t.startswith("list") or t in ("object", "object of counts or null"):
        return "x" if t.startswith("list") else []
    if t.endswith(" or null"):
        return []
    return {"int": 1.0, "float": 1, "bool": 0, "string": 7, "hex digest": "xyz",
            "rational": "0.5"}.get(t, "not one of them")


FIELDS = verify_audit.field_list(verify_audit.AUDIT_VERSIONS[-1])
# fields whose other values leave what the product ever writes (a version it does not know, a
# resample count, an answer index past the answers, a kind or unit whose rows differ, any of the
# rule's fixed params): exit 2
BOUNDED = {"audit_version", "decisions[].kind", "decisions[].rows.y", "decisions[].rows.n_options",
           "decisions[].report.bootstrap.resamples", "decisions[].report.bootstrap.unit",
           "decisions[].rows.p_model", "decisions[].rows.p_jev",
           *(p for p in FIELDS if p.startswith("params."))}


def _place(path: str) -> tuple[str, dict[str, Any], Any, Any]:
    for name in ("single", "multi", "failed"):
        audit = copy.deepcopy(V3[name])
        found = _parent_key(audit, path)
        if found is not None:
            return name, audit, found[0], found[1]
    raise AssertionError(f"no audit has {path}")


def _exit(audit: dict[str, Any], tmp_path: Path, *args: str) -> tuple[int, str]:
    path = tmp_path / "audit.json"
    path.write_bytes(audit_bytes(audit))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = verify_audit.main([*args, str(path)])
    said = out.getvalue() + err.getvalue()
    assert "Traceback" not in said and "the verifier stopped" not in said, said
    return code, said


@pytest.mark.parametrize("path", list(FIELDS))
def test_every_field_of_the_format_is_a_must_fail_tamper(path: str, tmp_path: Path) -> None:
    t = FIELDS[path]
    name, audit, parent, key = _place(path)
    original = audit_bytes(V3[name])
    settled = hashlib.sha256(original).hexdigest()
    new = _edited(parent[key], t)
    if new is not None or t.endswith("or null"):
        parent[key] = new
        assert audit_bytes(audit) != original
        code, said = _exit(audit, tmp_path)
        assert code in ((1, 2) if path in BOUNDED else (1,)), (path, new, said)
        assert _exit(audit, tmp_path, "--expect-sha256", settled)[0] == 3
    removed = copy.deepcopy(V3[name])
    parent, key = _parent_key(removed, path)  # type: ignore[misc]
    del parent[key]
    assert _exit(removed, tmp_path)[0] == 2, path
    retyped = copy.deepcopy(V3[name])
    parent, key = _parent_key(retyped, path)  # type: ignore[misc]
    parent[key] = _wrong_type(t)
    code, said = _exit(retyped, tmp_path)
    assert code == 2, (path, said)


def test_the_pages_flips_fail_unless_every_digest_is_rewritten_then_expect_sha256_does(
    tmp_path: Path,
) -> None:
    """Issue 5/7: keep_if_loses flipped to a kept verdict, and decisions emptied into a failed
    one, verified OK before the binding digest."""
    refund = build_audit(judge([synthetic_decision(seed=73, n=12, n_answers=2, name="spam",
                                                   model_skill=0.0, jev_skill=2.0)],
                               keep_if_loses=False), training_id="t", model_id="m", jev_id="j")
    assert refund["overall"]["verdict"] == "refund"
    settled = hashlib.sha256(audit_bytes(refund)).hexdigest()
    kept = copy.deepcopy(refund)
    kept["overall"].update(keep_if_loses=True, verdict="kept", refunds_credit=False)
    emptied = copy.deepcopy(refund)
    emptied["decisions"] = []
    emptied["overall"].update(n_decisions=0, needed=0, won=0, beats=False,
                              settling_decision=None, verdict="failed", refunds_credit=True,
                              failure_reason="made up")
    for forged in (kept, emptied):
        code, said = _exit(forged, tmp_path)
        assert code == 1 and "DIFFERS binding_sha256" in said
        forged["binding_sha256"] = verify_audit.binding_sha256(forged)  # every digest rewritten
        assert _exit(forged, tmp_path)[0] == 0
        code, said = _exit(forged, tmp_path, "--expect-sha256", settled)
        assert code == 3 and "NOT THE SETTLED FILE" in said
    assert _exit(refund, tmp_path, "--expect-sha256", settled)[0] == 0


def test_exit_classes_are_one_per_kind_of_damage(tmp_path: Path) -> None:
    """The issue's cases: n_units as a float or removed, unit removed: all 'not an audit'."""
    base = V3["single"]
    n_units = base["decisions"][0]["report"]["bootstrap"]["n_units"]
    for key, value in (("n_units", float(n_units)), ("n_units", None), ("unit", None),
                       ("gains_sha256", 1)):
        audit = copy.deepcopy(base)
        boot = audit["decisions"][0]["report"]["bootstrap"]
        if value is None:
            del boot[key]
        else:
            boot[key] = value
        assert _exit(audit, tmp_path)[0] == 2, key
    audit = copy.deepcopy(base)
    audit["decisions"][0]["report"]["bootstrap"]["n_units"] += 1
    assert _exit(audit, tmp_path)[0] == 1
    assert verify_audit.main([str(tmp_path / "missing.json")]) == 4
