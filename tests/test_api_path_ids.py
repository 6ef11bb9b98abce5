"""An id in a path names an object only in the spelling the API prints it (``values.row_id``).

``/v1/studies/01`` answered study 1, and so did the console's ``/console/studies/01`` (Python's
``int`` takes a leading zero; other routes' ``int`` also takes ``+1``, `` 1``, ``1_0`` and other
scripts' digits). Every route of the API and of the console that takes a study's or a schedule's
id answers any other spelling as it answers an id that does not exist: 404 in the API's one
shape, the console's 404 page, nothing changed. A number the store's column cannot hold is that
404 too (PostgreSQL refused ``2147483648`` as a value: a 422), and so is an id longer than a
route's old bound (a 422 "expected at most 40 characters" where a shorter unknown id was a 404).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.service import enable_schedule, get_schedule
from typestrict_pipeline.store import open_store
from typestrict_pipeline.values import STORE_ID_MAX, row_id

_PAGES = Path(__file__).with_name("test_console_pages.py")
_spec = importlib.util.spec_from_file_location("test_console_pages_for_path_ids", _PAGES)
assert _spec is not None and _spec.loader is not None
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)

# Spellings of 1 (the study's and the schedule's id) that are not its canonical one, and numbers
# no row can have. As sent on the wire: httpx keeps '+' and percent-encodes the space.
OTHER_SPELLINGS = ["01", "001", "+1", "%201", "1%20", "%2B1", "1_0", "%D9%A1", "%EF%BC%91", "1.0",
                   "1e0", "0x1", "-1", "0", "1%0A", str(STORE_ID_MAX + 1), "9" * 12, "9" * 41]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Study 1 (finished) with schedule 1, both workspace ``acme``'s; the app and a signed-in
    console browser."""
    tmp = tmp_path_factory.mktemp("ids")
    url = f"sqlite:///{tmp / 'store.db'}"
    engine = open_store(url)
    key = create_api_key(engine, "acme").key
    root_end = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
    study = scenario.create_root_study(engine, workspace="acme", root_end=root_end, budget_micro_usd=1_000_000,
                                       min_unseen_steps=10,
                                       workflow=scenario.backend(shift_at=root_end - dt.timedelta(days=10)))
    scenario.run(engine, study)
    schedule = enable_schedule(engine, scenario.port(engine), study_id=study, cadence="1d", owner="ana@example.com")
    assert (study, schedule.id) == ("1", 1)
    application = create_app(url, tmp / "home", jev_source=pages.JEV, rate_limit=None)
    loop = asyncio.new_event_loop()
    lifespan = application.router.lifespan_context(application)
    loop.run_until_complete(lifespan.__aenter__())
    browser = pages.Browser(application, key)
    try:
        yield {"engine": engine, "key": key, "browser": browser}
    finally:
        browser.close()
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()
        engine.dispose()


