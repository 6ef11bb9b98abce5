"""docs/api.md's walkthrough, run as written: its ``sh`` blocks, in order, in one bash, against a
real server, with the real ``typestrict`` command and curl.

The one thing the doc leaves to the operator's Dagster daemon (``training_sensor`` and the
``verdict_job`` it requests) is done here as production does it, once the walkthrough has posted
its predictions. The dataset has a word signal (``random.Random(7)``) so the doc's tiny model
learns something; Jev's probabilities come from a seeded file (skill 0.6).
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"
GOOD = ["great", "moving", "superb", "funny", "warm"]
BAD = ["dull", "awful", "tedious", "flat", "messy"]


def walkthrough_blocks(text: str) -> list[str]:
    """The ``sh`` blocks of the "Walkthrough" section, in order."""
    section = text.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _dataset(folder: Path) -> Path:
    rng = random.Random(7)
    lines = ["id,text,grp,label"]
    for i in range(300):
        label = rng.choice(["yes", "no"])
        words = [rng.choice(GOOD if (label == "yes") == (rng.random() < 0.85) else BAD) for _ in range(4)]
        lines.append(f"r{i:04d},{' '.join(words)} film {i},g{i // 3},{label}")
    path = folder / "reviews.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_doc_has_the_promised_steps() -> None:
    blocks = walkthrough_blocks(DOC.read_text(encoding="utf-8"))
    joined = "\n".join(blocks)
    for step in ("api-key create", "/v1/files/", "/v1/trainings\"", "/split", "/predictions",
                 "/v1/models/$TRAINING\"", "/audit", "trained_on_ids",
                 'verify_audit.py --expect-sha256 "$SETTLED" audit.json'):
        assert step in joined, step


@pytest.mark.slow
def test_the_walkthrough_runs_as_written(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    work = tmp_path / "customer"
    work.mkdir()
    csv = _dataset(work)
    from typestrict_pipeline.refund.predictions import Prediction, write_predictions_jsonl

    rng = random.Random(8)
    jev = []
    for line in csv.read_text().splitlines()[1:]:
        id_, _, _, label = line.split(",")
        right = 0 if label == "yes" else 1
        top = right if rng.random() < 0.6 else 1 - right
        hi = 0.55 + 0.4 * rng.random()
        p = (hi, 1 - hi) if top == 0 else (1 - hi, hi)
        jev.append(Prediction(id_, "sentiment", (("yes", p[0]), ("no", p[1]))))
    write_predictions_jsonl(tmp_path / "jev.jsonl", jev)
    script = "\n".join(walkthrough_blocks(DOC.read_text(encoding="utf-8")))
    with support.ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(tmp_path / "jev.jsonl")}) as server:
        env = {**os.environ, "API": server.url, "TYPESTRICT_STORE_URL": sqlite_url,
               "TYPESTRICT_HOME": str(home),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        judged: list[str] = []

        def daemon() -> None:  # what the Dagster daemon does once the predictions arrive
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not judged:
                if list((home / "trainings").glob("tr_*/manifest.json")):
                    judged.extend(support.run_verdicts(home, sqlite_url))
                    return
                time.sleep(0.5)

        thread = threading.Thread(target=daemon, daemon=True)
        thread.start()
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        thread.join(timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(judged) == 1
    out = done.stdout
    assert re.search(r"\d+ rows to train on, \d+ held out", out)
    assert re.search(r"^(beats|refund) settled by sentiment$", out, flags=re.M), out
    assert "tsk_" not in out  # the key is never printed by the walkthrough
    assert (work / "audit.json").read_bytes() == (home / "audits" / f"{judged[0]}.json").read_bytes()
