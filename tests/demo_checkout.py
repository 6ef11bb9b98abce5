"""The checkout after ``make demo``, for the tests that follow the docs as a newcomer would.

:func:`make_demo_checkout` makes a folder that links this checkout's ``.venv``, packages,
``Makefile`` and ``workspace.yaml`` and runs ``make demo`` there verbatim (the README's set-up
command, with the virtualenv already installed): the demo writes ``<folder>/.typestrict``, the
checkout's default home, so the docs' commands then run from the folder with no setting.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

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
