"""Two workspaces never differ only in letter case.

Each workspace keeps its files in ``<home>/workspaces/<id>/files``: on a file system that ignores
case (macOS, Windows) ``Acme`` and ``acme`` would be one folder, and one workspace would list and
read the other's files. A workspace comes into being with its first API key, so
``typestrict api-key create`` refuses an id spelled like an existing workspace's in other case,
revoked keys included (the folder outlives them), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from typestrict_pipeline.cli import main as cli_main
from typestrict_pipeline.store import open_store


def _create(url: str, workspace: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli_main(["api-key", "create", workspace, "--store", url, "--new-store"])
    out, err = capsys.readouterr()
    return code, out, err


def _workspaces(url: str) -> list[str]:
    engine = open_store(url)
    try:
        with engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(text("SELECT DISTINCT workspace_id FROM api_keys")))
    finally:
        engine.dispose()


def test_a_workspace_id_spelled_like_another_in_other_case_is_refused(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _create(store_url, "acme", capsys)
    assert code == 0
    key = out.strip().splitlines()[-1]

    code, out, err = _create(store_url, "Acme", capsys)
    assert code == 2 and "tsk_" not in out
    assert ("expected a workspace id that no other workspace spells in other letter case "
            "(workspace 'acme' exists), got 'Acme'. Create the key for 'acme' if you mean that "
            "workspace, or choose another id") in err
    assert "Traceback" not in err
    assert _workspaces(store_url) == ["acme"]  # nothing stored

    assert cli_main(["api-key", "revoke", key[4:20], "--store", store_url]) == 0
    capsys.readouterr()
    code, _, err = _create(store_url, "ACME", capsys)  # its folder outlives its keys
    assert code == 2 and "(workspace 'acme' exists), got 'ACME'" in err

    assert _create(store_url, "acme", capsys)[0] == 0  # the same spelling: another key
    assert _create(store_url, "acme-2", capsys)[0] == 0  # another id
    assert _workspaces(store_url) == ["acme", "acme-2"]
