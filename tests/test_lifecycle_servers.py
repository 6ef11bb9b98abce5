"""Servers and long-running commands stop on Ctrl-C and on SIGTERM within 10 s, with their whole
process tree: real processes, real signals, checked by process identity (id + start tick, so a
reused id is never taken for a survivor).

``make ui`` before the fix: SIGTERM to ``make`` left ``dagster dev``, its webserver, its daemon
and both code servers alive (not answering) a minute later. Now the recipe ``exec``s
``typestrict_pipeline.supervise``, which stops the whole session (docs/lifecycle.md, "Servers").
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from typestrict_pipeline.processes import Liveness, ProcessIdentity, identity_alive, identity_of
from typestrict_pipeline.store import open_store

ROOT = Path(__file__).resolve().parents[1]
STOP_WITHIN_S = 10.0


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out.setdefault(int(fields[1]), []).append(int(name))
    return out


def tree(root: int) -> list[ProcessIdentity]:
    """``root`` and every live descendant, as identities."""
    kids = _children()
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        ident = identity_of(pid)
        if ident is not None:
            found.append(ident)
        todo.extend(kids.get(pid, []))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_gone(identities: list[ProcessIdentity], within: float) -> tuple[float, list[str]]:
    """Seconds until every one of ``identities`` is dead, or the survivors after ``within``."""
    started = time.monotonic()
    while True:
        alive = [i for i in identities if identity_alive(i) is Liveness.ALIVE]
        took = time.monotonic() - started
        if not alive or took > within:
            return took, [f"{i.pid} {_cmdline(i.pid)[:120]}" for i in alive]
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kill_all(identities: list[ProcessIdentity]) -> None:
    for i in identities:
        if identity_alive(i) is Liveness.ALIVE:
            os.kill(i.pid, signal.SIGKILL)


def _wait_for(what: str, ready: object, proc: subprocess.Popen[bytes], log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what}: the command exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"waited {timeout:.0f} s for {what}:\n{log.read_text()[-3000:]}")


def _send(proc: subprocess.Popen[bytes], how: str) -> None:
    if how == "ctrl-c":  # what a terminal does: SIGINT to the foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    else:  # what a service manager (or `kill`) does: SIGTERM to the command it started
        os.kill(proc.pid, signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_make_ui_stops_with_its_whole_tree_within_10_s(how: str, tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "TYPESTRICT_HOME": str(tmp_path / "home"), "UI_PORT": str(port)}
    env.pop("DAGSTER_HOME", None)
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["make", "--no-print-directory", "ui", f"UI_PORT={port}"], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    everyone: list[ProcessIdentity] = []
    try:
        def full_tree() -> bool:  # dagster dev, its webserver, its daemon and a code server
            everyone[:] = tree(proc.pid)
            lines = " ".join(_cmdline(i.pid) for i in everyone)
            return all(k in lines for k in ("dagster_webserver", "dagster._daemon", "grpc"))

        _wait_for("dagster dev's whole tree", full_tree, proc, log)
        assert len(everyone) >= 6, [_cmdline(i.pid) for i in everyone]
        _send(proc, how)
        took, survivors = wait_gone(everyone, STOP_WITHIN_S)
        assert not survivors, f"alive {took:.1f} s after {how}: {survivors}\n{log.read_text()[-2000:]}"
        assert proc.wait(timeout=5) != 0  # make reports the stop
    finally:
        _kill_all(everyone)
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_make_api_stops_with_its_whole_tree_within_10_s(how: str, tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "TYPESTRICT_HOME": str(tmp_path / "home"), "API_PORT": str(port)}
    env.pop("TYPESTRICT_STORE_URL", None)
    # A server needs Jev's source and a store: the demo's home has both (its stand-in Jev runs
    # inside the server; the Dagster code location loads in a thread as it starts).
    (tmp_path / "home").mkdir()
    open_store(f"sqlite:///{tmp_path / 'home' / 'store.db'}").dispose()
    (tmp_path / "home" / "demo.json").write_text("{}\n")
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["make", "--no-print-directory", "api", f"API_PORT={port}"], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    everyone: list[ProcessIdentity] = []
    try:
        def serving() -> bool:
            everyone[:] = tree(proc.pid)
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        _wait_for("the API to listen", serving, proc, log)
        everyone[:] = tree(proc.pid)
        _send(proc, how)
        took, survivors = wait_gone(everyone, STOP_WITHIN_S)
        assert not survivors, f"alive {took:.1f} s after {how}: {survivors}\n{log.read_text()[-2000:]}"
    finally:
        _kill_all(everyone)
        proc.kill()
        proc.wait()


_STUBBORN = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    # A server that ignores SIGTERM and SIGINT, with a child in a process group of its own that
    # ignores them too: only the session finds it, only SIGKILL stops it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time, os; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); print('child', flush=True); time.sleep(600)"])
    print('server', flush=True)
    time.sleep(600)
""")


