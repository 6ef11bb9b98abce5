"""The customer console in a real browser: docs/console.md's walkthrough run as written, then
every page it visited checked for accessibility (axe-core) and keyboard use, at 1280×800 and
390×844, in Debian's chromium driven by Playwright.

The state is the one ``make demo`` leaves, built once for the module by the demo's own parts
(``demo.refund`` on its two fast trainings, then backtest, study and re-runs, as
``test_cli_readme.py`` builds it) in ``<tmp>/.typestrict``, the default home of a folder that
links this checkout's ``.venv`` and packages, so the doc's commands run there verbatim. The
console is the API's own application (``create_app``) on a real uvicorn server, with the demo's
Jev stand-in as its Jev. What the doc leaves to the Dagster daemon (``make ui``) is done as the
daemon does it: a ``training_sensor`` tick on the demo's instance, then the ``verdict_job`` run
it requests, whenever a new training is handed over.

One browser for the module; the walk's pages are the pages checked. Screenshots go to
``docs/screenshots/`` when ``TYPESTRICT_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "console.md"
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core@4.14.1" / "axe.min.js"
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "docs" / "screenshots"
LINKED = (".venv", "typestrict_pipeline", "assets", "resources", "demo", "bench", "docs", "Makefile",
          "workspace.yaml", "pyproject.toml", "README.md")
FAST_TRAININGS = ("rt-tiny", "rt-failed")
TIMEOUT_MS = 120_000  # a busy 2-core machine: generous, and every wait polls for a condition
LONG_MS = 900_000  # a verdict run or a study
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder that looks like the checkout after ``make demo``; its home is ``.typestrict``."""
    root = tmp_path_factory.mktemp("checkout")
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    home = root / ".typestrict"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYPESTRICT_HOME", str(home))
        mp.setenv("DAGSTER_HOME", str(home / "dagster_home"))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        home.mkdir()
        from demo import backtest, refund, reruns, study
        from demo import home as demo_home
        from typestrict_pipeline.demo_data.build import DEMO_TRAININGS

        assert refund.run(home, only=FAST_TRAININGS) == 0
        for part in (backtest, study, reruns):
            assert part.run(home) == 0
        demo_home.finish(home, [t.training_id for t in DEMO_TRAININGS])
    yield root


def judge_new_trainings(home: Path) -> list[str]:
    """What the daemon does for a handed-over training: a ``training_sensor`` tick on the demo's
    instance (it knows the demo's trainings already), then each ``verdict_job`` run it requests."""
    import dagster as dg

    from assets import area_definitions
    from resources import default_resources

    resources = default_resources()
    defs = dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=resources))
    instance = dg.DagsterInstance.get()
    sensor = defs.resolve_sensor_def("training_sensor")
    tick = sensor(dg.build_sensor_context(instance=instance, resources=resources, definitions=defs))
    if not isinstance(tick, dg.SensorResult):
        return []
    for request in tick.dynamic_partitions_requests or []:
        assert isinstance(request, dg.AddDynamicPartitionsRequest)
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = defs.resolve_job_def("verdict_job")
    judged = []
    for run in tick.run_requests or []:
        assert run.partition_key is not None
        job.execute_in_process(partition_key=run.partition_key, instance=instance, tags=run.tags,
                               run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
                               raise_on_error=False)
        judged.append(run.partition_key)
    return judged


