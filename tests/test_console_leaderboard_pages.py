"""A study of many candidates on the console's study page and through the API (issue 24): the
table lists the top 100, the winner on every page and one row summing up the rest; every
candidate is reachable 100 a page; the API's leaderboard pages with ``limit`` and ``offset``
and refuses bad ones with a 422 in the product's shape. A real store, the real app in process,
a finished study of the synthetic workflow built by the studies core's own runner."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bench_console_leaderboard import build_study
from typestrict_pipeline.console.board_pages import TOP_K, board_page, chart_ranks
from typestrict_pipeline.study.leaderboard import LeaderboardRow

_PAGES = Path(__file__).with_name("test_console_pages.py")
_spec = importlib.util.spec_from_file_location("console_pages_support", _PAGES)
assert _spec is not None and _spec.loader is not None
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)

MANY = 250  # more than two pages of TOP_K
FEW = 4


def _study(url: str, n: int) -> int:
    return build_study(url, n, workspace="acme")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The app on a store with a finished study of 250 candidates and one of 4 (workspace acme)."""
    root = tmp_path_factory.mktemp("board")
    url = f"sqlite:///{root / 'store.db'}"
    key = pages.workspace_key(url)
    many, few = _study(url, MANY), _study(url, FEW)
    with pages.running_app(url, root / "home") as app:
        browser = pages.Browser(app, key)
        try:
            board = browser.get(f"/v1/studies/{many}/leaderboard").json()
            yield {"browser": browser, "many": many, "few": few, "board": board}
        finally:
            browser.close()


def _table(page: str) -> list[tuple[str, int, bool]]:
    """The table's candidate rows as the page shows them: (rank, candidate number, winner?)."""
    rows = re.findall(r'<tr( class="winner")? data-candidate="(\d+)"><td>([^<]*)</td>', page)
    return [(rank, int(index), bool(winner)) for winner, index, rank in rows]


def _rest(page: str) -> str | None:
    found = re.search(r'<tr class="rest" id="board-rest"><td colspan="7">([^<]*)</td></tr>', page)
    return None if found is None else html.unescape(found.group(1))


def _summary(rows: list[dict[str, Any]]) -> str:
    """The summary row the page must show for ``rows`` (the API's), written out here."""
    scores = [r["adjusted"] for r in rows if r["adjusted"] is not None]
    text = (f"{len(rows):,} more candidates on other pages: Adjusted from {min(scores):.4f} to "
            f"{max(scores):.4f} (median {statistics.median(scores):.4f})")
    missing = len(rows) - len(scores)
    return text + (f"; {missing:,} not ranked (no Adjusted score)." if missing else ".")


def test_the_study_page_lists_the_top_100_the_winner_and_sums_up_the_rest(world: dict[str, Any]) -> None:
    board = world["board"]
    every = board["rows"]
    assert len(every) == MANY and board["winner"]["rank"] <= TOP_K  # the synthetic study's winner ranks high
    got = world["browser"].get(f"/console/studies/{world['many']}")
    assert got.status_code == 200
    table = _table(got.text)
    assert [rank for rank, _, _ in table] == [str(r["rank"]) for r in every[:TOP_K]] == [str(i) for i in range(1, 101)]
    assert [index for _, index, _ in table] == [r["index"] for r in every[:TOP_K]]
    assert [index for _, index, winner in table if winner] == [board["winner"]["index"]]
    assert _rest(got.text) == _summary(every[TOP_K:])
    assert _rest(got.text) is not None and _rest(got.text).startswith("150 more candidates on other pages: ")  # type: ignore[union-attr]
    assert "Candidates 1 to 100 of 250, ranked by Adjusted" in got.text
    assert "Page 1 of 3 of the leaderboard (100 candidates a page)" in got.text
    links = re.findall(r'<a href="(/console/studies/\d+\?page=\d+)#board-caption">([^<]*)</a>', got.text)
    assert links == [(f"/console/studies/{world['many']}?page=2", "Next 100: candidates 101 to 200"),
                     (f"/console/studies/{world['many']}?page=3", "Last page: candidates 201 to 250")]
    spec = json.loads(re.search(r'<script type="application/json" id="leaderboard-spec">(.*?)</script>',
                                got.text, flags=re.S).group(1))  # type: ignore[union-attr]
    assert spec["data"]["url"] == f"/v1/studies/{world['many']}/leaderboard?limit=100"
    assert spec["layer"][1]["encoding"]["x"]["scale"]["domain"] == [0.5, 100.5]
    assert ("aria-label=\"Leaderboard chart: the top 100 of 250 ranked candidates by rank (the other 150 are "
            "summarised under the table)") in got.text
    drawn = world["browser"].get(spec["data"]["url"]).json()["rows"]  # what the chart reads
    assert [r["index"] for r in drawn] == [r["index"] for r in every[:TOP_K]]


