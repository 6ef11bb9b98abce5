"""The docs say what the product does (issue #26, "Docs drift"): the README's sentences about a
second ``make demo``, where notifications go and where to turn them off, the live run's warning,
and the API walkthrough's example model, which must be quick on data of a real size."""

from __future__ import annotations

import random
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from demo import home as demo_home
from demo.__main__ import main as demo_main
from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
IDS = ["rt-tiny", "rt-failed"]


def _sentence_with(text: str, words: str) -> str:
    """The README's paragraph text around ``words``, whitespace folded."""
    folded = " ".join(text.split())
    assert words in folded, f"the README no longer says {words!r}"
    return folded


def test_a_second_make_demo_keeps_your_files_and_stops_before_losing_your_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folded = _sentence_with(README, "keeps every file you added to the home")
    assert "`make demo` stops, deletes nothing and lists what it would lose; `make demo REPLACE=1`" in folded
    root = tmp_path / ".typestrict"
    engine = open_store(f"sqlite:///{root / 'store.db'}")
    CreditLedger(engine).grant("demo", 2, reference="demo-refund-trainings")
    engine.dispose()
    (root / "dagster_home").mkdir()
    demo_home.finish(root, IDS)
    (root / "trainings" / "mine").mkdir(parents=True)
    (root / "notes.txt").write_text("mine")
    # the files you added are kept ...
    assert demo_home.plan(root, IDS).keeps == ["notes.txt", "trainings/mine/"]
    # ... and a command of the README that writes (here `study run`'s kind: a row in the store)
    # makes the next `make demo` stop, delete nothing, and say what it would lose
    engine = open_store(f"sqlite:///{root / 'store.db'}")
    CreditLedger(engine).grant("acme", 1, reference="mine")
    engine.dispose()
    monkeypatch.setenv("TYPESTRICT_HOME", str(root))
    monkeypatch.delenv("TYPESTRICT_STORE_URL", raising=False)
    assert demo_main([]) == 2
    err = capsys.readouterr().err
    assert "make demo: stopped, nothing was deleted" in err and "make demo REPLACE=1" in err
    assert (root / "notes.txt").read_text() == "mine" and (root / "store.db").exists()


def test_notifications_go_where_the_readme_says_and_say_where_to_turn_them_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from demo.reruns import _Demo
    from typestrict_pipeline.reruns.notify import FileTransport, transport_from_env

    assert "by default appended to `.typestrict/notifications.log`" in " ".join(README.split())
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    monkeypatch.delenv("TYPESTRICT_NOTIFY_TRANSPORT", raising=False)
    monkeypatch.delenv("TYPESTRICT_NOTIFY_FILE", raising=False)
    transport = transport_from_env()
    assert isinstance(transport, FileTransport) and transport.path == tmp_path / "notifications.log"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    (tmp_path / "dagster_home" / "dagster.yaml").write_text("")
    assert _Demo(tmp_path).notifications == transport.path  # the demo writes the same file
    # "Settings → Notifications" is a page of the console, and the message says where it is
    base = (REPO / "typestrict_pipeline" / "console" / "templates" / "base.html").read_text(encoding="utf-8")
    assert 'href="/console/settings/notifications"' in base and "Settings → Notifications" in base
    service = (REPO / "typestrict_pipeline" / "reruns" / "service.py").read_text(encoding="utf-8")
    assert "console's Settings → \"\n        f\"Notifications (/console/settings/notifications)" in service


def test_the_live_runs_warning_is_the_one_the_readme_quotes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [quoted] = re.findall(r"warns `(warning: [^`]+)`", README)
    assert main(["run", "seattle_rain", "--new-store", "--store", f"sqlite:///{tmp_path / 'store.db'}"]) == 0
    err = capsys.readouterr().err
    pos = 0
    for piece in (p.strip(" ,") for p in quoted.split("…")):
        found = err.find(piece, pos)
        assert found >= 0, f"{piece!r} is not in the warning: {err}"
        pos = found + len(piece)


def _walkthrough_model() -> str:
    doc = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    section = doc.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    [block] = [str(b) for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S) if "def probs" in b]
    return block.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]


def test_the_walkthroughs_model_is_quick_on_data_of_a_real_size(tmp_path: Path) -> None:
    """12,629 reviews of about 20 words from a 20,000-word vocabulary (the size of the demo's
    Rotten Tomatoes set): the example trains and predicts in well under 5 s of CPU."""
    rng = random.Random(26)
    vocab = [f"w{i}" for i in range(20_000)]
    lines = ["id,text,grp,label"]
    for i in range(12_629):
        lines.append(f"r{i:05d},{' '.join(rng.choice(vocab) for _ in range(20))},film{i // 3},"
                     f"{rng.choice(['fresh', 'rotten'])}")
    (tmp_path / "reviews.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    train = [f"r{i:05d}" for i in range(12_629) if i % 5]
    (tmp_path / "split.json").write_text(
        '{"training_ids": [' + ",".join(f'"{t}"' for t in train) + '], "training_ids_sha256": "x"}',
        encoding="utf-8")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # a generous wall-clock bound only stops a runaway; the check is the CPU time below
    subprocess.run([sys.executable, "-c", _walkthrough_model()], cwd=tmp_path, check=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 5.0, f"the walkthrough's model took {cpu:.1f} s of CPU on 12,629 rows"
    assert (tmp_path / "predictions.json").stat().st_size > 12_629 * 50
