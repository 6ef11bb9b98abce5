"""One spelling and one number per concept on the CLI and the console (the real app in process,
a real store; the CLI through ``main``).

* A backtest's cost: the console's run card and Backtests tab wrote ``$0.0123`` and
  ``typestrict backtest list`` / ``show`` wrote ``$0.012345`` for the same backtest (two formatters:
  ``study.limits.format_usd`` and ``backtest.metering.format_usd``). Now one rule (the pages show
  no backtest's decimals; the one Settings → Usage and the leaderboard's Cost already wrote).
* The lineage panel's table: the console wrote a re-run's state ``running`` under "Window",
  "Holdout score", and ``typestrict schedule lineage`` wrote ``RUNNING`` under "scored on",
  "holdout" (and had two columns more). Now one set of columns (the page's words: "the window it
  was scored on, its winner, its holdout score and whether the winner changed", with the baseline)
  and one function for the state (the leaderboard's ``Running``); the API keeps its codes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import io
import re
from pathlib import Path

import pytest

from tests.test_console_pages import Browser, _tiny_backtest, app, running_app  # noqa: F401  (the fixture)
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store


def _stored_backtest(url: str, cost_micro_usd: int) -> str:
    """A finished backtest of workspace ``acme`` that cost ``cost_micro_usd``: its id."""
    from typestrict_pipeline.backtest.store import save_backtest

    result = _tiny_backtest("priced")
    result = dataclasses.replace(result, card=dataclasses.replace(result.card, cost_micro_usd=cost_micro_usd))
    engine = open_store(url)
    try:
        return save_backtest(engine, result, workspace="acme")
    finally:
        engine.dispose()


def test_a_backtests_cost_reads_the_same_on_the_console_and_the_cli(
        app: tuple[object, str, str], sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    bid = _stored_backtest(sqlite_url, 12_345)
    b = Browser(app[0], app[1])
    card = b.get(f"/console/backtests/{bid}").text
    listed = b.get("/console/backtests").text
    b.close()
    shown = re.search(r'id="backtest-cost">([^<]*)<', card)
    assert shown is not None and shown.group(1) == "$0.0123"
    assert f'data-backtest="{bid}"' in listed and "<td>$0.0123</td>" in listed
    assert "$0.012345" not in card + listed  # the card's text too (its "cost" line)
    assert main(["backtest", "list", "--workspace", "acme", "--store-url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "$0.0123" in out and "$0.012345" not in out, out
    assert main(["backtest", "show", bid, "--store-url", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "cost            $0.0123 total" in out and "$0.012345" not in out, out


def test_the_cost_rule_is_one_function() -> None:
    from typestrict_pipeline.backtest.metering import format_usd as backtest_usd
    from typestrict_pipeline.study.limits import format_usd

    for micro in (0, 5, 99, 100, 12_345, 999_999, 1_000_000, 2_500_000, 1_234_567_890, -5, -12_345):
        assert backtest_usd(micro) == format_usd(micro)




def _table_rows(page: str) -> list[list[str]]:
    """The lineage table's header and rows, each cell's text (tags dropped)."""
    table = re.search(r'<table id="lineage-table">(.*?)</table>', page, flags=re.S)
    assert table is not None, page[:3000]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), flags=re.S)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
             for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, flags=re.S)] for r in rows]


def test_the_lineage_table_has_one_set_of_columns_and_state_words_on_the_console_and_the_cli(
        tmp_path: Path, sqlite_url: str) -> None:
    from sqlalchemy import update

    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.reruns import scenario
    from typestrict_pipeline.reruns.tables import LineageRow, LineageState
    from typestrict_pipeline.store import session_scope

    engine = open_store(sqlite_url)
    try:
        child = scenario.within_noise_lineage(engine)
        with session_scope(engine) as session:  # the re-run as it is while it runs
            session.execute(update(LineageRow).where(LineageRow.study_id == child)
                            .values(state=LineageState.RUNNING))
        key = create_api_key(engine, "demo").key
    finally:
        engine.dispose()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["schedule", "lineage", child, "--store-url", sqlite_url]) == 0
    lines = out.getvalue().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#"))
    cli_header = re.split(r"\s{2,}", lines[header].strip())
    cli_rows = [re.split(r"\s{2,}", line.strip()) for line in lines[header + 1:header + 3]]
    with running_app(sqlite_url, tmp_path / "home") as application:
        b = Browser(application, key)
        page = b.get(f"/console/studies/{child}")
        api = b.get(f"/v1/studies/{child}/lineage")
        b.close()
    assert page.status_code == 200, page.text[:2000]
    console = _table_rows(page.text)
    assert console[0] == cli_header == ["#", "Study", "State", "Window", "Winner", "Holdout score", "Baseline",
                                        "Holdout − baseline", "Winner changed"]
    assert [[r[0], r[1].removeprefix("#"), *r[2:]] for r in console[1:]] == cli_rows  # a link: #7
    assert [r[2] for r in console[1:]] == ["Finished", "Running"]
    assert [e["state"] for e in api.json()["entries"]] == ["FINISHED", "RUNNING"]  # the API's codes


def test_the_api_answers_a_studys_state_as_a_code_and_docs_api_maps_each_to_its_words(
        app: tuple[object, str, str], sqlite_url: str) -> None:  # noqa: F811
    """The pages name no state of the API; the API answers codes (``BUDGET_REACHED``), the console
    and the CLI write words ("Budget reached", the page's). docs/api.md listed no code; it now
    maps each code to the words every other door writes (one function, ``state_text``)."""
    from sqlalchemy import update

    from tests.test_console_pages import _created_study
    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study.tables import StudyRow, StudyState, state_text

    doc = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    section = doc.split("### A study's state: a code here, words for people", 1)[1].split("\n### ", 1)[0]
    table = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]+) \|$", section, flags=re.M))
    assert table == {s.value: state_text(s.value) for s in StudyState}
    sid = _created_study(sqlite_url)
    engine = open_store(sqlite_url)
    try:
        with session_scope(engine) as session:
            session.execute(update(StudyRow).where(StudyRow.id == sid)
                            .values(state=StudyState.BUDGET_REACHED.value, stop_limit="max_candidates"))
    finally:
        engine.dispose()
    b = Browser(app[0], app[1])
    api = b.get(f"/v1/studies/{sid}").json()
    page = b.get(f"/console/studies/{sid}").text
    b.close()
    assert api["state"] == "BUDGET_REACHED" and "state_text" not in api  # the JSON contract, unchanged
    assert "Budget reached" in page and "BUDGET_REACHED" not in page
