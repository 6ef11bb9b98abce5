"""The console's forms in a person's hands, over HTTP (the real application, a real store).

* A creating form sent twice (a double click, a second click on a slow page, Enter twice) does
  its work once (``console/once.py``). Measured in Chromium before the fix: three clicks on
  **Start the training (1 credit)** 300 ms apart, on a connection with 800 ms of latency, started
  three trainings and took three credits.
* In Chromium (Debian's, headless, on a real server): two clicks on a slow connection start one
  training and take one credit.
* "Add a decision" works without script.
* A refusal counts its steps in words ("1 step", not "1 steps").
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.test_console_pages import (
    CSV,
    JEV,
    TRAINING,
    Browser,
    _balance,
    _finished_study,
    running_app,
)
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.console.once import FORM_ID
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store


@pytest.fixture
def app(tmp_path: Path, sqlite_url: str) -> Iterator[tuple[object, str, str]]:
    """The app on a fresh store: keys of workspaces ``acme`` (2 credits) and ``other`` (1)."""
    engine = open_store(sqlite_url)
    acme = create_api_key(engine, "acme").key
    other = create_api_key(engine, "other").key
    CreditLedger(engine).grant("acme", 2, reference="tests")
    CreditLedger(engine).grant("other", 1, reference="tests-other")
    engine.dispose()
    with running_app(sqlite_url, tmp_path / "home") as application:
        yield application, acme, other


def _form_id(page: str, action: str) -> str:
    """The one-time id of the form of ``page`` that posts to ``action``."""
    form = re.search(rf'<form method="post" action="{re.escape(action)}"(?s:.*?)</form>', page)
    assert form is not None, page[:2000]
    found = re.search(rf'name="{FORM_ID}" value="([^"]+)"', form.group(0))
    assert found is not None, form.group(0)[:2000]
    return found.group(1)


def _trainings(b: Browser) -> list[str]:
    return re.findall(r'data-training="([^"]+)"', b.get("/console/trainings").text)


def _start(b: Browser, form_id: str, **changes: str) -> httpx.Response:
    return b.form("/console/trainings", {**TRAINING, **changes, FORM_ID: form_id},
                  files={"dataset_file": ("reviews.csv", CSV.encode())})


def test_a_training_form_sent_twice_starts_one_training_and_takes_one_credit(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    b = Browser(app[0], app[1])
    form_id = _form_id(b.get("/console/trainings/new").text, "/console/trainings")
    first, second = _start(b, form_id), _start(b, form_id)
    assert first.status_code == 303, first.text[:3000]
    assert second.status_code == 303 and second.headers["location"] == first.headers["location"], second.text[:3000]
    assert _trainings(b) == [first.headers["location"].rsplit("/", 1)[1]]
    assert _balance(sqlite_url, "acme") == 1
    again = _form_id(b.get("/console/trainings/new").text, "/console/trainings")
    assert again != form_id  # a new page is a new form: sent, it starts another training
    assert _start(b, again).status_code == 303 and len(_trainings(b)) == 2 and _balance(sqlite_url, "acme") == 0
    b.close()


def test_a_training_form_sent_twice_at_once_starts_one_training(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    """Both sendings arrive before either is done: the second waits for the first, and leads where
    it led."""
    b = Browser(app[0], app[1])
    form_id = _form_id(b.get("/console/trainings/new").text, "/console/trainings")
    data = {"csrf_token": b.csrf, **TRAINING, FORM_ID: form_id}

    async def both() -> list[httpx.Response]:
        return list(await asyncio.gather(*(
            b.client.post("/console/trainings", data=data, files={"dataset_file": ("reviews.csv", CSV.encode())})
            for _ in range(2))))

    answers = b.loop.run_until_complete(both())
    assert [a.status_code for a in answers] == [303, 303], [a.text[:2000] for a in answers]
    assert answers[0].headers["location"] == answers[1].headers["location"]
    assert len(_trainings(b)) == 1 and _balance(sqlite_url, "acme") == 1
    b.close()


def test_a_refused_sending_leaves_its_form_free_to_be_sent_corrected(
        app: tuple[object, str, str], sqlite_url: str) -> None:
    b = Browser(app[0], app[1])
    form_id = _form_id(b.get("/console/trainings/new").text, "/console/trainings")
    refused = _start(b, form_id, **{"decision-0-answers": "yes, maybe"})
    assert refused.status_code == 422 and _balance(sqlite_url, "acme") == 2
    assert _start(b, form_id).status_code == 303 and len(_trainings(b)) == 1  # a Refresh of it, corrected
    b.close()


def test_predictions_sent_twice_are_handed_over_once_and_the_second_goes_to_the_training(
        app: tuple[object, str, str]) -> None:
    """The second sending said "Conflict" about the first one's predictions, judged already."""
    b = Browser(app[0], app[1])
    made = _start(b, _form_id(b.get("/console/trainings/new").text, "/console/trainings"))
    page_url = made.headers["location"]
    training = page_url.rsplit("/", 1)[1]
    split = b.get(f"/v1/trainings/{training}/split").json()
    form_id = _form_id(b.get(page_url).text, f"{page_url}/predictions")
    rows = "".join(f'{{"id": "{row.split(",", 1)[0]}", "decision": "sentiment", '
                   '"probabilities": {"yes": 0.6, "no": 0.4}}\n' for row in CSV.splitlines()[1:])
    sent = [b.form(f"{page_url}/predictions", {"trained_on": split["training_ids_sha256"], FORM_ID: form_id},
                   files={"predictions": ("predictions.jsonl", rows.encode())}) for _ in range(2)]
    assert [s.status_code for s in sent] == [303, 303], sent[1].text[:3000]
    status = b.get(f"/v1/trainings/{training}").json()
    assert status["state"] == "judging" and status["submissions"] == 1
    b.close()


