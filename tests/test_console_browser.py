"""After ``make demo``, in a real browser (Debian's chromium, headless, Playwright): the Dagster UI
an operator opens, then the customer console, docs/console.md's walkthrough run as written, then
every page it visited checked for accessibility (axe-core) and keyboard use, at 1280×800 and
390×844.

The state is the one ``make demo`` leaves: ``make demo`` run verbatim in a folder that links this
checkout's ``.venv`` and packages (``tests/demo_checkout.py``; once for this file and the README's,
its home put back as made for each), so the doc's commands run there verbatim with no setting.
One demo serves both halves, in this order:

1. **The Dagster UI.** As a user following the README would, one more study of 64 candidates is
   run with ``typestrict study run`` (the demo's own have 12 or fewer), and ``dagster-webserver``
   serves the demo's Dagster home. The browser finds, without hovering and without "Show
   Markdown": every schedule of the store with its next evaluation time and its last decision's
   reason; every demo training's verdict sentence, the one its audit file gives; and a
   64-candidate leaderboard picture whose labels overlap nothing (by the picture's geometry, on
   the PNG the UI shows).
2. **The console.** ``make api`` run in that folder (the API's own application; Jev the demo's
   stand-in, as it says on its first line), and the Dagster daemon ``make ui`` starts
   (``dagster-daemon run`` on the demo's Dagster home) judges handed-over trainings and runs the
   backtests and studies the console launches.

One browser for the module; the walk's pages are the pages checked. Screenshots go to
``docs/screenshots/`` when ``TYPESTRICT_SCREENSHOTS=1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.demo_checkout import demo_checkout
from typestrict_pipeline.demo_data.build import DEMO_TRAININGS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "console.md"
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core@4.14.1" / "axe.min.js"
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "docs" / "screenshots"
BIN = Path(sys.executable).parent
CANDIDATES = 64  # the study run after the demo (the demo's own have 12 or fewer)
TIMEOUT_MS = 120_000  # a busy 2-core machine: generous, and every wait polls for a condition
LONG_MS = 900_000  # a verdict run or a study
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}

_UI = Path(__file__).with_name("test_ui_browser.py")
_spec = importlib.util.spec_from_file_location("test_ui_browser_helpers", _UI)
assert _spec is not None and _spec.loader is not None
ui = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ui)


# --- the doc ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One thing the walkthrough says to do: an ``sh`` block, or one browser action."""

    kind: str  # "sh" or "browser"
    text: str


def walkthrough_steps(text: str) -> list[Step]:
    """The "Walkthrough" section's ``sh`` blocks and bullets, in order."""
    section = text.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    steps: list[Step] = []
    for block, bullet in re.findall(r"```sh\n((?s:.*?))```|^- ([^\n]+)$", section, flags=re.M):
        steps.append(Step("sh", block) if block else Step("browser", bullet.strip()))
    return steps


ACTIONS: dict[str, re.Pattern[str]] = {
    "open": re.compile(r"Open `(?P<path>/[^`]*)`\."),
    "fill_file": re.compile(r"Fill \*\*(?P<label>.+?)\*\* with the contents of `(?P<file>[^`]+)`\."),
    "fill": re.compile(r"Fill \*\*(?P<label>.+?)\*\* with `(?P<value>[^`]*)`\."),
    "choose": re.compile(r"Choose `(?P<file>[^`]+)` for \*\*(?P<label>.+?)\*\*\."),
    "tick": re.compile(r"Tick \*\*(?P<label>.+?)\*\*\."),
    "press": re.compile(r"Press \*\*(?P<label>.+?)\*\*\."),
    "follow": re.compile(r"Follow \*\*(?P<label>.+?)\*\*\."),
    "see": re.compile(r"See \"(?P<text>.+?)\"\.?"),
    "wait": re.compile(r"Wait for \"(?P<text>.+?)\"\.?"),
    "download": re.compile(r"Download \*\*(?P<label>.+?)\*\* as `(?P<file>[^`]+)`\."),
}