def test_every_candidate_is_reachable_a_page_at_a_time_with_the_winner_on_each(world: dict[str, Any]) -> None:
    board = world["board"]
    every = board["rows"]
    winner = board["winner"]["index"]
    seen: set[int] = set()
    for number, ranks in ((2, range(101, 201)), (3, range(201, 251))):
        got = world["browser"].get(f"/console/studies/{world['many']}?page={number}")
        assert got.status_code == 200
        table = _table(got.text)
        assert len(table) == len(ranks) + 1  # the page's candidates and the winner
        assert table[0] == ("1", winner, True)  # the winner ranks first: listed before them
        assert [int(rank) for rank, _, _ in table[1:]] == list(ranks)
        listed = {index for _, index, _ in table}
        seen |= listed
        assert _rest(got.text) == _summary([r for r in every if r["index"] not in listed])
        assert f"Candidates {ranks[0]} to {ranks[-1]} of 250" in got.text
    seen |= {index for _, index, _ in _table(world["browser"].get(f"/console/studies/{world['many']}").text)}
    assert seen == {r["index"] for r in every}


@pytest.mark.parametrize("page", ["4", "0", "-1", "x", "1.5", "9" * 30, ""])
def test_a_page_that_does_not_exist_is_refused_with_what_to_do(world: dict[str, Any], page: str) -> None:
    got = world["browser"].get(f"/console/studies/{world['many']}?page={page}")
    assert got.status_code == 422
    message = html.unescape(re.search(r'<p class="error" role="alert" id="error">([^<]*)</p>', got.text).group(1))  # type: ignore[union-attr]
    assert message == (f"page (in the query): expected a page from 1 to 3, got {page[:40]!r}. "
                       "Use the links under the leaderboard's table.")


def test_a_study_of_few_candidates_lists_them_all_as_before(world: dict[str, Any]) -> None:
    got = world["browser"].get(f"/console/studies/{world['few']}")
    assert got.status_code == 200
    assert len(_table(got.text)) == FEW
    assert _rest(got.text) is None and 'id="board-pages"' not in got.text
    assert '<caption id="board-caption">Candidates, ranked by Adjusted (the winner highlighted)</caption>' in got.text
    assert f'"url": "/v1/studies/{world["few"]}/leaderboard"' in got.text  # the chart reads every row
    assert f"Leaderboard chart: {FEW} candidates by rank" in got.text


def test_the_api_pages_the_leaderboard_and_keeps_everything_else(world: dict[str, Any]) -> None:
    c, sid, full = world["browser"], world["many"], world["board"]
    assert full["page"] == {"offset": 0, "limit": None, "returned": MANY, "total": MANY, "next_offset": None}
    walked: list[dict[str, Any]] = []
    url: str | None = f"/v1/studies/{sid}/leaderboard?limit=100"
    pages_read = 0
    while url is not None:
        got = c.get(url)
        assert got.status_code == 200
        body = got.json()
        assert {k: v for k, v in body.items() if k not in ("rows", "page")} == \
            {k: v for k, v in full.items() if k not in ("rows", "page")}  # the header, winner, tests: whole
        walked += body["rows"]
        pages_read += 1
        following = body["page"]["next_offset"]
        url = None if following is None else f"/v1/studies/{sid}/leaderboard?limit=100&offset={following}"
    assert pages_read == 3 and walked == full["rows"]
    last = c.get(f"/v1/studies/{sid}/leaderboard?offset=200&limit=100").json()
    assert last["page"] == {"offset": 200, "limit": 100, "returned": 50, "total": MANY, "next_offset": None}
    assert [r["rank"] for r in last["rows"]] == list(range(201, 251))
    tail = c.get(f"/v1/studies/{sid}/leaderboard?offset=240").json()  # offset alone: the rest
    assert [r["rank"] for r in tail["rows"]] == list(range(241, 251))
    beyond = c.get(f"/v1/studies/{sid}/leaderboard?offset=1000&limit=10").json()
    assert beyond["rows"] == [] and beyond["page"]["returned"] == 0 and beyond["page"]["next_offset"] is None


