"""Where `make demo` writes, what a re-run replaces, and what it keeps.

The demo writes into the default home, ``TYPESTRICT_HOME`` (``./.typestrict`` when unset), so the
README's commands find its store, trainings and audits without any setting. Its Dagster home is
``<home>/dagster_home``; ``make ui`` points the UI there.

What the demo owns (and replaces on the next run) is listed in ``<home>/demo.json`` when it
finishes, with a fingerprint of the store and of the Dagster run history: rows per table and
runs. On the next ``make demo``:

* files and folders the demo did not make (your own trainings, audits, anything else) are kept,
  never touched;
* the demo's own files are replaced, and the demo says which;
* when the store or the Dagster history changed since the demo finished (a grant, a study, a run
  launched from the UI), or a store is there that the demo did not make, the demo refuses and says
  what it would lose and the command that replaces it anyway: ``make demo REPLACE=1``.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = "demo.json"
STORE_FILES = ("store.db", "store.db-wal", "store.db-shm", "notifications.log")
OWNED_DIRS = ("dagster_home", "data", "verifier", "credits", "reruns", "datasets/demo_seattle_live")


@dataclass
class HomePlan:
    """What a demo run would do to the home."""

    home: Path
    replaces: list[str] = field(default_factory=list)
    keeps: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    previous: str | None = None


def _rel(home: Path, path: Path) -> str:
    return str(path.relative_to(home)) + ("/" if path.is_dir() else "")


def table_counts(store: Path) -> dict[str, int]:
    """Rows per table of a SQLite file, read-only (empty when there is no such file)."""
    if not store.exists():
        return {}
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: int(conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]) for n in names}
    finally:
        conn.close()


def fingerprint(home: Path) -> dict[str, Any]:
    """Rows per table of the store and of the Dagster run history under ``home``."""
    return {"store": table_counts(home / "store.db"),
            "dagster_runs": table_counts(home / "dagster_home" / "history" / "runs.db").get("runs", 0)}


def owned_paths(home: Path, training_ids: list[str]) -> list[Path]:
    """Every path the demo writes under ``home`` (whether it exists or not)."""
    paths = [home / MARKER, *(home / f for f in STORE_FILES), *(home / d for d in OWNED_DIRS)]
    paths += [home / "trainings" / t for t in training_ids]
    paths += [home / "audits" / f"{t}.json" for t in training_ids]
    return paths


def _changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out: list[str] = []
    old, new = before.get("store", {}), now.get("store", {})
    for table in sorted(set(old) | set(new)):
        if table == "alembic_version":
            continue
        delta = new.get(table, 0) - old.get(table, 0)
        if delta:
            out.append(f"store table {table}: {delta:+d} rows since the demo")
    runs = now.get("dagster_runs", 0) - before.get("dagster_runs", 0)
    if runs:
        out.append(f"Dagster history: {runs:+d} runs since the demo (e.g. launched from the UI)")
    return out


def plan(home: Path, training_ids: list[str]) -> HomePlan:
    """What ``make demo`` would replace, keep, and what stops it (see the module's docstring)."""
    result = HomePlan(home)
    if not home.exists():
        return result
    owned = {p for p in owned_paths(home, training_ids)}
    marker = home / MARKER
    if marker.exists():
        try:
            recorded = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = {}
        result.previous = recorded.get("finished_at")
        result.blockers += _changes(recorded.get("fingerprint", {}), fingerprint(home))
    elif (home / "store.db").exists() or (home / "dagster_home").exists():
        result.blockers.append(f"{home / 'store.db'} or {home / 'dagster_home'} exists and was not made by "
                               "the demo (no demo.json): it may hold your ledger and runs")
    result.replaces = [_rel(home, p) for p in sorted(owned) if p.exists()]
    for p in sorted(home.iterdir()):
        if p in owned:
            continue
        if p.name in ("trainings", "audits") and p.is_dir():
            result.keeps += [_rel(home, c) for c in sorted(p.iterdir()) if c not in owned]
        else:
            result.keeps.append(_rel(home, p))
    return result


def clear(home: Path, training_ids: list[str]) -> None:
    """Delete what the demo owns under ``home`` (nothing else)."""
    for p in owned_paths(home, training_ids):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def finish(home: Path, training_ids: list[str]) -> None:
    """Record what the demo made and the store's fingerprint in ``<home>/demo.json``."""
    made = [_rel(home, p) for p in owned_paths(home, training_ids) if p.exists()]
    record = {"finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "made": made, "fingerprint": fingerprint(home)}
    tmp = home / (MARKER + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(home / MARKER)