def parse_action(bullet: str) -> tuple[str, dict[str, str]]:
    """The action a bullet names (every bullet must be one: the doc cannot drift from the test)."""
    for name, pattern in ACTIONS.items():
        match = pattern.fullmatch(bullet)
        if match:
            return name, match.groupdict()
    raise AssertionError(f"docs/console.md: a walkthrough bullet the test cannot run: {bullet!r}")


def test_every_bullet_of_the_walkthrough_is_an_action_the_test_runs() -> None:
    steps = walkthrough_steps(DOC.read_text(encoding="utf-8"))
    kinds = [parse_action(s.text)[0] for s in steps if s.kind == "browser"]
    assert kinds[:3] == ["open", "fill_file", "press"]
    for needed in ("Keep the model even if it does not beat Jev", "Download the verifier", "verify_audit.py audit.json",
                   "Run the backtest", "Show the estimate", "Re-run on a schedule", "Settings → Usage"):
        assert any(needed in s.text for s in steps), needed


# --- the demo's state, the servers --------------------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The checkout after ``make demo`` (:func:`demo_checkout.demo_checkout`: one ``make demo``
    for this file and the README's, put back as made for each); its home is ``.typestrict``."""
    root = demo_checkout(tmp_path_factory)
    from typestrict_pipeline.credits import CreditLedger
    from typestrict_pipeline.store import open_store

    engine = open_store(f"sqlite:///{root / '.typestrict' / 'store.db'}")  # the page checks start a training
    CreditLedger(engine).grant("demo", len(VIEWPORTS), reference="console-page-checks")  # per viewport
    engine.dispose()
    yield root


# --- the Dagster UI after make demo (before the walk changes the demo's state) -------------------


def _typestrict(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BIN / "typestrict"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


@pytest.fixture(scope="module")
def after_demo(checkout: Path) -> Iterator[dict[str, Any]]:
    """``make demo``'s home plus a 64-candidate study, served by ``dagster-webserver``."""
    home = checkout / ".typestrict"
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "TYPESTRICT_STORE_URL")}
    env["TYPESTRICT_HOME"] = str(home)
    grid = ",".join(f"{0.30 + i * 0.005:.3f}" for i in range(CANDIDATES))
    out = _typestrict(env, "study", "run", "wx64", "--synthetic", "--workspace", "demo",
                      "--start", "2012-01-01", "--end", "2012-12-01", "--tune-steps", "20",
                      "--eval-steps", "20", "--holdout-steps", "20", "--grid", f"skill={grid}",
                      "--max-candidates", str(CANDIDATES), "--max-total-steps", "200000")
    match = re.search(r"wrote study (\d+) \(Finished\)", out)
    assert match, out[-2000:]
    schedules = json.loads(_typestrict(env, "schedule", "status", "--json"))
    served_env = {**env, "DAGSTER_HOME": str(home / "dagster_home")}
    with ui.webserver(served_env, checkout / "webserver.log") as url:
        yield {"url": url, "home": home, "study_id": int(match.group(1)), "schedules": schedules}


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
    ui._open(page, f"{after_demo['url']}/assets/study_leaderboard?view=partitions&partition={after_demo['study_id']}")
    ui.check_leaderboard_picture(page, f"sqlite:///{after_demo['home'] / 'store.db'}", after_demo["study_id"],
                                 CANDIDATES)


# --- the console: make api and the Dagster daemon -------------------------------------------------


@dataclass
class Served:
    """The console's URL, the checkout it runs in, and what the walk leaves for the page checks."""

    url: str
    root: Path
    pages: dict[str, str] = field(default_factory=dict)  # name -> path
    log: list[str] = field(default_factory=list)  # the server's output, line by line


