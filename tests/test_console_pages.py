"""The console's pages over HTTP (the real application, ASGI in process, a real store): what each
form refuses and says, that a refusal charges nothing and hands nothing over, that another
workspace's objects are "not found", and that the vendored libraries are the published files.
The browser checks are in ``test_console_browser.py``."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.progress import Progress, training_key, write_progress
from typestrict_pipeline.store import open_store

REPO = Path(__file__).resolve().parent.parent
VENDOR = REPO / "typestrict_pipeline" / "console" / "static" / "vendor"
JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here
CSV = "id,text,grp,label\n" + "".join(f"r{i},review {i} text,g{i // 4},{'yes' if i % 3 else 'no'}\n"
                                      for i in range(120))


def test_the_vendored_files_are_the_published_ones() -> None:
    """Each file the README lists has the SHA-256 it says (copied from npm unchanged)."""
    for readme, root in ((VENDOR / "README.md", VENDOR),
                         (REPO / "tests" / "vendor" / "README.md", REPO / "tests" / "vendor" / "axe-core@4.14.1")):
        rows = re.findall(r"^\| \[([\w.-]+)\][^|]*\| ([\d.]+) \|[^|]*\| `(?:[\w/]+/)?([\w.-]+\.js)` \| `([0-9a-f]{64})` \|$",
                          readme.read_text(encoding="utf-8"), flags=re.M)
        assert rows, readme
        for name, version, file, digest in rows:
            path = root / f"{name}@{version}" / file if root == VENDOR else root / file
            assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, path
            assert (path.parent / "LICENSE").is_file()


class Browser:
    """A cookie-keeping client of the real app, signed in with a key."""

    def __init__(self, app: object, key: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
                                        base_url="http://console.test", follow_redirects=False)
        page = self.get("/console/sign-in").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token is not None
        assert self.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key}).status_code == 303
        found = re.search(r'data-csrf="([0-9a-f]{64})"', self.get("/console/trainings").text)
        assert found is not None
        self.csrf = found.group(1)

    def get(self, url: str) -> httpx.Response:
        return self.loop.run_until_complete(self.client.get(url))

    def post(self, url: str, **kw: object) -> httpx.Response:
        return self.loop.run_until_complete(self.client.post(url, **kw))  # type: ignore[arg-type]

    def form(self, url: str, data: dict[str, str], files: dict[str, tuple[str, bytes]] | None = None) -> httpx.Response:
        return self.post(url, data={"csrf_token": self.csrf, **data}, files=files or {"none": ("", b"")})

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture
def app(tmp_path: Path, sqlite_url: str) -> Iterator[tuple[object, str, str]]:
    """The app on a fresh store: keys of workspaces ``acme`` (2 credits) and ``other``."""
    engine = open_store(sqlite_url)
    acme = create_api_key(engine, "acme").key
    other = create_api_key(engine, "other").key
    CreditLedger(engine).grant("acme", 2, reference="tests")
    engine.dispose()
    with running_app(sqlite_url, tmp_path / "home") as application:
        yield application, acme, other


def workspace_key(url: str, workspace: str = "acme") -> str:
    """A new API key of ``workspace`` on the store ``url`` (the console signs in with it)."""
    engine = open_store(url)
    try:
        return create_api_key(engine, workspace).key
    finally:
        engine.dispose()


@contextlib.contextmanager
def running_app(url: str, home: Path) -> Iterator[object]:
    """The real app on the store ``url`` and ``home``, its lifespan entered (startup checks,
    background tasks) for as long as the block runs, and left after it."""
    application = create_app(url, home, jev_source=JEV)
    loop = asyncio.new_event_loop()
    lifespan = application.router.lifespan_context(application)
    loop.run_until_complete(lifespan.__aenter__())
    try:
        yield application
    finally:
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


TRAINING = {"col_id": "id", "col_text": "text", "col_group": "grp", "col_review_label": "",
            "decision-0-name": "sentiment", "decision-0-question": "Is it positive?",
            "decision-0-answer_column": "label", "decision-0-answers": "yes, no", "decision-0-options_column": ""}


def _balance(url: str, workspace: str) -> int:
    engine = open_store(url)
    try:
        return CreditLedger(engine).balance(workspace)
    finally:
        engine.dispose()


def test_a_refused_training_form_says_why_keeps_the_fields_and_charges_nothing(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    b = Browser(app[0], app[1])
    bad = b.form("/console/trainings", {**TRAINING, "decision-0-answers": "yes, maybe"},
                 files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert bad.status_code == 422
    assert "row 1, column &#39;label&#39;" in bad.text or "column &#39;label&#39;" in bad.text, bad.text[:2000]
    assert "expected one of the answers" in bad.text and 'value="Is it positive?"' in bad.text
    assert _balance(sqlite_url, "acme") == 2
    missing = b.form("/console/trainings", {**TRAINING, "col_text": ""})
    assert missing.status_code == 422 and "dataset" in missing.text
    assert _balance(sqlite_url, "acme") == 2
    b.close()


def test_a_training_started_in_the_console_shows_its_split_and_refuses_bad_predictions(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    b = Browser(app[0], app[1])
    made = b.form("/console/trainings", {**TRAINING, "keep_if_loses": "on"},
                  files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert made.status_code == 303, made.text[:3000]
    page_url = made.headers["location"]
    training = page_url.rsplit("/", 1)[1]
    assert _balance(sqlite_url, "acme") == 1  # one credit, as POST /v1/trainings charges
    page = b.get(page_url)
    assert "The split, before training" in page.text and "Keep the model even if it does not beat Jev: on" in page.text
    split = b.get(f"/v1/trainings/{training}/split").json()  # the API's own route, with the cookie
    assert f'id="n-train">{len(split["training_ids"])}<' in page.text and split["training_ids_sha256"] in page.text
    rows = '{"id": "r0", "decision": "sentiment", "probabilities": {"yes": 0.7, "no": 0.2}}\n'
    refused = b.form(f"{page_url}/predictions", {"trained_on": split["training_ids_sha256"]},
                     files={"predictions": ("predictions.jsonl", rows.encode())})
    assert refused.status_code == 422 and "row 1" in refused.text and "sum" in refused.text
    assert b.get(f"/v1/trainings/{training}").json()["state"] == "awaiting_predictions"  # nothing handed over
    listed = b.get("/console/trainings").text
    assert f'data-training="{training}"' in listed and "awaiting predictions" in listed
    other = Browser(app[0], app[2])
    assert other.get(page_url).status_code == 404  # another workspace's training: not found
    assert other.get(f"/v1/trainings/{training}/split").status_code == 404
    assert other.form(f"{page_url}/cancel", {}).status_code == 404
    other.close()
    assert b.form(f"{page_url}/cancel", {}).status_code == 303  # cancelled: the credit comes back
    assert _balance(sqlite_url, "acme") == 2
    assert b.get(f"/v1/trainings/{training}").json()["state"] == "cancelled"
    b.close()


def test_a_judging_trainings_page_shows_how_far_its_verdict_run_is(
        app: tuple[object, str, str], tmp_path: Path) -> None:
    """While judging, the state line (HTMX polls it) shows the verdict run's latest progress,
    read where the run records it under the training's key; without a report, no line."""
    b = Browser(app[0], app[1])
    made = b.form("/console/trainings", TRAINING, files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert made.status_code == 303, made.text[:3000]
    page_url = made.headers["location"]
    training = page_url.rsplit("/", 1)[1]
    split = b.get(f"/v1/trainings/{training}/split").json()
    ids = [row.split(",", 1)[0] for row in CSV.splitlines()[1:]]
    rows = "".join(f'{{"id": "{i}", "decision": "sentiment", "probabilities": {{"yes": 0.6, "no": 0.4}}}}\n'
                   for i in ids)
    sent = b.form(f"{page_url}/predictions", {"trained_on": split["training_ids_sha256"]},
                  files={"predictions": ("predictions.jsonl", rows.encode())})
    assert sent.status_code == 303, sent.text[:3000]
    assert b.get(f"/v1/trainings/{training}").json()["state"] == "judging"
    assert "Now " not in b.get(f"{page_url}/state").text  # no report yet: no progress line
    write_progress(tmp_path / "home", training_key(training), Progress("reading the dataset", 40, 100))
    for url in (page_url, f"{page_url}/state"):
        shown = b.get(url).text
        assert "Now reading the dataset: 40% (40 of 100 rows)." in shown, shown[:3000]
        assert '<progress max="100" value="40"' in shown
    b.close()


def test_usage_and_notifications_pages_answer_for_a_new_workspace(app: tuple[object, str, str]) -> None:
    b = Browser(app[0], app[1])
    usage = b.get("/console/settings/usage")
    assert usage.status_code == 200 and "Nothing spent yet." in usage.text and "No usage budget" in usage.text and "Set the budget" not in usage.text
    # one full stop: the budget's text ended with one for a workspace not set up, and the page added its own
    assert "Spent $0.00 this month. Scheduled studies skip until the operator" in usage.text, usage.text[:3000]
    b.close()


def test_the_backtests_page_says_which_columns_the_historical_data_needs(app: tuple[object, str, str]) -> None:
    import html

    from typestrict_pipeline.api.backtests import workflows
    from typestrict_pipeline.backtest.workflow import columns_text

    b = Browser(app[0], app[1])
    page = b.get("/console/backtests")
    b.close()
    assert page.status_code == 200
    text = html.unescape(page.text)
    for form in ("b", "s"):  # the backtest's and the study's "Historical data" field
        assert f'aria-describedby="{form}-dataset-help"' in text and f'id="{form}-dataset-help"' in text
    for w in workflows():  # what GET /v1/backtests/workflows says, in the CLI's words
        assert f"<code>{w['workflow']}</code> {columns_text(w['columns'])}" in text, text[:3000]


STUDY_FORM = {"workflow": "seattle_rain", "dataset": "seattle_weather", "start": "2013-01-02", "end": "2015-12-31",
              "step": "1d", "folds": "3", "tune_steps": "90", "eval_steps": "60", "holdout_steps": "120",
              "max_candidates": "2", "max_total_steps": "100000"}


def _api(b: Browser, key: str, path: str, body: Mapping[str, object], method: str = "POST") -> str:
    """The API's 422 message for ``body``, through the same app."""
    r = b.loop.run_until_complete(b.client.request(method, path, json=body,
                                                   headers={"Authorization": f"Bearer {key}"}))
    assert r.status_code == 422, (path, r.status_code, r.text[:300])
    message: str = r.json()["error"]["message"]
    return message


API_FIX = "Fix the request (the schema is at /v1/openapi.json)"
FORM_FIX = "Correct the field and submit the form again."


def _form_words(said: str) -> str:
    """The API's message as a console form says it: the same refusal, then what a person at the
    form does (the API's points to its schema)."""
    assert said.endswith(". " + API_FIX), said
    return said.removesuffix(API_FIX) + FORM_FIX


def test_a_refused_form_tells_the_person_what_to_do_not_to_read_the_schema(app: tuple[object, str, str]) -> None:
    """Every console form that the schema refuses (the study's estimate and launch, a backtest, a
    training) ends its message with the console's words; the API keeps its own."""
    import html

    b = Browser(app[0], app[1])
    for route, data in (("/console/studies/estimate", {**STUDY_FORM, "folds": "0"}),
                        ("/console/studies", {**STUDY_FORM, "tune_steps": "x"}),
                        ("/console/backtests", {"workflow": "seattle_rain", "start": "2015-01-01",
                                                "end": "2015-01-10", "step": "s" * 21}),
                        ("/console/trainings", {**TRAINING, "decision-0-name": "d" * 201})):
        r = b.form(route, data, files={"dataset_file": ("reviews.csv", CSV.encode())})
        assert r.status_code == 422, (route, r.status_code, r.text[:300])
        page = html.unescape(r.text)
        assert re.search(r"expected [^<]*, got [^<]*\. Correct the field and submit the form again\.", page), (route, page[:3000])
        assert "openapi" not in page and "Fix the request" not in page, route
    assert _api(b, app[1], "/v1/studies/estimate", {**STUDY_FORM, "folds": 0}).endswith(". " + API_FIX)
    b.close()


@pytest.mark.parametrize(("field", "typed", "sent"), [
    ("folds", "²", "²"), ("folds", "٣", "٣"), ("folds", "3.0", "3.0"), ("folds", "true", "true"),
    ("tune_steps", "0", 0), ("holdout_steps", "100001", 100001), ("name", "n" * 201, "n" * 201),
])
def test_a_refused_study_form_says_what_the_api_says_for_the_same_body(
        app: tuple[object, str, str], field: str, typed: str, sent: object) -> None:
    """One message shape: the console's form and ``POST /v1/studies`` word the schema's refusal of
    the same value in the same words (the console once said "expected input should be a valid
    integer" where the API said "expected a whole number"). ``int("²")`` raised past the page (a
    500) and ``int("٣")`` read 3; each is the schema's refusal, with nothing created."""
    import html

    b = Browser(app[0], app[1])
    body = {k: (int(v) if v.isdigit() else v) for k, v in STUDY_FORM.items()} | {field: sent}
    for route, path in (("/console/studies/estimate", "/v1/studies/estimate"), ("/console/studies", "/v1/studies")):
        said = _api(b, app[1], path, body)
        assert said.startswith(f"{field}: expected "), said
        r = b.form(route, {**STUDY_FORM, field: typed})
        assert r.status_code == 422, (route, r.status_code, r.text[:300])
        assert _form_words(said) in html.unescape(r.text), (said, route)
        assert "openapi" not in r.text, route
    b.close()


def test_a_refused_training_form_says_what_the_api_says_for_the_same_body(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    import html

    b = Browser(app[0], app[1])
    body = {"dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
            "decisions": [{"name": "d" * 201, "question": "Is it positive?", "answer_column": "label",
                           "answers": ["yes", "no"]}], "options": {"keep_if_loses": False}}
    said = _api(b, app[1], "/v1/trainings", body)
    assert said.startswith("decisions.0.name: expected at most 200 characters, got 'ddd"), said
    r = b.form("/console/trainings", {**TRAINING, "decision-0-name": "d" * 201},
               files={"dataset_file": ("reviews.csv", CSV.encode())})
    # the same refusal (expected, got), the field named as the form labels it
    form_said = _form_words(said).replace("decisions.0.name: ", "step 2 (Decisions), Decision 1, Name: ", 1)
    assert r.status_code == 422 and form_said in html.unescape(r.text), r.text[:2000]
    assert "openapi" not in r.text
    assert _balance(sqlite_url, "acme") == 2
    b.close()


def _made(b: Browser, data: Mapping[str, str] | None = None) -> tuple[str, str]:
    """A training started in the console: its page and its id."""
    made = b.form("/console/trainings", dict(data or TRAINING), files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert made.status_code == 303, made.text[:3000]
    page_url: str = made.headers["location"]
    return page_url, page_url.rsplit("/", 1)[1]


def _rows(**changed: object) -> list[dict[str, object]]:
    """A prediction for every row of ``CSV``; ``changed`` replaces the fourth row's probabilities."""
    ids = [row.split(",", 1)[0] for row in CSV.splitlines()[1:]]
    rows: list[dict[str, object]] = [{"id": i, "decision": "sentiment", "probabilities": {"yes": 0.6, "no": 0.4}}
                                     for i in ids]
    rows[3]["probabilities"] = changed
    return rows


def _shown(r: httpx.Response) -> str:
    import html

    return html.unescape(r.text)


@pytest.mark.parametrize("value", [True, "0.6"])
def test_a_probability_must_be_a_json_number_in_the_api_and_the_console(
        app: tuple[object, str, str], tmp_path: Path, value: object) -> None:
    """``true`` and ``"0.6"`` were read as 1.0 and 0.6 by the API's schema and the training moved
    to judging; now the predictions reader's one rule refuses them in both, naming the row, the
    decision and the answer, and nothing is handed over."""
    import json

    b = Browser(app[0], app[1])
    page_url, training = _made(b)
    r = b.loop.run_until_complete(b.client.post(
        f"/v1/trainings/{training}/predictions", json={"predictions": _rows(yes=value, no=0.4)},
        headers={"Authorization": f"Bearer {app[1]}"}))
    assert r.status_code == 422, r.text
    said = r.json()["error"]["message"]
    assert "row 4, column 'probabilities.yes'" in said and "decision 'sentiment'" in said, said
    assert f"got {json.dumps(value)}" in said and "nothing was stored" in said, said
    lines = "".join(json.dumps(row) + "\n" for row in _rows(yes=value, no=0.4))
    refused = b.form(f"{page_url}/predictions", {}, files={"predictions": ("p.jsonl", lines.encode())})
    assert refused.status_code == 422
    assert "row 4, column 'probabilities.yes'" in _shown(refused) and f"got {json.dumps(value)}" in _shown(refused)
    assert b.get(f"/v1/trainings/{training}").json()["state"] == "awaiting_predictions"
    assert not (tmp_path / "home" / "trainings" / training / "predictions" / "model.jsonl").exists()
    b.close()


def test_a_refused_training_form_leaves_the_workspaces_files_as_they_were(
        app: tuple[object, str, str], tmp_path: Path, sqlite_url: str) -> None:
    """The form's upload was saved into the workspace's files before it was checked: a refused
    ``passwd`` stayed, and a refused ``reviews.csv`` replaced the one there. Now it is stored
    only once the training is made."""
    b = Browser(app[0], app[1])
    files = tmp_path / "home" / "workspaces" / "acme" / "files"
    put = b.loop.run_until_complete(b.client.put("/v1/files/reviews.csv", content=b"the customer's own",
                                                 headers={"Authorization": f"Bearer {app[1]}"}))
    assert put.status_code == 201
    before = {p.name: p.read_bytes() for p in files.iterdir()}
    for name, data, extra, words in (
            ("passwd", b"root:x:0:0\n", {}, "got 'passwd'"),
            ("reviews.csv", CSV.encode(), {"decision-0-answers": "yes, maybe"}, "reviews.csv, row 1, column 'label'"),
            ("reviews.csv", CSV.encode(), {"keep_if_loses": "yes"}, "field 'keep_if_loses'")):
        r = b.form("/console/trainings", {**TRAINING, **extra}, files={"dataset_file": (name, data)})
        assert r.status_code == 422 and words in _shown(r), _shown(r)[:3000]
        assert "/tmp" not in _shown(r) and "staging" not in _shown(r)
        assert {p.name: p.read_bytes() for p in files.iterdir()} == before
        assert _balance(sqlite_url, "acme") == 2
    _made(b)
    assert (files / "reviews.csv").read_bytes() == CSV.encode()  # made: stored, as PUT /v1/files does
    b.close()


def test_the_keep_box_takes_only_what_the_form_sends(app: tuple[object, str, str], sqlite_url: str) -> None:
    """``keep_if_loses=yes`` was read as unticked (a training without the keep option, charged);
    the box sends ``on`` or nothing, anything else is refused with what to do."""
    b = Browser(app[0], app[1])
    for sent in ("yes", "true", "off", ""):
        r = b.form("/console/trainings", {**TRAINING, "keep_if_loses": sent},
                   files={"dataset_file": ("reviews.csv", CSV.encode())})
        assert r.status_code == 422, (sent, r.status_code)
        assert "Keep the model even if it does not beat Jev" in _shown(r) and "Tick or clear the box" in _shown(r)
    assert _balance(sqlite_url, "acme") == 2
    page_url, _ = _made(b, {**TRAINING, "keep_if_loses": "on"})
    assert "Keep the model even if it does not beat Jev: on" in b.get(page_url).text
    b.close()


def test_the_notification_box_takes_only_what_the_form_sends(app: tuple[object, str, str], sqlite_url: str) -> None:
    """Settings → Notifications read any ``enabled`` but ``on`` as unticked: ``enabled=true`` (or
    the box sent twice) turned the owner's notification off. Now the box follows the one rule of
    the console's boxes (``on`` or nothing; anything else refused with what to do, nothing saved)."""
    from typestrict_pipeline.reruns.tables import RerunSchedule, ScheduleState
    from typestrict_pipeline.store import session_scope

    engine = open_store(sqlite_url)
    try:
        with session_scope(engine) as s:
            s.add(RerunSchedule(workspace_id="acme", workflow_id="wx", root_study_id="1", lineage_root_id="1",
                                owner="ana@example.com", cadence_seconds=86_400, min_unseen_steps=1,
                                budget_micro_usd=1_000_000, state=ScheduleState.ENABLED,
                                enabled_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])

    def enabled() -> bool:
        on = b.loop.run_until_complete(b.client.get("/v1/notifications", headers={"Authorization": f"Bearer {app[1]}"}))
        return bool(on.json()["settings"][0]["enabled"])

    assert enabled()
    for sent in (["true"], ["off"], [""], ["on", "on"], ["on", "off"]):
        r = b.post("/console/settings/notifications",
                   data={"csrf_token": b.csrf, "person": "ana@example.com", "enabled": sent})
        assert r.status_code == 422, (sent, r.status_code, r.text[:500])
        assert "field &#39;enabled&#39;: expected the box" in r.text and "save again" in r.text, (sent, r.text[:3000])
        assert enabled(), sent  # nothing saved
    r = b.post("/console/settings/notifications", data={"csrf_token": b.csrf, "person": "ana@example.com"})
    assert r.status_code == 303 and not enabled()  # not sent: unticked
    r = b.post("/console/settings/notifications",
               data={"csrf_token": b.csrf, "person": "ana@example.com", "enabled": "on"})
    assert r.status_code == 303 and enabled()
    b.close()


@pytest.mark.parametrize(("url", "said"), [
    ("/console/trainings/new/decision?i=abc", "i (in the query): expected a whole number, got 'abc'."),
    ("/console/trainings/new/decision?i=1e3", "i (in the query): expected a whole number, got '1e3'."),
    ("/console/trainings/new/decision?i=1&i=2",
     "i (in the query): expected it once (a repeated parameter is ambiguous), got ['1', '2']."),
    ("/console/settings/notifications?saved=yes", "saved (in the query): expected a whole number, got 'yes'."),
    ("/console/trainings?page=1&page=2",
     "page (in the query): expected it once (a repeated parameter is ambiguous), got ['1', '2']."),
    ("/console/backtests?studies=1&backtests=1&backtests=2",
     "backtests (in the query): expected it once (a repeated parameter is ambiguous), got ['1', '2']."),
])
def test_a_query_a_page_does_not_take_is_refused_on_that_page_saying_so(
        app: tuple[object, str, str], url: str, said: str) -> None:
    """A console page whose query was wrong (``?i=abc`` on "Add a decision", ``?saved=yes``) said
    404 "expected a page of the console, got '/console/settings/notifications'" of a page that
    exists, and a repeated parameter was read as its last value. Now the API's one rule of the
    query (:func:`~typestrict_pipeline.api.edge.query_problem`), on the console's page."""
    b = Browser(app[0], app[1])
    r = b.get(url)
    assert r.status_code == 422, (url, r.status_code, r.text[:500])
    assert f"{said} Use the links of the console" in _shown(r), _shown(r)[:3000]
    assert b.get(url.split("?")[0] + ("?i=2" if "decision" in url else "")).status_code == 200
    b.close()


def test_a_refused_predictions_form_stores_no_model_file(app: tuple[object, str, str], tmp_path: Path) -> None:
    """The model files were written before the predictions and their names were checked: a
    refused form left ``model/weights.bin`` (and ``model/pwn2`` from a name with folders). Now
    they are staged and moved in with the predictions only."""
    import json

    b = Browser(app[0], app[1])
    page_url, training = _made(b)
    folder = tmp_path / "home" / "trainings" / training
    assert b.get(page_url).status_code == 200  # its first view stores the split (split.json.gz)
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert "split.json.gz" in before
    bad = "".join(json.dumps(row) + "\n" for row in _rows(yes=0.7, no=0.2))
    good = "".join(json.dumps(row) + "\n" for row in _rows(yes=0.7, no=0.3))
    for predictions, models, words in (
            (bad, [("weights.bin", b"w"), ("../../../../tmp/pwn2", b"x")], "sum"),
            (bad, [("weights.bin", b"w"), (".htaccess", b"x")], "'.htaccess'"),
            (good, [("weights.bin", b"w"), (".htaccess", b"x")], "'.htaccess'"),
            (good, [("weights.bin", b"w"), ("weights.bin", b"v")], "'weights.bin' twice")):
        r = b.post(f"{page_url}/predictions", data={"csrf_token": b.csrf},
                   files=[("predictions", ("p.jsonl", predictions.encode()))]
                   + [("model_files", item) for item in models])
        assert r.status_code == 422 and words in _shown(r), _shown(r)[:3000]
        assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == before
        assert not (folder / "model").exists() and not (tmp_path / "pwn2").exists()
    assert b.get(f"/v1/trainings/{training}").json()["state"] == "awaiting_predictions"
    sent = b.post(f"{page_url}/predictions", data={"csrf_token": b.csrf},
                  files=[("predictions", ("p.jsonl", good.encode())), ("model_files", ("weights.bin", b"w"))])
    assert sent.status_code == 303, _shown(sent)[:3000]
    assert (folder / "model" / "weights.bin").read_bytes() == b"w"
    assert not [p for p in folder.rglob(".incoming*")]
    b.close()


def test_refusals_name_the_customers_file_and_field_never_a_server_path(
        app: tuple[object, str, str]) -> None:
    """A dataset's refusal named the server's staging copy (``/…/.staging-tr_…/dataset.csv, row
    50``), a file that is not Parquet showed pyarrow's ``ArrowInvalid`` with that path, stated
    ids named ``key 'training.trained_on.ids_file'`` and a staged file, and JSON fields were
    called columns. Now: the customer's file name, the request's field."""
    b = Browser(app[0], app[1])
    auth = {"Authorization": f"Bearer {app[1]}"}

    def call(method: str, url: str, **kw: object) -> httpx.Response:
        return b.loop.run_until_complete(b.client.request(method, url, headers=auth, **kw))  # type: ignore[arg-type]

    lines = CSV.splitlines()
    call("PUT", "/v1/files/ragged.csv", content=("\n".join([*lines[:50], "r999,only two", *lines[50:]]) + "\n").encode())
    call("PUT", "/v1/files/notpq.parquet", content=CSV.encode())
    body: dict[str, Any] = {"dataset": {"path": "ragged.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
            "decisions": [{"name": "sentiment", "question": "Is it positive?", "answer_column": "label",
                           "answers": ["yes", "no"]}], "options": {"keep_if_loses": False}}
    _, training = _made(b)
    split = call("GET", f"/v1/trainings/{training}/split").json()
    for method, url, sent, words in (
            ("POST", "/v1/trainings", body, "ragged.csv, row 50: expected 4 cells"),
            ("POST", "/v1/trainings", {**body, "dataset": {**body["dataset"], "path": "notpq.parquet"}},
             "notpq.parquet: expected a Parquet file, got a file that is not Parquet (Parquet magic bytes"),
            ("POST", "/v1/trainings", {**body, "dataset": {**body["dataset"], "path": "../x.csv"}},
             "field 'dataset.path': expected a path relative"),
            ("POST", f"/v1/trainings/{training}/predictions",
             {"predictions": _rows(yes=0.5, no=0.5), "trained_on_ids": [split["training_ids"][0], "\u202e" + split["training_ids"][1]]},
             "field 'trained_on_ids.1': expected an id (printable text")):
        r = call(method, url, json=sent)
        assert r.status_code == 422, r.text
        said = r.json()["error"]["message"]
        assert said.startswith(words), said
        for internal in ("/tmp", "staging", ".incoming", "ids_file", "Arrow", "column 'dataset"):
            assert internal not in said, (internal, said)
    assert call("GET", f"/v1/trainings/{training}").json()["state"] == "awaiting_predictions"
    b.close()


def test_a_body_that_is_no_form_gets_the_consoles_page_saying_what_to_do(app: tuple[object, str, str]) -> None:
    """Broken multipart got the API's JSON ``http_error`` "Invalid multipart data." on a console page."""
    b = Browser(app[0], app[1])
    r = b.post("/console/trainings", content=b"garbage",
               headers={"content-type": "multipart/form-data; boundary=zz", "x-csrf-token": b.csrf})
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/html"), r.text[:300]
    assert "cannot be read as one" in _shown(r) and "Reload the page and send the form again" in _shown(r)
    b.close()


#: Values a person (or a script) may type into any console field: empty, blank, out of range,
#: non-finite, too long, control and bidi characters, paths, markup, huge grids and lists.
_FIELD_VALUES = ["", " ", "0", "-1", "-0", "1.5", "1e999", "nan", "inf", "99999999999999999999", "9" * 400,
                 "x" * 20_000, "\x00", "\u202e", "a\r\nb", "😀" * 100, "1d", "0s", "2012-01-01", "9999-12-31",
                 "0001-01-01", "${x}", "<script>alert(1)</script>", "../../etc/passwd", "true", "on",
                 "seattle_rain", "seattle_weather", "id", "text", "label", "yes, no", "yes,yes", "a=1,2,3",
                 "a=1:2", "a=" + ",".join(map(str, range(5000))), "f" * 32, "p=" + "\np=".join("1" for _ in range(300))]
_PATH_IDS = ["1", "0", "-1", "99999999999999999999", "abc", "%2e%2e", "1.5", "%00"]
#: Every form the console posts, with its fields (the pages' own forms, and the ones a page shows
#: only for a study, a schedule, a training or a subscription that exists).
_FORMS = {
    "/console/trainings": ["col_id", "col_text", "col_group", "col_review_label", "decision-0-name",
                           "decision-0-question", "decision-0-answer_column", "decision-0-answers",
                           "decision-0-options_column", "keep_if_loses", "form_id"],
    "/console/backtests": ["workflow", "dataset", "start", "end", "step", "form_id"],
    "/console/studies": ["name", "workflow", "dataset", "start", "end", "step", "folds", "tune_steps",
                         "eval_steps", "holdout_steps", "grid", "random", "random_draws", "max_candidates",
                         "max_total_steps", "budget_usd", "min_unseen_steps", "form_id"],
    "/console/studies/estimate": ["name", "workflow", "dataset", "start", "end", "step", "folds", "tune_steps",
                                  "eval_steps", "holdout_steps", "grid", "random", "random_draws",
                                  "max_candidates", "max_total_steps", "budget_usd", "min_unseen_steps"],
    "/console/settings/usage/budget": ["budget_usd"],
    "/console/settings/notifications": ["enabled", "person"],
    "/console/schedules": ["rerun", "study", "cadence", "min_unseen_steps", "owner", "budget_usd", "form_id"],
    **{f"/console/{kind}/{i}/cancel": [] for kind in ("studies", "backtests", "schedules", "trainings")
       for i in _PATH_IDS},
    **{f"/console/trainings/{i}/predictions": ["trained_on", "model_files", "form_id"] for i in _PATH_IDS},
}


def test_no_console_form_answers_a_server_error(app: tuple[object, str, str]) -> None:
    """Any body to any of the console's forms is answered with a page that says what to do (a
    4xx or a redirect), never a 5xx or a traceback: 400 seeded random bodies, each field drawn
    from :data:`_FIELD_VALUES` or left out, with extra fields and, for a training, a file."""
    import random

    b = Browser(app[0], app[1])
    rng = random.Random(27)
    pages = [a for a in sorted(_FORMS) if not any(f"/{i}/" in a for i in _PATH_IDS)]
    by_id = sorted(set(_FORMS) - set(pages))
    for _ in range(400):
        action = rng.choice(pages if rng.random() < 0.75 else by_id)  # the forms that create, mostly
        valid = {"/console/studies/estimate": STUDY_FORM, "/console/trainings": TRAINING}.get(action)
        if valid is not None and rng.random() < 0.5:  # a good body with one field changed: deeper checks
            data = {**valid, rng.choice(_FORMS[action]): rng.choice(_FIELD_VALUES)}
        else:
            data = {name: rng.choice(_FIELD_VALUES) for name in _FORMS[action] if rng.random() < 0.9}
            for _ in range(rng.randint(0, 2)):
                data[rng.choice(["x", "decision-9-name", "decision-0-answers", "grid", "extra" * 50])] = (
                    rng.choice(_FIELD_VALUES))
        files = None
        if action.startswith("/console/trainings") and (valid is not None or rng.random() < 0.5):
            field = "dataset_file" if action == "/console/trainings" else "predictions"
            files = {field: ("d.csv", rng.choice([CSV.encode(), CSV.encode(), b"", b"\xff\xfe", CSV.encode()[:50]]))}
        r = b.form(action, data, files)
        assert r.status_code < 500 and "Traceback" not in r.text, (action, r.status_code, r.text[:500])
    b.close()


def test_the_trainings_page_shows_fifty_a_page_newest_first(app: tuple[object, str, str], tmp_path: Path,
                                                            sqlite_url: str) -> None:
    """It read and showed every training of the workspace on one page (1,000 trainings: seconds)."""
    import os
    import shutil

    from typestrict_pipeline.console.paging import PER_PAGE as TRAININGS_PER_PAGE
    from typestrict_pipeline.lifecycle.trainings import start_training

    b = Browser(app[0], app[1])
    made = b.form("/console/trainings", TRAINING, files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert made.status_code == 303, made.text[:3000]
    first = made.headers["location"].rsplit("/", 1)[1]
    root = tmp_path / "home" / "trainings"
    older = [f"tr_{i:016x}" for i in range(TRAININGS_PER_PAGE + 4)]  # 55 in all
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("acme", len(older), reference="copies")
    for i, tid in enumerate(older):
        shutil.copytree(root / first, root / tid)
        start_training(engine, "acme", tid)  # a training: charged, its lifecycle row written
        os.utime(root / tid, (1_700_000_000 + i, 1_700_000_000 + i))  # older than the one just made
    engine.dispose()
    one = b.get("/console/trainings").text
    shown = re.findall(r'data-training="([^"]+)"', one)
    assert len(shown) == TRAININGS_PER_PAGE and shown[0] == first and shown[1] == older[-1]
    assert "Your trainings, newest first (1 to 50 of 55)" in one and '?page=2" rel="next">Older 5<' in one
    two = b.get("/console/trainings?page=2").text
    assert re.findall(r'data-training="([^"]+)"', two) == older[4::-1]
    assert '?page=1" rel="prev">Newer 50<' in two and "rel=\"next\"" not in two
    past = b.get("/console/trainings?page=3")
    assert past.status_code == 422, past.text[:2000]
    assert "expected a page from 1 to 2, got &#39;3&#39;. Use the Newer and Older links under the table" in past.text
    b.close()


def test_the_backtests_page_reaches_every_run_card_and_study(app: tuple[object, str, str], sqlite_url: str) -> None:
    """It showed the 50 newest backtests and studies and no way to an older one."""
    from typestrict_pipeline.backtest.store import save_backtest
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.service import create_study_from_config

    engine = open_store(sqlite_url)
    try:
        result = _tiny_backtest("sign")
        made = [save_backtest(engine, result, workspace="acme") for _ in range(53)]
        form: dict[str, Any] = {"start": "2012-01-01", "end": "2012-12-01", "tune_steps": 20, "eval_steps": 20,
                                "holdout_steps": 20, "grid": ["skill=0.5,0.6"], "max_candidates": 2,
                                "max_total_steps": 1000, "synthetic": True}
        for i in range(2):
            create_study_from_config(engine, study_config(StudyForm(**form, workflow=f"wx-{i}", workspace="acme")))
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    one = b.get("/console/backtests").text
    cards = re.findall(r'data-backtest="([^"]+)"', one)
    assert len(cards) == 50 and "Your backtests, newest first (1 to 50 of 53)" in one
    assert 'href="/console/backtests?backtests=2" rel="next">Older 3<' in one
    assert len(re.findall(r'data-study="', one)) == 2 and 'id="studies-pages"' not in one  # one page: no links
    two = b.get("/console/backtests?backtests=2&studies=1").text
    rest = re.findall(r'data-backtest="([^"]+)"', two)
    assert sorted(cards + rest) == sorted(made)
    assert 'href="/console/backtests?studies=1&amp;backtests=1" rel="prev">Newer 50<' in two
    for query, said in (("backtests=3", "backtests (in the query): expected a page from 1 to 2, got &#39;3&#39;"),
                        ("studies=0", "studies (in the query): expected a page number from 1, got &#39;0&#39;")):
        r = b.get(f"/console/backtests?{query}")
        assert r.status_code == 422 and said in r.text, r.text[:3000]
    b.close()


@pytest.mark.parametrize(("method", "url", "status", "said"), [
    ("GET", "/console/nope", 404, "expected a page of the console, got '/console/nope'."),
    ("GET", "/console/trainings/a/b/c", 404, "expected a page of the console, got '/console/trainings/a/b/c'."),
    ("GET", "/console/static/nope.css", 404, "expected a page of the console, got '/console/static/nope.css'."),
    ("DELETE", "/console/trainings", 405, "expected one of GET, HEAD, POST for '/console/trainings', got DELETE."),
    ("POST", "/console/trainings/new", 405, "expected one of GET, HEAD for '/console/trainings/new', got POST."),
])
def test_an_address_that_is_no_console_page_gets_the_consoles_page_saying_so(
        app: tuple[object, str, str], method: str, url: str, status: int, said: str) -> None:
    """A console address that matches none of its pages (a mistyped link, an old bookmark) or a
    method its page does not take got the API's JSON: "expected a route of the API … See
    /v1/openapi.json", advice for a program, at a person. Now the console's page, with its
    headers and what to do; the API's own addresses keep the API's answer."""
    b = Browser(app[0], app[1])
    r = b.loop.run_until_complete(b.client.request(method, url))
    assert r.status_code == status and r.headers["content-type"].startswith("text/html"), (url, r.text[:300])
    assert f"{said} Use the links of the console" in _shown(r) and "openapi" not in r.text, _shown(r)[:3000]
    assert r.headers["content-security-policy"].startswith("default-src 'none'")
    if status == 405:
        assert r.headers["allow"]
    api = b.get("/v1/nope")
    assert api.status_code == 404 and api.json()["error"]["message"].endswith("See /v1/openapi.json")
    b.close()


def test_the_budget_form_reads_the_whole_value_as_the_api_does(app: tuple[object, str, str], sqlite_url: str) -> None:
    """Settings → Usage cut the typed budget to its first 40 characters before reading it:
    ``0.25`` then 40 spaces then ``9`` was saved as $0.25 (the API refuses that value), and
    ``0.1000…0001`` was refused showing a value without its last digit. Now the form goes
    through the API's schema and reader whole: refused as ``PUT /v1/workspaces/{id}/budget``
    refuses it, nothing saved."""
    import html

    _active_workspace(sqlite_url, usage_budget_micro_usd=1)
    b = Browser(app[0], app[1])

    def budget() -> int:
        r = b.loop.run_until_complete(b.client.get("/v1/workspaces/acme/budget",
                                                   headers={"Authorization": f"Bearer {app[1]}"}))
        return int(r.json()["budget_micro_usd"])

    for typed in ("0.25" + " " * 40 + "9", "0.1" + "0" * 40 + "1"):
        said = _api(b, app[1], "/v1/workspaces/acme/budget", {"budget_usd": typed}, method="PUT")
        r = b.post("/console/settings/usage/budget", data={"csrf_token": b.csrf, "budget_usd": typed})
        assert r.status_code == 422, (typed, r.status_code)
        words = _form_words(said) if said.endswith(API_FIX) else said  # the schema's, or the reader's
        assert words in html.unescape(r.text), (said, html.unescape(r.text)[:3000])
        assert budget() == 1, typed  # nothing saved
    r = b.post("/console/settings/usage/budget", data={"csrf_token": b.csrf, "budget_usd": " 0.25 "})
    assert r.status_code == 303 and budget() == 250_000
    b.close()


@pytest.mark.parametrize("body", ["budget_usd=1&budget_usd=1000000", "budget_usd=1000000&budget_usd=1",
                                  "budget_usd=1&csrf_token=x"])
def test_a_field_sent_twice_is_refused_not_read_as_its_last_value(
        app: tuple[object, str, str], sqlite_url: str, body: str) -> None:
    """A form's field sent twice was read as its last value: ``budget_usd=1&budget_usd=1000000``
    saved a $1,000,000 budget (the API refuses a key twice in a body, a page a repeated query
    parameter); a second ``csrf_token`` replaced the first."""
    import html

    _active_workspace(sqlite_url, usage_budget_micro_usd=7)
    b = Browser(app[0], app[1])
    r = b.post("/console/settings/usage/budget", content=f"csrf_token={b.csrf}&{body}".encode(),
               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 422, (r.status_code, r.text[:2000])
    name = body.split("&")[-1].split("=")[0]
    assert f"{name}: expected it once (a repeated field is ambiguous), got [" in html.unescape(r.text)
    got = b.loop.run_until_complete(b.client.get("/v1/workspaces/acme/budget",
                                                 headers={"Authorization": f"Bearer {app[1]}"}))
    assert got.json()["budget_micro_usd"] == 7  # nothing saved
    b.close()


def test_the_rerun_box_takes_only_what_the_form_sends(app: tuple[object, str, str], sqlite_url: str) -> None:
    """"Re-run on a schedule" sent as ``yes`` (or twice) was refused saying "got it empty": the
    box follows the one rule of the console's boxes now, naming what was sent; nothing is
    scheduled."""
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.service import create_study_from_config

    engine = open_store(sqlite_url)
    try:
        form: dict[str, Any] = {"start": "2012-01-01", "end": "2012-12-01", "tune_steps": 20, "eval_steps": 20,
                                "holdout_steps": 20, "grid": ["skill=0.5,0.6"], "max_candidates": 2,
                                "max_total_steps": 1000, "synthetic": True}
        study = create_study_from_config(engine, study_config(StudyForm(**form, workflow="wx", workspace="acme")))
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    for sent, said in ((["yes"], "field 'rerun': expected the box 'Re-run on a schedule' ticked ('on'), got 'yes'."),
                       (["on", "on"], "field 'rerun': expected the box 'Re-run on a schedule' ticked ('on'), got 'on', 'on'."),
                       ([], "expected the box 'Re-run on a schedule' ticked, got it empty.")):
        r = b.post("/console/schedules",
                   data={"csrf_token": b.csrf, "study": str(study), "cadence": "1d", "owner": "ana@example.com",
                         "rerun": sent})
        assert r.status_code == 422, (sent, r.status_code, r.text[:300])
        assert said in _shown(r), (sent, _shown(r)[:3000])
    listed = b.loop.run_until_complete(b.client.get("/v1/schedules", headers={"Authorization": f"Bearer {app[1]}"}))
    assert listed.json() == {"schedules": []}
    b.close()


CONSOLE_NOT_API_WORDS = ("/v1/", "field '", "key '", "trained_on_sha256", "request", "GET ", "POST ", "PUT ",
                         "with the API", "manifest")


def _console_refusal(r: httpx.Response, status: int, words: str) -> str:
    """The refusal a console page shows (its ``#error``), in the console's words."""
    assert r.status_code == status, _shown(r)[:3000]
    found = re.search(r'id="error"[^>]*>(.*?)</p>', _shown(r), flags=re.S)
    assert found is not None, _shown(r)[:3000]
    said = found.group(1)
    assert words in said, said
    for word in CONSOLE_NOT_API_WORDS:
        assert word not in said, (word, said)
    return said


def test_the_trainings_pages_say_their_refusals_in_the_consoles_words(app: tuple[object, str, str]) -> None:
    """The trainings pages showed the API's words: ``field 'trained_on_sha256'``, "read GET
    /v1/trainings/{id}", "list them with the API", ``field 'decisions.0.answers'``, "the
    request's predictions ... post them again". Now the page, the form's step and field, the box
    and the button; the rule is the same one the API's refusal comes from."""
    import json

    b = Browser(app[0], app[1])
    page_url, training = _made(b)
    good = "".join(json.dumps(r) + "\n" for r in _rows(yes=0.5, no=0.5)).encode()
    bad = "".join(json.dumps(r) + "\n" for r in _rows(yes=0.9, no=0.5)).encode()
    _console_refusal(b.form(f"{page_url}/predictions", {"trained_on": "0" * 64},
                            files={"predictions": ("mine.jsonl", good)}), 422,
                     'the box "My model was trained on these training rows only": expected the SHA-256 of the')
    said = _console_refusal(b.form(f"{page_url}/predictions", {}, files={"predictions": ("mine.jsonl", bad)}),
                            422, "your file 'mine.jsonl', row 4, column 'probabilities'")
    assert said.endswith("correct them and upload the file again with Upload and judge."), said
    _console_refusal(b.form("/console/trainings", {**TRAINING, "decision-0-answers": "yes, yes"},
                            files={"dataset_file": ("reviews.csv", CSV.encode())}), 422,
                     "step 2 (Decisions), Decision 1, Answers: expected each answer listed once")
    _console_refusal(b.form("/console/trainings", {**TRAINING, "col_text": ""},
                            files={"dataset_file": ("reviews.csv", CSV.encode())}), 422,
                     "step 1 (Data), Text column: expected ")
    _console_refusal(b.form("/console/trainings", {**TRAINING, "dataset_name": "nope.csv"}), 404,
                     "Choose the dataset in step 1 (Data): upload it, or pick one of your files")
    _console_refusal(b.form("/console/trainings/tr_0000000000000000/cancel", {}), 404,
                     "Check the address: the Trainings page lists this workspace's trainings")
    assert b.form(f"{page_url}/predictions", {}, files={"predictions": ("mine.jsonl", good)}).status_code == 303
    _console_refusal(b.form(f"{page_url}/predictions", {}, files={"predictions": ("mine.jsonl", good)}), 409,
                     "got its predictions already accepted and being judged. Its verdict follows; follow it "
                     "on this training's page")
    # The API's door says the same refusal in its words.
    auth = {"Authorization": f"Bearer {app[1]}"}
    again = b.loop.run_until_complete(b.client.post(f"/v1/trainings/{training}/predictions", headers=auth,
                                                    json={"predictions": _rows(yes=0.5, no=0.5)}))
    assert again.status_code == 409 and "read GET /v1/trainings/{id}" in again.json()["error"]["message"]
    b.close()


def test_signing_in_after_the_session_ended_comes_back_to_the_page_not_to_a_fragment_or_a_post(
        app: tuple[object, str, str]) -> None:
    """A session that ends while a page is open (idle for an hour, signed out in another tab):
    the next polled state line, "Add a decision", the estimate or a form sent the person to the
    sign-in form with ``next`` the request's own address, so signing in opened a bare fragment
    (the study's state line without the page) or a ``POST``'s address (405, "Not allowed");
    "Sign out" itself came back to ``/console/sign-out`` after signing in. Now ``next`` is the
    page the browser showed, and signing out of an ended session just says "You are signed out"."""
    b = Browser(app[0], app[1])
    assert b.form("/console/sign-out", {}).status_code == 303  # signed out in another tab
    page = "http://console.test/console/studies/5?page=2"
    for method, url, headers, back in (
            ("GET", "/console/studies/5/state", {"hx-request": "true", "hx-current-url": page},
             "/console/studies/5?page=2"),
            ("GET", "/console/trainings/new/decision?i=1",
             {"hx-request": "true", "hx-current-url": "http://console.test/console/trainings/new"},
             "/console/trainings/new"),
            ("POST", "/console/studies/estimate", {"hx-request": "true", "hx-current-url": page},
             "/console/studies/5?page=2"),
            ("POST", "/console/studies", {"referer": "http://console.test/console/backtests"}, "/console/backtests"),
            ("POST", "/console/backtests/abc/cancel", {"referer": "http://console.test/console/backtests/abc"},
             "/console/backtests/abc"),
            ("GET", "/console/backtests?studies=2", {}, "/console/backtests?studies=2")):
        r = b.loop.run_until_complete(b.client.request(method, url, headers=headers))
        where = r.headers.get("hx-redirect") or r.headers.get("location")
        assert where == f"/console/sign-in?next={back.replace('?', '%3F').replace('=', '%3D')}", (url, where)
    ended = b.post("/console/sign-out", data={"csrf_token": b.csrf})
    assert ended.status_code == 303 and ended.headers["location"] == "/console/sign-in?signed_out=1"
    assert "You are signed out." in b.get(ended.headers["location"]).text
    b.close()


def test_a_backtest_that_ends_while_its_page_is_open_takes_its_cancel_button_with_it(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    """The run card polls itself while the backtest runs; when the run ended, the card stopped
    polling but "Cancel the backtest", outside it, stayed: pressing it answered 409 "Conflict …
    It has ended already". Now the poll that finds the run ended reloads the page (as a study's
    state line does), and the page of an ended backtest has no cancel button."""
    from typestrict_pipeline.backtest.store import save_backtest

    engine = open_store(sqlite_url)
    try:
        ended = save_backtest(engine, _tiny_backtest("ends"), workspace="acme")
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    page = f"/console/backtests/{ended}"
    polled = b.loop.run_until_complete(b.client.get(f"{page}/card", headers={"hx-request": "true"}))
    assert polled.status_code == 204 and polled.headers["hx-redirect"] == page, (polled.status_code, polled.text[:500])
    shown = b.get(page).text
    assert "completed" in shown and "Cancel the backtest" not in shown and "hx-trigger" not in shown
    assert b.get(f"{page}/card").status_code == 200  # the card alone, outside HTMX, as before
    b.close()


def _active_workspace(url: str, *, usage_budget_micro_usd: int) -> None:
    """Workspace ``acme`` with an active subscription and this usage budget (micro-USD)."""
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.workspace import set_workspace

    engine = open_store(url)
    try:
        set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE,
                      usage_budget_micro_usd=usage_budget_micro_usd)
    finally:
        engine.dispose()


def _tiny_backtest(name: str) -> Any:
    """A finished backtest of workflow ``name`` over two days of a five-row table (in process)."""
    from typestrict_pipeline.backtest import PointInTimeTable, Workflow, run_backtest

    day = dt.timedelta(days=1)
    t0 = dt.datetime(2021, 1, 1, tzinfo=dt.UTC)
    wf = Workflow(name, lambda c: 1, lambda c: 1, lambda d, o, c: 1.0, ("t",), day, "the value on the next day")
    data = PointInTimeTable("t", event_time=[t0 + i * day for i in range(5)],
                            known_time=[t0 + (i + 1) * day for i in range(5)], columns={"v": [1.0] * 5})
    return run_backtest(wf, data=data, start=t0 + day, end=t0 + 3 * day, step=day)


def _created_study(url: str) -> int:
    """A study of workspace ``acme`` on the synthetic workflow, created (not run: it waits for its
    run), two candidates."""
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.service import create_study_from_config

    engine = open_store(url)
    try:
        return create_study_from_config(engine, study_config(StudyForm(
            start="2012-01-01", end="2012-12-01", tune_steps=20, eval_steps=20, holdout_steps=20,
            grid=["skill=0.5,0.6"], max_candidates=2, max_total_steps=1000, synthetic=True, workflow="wx",
            workspace="acme")))
    finally:
        engine.dispose()


def test_a_refused_form_comes_back_with_its_refusal_focused(app: tuple[object, str, str], sqlite_url: str) -> None:
    """A refused form's page came back at its top with the focus nowhere: the New study form is
    three screens down the Backtests page on a phone, so the person saw the page's top, no
    message, and their form below as they had left it. Every form's refusal is now the page's
    one ``autofocus`` (focusable, ``tabindex=-1``): the browser scrolls to it and a screen reader
    reads it first; the sign-in form keeps the focus in its key field, which names the refusal."""
    study = _created_study(sqlite_url)
    b = Browser(app[0], app[1])
    made = b.form("/console/trainings", TRAINING, files={"dataset_file": ("reviews.csv", CSV.encode())})
    training = made.headers["location"]
    for route, data, error in (
            ("/console/studies", {**STUDY_FORM, "budget_usd": "abc"}, "study-error"),
            ("/console/backtests", {"workflow": "seattle_rain", "start": "2015-01-10", "end": "2015-01-01",
                                    "step": "1d"}, "backtest-error"),
            ("/console/trainings", {**TRAINING, "decision-0-answers": "yes"}, "error"),
            (f"{training}/predictions", {}, "error"),
            ("/console/schedules", {"study": str(study), "cadence": "1d", "owner": "ana@example.com"},
             "schedule-error")):
        r = b.form(route, data)
        assert r.status_code >= 400, (route, r.status_code)
        assert re.findall(r"<[^>]* autofocus[ >]", r.text) == [
            f'<p class="error" role="alert" id="{error}" tabindex="-1" autofocus>'], (route, r.text[:3000])
    b.close()
    anon = httpx.AsyncClient(transport=httpx.ASGITransport(app=app[0]),  # type: ignore[arg-type]
                             base_url="http://console.test")
    loop = asyncio.new_event_loop()
    try:
        token = re.search(r'name="csrf_token" value="([^"]+)"', loop.run_until_complete(anon.get("/console/sign-in")).text)
        assert token is not None
        refused = loop.run_until_complete(anon.post("/console/sign-in", data={"csrf_token": token.group(1), "key": "tsk_x"}))
        assert refused.status_code == 401
        assert 'aria-describedby="error key-help" aria-invalid="true" autofocus>' in refused.text
    finally:
        loop.run_until_complete(anon.aclose())
        loop.close()


def test_a_cancelled_trainings_result_page_says_it_was_cancelled_and_offers_no_audit(
        app: tuple[object, str, str]) -> None:
    """Cancelling a training leads to its result page, which said "The credit comes back: the
    training failed on our side (no reason given)", then "The training failed: .", and offered
    "Download the audit file", a 404: the customer cancelled it, nothing was measured, and there
    is no audit. Now it says why it ended (the training's own reason, as ``GET /v1/trainings/{id}``
    gives it) and that there is no audit to verify."""
    b = Browser(app[0], app[1])
    made = b.form("/console/trainings", TRAINING, files={"dataset_file": ("reviews.csv", CSV.encode())})
    page_url = made.headers["location"]
    training = page_url.rsplit("/", 1)[1]
    cancelled = b.form(f"{page_url}/cancel", {})
    assert cancelled.status_code == 303
    shown = b.get(b.get(cancelled.headers["location"]).headers["location"])  # the training's page: its result
    assert shown.status_code == 200 and f"/console/models/{training}" in str(shown.url), shown.url
    said = _shown(shown)
    reason = b.get(f"/v1/trainings/{training}").json()["reason"]
    assert reason == "cancelled by the customer while awaiting_predictions"
    assert ("The credit comes back: the training ended before it was judged (cancelled by the customer while "
            "awaiting predictions).") in said, said[:3000]
    assert "failed on our side" not in said and "The training failed" not in said and "did not beat Jev" not in said
    assert "/audit" not in shown.text and "This training has no audit file" in said
    assert b.get(f"/v1/models/{training}/audit").status_code == 404  # what the link answered
    b.close()


def test_a_refused_training_form_says_which_file_to_choose_again(app: tuple[object, str, str]) -> None:
    """The form kept every field after a refusal but the dataset the person uploaded (a browser
    cannot put a file back in a file field, and the refused upload is not stored), and said
    nothing of it: the person corrected the answers, sent the form again, and was refused a
    second time, "expected a dataset … got neither". The refused page now names the file to
    choose again, by the file field."""
    import html

    b = Browser(app[0], app[1])
    refused = b.form("/console/trainings", {**TRAINING, "decision-0-answers": "yes, maybe"},
                     files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert refused.status_code == 422
    said = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", refused.text)))
    assert "Choose reviews.csv again: a refused form cannot keep the file you chose, and it was not stored." in said
    assert 'aria-describedby="dataset-again dataset-help"' in refused.text
    assert 'value="Is it positive?"' in refused.text  # the typed fields, as before
    no_file = b.form("/console/trainings", {**TRAINING, "decision-0-answers": "yes, maybe"})
    assert no_file.status_code == 422 and "dataset-again" not in no_file.text  # nothing chosen: nothing to choose again
    b.close()


def test_add_a_decision_puts_the_focus_in_the_new_decision(app: tuple[object, str, str]) -> None:
    """"Add a decision" is replaced by the decision's fields (HTMX): the focus, on the button,
    went to the page's body, and the next Tab jumped past the new fields to step 3. The new
    decision's Name is focused now (HTMX focuses what it swaps in with ``autofocus``); the form
    itself focuses nothing."""
    b = Browser(app[0], app[1])
    added = b.loop.run_until_complete(b.client.get("/console/trainings/new/decision?i=1", headers={"hx-request": "true"}))
    assert added.status_code == 200
    assert re.findall(r'<input id="([\w-]+)"[^>]* autofocus>', added.text) == ["decision-1-name"], added.text
    assert "autofocus" not in b.get("/console/trainings/new").text
    b.close()


def test_the_budget_field_shows_the_budget_as_the_form_reads_it_back(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    """Settings → Usage filled its budget field with Python's float: a $0.00005 budget showed as
    ``5e-05``, and pressing "Set the budget" with the value as shown was refused ("expected a
    USD amount … got '5e-05'"); $50 showed as ``50.0``. The field shows the exact decimal now,
    which the form (and ``PUT /v1/workspaces/{id}/budget``) reads back to the same budget."""
    _active_workspace(sqlite_url, usage_budget_micro_usd=1)
    b = Browser(app[0], app[1])
    for typed, shown in (("0.00005", "0.00005"), ("50", "50"), ("12.345678", "12.345678")):
        assert b.post("/console/settings/usage/budget", data={"csrf_token": b.csrf, "budget_usd": typed}).status_code == 303
        field = re.search(r'<input id="budget_usd"[^>]* value="([^"]*)"', b.get("/console/settings/usage").text)
        assert field is not None and field.group(1) == shown, (typed, field and field.group(1))
        again = b.post("/console/settings/usage/budget", data={"csrf_token": b.csrf, "budget_usd": field.group(1)})
        assert again.status_code == 303, (typed, _shown(again)[:2000])  # the value as shown, sent again
    b.close()


def test_a_delivered_models_files_date_is_written_as_every_console_date(
        app: tuple[object, str, str], tmp_path: Path, sqlite_url: str) -> None:
    """The result page said "Its files can be downloaded until 2027-01-06T07:38:16.296790+00:00",
    where every other date of the console (a training's deadline, the date files expired, a
    delivery) reads "2027-01-06 07:38 UTC"."""
    from typestrict_pipeline.credits import SettlementRequest, settle_training
    from typestrict_pipeline.refund.types import Verdict

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"w" * 12_345)
    (tmp_path / "model" / "vocab.txt").write_bytes(b"v")
    engine = open_store(sqlite_url)
    try:
        settle_training(engine, SettlementRequest(
            workspace_id="acme", training_id="tr_delivered", verdict=Verdict.BEATS, reason="test",
            keep_if_loses=False, model_dir=tmp_path / "model", audit_json=None),
            now=dt.datetime(2026, 12, 7, 7, 38, 16, 296790, tzinfo=dt.UTC))
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    shown = b.get("/console/models/tr_delivered")
    assert shown.status_code == 200, _shown(shown)[:2000]
    assert "Its files can be downloaded until 2027-01-06 07:38 UTC (kept 30 days)." in shown.text, _shown(shown)[:3000]
    # a size as every count of the console and the CLI writes it (it said "(12345 bytes)")
    assert 'download="weights.bin">weights.bin</a> <span class="help">(12,345 bytes)</span>' in shown.text
    assert 'download="vocab.txt">vocab.txt</a> <span class="help">(1 byte)</span>' in shown.text
    put = b.loop.run_until_complete(b.client.put("/v1/files/reviews.csv", content=CSV.encode(),
                                                 headers={"Authorization": f"Bearer {app[1]}"}))
    assert put.status_code in (200, 201), put.text
    assert f">reviews.csv ({len(CSV):,} bytes)</option>" in b.get("/console/trainings/new").text
    b.close()


def test_a_refused_schedule_form_shows_the_box_as_it_was_sent(app: tuple[object, str, str], sqlite_url: str) -> None:
    """Sent without ticking "Re-run on a schedule", the form came back saying "expected the box
    ... ticked, got it empty" beside the box shown ticked: the page contradicted itself, and what
    the person had sent was not what it showed. The box comes back as it was sent, with the
    other fields as typed."""
    study = _created_study(sqlite_url)
    b = Browser(app[0], app[1])
    for sent, ticked in (({}, False), ({"rerun": "on", "cadence": "sometimes"}, True)):
        r = b.post("/console/schedules",
                   data={"csrf_token": b.csrf, "study": str(study), "owner": "ana@example.com", **sent})
        assert r.status_code == 422, (sent, r.status_code)
        box = re.search(r'<input type="checkbox" id="rerun"[^>]*>', r.text)
        assert box is not None and (" checked" in box.group(0)) == ticked, (sent, box and box.group(0))
        assert 'value="ana@example.com"' in r.text
    b.close()


def _finished_study(url: str, **form: Any) -> int:
    """A finished study of workspace ``acme`` on the synthetic workflow (the studies core's own
    runner: seconds), created as ``form`` says (a USD budget estimated from a backtest of 30 steps)."""
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.repository import LastBacktest
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import create_study_from_config, study_backend

    engine = open_store(url)
    try:
        sid = create_study_from_config(engine, study_config(StudyForm(
            start="2012-01-01", end="2012-12-01", tune_steps=10, eval_steps=10, holdout_steps=10,
            grid=["skill=0.5,0.6"], max_candidates=2, max_total_steps=10_000, synthetic=True, folds=2,
            workspace="acme", **{"workflow": "wx", **form})), last_backtest=LastBacktest(30, 10))
        run_study_local(engine, sid, study_backend(engine, sid), max_workers=1)
    finally:
        engine.dispose()
    return sid


def test_a_finished_studys_schedule_form_says_it_can_be_scheduled(app: tuple[object, str, str], sqlite_url: str) -> None:
    """Under "Re-run on a schedule", a finished study with a USD budget said "Once the study has
    finished.": the page compared the study's state with a state studies do not have
    (``completed``), so no study was ever "finished" there."""
    import html

    sid = _finished_study(sqlite_url, budget_usd="1")
    b = Browser(app[0], app[1])
    shown = html.unescape(b.get(f"/console/studies/{sid}").text)
    assert "State: <b>Finished</b>" in shown, shown[:3000]
    assert "From this finished study, with its USD budget of $1.00 per re-run." in shown
    assert "Once the study has finished." not in shown
    b.close()


def test_a_schedule_refused_for_its_minimum_names_the_forms_field_not_the_clis_flag(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    """A study created in the console without "Min unseen steps for a re-run" (it is optional)
    and scheduled with "Min unseen steps" empty was refused saying "create the study with
    --min-unseen-steps N, or pass --min-unseen-steps N here once": the CLI's flags, on a form.
    The console names its fields; the API its field; nothing is scheduled."""
    import html

    sid = _finished_study(sqlite_url, budget_usd="1")
    b = Browser(app[0], app[1])
    r = b.post("/console/schedules",
               data={"csrf_token": b.csrf, "rerun": "on", "study": str(sid), "cadence": "1d",
                     "owner": "ana@example.com"})
    assert r.status_code == 422, r.status_code
    said = html.unescape(r.text)
    assert ('Create the study with "Min unseen steps for a re-run", or fill "Min unseen steps for a re-run" on this '
            'form once '
            "(it is then stored on the study).") in said, re.findall(r'id="schedule-error"[^>]*>([^<]*)', said)
    assert "--min-unseen-steps" not in said
    api = _api(b, app[1], f"/v1/studies/{sid}/schedule", {"cadence": "1d", "owner": "ana@example.com"})
    assert "send min_unseen_steps here once" in api and "--" not in api, api
    listed = b.loop.run_until_complete(b.client.get("/v1/schedules", headers={"Authorization": f"Bearer {app[1]}"}))
    assert listed.json() == {"schedules": []}
    done = b.post("/console/schedules", data={"csrf_token": b.csrf, "rerun": "on", "study": str(sid), "cadence": "1d",
                                               "owner": "ana@example.com", "min_unseen_steps": "5"})
    assert done.status_code == 303, _shown(done)[:2000]
    b.close()


def test_the_nav_marks_settings_usage_as_the_current_page_after_saving_the_budget(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    """After "Set the budget" the page is Settings → Usage (at ``/console/settings/usage/saved``),
    but the nav marked no link as the current page (``aria-current``)."""
    _active_workspace(sqlite_url, usage_budget_micro_usd=1)
    b = Browser(app[0], app[1])
    saved = b.post("/console/settings/usage/budget", data={"csrf_token": b.csrf, "budget_usd": "2"})
    page = b.get(saved.headers["location"]).text
    assert "Saved." in page
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', page) == ["/console/settings/usage"]
    b.close()


@pytest.mark.parametrize(("url", "said"), [
    ("/console/studies/999999", "expected a study with id '999999' in this workspace, got none. Check the address: "
                                "the Backtests page lists this workspace's studies"),
    ("/console/backtests/bt_nope", "expected a backtest with id 'bt_nope' in this workspace, got none. Check the "
                                   "address: the Backtests page lists this workspace's backtests"),
    ("/console/models/tr_0000000000000000", "expected a model with id 'tr_0000000000000000' in this workspace, got "
                                            "none. Check the address: the Trainings page lists this workspace's "
                                            "trainings, and a judged one links its result"),
])
def test_a_record_not_in_the_workspace_is_found_on_the_consoles_pages(
        app: tuple[object, str, str], url: str, said: str) -> None:
    """A study, backtest or model address that is not this workspace's (a mistyped id, another
    workspace's link) said "Check the id (GET /v1/studies lists them) and that you use this
    workspace's key": an API route and an API key, at a person signed in to a page. The console
    says where its pages list them; the API's 404 keeps its own words (the same record missing)."""
    b = Browser(app[0], app[1])
    r = b.get(url)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html"), (url, r.text[:300])
    shown = _shown(r)
    assert said in shown and "/v1/" not in shown and "key" not in shown, shown[:3000]
    api = b.get(url.replace("/console/", "/v1/"))
    assert api.status_code == 404 and said.split(". Check")[0] in api.json()["error"]["message"], api.text
    assert "lists them" in api.json()["error"]["message"] or "list them" in api.json()["error"]["message"]
    b.close()


def test_the_box_fields_are_the_checkboxes_of_the_consoles_forms() -> None:
    """``BOX_FIELDS`` (the fields a repeated value is refused for in a box's own words, by
    ``form_box``) is written by hand: it must name exactly the checkboxes the templates render,
    or a new box sent twice would get the generic refusal and a stale name would skip the check."""
    from importlib.resources import files

    from typestrict_pipeline.console.web import BOX_FIELDS

    templates = files("typestrict_pipeline.console") / "templates"
    boxes = set()
    for page in templates.iterdir():
        if page.name.endswith(".html"):
            for tag in re.findall(r"<input[^>]*>", page.read_text(encoding="utf-8")):
                if 'type="checkbox"' in tag:
                    name = re.search(r'name="([^"]+)"', tag)
                    assert name is not None, (page.name, tag)
                    boxes.add(name.group(1))
    assert boxes == set(BOX_FIELDS)
