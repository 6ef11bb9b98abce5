"""docs/api.md's walkthrough: every step it promises is there (the walkthrough itself runs as
written after ``make demo``, in ``tests/test_cli_readme.py``, with the README's commands, on the
same demo); and a server with no Jev refuses to start.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def walkthrough_blocks(text: str) -> list[str]:
    """The ``sh`` blocks of the "Walkthrough" section, in order."""
    section = text.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def test_the_doc_has_the_promised_steps() -> None:
    blocks = walkthrough_blocks(DOC.read_text(encoding="utf-8"))
    joined = "\n".join(blocks)
    for step in ("api-key create", "reviews.csv", "/v1/files/", "/v1/trainings\"", "/split",
                 "/predictions", "/v1/models/$TRAINING\"", "/audit", "trained_on_ids",
                 'verify_audit.py --expect-sha256 "$SETTLED" audit.json'):
        assert step in joined, step


@pytest.mark.slow
def test_a_server_without_jev_refuses_to_start_and_names_the_flag(tmp_path: Path) -> None:
    home = tmp_path / "not-a-demo"
    home.mkdir()
    port = support.free_port()
    served = support.make_api(home, port)
    try:
        code = served.proc.wait(timeout=120)
    finally:
        served.stop()
    said = "\n".join(served.lines)
    assert code != 0 and "--jev-source" in said and "TYPESTRICT_API_JEV_SOURCE" in said, said
    assert "Traceback" not in said
    assert not (home / "store.db").exists()  # refused before anything was made