def test_another_workspace_cannot_use_a_forms_id(app: tuple[object, str, str], sqlite_url: str) -> None:
    """The id is the workspace's: the same id sent by another workspace is its own sending."""
    a, o = Browser(app[0], app[1]), Browser(app[0], app[2])
    form_id = _form_id(a.get("/console/trainings/new").text, "/console/trainings")
    mine, theirs = _start(a, form_id), _start(o, form_id)
    assert mine.status_code == theirs.status_code == 303
    assert mine.headers["location"] != theirs.headers["location"]
    assert _balance(sqlite_url, "other") == 0
    a.close()
    o.close()


def test_add_a_decision_works_without_script(app: tuple[object, str, str], sqlite_url: str) -> None:
    """Without script, "Add a decision" (an HTMX button) did nothing: a training of several decisions
    could not be started. A page without script has its own button (in a ``<noscript>``, after
    **Start the training**, which stays the form's default for Enter): the form comes back with what
    was typed and one more decision, its Name focused; nothing is made or charged."""
    b = Browser(app[0], app[1])
    page = b.get("/console/trainings/new").text
    fallback = re.search(r"<noscript><button type=\"submit\"[^>]*name=\"add_decision\"[^>]*>Add a decision</button>", page)
    assert fallback is not None and "formnovalidate" in fallback.group(0), page[-2500:]
    assert page.index("Start the training (1 credit)") < fallback.start()
    assert re.search(r'<button type="button" class="secondary js-only" hx-get="/console/trainings/new/decision', page)
    back = b.form("/console/trainings", {**TRAINING, "add_decision": "1"},
                  files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert back.status_code == 200, back.text[:3000]
    assert 'value="Is it positive?"' in back.text and 'value="yes, no"' in back.text
    assert re.search(r'<input id="decision-1-name" name="decision-1-name" value="" required maxlength="200"\s+'
                     r'aria-describedby="decision-1-name-help" autofocus>', back.text), back.text[:4000]
    assert "Choose <b class=\"wrap\">reviews.csv</b> again: a page sent back to add a decision" in back.text
    assert _trainings(b) == [] and _balance(sqlite_url, "acme") == 2
    two = {**TRAINING, "decision-1-name": "topic", "decision-1-question": "Is it about plot?",
           "decision-1-answer_column": "label", "decision-1-answers": "yes, no", "decision-1-options_column": ""}
    assert _start(b, _form_id(back.text, "/console/trainings"), **two).status_code == 303
    assert len(_trainings(b)) == 1 and _balance(sqlite_url, "acme") == 1
    b.close()


def test_promote_winners_refusal_counts_its_steps_in_words(app: tuple[object, str, str], sqlite_url: str) -> None:
    """**Promote winner** refused by the gate said "scores stay correlated for 1 steps"."""
    import html

    sid = _finished_study(sqlite_url, budget_usd="1")
    b = Browser(app[0], app[1])
    refused = b.form(f"/console/studies/{sid}/promote", {})
    assert refused.status_code == 409, refused.text[:2000]
    said = html.unescape(refused.text)
    assert "scores stay correlated for 1 step)" in said, said[:4000]
    assert not re.search(r"\b1 steps\b", said)
    b.close()


def test_the_trainings_list_says_a_kept_trainings_credit_does_not_come_back_if_it_loses(
        app: tuple[object, str, str]) -> None:
    """The box "Keep the model even if it does not beat Jev" gives up the guarantee (the refund
    page: "there is no refund: the credit stays spent"); the list said of such a training "spent
    (comes back if the model does not beat Jev)", where its own page says "no refund if it loses"."""
    import html

    b = Browser(app[0], app[1])
    kept = _start(b, _form_id(b.get("/console/trainings/new").text, "/console/trainings"), keep_if_loses="on")
    plain = _start(b, _form_id(b.get("/console/trainings/new").text, "/console/trainings"))
    listed = html.unescape(b.get("/console/trainings").text)
    rows = {tid: row for tid, row in re.findall(r'data-training="([^"]+)"((?s:.*?))</tr>', listed)}
    kept_row, plain_row = rows[kept.headers["location"].rsplit("/", 1)[1]], rows[plain.headers["location"].rsplit("/", 1)[1]]
    assert "spent (no refund if the model does not beat Jev: it is kept; comes back if the training fails)" in kept_row
    assert "comes back if the model does not beat Jev" not in kept_row
    assert "spent (comes back if the model does not beat Jev)" in plain_row
    b.close()


def test_in_chromium_two_clicks_on_a_slow_page_start_one_training(
        tmp_path: Path, sqlite_url: str) -> None:
    import time

    from playwright.sync_api import sync_playwright

    from tests.test_api_support import ApiServer

    engine = open_store(sqlite_url)
    try:
        key = create_api_key(engine, "acme").key
        CreditLedger(engine).grant("acme", 3, reference="tests")
    finally:
        engine.dispose()
    (tmp_path / "reviews.csv").write_text(CSV, encoding="utf-8")
    with ApiServer(sqlite_url, tmp_path / "home", rate_limit=None, jev_source=JEV) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--headless", "--no-sandbox", "--disable-gpu",
                                          "--disable-background-networking"])
        try:
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{server.url}/console/sign-in?next=/console/trainings/new")
            page.fill("#key", key)
            page.click("button[type=submit]")
            page.wait_for_url("**/console/trainings/new")
            page.get_by_label("Upload a dataset").set_input_files(str(tmp_path / "reviews.csv"))
            for label, value in (("Group column (optional)", "grp"), ("Name", "sentiment"),
                                 ("Question", "Is it positive?"), ("Answer column", "label"), ("Answers", "yes, no")):
                page.get_by_label(label, exact=True).first.fill(value)
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 1500,
                                                          "downloadThroughput": -1, "uploadThroughput": -1})
            start = page.get_by_role("button", name="Start the training (1 credit)")
            start.scroll_into_view_if_needed()
            box = start.bounding_box()
            assert box is not None
            x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
            page.mouse.click(x, y)
            time.sleep(0.3)  # the answer is 1.5 s away: the page, its button, are still there
            page.mouse.click(x, y)
            page.wait_for_url("**/console/trainings/tr_*", timeout=60_000)
            page.wait_for_load_state()
            assert "The split, before training" in page.locator("main").inner_text()
            assert _balance(sqlite_url, "acme") == 2, "two clicks took two credits"
        finally:
            browser.close()


