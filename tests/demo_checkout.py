"""The checkout after ``make demo``, for the tests that follow the docs as a newcomer would.

:func:`make_demo_checkout` makes a folder that links this checkout's ``.venv``, packages,
``Makefile`` and ``workspace.yaml`` and runs ``make demo`` there verbatim (the README's set-up
command, with the virtualenv already installed): the demo writes ``<folder>/.typestrict``, the
checkout's default home, so the docs' commands then run from the folder with no setting.

:func:`demo_checkout` gives each caller in a test process that checkout as ``make demo`` left it:
the first call runs ``make demo`` and keeps a copy of what it wrote; each later call puts that copy
back, byte for byte and at the same path (the demo's home holds absolute paths: Dagster's runs,
stored values, run configs), after removing whatever the previous caller's commands left. The
README's test and the browser console's share one ``make demo`` so (``tests/conftest.py`` runs
their two files on one pytest-xdist worker, one after the other).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from typestrict_pipeline.demo_data.build import DEMO_TRAININGS

REPO = Path(__file__).resolve().parent.parent
LINKED = (".venv", "typestrict_pipeline", "assets", "resources", "demo", "bench", "docs", "Makefile",
          "workspace.yaml", "pyproject.toml", "README.md")
# A newcomer types `make ...` in a shell: no home set, and no outer make's variables (under
# `make test`, MAKELEVEL and MAKEFLAGS would make the inner make print "Entering directory"
# before a server's own first line).
NOT_A_NEWCOMERS = ("DAGSTER_HOME", "TYPESTRICT_HOME", "TYPESTRICT_STORE_URL", "MAKELEVEL", "MAKEFLAGS",
                   "MFLAGS", "MAKEOVERRIDES")


def newcomer_env() -> dict[str, str]:
    """This process's environment without a home, a store or an outer make's variables."""
    return {k: v for k, v in os.environ.items() if k not in NOT_A_NEWCOMERS}


def make_demo_checkout(root: Path) -> Path:
    """``root`` linked like a checkout, ``make demo`` run there verbatim; ``root``."""
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=root, capture_output=True, check=False)
    assert stale.returncode == 0, "the virtualenv is older than pyproject.toml: run `make .venv/.installed` first"
    demo = subprocess.run(["make", "demo"], cwd=root, env=newcomer_env(), capture_output=True, text=True,
                          timeout=1200, check=False)
    assert demo.returncode == 0 and "make demo: finished" in demo.stdout, (
        demo.stdout[-3000:] + demo.stderr[-3000:])
    assert f"writing into {root.resolve()}/.typestrict" in demo.stdout, demo.stdout[:500]
    made = json.loads((root / ".typestrict" / "demo.json").read_text(encoding="utf-8"))["made"]
    assert all(f"trainings/{t.training_id}/" in made for t in DEMO_TRAININGS), made
    return root


#: The checkout ``make demo`` made in this test process, and the copy of what it wrote.
_MADE: dict[str, tuple[Path, Path]] = {}


def demo_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout exactly as ``make demo`` left it: made on the first call in this test process,
    put back from its copy on every later one (same path, same bytes, same modification times;
    everything a previous caller added removed). The caller must have stopped every process it
    started there (its module fixtures do)."""
    if "demo" not in _MADE:
        base = tmp_path_factory.mktemp("demo")
        root = base / "checkout"
        root.mkdir()
        make_demo_checkout(root)
        copy = base / "as-made"
        copy.mkdir()
        for entry in _made_entries(root):
            _copy(entry, copy / entry.name)
        _MADE["demo"] = (root, copy)
        return root
    root, copy = _MADE["demo"]
    for entry in _made_entries(root):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in copy.iterdir():
        _copy(entry, root / entry.name)
    return root


def _made_entries(root: Path) -> list[Path]:
    """What is in ``root`` besides the checkout's links: what ``make demo`` and the commands wrote."""
    return [e for e in root.iterdir() if e.name not in LINKED]


def _copy(source: Path, target: Path) -> None:
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target, follow_symlinks=False)