def _supervised_stubborn_tree(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, list[ProcessIdentity]]:
    """The supervisor (grace 2 s) around ``_STUBBORN``, once its whole tree of three is up: the
    supervisor, its log and every process of the tree."""
    script = tmp_path / "stubborn.py"
    script.write_text(_STUBBORN)
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "typestrict_pipeline.supervise", "--grace", "2",
                                 "--", sys.executable, str(script)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for("the stubborn tree", lambda: log.read_text().count("child") == 1
                  and len(tree(proc.pid)) == 3, proc, log, timeout=120)
    except BaseException:
        _kill_all(tree(proc.pid))
        raise
    return proc, log, tree(proc.pid)


def test_the_supervisor_stops_a_tree_that_ignores_signals_within_its_grace(tmp_path: Path) -> None:
    proc, log, everyone = _supervised_stubborn_tree(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        took, survivors = wait_gone(everyone, STOP_WITHIN_S)
        assert not survivors, survivors
        assert 2 <= took <= 2 + 3  # SIGTERM was ignored: SIGKILL after the grace, not before
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM
        assert "stopped" in log.read_text()
    finally:
        _kill_all(everyone)


def test_a_burst_of_stop_signals_never_cuts_the_cleanup_short(tmp_path: Path) -> None:
    """Ctrl-C reaches ``make`` and the supervisor together, and ``make`` sends its child the same
    signal again: the supervisor gets two or more stop signals. Seen in the suite on a busy
    machine: the second landed after the first had been raised and before the cleanup began,
    the supervisor died of it, and ``make api``'s server lived on as an orphan. Here one SIGTERM
    is followed by a tight stream of SIGINT and SIGTERM for a second: every process of the tree
    is still gone, and the supervisor exits 128 + the signal, having said what it stopped."""
    proc, log, everyone = _supervised_stubborn_tree(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        until = time.monotonic() + 1.0
        sent = 0
        while time.monotonic() < until and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT if sent % 2 else signal.SIGTERM)
            sent += 1
        took, survivors = wait_gone(everyone, STOP_WITHIN_S)
        assert not survivors, (survivors, log.read_text()[-2000:])
        assert took <= 2 + 3  # the grace, then SIGKILL: the burst did not restart the cleanup
        # the first signal handled names the exit code (Python runs pending handlers in
        # signal-number order, so a SIGINT pending beside the SIGTERM may come first)
        assert proc.wait(timeout=5) in (128 + signal.SIGTERM, 128 + signal.SIGINT), log.read_text()[-2000:]
        assert "stopped" in log.read_text() and "Traceback" not in log.read_text()
        assert sent > 100  # a stream, not one more signal
    finally:
        _kill_all(everyone)


def test_a_command_that_ends_by_itself_leaves_no_orphan(tmp_path: Path) -> None:
    # The child left behind is looked for by a mark of its own anywhere, not only among init's
    # children: where a subreaper adopts orphans (a container's init, systemd --user) it is not.
    mark = f"orphan-{os.getpid()}-{time.monotonic_ns()}"
    script = tmp_path / "leaver.py"
    script.write_text("import subprocess, sys\n"
                      f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {mark!r}])\n")
    log = tmp_path / "out.log"
    started = time.monotonic()
    with log.open("wb") as out:
        code = subprocess.run([sys.executable, "-m", "typestrict_pipeline.supervise", "--grace", "2",
                               "--", sys.executable, str(script)], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, timeout=120).returncode
    assert code == 0
    assert time.monotonic() - started < 60
    leftovers = [int(p) for p in os.listdir("/proc") if p.isdigit() and mark in _cmdline(int(p))]
    for pid in leftovers:  # never left running by a failure here
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert leftovers == []


