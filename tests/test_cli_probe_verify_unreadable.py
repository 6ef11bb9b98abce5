"""An audit file ``typestrict verify`` (and the standalone ``verify_audit.py``) cannot read says
what was expected and what to do, in the one message shape, with the verifier's exit 4 (nothing
checked): it was "cannot read PATH: No such file or directory" and nothing more."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "a.json").write_text("{}")
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    return {"missing": (tmp_path / "nope.json", "No such file or directory"),
            "through a file": (tmp_path / "a.json" / "x.json", "Not a directory"),
            "a symlink loop": (tmp_path / "loop1", "Too many levels of symbolic links")}


@pytest.mark.parametrize("case", ["missing", "through a file", "a symlink loop"])
def test_verify_of_a_file_it_cannot_read_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
) -> None:
    path, why = _paths(tmp_path)[case]
    said = (f"verify_audit: cannot read {path}: expected an audit file that can be read, got {why}: check the "
            "path you gave, and that the audit file is there")
    assert main(["verify", str(path)]) == 4
    assert said in capsys.readouterr().err
    done = subprocess.run([sys.executable, str(ROOT / "typestrict_pipeline" / "verify_audit.py"), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
