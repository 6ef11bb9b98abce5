"""The verify command every door prints for an audit is one that verifies it.

``verify_audit.py`` verifies an audit of more than 4,000 test examples or 80,000 examples x
answers (in all its decisions) only with ``--large``; without it, it exits 2, "not a valid audit:
... re-run with --large". The result page (``GET /v1/models/{id}/page``), the console's result
page and ``typestrict audit -o`` printed the command without it, so for a training of three full
decisions (6,000 test examples) or of one of 41 answers and more (2,000 x 41 = 82,000) the command
the customer is told to run said their audit was not valid. Each door now says ``--large`` when
the audit needs it (``verify_audit.needs_large``, the verifier's own rule), and only then.

The audits here are real (judged and settled); each printed command is run as printed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.test_api_support import ApiServer, new_key
from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import CreditLedger, SettlementRequest, settle_training
from typestrict_pipeline.refund.audit import build_audit
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.store import open_store

VERIFIER = Path(__file__).resolve().parents[1] / "typestrict_pipeline" / "verify_audit.py"
SHAPES = {"tr_big": (1000, 81), "tr_small": (300, 2)}  # 81,000 examples x answers: --large; 600: not


def _settle(url: str, tmp_path: Path) -> dict[str, bytes]:
    engine = open_store(url)
    audits = {}
    try:
        CreditLedger(engine).grant("acme", len(SHAPES), reference="inv-large")
        for model, (n, answers) in SHAPES.items():
            judgement = judge([synthetic_decision(seed=5, n=n, n_answers=answers, model_skill=0.8,
                                                  jev_skill=0.6)], keep_if_loses=False)
            audit = (json.dumps(build_audit(judgement, training_id=model, model_id=model, jev_id="jev"),
                                separators=(",", ":")) + "\n").encode()
            settle_training(engine, SettlementRequest(
                workspace_id="acme", training_id=model, verdict=judgement.verdict, reason="test",
                keep_if_loses=False, model_dir=tmp_path / model, audit_json=audit))
            audits[model] = audit
    finally:
        engine.dispose()
    return audits


def _run(command: str, audit: Path) -> subprocess.CompletedProcess[str]:
    """``command`` (``python3 verify_audit.py [flags] FILE``) as printed, on ``audit``."""
    words = shlex.split(command)
    assert words[0] == "python3" and words[1].endswith("verify_audit.py"), command
    return subprocess.run([sys.executable, str(VERIFIER), *words[2:-1], str(audit)],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def settled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("large")
    url = f"sqlite:///{tmp / 'store.db'}"
    audits = _settle(url, tmp)
    files = {}
    for model, data in audits.items():
        files[model] = tmp / f"{model}.json"
        files[model].write_bytes(data)
    return url, tmp, files


def test_the_cli_prints_large_when_the_audit_needs_it(settled: tuple[str, Path, dict[str, Path]],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    url, tmp, _ = settled
    for model, large in (("tr_big", True), ("tr_small", False)):
        out = tmp / f"cli-{model}.json"
        assert main(["audit", model, "--store", url, "-o", str(out)]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("check it: "))
        command = line.removeprefix("check it: ")
        assert ("--large" in command) is large, command
        done = _run(command, out)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert hashlib.sha256(out.read_bytes()).hexdigest() in command


def test_the_result_pages_print_large_when_the_audit_needs_it(settled: tuple[str, Path, dict[str, Path]]) -> None:
    url, tmp, files = settled
    key = new_key(url, "acme")
    with ApiServer(url, tmp / "home", rate_limit=None) as server, server.client(key) as client, \
            httpx.Client(base_url=server.url, timeout=120) as browser:
        sign_in = browser.get("/console/sign-in").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', sign_in)
        assert token is not None
        assert browser.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key}).status_code == 303
        for model, large in (("tr_big", True), ("tr_small", False)):
            page = client.get(f"/v1/models/{model}/page")
            assert page.status_code == 200, page.text
            found = re.search(r'<pre id="verify">[^<]*\n(python3 verify_audit\.py [^<\n]*)</pre>', page.text)
            assert found is not None, page.text[-800:]
            console = browser.get(f"/console/models/{model}")
            assert console.status_code == 200, console.text
            shown = re.search(r'<pre id="verify-command">([^<]*)</pre>', console.text)
            assert shown is not None
            for command in (found.group(1), shown.group(1)):
                assert ("--large" in command) is large, command
                done = _run(command, files[model])
                assert done.returncode == 0, (command, done.stdout, done.stderr)
