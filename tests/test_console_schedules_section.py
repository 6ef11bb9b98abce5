"""Where schedules live: the page says "Turn it on from the Studies section of the Backtests tab:
tick Re-run on a schedule, pick the finished study to re-run from, and set a cadence", and "the
Studies section shows why under the schedule's controls". The console put the form on each
study's page instead (and its "Turn this schedule off" never showed: it compared the state with
``active``, a state schedules do not have; shown, it would have been refused: it sent
``console:KEY`` as who turned it off, where the core keeps an e-mail address, as the API's ``by``). Now the Studies section of the Backtests tab holds the
form (the study picked from the finished ones), every schedule with its controls and why it
skipped under them; a study's page links there with itself picked. In headless Chromium on a real
server (Debian's ``/usr/bin/chromium``, as the result page's browser test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.test_api_support import ApiServer
from tests.test_console_pages import Browser, _finished_study, app, workspace_key  # noqa: F401  (the fixture)

CHROMIUM = "/usr/bin/chromium"
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core@4.14.1" / "axe.min.js"


def _axe_problems(page: Any, where: str) -> list[str]:
    """axe-core's critical and serious violations (the vendored copy, as test_console_browser runs it)."""
    page.evaluate(AXE.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => "
        "({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))")
    return [f"{where}: {v['impact']} {v['id']} at {v['nodes']}" for v in found if v["impact"] in ("critical", "serious")]


def test_a_schedule_is_turned_on_and_off_in_the_studies_section_of_the_backtests_tab(
        tmp_path: Path, sqlite_url: str) -> None:
    from playwright.sync_api import sync_playwright

    sid = _finished_study(sqlite_url, budget_usd="1", min_unseen_steps=5)
    _finished_study(sqlite_url, budget_usd="2")  # a second finished study to pick from
    key = workspace_key(sqlite_url)
    with ApiServer(sqlite_url, tmp_path / "home", rate_limit=None) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--headless", "--no-sandbox", "--disable-gpu",
                                          "--disable-background-networking"])
        try:
            page = browser.new_page()
            page.set_default_timeout(20_000)
            page.goto(f"{server.url}/console/sign-in?next=/console/studies/{sid}")
            page.fill("#key", key)
            page.click("button[type=submit]")
            page.wait_for_url(f"**/console/studies/{sid}")
            assert page.locator("#schedule-form").count() == 0  # no second place to turn it on
            page.click("#schedule-link")  # "Studies section of the Backtests tab"
            page.wait_for_url(f"**/console/backtests?study={sid}#schedule")
            assert _axe_problems(page, "the Backtests tab") == []
            assert page.locator('nav a[aria-current="page"]').inner_text() == "Backtests"
            section = page.locator("section#studies")
            assert section.locator("h2").first.inner_text() == "Studies"
            form = section.locator("#schedule-form")
            assert form.locator("#schedule-study").input_value() == str(sid)  # the study it came from, picked
            options = form.locator("#schedule-study option").all_inner_texts()
            assert len(options) == 2 and all("USD budget" in o and "Finished" in o for o in options), options
            form.locator("#rerun").check()
            form.locator("#owner").fill("ana@example.com")
            form.locator("#cadence").fill("1d")
            form.get_by_role("button", name="Save the schedule").click()
            page.wait_for_load_state()
            assert page.url.endswith("/console/backtests#schedule"), (page.url, page.locator("main").inner_text()[:3000])
            card = page.locator("section#studies [data-schedule]")
            assert card.count() == 1
            assert f"re-runs study #{sid}" in card.inner_text() and "enabled" in card.inner_text()
            # why it skipped (or what makes it fire) is under the schedule's controls
            controls = card.get_by_role("button", name="Turn this schedule off")
            status = card.locator("pre.schedule-status")
            assert controls.bounding_box()["y"] < status.bounding_box()["y"]  # type: ignore[index]
            assert "min unseen steps for a re-run: 5" in status.inner_text()
            assert _axe_problems(page, "the Backtests tab with a schedule") == []
            # the study's page still shows it, linking to the section
            page.goto(f"{server.url}/console/studies/{sid}")
            assert _axe_problems(page, "the study page") == []
            assert "enabled" in page.locator('#schedule [data-schedule]').inner_text()
            page.goto(f"{server.url}/console/backtests")
            card = page.locator("section#studies [data-schedule]")
            card.get_by_label("Your e-mail").fill("bo@example.com")
            card.get_by_role("button", name="Turn this schedule off").click()
            page.wait_for_load_state()
            assert page.url.endswith("/console/backtests#schedule-1"), (page.url, page.locator("main").inner_text()[:3000])
            card = page.locator("section#studies [data-schedule]")
            assert "cancelled" in card.inner_text() and card.get_by_role("button").count() == 0
            assert "cancelled by bo@example.com" in card.locator("pre.schedule-status").inner_text()
        finally:
            browser.close()