def test_sigterm_stops_a_backtest_which_ends_interrupted_with_when_and_why(tmp_path: Path) -> None:
    """SIGTERM to ``typestrict backtest run``: exit 143 within 10 s, one line, and the backtest
    is ``interrupted`` with when and why (before: killed where it stood, ``running`` for good)."""
    store = tmp_path / "store.db"
    env = {**os.environ, "TYPESTRICT_STORE_URL": f"sqlite:///{store}", "TYPESTRICT_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("typestrict")), "backtest", "run", "seattle_rain",
         "--start", "2012-01-02", "--end", "2015-12-31", "--standin-latency", "0.2",
         "--max-in-flight", "1", "--new-store"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        started = False
        while time.monotonic() < deadline and proc.poll() is None and not started:
            time.sleep(0.5)
            started = _backtest_rows(store) > 0
        if not started and proc.poll() is not None:
            assert proc.stderr is not None
            raise AssertionError(f"expected the backtest to start, got exit {proc.returncode}: "
                                 f"{proc.stderr.read().decode(errors='replace')[-2000:]}")
        assert started, "the backtest did not start within 300 s"
        time.sleep(1)
        everyone = tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _took, survivors = wait_gone(everyone, STOP_WITHIN_S)
        assert not survivors, survivors
        assert proc.wait(timeout=5) == 143
        assert proc.stderr is not None
        assert proc.stderr.read().decode().strip().splitlines() == [
            "typestrict: stopped by SIGTERM; what was stored before stays stored"]
    finally:
        proc.kill()
        proc.wait()
    conn = sqlite3.connect(store)
    try:
        status, error, finished = conn.execute(
            "SELECT status, error, finished_at FROM backtest_runs").fetchone()
    finally:
        conn.close()
    assert status == "interrupted" and finished is not None
    assert "SIGTERM" in error and error.startswith("interrupted at 20")


def _backtest_rows(store: Path) -> int:
    if not store.exists():
        return 0
    conn = sqlite3.connect(store, timeout=30)
    try:
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "backtest_runs" not in names:
            return 0
        return int(conn.execute("SELECT COUNT(*) FROM backtest_runs").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def _study_state(store: Path) -> tuple[str | None, int]:
    """The study's state and how many of its window runs are reserved (None before it exists);
    read only, so the command's store is never created empty by the look."""
    if not store.is_file() or store.stat().st_size == 0:
        return None, 0
    try:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    except sqlite3.OperationalError:
        return None, 0
    try:
        state = conn.execute("SELECT state FROM study_studies").fetchone()
        reserved = conn.execute("SELECT COUNT(*) FROM study_runs WHERE state = 'RESERVED'").fetchone()[0]
        return (state[0] if state else None), int(reserved)
    except sqlite3.OperationalError:  # its tables are not there yet
        return None, 0
    finally:
        conn.close()


@pytest.mark.parametrize(("how", "code", "line", "why"), [
    ("sigterm", 143, "typestrict: stopped by SIGTERM; what was stored before stays stored", "SIGTERM"),
    ("ctrl-c", 130, "typestrict: interrupted; what was stored before stays stored", "Ctrl-C (SIGINT)"),
])
def test_a_study_run_stops_on_a_stop_signal_and_its_study_ends_interrupted(
        tmp_path: Path, how: str, code: int, line: str, why: str) -> None:
    """Ctrl-C or SIGTERM to ``typestrict study run`` while its windows run: gone within 10 s with
    its tree, exit 130/143 with one line, the study ``INTERRUPTED`` with when and why and nothing
    reserved. Before: Dagster's in-process run turned the signal into a failed step, and the
    command said "study_job run ... failed at step ...: DagsterExecutionInterruptedError", printed
    the study as Running, exited 1, and left it ``RUNNING`` with its windows reserved until a
    reaper came by."""
    store = tmp_path / "store.db"
    env = {**os.environ, "TYPESTRICT_STORE_URL": f"sqlite:///{store}", "TYPESTRICT_HOME": str(tmp_path)}
    env.pop("DAGSTER_HOME", None)  # an ephemeral instance: the run executes in this command
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("typestrict")), "study", "run", "seattle_rain",
         "--start", "2013-01-02", "--end", "2015-12-31", "--tune-steps", "90", "--eval-steps", "60",
         "--holdout-steps", "60", "--grid", "threshold=0.4,0.5,0.6", "--max-candidates", "3",
         "--max-total-steps", "100000", "--standin-latency", "0.2", "--max-in-flight", "1",
         "--new-store"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and _study_state(store)[1] == 0:
            time.sleep(0.5)  # until its run reserves windows: it is in its steps (minutes of them)
        assert proc.poll() is None, proc.communicate()[1].decode(errors="replace")[-2000:]
        assert _study_state(store)[0] == "RUNNING"
        everyone = tree(proc.pid)
        _send(proc, how)
        _took, survivors = wait_gone(everyone, STOP_WITHIN_S)
        assert not survivors, survivors
        out, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, err.decode(errors="replace")[-2000:]
    assert err.decode().strip().splitlines() == [line]
    assert b"(Running)" not in out  # no leaderboard of a study said to be running
    conn = sqlite3.connect(store)
    try:
        state, error = conn.execute("SELECT state, error FROM study_studies").fetchone()
        reserved = conn.execute("SELECT COUNT(*) FROM study_runs WHERE state = 'RESERVED'").fetchone()[0]
    finally:
        conn.close()
    assert state == "INTERRUPTED" and error.startswith("interrupted at 20") and why in error
    assert reserved == 0
