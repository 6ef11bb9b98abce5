"""Each door speaks its own words: a refusal the core words once names the CLI's flag and command
on the command line, the API's route and body field through ``/v1``, and the console's form field
on its pages; never another door's (an API customer was told to pass ``--grid``). The real app in
process (the console tests' ``running_app`` and ``Browser``) and the real ``typestrict``.
"""

from __future__ import annotations

import datetime as dt
import html
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store

_PAGES = Path(__file__).with_name("test_console_pages.py")
_spec = importlib.util.spec_from_file_location("console_pages_door_words", _PAGES)
assert _spec is not None and _spec.loader is not None
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)

CLI_WORDS = re.compile(r"(?<![\w-])--[a-z]|typestrict [a-z]")
"""A flag or a command of the CLI, in a message of another door."""


@pytest.fixture
def world(tmp_path: Path, sqlite_url: str) -> Iterator[dict[str, Any]]:
    """The real app on a fresh store, a workspace ``acme`` signed in to the console, and the CLI's
    home on the same store."""
    key = pages.workspace_key(sqlite_url)
    home = tmp_path / "home"
    with pytest.MonkeyPatch.context() as mp, pages.running_app(sqlite_url, home) as app:
        mp.setenv("TYPESTRICT_HOME", str(home))
        mp.setenv("TYPESTRICT_STORE_URL", sqlite_url)
        mp.delenv("TYPESTRICT_DATASETS_DIR", raising=False)
        browser = pages.Browser(app, key)
        try:
            yield {"browser": browser, "key": key, "home": home, "url": sqlite_url}
        finally:
            browser.close()


def _api(world: dict[str, Any], path: str, body: dict[str, Any], status: int = 422) -> str:
    b = world["browser"]
    r = b.loop.run_until_complete(b.client.post(path, json=body, headers={"Authorization": f"Bearer {world['key']}"}))
    assert r.status_code == status, (path, r.status_code, r.text[:500])
    message: str = r.json()["error"]["message"]
    assert not CLI_WORDS.search(message), message
    return message


def _console(world: dict[str, Any], route: str, data: dict[str, str]) -> str:
    """The refusal the console's study form shows (its error paragraph), as a person reads it."""
    r = world["browser"].form(route, data)
    assert r.status_code == 422, (route, r.status_code, r.text[:500])
    page = html.unescape(r.text)
    found = re.search(r"expected [^<]*", page)
    assert found is not None, page[:3000]
    said = found.group(0)
    assert not CLI_WORDS.search(said) and "field '" not in said and "/v1/" not in said, said
    return said


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("typestrict: expected "), err
    return err


# --- a study's search space: --grid / --random, the body's grid / random, the form's Grid / Random ranges -----------

STUDY_BODY = {"workflow": "seattle_rain", "start": "2013-01-02", "end": "2015-12-31", "tune_steps": 60,
              "eval_steps": 30, "holdout_steps": 60, "folds": 2, "max_candidates": 5, "max_total_steps": 100_000}
STUDY_ARGV = ["study", "run", "seattle_rain", "--start", "2013-01-02", "--end", "2015-12-31", "--tune-steps", "60",
              "--eval-steps", "30", "--holdout-steps", "60", "--folds", "2", "--max-candidates", "5",
              "--max-total-steps", "100000"]