def test_a_forms_id_is_claimed_once_on_either_store(store_url: str) -> None:
    """A form's id is claimed by the API's one rule (``api_idempotency``) on SQLite and
    PostgreSQL, as ``console.once`` claims it: the first claim works, another is told it is being
    worked on (the form waits) and then gets where it led; a refusal frees the id; ids are per
    workspace."""
    from typestrict_pipeline.api.errors import ApiError
    from typestrict_pipeline.api.idempotency import (
        Claim,
        Stored,
        claim,
        complete,
        fingerprint,
        release,
    )

    engine = open_store(store_url)
    try:
        fid, path = "f" * 32, "/console/trainings/new"
        digest = fingerprint("POST", path, None)
        mine = claim(engine, "acme", fid, "POST", path, digest)
        assert isinstance(mine, Claim)
        with pytest.raises(ApiError) as working:
            claim(engine, "acme", fid, "POST", path, digest)
        assert working.value.code == "idempotency_key_in_use"
        other = claim(engine, "other", fid, "POST", path, digest)
        assert isinstance(other, Claim)
        complete(engine, mine, 303, b"", {"location": "/console/trainings/tr_1"})
        assert claim(engine, "acme", fid, "POST", path, digest) == Stored(303, b"", {"location": "/console/trainings/tr_1"})
        release(engine, other)  # refused: free again
        assert isinstance(claim(engine, "other", fid, "POST", path, digest), Claim)
    finally:
        engine.dispose()


