"""The study page's leaderboard at any size: :data:`TOP_K` candidates a page, the winner on every
page, and one row that sums up the candidates not listed, in words.

A study may rank 10,000 candidates; listing them all makes a page of megabytes that a browser
lays out for seconds and a person cannot read. The page lists the top :data:`TOP_K` (page 1),
the winner even when it ranks lower, and a last row such as "9,900 more candidates on other
pages: Adjusted from 0.4812 to 0.5103 (median 0.4950); 12 not ranked (no Adjusted score)".
Every candidate is reachable :data:`TOP_K` a page (``?page=N``), sliced on the server. The
chart draws the same top ranks (:func:`chart_ranks`). Everything here is computed from the
leaderboard's ``rows`` (ranked first, by Adjusted, then the candidates with no Adjusted score).

>>> rows = [_row(i, adjusted=0.6 - i / 1000) for i in range(1, 251)]
>>> page = board_page(rows, winner=rows[0].candidate_id)
>>> len(page.rows), page.pages, page.rest.count if page.rest else None
(100, 3, 150)
>>> page.rest.text if page.rest else None
'150 more candidates on other pages: Adjusted from 0.3500 to 0.4990 (median 0.4245).'
>>> [len(board_page(rows, winner=rows[0].candidate_id, page=n).rows) for n in (2, 3)]
[101, 51]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.study.leaderboard import LeaderboardRow

TOP_K = 100
"""Candidates a page of the study's table lists, and the ranks its chart draws: the top ranks
on page 1, the next :data:`TOP_K` on page 2, and so on; the winner is listed on every page."""

CHART_MAX = 500
"""The most ranks the chart draws: it draws down to the winner's rank when the winner ranks
below :data:`TOP_K`, but never more than this many (the most it is checked readable at, in
``tests/test_console_browser.py``); the caption then says the winner ranks below them."""


@dataclass(frozen=True)
class Rest:
    """The candidates a page does not list: how many, the range and median of their Adjusted
    scores, and how many have no Adjusted score (not ranked)."""

    count: int
    ranked: int
    low: float | None
    high: float | None
    median: float | None

    @property
    def not_ranked(self) -> int:
        return self.count - self.ranked

    @property
    def text(self) -> str:
        """The summary row, in the table's words (its column names, "—" never written out).

        >>> Rest(9900, 9888, 0.4812, 0.5103, 0.4950).text
        '9,900 more candidates on other pages: Adjusted from 0.4812 to 0.5103 (median 0.4950); 12 not ranked (no Adjusted score).'
        >>> Rest(1, 0, None, None, None).text
        '1 more candidate on other pages: not ranked (no Adjusted score).'
        """
        head = f"{self.count:,} more candidate{'s' if self.count != 1 else ''} on other pages"
        parts = []
        if self.ranked and self.low is not None and self.high is not None and self.median is not None:
            if self.ranked == 1:
                parts.append(f"Adjusted {self.low:.4f}")
            else:
                parts.append(f"Adjusted from {self.low:.4f} to {self.high:.4f} "
                             f"(median {self.median:.4f})")
        if self.not_ranked:
            if self.ranked:
                parts.append(f"{self.not_ranked:,} not ranked (no Adjusted score)")
            else:
                parts.append("not ranked (no Adjusted score)")
        return f"{head}: {'; '.join(parts)}."


@dataclass(frozen=True)
class BoardPage:
    """One page of the leaderboard table.

    ``first`` and ``last`` are the positions (from 1, in ranking order) of the page's slice;
    ``rows`` is that slice with the winner added in its place when it is not in it
    (``winner_added``); ``rest`` sums up every candidate not in ``rows`` (``None``: none).
    """

    number: int
    pages: int
    first: int
    last: int
    total: int
    rows: tuple[LeaderboardRow, ...]
    winner_added: bool
    rest: Rest | None

    @property
    def paged(self) -> bool:
        """Whether the table has more than one page (so a page says which one it is)."""
        return self.pages > 1


def page_count(total: int, per_page: int = TOP_K) -> int:
    """Pages of ``per_page`` candidates (1 for an empty leaderboard: it says so).

    >>> page_count(0), page_count(100), page_count(101), page_count(10_000)
    (1, 1, 2, 100)
    """
    return max(1, math.ceil(total / per_page))


def parse_page(text: str | None, pages: int) -> int:
    """The page a ``?page=`` asks for: a whole number from 1 to ``pages`` (1 when not given).

    >>> parse_page(None, 3), parse_page("2", 3)
    (1, 2)
    >>> parse_page("4", 3)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: page (in the query): expected a page from 1 to 3, got '4'. Use the links under the leaderboard's table.
    """
    if text is None:
        return 1
    value = text.strip()
    if value.isascii() and value.isdigit() and len(value) <= 9 and 1 <= int(value) <= pages:
        return int(value)
    raise InputError(f"a page from 1 to {pages:,}", repr(text[:40]),
                     "use the links under the leaderboard's table", file="page (in the query)")


def board_page(rows: Sequence[LeaderboardRow], *, winner: int | None, page: int = 1,
               per_page: int = TOP_K) -> BoardPage:
    """Page ``page`` (from 1) of ``rows`` (the leaderboard's, in its order), ``per_page`` a page,
    with the winner's row (``winner``: its ``candidate_id``) always listed."""
    total = len(rows)
    pages = page_count(total, per_page)
    if not 1 <= page <= pages:
        raise InputError(f"a page from 1 to {pages:,}", str(page),
                         "use the links under the leaderboard's table", file="page (in the query)")
    start = (page - 1) * per_page
    stop = min(start + per_page, total)
    chosen = list(range(start, stop))
    at = next((i for i, r in enumerate(rows) if r.candidate_id == winner), None)
    added = at is not None and not start <= at < stop
    if added and at is not None:
        chosen = sorted([*chosen, at])
    shown = set(chosen)
    rest = [r for i, r in enumerate(rows) if i not in shown]
    return BoardPage(number=page, pages=pages, first=start + 1, last=stop, total=total,
                     rows=tuple(rows[i] for i in chosen), winner_added=added,
                     rest=summarise(rest) if rest else None)


def summarise(rows: Sequence[LeaderboardRow]) -> Rest:
    """The summary row of ``rows``: their count, and the range and median of their Adjusted."""
    scores = [r.adjusted for r in rows if r.adjusted is not None]
    return Rest(count=len(rows), ranked=len(scores), low=min(scores, default=None),
                high=max(scores, default=None),
                median=statistics.median(scores) if scores else None)


def chart_ranks(rows: Sequence[LeaderboardRow], *, winner: int | None) -> int:
    """How many of the top ranks the chart draws: :data:`TOP_K`, or down to the winner's rank
    when it ranks lower (at most :data:`CHART_MAX`), or every ranked candidate when fewer.

    >>> rows = [_row(i, adjusted=0.6 - i / 1000) for i in range(1, 251)]
    >>> chart_ranks(rows, winner=rows[4].candidate_id), chart_ranks(rows, winner=rows[179].candidate_id)
    (100, 180)
    >>> chart_ranks(rows[:30], winner=None)
    30
    """
    ranked = sum(1 for r in rows if r.rank is not None)
    rank = next((r.rank for r in rows if r.candidate_id == winner), None)
    wanted = TOP_K if rank is None or rank > CHART_MAX else max(TOP_K, rank)
    return min(ranked, wanted)


def page_links(listed: BoardPage, per_page: int = TOP_K) -> list[tuple[str, int]]:
    """The links under a paged table: (text, page), each text saying which candidates it lists.

    >>> rows = [_row(i, adjusted=0.6 - i / 1000) for i in range(1, 251)]
    >>> page_links(board_page(rows, winner=None, page=1))
    [('Next 100: candidates 101 to 200', 2), ('Last page: candidates 201 to 250', 3)]
    >>> [text for text, _ in page_links(board_page(rows, winner=None, page=2))]
    ['Previous 100: candidates 1 to 100', 'Next 50: candidates 201 to 250']
    """
    def span(page: int) -> str:
        first = (page - 1) * per_page + 1
        return f"candidates {first:,} to {min(page * per_page, listed.total):,}"

    def count(page: int) -> int:
        return min(page * per_page, listed.total) - (page - 1) * per_page

    links: list[tuple[str, int]] = []
    if listed.number > 2:
        links.append((f"First page: {span(1)}", 1))
    if listed.number > 1:
        links.append((f"Previous {count(listed.number - 1):,}: {span(listed.number - 1)}",
                      listed.number - 1))
    if listed.number < listed.pages:
        links.append((f"Next {count(listed.number + 1):,}: {span(listed.number + 1)}",
                      listed.number + 1))
    if listed.number < listed.pages - 1:
        links.append((f"Last page: {span(listed.pages)}", listed.pages))
    return links


def _row(i: int, adjusted: float | None) -> LeaderboardRow:
    """A row for the examples above: candidate ``#i`` ranked ``i`` (``None``: not ranked)."""
    return LeaderboardRow(rank=i if adjusted is not None else None, candidate_id=1000 + i, index=i,
                          label=f"skill={i}", adjusted=adjusted, oos=adjusted, in_sample=adjusted,
                          gap=0.0, se=0.01, cost_micro=None, oos_steps=20, ran=True, complete=True)


__all__ = ["CHART_MAX", "TOP_K", "BoardPage", "Rest", "board_page", "chart_ranks", "page_count",
           "page_links", "parse_page", "summarise"]