SPACE_CASES = [
    # (grid entries, random entries, the CLI's words, the API's, the console's)
    (["threshold=0.4,nan"], [], "expected --grid threshold as a finite number, got 'nan'",
     "expected threshold in field 'grid.0' as a finite number, got 'nan'",
     'expected threshold in "Grid" as a finite number, got \'nan\''),
    (["threshold"], [], "expected --grid as NAME=V1,V2,..., got 'threshold'. Write e.g. --grid threshold=0.4,0.5.",
     "expected field 'grid.0' as NAME=V1,V2,..., got 'threshold'. Write e.g. \"grid\": [\"threshold=0.4,0.5\"].",
     "expected a line of \"Grid\" as NAME=V1,V2,..., got 'threshold'. Write e.g. threshold=0.4,0.5 as a line of "
     "\"Grid\"."),
    (["threshold=0.4", "threshold=0.9"], [],
     "expected each parameter once in --grid, got threshold twice (the second threshold='0.9'). Give all of its "
     "values in one, e.g. --grid threshold=V1,V2.",
     "expected each parameter once in field 'grid', got threshold twice (the second threshold='0.9'). Give all of "
     "its values in one, e.g. \"grid\": [\"threshold=V1,V2\"].",
     "expected each parameter once in \"Grid\", got threshold twice (the second threshold='0.9'). Give all of its "
     "values in one, e.g. threshold=V1,V2 as a line of \"Grid\"."),
    ([], ["threshold=-inf:1"],
     "expected --random threshold's LOW as a finite number, got '-inf'. Write two finite numbers, e.g. --random "
     "threshold=0.3:0.7.",
     "expected the LOW of threshold in field 'random.0' as a finite number, got '-inf'. Write two finite numbers, "
     "e.g. \"random\": [\"threshold=0.3:0.7\"].",
     "expected the LOW of threshold in \"Random ranges\" as a finite number, got '-inf'. Write two finite numbers, "
     "e.g. threshold=0.3:0.7 as a line of \"Random ranges\"."),
    ([], ["threshold"], "expected --random as NAME=LOW:HIGH, got 'threshold'",
     "expected field 'random.0' as NAME=LOW:HIGH, got 'threshold'",
     "expected a line of \"Random ranges\" as NAME=LOW:HIGH, got 'threshold'"),
]


@pytest.mark.parametrize(("grid", "random", "cli", "api", "console"), SPACE_CASES,
                         ids=["grid-nan", "grid-no-values", "grid-twice", "random-inf", "random-no-range"])
def test_a_search_space_is_refused_in_each_doors_words(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str], grid: list[str], random: list[str],
        cli: str, api: str, console: str) -> None:
    """The API once told a program's author to fix ``--grid``, a flag its body does not have; the
    API names the body's field (``field 'grid.0'``, the JSON path), the console its form's field
    (``"Grid"``), the CLI its flag: one rule (``study.form.parse_space``), each door's words."""
    body = {**STUDY_BODY, "grid": grid, "random": random, "random_draws": 2 if random else 0}
    for path in ("/v1/studies/estimate", "/v1/studies"):
        assert api in _api(world, path, body)
    form = {k: str(v) for k, v in STUDY_BODY.items()} | {"grid": "\n".join(grid), "random": "\n".join(random),
                                                         "random_draws": "2" if random else "0"}
    for route in ("/console/studies/estimate", "/console/studies"):
        assert console in _console(world, route, form)
    argv = [*STUDY_ARGV, *(a for g in grid for a in ("--grid", g)), *(a for r in random for a in ("--random", r))]
    assert cli in _cli(capsys, *argv, *(["--random-draws", "2"] if random else []))


# --- a dataset: typestrict data register|append, POST /v1/datasets[/{name}/append], the form's "Historical data" ------


def _weather(world: dict[str, Any], tmp_path: Path) -> Path:
    """A Seattle weather file, in the workspace's files (for the API) and on disk (for the CLI)."""
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    path = tmp_path / "w.csv"
    write_seattle_csv(path, known_until=dt.datetime(2012, 3, 1, tzinfo=dt.UTC))
    b = world["browser"]
    r = b.loop.run_until_complete(b.client.put("/v1/files/w.csv", content=path.read_bytes(),
                                               headers={"Authorization": f"Bearer {world['key']}"}))
    assert r.status_code == 201, r.text
    return path


