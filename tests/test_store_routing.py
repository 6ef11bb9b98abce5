"""One store per command, end to end: every command that writes or launches work, given a second
store with ``--store``, acts on that store and leaves the first exactly as it was.

The first store is the home's SQLite store (``TYPESTRICT_HOME``, also ``TYPESTRICT_STORE_URL``'s
default) holding objects with the ids a misrouted command would hit: study 1, a ``PENDING`` study of
workspace ``victim`` holding its workflow's lock; study 2, a finished study with a USD budget and a
schedule (schedule 1) re-running it; credits and an API key of ``victim``. The second store is a
scratch database on the real PostgreSQL server. After each command the first store's full dump is
compared with the one before (byte for byte), and the commands that launch work are checked to have
done it in the second store (the study run, the backtest, the live run).

The API is the same rule for requests: a server given the second store, in a process whose
environment names the first, creates a study in the second only, and the study_job run it launches
names the second store in its config. A study_job run given an
unreachable store fails with the product's message, and the study it never started is marked failed
with its lock released.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.form import StudyForm, study_config
from typestrict_pipeline.study.service import create_study_from_config
from typestrict_pipeline.study.tables import StudyRow

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

LIMITS = ["--start", "2012-01-01", "--end", "2012-12-01", "--tune-steps", "20", "--eval-steps", "20",
          "--holdout-steps", "20", "--grid", "skill=0.5,0.6", "--max-candidates", "2",
          "--max-total-steps", "1000", "--synthetic"]


def _form(workspace: str, workflow: str, **extra: Any) -> StudyForm:
    return StudyForm(workflow=workflow, start="2012-01-01", end="2012-12-01", tune_steps=20, eval_steps=20,
                     holdout_steps=20, grid=["skill=0.5,0.6"], synthetic=True, max_candidates=2,
                     max_total_steps=1000, workspace=workspace, **extra)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The first store, with the objects a misrouted command would hit."""
    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.reruns.service import enable_schedule
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import study_backend

    root = tmp_path_factory.mktemp("first-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYPESTRICT_HOME", str(root))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        mp.delenv("DAGSTER_HOME", raising=False)
        mp.delenv("TYPESTRICT_USER", raising=False)
        engine = open_store(f"sqlite:///{root / 'store.db'}")
        pending = create_study_from_config(engine, study_config(_form("victim", "wx")))
        assert pending == 1
        done = create_study_from_config(engine, study_config(_form("victim", "wx2", min_unseen_steps=5)))
        run_study_local(engine, done, study_backend(engine, done))
        with session_scope(engine) as s:  # a USD budget, as a schedule needs (set after the run)
            s.get(StudyRow, done).budget_micro = 1_000_000  # type: ignore[union-attr]
        enable_schedule(engine, StoreStudies(engine), study_id=str(done), cadence="1d", owner="ana@example.com")
        ledger = CreditLedger(engine)
        ledger.grant("victim", 5, reference="inv-1")
        ledger.spend("victim", "t1")
        create_api_key(engine, "victim", label="first")
        engine.dispose()
        yield root


def dump(root: Path) -> str:
    conn = sqlite3.connect(root / "store.db")
    try:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
    finally:
        conn.close()