def _api(world: dict[str, Any], method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    b = world["browser"]
    request = b.client.request(method, path, json=body, headers={"Authorization": f"Bearer {world['key']}"})
    response: httpx.Response = b.loop.run_until_complete(request)
    return response


API_ROUTES = [
    ("GET", "/v1/studies/{}", None, "study"),
    ("GET", "/v1/studies/{}/leaderboard", None, "study"),
    ("GET", "/v1/studies/{}/schedule", None, "study"),
    ("GET", "/v1/studies/{}/lineage", None, "study"),
    ("POST", "/v1/studies/{}/schedule", {"cadence": "1d", "owner": "bo@example.com"}, "study"),
    ("POST", "/v1/studies/{}/cancel", None, "study"),
    ("POST", "/v1/studies/{}/promote", None, "study"),
    ("GET", "/v1/schedules/{}", None, "schedule"),
    ("POST", "/v1/schedules/{}/cancel", {"by": "bo@example.com"}, "schedule"),
]


def test_only_the_canonical_spelling_names_a_study_or_a_schedule_in_the_api(world: dict[str, Any]) -> None:
    assert _api(world, "GET", "/v1/studies/1").status_code == 200
    assert _api(world, "GET", "/v1/schedules/1").status_code == 200
    wrong = []
    for method, template, body, what in API_ROUTES:
        unknown = _api(world, method, template.format(STORE_ID_MAX), body)
        assert unknown.status_code == 404, unknown.text
        for spelling in OTHER_SPELLINGS:
            r = _api(world, method, template.format(spelling), body)
            json_body = r.headers["content-type"].startswith("application/json")
            error: dict[str, Any] = (r.json().get("error") or {}) if json_body else {}
            if (r.status_code, error.get("code")) != (404, "not_found") or not str(
                    error.get("message")).startswith(f"expected a {what} with id "):
                wrong.append(f"{method} {template.format(spelling)}: {r.status_code} {r.text[:120]}")
    assert not wrong, "\n".join(wrong)
    # nothing was changed by any of them: no second schedule, the schedule still on
    assert len(_api(world, "GET", "/v1/studies/1/schedule").json()["schedules"]) == 1
    assert get_schedule(world["engine"], 1).state.value == "ENABLED"


def test_only_the_canonical_spelling_names_a_study_or_a_schedule_in_the_console(world: dict[str, Any]) -> None:
    b = world["browser"]
    assert b.get("/console/studies/1").status_code == 200
    wrong = []
    for spelling in OTHER_SPELLINGS:
        answers = {
            "page": b.get(f"/console/studies/{spelling}"),
            "state": b.get(f"/console/studies/{spelling}/state"),
            "cancel": b.form(f"/console/studies/{spelling}/cancel", {}),
            "promote": b.form(f"/console/studies/{spelling}/promote", {}),
            "cancel schedule": b.form(f"/console/schedules/{spelling}/cancel", {}),
        }
        for name, r in answers.items():
            if r.status_code != 404 or "Not found" not in r.text:
                wrong.append(f"{name} {spelling!r}: {r.status_code} {r.headers.get('location')}")
        # the Studies section's schedule form names its study in a field: refused on the form
        r = b.form("/console/schedules", {"rerun": "on", "study": spelling, "cadence": "1d", "owner": "bo@example.com"})
        if r.status_code != 422 or "expected one of this workspace&#39;s studies" not in r.text:
            wrong.append(f"schedule {spelling!r}: {r.status_code} {r.headers.get('location')}")
    assert not wrong, "\n".join(wrong)
    assert len(_api(world, "GET", "/v1/studies/1/schedule").json()["schedules"]) == 1
    assert get_schedule(world["engine"], 1).state.value == "ENABLED"


def test_a_long_unknown_id_is_not_found_on_every_route_that_takes_one(world: dict[str, Any]) -> None:
    """An id longer than a route's old bound was a 422 ("expected at most 200 characters") where
    any other unknown id is a 404: the caller was told the request was malformed, not that there
    is no such object."""
    long = "x" * 300
    wrong = []
    for path in (f"/v1/trainings/{long}", f"/v1/trainings/{long}/split", f"/v1/models/{long}",
                 f"/v1/models/{long}/files", f"/v1/models/{long}/audit", f"/v1/backtests/{long}",
                 f"/v1/datasets/{long}", f"/v1/workspaces/{long}"):
        r = _api(world, "GET", path)
        if r.status_code != 404 or r.json()["error"]["code"] != "not_found":
            wrong.append(f"{path[:40]}: {r.status_code} {r.text[:120]}")
    b = world["browser"]
    for path in (f"/console/trainings/{long}", f"/console/models/{long}", f"/console/backtests/{long}"):
        r = b.get(path)
        if r.status_code != 404:
            wrong.append(f"{path[:40]}: {r.status_code}")
    assert not wrong, "\n".join(wrong)


def test_an_id_the_store_cannot_hold_is_not_found_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    engine = open_store(pg_url)
    key = create_api_key(engine, "acme").key
    engine.dispose()
    application = create_app(pg_url, tmp_path / "home", jev_source=pages.JEV, rate_limit=None)
    loop = asyncio.new_event_loop()
    lifespan = application.router.lifespan_context(application)
    loop.run_until_complete(lifespan.__aenter__())
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://api.test",
                               headers={"Authorization": f"Bearer {key}"})
    try:
        for path in (f"/v1/studies/{STORE_ID_MAX + 1}", f"/v1/studies/{STORE_ID_MAX}",
                     f"/v1/schedules/{STORE_ID_MAX + 1}", "/v1/studies/99999999999",
                     # a NUL no text column holds: PostgreSQL refused it, a 422 naming 'pk_1'
                     "/v1/models/%00", "/v1/models/tr_%00x/audit", "/v1/models/%00/files",
                     "/v1/models/%00/page"):
            r = loop.run_until_complete(client.get(path))
            assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found"), (path, r.text)
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


def test_the_rule_is_the_canonical_decimal_spelling() -> None:
    assert [row_id(t) for t in ("1", "10", str(STORE_ID_MAX))] == [1, 10, STORE_ID_MAX]
    for text in ("", "01", "+1", "-1", " 1", "1 ", "1\n", "1_0", "\u0661", "\uff11", "\u00b9", "1.0",
                 "0", str(STORE_ID_MAX + 1), "9" * 40):
        assert row_id(text) is None, repr(text)
