"""The store's password handed over for real: a PostgreSQL server that checks passwords.

The machine's PostgreSQL trusts every local login, so a password that never reached the database
would pass there. This module starts a private PostgreSQL cluster of the same installation
(``initdb --auth=scram-sha-256``, on a free port, in a temporary folder, stopped at the end) with
a role ``ana`` whose password is checked, and runs ``typestrict study run --store
postgresql://ana:PASSWORD@…`` through Dagster (in process, and with the multiprocess executor
whose step processes open the store themselves): the study runs in that store, no run's config
or tags hold the password, and a wrong password is refused with the product's message and
nothing run.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy import create_engine, text

from typestrict_pipeline.cli import main

PASSWORD = "s3cret-Ana_7"
LIMITS = ["--start", "2012-01-01", "--end", "2012-12-01", "--tune-steps", "20", "--eval-steps", "20",
          "--holdout-steps", "20", "--grid", "skill=0.5,0.6", "--max-candidates", "2",
          "--max-total-steps", "1000", "--synthetic"]


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        pytest.fail(f"expected PostgreSQL's {name} under /usr/lib/postgresql/*/bin (Debian's "
                    "postgresql package, which the machine's server comes from), got none")
    return found[-1]


def _as_postgres(argv: list[str]) -> list[str]:
    """``argv`` as the ``postgres`` user when this is root (initdb refuses to run as root)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def checked_server() -> Iterator[int]:
    """A private PostgreSQL cluster that asks for passwords; its port. Role ``ana`` (password
    :data:`PASSWORD`) owns database ``typestrict``."""
    folder = Path(tempfile.mkdtemp(prefix="ts-pg-"))
    data, log, pwfile = folder / "data", folder / "server.log", folder / "pw"
    pwfile.write_text("admin-pw\n")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(pwfile, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres([_bin("initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                                 "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"]),
                   check=True, capture_output=True, timeout=120)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                                 "-o", options, "start"]), check=True, capture_output=True, timeout=120)
    try:
        admin = create_engine(f"postgresql+psycopg2://postgres:admin-pw@127.0.0.1:{port}/postgres",
                              isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE ROLE ana LOGIN PASSWORD '{PASSWORD}'"))
            conn.execute(text("CREATE DATABASE typestrict OWNER ana"))
        admin.dispose()
        yield port
    finally:
        subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / "dagster_home").mkdir(parents=True)
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    for name in ("TYPESTRICT_STORE_URL", "DAGSTER_HOME", "PGPASSWORD", "PGPASSFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))  # libpq finds no password elsewhere
    return home


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _studies(port: int) -> list[tuple[str, str]]:
    engine = create_engine(f"postgresql+psycopg2://ana:{PASSWORD}@127.0.0.1:{port}/typestrict")
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT workspace, state FROM study_studies ORDER BY id"))
            return [(str(w), str(s)) for w, s in rows]
    finally:
        engine.dispose()


@pytest.mark.parametrize("executor", ["in_process", "multiprocess"])
def test_a_study_runs_in_a_store_that_checks_its_password_and_no_run_holds_it(
    checked_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], executor: str,
) -> None:
    home = _home(tmp_path, monkeypatch)
    before = _studies(checked_server) if executor == "multiprocess" else []
    url = f"postgresql://ana:{PASSWORD}@127.0.0.1:{checked_server}/typestrict"
    code, err = _cli(["study", "run", "wx2", "--workspace", "ana", *LIMITS, "--executor", executor,
                      "--store", url], capsys)
    assert code == 0, err
    assert _studies(checked_server) == [*before, ("ana", "FINISHED")]
    assert not (home / "store.db").exists()  # the home's own store was never made
    with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        runs = instance.get_runs()
        assert runs and all(r.job_name == "study_job" and r.status == dg.DagsterRunStatus.SUCCESS
                            for r in runs)
        for run in runs:
            shown = json.dumps(run.run_config) + json.dumps(dict(run.tags))
            assert PASSWORD not in shown and f"127.0.0.1:{checked_server}/typestrict" in shown


def test_a_wrong_password_is_refused_with_the_products_message_and_nothing_runs(
    checked_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = _home(tmp_path, monkeypatch)
    before = _studies(checked_server)
    url = f"postgresql://ana:wrong-{PASSWORD}@127.0.0.1:{checked_server}/typestrict"
    code, err = _cli(["study", "run", "wx2", "--workspace", "ana", *LIMITS, "--store", url], capsys)
    assert code != 0
    assert "expected the database user 'ana' to log in" in err and "password refused" in err, err
    assert "Traceback" not in err and PASSWORD not in err
    assert _studies(checked_server) == before
    assert not (home / "store.db").exists()
