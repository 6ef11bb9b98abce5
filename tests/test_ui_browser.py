"""The Dagster UI in a real browser: Debian's chromium, headless, driven by Playwright.

A Dagster home is prepared the way the demo prepares its own (a training registered by a real
``training_sensor`` tick and materialized by the run it requested; a second tick that skips with
its reason; a study run by ``study_job``), then ``dagster-webserver`` serves it on a free port
and the browser checks what a user sees: a verdict partition with its verdict and pictures, the
sensor's skip reason, the sensor's run shown as launched by the sensor, a study's leaderboard,
and a materialization launched from the UI that succeeds (its Jev stand-in is long gone: the
resource starts it again). Screenshots go to ``docs/screenshots/`` when
``TYPESTRICT_SCREENSHOTS=1``.
"""

import contextlib
import datetime as dt
import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets import area_definitions
from demo.ticks import SensorTick
from resources import default_resources
from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_MODEL
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "docs" / "screenshots"
TRAINING = "tr-ui"
CANDIDATES = 64
TIMEOUT_MS = 90_000  # a busy 2-core machine: generous, and every wait polls for a condition

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support_ui", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)
support.ANSWERS["review"] = ("fresh", "rotten")  # answers the demo's Jev stand-in knows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def prepare_home(root: Path) -> dict[str, Any]:
    """A Dagster home with the demo's kind of history; returns what the browser should find.

    Environment: sets ``DAGSTER_HOME`` and ``TYPESTRICT_HOME`` (the caller restores them).
    """
    home = root / "dagster_home"
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["TYPESTRICT_HOME"] = str(root)
    os.environ.pop("TYPESTRICT_STORE_URL", None)
    config = sqlite_instance_config(home)
    # The webserver launches runs itself (no daemon in this test): the default coordinator,
    # without the queue's concurrency settings.
    config.pop("concurrency", None)
    config["run_coordinator"] = {"module": "dagster._core.run_coordinator",
                                 "class": "DefaultRunCoordinator"}
    # No "Join the Dagster community" dialog: popping up over an open metadata dialog, its
    # dismissal closed that dialog too, now and then (a flaky picture check).
    config["nux"] = {"enabled": False}
    write_instance_yaml(home, config)
    # The demo's kind of training: Jev (demo stand-in) on a port that is closed by now.
    gone = {"kind": "openai", "base_url": f"http://127.0.0.1:{_free_port()}/v1",
            "model": JEV_STANDIN_MODEL, "api_key_env": None, "max_attempts": 1}
    support.make_training(root / "trainings", TRAINING, n=80, seed=5, jev=gone,
                          decisions=("review",), model_skill=0.95)
    defs = dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=default_resources()))
    instance = dg.DagsterInstance.get()
    from typestrict_pipeline.credits import CreditLedger
    from typestrict_pipeline.store import default_store_url, open_store

    engine = open_store(default_store_url())
    CreditLedger(engine).grant("tests", 1, reference="ui-test", reason="one training")
    sensor = defs.resolve_sensor_def("training_sensor")
    resources = default_resources()
    tick = SensorTick(instance, "training_sensor")
    result = sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(result, dg.SensorResult) and result.run_requests
    for request in result.dynamic_partitions_requests or []:
        assert isinstance(request, dg.AddDynamicPartitionsRequest)
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    [run_request] = result.run_requests
    run = defs.resolve_job_def("verdict_job").execute_in_process(
        partition_key=TRAINING, instance=instance, tags=tick.run_tags(run_request.run_key),
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
    assert run.success
    tick.fired([run.run_id], [run_request.run_key], result.cursor)
    # The next tick finds nothing new and says so: the skip reason the UI must show.
    again = SensorTick(instance, "training_sensor")
    skipped = sensor.evaluate_tick(dg.build_sensor_context(
        instance=instance, resources=resources, cursor=result.cursor))
    assert skipped.skip_message
    again.skipped(skipped.skip_message, skipped.cursor)
    study_id = _run_study(engine, instance)
    schedules = _schedule(engine, instance, study_id)
    engine.dispose()
    return {"verdict": run.output_for_node("verdict").verdict.value, "run_id": run.run_id,
            "skip": skipped.skip_message, "study_id": study_id, "why": run.output_for_node("verdict"),
            **schedules}


def _schedule(engine: Any, instance: dg.DagsterInstance, study_id: int) -> dict[str, Any]:
    """A re-run schedule on the study, evaluated once by the real sensor: a skip with its reason,
    and the study_schedules overview recorded, as the demo and the daemon record them."""
    from assets.reruns import study_rerun_sensor
    from resources.reruns import RerunSettingsResource
    from resources.store import StoreResource
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.service import enable_schedule
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.reruns.workspace import set_workspace
    from typestrict_pipeline.store import default_store_url

    set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    view = enable_schedule(engine, StoreStudies(engine), study_id=str(study_id), cadence="1h",
                           owner="ana@example.com")
    tick = SensorTick(instance, "study_rerun_sensor")
    data = study_rerun_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources={
        "store": StoreResource(url=default_store_url()), "reruns": RerunSettingsResource()}))
    for event in data.asset_events:
        instance.report_runless_asset_event(event)
    assert data.skip_message and data.asset_events
    tick.skipped(data.skip_message, data.cursor)
    return {"schedule_id": view.id, "schedule_skip": data.skip_message, "store_url": default_store_url()}