@dataclass
class Served:
    """The console's URL, the checkout it runs in, and what the walk leaves for the page checks."""

    url: str
    root: Path
    pages: dict[str, str] = field(default_factory=dict)  # name -> path
    judged: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def served(checkout: Path) -> Iterator[Served]:
    """``create_app`` on the demo's home, served by uvicorn, with the demo's Jev stand-in; and a
    thread doing the daemon's part for trainings handed over."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_api_support import ApiServer

    from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_MODEL, jev_standin_server

    home = checkout / ".typestrict"
    store = f"sqlite:///{home / 'store.db'}"
    stop = threading.Event()
    out = Served("", checkout)
    with pytest.MonkeyPatch.context() as mp, jev_standin_server() as jev:
        mp.setenv("TYPESTRICT_HOME", str(home))
        mp.setenv("DAGSTER_HOME", str(home / "dagster_home"))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        source = {"kind": "openai", "base_url": jev.base_url, "model": JEV_STANDIN_MODEL,
                  "api_key_env": None, "max_attempts": 2}

        def daemon() -> None:
            while not stop.wait(1.0):
                if any((p / "manifest.json").is_file() and p.name not in out.judged
                       for p in (home / "trainings").glob("tr_*")):
                    out.judged.extend(judge_new_trainings(home))

        thread = threading.Thread(target=daemon, daemon=True)
        thread.start()
        try:
            with ApiServer(store, home, jev_source=source) as server:
                out.url = server.url
                yield out
        finally:
            stop.set()
            thread.join(timeout=600)


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[Any]:
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
                          ("backtest", r"/console/backtests/\d+"), ("study", r"/console/studies/\d+"),
                          ("usage", r"/console/settings/usage"),
                          ("notifications", r"/console/settings/notifications")):
        if re.fullmatch(pattern, path):
            return name
    return None


def _keyboard_press(locator: Any) -> None:
    """Activate a button or link with the keyboard: focus it, then Enter."""
    locator.focus()
    locator.page.keyboard.press("Enter")


def run_action(page: Any, base: str, root: Path, bullet: str) -> None:
    from playwright.sync_api import expect

    kind, a = parse_action(bullet)
    if kind == "open":
        page.goto(base + a["path"])
    elif kind in ("fill", "fill_file"):
        value = a["value"] if kind == "fill" else (root / a["file"]).read_text(encoding="utf-8").strip()
        page.get_by_label(a["label"], exact=True).fill(value)
    elif kind == "choose":
        page.get_by_label(a["label"], exact=True).set_input_files(str(root / a["file"]))
    elif kind == "tick":
        box = page.get_by_label(a["label"], exact=True)
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
    said = []
    try:
        for step in walkthrough_steps(DOC.read_text(encoding="utf-8")):
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
    finally:
        context.close()
    key = (served.root / "key.txt").read_text().strip()
    assert key.startswith("tsk_")
    assert any("verify_audit.py: OK" in s or "OK" in s for s in said), said
    assert len(served.judged) == 1
    audit = json.loads((served.root / "audit.json").read_text())
    assert audit["overall"]["verdict"] in ("beats", "kept") and audit["overall"]["keep_if_loses"] is True
    home_audit = served.root / ".typestrict" / "audits" / f"{served.judged[0]}.json"
    assert (served.root / "audit.json").read_bytes() == home_audit.read_bytes()


# --- every page: accessibility, keyboard, small screens ------------------------------------------


def _axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on the page (the vendored copy, run in the page)."""
    page.evaluate(AXE.read_text(encoding="utf-8"))
    result: list[dict[str, Any]] = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => "
        "({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))")
    violations: list[dict[str, Any]] = list(result)
    return violations


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
        for name, path in sorted(served.pages.items()):
            if name == "sign-in":
                continue
            page.goto(served.url + path)
            page.wait_for_load_state("networkidle")
            for v in _axe(page):
                if v["impact"] in ("critical", "serious"):
                    problems.append(f"{viewport} {name}: {v['impact']} {v['id']} ({v['help']}) at {v['nodes']}")
            stops = _tab_through(page)
            if not stops or not stops[0].startswith("A|") or "Skip to content" not in stops[0]:
                problems.append(f"{viewport} {name}: the first Tab stop is not 'Skip to content': {stops[:1]}")
            for stop in stops[1:]:
                if stop.endswith("|hidden|ring") or stop.endswith("|no-ring"):
                    problems.append(f"{viewport} {name}: a Tab stop without a visible focus: {stop}")
            wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            if wide > 1:
                problems.append(f"{viewport} {name}: the page is {wide}px wider than the screen")
            if viewport == "phone":
                _shot(page, f"console-{name}-phone")
            elif name not in ("result", "study"):
                _shot(page, f"console-{name}")
    finally:
        context.close()
    assert not problems, "\n".join(problems)
