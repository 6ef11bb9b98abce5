"""A console form's one-file field sent two files: **New training**'s dataset file and **Upload
and judge**'s predictions file. The first was used and the others dropped unsaid (a training
started from ``a.csv`` with ``b.csv`` ignored), where a text field or a box sent twice is refused
as ambiguous. Now refused on the form, naming the step or the field and the files, with nothing
stored or charged; the model's files (a field of several files) still take several. The real
application over HTTP, as ``test_console_pages.py`` drives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_console_pages import CSV, TRAINING, Browser, _balance, running_app
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store


@pytest.fixture
def browser(tmp_path: Path, sqlite_url: str) -> Iterator[Browser]:
    engine = open_store(sqlite_url)
    key = create_api_key(engine, "acme").key
    CreditLedger(engine).grant("acme", 2, reference="tests")
    engine.dispose()
    with running_app(sqlite_url, tmp_path / "home") as application:
        b = Browser(application, key)
        yield b
        b.close()


def _alert(text: str) -> str:
    start = text.index('role="alert"')
    return text[text.index(">", start) + 1:text.index("</", start)]


def test_two_dataset_files_are_refused_and_nothing_is_stored_or_charged(browser: Browser, sqlite_url: str) -> None:
    r = browser.post("/console/trainings", data={"csrf_token": browser.csrf, **TRAINING},
                     files=[("dataset_file", ("a.csv", CSV.encode())), ("dataset_file", ("b.csv", b"junk"))])
    assert r.status_code == 422, (r.status_code, r.headers.get("location"))
    assert _alert(r.text) == ("step 1 (Data): expected one dataset file, got 2 files (&#39;a.csv&#39;, "
                              "&#39;b.csv&#39;). Choose one file in step 1.")
    assert _balance(sqlite_url, "acme") == 2
    assert browser.get("/v1/files").json() == [] and browser.get("/v1/trainings").json() == []


def test_two_predictions_files_are_refused_and_nothing_is_handed_over(browser: Browser) -> None:
    made = browser.post("/console/trainings", data={"csrf_token": browser.csrf, **TRAINING},
                        files=[("dataset_file", ("reviews.csv", CSV.encode()))])
    assert made.status_code == 303
    page = made.headers["location"]
    training = page.rsplit("/", 1)[1]
    sha = browser.get(f"/v1/trainings/{training}/split").json()["training_ids_sha256"]
    rows = b'{"id": "r0", "decision": "sentiment", "probabilities": {"yes": 0.5, "no": 0.5}}\n'
    r = browser.post(f"{page}/predictions", data={"csrf_token": browser.csrf, "trained_on": sha},
                     files=[("predictions", ("p.jsonl", rows)), ("predictions", ("q.jsonl", rows)),
                            ("model_files", ("w.bin", b"w"))])
    assert r.status_code == 422
    assert _alert(r.text) == (
        "Upload the predictions, &#34;Predictions file (JSON Lines)&#34;: expected one predictions file, got 2 "
        "files (&#39;p.jsonl&#39;, &#39;q.jsonl&#39;). Choose the one file your model wrote.")
    assert browser.get(f"/v1/trainings/{training}").json()["state"] == "awaiting_predictions"
    several = browser.post(f"{page}/predictions", data={"csrf_token": browser.csrf, "trained_on": sha},
                           files=[("predictions", ("p.jsonl", rows)), ("model_files", ("w.bin", b"w")),
                                  ("model_files", ("v.bin", b"v"))])
    assert several.status_code == 422 and "expected one predictions file" not in several.text  # read: its rows