def _run_study(engine: Any, instance: dg.DagsterInstance) -> int:
    from assets.studies import study_job, study_run_config
    from resources.store import StoreResource
    from resources.studies import StudyRunnerResource
    from typestrict_pipeline.store import default_store_url
    from typestrict_pipeline.study.repository import LastBacktest
    from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
    from typestrict_pipeline.study.space import SearchSpace

    utc = dt.UTC
    # 64 candidates: the leaderboard picture a reader must still be able to use; a USD budget
    # and "Min unseen steps" so it can be scheduled
    config = StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [round(0.5 + i / 1000, 3) for i in range(CANDIDATES)]}),
        start=dt.datetime(2012, 1, 1, tzinfo=utc), end=dt.datetime(2012, 12, 1, tzinfo=utc),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=CANDIDATES, max_total_steps=1_000_000, budget_micro=10_000_000,
        backend={"backend": "synthetic", "cost_per_step": 3}, min_unseen_steps=5,
    )
    sid = create_study_from_config(engine, config, last_backtest=LastBacktest(30, 10))
    ran = study_job.execute_in_process(
        run_config={**study_run_config(sid), "loggers": {"console": {"config": {"log_level": "ERROR"}}}},
        instance=instance,
        resources={"store": StoreResource(url=default_store_url()), "study_runner": StudyRunnerResource()})
    assert ran.success
    return sid


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """The prepared home, served by ``dagster-webserver`` on a free port; yields (URL, facts)."""
    root = tmp_path_factory.mktemp("ui")
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "TYPESTRICT_HOME", "TYPESTRICT_STORE_URL")}
    try:
        facts = prepare_home(root)
        env = {**os.environ}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    with webserver(env, root / "webserver.log") as url:
        yield url, facts