@pytest.mark.parametrize(("query", "expected"), [
    ("limit=0", "limit (in the query): expected a number of at least 1, got '0'"),
    ("limit=1001", "limit (in the query): expected a number of at most 1000, got '1001'"),
    ("limit=1.5", "limit (in the query): expected a whole number, got '1.5'"),
    ("limit=ten", "limit (in the query): expected a whole number, got 'ten'"),
    ("offset=-1", "offset (in the query): expected a number of at least 0, got '-1'"),
    ("offset=100001", "offset (in the query): expected a number of at most 100000, got '100001'"),
    ("offset=" + "9" * 40, "offset (in the query): expected a number of at most 100000, got '" + "9" * 40 + "'"),
    ("limit=1.0", "limit (in the query): expected a whole number, got '1.0'"),
    ("limit=%2B5", "limit (in the query): expected a whole number, got '+5'"),
    ("limit=%205", "limit (in the query): expected a whole number, got ' 5'"),
    ("limit=1e3", "limit (in the query): expected a whole number, got '1e3'"),
    ("offset=%D9%A3", "offset (in the query): expected a whole number, got '٣'"),
    ("limit=1&limit=2", "limit (in the query): expected it once (a repeated parameter is ambiguous), got ['1', '2']"),
    ("offset=0&limit=5&offset=0", "offset (in the query): expected it once (a repeated parameter is ambiguous), "
                                  "got ['0', '0']"),
])
def test_bad_paging_is_a_422_in_the_products_shape(world: dict[str, Any], query: str, expected: str) -> None:
    got = world["browser"].get(f"/v1/studies/{world['many']}/leaderboard?{query}")
    assert got.status_code == 422
    assert got.json() == {"error": {"code": "invalid_input",
                                    "message": expected + ". Fix the request (the schema is at /v1/openapi.json)"}}


def _row(rank: int | None, index: int, adjusted: float | None) -> LeaderboardRow:
    return LeaderboardRow(rank=rank, candidate_id=10_000 + index, index=index, label=f"skill={index}",
                          adjusted=adjusted, oos=adjusted, in_sample=None, gap=None, se=None,
                          cost_micro=None, oos_steps=20, ran=True, complete=adjusted is not None)


def test_a_winner_ranked_below_the_top_100_is_listed_after_them_and_left_out_of_the_rest() -> None:
    """The winner is picked among candidates scored on every fold, so incomplete ones can rank
    above it; rows here are the leaderboard's own (230 ranked, 20 with no Adjusted score)."""
    rows = [_row(i, i, 0.7 - i / 1000) for i in range(1, 231)] + [_row(None, i, None) for i in range(231, 251)]
    listed = board_page(rows, winner=rows[149].candidate_id)
    assert [r.rank for r in listed.rows] == [*range(1, 101), 150] and listed.winner_added
    assert listed.rest is not None and listed.rest.count == 149 and listed.rest.not_ranked == 20
    assert listed.rest.text == ("149 more candidates on other pages: Adjusted from 0.4700 to 0.5990 "
                                "(median 0.5340); 20 not ranked (no Adjusted score).")
    last = board_page(rows, winner=rows[149].candidate_id, page=3)
    assert [r.rank for r in last.rows] == [150, *range(201, 231), *[None] * 20]
    assert [r.index for r in last.rows] == [150, *range(201, 251)]
    assert last.rest is not None and last.rest.count == 199 and last.rest.not_ranked == 0
    assert last.rest.text == ("199 more candidates on other pages: Adjusted from 0.5000 to 0.6990 "
                              "(median 0.6000).")


def test_the_chart_draws_down_to_the_winner_but_never_more_than_it_is_checked_readable_at() -> None:
    rows = [_row(i, i, 0.7 - i / 10_000) for i in range(1, 701)]
    assert chart_ranks(rows, winner=rows[4].candidate_id) == TOP_K
    assert chart_ranks(rows, winner=rows[179].candidate_id) == 180  # the winner is drawn
    assert chart_ranks(rows, winner=rows[549].candidate_id) == TOP_K == 100  # below 500: the caption says so
    assert chart_ranks(rows[:40], winner=None) == 40


def test_a_finished_studys_page_and_the_api_say_how_far_its_search_went(world: dict[str, Any]) -> None:
    """The search's progress, one count for both: every planned window run (candidates × 2
    folds × tune and eval) finished, on the console's state line and in the API's study."""
    planned = MANY * 2 * 2
    got = world["browser"].get(f"/console/studies/{world['many']}")
    assert f"Search: {planned:,} of {planned:,} window runs (100%)" in got.text
    assert f'<progress max="{planned}" value="{planned}"' in got.text
    study = world["browser"].get(f"/v1/studies/{world['many']}").json()
    assert (study["window_runs_done"], study["window_runs_planned"]) == (planned, planned)
    # the list counts every study at once, and says what each study's own answer says
    listed = {s["id"]: s for s in world["browser"].get("/v1/studies").json()}
    for sid in (world["many"], world["few"]):
        one = world["browser"].get(f"/v1/studies/{sid}").json()
        assert (listed[sid]["window_runs_done"], listed[sid]["window_runs_planned"]) == (
            one["window_runs_done"], one["window_runs_planned"])
    assert listed[world["few"]]["window_runs_planned"] == FEW * 2 * 2
