"""The standalone verifier: accepts every audit we build, rejects any single change, never crashes."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.cli import main as cli_main
from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.rule import failed_training, judge
from typestrict_pipeline.refund.synthetic import synthetic_decision

VERIFIER = Path(verify_audit.__file__)


def _build(decisions: list[Any], keep: bool = False) -> dict[str, Any]:
    return build_audit(judge(decisions, keep_if_loses=keep), training_id="tr_9",
                       model_id="mdl_9", jev_id="jev-1", split={"n_test": 100})


class _Skills(TypedDict):
    model_skill: float
    jev_skill: float


@pytest.fixture(scope="module")
def audits() -> dict[str, dict[str, Any]]:
    win: _Skills = {"model_skill": 2.0, "jev_skill": 0.3}
    return {
        "single": _build([synthetic_decision(seed=21, n=60, n_answers=3, **win)]),
        "refund": _build([synthetic_decision(seed=22, n=50, n_answers=2, ties=True)]),
        "kept": _build([synthetic_decision(seed=23, n=40, n_answers=3, model_skill=0.1,
                                           jev_skill=2.0)], keep=True),
        "multi": _build([
            synthetic_decision(seed=24, n=45, n_answers=3, name="a", **win),
            synthetic_decision(seed=25, n=30, n_answers=2, name="b", model_skill=0.1,
                               jev_skill=1.5),
            synthetic_decision(seed=26, n=40, n_answers=5, name="c", skew=3.0, **win),
        ]),
        "choice": _build([synthetic_decision(seed=27, n=50, n_answers=4, multiple_choice=True,
                                             ties=True, **win)]),
        "failed": build_audit(failed_training("the trainer ran out of memory"),
                              training_id="tr_9", model_id="mdl_9", jev_id="jev-1"),
    }


@pytest.mark.parametrize("name", ["single", "refund", "kept", "multi", "choice", "failed"])
def test_verifier_accepts_what_we_build(
    audits: dict[str, dict[str, Any]], name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.json"
    path.write_bytes(audit_bytes(audits[name]))
    assert verify_audit.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and f"verdict {audits[name]['overall']['verdict']}" in out


def test_the_fixture_covers_every_verdict(audits: dict[str, dict[str, Any]]) -> None:
    verdicts = {a["overall"]["verdict"] for a in audits.values()}
    assert verdicts == {"beats", "kept", "refund", "failed"}
    multi = audits["multi"]["overall"]
    assert (multi["won"], multi["needed"], multi["verdict"]) == (2, 2, "beats")
    margins = audits["multi"]["decisions"][2]["report"]["margins"]
    assert margins  # decision c has rare answers: worst_class_f1 applies or not, both verified


def _bump(x: Any) -> Any:
    if isinstance(x, bool):
        return not x
    if isinstance(x, int):
        return x + 1
    if isinstance(x, float):
        return x + 1e-9 if x < 0.5 else x - 1e-9
    if isinstance(x, str) and len(x) == 64:
        return ("0" if x[0] != "0" else "1") + x[1:]
    if isinstance(x, str):
        return x + "x"
    if x is None:
        return 0.0
    raise AssertionError(f"cannot bump {x!r}")


def _at(path: str) -> Callable[[dict[str, Any]], None]:
    def change(audit: dict[str, Any]) -> None:
        parts = path.split(".")
        obj: Any = audit
        for part in parts[:-1]:
            obj = obj[int(part)] if part.isdigit() else obj[part]
        last = parts[-1]
        key: Any = int(last) if last.isdigit() else last
        obj[key] = _bump(obj[key])

    return change


D = "decisions.0"
R = "decisions.0.report"
CHANGES = [
    f"{D}.rows.sha256.3", f"{D}.rows.sha256.0", f"{D}.rows.y.5", f"{D}.rows.y.0",
    f"{D}.rows.p_model.2.0", f"{D}.rows.p_model.7.1", f"{D}.rows.p_jev.4.2",
    f"{D}.rows.p_jev.0.0", f"{D}.name", f"{D}.answers.0", f"{D}.answers.2",
    f"{R}.data_sha256",
    f"{R}.n", f"{R}.f1_answers.0", f"{R}.coverage",
    f"{R}.metrics.model.macro_f1", f"{R}.metrics.model.brier_skill",
    f"{R}.metrics.model.selective_acc_80", f"{R}.metrics.model.worst_class_f1",
    f"{R}.metrics.model.worst_class", f"{R}.metrics.model.exact.macro_f1",
    f"{R}.metrics.jev.macro_f1", f"{R}.metrics.jev.brier_skill",
    f"{R}.metrics.jev.selective_acc_80", f"{R}.metrics.jev.worst_class_f1",
    f"{R}.metrics.jev.exact.brier_skill",
    f"{R}.counts.model.tp.0", f"{R}.counts.model.true.1", f"{R}.counts.jev.pred.2",
    f"{R}.counts.model.brier_units", f"{R}.counts.jev.selective_correct",
    f"{R}.deltas.macro_f1", f"{R}.deltas.brier_skill", f"{R}.deltas.selective_acc_80",
    f"{R}.deltas.worst_class_f1", f"{R}.exact_deltas.selective_acc_80",
    f"{R}.margins.macro_f1", f"{R}.margins.worst_class_f1",
    f"{R}.gain", f"{R}.bootstrap.q05", f"{R}.bootstrap.q05_index", f"{R}.bootstrap.n_gain_le_0",
    f"{R}.bootstrap.seed", f"{R}.bootstrap.gains.17", f"{R}.bootstrap.gains.1999",
    f"{R}.bootstrap.gains_sha256", f"{R}.bootstrap.resamples",
    f"{R}.gain_is_real", f"{R}.nothing_collapses", f"{R}.beats",
    "overall.n_decisions", "overall.needed", "overall.won", "overall.beats",
    "overall.settling_decision", "overall.refunds_credit", "overall.failure_reason",
    "params.weights.brier_skill", "params.resamples", "params.max_drop.macro_f1", "params.stream",
]


@pytest.mark.parametrize("field", CHANGES)
def test_any_single_change_is_caught(
    audits: dict[str, dict[str, Any]], field: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    audit = copy.deepcopy(audits["single"])
    _at(field)(audit)
    path = tmp_path / "audit.json"
    path.write_bytes(audit_bytes(audit))
    code = verify_audit.main([str(path)])
    captured = capsys.readouterr()
    assert code != 0
    assert "DIFFERS" in captured.out or "not a valid audit" in captured.err
    assert "Traceback" not in captured.out + captured.err


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("multi", "decisions.1.rows.y.3"),
        ("multi", "decisions.2.rows.p_model.1.0"),
        ("multi", "decisions.1.report.beats"),
        ("multi", "overall.settling_decision"),
        ("choice", "decisions.0.rows.p_jev.6.0"),
        ("choice", "decisions.0.report.counts.model.pred.3"),
        ("refund", "overall.verdict"),
        ("refund", "overall.keep_if_loses"),
        ("kept", "overall.keep_if_loses"),
        ("failed", "overall.refunds_credit"),
        ("failed", "overall.beats"),
        ("failed", "overall.won"),
    ],
)
def test_changes_in_other_audits_are_caught(
    audits: dict[str, dict[str, Any]], name: str, field: str
) -> None:
    audit = copy.deepcopy(audits[name])
    if field == "overall.verdict":
        audit["overall"]["verdict"] = "beats"
    else:
        _at(field)(audit)
    assert _rejected(audit)


def _rejected(audit: dict[str, Any]) -> bool:
    """The verifier reports a difference (exit 1) or refuses the file (exit 2)."""
    try:
        return verify_audit.verify(audit) != []
    except verify_audit.Malformed:
        return True


def test_verdict_failed_without_reason_and_type_changes_are_caught(
    audits: dict[str, dict[str, Any]],
) -> None:
    audit = copy.deepcopy(audits["failed"])
    audit["overall"]["failure_reason"] = ""
    assert _rejected(audit)
    audit = copy.deepcopy(audits["single"])
    report = audit["decisions"][0]["report"]
    report["bootstrap"]["resamples"] = 2000.0  # same value, wrong type
    assert _rejected(audit)
    audit = copy.deepcopy(audits["choice"])
    n_options = audit["decisions"][0]["rows"]["n_options"]
    y = audit["decisions"][0]["rows"]["y"]
    i = next(i for i, yi in enumerate(y) if yi >= 1)
    n_options[i] = y[i]  # the right answer would no longer be offered
    assert any("not among" in d for d in verify_audit.verify(audit))
    audit = copy.deepcopy(audits["single"])
    audit["decisions"][0]["rows"]["sha256"].reverse()
    assert any("canonical order" in d for d in verify_audit.verify(audit))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "expected JSON"),
        (b"{not json", "expected JSON"),
        (b"\xff\xfe", "UTF-8"),
        (b"[]", "JSON object"),
        (b'{"format": "typestrict-refund-audit"}', "missing field 'audit_version'"),
        (b'{"format": "typestrict-refund-audit", "audit_version": 5}', "audit_version"),
        (b'{"format": "typestrict-refund-audit", "audit_version": 1.0}', "audit_version"),
        (b'{}', "format"),
        (b'{"format": "typestrict-refund-audit", "format": "x"}', "each key once"),
        (b'{"x": NaN}', "finite JSON numbers"),
    ],
)
def test_malformed_files_get_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "audit.json"
    path.write_bytes(content)
    code = verify_audit.main([str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "breakage",
    [
        lambda a: a.pop("overall"),
        lambda a: a["decisions"][0].pop("rows"),
        lambda a: a["decisions"][0]["rows"].pop("p_jev"),
        lambda a: a["decisions"][0]["rows"]["y"].pop(),
        lambda a: a["decisions"][0]["rows"]["p_model"][0].__setitem__(0, "0.5"),
        lambda a: a["decisions"][0]["rows"]["p_model"][0].__setitem__(0, 2.0),
        lambda a: a["decisions"][0]["rows"]["sha256"].__setitem__(0, "zz"),
        lambda a: a["decisions"][0].__setitem__("report", []),
        lambda a: a["decisions"][0]["report"].__setitem__("bootstrap", None),
        lambda a: a["decisions"][0].__setitem__("kind", "ranking"),
        lambda a: a["decisions"][0].__setitem__("answers", ["only"]),
        lambda a: a["overall"].__setitem__("verdict", "maybe"),
        lambda a: a.__setitem__("decisions", {}),
    ],
)
def test_missing_or_wrong_fields_exit_2_without_traceback(
    audits: dict[str, dict[str, Any]], breakage: Callable[[dict[str, Any]], None],
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    audit = copy.deepcopy(audits["single"])
    breakage(audit)
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(audit))
    assert verify_audit.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verify_audit: not a valid audit:") and "Traceback" not in err


def test_missing_file_and_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # nothing checked: its own exit status (4), never one of the classes of damage
    assert verify_audit.main([str(tmp_path / "nope.json")]) == 4
    assert "cannot read" in capsys.readouterr().err
    assert verify_audit.main([]) == 4
    assert "usage" in capsys.readouterr().err
    assert verify_audit.main(["--expect-sha256", "abc", "x.json"]) == 4
    assert "64 hex digits" in capsys.readouterr().err
    assert verify_audit.main(["--strict", "x.json"]) == 4
    assert verify_audit.main(["--help"]) == 0
    assert "exit status: 0 " in capsys.readouterr().out


def test_standalone_copy_runs_isolated_from_an_empty_folder(
    audits: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    shutil.copy(VERIFIER, folder / "verify_audit.py")
    (folder / "audit.json").write_bytes(audit_bytes(audits["multi"]))
    for flags in (["-I"], ["-I", "-S"]):  # -S: no site-packages at all, so stdlib only
        done = subprocess.run(
            [sys.executable, *flags, "verify_audit.py", "audit.json"],
            cwd=folder, capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "OK" in done.stdout
    broken = copy.deepcopy(audits["multi"])
    broken["decisions"][0]["report"]["gain"] += 1e-12
    (folder / "audit.json").write_bytes(audit_bytes(broken))
    done = subprocess.run(
        [sys.executable, "-I", "-S", "verify_audit.py", "audit.json"],
        cwd=folder, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 1
    assert "DIFFERS decisions[0] ('a').report.gain" in done.stdout
    assert "Traceback" not in done.stderr


def test_cli_sub_command_runs_the_same_code(
    audits: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.json"
    path.write_bytes(audit_bytes(audits["kept"]))
    assert cli_main(["verify", str(path)]) == 0
    assert "verdict kept" in capsys.readouterr().out
    broken = copy.deepcopy(audits["kept"])
    broken["overall"]["verdict"] = "refund"
    path.write_bytes(audit_bytes(broken))
    assert cli_main(["verify", str(path)]) == 1
    assert "overall.verdict: audit says 'refund', rebuilt 'kept'" in capsys.readouterr().out


@pytest.mark.parametrize("seed", range(5))
def test_selective_tail_window_is_exact_and_falls_back(seed: int) -> None:
    import random

    rng = random.Random(seed)
    n, drop = 60, 12
    rank = list(range(n))
    rng.shuffle(rank)
    correct_by_rank = [rng.randrange(2) for _ in range(n)]
    draws = [rng.randrange(n) for _ in range(n)]
    ranks = sorted(rank[i] for i in draws)
    expected = sum(correct_by_rank[r] for r in ranks[-drop:])
    for tail in (1, 5, drop, 20, n):  # windows too small to hold the drop force the full sort
        window = verify_audit._tail_window(rank, correct_by_rank, tail)
        assert verify_audit._dropped(draws, rank, correct_by_rank, window, drop) == expected
    window = verify_audit._tail_window(rank, correct_by_rank, 5)
    assert verify_audit._dropped(draws, rank, correct_by_rank, window, 0) == 0
    # the group bootstrap's version: groups of 1 to 4 rows, drawn with repeats
    members: list[list[int]] = []
    rows = list(range(n))
    while rows:
        members.append(rows[: rng.randint(1, 4)])
        rows = rows[len(members[-1]):]
    drawn = [rng.randrange(len(members)) for _ in members]
    all_ranks = [[rank[i] for i in m] for m in members]
    ranks = sorted(r for g in drawn for r in all_ranks[g])
    expected = sum(correct_by_rank[r] for r in ranks[-drop:])
    for tail in (1, 5, drop, 20, n):
        tails = [[r for r in g if r >= n - tail] for g in all_ranks]
        assert verify_audit._group_dropped(drawn, tails.__getitem__, all_ranks.__getitem__,
                                           correct_by_rank.__getitem__, drop) == expected


def test_draws_computed_in_blocks_are_the_one_by_one_formula() -> None:
    import hashlib
    import struct

    for n, resamples in ((1, 3), (7, 5), (2000, 3), (300_000, 5)):  # 300,000: blocks of 3
        data = hashlib.shake_256(b"draws").digest(4 * n * resamples)
        words = struct.unpack(f"<{n * resamples}I", data)
        expected = [[(u * n) >> 32 for u in words[n * r:n * (r + 1)]] for r in range(resamples)]
        assert list(verify_audit._draw_blocks(data, n, resamples)) == expected


@pytest.mark.parametrize("seed", range(24))
def test_verifier_agrees_with_the_producer_on_random_small_decisions(seed: int) -> None:
    import random

    rng = random.Random(seed)
    decisions = [
        synthetic_decision(
            seed=1000 * seed + i,
            n=rng.choice([1, 2, 3, 5, 7, 12, 30]),
            n_answers=rng.randrange(2, 6),
            name=f"d{i}",
            ties=rng.random() < 0.6,
            multiple_choice=rng.random() < 0.3,
            skew=rng.choice([0.0, 4.0]),
            model_skill=rng.random() * 2,
            jev_skill=rng.random() * 2,
        )
        for i in range(rng.randrange(1, 4))
    ]
    audit = build_audit(judge(decisions, keep_if_loses=rng.random() < 0.5), training_id="t",
                        model_id="m", jev_id="j")
    assert verify_audit.verify(json.loads(audit_bytes(audit))) == []


def test_typestrict_verify_says_every_exit_status_it_can_return(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    """Its help named 0, 1 and 2 only, while a file it cannot read is 4 (the verifier's own)."""
    from typestrict_pipeline.cli import main

    assert main(["verify", str(tmp_path / "nope.json")]) == verify_audit.EXIT_CANNOT_CHECK
    capsys.readouterr()
    assert main(["verify", "--help"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    for code in (verify_audit.EXIT_OK, verify_audit.EXIT_DIFFERS, verify_audit.EXIT_MALFORMED,
                 verify_audit.EXIT_CANNOT_CHECK):
        assert f"{code}: {verify_audit.EXIT_CODES[code]}" in said, code
