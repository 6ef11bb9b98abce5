"""The Dagster UI after ``make demo``, in a real browser (Debian's chromium, headless, Playwright).

The home is the one ``make demo`` builds: ``python -m demo`` (the Makefile's recipe) run into a
fresh ``TYPESTRICT_HOME``, nothing prepared by the test. Then, as a user following the README
would, one more study of 64 candidates is run with ``typestrict study run`` (the demo's own
studies have 12 or fewer), and ``dagster-webserver`` serves the demo's Dagster home. The browser
finds, without hovering and without "Show Markdown": every schedule of the store with its next
evaluation time and its last decision's reason; every demo training's verdict sentence, the one
its audit file gives; and a 64-candidate leaderboard picture whose labels overlap nothing (by
the picture's geometry, on the PNG the UI shows).
"""

import base64
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.demo_data.build import DEMO_TRAININGS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CANDIDATES = 64

_UI = Path(__file__).with_name("test_ui_browser.py")
_spec = importlib.util.spec_from_file_location("test_ui_browser_helpers", _UI)
assert _spec is not None and _spec.loader is not None
ui = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ui)


def _typestrict(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BIN / "typestrict"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


@pytest.fixture(scope="module")
def after_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``make demo``'s home plus a 64-candidate study, served by ``dagster-webserver``."""
    root = tmp_path_factory.mktemp("after-demo")
    home = root / ".typestrict"
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "TYPESTRICT_STORE_URL")}
    env["TYPESTRICT_HOME"] = str(home)
    demo = subprocess.run([sys.executable, "-m", "demo"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert demo.returncode == 0 and "make demo: finished" in demo.stdout, demo.stdout[-3000:] + demo.stderr[-3000:]
    grid = ",".join(f"{0.30 + i * 0.005:.3f}" for i in range(CANDIDATES))
    out = _typestrict(env, "study", "run", "wx64", "--synthetic", "--workspace", "demo",
                      "--start", "2012-01-01", "--end", "2012-12-01", "--tune-steps", "20",
                      "--eval-steps", "20", "--holdout-steps", "20", "--grid", f"skill={grid}",
                      "--max-candidates", str(CANDIDATES), "--max-total-steps", "200000")
    match = re.search(r"wrote study (\d+) \(Finished\)", out)
    assert match, out[-2000:]
    schedules = json.loads(_typestrict(env, "schedule", "status", "--json"))
    served_env = {**env, "DAGSTER_HOME": str(home / "dagster_home")}
    with ui.webserver(served_env, root / "webserver.log") as url:
        yield {"url": url, "home": home, "study_id": int(match.group(1)), "schedules": schedules}


@pytest.fixture(scope="module")
def browser(after_demo: dict[str, Any]) -> Iterator[Any]:
    with ui.chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with ui.fresh_page(browser) as pg:
        yield pg


def test_every_schedule_shows_its_next_evaluation_and_its_last_reason_without_hovering(
        after_demo: dict[str, Any], page: Any) -> None:
    from playwright.sync_api import expect

    schedules = after_demo["schedules"]
    assert len(schedules) >= 2  # the demo's two: Seattle on its registered dataset, the regimes one
    ui._open(page, f"{after_demo['url']}/assets/study_schedules")
    for schedule in schedules:
        row = page.locator("tr", has_text=f"schedule {schedule['id']}").first
        expect(row).to_contain_text(re.compile(r"next evaluation: \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC"))
        expect(row).to_contain_text(schedule["timeline"]["last_message"])


@pytest.mark.parametrize("training", [t.training_id for t in DEMO_TRAININGS])
def test_every_demo_verdict_says_why_in_its_audits_sentence(
        after_demo: dict[str, Any], page: Any, training: str) -> None:
    from playwright.sync_api import expect

    from typestrict_pipeline.refund.explain import verdict_sentence_from_audit

    audit = json.loads((after_demo["home"] / "audits" / f"{training}.json").read_text(encoding="utf-8"))
    sentence = verdict_sentence_from_audit(audit)
    # The partition's own materialization (the Partitions view; the Overview shows the latest
    # materialization of any partition)
    ui._open(page, f"{after_demo['url']}/assets/verdict?view=partitions&partition={training}")
    expect(page.locator("tr", has_text="why").first).to_contain_text(sentence)
    expect(page.get_by_text(sentence).first).to_be_visible()


def test_a_64_candidate_leaderboard_picture_has_no_overlapping_labels(
        after_demo: dict[str, Any], page: Any) -> None:
    from assets.studies import leaderboard_picture
    from typestrict_pipeline import plots
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.leaderboard import load_leaderboard

    ui._open(page, f"{after_demo['url']}/assets/study_leaderboard?view=partitions&partition={after_demo['study_id']}")
    dialog = ui._picture_behind(page, "picture")
    src = dialog.locator("img[src^='data:image/png;base64,']").first.get_attribute("src")
    shown = base64.b64decode(src.split(",", 1)[1])
    engine = open_store(f"sqlite:///{after_demo['home'] / 'store.db'}")
    try:
        pic = leaderboard_picture(load_leaderboard(engine, after_demo["study_id"]))
    finally:
        engine.dispose()
    assert pic.png == shown and len(pic.markers) == CANDIDATES  # the picture the UI shows
    assert pic.width >= 1000 and pic.legend is not None and not plots.overlaps(pic.legend, pic.axes)
    boxes = [p.box for p in pic.labels]
    assert len(boxes) >= 12
    assert all(not plots.overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert all(not plots.overlaps(b, m) for b in boxes for m in pic.markers)