@contextlib.contextmanager
def webserver(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """``dagster-webserver`` of this checkout's workspace on a free port, with ``env``, its output
    in ``log_path``, until the code location has loaded; its URL. Stopped on exit."""
    port = _free_port()
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port),
             "-w", str(REPO / "workspace.yaml")],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_loaded(url, proc, log_path)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def _wait_until_loaded(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Poll until the webserver answers and the code location has loaded (generous deadline)."""
    query = b'{"query": "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"}'
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dagster-webserver exited: {log.read_text()[-3000:]}")
        try:
            req = urllib.request.Request(f"{url}/graphql", data=query,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as answer:
                body = answer.read().decode()
            if '"loadStatus": "LOADED"' in body or '"loadStatus":"LOADED"' in body:
                return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"dagster-webserver did not load the code location: {log.read_text()[-3000:]}")


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright (its waits set to :data:`TIMEOUT_MS`)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def fresh_page(browser: Any) -> Iterator[Any]:
    """A page of its own context, 1400 × 1000."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture(scope="module")
def browser(served: tuple[str, dict[str, Any]]) -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with fresh_page(browser) as pg:
        yield pg


def _shot(page: Any, name: str) -> None:
    if os.environ.get("TYPESTRICT_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        from PIL import Image

        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path))
        with Image.open(path) as shot:  # a palette PNG: a third of the size, same to the eye
            small = shot.convert("RGB").quantize(colors=128)
        small.save(path, optimize=True)


def _open(page: Any, url: str) -> None:
    """Open ``url``; the UI's one-time "Join the Dagster community" dialog is dismissed whenever
    it shows up."""
    community = page.get_by_role("button", name="Skip")
    page.add_locator_handler(community, lambda: community.click())
    page.goto(url)


def check_leaderboard_picture(page: Any, store_url: str, study_id: int, candidates: int) -> None:
    """The leaderboard picture behind the open page's "picture" row is the study's, byte for
    byte, with a marker per candidate, and none of its labels overlaps another label, a marker
    or the legend (by the picture's geometry)."""
    import base64

    from assets.studies import leaderboard_picture
    from typestrict_pipeline import plots
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.leaderboard import load_leaderboard

    dialog = _picture_behind(page, "picture")
    src = dialog.locator("img[src^='data:image/png;base64,']").first.get_attribute("src")
    shown = base64.b64decode(src.split(",", 1)[1])
    engine = open_store(store_url)
    try:
        pic = leaderboard_picture(load_leaderboard(engine, study_id))
    finally:
        engine.dispose()
    assert pic.png == shown and len(pic.markers) == candidates  # the picture the UI shows
    assert pic.width >= 1000 and pic.legend is not None and not plots.overlaps(pic.legend, pic.axes)
    boxes = [p.box for p in pic.labels]
    assert len(boxes) >= 12 and all(not plots.overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert all(not plots.overlaps(b, m) for b in boxes for m in pic.markers)


def _picture_behind(page: Any, row_label: str) -> Any:
    """Open the Markdown metadata of ``row_label`` and return its embedded PNG image."""
    from playwright.sync_api import expect

    row = page.locator("tr", has_text=row_label).first
    row.get_by_text("[Show Markdown]").click()
    dialog = page.locator(".bp5-dialog", has_text=row_label)
    img = dialog.locator("img[src^='data:image/png;base64,']").first
    expect(img).to_be_visible()
    page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=img.element_handle())
    assert img.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [1100, 550]
    return dialog


def test_a_verdict_partition_shows_its_verdict_and_its_pictures(
        served: tuple[str, dict[str, Any]], page: Any) -> None:
    from playwright.sync_api import expect

    url, facts = served
    _open(page, f"{url}/assets/verdict?partition={TRAINING}")
    # The native "verdict" row of the materialization (text, no "Show Markdown") says it.
    verdict_row = page.get_by_role("row", name=re.compile(rf"^verdict\b.*\b{facts['verdict']}$"))
    expect(verdict_row.first).to_be_visible()
    q05 = page.locator("tr", has_text="G q05").first.locator("td").last
    expect(q05).to_have_text(re.compile(r"^\s*-?\d+\.\d{1,4}\s*$"))  # rounded for reading
    dialog = _picture_behind(page, "bootstrap of G")
    _shot(page, "verdict-bootstrap")
    dialog.get_by_role("button", name="Close").click()
    _open(page, f"{url}/assets/metrics?partition={TRAINING}")
    _picture_behind(page, "review: picture")
    _shot(page, "metrics-vs-jev")


