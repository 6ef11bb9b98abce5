"""The words of "Backtests and studies" on the console, said as the CLI, the API and Dagster say
them (one spelling per concept): a study the budget stopped is marked **Budget reached**; a
finished study with a USD budget is the one a schedule re-runs from ("pick the finished study to
re-run from"). A real store, the real app in process (the console tests' ``Browser``), studies
of the synthetic workflow run by the studies core's own runner, and the real ``typestrict``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import html
import importlib.util
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
from typestrict_pipeline.study.space import SearchSpace

_PAGES = Path(__file__).with_name("test_console_pages.py")
_spec = importlib.util.spec_from_file_location("console_pages_words", _PAGES)
assert _spec is not None and _spec.loader is not None
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)


def _study(url: str, workflow: str, budget_micro: int, max_candidates: int,
           skills: tuple[float, ...] = (0.5, 0.6, 0.7)) -> int:
    """A synthetic study of up to 3 candidates at 60 µ$ a step (2 candidates: ≈ $0.012 in all), run to its end."""
    engine = open_store(url)
    try:
        utc = dt.UTC
        layout = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=utc), end=dt.datetime(2012, 12, 1, tzinfo=utc),
                            step=dt.timedelta(days=1), n_folds=2, tune_steps=20, eval_steps=20,
                            holdout_steps=20)
        sid = repo.create_study(
            engine, workspace="acme", workflow=workflow, workflow_version="v1",
            space=SearchSpace(grid={"skill": list(skills)}), layout=layout,
            limits=StudyLimits(max_candidates, 10_000, budget_micro), last_backtest=repo.LastBacktest(6_000, 100))
        run_study_local(engine, sid, SyntheticBackend(cost_per_step=60), max_workers=2)
    finally:
        engine.dispose()
    return sid


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The app on a store with a study its USD budget stopped and a finished one with a budget."""
    root = tmp_path_factory.mktemp("words")
    url = f"sqlite:///{root / 'store.db'}"
    key = pages.workspace_key(url)
    reached = _study(url, "wx", 10_000, 2)  # cannot afford the holdout
    finished = _study(url, "wy", 1_000_000, 3)
    clear = _study(url, "wz", 1_000_000, 2, (0.5, 0.9))  # a winner far above the defaults (0.5)
    with pages.running_app(url, root / "home") as app:
        browser = pages.Browser(app, key)
        try:
            yield {"browser": browser, "key": key, "reached": reached, "finished": finished, "clear": clear,
                   "url": url, "home": root}
        finally:
            browser.close()