def test_registering_a_dataset_with_the_wrong_tables_says_what_to_send_at_each_door(
        world: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The API once answered a body's wrong ``tables`` with "pass --table TABLE=FILE.csv"."""
    path = _weather(world, tmp_path)
    api = _api(world, "/v1/datasets", {"name": "live", "workflow": "seattle_rain", "tables": {"rain": "w.csv"}})
    assert api == ("expected one file per table workflow 'seattle_rain' reads (weather), got tables ['rain']. "
                   'Send "tables" with one of your workspace\'s files per table, {"TABLE": "FILE.csv"}, for each '
                   "of them and nothing else."), api
    cli = _cli(capsys, "data", "register", "live", "--workflow", "seattle_rain", "--table", f"rain={path}")
    assert "got tables ['rain']. Pass --table TABLE=FILE.csv for each of them and nothing else." in cli, cli


def test_appending_to_a_table_the_dataset_lacks_says_what_to_send_at_each_door(
        world: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The API once said "pass --table with one of them", and named the dataset by its stored
    name (``live__<digest>``), not the workspace's."""
    path = _weather(world, tmp_path)
    b = world["browser"]
    made = b.loop.run_until_complete(b.client.post(
        "/v1/datasets", json={"name": "live", "workflow": "seattle_rain", "tables": {"weather": "w.csv"}},
        headers={"Authorization": f"Bearer {world['key']}"}))
    assert made.status_code == 201, made.text
    api = _api(world, "/v1/datasets/live/append", {"file": "w.csv", "table": "rain"})
    assert api == ("expected a table of dataset 'live' (weather), got 'rain'. Send \"table\" as one of them."), api
    capsys.readouterr()
    assert main(["data", "register", "mine", "--workflow", "seattle_rain", "--table", f"weather={path}"]) == 0
    cli = _cli(capsys, "data", "append", "mine", str(path), "--table", "rain")
    assert "expected a table of dataset 'mine' (weather), got 'rain'. Pass --table with one of them." in cli, cli


def test_a_dataset_the_workspace_cannot_name_is_refused_in_each_doors_words(world: dict[str, Any]) -> None:
    """A backtest's or a study's ``dataset``: the API names its field and its route to register
    one; the console its form's field, and that registering is the API's (it has no such page)."""
    body = {"workflow": "seattle_rain", "start": "2012-02-01", "end": "2012-03-01", "dataset": "nope"}
    for path, sent in (("/v1/backtests", body), ("/v1/studies/estimate", {**STUDY_BODY, "dataset": "nope"})):
        api = _api(world, path, sent)
        assert api.startswith("field 'dataset': expected a dataset name: a built-in one (seattle_weather) or one "
                              "this workspace registered (none yet), got 'nope'. Register it with POST /v1/datasets "
                              "(its name, workflow and tables), or name one of those."), api
    form = {k: str(v) for k, v in body.items()}
    shown = world["browser"].get("/console/backtests")
    assert shown.status_code == 200, shown.text[:500]
    for route, data, label_for in (
            ("/console/backtests", form, "b-dataset"),
            ("/console/studies/estimate", {k: str(v) for k, v in STUDY_BODY.items()} | {"dataset": "nope"}, "s-dataset"),
            ("/console/studies", {k: str(v) for k, v in STUDY_BODY.items()} | {"dataset": "nope"}, "s-dataset")):
        found = re.search(rf'<label for="{label_for}">([^<]+)</label>', shown.text)
        assert found is not None, shown.text[:3000]
        label = html.unescape(found.group(1))  # the form's own label, exactly as the page shows it
        r = world["browser"].form(route, data)
        assert r.status_code == 422, (route, r.status_code, r.text[:500])
        page = html.unescape(r.text)
        assert f'"{label}": expected a dataset name' in page, (label, page[:3000])
        assert "Register it through the API first (POST /v1/datasets: the console names registered datasets" in page
        assert "field 'dataset'" not in page and "column 'dataset'" not in page


# --- a body's field is a field, not a column (a CSV has columns) ---------------------------------------------------


@pytest.mark.parametrize(("path", "body", "said"), [
    ("/v1/backtests", {"workflow": "nope", "start": "2012-02-01", "end": "2012-03-01"},
     "field 'workflow': expected a registered workflow ("),
    ("/v1/datasets", {"name": "Live", "workflow": "seattle_rain", "tables": {"weather": "w.csv"}},
     "field 'name': expected a dataset name of lowercase letters, digits and single '_'"),
], ids=["workflow", "dataset-name"])
def test_a_body_field_the_api_refuses_is_called_a_field(world: dict[str, Any], path: str, body: dict[str, Any],
                                                         said: str) -> None:
    """``column 'workflow'`` once named a JSON body's field; columns are a CSV's."""
    message = _api(world, path, body)
    assert message.startswith(said) and "column" not in message, message


# --- what brings a schedule new steps: typestrict data append, POST /v1/datasets/{name}/append, a tick's own words ---


def _studied(world: dict[str, Any], *studies: tuple[str, dt.datetime], active: bool = True) -> list[str]:
    """Run a finished seattle study (USD budget $1, min unseen steps 5) of workspace ``acme`` per
    (dataset, end), after making the workspace's schedules able to fire when ``active`` (an ACTIVE
    subscription and a $50 usage budget); their ids, in order."""
    from typestrict_pipeline.reruns import scenario
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.workspace import set_workspace

    engine = open_store(world["url"])
    try:
        if active:
            set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
        ids = []
        for dataset, end in studies:
            sid = scenario.create_seattle_study(engine, workspace="acme", dataset=dataset, end=end,
                                                budget_micro_usd=10**6, min_unseen_steps=5)
            scenario.run(engine, sid)
            ids.append(sid)
        return ids
    finally:
        engine.dispose()


def test_a_schedule_says_how_to_add_rows_in_each_doors_words(
        world: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A schedule on a dataset the workspace registered through the API: its status through the
    API once said "add rows: typestrict data append live__<digest> FILE.csv" (a command the
    customer has not, on a name they never gave); it names the API's route and their name. The
    tick's reason, stored once and read by every door, names no door's command; the CLI's
    status keeps its command."""
    _weather(world, tmp_path)
    b = world["browser"]
    auth = {"Authorization": f"Bearer {world['key']}"}
    made = b.loop.run_until_complete(b.client.post(
        "/v1/datasets", json={"name": "live", "workflow": "seattle_rain", "tables": {"weather": "w.csv"}},
        headers=auth))
    assert made.status_code == 201, made.text
    from typestrict_pipeline.api.datasets import stored_name

    # the built-in data end on 2015-12-31 and never grow: the second can never fire, and says so
    root, fixed = _studied(world, (stored_name("acme", "live"), dt.datetime(2012, 3, 1, tzinfo=dt.UTC)),
                           ("seattle_weather", dt.datetime(2015, 12, 30, tzinfo=dt.UTC)))
    for sid in (root, fixed):
        r = b.loop.run_until_complete(b.client.post(f"/v1/studies/{sid}/schedule",
                                                    json={"cadence": "1h", "owner": "ana@example.com"}, headers=auth))
        assert r.status_code == 201, r.text
        assert not CLI_WORDS.search(r.json()["status_text"]), r.json()["status_text"]
    capsys.readouterr()
    assert main(["schedule", "tick", "--store", world["url"]]) == 0
    capsys.readouterr()
    said = {sid: b.loop.run_until_complete(b.client.get(f"/v1/studies/{sid}/schedule", headers=auth)).json()
            ["schedules"][0] for sid in (root, fixed)}
    assert "add rows: POST /v1/datasets/live/append" in said[root]["status_text"], said
    assert "register your own (POST /v1/datasets)" in said[fixed]["status_text"], said
    assert said[fixed]["last_message"].endswith(
        "Cancel it; a built-in dataset never grows: register a dataset of your own, run a study on it with a USD "
        "budget and schedule that one"), said
    for schedule in said.values():
        for text in (schedule["status_text"], schedule["last_message"]):
            assert not CLI_WORDS.search(text), text
    # the console's Studies section (where schedules live) shows the same status in its words
    # (adding rows is the API's)
    page = html.unescape(b.get("/console/backtests").text)
    card = re.search(rf'id="schedule-{said[root]["id"]}">(.*?)</div>', page, flags=re.S)
    assert card is not None, page[:3000]
    shown = re.search(r'<pre class="schedule-status">(.*?)</pre>', card.group(1), flags=re.S)
    assert shown is not None, card.group(1)
    assert "add rows through the API (POST /v1/datasets/live/append)" in shown.group(1), shown.group(1)
    assert not CLI_WORDS.search(card.group(1)), card.group(1)
    assert main(["schedule", "status", "--store", world["url"]]) == 0
    cli = capsys.readouterr().out
    assert f"add rows: typestrict data append {stored_name('acme', 'live')} FILE.csv" in cli, cli
    # rows added through the API: the next tick fires, and its stored reason says where the lineage
    # is read in each door's words (the tick wrote the CLI's: typestrict schedule lineage N)
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    cut = dt.datetime(2012, 3, 1, tzinfo=dt.UTC)
    write_seattle_csv(tmp_path / "more.csv", known_after=cut, known_until=cut + dt.timedelta(days=10))
    put = b.loop.run_until_complete(b.client.put("/v1/files/more.csv", content=(tmp_path / "more.csv").read_bytes(),
                                                 headers=auth))
    assert put.status_code == 201, put.text
    added = b.loop.run_until_complete(b.client.post("/v1/datasets/live/append", json={"file": "more.csv"},
                                                    headers=auth))
    assert added.status_code == 200, added.text
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).isoformat()  # the next slot: due
    assert main(["schedule", "tick", "--store", world["url"], "--now", later]) == 0
    assert f"Lineage: typestrict schedule lineage {root}" in capsys.readouterr().out  # the CLI's own words
    fired = b.loop.run_until_complete(b.client.get(f"/v1/studies/{root}/schedule", headers=auth)).json()["schedules"][0]
    assert fired["last_outcome"] == "FIRED", fired
    assert fired["last_message"].endswith(f"Lineage: GET /v1/studies/{root}/lineage"), fired
    for text in (fired["last_message"], fired["status_text"]):
        assert not CLI_WORDS.search(text), text
    page = html.unescape(b.get("/console/backtests").text)  # the Studies section shows each schedule's status
    assert f"Lineage: the Lineage section of /console/studies/{root}" in page
    assert "typestrict schedule" not in page


def test_a_second_schedule_on_a_lineage_says_how_to_turn_the_first_off_at_each_door(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The API and the console once said "Cancel it first (typestrict schedule cancel ID)"."""
    [sid] = _studied(world, ("seattle_weather", dt.datetime(2015, 6, 1, tzinfo=dt.UTC)))
    b = world["browser"]
    body = {"cadence": "1h", "owner": "ana@example.com"}
    first = b.loop.run_until_complete(b.client.post(f"/v1/studies/{sid}/schedule", json=body,
                                                    headers={"Authorization": f"Bearer {world['key']}"}))
    assert first.status_code == 201, first.text
    api = _api(world, f"/v1/studies/{sid}/schedule", body, status=409)
    assert api.endswith("got schedule 1. Cancel it first (POST /v1/schedules/1/cancel), then enable again."), api
    r = b.form("/console/schedules", {"rerun": "on", "study": sid, **body})
    page = html.unescape(r.text)
    assert ('got schedule 1. Cancel it first (the button "Turn this schedule off" of schedule 1 in the Studies '
            "section of the Backtests tab, /console/backtests#schedule-1), then enable again.") in page, page[:3000]
    assert "typestrict schedule" not in page
    cli = _cli(capsys, "schedule", "enable", sid, "--cadence", "1h", "--owner", "ana@example.com",
               "--store", world["url"])
    assert "got schedule 1. Cancel it first (typestrict schedule cancel 1), then enable again." in cli, cli


# --- no credit left for a training: the operator's typestrict credits grant is not the customer's to run -----------


def test_a_training_without_a_credit_says_what_to_do_in_each_doors_words(world: dict[str, Any]) -> None:
    """The API and the console once said "Add credits with `typestrict credits grant acme N
    --reference KEY`", a command of the operator's; nothing is charged or stored either way."""
    b = world["browser"]
    auth = {"Authorization": f"Bearer {world['key']}"}
    put = b.loop.run_until_complete(b.client.put("/v1/files/reviews.csv", content=pages.CSV.encode(), headers=auth))
    assert put.status_code == 201, put.text
    body = {"dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
            "decisions": [{"name": "sentiment", "question": "Is it positive?", "answer_column": "label",
                           "answers": ["yes", "no"]}], "options": {"keep_if_loses": False}}
    api = _api(world, "/v1/trainings", body, status=402)
    assert api.startswith("expected at least 1 credit(s) in workspace 'acme' for "), api
    assert api.endswith("got 0 (the workspace has no credit account). Ask the operator to add credits to this "
                        "workspace (GET /v1/workspaces/acme shows its balance)"), api
    r = b.form("/console/trainings", pages.TRAINING, files={"dataset_file": ("reviews.csv", pages.CSV.encode())})
    page = html.unescape(r.text)
    assert r.status_code == 402, (r.status_code, page[:2000])
    assert "Ask the operator to add credits to this workspace (this page shows its balance)" in page, page[:3000]
    assert "typestrict credits" not in page and "/v1/" not in page
    assert b.loop.run_until_complete(b.client.get("/v1/trainings", headers=auth)).json() == []


def test_a_workspace_never_set_up_for_schedules_says_who_sets_it_up_at_each_door(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The API once told a customer to run "typestrict schedule workspace acme --subscription
    ACTIVE --budget-usd 50" (the operator's command), in the schedule's status and in each
    tick's reason."""
    [sid] = _studied(world, ("seattle_weather", dt.datetime(2015, 6, 1, tzinfo=dt.UTC)), active=False)
    b = world["browser"]
    auth = {"Authorization": f"Bearer {world['key']}"}
    made = b.loop.run_until_complete(b.client.post(f"/v1/studies/{sid}/schedule",
                                                   json={"cadence": "1h", "owner": "ana@example.com"}, headers=auth))
    assert made.status_code == 201, made.text
    assert "until one is set: the operator sets one up" in made.json()["status_text"], made.json()
    capsys.readouterr()
    assert main(["schedule", "tick", "--store", world["url"]]) == 0
    assert "typestrict schedule workspace acme --subscription ACTIVE" in capsys.readouterr().out  # the CLI's
    [said] = b.loop.run_until_complete(b.client.get(f"/v1/studies/{sid}/schedule", headers=auth)).json()["schedules"]
    assert said["last_message"] == ("Workspace subscription never set up: the operator sets it up (a subscription "
                                    "and a usage budget)"), said
    for text in (said["last_message"], said["status_text"]):
        assert not CLI_WORDS.search(text), text
    page = html.unescape(b.get("/console/backtests").text)  # the Studies section shows each schedule's status
    shown = re.search(r'<pre class="schedule-status">(.*?)</pre>', page, flags=re.S)
    assert shown is not None and "the operator sets it up" in shown.group(1), page[:3000]
    assert not CLI_WORDS.search(shown.group(1)), shown.group(1)
    assert main(["schedule", "status", "--store", world["url"]]) == 0
    assert "until one is set: typestrict schedule workspace acme --subscription ACTIVE --budget-usd 50" in (
        capsys.readouterr().out)


# --- a backtest of a workflow whose active version's code is gone ----------------------------------------------------


def test_a_backtest_of_a_version_whose_code_is_gone_asks_the_operator_at_the_api_and_the_console(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Activating a version is the operator's (``typestrict backtest activate``): the API and the
    console say to ask the operator; the CLI names its command."""
    from typestrict_pipeline.backtest.tables import ActiveVersionRow
    from typestrict_pipeline.store import session_scope

    engine = open_store(world["url"])
    with session_scope(engine) as s:  # activated once, its code since removed from the deployment
        s.add(ActiveVersionRow(workspace="acme", workflow="seattle_rain", version_id="0" * 12))
    engine.dispose()
    body = {"workflow": "seattle_rain", "start": "2012-02-01", "end": "2012-03-01"}
    ask = "Ask the operator to activate a current version of workflow 'seattle_rain' for this workspace."
    api = _api(world, "/v1/backtests", body, status=404)
    assert "got no deployed code that reproduces it. " + ask in api, api
    r = world["browser"].form("/console/backtests", {k: str(v) for k, v in body.items()})
    page = html.unescape(r.text)
    assert r.status_code == 404 and ask in page, (r.status_code, page[:3000])
    assert "typestrict backtest activate" not in page
    capsys.readouterr()
    assert main(["backtest", "run", "seattle_rain", "--workspace", "acme", "--start", "2012-02-01",
                 "--end", "2012-03-01"]) != 0
    err = capsys.readouterr().err
    assert "Activate a current version (typestrict backtest activate)." in err, err