def _daemon(root: Path, log: Path) -> subprocess.Popen[bytes]:
    """``dagster-daemon`` on the demo's Dagster home, as ``make ui`` (``dagster dev``) runs it."""
    home = root / ".typestrict"
    env = {k: v for k, v in os.environ.items() if k != "TYPESTRICT_STORE_URL"}
    env.update(DAGSTER_HOME=str(home / "dagster_home"), TYPESTRICT_HOME=str(home))
    with log.open("wb") as out:
        return subprocess.Popen([str(root / ".venv" / "bin" / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def served(checkout: Path) -> Iterator[Served]:
    """``make api`` on the demo's home (the console and the API, Jev the demo's stand-in) and the
    Dagster daemon that judges handed-over trainings and runs launched backtests and studies."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_api_support import ServedCommand, free_port

    from typestrict_pipeline.processes import stop_process_group

    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=checkout, capture_output=True, check=False)
    assert stale.returncode == 0, "the virtualenv is older than pyproject.toml: run `make .venv/.installed` first"
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("TYPESTRICT_HOME", "DAGSTER_HOME", "TYPESTRICT_STORE_URL", "TYPESTRICT_API_JEV_SOURCE",
                        "MAKEFLAGS", "MAKELEVEL")}
    daemon = _daemon(checkout, checkout / "daemon.log")
    try:
        with ServedCommand(["make", "--no-print-directory", "api"], {**env, "API_PORT": str(port)}, port,
                           cwd=checkout) as api:
            api.wait_ready()
            assert "stand-in" in api.lines[0], api.lines[:3]  # make api says its Jev on its first line
            yield Served(api.url, checkout, log=api.lines)
    finally:
        stop_process_group(daemon, 60)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield b
        finally:
            b.close()


def _shot(page: Any, name: str) -> None:
    if os.environ.get("TYPESTRICT_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        from PIL import Image

        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        with Image.open(path) as shot:  # a palette PNG: a third of the size, same to the eye
            small = shot.convert("RGB").quantize(colors=128)
        small.save(path, optimize=True)


# --- the walk -----------------------------------------------------------------------------------


def _page_name(path: str) -> str | None:
    """A name for each kind of page the walk visits (the page checks visit one of each)."""
    for name, pattern in (("sign-in", r"/console/sign-in"), ("trainings", r"/console/trainings"),
                          ("new-training", r"/console/trainings/new"), ("training", r"/console/trainings/tr_\w+"),
                          ("result", r"/console/models/[\w.-]+"), ("backtests", r"/console/backtests"),
                          ("backtest", r"/console/backtests/[0-9a-f]+"), ("study", r"/console/studies/\d+"),
                          ("usage", r"/console/settings/usage"),
                          ("notifications", r"/console/settings/notifications")):
        if re.fullmatch(pattern, path):
            return name
    return None


def _keyboard_press(locator: Any) -> None:
    """Activate a button or link with the keyboard: focus it, then Enter."""
    locator.focus()
    locator.page.keyboard.press("Enter")


def _field(page: Any, label: str) -> Any:
    """The form control labelled ``label`` (not a section titled the same); the first, where two
    forms of a page ask for the same thing by the page's one name (the Studies section's New
    study and Re-run on a schedule both ask for "Min unseen steps for a re-run")."""
    return page.get_by_label(label, exact=True).and_(page.locator("input, textarea, select")).first


def run_action(page: Any, base: str, root: Path, bullet: str) -> None:
    from playwright.sync_api import expect

    kind, a = parse_action(bullet)
    if kind == "open":
        page.goto(base + a["path"])
    elif kind in ("fill", "fill_file"):
        value = a["value"] if kind == "fill" else (root / a["file"]).read_text(encoding="utf-8").strip()
        _field(page, a["label"]).fill(value)
    elif kind == "choose":
        _field(page, a["label"]).set_input_files(str(root / a["file"]))
    elif kind == "tick":
        box = _field(page, a["label"])
        box.focus()
        page.keyboard.press("Space")
        expect(box).to_be_checked()
    elif kind == "press":
        _keyboard_press(page.get_by_role("button", name=a["label"], exact=True))
    elif kind == "follow":
        _keyboard_press(page.get_by_role("link", name=a["label"], exact=True).first)
    elif kind in ("see", "wait"):
        expect(page.get_by_text(a["text"]).first).to_be_visible(timeout=LONG_MS if kind == "wait" else TIMEOUT_MS)
    elif kind == "download":
        link = page.get_by_role("link", name=a["label"], exact=True).first
        with page.expect_download() as info:
            _keyboard_press(link)
        info.value.save_as(str(root / a["file"]))


def _sh(block: str, root: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TYPESTRICT_HOME", "DAGSTER_HOME", "TYPESTRICT_STORE_URL")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{block}\n---\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_walkthrough_runs_as_written(served: Served, browser: Any) -> None:
    """Sign in → training with the keep box → predictions → result page → audit verified with
    the downloaded verifier → backtest → study → schedule → usage, as docs/console.md says."""
    context = browser.new_context(viewport=VIEWPORTS["desktop"], accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    said = []
    took: list[tuple[float, str]] = []
    try:
        for step in walkthrough_steps(DOC.read_text(encoding="utf-8")):
            started = time.monotonic()
            if step.kind == "sh":
                said.append(_sh(step.text, served.root))
            else:
                run_action(page, served.url, served.root, step.text)
            path = page.url.removeprefix(served.url).split("?", 1)[0] if page.url.startswith("http") else ""
            name = _page_name(path)
            if name is not None:
                served.pages.setdefault(name, path)
            if name == "result":
                _shot(page, "console-result")
            if name == "study":
                _shot(page, "console-study")
            took.append((time.monotonic() - started, step.text[:60]))
    finally:
        context.close()
        print("slowest steps:", sorted(took, reverse=True)[:6])
    key = (served.root / "key.txt").read_text().strip()
    assert key.startswith("tsk_")
    secret = key[21:]  # tsk_<16 hex>_<secret>
    assert urls and not any(secret in u for u in urls)  # the key never lands in a URL
    assert served.log and not any(secret in line for line in served.log)  # nor in the server's log
    assert any("verify_audit.py: OK" in s or "OK" in s for s in said), said
    audit = json.loads((served.root / "audit.json").read_text())
    assert audit["overall"]["verdict"] in ("beats", "kept") and audit["overall"]["keep_if_loses"] is True
    model_id = served.pages["result"].rsplit("/", 1)[1]
    home_audit = served.root / ".typestrict" / "audits" / f"{model_id}.json"
    assert (served.root / "audit.json").read_bytes() == home_audit.read_bytes()  # the stored bytes


# --- every page: accessibility, keyboard, small screens ------------------------------------------


def _axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on the page (the vendored copy, run in the page)."""
    page.evaluate(AXE.read_text(encoding="utf-8"))
    result: list[dict[str, Any]] = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => "
        "({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))")
    violations: list[dict[str, Any]] = list(result)
    return violations


def _axe_problems(page: Any, where: str) -> list[str]:
    """axe-core's critical and serious violations on the page, each named with ``where``."""
    return [f"{where}: {v['impact']} {v['id']} ({v['help']}) at {v['nodes']}"
            for v in _axe(page) if v["impact"] in ("critical", "serious")]


def _wider_than_screen(page: Any, where: str) -> list[str]:
    """The page's overflow past the screen's width, if any, named with ``where``."""
    wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    return [f"{where}: the page is {wide}px wider than the screen"] if wide > 1 else []


def _tab_through(page: Any) -> list[str]:
    """Press Tab until focus comes back round; the focused elements, in order, as text."""
    seen: list[str] = []
    for _ in range(400):
        page.keyboard.press("Tab")
        desc = page.evaluate(
            "() => { const e = document.activeElement; if (!e || e === document.body) return '';"
            " const r = e.getBoundingClientRect(); const s = getComputedStyle(e);"
            " return [e.tagName, e.id || e.getAttribute('name') || (e.textContent || '').trim().slice(0, 40),"
            " r.width > 0 && r.height > 0 ? 'shown' : 'hidden', s.outlineStyle !== 'none' ? 'ring' : 'no-ring'].join('|'); }")
        if desc and seen and desc == seen[0]:
            break
        if desc:
            seen.append(desc)
    return seen


def _awaiting_training(page: Any, served: Served) -> str:
    """A training started with the walk's dataset and left awaiting its predictions: its page
    shows the split and the upload form."""
    page.goto(served.url + "/console/trainings/new")
    page.get_by_label("Upload a dataset", exact=True).set_input_files(str(served.root / "reviews.csv"))
    for label, value in (("Group column (optional)", "movie"), ("Name", "sentiment"),
                         ("Question", "Is this review fresh or rotten?"), ("Answer column", "label"),
                         ("Answers", "fresh, rotten")):
        page.get_by_label(label, exact=True).fill(value)
    page.get_by_role("button", name="Start the training (1 credit)", exact=True).click()
    page.wait_for_url(re.compile(r".*/console/trainings/tr_\w+$"))
    path: str = page.url.removeprefix(served.url)
    return path


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_every_page_is_accessible_and_usable_with_the_keyboard(served: Served, browser: Any, viewport: str) -> None:
    assert served.pages, "the walkthrough visited no page (it failed first)"
    context = browser.new_context(viewport=VIEWPORTS[viewport], accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    try:
        page.goto(served.url + "/console/sign-in")
        key = (served.root / "key.txt").read_text().strip()
        page.get_by_label("Workspace key", exact=True).fill(key)
        page.get_by_role("button", name="Sign in", exact=True).click()
        page.wait_for_url(re.compile(r".*/console/trainings$"))
        pages = dict(served.pages)
        pages["training"] = _awaiting_training(page, served)  # the walk's own one is judged by now
        for name, path in sorted(pages.items()):
            if name == "sign-in":
                continue
            page.goto(served.url + path)
            page.wait_for_load_state("networkidle")
            problems += _axe_problems(page, f"{viewport} {name}")
            stops = _tab_through(page)
            if not stops or not stops[0].startswith("A|") or "Skip to content" not in stops[0]:
                problems.append(f"{viewport} {name}: the first Tab stop is not 'Skip to content': {stops[:1]}")
            for stop in stops[1:]:
                if stop.endswith("|hidden|ring") or stop.endswith("|no-ring"):
                    problems.append(f"{viewport} {name}: a Tab stop without a visible focus: {stop}")
            problems += _wider_than_screen(page, f"{viewport} {name}")
            if str(served.root.resolve()) in page.content():  # a customer never sees the server's folders
                problems.append(f"{viewport} {name}: the page names the server's folder {served.root.resolve()}")
            if viewport == "phone":
                _shot(page, f"console-{name}-phone")
            elif name not in ("result", "study"):
                _shot(page, f"console-{name}")
    finally:
        context.close()
    assert not problems, "\n".join(problems)


# --- the leaderboard chart from 4 to 500 candidates ---------------------------------------------


def _synthetic_study(root: Path, n: int) -> int:
    """A finished study of ``n`` candidates in the demo's workspace, on the synthetic workflow
    (the studies core's own runner: seconds, not minutes, for 500 candidates)."""
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.repository import LastBacktest
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import create_study_from_config, study_backend

    engine = open_store(f"sqlite:///{root / '.typestrict' / 'store.db'}")
    try:
        form = StudyForm(workflow=f"chart_{n}", start="2012-01-01", end="2012-12-01", tune_steps=10,
                         eval_steps=10, holdout_steps=10, random=["skill=0.3:0.7"], random_draws=n,
                         synthetic=True, max_candidates=n, max_total_steps=10**7, folds=2, workspace="demo",
                         name=f"{n} candidates")
        sid = create_study_from_config(engine, study_config(form), last_backtest=LastBacktest(30, 10))
        run_study_local(engine, sid, study_backend(engine, sid), max_workers=2)
    finally:
        engine.dispose()
    return sid


@contextmanager
def _signed_in(browser: Any, served: Served, size: dict[str, int], then: str) -> Iterator[Any]:
    """A page of a fresh browser context of ``size``, signed in with the walk's key and sent on
    to ``then``; the context is closed after the block."""
    context = browser.new_context(viewport=size)
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{served.url}/console/sign-in?next={then}")
        page.get_by_label("Workspace key", exact=True).fill((served.root / "key.txt").read_text().strip())
        page.get_by_role("button", name="Sign in", exact=True).click()
        yield page
    finally:
        context.close()


def _boxes_overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


@pytest.mark.parametrize("n", [4, 500])
def test_the_leaderboard_chart_stays_readable_from_4_to_500_candidates(served: Served, browser: Any, n: int) -> None:
    """Drawn from the API's data in Debian's chromium, on a laptop and a phone: every candidate
    it draws (all of 4; the top 100 of 500, the rest summarised under the table) is a mark, the
    chart fits the screen, no two axis labels overlap, a handful of ranks are labelled, and a
    candidate's tooltip names it. With 500, the paged table passes axe and its "Next 100" link
    works from the keyboard."""
    from playwright.sync_api import expect

    from typestrict_pipeline.console.board_pages import TOP_K

    sid = _synthetic_study(served.root, n)
    problems = []
    for viewport, size in sorted(VIEWPORTS.items()):
        with _signed_in(browser, served, size, f"/console/studies/{sid}") as page:
            chart = page.locator("#leaderboard-chart")
            expect(chart).to_have_attribute("data-state", "drawn")
            spec = json.loads(page.locator("#leaderboard-spec").text_content() or "{}")
            board = page.evaluate(f"() => fetch({json.dumps(spec['data']['url'])}).then(r => r.json())")
            ranked = [r for r in board["rows"] if r["rank"] is not None]
            assert len(ranked) == min(n, TOP_K)  # what the chart reads: the top ranks only
            values = sum(r[k] is not None for r in ranked for k in ("oos", "in_sample", "adjusted"))
            marks = chart.locator("g.mark-symbol.role-mark path")
            expect(marks).to_have_count(values)  # every score of every candidate is a mark
            width = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            svg = chart.locator("svg").first.bounding_box()
            box = chart.bounding_box()
            assert svg is not None and box is not None
            if width > 1 or svg["width"] > box["width"] + 1:
                problems.append(f"{viewport} {n}: the chart is wider than its place ({svg['width']} > {box['width']})")
            for axis in chart.locator("g.role-axis").all():  # each axis on its own
                shown = axis.locator("g.role-axis-label text:not([opacity='0'])")  # Vega hides overlaps
                labels = [b for b in (t.bounding_box() for t in shown.all()) if b]
                if any(_boxes_overlap(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]):
                    problems.append(f"{viewport} {n}: labels of an axis overlap")
                if len(labels) > 12:
                    problems.append(f"{viewport} {n}: {len(labels)} labels on an axis")
            marks.first.hover(force=True)
            tip = page.locator("#vg-tooltip-element")
            expect(tip).to_have_class(re.compile(r"\bvisible\b"))
            expect(tip).to_contain_text("Candidate")
            if n > TOP_K:
                expect(page.locator("#board tbody tr[data-candidate]")).to_have_count(TOP_K)
                expect(page.locator("#board-rest")).to_contain_text(f"{n - TOP_K} more candidates on other pages")
                problems += _axe_problems(page, f"{viewport} {n}")
                following = page.get_by_role("link", name=f"Next {TOP_K}: candidates {TOP_K + 1} to {2 * TOP_K}")
                _keyboard_press(following)
                page.wait_for_url(re.compile(rf".*/console/studies/{sid}\?page=2#board-caption$"))
                ranks = page.locator("#board tbody tr[data-candidate] td:first-child").all_text_contents()
                assert {str(r) for r in range(TOP_K + 1, 2 * TOP_K + 1)} <= set(ranks), ranks
            if os.environ.get("TYPESTRICT_SCREENSHOTS") == "1":
                chart.screenshot(path=str(SCREENSHOTS / f"console-chart-{n}-{viewport}.png"))
    assert not problems, "\n".join(problems)


def _many_backtests_and_studies(root: Path, n: int) -> tuple[list[str], int]:
    """``n`` more finished backtests and ``n`` more studies (not started) in the demo's workspace,
    through the cores the API and the console call; the backtests' ids and the studies' count."""
    import datetime as dt

    from typestrict_pipeline.api.studies import count_studies
    from typestrict_pipeline.backtest import PointInTimeTable, Workflow, run_backtest
    from typestrict_pipeline.backtest.store import save_backtest
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.service import create_study_from_config

    day = dt.timedelta(days=1)
    t0 = dt.datetime(2021, 1, 1, tzinfo=dt.UTC)
    wf = Workflow("pager", lambda c: 1, lambda c: 1, lambda d, o, c: 1.0, ("t",), day, "the value on the next day")
    data = PointInTimeTable("t", event_time=[t0 + i * day for i in range(5)],
                            known_time=[t0 + (i + 1) * day for i in range(5)], columns={"v": [1.0] * 5})
    engine = open_store(f"sqlite:///{root / '.typestrict' / 'store.db'}")
    try:
        result = run_backtest(wf, data=data, start=t0 + day, end=t0 + 3 * day, step=day)
        made = [save_backtest(engine, result, workspace="demo") for _ in range(n)]
        for i in range(n):  # one study at a time per workflow: a workflow each
            form = StudyForm(workflow=f"pager-{i}", start="2012-01-01", end="2012-12-01", tune_steps=20,
                             eval_steps=20, holdout_steps=20, grid=["skill=0.5,0.6"], max_candidates=2,
                             max_total_steps=1000, synthetic=True, workspace="demo")
            create_study_from_config(engine, study_config(form))
        return made, count_studies(engine, "demo")
    finally:
        engine.dispose()


def test_the_backtests_page_pages_its_two_lists_from_the_keyboard(served: Served, browser: Any) -> None:
    """With more backtests and more studies than a page holds, the Backtests page shows the newest
    50 of each, passes axe, and each list's "Older" link works from the keyboard and keeps the
    other list's page (checked over HTTP in tests/test_console_pages.py; here as a user presses)."""
    from playwright.sync_api import expect

    from typestrict_pipeline.console.paging import PER_PAGE

    made, n_studies = _many_backtests_and_studies(served.root, PER_PAGE + 3)
    assert n_studies > PER_PAGE
    problems: list[str] = []
    with _signed_in(browser, served, VIEWPORTS["phone"], "/console/backtests") as page:
        page.wait_for_url(re.compile(r".*/console/backtests$"))
        cards = page.locator("#backtests tbody tr")
        studies = page.locator("#study-list tbody tr")
        expect(cards).to_have_count(PER_PAGE)
        expect(studies).to_have_count(PER_PAGE)
        first = cards.evaluate_all("rows => rows.map(r => r.dataset.backtest)")
        first_studies = studies.evaluate_all("rows => rows.map(r => r.dataset.study)")
        assert set(first) <= set(made), "newest first: the 53 just made are the newest"
        older = page.locator("#backtests-pages a[rel=next]")
        expect(older).to_have_text(re.compile(r"^Older \d+$"))
        _keyboard_press(older)
        page.wait_for_url(re.compile(r".*/console/backtests\?backtests=2$"))
        second = cards.evaluate_all("rows => rows.map(r => r.dataset.backtest)")
        assert set(made) <= set(first) | set(second) and not set(first) & set(second), second
        assert studies.evaluate_all("rows => rows.map(r => r.dataset.study)") == first_studies
        _keyboard_press(page.locator("#studies-pages a[rel=next]"))
        page.wait_for_url(re.compile(r".*/console/backtests\?backtests=2&studies=2$"))
        assert cards.evaluate_all("rows => rows.map(r => r.dataset.backtest)") == second  # kept
        later = studies.evaluate_all("rows => rows.map(r => r.dataset.study)")
        assert len(later) == n_studies - PER_PAGE and not set(later) & set(first_studies), later
        expect(page.locator("#studies-pages a[rel=prev]")).to_have_text(f"Newer {PER_PAGE}")
        problems += _axe_problems(page, "phone") + _wider_than_screen(page, "phone")
    assert not problems, "\n".join(problems)


def test_older_trainings_are_a_keyboard_press_away(served: Served, browser: Any) -> None:
    """With more trainings than a page holds, the Trainings page shows the newest 50, passes axe on
    a laptop and a phone, and its "Older" link works from the keyboard (the list was one page of
    every training)."""
    import shutil

    from playwright.sync_api import expect

    from typestrict_pipeline.console.paging import PER_PAGE

    root = served.root / ".typestrict" / "trainings"

    def owner(folder: Path) -> object:
        for f in (folder / "manifest.json", folder / "api-draft.json"):
            if f.is_file():
                return json.loads(f.read_text(encoding="utf-8")).get("workspace_id")
        return None

    mine = [p for p in sorted(root.iterdir(), key=lambda p: (not (p / "manifest.json").is_file(), p.name))
            if p.is_dir() and not p.name.startswith(".") and owner(p) == "demo"]
    # a training with its manifest: a copy of a draft no lifecycle row knows is no training (not listed)
    assert mine, sorted(p.name for p in root.iterdir())
    copies = [root / f"tr_{i:016x}" for i in range(PER_PAGE + 5)]
    for i, copy in enumerate(copies):
        shutil.copytree(mine[0], copy)
        os.utime(copy, (1_600_000_000 + i, 1_600_000_000 + i))  # older than every training of the walk
    problems = []
    try:
        for viewport, size in sorted(VIEWPORTS.items()):
            with _signed_in(browser, served, size, "/console/trainings") as page:
                page.wait_for_url(re.compile(r".*/console/trainings$"))
                expect(page.locator("#trainings tbody tr")).to_have_count(PER_PAGE)
                problems += _axe_problems(page, viewport) + _wider_than_screen(page, viewport)
                older = page.locator("#trainings-pages a[rel=next]")
                expect(older).to_have_text(re.compile(r"^Older \d+$"))
                _keyboard_press(older)
                page.wait_for_url(re.compile(r".*/console/trainings\?page=2$"))
                shown = page.locator("#trainings tbody tr").evaluate_all("rows => rows.map(r => r.dataset.training)")
                assert copies[0].name in shown and len(shown) <= PER_PAGE, shown
                expect(page.locator("#trainings-pages a[rel=prev]")).to_have_text(f"Newer {PER_PAGE}")
    finally:
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
    assert not problems, "\n".join(problems)


def test_a_refusal_that_quotes_a_long_value_fits_a_phone(served: Served, browser: Any) -> None:
    """A refusal quotes what was sent: a long unbroken value (a mistyped address, a pasted
    dataset name) made the page up to 1,100 px wider than a phone's screen, the message and the
    form beside it scrolled sideways. Refusals and notices wrap anywhere now."""
    problems: list[str] = []
    with _signed_in(browser, served, VIEWPORTS["phone"], "/console/backtests") as page:
        page.wait_for_url(re.compile(r".*/console/backtests$"))
        _field(page, "Historical data").fill("d" * 200)
        _field(page, "Start").fill("2013-01-02")
        _field(page, "End").fill("2013-02-02")
        _keyboard_press(page.get_by_role("button", name="Run the backtest", exact=True))
        page.wait_for_selector("#backtest-error")
        problems += _wider_than_screen(page, "a refused backtest form")
        for path in ("/console/models/" + "m" * 100, "/console/" + "a" * 150):
            page.goto(served.url + path)
            problems += _wider_than_screen(page, path[:30])
    assert not problems, "\n".join(problems)


def test_an_htmx_button_refused_by_the_server_says_so(served: Served, browser: Any) -> None:
    """A page opened before the session changed (signed out and in again in another tab) holds
    the old session's CSRF token: "Show the estimate" was refused (403) and HTMX swaps a refusal
    nowhere, so the button did nothing at all. The refusal is said at the top of the page now,
    focused, with what to do."""
    from playwright.sync_api import expect

    with _signed_in(browser, served, VIEWPORTS["phone"], "/console/backtests") as page:
        page.wait_for_url(re.compile(r".*/console/backtests$"))
        other = page.context.new_page()
        other.goto(served.url + "/console/trainings")
        other.get_by_role("button", name="Sign out", exact=True).click()
        other.wait_for_url(re.compile(r".*/console/sign-in\?signed_out=1$"))
        other.get_by_label("Workspace key", exact=True).fill((served.root / "key.txt").read_text().strip())
        other.get_by_role("button", name="Sign in", exact=True).click()
        other.wait_for_url(re.compile(r".*/console/trainings$"))
        _keyboard_press(page.get_by_role("button", name="Show the estimate", exact=True))
        said = page.locator("#htmx-error")
        expect(said).to_contain_text("Reload the page and send the form again")
        expect(said).to_be_focused()
