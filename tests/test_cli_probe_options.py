"""Options a customer or an operator gets wrong by mistake, found by probing the command line:
each is refused with one message (expected, got, what to do) and exit 2, before anything starts
or is written, never a traceback nor another command's exit code.

* ``typestrict api --host`` of a label past 63 characters failed in uvicorn's start-up with a
  traceback (exit 1); a host with a space, or a port another process listens on, started the
  server, which logged an ``ERROR`` line and exited 3 (the code of a cancelled ``backtest run``).
* ``typestrict run`` / ``backtest run`` took ``--table`` without ``--csv`` and ``--dataset``
  with ``--csv``, and ignored them without a word.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from typestrict_pipeline import values
from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def _api(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    recorded = tmp_path / "jev.jsonl"
    recorded.write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TYPESTRICT_HOME": str(tmp_path / "home")}
    env.pop("TYPESTRICT_STORE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "typestrict_pipeline.cli", "api", "--store", f"sqlite:///{tmp_path / 'store.db'}",
         "--new-store", "--log-level", "warning",
         "--jev-source", json.dumps({"kind": "file", "path": str(recorded)}), *extra],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)


@pytest.mark.parametrize("host", ["x" * 64, "x" * 10_000, "bad host", "lead-.example", "a..b"])
def test_api_refuses_a_host_it_cannot_listen_on_as_a_usage_error(tmp_path: Path, host: str) -> None:
    done = _api(tmp_path, "--host", host, "--port", "1")
    assert done.returncode == 2, done.stderr
    assert "argument --host: expected --host as an IP address or a host name" in done.stderr
    assert "Write the address to listen on, e.g. 127.0.0.1" in done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stdout
    assert len(done.stderr) < 2_000  # a 10,000-character host is not echoed whole


def test_api_on_a_port_in_use_says_so_and_exits_2_before_serving(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _api(tmp_path, "--host", "127.0.0.1", "--port", str(port))
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert (f"typestrict: expected an address to listen on at 127.0.0.1:{port}, got Address already in use "
            "(errno 98). Pass another --port or --host, or stop what listens there.") in done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stdout


def test_listen_host_takes_addresses_and_host_names() -> None:
    for host in ("127.0.0.1", "0.0.0.0", "::", "::1", "localhost", "api.example.com", "a-b.example.com."):
        assert values.listen_host(host) == host
    for bad in ("", "x" * 64, "a" * 254, "a_b", "é.example", "1.2.3.4:80", "[::1]"):
        with pytest.raises(InputError, match="expected --host as an IP address or a host name"):
            values.listen_host(bad)


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "seattle_rain", "--as-of", "2015-06-01", "--table", "rain"],
     "expected --table with --csv (it names the --csv file's table), got --table 'rain' without --csv. "
     "Pass --csv FILE.csv too, or leave --table out to read --dataset."),
    (["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-01-10", "--table", "rain"],
     "got --table 'rain' without --csv"),
    (["run", "seattle_rain", "--as-of", "2015-06-01", "--csv", "{csv}", "--dataset", "seattle_weather"],
     "expected --dataset or --csv, one of them, got both (--dataset 'seattle_weather'). Leave out --dataset "
     "to read the --csv file, or --csv to read the dataset."),
])
def test_a_data_option_that_would_be_ignored_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str], message: str,
) -> None:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    csv = tmp_path / "w.csv"
    csv.write_text("event_time,known_time,precipitation,temp_max,temp_min,wind,weather\n"
                   "2015-01-01T00:00:00Z,2015-01-02T00:00:00Z,0.0,12.8,5.0,4.7,sun\n")
    assert main([a.replace("{csv}", str(csv)) for a in argv]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.csv"]  # no store, nothing else written
