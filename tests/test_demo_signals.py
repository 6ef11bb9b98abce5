"""``make demo`` started in the background stops on ``kill``, between Dagster runs and during one.

A shell without job control starts a background command with SIGINT ignored; Dagster's calls
end by giving SIGTERM SIGINT's handler, and a stop signal during an in-process run only fails
that run. Before ``demo.runs`` the demo, sent SIGTERM after its first verdict run, ran on to the
end (exit 0, 38 s later).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STOP_WITHIN_S = 10.0
"""What docs/lifecycle.md promises of every long-running command (it takes about 2 s here)."""


def _demo_then_sigterm(home: Path, marker: bytes, wait_s: float) -> tuple[int, str, float]:
    """Start ``python -m demo`` with SIGINT ignored, send SIGTERM ``wait_s`` after the line that
    starts with ``marker``; its exit code, its output and how long it took to stop."""
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "TYPESTRICT_STORE_URL")}
    env["TYPESTRICT_HOME"] = str(home)
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "demo"], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as `make demo &`
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(marker):
                break
        else:
            pytest.fail("the demo ended before " + marker.decode() + ":\n" + b"".join(seen).decode()[-3000:])
        time.sleep(wait_s)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rest = proc.communicate(timeout=120)[0]
        return proc.returncode, (b"".join(seen) + rest).decode(errors="replace"), time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_demo_in_the_background_stops_on_kill_between_runs(tmp_path: Path) -> None:
    code, out, took = _demo_then_sigterm(tmp_path / "home", b"-- rt-tfidf", 0.0)  # its first run has ended
    assert "make demo: finished" not in out, out[-2000:]
    assert code in (-signal.SIGTERM, 130), (code, out[-2000:])
    assert took < STOP_WITHIN_S, took


def test_the_demo_in_the_background_stops_on_kill_during_a_run(tmp_path: Path) -> None:
    code, out, took = _demo_then_sigterm(tmp_path / "home", b"materializing group 'refund'", 1.0)
    assert "make demo: finished" not in out, out[-2000:]
    assert code in (-signal.SIGTERM, 130), (code, out[-2000:])
    if code == 130:  # the run was interrupted: the demo says so
        assert "make demo: stopped during part 'refund' (a stop signal)" in out, out[-2000:]
    assert took < STOP_WITHIN_S, took


_WINDOW = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `make demo &`
from dagster._utils.interrupts import capture_interrupts
from demo import runs
runs.remember_stop_signals()
with runs.stop_signals_kept():
    with capture_interrupts():  # what execute_in_process wraps a run in
        pass
    # Dagster's call has ended (it copied SIGINT's handler to SIGTERM); the demo's handlers are
    # not given back yet: the moment a SIGTERM used to be ignored in
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(0.5)
print("still running", flush=True)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_right_after_a_dagster_call_acts_as_the_demo_started_with(name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _WINDOW, name], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    if name == "SIGTERM":  # the default action, as between runs: the demo ends by the signal
        assert proc.returncode == -signal.SIGTERM and "still running" not in proc.stdout, proc
    else:  # SIGINT stays ignored, as the shell that started the demo in the background asked
        assert proc.returncode == 0 and "still running" in proc.stdout, proc


_SWALLOWED = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `make demo &`
from dagster._utils.interrupts import capture_interrupts
from demo import runs
runs.remember_stop_signals()
try:
    with runs.stop_signals_kept():
        with capture_interrupts():  # what execute_in_process wraps a run in
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))  # caught by Dagster outside a step's
            time.sleep(0.5)                                     # interruptible part...
        # ...and dropped when its call ends: the run finished as if nothing had come
except KeyboardInterrupt as stop:
    print("stopped:", stop, flush=True)
    sys.exit(130)
print("still running", flush=True)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_dagster_caught_and_dropped_still_stops_the_demo(name: str) -> None:
    """The demo ran to its end when a SIGTERM came while a run's step was past the point where
    Dagster raises it (its handler records the signal; its call's end forgets it): seen once in
    CI as `make demo: finished` after a kill during the refund part."""
    proc = subprocess.run([sys.executable, "-c", _SWALLOWED, name], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    if name == "SIGTERM":  # stopped as an interrupted run stops it
        assert proc.returncode == 130 and "stopped: SIGTERM during a Dagster call" in proc.stdout, proc
    else:  # SIGINT stays ignored, as the shell that started the demo in the background asked
        assert proc.returncode == 0 and "still running" in proc.stdout, proc
