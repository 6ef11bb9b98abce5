"""``typestrict credits ...`` and ``typestrict audit MODEL_ID`` (byte-identical to the audit file)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import CreditLedger, SettlementRequest, settle_training
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def _settled_with_audit(url: str, tmp_path: Path, n: int = 80) -> tuple[Path, Verdict]:
    judgement = judge([synthetic_decision(seed=3, n=n, n_answers=3, ties=True)],
                      keep_if_loses=True, resamples=200)
    audit = write_audit(tmp_path / "audits" / "tr_9.json",
                        build_audit(judgement, training_id="tr_9", model_id="m9", jev_id="jev"))
    engine = open_store(url)
    CreditLedger(engine).grant("acme", 2, reference="inv-1", now=T0)
    settle_training(engine, SettlementRequest("acme", "tr_9", judgement.verdict, "r",
                                              keep_if_loses=True, model_dir=tmp_path / "m",
                                              audit_json=audit.read_bytes()), now=T0)
    engine.dispose()
    return audit, judgement.verdict


def test_audit_command_prints_the_audit_file_byte_for_byte(sqlite_url: str, tmp_path: Path) -> None:
    audit, _ = _settled_with_audit(sqlite_url, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "typestrict_pipeline.cli", "audit", "tr_9", "--url", sqlite_url],
        capture_output=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == audit.read_bytes()
    out = tmp_path / "copy.json"
    assert main(["audit", "tr_9", "--url", sqlite_url, "-o", str(out)]) == 0
    assert out.read_bytes() == audit.read_bytes()


def _audit_with_a_file_size_limit(url: str, out: Path, limit: int) -> subprocess.CompletedProcess[bytes]:
    import resource
    import signal

    def limited() -> None:  # a full disk, as far as this process can tell: writes past `limit` fail
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "audit", "tr_9", "--store", url,
                           "-o", str(out)], capture_output=True, check=False, preexec_fn=limited)


def test_audit_output_is_written_whole_or_left_as_it_was(sqlite_url: str, tmp_path: Path) -> None:
    """``audit -o FILE`` that fails midway (here a file size limit below the audit's size) keeps the
    file it would replace; it left the audit's first bytes in its place."""
    audit, _ = _settled_with_audit(sqlite_url, tmp_path, n=800)
    out = tmp_path / "keep" / "audit.json"
    out.parent.mkdir()
    out.write_bytes(b'{"an": "older audit"}')
    limit = 64 * 1024  # room for the store's own small files (its WAL index is 32 KiB), not the audit
    assert audit.stat().st_size > limit + 32 * 1024
    proc = _audit_with_a_file_size_limit(sqlite_url, out, limit)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "expected a file path that can be written, got" in err and "Traceback" not in err, err
    assert out.read_bytes() == b'{"an": "older audit"}'
    assert sorted(p.name for p in out.parent.iterdir()) == ["audit.json"]  # no temporary file left


@pytest.mark.parametrize(("target", "got"), [
    ("/dev/null", "'/dev/null', a character device"),
    ("{tmp}", "a directory"),
    ("{tmp}/no/such/folder/a.json", "whose folder does not exist"),
])
def test_audit_output_refuses_what_is_not_a_file_it_can_write(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, got: str
) -> None:
    _settled_with_audit(sqlite_url, tmp_path)
    capsys.readouterr()
    assert main(["audit", "tr_9", "--store", sqlite_url, "-o", target.format(tmp=tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "expected a file path that can be written" in err and got in err, err
    assert not (tmp_path / "no").exists()


def test_a_repeated_spend_of_a_settled_training_opens_nothing(
        sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``credits spend WS T`` again after T's verdict settled says it wrote nothing, and now also
    writes nothing: it opened T "awaiting predictions" with a new deadline, which ``training
    show`` then reported and ``training expire`` ended as "expired"."""
    from typestrict_pipeline.lifecycle.trainings import training_status

    _settled_with_audit(sqlite_url, tmp_path)
    engine = open_store(sqlite_url)
    before = training_status(engine, "tr_9")
    capsys.readouterr()
    assert main(["credits", "spend", "acme", "tr_9", "--store", sqlite_url]) == 0
    assert "wrote nothing to the store" in capsys.readouterr().out
    assert training_status(engine, "tr_9") == before
    engine.dispose()


def test_audit_command_names_a_missing_model(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    open_store(sqlite_url).dispose()
    assert main(["audit", "nope", "--url", sqlite_url]) == 2
    assert "expected a model with id 'nope', got none in the store" in capsys.readouterr().err


def test_balance_and_ledger_commands(store_url: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _, verdict = _settled_with_audit(store_url, tmp_path)
    refund = 1 if verdict.refunds_credit else 0
    assert main(["credits", "balance", "acme", "--url", store_url]) == 0
    balance = 1 + refund
    assert capsys.readouterr().out == f"workspace acme: balance {balance} credit{'s' if balance != 1 else ''}\n"
    assert main(["credits", "ledger", "acme", "--url", store_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Ledger of workspace acme"
    assert out[1].split() == ["#", "time", "(UTC)", "kind", "amount", "balance", "training", "verdict", "reason"]
    rows = [line.split() for line in out[3:6]]
    assert rows[0][3:6] == ["grant", "+2", "2"]
    assert rows[1][3:7] == ["spend", "-1", "1", "tr_9"]
    assert rows[2][3:8] == ["settlement", f"+{refund}", str(balance), "tr_9", verdict.value]
    assert out[-1] == f"balance {balance} (3 entries)"
    assert main(["credits", "ledger", "acme", "--json", "--training", "tr_9", "--url", store_url]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["credits", "balance", "ghost", "--url", store_url]) == 2  # unknown: says so
    assert "expected a workspace the store knows, got 'ghost' (known: acme)" in capsys.readouterr().err


def test_grant_spend_adjust_and_refusals(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["credits", "grant", "w", "1", "--reference", "a", "--url", sqlite_url, "--new-store"]) == 0
    assert main(["credits", "spend", "w", "t1", "--url", sqlite_url]) == 0
    capsys.readouterr()
    assert main(["credits", "spend", "w", "t2", "--url", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert "expected at least 1 credit(s) in workspace 'w' for spend 't2', got 0" in err
    assert "typestrict credits grant w N --reference KEY" in err
    assert main(["credits", "adjust", "w", "1", "--reference", "T-1", "--reason", "goodwill",
                 "--url", sqlite_url]) == 0
    assert main(["credits", "expire", "--now", "2026-01-01T00:00:00", "--url", sqlite_url]) == 2
    assert "expected --now as an ISO 8601 time with a zone" in (err := capsys.readouterr().err)
    assert "got '2026-01-01T00:00:00', which has no zone" in err
    assert main(["credits", "models", "w", "--url", sqlite_url]) == 0
    assert main(["credits", "balance", "w", "--url", sqlite_url]) == 0
    assert capsys.readouterr().out.endswith("workspace w: balance 1 credit\n")


@pytest.mark.parametrize(("now", "why"), [
    ("9999-12-31T23:59:59Z", "got '9999-12-31T23:59:59Z'. "),  # past 2199: would expire every model
    ("2200-01-01T00:00:00+00:00", "got '2200-01-01T00:00:00+00:00'. "),
    ("1899-12-31T23:59:59Z", "got '1899-12-31T23:59:59Z'. "),
    ("2014-02-30", "got '2014-02-30', which is not a calendar date"),  # not "add the zone"
    ("2014-02-30T04:00:00Z", "got '2014-02-30T04:00:00Z', which is not a calendar date"),
    ("2026-06-01T24:30:00Z", "which is not a time of day"),
])
def test_expire_refuses_a_now_outside_the_years_or_the_calendar_and_deletes_nothing(
        sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], now: str, why: str) -> None:
    """``credits expire --now`` is read like every time option: 1900 to 2199, a real calendar
    date, with its zone; a refused one deletes no file and marks no model expired."""
    root = tmp_path / "trainings"
    files = root / "tr_9" / "model"
    files.mkdir(parents=True)
    (files / "weights.bin").write_bytes(b"w")
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("acme", 1, reference="inv-1", now=T0)
    settle_training(engine, SettlementRequest("acme", "tr_9", Verdict.BEATS, "r", keep_if_loses=False,
                                              model_dir=files, audit_json=b"{}"), now=T0)
    engine.dispose()
    assert main(["credits", "expire", "--now", now, "--trainings-dir", str(root), "--url", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert "expected --now as an ISO 8601 time with a zone from 1900-01-01 to 2199-12-31" in err
    assert why in err and "Write the time with its zone, e.g. --now 2026-01-31T04:00:00Z" in err
    assert (files / "weights.bin").read_bytes() == b"w"
    assert main(["credits", "models", "acme", "--json", "--url", sqlite_url]) == 0
    assert '"state": "available"' in capsys.readouterr().out
    # the same sweep inside the years expires it (the refusal was the time, not the model)
    assert main(["credits", "expire", "--now", "2199-12-31T00:00:00Z", "--trainings-dir", str(root),
                 "--url", sqlite_url]) == 0
    assert not files.exists()


def test_grant_refuses_a_reference_used_for_another_workspace_or_amount(
        sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--url", sqlite_url]
    assert main(["credits", "grant", "demo", "20", "--reference", "fuzz", *url, "--new-store"]) == 0
    capsys.readouterr()
    for ws, amount in (("other", "5"), ("demo", "5")):
        assert main(["credits", "grant", ws, amount, "--reference", "fuzz", *url]) == 2
        err = capsys.readouterr().err
        assert f"expected a reference of its own for a grant of +{amount} to workspace '{ws}'" in err
        assert "got 'fuzz', the reference of ledger entry #1 (grant +20 to workspace 'demo'" in err
        assert "Write this grant under a new reference" in err and "Traceback" not in err
    assert main(["credits", "grant", "other", "5", "--reference", "fuzz-2", *url]) == 0  # what to do
    assert main(["credits", "grant", "demo", "20", "--reference", "fuzz", *url]) == 0  # the same: a no-op
    assert "wrote nothing to the store" in capsys.readouterr().out
    assert main(["credits", "balance", "demo", *url]) == 0
    assert main(["credits", "balance", "other", *url]) == 0
    assert capsys.readouterr().out.splitlines() == ["workspace demo: balance 20 credits",
                                                    "workspace other: balance 5 credits"]
