"""docs/api.md run as written: ``make api`` on a demo home (the demo's Jev stand-in, named on the
server's first line), then the walkthrough's ``sh`` blocks, in order, in one bash, with the real
``typestrict`` command and curl; and a server with no Jev refuses to start.

The one thing the doc leaves to the operator's Dagster daemon (``training_sensor`` and the
``verdict_job`` it requests) is done here as production does it, once the walkthrough has posted
its predictions: the verdict asks the stand-in Jev that ``make api`` started, over HTTP.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def walkthrough_blocks(text: str) -> list[str]:
    """The ``sh`` blocks of the "Walkthrough" section, in order."""
    section = text.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def test_the_doc_has_the_promised_steps() -> None:
    blocks = walkthrough_blocks(DOC.read_text(encoding="utf-8"))
    joined = "\n".join(blocks)
    for step in ("api-key create", "reviews.csv", "/v1/files/", "/v1/trainings\"", "/split",
                 "/predictions", "/v1/models/$TRAINING\"", "/audit", "trained_on_ids",
                 'verify_audit.py --expect-sha256 "$SETTLED" audit.json'):
        assert step in joined, step


@pytest.mark.slow
def test_make_api_on_the_demo_home_runs_the_walkthrough_as_written(tmp_path: Path) -> None:
    home = support.demo_like_home(tmp_path / "home")
    work = tmp_path / "customer"
    work.mkdir()
    store = f"sqlite:///{home / 'store.db'}"
    script = "\n".join(walkthrough_blocks(DOC.read_text(encoding="utf-8")))
    # `make api` depends on the virtualenv's stamp: its first line is the server's only when it
    # does not install first.
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=support.REPO, capture_output=True, check=False)
    assert stale.returncode == 0, "the virtualenv is older than pyproject.toml: run `make .venv/.installed` first"
    with support.make_api(home, support.free_port()) as server:
        server.wait_ready()
        first = server.lines[0]
        assert first.startswith("typestrict api: Jev is the demo's stand-in"), server.lines
        assert "not a real model" in first and str(home) in first
        env = {**os.environ, "API": server.url, "TYPESTRICT_HOME": str(home),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("TYPESTRICT_STORE_URL", None)
        judged: list[str] = []
        failures: dict[str, str] = {}

        def daemon() -> None:  # what the Dagster daemon does once the predictions arrive
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not judged:
                if list((home / "trainings").glob("tr_*/manifest.json")):
                    judged.extend(support.run_verdicts(home, store, failures))
                    return
                time.sleep(0.5)

        thread = threading.Thread(target=daemon, daemon=True)
        thread.start()
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        thread.join(timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr + "\n".join(server.lines)
    assert len(judged) == 1 and not failures, failures
    out = done.stdout
    assert re.search(r"\d+ rows to train on, \d+ held out", out)
    assert re.search(r"^(beats|refund) settled by sentiment$", out, flags=re.M), out
    assert "tsk_" not in out  # the key is never printed by the walkthrough
    assert (work / "audit.json").read_bytes() == (home / "audits" / f"{judged[0]}.json").read_bytes()


@pytest.mark.slow
def test_a_server_without_jev_refuses_to_start_and_names_the_flag(tmp_path: Path) -> None:
    home = tmp_path / "not-a-demo"
    home.mkdir()
    port = support.free_port()
    served = support.make_api(home, port)
    try:
        code = served.proc.wait(timeout=120)
    finally:
        served.stop()
    said = "\n".join(served.lines)
    assert code != 0 and "--jev-source" in said and "TYPESTRICT_API_JEV_SOURCE" in said, said
    assert "Traceback" not in said
    assert not (home / "store.db").exists()  # refused before anything was made
