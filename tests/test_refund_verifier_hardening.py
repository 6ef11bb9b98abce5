"""The verifier on hostile files: strict JSON, bounds checked before any work, exit 0/1/2 only,
never a traceback (issue 11, items 3 and 8; the verifier part)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups

VERIFIER = Path(verify_audit.__file__)
GUARDS = ("the verifier stopped", "unexpected structure", "Traceback")


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    d1 = with_groups(synthetic_decision(seed=31, n=12, n_answers=3, model_skill=2.0), [3, 4, 5])
    d2 = synthetic_decision(seed=32, n=8, n_answers=2, name="b", multiple_choice=True)
    return build_audit(judge([d1, d2], keep_if_loses=False), training_id="t", model_id="m",
                       jev_id="j", split={"n_test": 20, "per_decision": {"decision": 12}})


def _run(tmp_path: Path, content: bytes, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "audit.json"
    path.write_bytes(content)
    done = subprocess.run([sys.executable, "-I", str(VERIFIER), *args, str(path)],
                          capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stdout, done.stderr


def _main(tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "audit.json"
    path.write_bytes(content)
    code = verify_audit.main([str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def _refused_after(edit: Any, small: dict[str, Any], tmp_path: Path,
                   capsys: pytest.CaptureFixture[str]) -> str:
    """What the verifier says of ``small``'s audit text after ``edit`` (which must change it),
    having exited 2 (not an audit)."""
    text = audit_bytes(small).decode()
    changed = edit(text)
    assert changed != text
    code, said = _main(tmp_path, changed.encode(), capsys)
    assert code == 2, said
    return said


def test_the_fixture_verifies(small: dict[str, Any], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(tmp_path, audit_bytes(small), capsys)[0] == 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # the verdict twice (refund, then beats): refused, not "last wins"
        (lambda t: t.replace('"verdict":"refund"', '"verdict":"refund","verdict":"beats"'),
         "each key once"),
        (lambda t: t.replace('"audit_version":4', '"audit_version":4.0'), "audit_version"),
        (lambda t: t.replace('"audit_version":4', '"audit_version":true'), "audit_version"),
        (lambda t: t.replace('"resamples":2000,"unit"', '"resamples":1' + "0" * 30 + ',"unit"'),
         "expected 2000"),
        (lambda t: t.replace('"resamples":2000,"unit"', '"resamples":1000000000,"unit"'),
         "expected 2000"),
        (lambda t: t.replace('"resamples":2000,"unit"', '"resamples":5000000,"unit"'),
         "expected 2000"),
        (lambda t: t.replace('"n_test":20', '"n_test":1' + "0" * 5000), "within bounds"),
        (lambda t: t.replace('"training_id":"t"', '"training_id":"' + "x" * 1001 + '"'),
         "1 to 1000 characters"),
        (lambda t: "{}", "format"),
        (lambda t: "[" * 200_000 + "]" * 200_000, "JSON object"),
        (lambda t: '{"a":' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
        (lambda t: t.replace('"unit":"group"', '"unit":"cluster"'), "unit"),
        (lambda t: t[: len(t) // 2], "expected JSON"),
        (lambda t: t.replace('"q05_index"', '"q05_index":1,"q05_index"', 1), "each key once"),
    ],
)
def test_hostile_audits_exit_2_with_one_line(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any,
    message: str,
) -> None:
    said = _refused_after(edit, small, tmp_path, capsys)
    assert message in said and not any(g in said for g in GUARDS), said
    assert said.startswith("verify_audit: not a valid audit:") and said.count("\n") == 1


def test_sizes_past_the_bounds_are_refused_before_any_work(small: dict[str, Any]) -> None:
    big = copy.deepcopy(small)
    rows = big["decisions"][1]["rows"]
    for key in rows:
        rows[key] = rows[key] * 251  # 2,008 test examples in one decision
    with pytest.raises(verify_audit.Malformed, match="at most 2000 entries"):
        verify_audit.verify(big)
    many = copy.deepcopy(small)
    decision = many["decisions"][1]
    for key in decision["rows"]:
        decision["rows"][key] = decision["rows"][key] * 250  # 2,000 each
    many["decisions"] = [dict(decision, name=f"d{i}") for i in range(4)]  # 8,000 in all
    with pytest.raises(verify_audit.Malformed, match="--large"):
        verify_audit.verify(many)
    many["decisions"] = many["decisions"] * 9
    with pytest.raises(verify_audit.Malformed, match="at most 32 entries"):
        verify_audit.verify(many)
    wide = copy.deepcopy(small)  # 2 decisions: 2,000 x 3 + 2,000 x 41 answers > 80,000
    decision = wide["decisions"][0]
    for key in decision["rows"]:
        decision["rows"][key] = decision["rows"][key] * 166 + decision["rows"][key][:8]
    other = wide["decisions"][1]
    other["answers"] = other["answers"] + [f"x{i}" for i in range(41 - len(other["answers"]))]
    for key in ("p_model", "p_jev"):
        other["rows"][key] = [p + [0.0] * (41 - len(p)) for p in other["rows"][key]]
    for key in other["rows"]:
        other["rows"][key] = other["rows"][key] * 250
    with pytest.raises(verify_audit.Malformed, match="examples x answers"):
        verify_audit.verify(wide)


def test_an_extra_level_in_split_is_malformed(small: dict[str, Any]) -> None:
    audit = copy.deepcopy(small)
    audit["split"]["per_decision"]["decision"] = {"n_test": 12}
    with pytest.raises(verify_audit.Malformed, match=r"split\.per_decision\.decision"):
        verify_audit.verify(audit)


def test_the_interpreter_is_named_when_too_old(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(verify_audit, "python_problem",
                        lambda: verify_audit.__dict__["_old_python_message"]((3, 9, 18)))
    assert verify_audit.main(["whatever.json"]) == 4
    err = capsys.readouterr().err
    assert "needs Python 3.10 or later, got Python 3.9.18" in err and "whatever" not in err


def test_a_reader_that_goes_away_gets_no_traceback(small: dict[str, Any], tmp_path: Path) -> None:
    audit = copy.deepcopy(small)
    for row in audit["decisions"][0]["rows"]["p_model"]:
        row.reverse()  # many differences, many lines
    path = tmp_path / "a.json"
    path.write_bytes(audit_bytes(audit))
    proc = subprocess.Popen([sys.executable, "-I", str(VERIFIER), str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err


def _mutations() -> st.SearchStrategy[Any]:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
        max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            out.extend(_paths(v, (*prefix, i)))
    return out


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_exit_codes_are_0_1_2_and_never_a_traceback(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    audit = copy.deepcopy(small)
    paths = _paths(audit)
    path = data.draw(st.sampled_from(paths[1:]))
    parent = audit
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["replace", "delete", "text"]))
    if action == "replace":
        parent[path[-1]] = data.draw(_mutations())
    elif action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    raw = json.dumps(audit).encode()
    if action == "text":
        cut = data.draw(st.integers(0, len(raw)))
        raw = raw[:cut] + data.draw(st.binary(max_size=8)) + raw[cut:]
    code, said = _main(tmp_path, raw, capsys)
    assert code in (0, 1, 2)
    assert not any(g in said for g in GUARDS), said


def test_large_lifts_the_work_bound_in_the_verifier_and_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typestrict_pipeline.cli import main as cli_main

    # the bound itself (80,000 examples x answers) is tested above with real sizes; here a
    # lowered bound keeps the run short: 40 examples x 3 answers = 120 > 100
    monkeypatch.setattr(verify_audit, "MAX_TOTAL_CELLS", 100)
    data = synthetic_decision(seed=41, n=40, n_answers=3, model_skill=3.0)
    path = tmp_path / "big.json"
    path.write_bytes(audit_bytes(build_audit(judge([data], keep_if_loses=False),
                                             training_id="t", model_id="m", jev_id="j")))
    assert verify_audit.main([str(path)]) == 2
    assert "120" in capsys.readouterr().err
    assert cli_main(["verify", "--large", str(path)]) == 0
    assert "OK" in capsys.readouterr().out


def test_a_fifo_is_refused_as_unreadable_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "audit.json"
    os.mkfifo(fifo)  # no writer ever comes: opening it for reading would wait forever
    done = subprocess.run([sys.executable, "-I", str(VERIFIER), str(fifo)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr == (f"verify_audit: cannot read {fifo}: expected a regular file, got a "
                           "FIFO (named pipe): save the audit to a file and pass that file\n")
    with pytest.raises(verify_audit.Unreadable, match="got a FIFO"):
        verify_audit.load(str(fifo))


def test_typestrict_verify_json_says_nothing_was_checked_for_a_file_it_cannot_read(tmp_path: Path) -> None:
    """``typestrict verify --json`` exits as the verifier does (4: nothing checked) for a FIFO or
    a directory, at once, with ``valid`` unknown (``null``), not "not a valid audit" (2)."""
    fifo = tmp_path / "audit.json"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO (named pipe)"), (tmp_path, "a directory")):
        done = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "verify", str(path), "--json"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 4, done.stdout + done.stderr
        assert json.loads(done.stdout) == {
            "audit": str(path), "ok": False, "valid": None,
            "error": f"cannot read {path}: expected a regular file, got {kind}: save the audit to a file "
                     "and pass that file"}


def test_a_directory_is_refused_as_unreadable(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_audit.main([str(tmp_path)]) == 4
    assert "expected a regular file, got a directory" in capsys.readouterr().err


def test_a_file_past_64_mib_is_refused_with_its_real_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.json"
    with path.open("wb") as fh:
        fh.truncate(100 * 2**20)  # sparse: 100 MiB on paper, nothing written
    assert verify_audit.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"verify_audit: not a valid audit: {path}: expected at most 67108864 bytes "
                   "(64 MiB), got 104857600 bytes\n")
    # With the settled digest to check, no digest of the first 64 MiB is shown as the file's.
    expect = "0" * 64
    assert verify_audit.main(["--expect-sha256", expect, str(path)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"verify_audit: NOT THE SETTLED FILE: {path} is 104,857,600 bytes, larger "
                          f"than any audit (67,108,864 bytes at most), so not the file of SHA-256 "
                          f"{expect} (the digest recorded"), err
    assert "has SHA-256" not in err


@pytest.mark.parametrize(
    "literal",
    ["1e400", "-1e400", "1E+400", "1e-400", "-2.5e-999", "1e0400", "0." + "0" * 400 + "1",
     "1" + "0" * 400 + ".0", "1.5e" + "9" * 30],
)
def test_a_number_out_of_a_doubles_range_is_refused_with_its_path(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], literal: str
) -> None:
    # was: 1e400 read as inf (exit 1, DIFFERS) and 1e-400 read as 0.0 (could verify OK)
    text = audit_bytes(small).decode()
    gain = json.dumps(small["decisions"][0]["report"]["gain"])
    changed = text.replace(f'"gain":{gain}', f'"gain":{literal}', 1)
    assert changed != text
    code, said = _main(tmp_path, changed.encode(), capsys)
    assert code == 2, said
    shown = literal if len(literal) <= 80 else literal[:77] + "..."
    assert said.startswith(f"verify_audit: not a valid audit: {tmp_path / 'audit.json'}: "
                           "decisions[0].report.gain: expected a number a double can hold"), said
    assert f"got {shown}" in said and said.count("\n") == 1, said


def test_numbers_in_range_and_zeros_read_as_before() -> None:
    literals = ["0", "0.0", "-0.0", "0e5", "0E-400", "-0.000e+999", "5e-324", "3e-324",
                "1e-300", "2.2250738585072014e-308", "1.7976931348623157e308", "1e+100", "1e99",
                "0.1", "0.30000000000000004", "0." + "0" * 300 + "1", "9" * 300 + ".5"]
    raw = ("{" + ",".join(f'"{i}":{lit}' for i, lit in enumerate(literals)) + "}").encode()
    parsed = verify_audit.parse(raw)
    expected = json.loads(raw)
    assert [repr(v) for v in parsed.values()] == [repr(v) for v in expected.values()]
    assert [type(v) for v in parsed.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("zero", ["0e-400", "0.000e+999", "0E5"])
def test_an_exact_zero_written_otherwise_still_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], zero: str
) -> None:
    text = (Path(__file__).parent / "data" / "audit_v4" / "multi.json").read_text()
    changed, count = re.subn(r"(?<=[\[,])0\.0(?=[,\]])", zero, text)
    assert count > 10
    code, said = _main(tmp_path, changed.encode(), capsys)
    assert code == 0 and "OK" in said, said


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda t: t.replace('"training_id":"t"', '"training_id":"t\\ud800"'), "training_id"),
        (lambda t: t.replace('"answers":["', '"answers":["\\udfff', 1), "decisions[0].answers[0]"),
        (lambda t: t.replace('"n_test":20', '"n\\ud800":20'), "split.'n\\ud800'"),
    ],
)
def test_a_lone_surrogate_is_refused_with_its_path(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, path: str
) -> None:
    # was: "unexpected structure (UnicodeEncodeError ...)" without a path
    said = _refused_after(edit, small, tmp_path, capsys)
    assert said.startswith(f"verify_audit: not a valid audit: {tmp_path / 'audit.json'}: {path}: "
                           "expected text that is valid Unicode, got "), said
    assert "lone surrogate" in said and not any(g in said for g in GUARDS), said


def test_a_surrogate_pair_is_text() -> None:
    assert verify_audit.parse(b'{"a":"\\ud83d\\ude00"}') == {"a": "\N{GRINNING FACE}"}


@pytest.mark.parametrize(
    ("edit", "path", "expected", "got"),
    [
        (lambda p: p.update(resamples=1000), "params.resamples", "2000", "1000"),
        (lambda p: p["weights"].update(macro_f1=0.6), "params.weights.macro_f1", "0.5", "0.6"),
        (lambda p: p["max_drop"].update(worst_class_f1="1/10"), "params.max_drop.worst_class_f1",
         "'1/20'", "'1/10'"),
        (lambda p: p.update(seed_domain="other"), "params.seed_domain",
         "'typestrict-refund-seed-v1'", "'other'"),
        (lambda p: p.update(group_check="none"), "params.group_check", "'group_jackknife_t95_v1'",
         "'none'"),
    ],
)
def test_params_other_than_the_rules_are_not_an_audit(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any,
    path: str, expected: str, got: str,
) -> None:
    # the format's page lists them among what the verifier refuses (exit 2); was exit 1
    audit = copy.deepcopy(small)
    edit(audit["params"])
    code, said = _main(tmp_path, audit_bytes(audit), capsys)
    assert code == 2, said
    assert said == (f"verify_audit: not a valid audit: {path}: expected {expected} (a fixed "
                    f"parameter of the rule: the product always writes it), got {got}\n")


def test_two_decisions_of_one_name_are_not_an_audit_and_the_name_is_named(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # was exit 1, "decisions: names must be unique, got a JSON list" (which name?)
    audit = copy.deepcopy(small)
    name = audit["decisions"][0]["name"]
    audit["decisions"][1]["name"] = name
    code, said = _main(tmp_path, audit_bytes(audit), capsys)
    assert code == 2, said
    assert said == (f"verify_audit: not a valid audit: decisions[1].name: expected each "
                    "decision's name once (a training's decision names are unique; each is part "
                    f"of its decision's seed), got {name!r} again (first at decisions[0])\n")


def _python_3_9() -> str | None:
    """A Python 3.9 that runs (on PATH, or a pyenv one), if this machine has one."""
    found = [shutil.which("python3.9"), *map(str, sorted(
        (Path.home() / ".pyenv" / "versions").glob("3.9*/bin/python3.9")))]
    for candidate in filter(None, found):
        done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60, check=False)
        if done.returncode == 0 and done.stdout.strip() == "(3, 9)":
            return candidate
    return None


def _runtime_unions(source: str) -> list[int]:
    """Lines of ``X | Y`` evaluated when the module is imported (module-level statements outside
    ``if TYPE_CHECKING:``, function bodies and, under ``from __future__ import annotations``,
    annotations excluded): what makes the file fail to import on Python 3.9."""
    import ast

    lines: list[int] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for part in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
                if part is not None:
                    visit(part)
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.AnnAssign):
            if node.value is not None:
                visit(node.value)
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            lines.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return lines


def test_the_file_imports_on_an_old_interpreter_to_say_it_is_too_old(tmp_path: Path) -> None:
    # The whole file must import on 3.9 (no runtime `X | None`) to print the one-line message:
    # checked on the source always, and by a real Python 3.9 where the machine has one (CI does).
    assert _runtime_unions(VERIFIER.read_text(encoding="utf-8")) == []
    assert _runtime_unions("from typing import Optional\nPath = tuple[str, int] | None\n") == [2]
    old = _python_3_9()
    if old is not None:
        done = subprocess.run([old, "-I", str(VERIFIER), str(tmp_path / "a.json")],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 4 and done.stderr.startswith(
            "verify_audit: needs Python 3.10 or later, got Python 3.9"), done.stderr