def test_the_sensor_shows_its_skip_reason_and_the_run_it_launched(
        served: tuple[str, dict[str, Any]], page: Any) -> None:
    from playwright.sync_api import expect

    url, facts = served
    _open(page, f"{url}/locations/typestrict_pipeline/sensors/training_sensor")
    fired = page.locator("tr", has_text="1 run requested").first
    expect(fired).to_contain_text(facts["run_id"][:8])
    page.locator("tr", has_text="0 runs requested").first.get_by_text("0 runs requested").first.hover()
    expect(page.get_by_text(facts["skip"]).first).to_be_visible()
    _shot(page, "sensor-skip-reason")
    _open(page, f"{url}/runs")
    run_row = page.locator("[class*=VirtualizedTable_row]", has_text=facts["run_id"][:8]).first
    expect(run_row).to_contain_text("training_sensor")  # launched by the sensor, not manually


def test_a_studys_leaderboard_opens_with_its_picture(
        served: tuple[str, dict[str, Any]], page: Any) -> None:
    from playwright.sync_api import expect

    url, facts = served
    _open(page, f"{url}/assets/study_leaderboard?partition={facts['study_id']}")
    expect(page.get_by_text("Out-of-sample").first).to_be_visible()
    expect(page.get_by_text("In-sample").first).to_be_visible()
    _picture_behind(page, "picture")
    _shot(page, "study-leaderboard")


def test_a_materialization_launched_from_the_ui_succeeds_with_the_stand_in_restarted(
        served: tuple[str, dict[str, Any]], page: Any) -> None:
    """jev_predictions of the prepared partition: its manifest names a Jev stand-in that is gone."""
    from playwright.sync_api import expect

    url, _ = served
    _open(page, f"{url}/assets/jev_predictions?partition={TRAINING}")
    page.get_by_role("button", name="Materialize…").click()
    dialog = page.locator(".bp5-dialog", has_text="Launch runs to materialize jev_predictions")
    expect(dialog).to_contain_text(TRAINING)
    dialog.get_by_role("button", name="Launch 1 run").click()
    expect(dialog).to_be_hidden()
    _open(page, f"{url}/runs")
    newest = page.locator("[class*=VirtualizedTable_row]").first
    expect(newest).to_contain_text("Manually launched")
    newest.get_by_role("link", name="View").click()
    expect(page.get_by_text("started it again").first).to_be_visible(timeout=240_000)
    expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=240_000)
    _shot(page, "materialized-from-the-ui")


def test_schedules_the_verdict_in_words_and_a_readable_leaderboard_without_hovering(
        served: tuple[str, dict[str, Any]], page: Any) -> None:
    """Issue #26: each schedule with its next evaluation and its skip reason on a page (no
    hovering), the verdict's sentence as text (no "Show Markdown"), and a 64-candidate
    leaderboard picture whose labels overlap nothing (checked by geometry on the picture shown)."""

    from playwright.sync_api import expect

    from typestrict_pipeline.refund.explain import verdict_sentence

    url, facts = served
    _open(page, f"{url}/assets/study_schedules")
    row = page.locator("tr", has_text=f"schedule {facts['schedule_id']}").first
    expect(row).to_contain_text(re.compile(r"next evaluation: \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC"))
    expect(row).to_contain_text("Not enough unseen data yet: 0 of 5 steps")
    expect(page.get_by_text("re-runs study").first).to_be_visible()
    _shot(page, "study-schedules")

    _open(page, f"{url}/assets/verdict?partition={TRAINING}")
    sentence = verdict_sentence(facts["why"])
    expect(page.locator("tr", has_text="why").first).to_contain_text(sentence)
    expect(page.get_by_text(sentence).first).to_be_visible()

    _open(page, f"{url}/assets/study_leaderboard?partition={facts['study_id']}")
    check_leaderboard_picture(page, facts["store_url"], facts["study_id"], CANDIDATES)
