"""A command line that feels finished: help on every flag, ``--json`` on every command that reads,
one spelling of the store option, a warning when a live decision is past its data, and a
progress bar on a terminal only."""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from typestrict_pipeline.cli import build_parser, main

# Every command that only reads, by its words.
READS = [
    ("credits", "balance"), ("credits", "ledger"), ("credits", "models"),
    ("backtest", "list"), ("backtest", "show"), ("backtest", "workflows"), ("usage",),
    ("study", "leaderboard"), ("study", "list"), ("study", "status"), ("study", "lineage"),
    ("schedule", "status"), ("schedule", "lineage"), ("schedule", "workspace"),
]


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> dict[tuple[str, ...],
                                                                                     argparse.ArgumentParser]:
    out = {words: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_commands(sub, (*words, name)))
    return out


def test_every_flag_of_every_command_has_help() -> None:
    missing = []
    for words, parser in _commands(build_parser()).items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            if not action.help:
                missing.append(f"typestrict {' '.join(words)} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_every_read_has_json_and_every_store_option_is_spelled_store() -> None:
    commands = _commands(build_parser())
    for words in READS:
        options = {o for a in commands[words]._actions for o in a.option_strings}
        assert "--json" in options, words
    for words, parser in commands.items():
        shown = {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}
        assert not shown & {"--url", "--store-url"}, words  # the old spellings are hidden aliases


def test_a_live_decision_past_its_data_warns(typestrict_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "seattle_rain", "--json", "--new-store"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stale_data"] is True
    assert "warning: deciding as of" in captured.err
    assert "but the data (seattle_weather) end at 2016-01-01" in captured.err
    assert main(["run", "seattle_rain", "--as-of", "2015-12-31"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "as of           2015-12-31" in captured.out


def _run_on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "typestrict_pipeline.cli", *argv], env=env,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: the process has exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=600), b"".join(chunks).decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_none_in_a_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "TYPESTRICT_HOME": str(tmp_path), "COLUMNS": "120"}
    env.pop("TYPESTRICT_STORE_URL", None)
    argv = ["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-03-31",
            "--standin-latency", "0.05", "--max-in-flight", "2", "--new-store"]
    code, screen = _run_on_a_terminal(argv, env)
    assert code == 0, screen
    assert "backtest seattle_rain" in screen and "/90" in screen  # the bar: steps done of 90

    # The same command with its output captured (not a terminal): no bar, nothing on stderr.
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    assert main(argv) == 0
    piped = capsys.readouterr()
    assert piped.err == ""
    assert "backtest seattle_rain" not in piped.out and "backtest id" in piped.out
