"""The README is executable truth: every command of its "Using it" table, parsed from README.md,
runs as written against the demo's state.

The demo's state is what ``make demo`` writes, run verbatim once for the module in ``<tmp>``, a
folder that holds links to this checkout's ``.venv``, packages, ``Makefile`` and
``workspace.yaml``: ``make demo`` writes ``<tmp>/.typestrict``, the checkout's default home, and each
command then runs verbatim from there with no setting: ``TYPESTRICT_HOME``, ``DAGSTER_HOME`` and
``TYPESTRICT_STORE_URL`` are all unset, as for a newcomer.

``.venv/bin/typestrict ...`` commands run in this process through the same ``main()`` the entry
point calls (the entry point itself is run once as a subprocess); ``python3 ...`` and
``make ui`` run as subprocesses (``make ui`` on a free port, given as ``UI_PORT``, until its
GraphQL endpoint lists the demo's runs; a server command the table names more than once runs
where it last appears, see ``SERVER_COMMANDS``).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.test_api_support as api_support
from tests.demo_checkout import demo_checkout, newcomer_env
from tests.test_api_walkthrough import walkthrough_blocks
from typestrict_pipeline.cli import main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
API_DOC = REPO / "docs" / "api.md"
PROGRAMS = (".venv/bin/typestrict ", "python3 ", "make ui", "make api")


def readme_commands(text: str) -> list[str]:
    """The commands of the README's "Using it" table, in order: the code spans of its rows that
    start with a program a user runs."""
    section = text.split("## Using it", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| to ")]
    spans = [span for row in rows for span in re.findall(r"`([^`]+)`", row)]
    return [s for s in spans if s.startswith(PROGRAMS)]


def test_the_table_has_the_commands_a_newcomer_needs() -> None:
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert commands[0] == "make ui"
    for needed in ("credits balance demo", "audit ", "verify_audit.py", "backtest run", "usage demo",
                   "study run", "study leaderboard", "schedule enable", "schedule status", "data append"):
        assert any(needed in c for c in commands), needed
    assert all(c.startswith(PROGRAMS) for c in commands)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The checkout after ``make demo`` (:func:`demo_checkout.demo_checkout`: one ``make demo``
    for this file and the browser console's, put back as made for each), and the working
    directory."""
    root = demo_checkout(tmp_path_factory)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for name in ("TYPESTRICT_HOME", "DAGSTER_HOME", "TYPESTRICT_STORE_URL"):
            mp.delenv(name, raising=False)
        yield root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graphql(port: int, query: str) -> dict[str, object] | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/graphql", json.dumps({"query": query}), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        return json.loads(body) if resp.status == 200 else None
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    """Stop a server started in its own session (SIGTERM, then SIGKILL after 60 s); its output."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


def _make_ui(command: str, root: Path) -> None:
    """``make ui`` serves the demo's runs: poll its GraphQL endpoint (generous timeout), then stop it."""
    # `make ui` depends on the virtualenv's stamp; it must not re-install from this temporary copy.
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=root, capture_output=True, check=False)
    assert stale.returncode == 0, "the virtualenv is older than pyproject.toml: run `make .venv/.installed` first"
    port = _free_port()
    env = newcomer_env()
    env["UI_PORT"] = str(port)
    proc = subprocess.Popen(shlex.split(command), cwd=root, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    runs: list[object] = []
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and proc.poll() is None:
            answer = _graphql(port, "{ runsOrError { ... on Runs { results { runId status } } } }")
            data = answer.get("data") if answer else None
            if isinstance(data, dict):
                runs = data["runsOrError"]["results"]
                break
            time.sleep(2)
        # The README: a schedule just enabled "fires at its first evaluation, within a minute of
        # `make ui` starting the daemon". The webserver can answer before the daemon's first sensor
        # tick (or after it, on a busy machine): keep serving until every enabled schedule was
        # evaluated at least once, as a reader who waits that minute sees it.
        while runs and time.monotonic() < deadline and proc.poll() is None and _unevaluated_schedules():
            time.sleep(2)
        unevaluated = _unevaluated_schedules()
    finally:
        out = _stop(proc)
    text = out.decode(errors="replace")
    assert runs, f"`make ui` did not serve the demo's runs on port {port}:\n{text[-3000:]}"
    assert f"DAGSTER_HOME={root.resolve()}/.typestrict/dagster_home" in text
    assert not unevaluated, f"`make ui`'s daemon did not evaluate schedules {unevaluated}:\n{text[-3000:]}"


def _unevaluated_schedules() -> list[int]:
    """The enabled re-run schedules of the working directory's store that no tick evaluated yet."""
    from typestrict_pipeline.reruns.service import list_schedules
    from typestrict_pipeline.reruns.tables import ScheduleState
    from typestrict_pipeline.store import default_store_url, open_store

    engine = open_store(default_store_url())
    try:
        return [v.id for v in list_schedules(engine)
                if v.state is ScheduleState.ENABLED and v.last_tick_at is None]
    finally:
        engine.dispose()


def _make_api(command: str, root: Path) -> None:
    """``make api`` serves the customer API: poll its OpenAPI schema (generous timeout), then stop it."""
    port = _free_port()
    env = newcomer_env()
    env["API_PORT"] = str(port)
    proc = subprocess.Popen(shlex.split(command), cwd=root, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    schema: dict[str, object] | None = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", "/v1/openapi.json")
                resp = conn.getresponse()
                body = resp.read()
                if resp.status == 200:
                    schema = json.loads(body)
                    break
            except (OSError, ValueError):
                pass
            finally:
                conn.close()
            time.sleep(1)
    finally:
        out = _stop(proc)
    assert schema is not None, f"`make api` did not serve /v1/openapi.json on port {port}:\n{out.decode(errors='replace')[-3000:]}"
    paths = schema["paths"]
    assert isinstance(paths, dict) and any(str(path).startswith("/v1/models") for path in paths)
    assert out.decode(errors="replace").startswith("typestrict api: Jev is the demo's stand-in"), out[:2000]


# The README's server commands, run where they last appear: the rows name the same `make ui` three
# times on a state that only grows (the demo's runs, then a backtest's, then a schedule just
# enabled), and its last run checks all of it: every run served, every enabled schedule evaluated
# by the daemon it starts. Starting the same servers three times (about 40 s each on two cores)
# would check nothing more.
SERVER_COMMANDS = ("make ui", "make api")


# What each command must print (beyond exit code 0 and no traceback), by its start.
EXPECT = {
    "credits balance demo": "workspace demo: balance",
    "credits ledger demo": "kind",
    "credits models demo": "rt-tiny",
    "audit rt-tiny -o audit.json": "wrote the audit of rt-tiny to audit.json (",
    "verify audit.json": "every number matches",
    "verify_audit.py audit.json": "every number matches",
    "backtest run seattle_rain": "backtest id",
    "backtest list": "seattle_rain",
    "run seattle_rain --as-of": "Live decision",
    "usage demo": "studies",
    "study run": "| Adjusted |",
    "study list": "seattle_rain: threshold 0.4..0.6 (3 values) on demo_seattle_live",  # the README's, named
    "study leaderboard 1": "| Adjusted |",
    "schedule enable 7": "fires: fires at its next evaluation: 10 unseen steps, 5 needed",
    "schedule status": "last decision: fired at ",  # the demo's schedule on demo_seattle_live
    "study status 7": "re-run study 7 every 1h — ENABLED",
    "schedule lineage 7": "Lineage of study 7",
    "data show demo_seattle_live": "demo_seattle_live",
    "data append demo_seattle_live": "(re-runs study 7 every 1h) reads them at its next evaluation",
    "schedule outbox": "A scheduled study changes its winner",
    "schedule notifications": "'A scheduled study changes its winner' off",
    "api-key list demo": "key(s)",
}


def _expected(command: str) -> str | None:
    return next((v for k, v in EXPECT.items() if k in command), None)


def test_every_command_of_the_readme_runs_as_written(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    audit_written = False
    for k, command in enumerate(commands):
        capsys.readouterr()
        if command.startswith(SERVER_COMMANDS):
            if command not in commands[k + 1:]:
                (_make_ui if command.startswith("make ui") else _make_api)(command, checkout)
            continue
        argv = shlex.split(command)
        if argv[0] == "python3":
            assert audit_written, "the README verifies audit.json before writing it"
            proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=600,
                                  check=False)
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        else:
            assert argv[0] == ".venv/bin/typestrict" and os.access(checkout / argv[0], os.X_OK)
            code = main(argv[1:])
            captured = capsys.readouterr()
            out, err = captured.out, captured.err
            audit_written = audit_written or "-o audit.json" in command
        assert code == 0, f"{command!r} exited {code}:\n{out[-2000:]}\n{err[-2000:]}"
        assert "Traceback" not in err, command
        expected = _expected(command)
        if expected is not None:
            assert expected in out, f"{command!r} did not print {expected!r}:\n{out[-2000:]}"
    assert (checkout / "audit.json").is_file()


def test_the_entry_point_reads_the_demo_home_without_any_setting(checkout: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TYPESTRICT_HOME", "DAGSTER_HOME", "TYPESTRICT_STORE_URL")}
    proc = subprocess.run([".venv/bin/typestrict", "credits", "balance", "demo", "--json"], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["has_account"] is True


def test_the_api_walkthrough_runs_as_written_on_the_same_demo(checkout: Path) -> None:
    """docs/api.md's walkthrough, its ``sh`` blocks in order in one bash, with the real
    ``typestrict`` and curl, against ``make api`` on the home ``make demo`` left (the demo's Jev
    stand-in, named on the server's first line). What the doc leaves to the operator's Dagster
    daemon (``training_sensor`` and the ``verdict_job`` it requests) is done here as production
    does it once the predictions are posted: the verdict asks the stand-in Jev over HTTP."""
    home = checkout / ".typestrict"
    work = checkout / "customer"
    work.mkdir()
    store = f"sqlite:///{home / 'store.db'}"
    script = "\n".join(walkthrough_blocks(API_DOC.read_text(encoding="utf-8")))
    before = {p.name for p in (home / "trainings").iterdir()}
    with api_support.make_api(home, api_support.free_port()) as server:
        server.wait_ready()
        first = server.lines[0]
        assert first.startswith("typestrict api: Jev is the demo's stand-in"), server.lines
        assert "not a real model" in first and str(home.resolve()) in first
        env = {**newcomer_env(), "API": server.url, "TYPESTRICT_HOME": str(home),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        judged: list[str] = []
        failures: dict[str, str] = {}

        def daemon() -> None:  # what the Dagster daemon does once the predictions arrive
            deadline = time.monotonic() + 600
            try:
                while time.monotonic() < deadline and not judged:
                    if [p for p in (home / "trainings").glob("*/manifest.json") if p.parent.name not in before]:
                        judged.extend(api_support.run_verdicts(home, store, failures,
                                                               dagster_home=home / "dagster_home"))
                        return
                    time.sleep(0.5)
            except Exception as exc:  # said by the assertion below, not lost with the thread
                failures["the daemon's work"] = repr(exc)

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
    # Nothing the API gave the customer (the answers printed, the files saved) names the server's
    # folders; the operator's own commands of the walkthrough (`typestrict api-key create`) may.
    server_folder = str(checkout.resolve())
    answers = [("an answer printed", line) for line in out.splitlines() if line.startswith(("{", "["))]
    saved = [(str(p.relative_to(work)), p.read_text(encoding="utf-8", errors="replace"))
             for p in sorted(work.rglob("*")) if p.is_file()]
    assert answers and len(saved) >= 3, (answers, [name for name, _ in saved])
    for name, received in answers + saved:
        assert server_folder not in received, f"{name} names the server's folder {server_folder}: {received[:300]}"
    assert (work / "audit.json").read_bytes() == (home / "audits" / f"{judged[0]}.json").read_bytes()
