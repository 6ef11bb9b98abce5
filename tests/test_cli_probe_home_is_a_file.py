"""A home (``TYPESTRICT_HOME``) or a store's folder (``--store``) that is a file or a FIFO is one
message naming it, exit 2, from every command that may start a store: it was ``FileExistsError``
reported as a bug (exit 1) by ``store init``, ``credits grant --new-store``, ``api-key create
--new-store`` and ``backtest run --new-store`` (``store.engine.create_store_engine``, which the
API uses too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main

COMMANDS = [
    ["store", "init"],
    ["credits", "grant", "acme", "1", "--reference", "r1", "--new-store"],
    ["api-key", "create", "acme", "--new-store"],
    ["backtest", "run", "seattle_rain", "--start", "2015-01-01", "--end", "2015-01-03", "--new-store"],
]


@pytest.mark.parametrize("kind", ["file", "fifo"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_home_that_is_a_file_is_named_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str, argv: list[str],
) -> None:
    home = tmp_path / "home"
    if kind == "file":
        home.write_text("my notes\n")
    else:
        os.mkfifo(home)
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    assert main(argv) == 2
    words = "a file" if kind == "file" else "a FIFO (named pipe)"
    assert (f"typestrict: expected a folder to hold the store {home / 'store.db'}, got {str(home)!r}, {words}, in "
            "its place. Point --store, TYPESTRICT_STORE_URL or TYPESTRICT_HOME at a folder, or move that file "
            "away.") in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]
    if kind == "file":
        assert home.read_text() == "my notes\n"


def test_a_store_url_through_a_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path / "home"))
    (tmp_path / "stores").write_text("")
    assert main(["store", "init", "--store", f"sqlite:///{tmp_path / 'stores' / 'store.db'}"]) == 2
    err = capsys.readouterr().err
    assert f"expected a folder to hold the store {tmp_path / 'stores' / 'store.db'}, got" in err, err
    assert "This is a bug" not in err