def _second(pg_url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _key_id(root: Path) -> str:
    conn = sqlite3.connect(root / "store.db")
    try:
        return str(conn.execute("SELECT key_id FROM api_keys").fetchone()[0])
    finally:
        conn.close()


# Every command that writes or launches work, with its arguments (``{key}``: the first store's API
# key id, which a misrouted revoke would revoke). Each runs on a fresh second store; some fail
# there (nothing to cancel, no credits), which must not touch the first store either.
COMMANDS: list[tuple[str, list[str]]] = [
    ("study run", ["study", "run", "wx2", "--workspace", "attacker", *LIMITS]),
    ("backtest run", ["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-01-05",
                      "--workspace", "attacker"]),
    ("run (live)", ["run", "seattle_rain", "--as-of", "2015-06-01T00:00:00Z", "--workspace", "attacker"]),
    ("backtest activate", ["backtest", "activate", "seattle_rain", "--param", "threshold=0.6",
                           "--workspace", "victim"]),
    ("study cancel", ["study", "cancel", "1"]),
    ("study delete", ["study", "delete", "2"]),
    ("study promote", ["study", "promote", "2"]),
    ("credits grant", ["credits", "grant", "victim", "3", "--reference", "inv-2"]),
    ("credits spend", ["credits", "spend", "victim", "t2"]),
    ("credits adjust", ["credits", "adjust", "victim", "-1", "--reference", "adj-1", "--reason", "fix"]),
    ("credits expire", ["credits", "expire"]),
    ("store init", ["store", "init"]),
    ("store upgrade", ["store", "upgrade"]),
    ("schedule enable", ["schedule", "enable", "2", "--cadence", "1h", "--owner", "ana@example.com"]),
    ("schedule cancel", ["schedule", "cancel", "1", "--by", "ana@example.com"]),
    ("schedule tick --run", ["schedule", "tick", "--run", "--now", "2030-01-01T00:00:00Z"]),
    ("schedule data-arrived", ["schedule", "data-arrived", "victim", "wx2", "2013-06-01T00:00:00Z"]),
    ("schedule workspace", ["schedule", "workspace", "victim", "--subscription", "EXPIRED"]),
    ("schedule notifications", ["schedule", "notifications", "ana@example.com", "--off"]),
    ("schedule deliver", ["schedule", "deliver"]),
    ("study schedule enable", ["study", "schedule", "enable", "2", "--cadence", "1h", "--owner", "ana@example.com"]),
    ("study schedule cancel", ["study", "schedule", "cancel", "1", "--by", "ana@example.com"]),
    ("backtest cancel", ["backtest", "cancel", "bt_1"]),
    ("training submit", ["training", "submit", "t1", "/nonexistent/predictions.jsonl"]),
    ("training cancel", ["training", "cancel", "t1"]),
    ("training expire", ["training", "expire"]),
    ("api-key create", ["api-key", "create", "victim"]),
    ("api-key revoke", ["api-key", "revoke", "{key}"]),
]


@pytest.mark.parametrize("argv", [c[1] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_a_command_given_a_second_store_leaves_the_first_untouched(
    home: Path, pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    before = dump(home)
    argv = [a.replace("{key}", _key_id(home)) for a in argv]
    code, out, err = _run([*argv, "--store", pg_url.replace("+psycopg2", "")], capsys)
    assert "Traceback" not in err and "This is a bug" not in err, err
    assert code in (0, 1, 2), (code, err)
    assert dump(home) == before, (argv, out, err)
    if argv[:2] == ["study", "run"]:  # the work happened in the second store
        assert code == 0, err
        assert _second(pg_url, "SELECT workspace, state FROM study_studies") == [("attacker", "FINISHED")]
        assert _second(pg_url, "SELECT COUNT(*) FROM study_locks") == [(0,)]
    if argv[:2] == ["backtest", "run"]:
        assert code == 0, err
        assert _second(pg_url, "SELECT workspace FROM backtest_runs") == [("attacker",)]
    if argv[0] == "run":
        assert code == 0, err
        assert _second(pg_url, "SELECT COUNT(*) FROM backtest_live_decisions") == [(1,)]


def test_every_command_that_writes_is_in_the_list() -> None:
    """A new command that takes --store and writes must be added above (reads are not listed)."""
    import argparse

    from typestrict_pipeline.cli import build_parser

    reads = {"credits balance", "credits ledger", "credits models", "audit", "backtest list", "backtest show",
             "usage", "study leaderboard", "study list", "study status", "study lineage", "schedule status",
             "schedule lineage", "schedule outbox", "api-key list", "api", "training list", "training show",
             # datasets are files; data commands read the store's schedules to report on them
             "data register", "data append", "data show",
             # files and code only (they take --store like every command, and never open it to write)
             "verify", "split", "training check", "backtest workflows", "backtest leakcheck"}
    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])
                return
        if any("--store" in a.option_strings for a in parser._actions):
            found.add(" ".join(prefix))

    walk(build_parser(), [])
    listed = {name.split(" (")[0].replace(" --run", "") for name, _ in COMMANDS} | {"run"}
    assert found - reads - listed == set()


def test_an_api_server_acts_on_its_store_not_the_environments(
    home: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The study is created in the server's store and its run (queued on the instance: no daemon
    here) carries that store in its config; the environment's store is never touched."""
    import dagster as dg

    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.setenv("TYPESTRICT_STORE_URL", f"sqlite:///{home / 'store.db'}")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    before = dump(home)
    key = support.new_key(pg_url, "attacker", credits=1)
    dagster_home = tmp_path / "dagster_home"
    with support.ApiServer(pg_url, tmp_path / "api-home", dagster_home=dagster_home) as server, \
            server.client(key) as c:
        r = c.post("/v1/studies", json={"workflow": "wx2", "start": "2012-01-01", "end": "2012-12-01",
                                        "tune_steps": 20, "eval_steps": 20, "holdout_steps": 20,
                                        "grid": ["skill=0.5,0.6"], "max_candidates": 2, "max_total_steps": 1000,
                                        "synthetic": True})
        assert r.status_code in (201, 202), r.text
        assert c.post("/v1/studies/1/cancel").status_code in (200, 404)  # the first store's study 1: not here
    assert _second(pg_url, "SELECT workspace, workflow FROM study_studies") == [("attacker", "wx2")]
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        [run] = instance.get_runs()
        assert run.job_name == "study_job"
        config: Any = run.run_config
        assert config["resources"]["store"]["config"]["url"] == pg_url
    assert dump(home) == before


def test_a_study_job_run_that_cannot_reach_its_store_says_so_and_the_lock_is_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typestrict_pipeline.cli.study import run_study_on_dagster

    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    sid = create_study_from_config(engine, study_config(_form("w", "wx")))
    capsys.readouterr()
    assert run_study_on_dagster(sid, store_url="postgresql://nobody@127.0.0.1:1/none") is False
    err = capsys.readouterr().err
    assert "failed at step study_plan: " in err
    assert "127.0.0.1:1" in err and "got no answer" in err  # the store's own message, naming it
    assert repo.active_study(engine, "w", "wx") == sid  # still locked: nothing could release it there
    assert repo.abandon_unstarted(engine, sid, "its study_job run ended before starting it") is True
    assert repo.active_study(engine, "w", "wx") is None
    with session_scope(engine) as s:
        row = s.get(StudyRow, sid)
        assert row is not None and row.state == "FAILED" and "ended before starting" in (row.error or "")
    assert repo.abandon_unstarted(engine, sid, "again") is False  # only a study never started
    # The workflow is free again: a new study runs; re-executing the old one now waits its turn.
    again = create_study_from_config(engine, study_config(_form("w", "wx")))
    assert again != sid
    engine.dispose()


def test_the_store_travels_in_the_run_config_and_its_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from resources.store import STORE_TAG
    from typestrict_pipeline.cli.study import run_study_on_dagster

    home = tmp_path / "h"
    (home / "dagster_home").mkdir(parents=True)
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = open_store(url)
    sid = create_study_from_config(engine, study_config(_form("w", "wx")))
    assert run_study_on_dagster(sid, store_url=url) is True
    instance = dg.DagsterInstance.from_config(str(home / "dagster_home"))
    [run] = instance.get_runs()
    config: Any = run.run_config
    assert config["resources"]["store"]["config"]["url"] == url
    assert run.tags[STORE_TAG] == url
    assert not (home / "store.db").exists()  # the home's default store was never opened
    engine.dispose()