def _text(page: str) -> str:
    """A page's words: tags dropped, entities read, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _cli(world: dict[str, Any], *args: str) -> str:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setenv("TYPESTRICT_HOME", str(world["home"] / "cli"))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        assert main([*args, "--store-url", world["url"]]) == 0
    return out.getvalue()


def test_a_study_the_budget_stopped_is_budget_reached_on_every_surface(world: dict[str, Any]) -> None:
    sid = world["reached"]
    b = world["browser"]
    said = "Budget reached (limit: Budget (USD))"
    assert f"| State | {said} |" in _cli(world, "study", "leaderboard", str(sid))
    api = b.get(f"/v1/studies/{sid}/leaderboard").json()
    assert {"label": "State", "value": said} in api["header"]
    page = _text(b.get(f"/console/studies/{sid}").text)
    assert f"State: {said}" in page  # the state line, as the header under it
    assert "budget reached" not in page and "budget_reached" not in page.lower().replace("budget reached", "")
    listed = _text(b.get("/console/backtests").text)
    assert f"#{sid} wx {said}" in listed and "budget reached" not in listed
    # Settings → Usage, in the console and in ``typestrict usage``: the same word for the state
    usage = _text(b.get("/console/settings/usage").text)
    assert "Budget reached" in usage and "budget reached" not in usage
    cli_usage = _cli(world, "usage", "acme")
    assert re.search(rf"\b{sid} .* Budget reached ", cli_usage) and "BUDGET_REACHED" not in cli_usage


def test_a_finished_study_with_a_budget_offers_its_re_runs_from_it(world: dict[str, Any]) -> None:
    sid = world["finished"]
    page = _text(world["browser"].get(f"/console/studies/{sid}").text)
    assert "State: Finished" in page
    assert "From this finished study, with its USD budget of $1.00 per re-run." in page
    assert "Once the study has finished." not in page


def _promote_form(page: str) -> str:
    found = re.search(r'<form method="post" action="(/console/studies/\d+/promote)" id="promote">.*?</form>',
                      page, flags=re.S)
    assert found is not None, "no Promote winner button"
    assert re.search(r'<button type="submit"[^>]*>Promote winner</button>', found.group(0))
    return found.group(1)


def test_the_leaderboards_promote_winner_button_promotes_as_the_api_does(world: dict[str, Any]) -> None:
    """The page: "The leaderboard's Promote winner button activates the winning candidate's
    version through the normal activation path, so your evaluation gate still applies. A winner
    that only changed parameters (not prompts) has nothing to activate: it applies its parameters
    to the configuration instead." The console's button and ``POST /v1/studies/{id}/promote`` are
    one call, with one message."""
    b = world["browser"]
    sid = world["clear"]
    action = _promote_form(b.get(f"/console/studies/{sid}").text)
    assert action == f"/console/studies/{sid}/promote"
    done = b.form(action, {})
    assert done.status_code == 303  # POST-redirect-GET: a reload does not promote again
    page = b.get(done.headers["location"])
    shown = re.search(r'<p class="notice" role="status" id="promote-result"[^>]*>([^<]*)</p>', page.text)
    assert shown is not None, page.text[:3000]
    said = html.unescape(shown.group(1))
    assert said.endswith("The winner changed only parameters: nothing to activate; {'skill': 0.9} apply to "
                         "the configuration of wz in this workspace."), said
    api = b.post(f"/v1/studies/{sid}/promote", headers={"Authorization": f"Bearer {world['key']}"})
    assert api.status_code == 200, api.text
    body = api.json()
    assert {k: body[k] for k in ("study_id", "promoted", "params", "version_id")} == {
        "study_id": sid, "promoted": "parameters", "params": {"skill": 0.9}, "version_id": None}
    # one gate, one sentence: the page's note and the API's message start with the same words
    assert body["message"].split(" The winner changed")[0] == said.split(" The winner changed")[0]


def test_a_winner_without_a_holdout_score_is_not_promoted_saying_why_in_the_same_words(
        world: dict[str, Any]) -> None:
    b = world["browser"]
    sid = world["reached"]
    page = b.get(f"/console/studies/{sid}").text
    assert 'id="promote"' not in page  # no button for a winner without a holdout score
    refused = b.form(f"/console/studies/{sid}/promote", {})  # an old page's form, or a second tab
    assert refused.status_code == 409
    shown = re.search(r'<p class="error" role="alert" id="promote-error"[^>]*>([^<]*)</p>', refused.text)
    assert shown is not None
    api = b.post(f"/v1/studies/{sid}/promote", headers={"Authorization": f"Bearer {world['key']}"})
    assert api.status_code == 409
    assert api.json()["error"]["message"] == html.unescape(shown.group(1))
    assert html.unescape(shown.group(1)).startswith(f"expected a holdout score for the winner of study {sid}")


def _cli_rows(board: str) -> dict[str, list[str]]:
    """The CLI table's rows by candidate (``#N``): Adjusted, Out-of-sample, In-sample, Overfit
    gap, Cost, as printed."""
    out = {}
    for line in board.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[1].startswith("#"):
            out[cells[1].split()[0]] = cells[2:7]
    return out


def _console_rows(page: str) -> dict[str, list[str]]:
    out = {}
    for row in re.findall(r'<tr(?: class="winner")? data-candidate="\d+">(.*?)</tr>', page, flags=re.S):
        number = re.search(r'<span class="candidate">(#\d+)</span>', row)
        assert number is not None
        out[number.group(1)] = [html.unescape(c) for c in re.findall(r"<td>([^<]*)</td>", row)[1:]]
    return out


@pytest.mark.parametrize("tracked", [True, False])
def test_the_leaderboards_columns_read_the_same_on_the_console_and_the_cli(
        world: dict[str, Any], tracked: bool) -> None:
    """Adjusted, Out-of-sample, In-sample, Overfit gap (in-sample minus out-of-sample, signed)
    and Cost, in the page's order, cell for cell; a study created before cost tracking shows no
    cost ("—"), never $0, on both."""
    from sqlalchemy import update

    from typestrict_pipeline.study.tables import StudyRow

    sid = world["finished"]
    if not tracked:
        sid = _study(world["url"], f"old{len(world)}", 1_000_000, 3)
        engine = open_store(world["url"])
        with engine.begin() as c:
            c.execute(update(StudyRow).where(StudyRow.id == sid).values(cost_tracked=False))
        engine.dispose()
    cli = _cli_rows(_cli(world, "study", "leaderboard", str(sid)))
    page = world["browser"].get(f"/console/studies/{sid}").text
    assert re.search(r"<th scope=\"col\">Adjusted</th><th scope=\"col\">Out-of-sample</th>\s*"
                     r"<th scope=\"col\">In-sample</th><th scope=\"col\">Overfit gap</th><th scope=\"col\">Cost</th>",
                     page)
    console = _console_rows(page)
    assert len(cli) == 3 and console == cli
    assert any(cells[3].startswith("+") for cells in cli.values())
    costs = {cells[4] for cells in cli.values()}
    assert costs == {"—"} if not tracked else all(c.startswith("$0.00") and c != "$0.0000" for c in costs)


def test_the_form_says_which_case_it_is_in_in_the_pages_words(world: dict[str, Any]) -> None:
    """A version never backtested in the workspace: the estimate is the page's sentence, whole
    and once punctuated, the same as the API's ``text``; with a USD budget, the API's refusal."""
    b = world["browser"]
    form = dict(pages.STUDY_FORM)
    headers = {"Authorization": f"Bearer {world['key']}"}
    api = b.post("/v1/studies/estimate", json={k: int(v) if v.isdigit() else v for k, v in form.items()},
                 headers=headers)
    assert api.status_code == 200, api.text
    message = ("This version has no completed backtest in your workspace to estimate from. Run one, "
               "then try again, or leave the USD budget empty.")
    assert api.json()["text"] == message
    shown = b.post("/console/studies/estimate", data={"csrf_token": b.csrf, **form},
                   headers={"hx-request": "true"})
    assert shown.status_code == 200
    text = _text(shown.text)
    assert text.startswith(message + " ") and ".." not in text, text
    refused = b.post("/console/studies/estimate", data={"csrf_token": b.csrf, **form, "budget_usd": "1"},
                     headers={"hx-request": "true"})
    api_refused = b.post("/v1/studies/estimate", headers=headers, json={
        **{k: int(v) if v.isdigit() else v for k, v in form.items()}, "budget_usd": "1"})
    assert api_refused.status_code == 422 and message in api_refused.json()["error"]["message"]
    assert message in _text(refused.text)


def _labels(page: str) -> set[str]:
    return {html.unescape(x) for x in re.findall(r"<label for=\"[^\"]+\">([^<]*)</label>", page)}


def test_the_forms_name_their_fields_as_the_page_does(world: dict[str, Any]) -> None:
    """The limits ("Max candidates", "Max total steps", "Budget (USD)"), "Min unseen steps for a
    re-run" (set when the study is created, and on a schedule of a study created without it) and
    the box "Re-run on a schedule": one name each, on every form that asks for it."""
    b = world["browser"]
    new_study = _labels(b.get("/console/backtests").text)
    page = b.get("/console/backtests").text  # the page: "the Studies section of the Backtests tab"
    schedule = _labels(page[page.index('id="schedule-form"'):])
    assert {"Max candidates", "Max total steps", "Budget (USD)", "Min unseen steps for a re-run"} <= new_study
    assert {"Re-run on a schedule", "Min unseen steps for a re-run"} <= schedule
    assert "Min unseen steps" not in new_study | schedule


def test_a_second_study_on_a_busy_workflow_is_refused_in_the_pages_words_with_what_this_door_does(
        world: dict[str, Any]) -> None:
    """"One study at a time per workflow; cancel the running one or wait for it to finish." The
    API and the console say it whole, and how to cancel through their own door (the operator's
    ``typestrict study cancel N`` is the CLI's)."""
    engine = open_store(world["url"])
    try:
        utc = dt.UTC
        layout = plan_folds(start=dt.datetime(2013, 1, 2, tzinfo=utc), end=dt.datetime(2015, 12, 31, tzinfo=utc),
                            step=dt.timedelta(days=1), n_folds=1, tune_steps=20, eval_steps=20, holdout_steps=20)
        busy = repo.create_study(engine, workspace="acme", workflow="seattle_rain", workflow_version="v1",
                                 space=SearchSpace(grid={"threshold": [0.5]}), layout=layout,
                                 limits=StudyLimits(1, 10_000))
        b = world["browser"]
        form = dict(pages.STUDY_FORM)
        api = b.post("/v1/studies", headers={"Authorization": f"Bearer {world['key']}"},
                     json={k: int(v) if v.isdigit() else v for k, v in form.items()})
        console = b.form("/console/studies", form)
        assert api.status_code == 409 and console.status_code == 409
        said = api.json()["error"]["message"]
        assert "One study at a time per workflow; cancel the running one or wait for it to finish." in said
        assert "typestrict study cancel" not in said and "typestrict study cancel" not in console.text
        assert said.endswith(f'\nTo cancel it: POST /v1/studies/{busy}/cancel, or the button "Cancel the study" '
                             f"on /console/studies/{busy}")
        assert f"got study {busy} (PENDING). " in said
        shown = re.search(r'<p class="error" role="alert" id="study-error"[^>]*>([^<]*)</p>', console.text)
        assert shown is not None and html.unescape(shown.group(1)) == said
    finally:
        from typestrict_pipeline.lifecycle.reaper import cancel_study

        cancel_study(engine, busy, workspace="acme")
        engine.dispose()


def test_a_schedule_asks_for_min_unseen_steps_by_the_pages_name_on_every_door(world: dict[str, Any]) -> None:
    """A study created without "Min unseen steps for a re-run": scheduling it without one is
    refused naming the field as the page and the forms do, not the CLI's flag."""
    b = world["browser"]
    sid = world["finished"]
    api = b.post(f"/v1/studies/{sid}/schedule", headers={"Authorization": f"Bearer {world['key']}"},
                 json={"cadence": "1d", "owner": "ana@example.com"})
    assert api.status_code == 422, api.text
    said = api.json()["error"]["message"]
    console = b.form("/console/schedules", {"rerun": "on", "study": str(sid), "cadence": "1d",
                                            "owner": "ana@example.com", "min_unseen_steps": ""})
    assert console.status_code == 422
    shown = re.search(r'<p class="error" role="alert" id="schedule-error"[^>]*>([^<]*)</p>', console.text)
    assert shown is not None
    form = html.unescape(shown.group(1))
    # each door names the field as it is spelled there: the page's name on the form, the
    # request's field in the API; never the CLI's flag
    assert 'fill "Min unseen steps for a re-run" on this form once' in form and "--min-unseen-steps" not in form, form
    assert "send min_unseen_steps here once" in said and "--min-unseen-steps" not in said, said