def test_a_one_field_forms_refusal_is_tied_to_its_field(app: tuple[object, str, str], sqlite_url: str) -> None:
    """As the sign-in form's key: the refused field is marked invalid and described by the refusal
    (the budget field was marked invalid but described by its help only; the predictions file by
    nothing), so a screen reader on the field reads why."""
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.workspace import set_workspace

    engine = open_store(sqlite_url)
    try:
        set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=1_000_000)
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    budget = b.form("/console/settings/usage/budget", {"budget_usd": "abc"})
    assert budget.status_code == 422, budget.text[:2000]
    field = re.search(r'<input id="budget_usd"[^>]*>', budget.text)
    assert field is not None and 'aria-describedby="budget-error budget-help"' in field.group(0), field
    assert 'aria-invalid="true"' in field.group(0) and 'id="budget-error"' in budget.text
    made = _start(b, _form_id(b.get("/console/trainings/new").text, "/console/trainings"))
    page_url = made.headers["location"]
    refused = b.form(f"{page_url}/predictions", {}, files={"predictions": ("p.jsonl", b"not json\n")})
    assert refused.status_code == 422, refused.text[:2000]
    field = re.search(r'<input id="predictions"[^>]*>', refused.text)
    assert field is not None and 'aria-describedby="error"' in field.group(0) and 'aria-invalid="true"' in field.group(0)
    assert 'id="error"' in refused.text
    assert 'aria-invalid' not in (re.search(r'<input id="predictions"[^>]*>', b.get(page_url).text) or [""])[0]
    b.close()


def _marked(page: str, error_id: str) -> dict[str, str]:
    """Each input, select and textarea of ``page`` marked ``aria-invalid="true"``: its id and its
    ``aria-describedby`` (the HTML parsed, not searched)."""
    from html.parser import HTMLParser

    found: dict[str, str] = {}

    class Fields(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if tag in ("input", "select", "textarea") and a.get("aria-invalid") == "true":
                found[a.get("id") or "?"] = a.get("aria-describedby") or ""

    Fields().feed(page)
    assert f'id="{error_id}"' in page, page[:3000]
    return found


def test_a_many_field_forms_refusal_marks_the_field_it_names(app: tuple[object, str, str]) -> None:
    """New training, Run the backtest, Create the study and Save the schedule showed their
    refusal at the top, focused, but left the field it names unmarked: a screen reader on that
    field heard nothing of it. Now the field the refusal names (``start: expected …``,
    ``field 'workflow': expected …``, ``step 2 (Decisions), Decision 1, Name: expected …``, or the
    list it quotes) is marked invalid and described by the refusal first, then its help; the
    refusal stays at the top; nothing else is marked."""
    b = Browser(app[0], app[1])
    cases: list[tuple[str, dict[str, str], str, str, str]] = [
        ("/console/backtests", {"workflow": "seattle_rain", "end": "2012-02-01"}, "backtest-error", "b-start", ""),
        ("/console/backtests", {"workflow": "wx", "start": "2012-01-01", "end": "2012-02-01"}, "backtest-error",
         "b-workflow", ""),
        ("/console/backtests", {"workflow": "seattle_rain", "start": "2012-01-01", "end": "2012-02-01",
                                "step": "-3"}, "backtest-error", "b-step", "b-step-help"),
        ("/console/studies", {"workflow": "seattle_rain", "start": "2012-01-01", "end": "2012-12-01", "tune_steps": "0"}, "study-error",
         "s-tune", ""),
        ("/console/studies", {"workflow": "seattle_rain", "start": "2012-01-01", "end": "2012-12-01",
                              "tune_steps": "10", "eval_steps": "10",
                              "holdout_steps": "10", "grid": "lookback_days=1,2\nthreshold", "max_candidates": "2",
                              "max_total_steps": "1000"}, "study-error",
         "s-grid", "s-grid-help"),
        ("/console/schedules", {"rerun": "on", "cadence": "1d", "owner": "ana@example.com"}, "schedule-error",
         "schedule-study", ""),
        ("/console/schedules", {"rerun": "on", "study": "1", "cadence": "1d", "owner": ""}, "schedule-error",
         "owner", "owner-help"),
        ("/console/schedules", {"study": "1", "cadence": "1d"}, "schedule-error", "rerun", "rerun-help"),
    ]
    for url, data, error_id, field, help_id in cases:
        r = b.form(url, data)
        assert r.status_code == 422, (url, data, r.status_code)
        said = re.search(rf'id="{error_id}"[^>]*>([^<]*)', r.text)
        assert said is not None and "expected" in said.group(1)
        assert _marked(r.text, error_id) == {field: f"{error_id} {help_id}".strip()}, (url, data, said.group(1))
    new = _form_id(b.get("/console/trainings/new").text, "/console/trainings")
    refused = _start(b, new, **{"decision-0-name": "bad name!"})
    assert refused.status_code == 422, refused.text[:2000]
    assert _marked(refused.text, "error") == {"decision-0-name": "error decision-0-name-help"}
    none = b.form("/console/trainings", {**TRAINING, FORM_ID: new})  # no dataset: step 1 (Data)
    assert _marked(none.text, "error") == {"dataset_file": "error dataset-help"}, none.text[:3000]
    assert _marked(b.get("/console/backtests").text, "run-title") == {}  # nothing marked before a refusal
    b.close()