def test_the_schedule_form_names_its_study_field_and_the_query_picks_by_id(
        app: tuple[object, str, str], sqlite_url: str) -> None:  # noqa: F811
    """Nothing picked is refused naming the list; ``?study=`` follows the console's one rule of
    the query (a whole number), and nothing is scheduled."""
    import html
    import re

    b = Browser(app[0], app[1])
    r = b.form("/console/schedules", {"rerun": "on", "cadence": "1d", "owner": "ana@example.com"})
    assert r.status_code == 422
    said = re.search(r'id="schedule-error"[^>]*>([^<]*)', r.text)
    assert said is not None and html.unescape(said.group(1)) == (
        'expected a study to re-run from, got none. Pick the finished study to re-run from in the list '
        '"Study to re-run from".')
    assert b.get("/console/backtests?study=abc").status_code == 422
    assert b.get("/console/backtests?study=7").status_code == 200
    assert b.get("/v1/schedules").json() == {"schedules": []}
    b.close()


def test_the_schedules_are_listed_fifty_a_page_and_each_link_finds_its_schedule(
        app: tuple[object, str, str], sqlite_url: str) -> None:  # noqa: F811
    """Every turn on of a schedule is a new one, kept turned off: the Studies section listed every
    schedule ever made, each with its status (1,000 schedules: a 557 kB page; the study's page
    256 kB in 1.9 s). Now they are 50 a page (``?schedules=N``, Newer and Older links), a study's
    page lists its newest 50 and says how many it has, and each of its links (and the page after
    **Turn this schedule off**) opens the page of the Backtests tab that lists the schedule."""
    import re

    from typestrict_pipeline.api import schedules as schedules_core
    from typestrict_pipeline.reruns.service import enable_schedule
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.store import open_store

    old = _finished_study(sqlite_url, budget_usd="1", min_unseen_steps=5)
    busy = _finished_study(sqlite_url, budget_usd="1", min_unseen_steps=5, workflow="wx2")
    engine = open_store(sqlite_url)
    try:
        made: dict[int, list[int]] = {old: [], busy: []}
        for sid, times in ((old, 3), (busy, 51)):
            for i in range(times):
                view = enable_schedule(engine, StoreStudies(engine), study_id=str(sid), cadence="1d",
                                       owner="ana@example.com", min_unseen_steps=None)
                made[sid].append(view.id)
                if i < times - 1:
                    schedules_core.cancel(engine, "acme", view.id, by="ana@example.com")
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    one = b.get("/console/backtests").text
    listed = [int(i) for i in re.findall(r'<div class="card" data-schedule="(\d+)"', one)]
    assert listed == sorted(made[busy], reverse=True)[:50], listed
    assert "Your schedules, newest first (1 to 50 of 54):" in one
    assert 'href="/console/backtests?schedules=2#schedule" rel="next">Older 4<' in one
    two = b.get("/console/backtests?schedules=2").text
    rest = [int(i) for i in re.findall(r'<div class="card" data-schedule="(\d+)"', two)]
    assert rest == sorted([made[busy][0], *made[old]], reverse=True)
    assert b.get("/console/backtests?schedules=3").status_code == 422
    busy_page = b.get(f"/console/studies/{busy}").text
    assert len(re.findall(r'<p class="card" data-schedule="', busy_page)) == 50
    assert "The newest 50 of this study's\n    51 schedules" in busy_page
    old_page = b.get(f"/console/studies/{old}").text
    for sid in made[old]:  # listed on the second page of the Studies section
        assert f'href="/console/backtests?schedules=2#schedule-{sid}"' in old_page, old_page[-3000:]
    off = b.form(f"/console/schedules/{made[old][-1]}/cancel", {"by": "ana@example.com"})
    assert off.status_code == 303 and off.headers["location"] == f"/console/backtests?schedules=2#schedule-{made[old][-1]}"
    b.close()
