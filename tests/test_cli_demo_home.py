"""`make demo` says what it replaces, keeps what a user added, and refuses to drop a changed store.

The demo's home is built by hand here (a real store, a Dagster home folder, a training and an
audit of the demo's), then recorded with ``demo.home.finish`` as the demo does when it ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from demo import home as demo_home
from demo.__main__ import main
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store

IDS = ["rt-tiny", "rt-failed"]


def _demo_made(root: Path) -> None:
    engine = open_store(f"sqlite:///{root / 'store.db'}")
    CreditLedger(engine).grant("demo", 2, reference="demo-refund-trainings")
    engine.dispose()
    for folder in ("dagster_home", "data", "trainings/rt-tiny"):
        (root / folder).mkdir(parents=True)
        (root / folder / "file").write_text("demo")
    (root / "audits").mkdir()
    (root / "audits" / "rt-tiny.json").write_text("{}")
    demo_home.finish(root, IDS)


def _files(root: Path) -> list[tuple[str, int]]:
    """Every file and its size (SQLite's -wal/-shm sidecars aside: a read may create them)."""
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*")
                  if p.is_file() and not p.name.startswith("store.db-"))


def test_a_rerun_replaces_only_what_the_demo_made_and_keeps_the_rest(tmp_path: Path) -> None:
    root = tmp_path / ".typestrict"
    _demo_made(root)
    (root / "trainings" / "my-model").mkdir()
    (root / "trainings" / "my-model" / "manifest.json").write_text("{}")
    (root / "audits" / "my-model.json").write_text("{}")
    (root / "notes.txt").write_text("mine")

    plan = demo_home.plan(root, IDS)
    assert plan.blockers == []
    assert {"store.db", "dagster_home/", "data/", "trainings/rt-tiny/", "audits/rt-tiny.json",
            "demo.json"} <= set(plan.replaces)
    assert plan.keeps == ["audits/my-model.json", "notes.txt", "trainings/my-model/"]

    demo_home.clear(root, IDS)
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == ["audits/my-model.json", "notes.txt", "trainings/my-model/manifest.json"]


def test_a_changed_store_stops_the_demo_with_the_command_to_replace_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / ".typestrict"
    _demo_made(root)
    engine = open_store(f"sqlite:///{root / 'store.db'}")
    CreditLedger(engine).grant("acme", 3, reference="user-invoice")  # the user's own grant
    engine.dispose()
    before = _files(root)

    monkeypatch.setenv("TYPESTRICT_HOME", str(root))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "make demo: stopped, nothing was deleted" in err
    assert "store table credit_accounts: +1 rows since the demo" in err
    assert "store table credit_entries: +1 rows since the demo" in err
    assert "make demo REPLACE=1" in err
    assert _files(root) == before


def test_a_store_the_demo_did_not_make_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / ".typestrict"
    engine = open_store(f"sqlite:///{root / 'store.db'}")  # a user's ledger, no demo.json
    CreditLedger(engine).grant("acme", 3, reference="inv")
    engine.dispose()
    monkeypatch.setenv("TYPESTRICT_HOME", str(root))
    assert main([]) == 2
    assert "was not made by the demo (no demo.json): it may hold your ledger" in capsys.readouterr().err
    assert (root / "store.db").stat().st_size > 0
