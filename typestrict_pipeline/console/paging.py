"""A console list a page at a time: newest first, ``?<param>=N``, "Newer" and "Older" links.

The Trainings page (``?page=``), the Backtests page's run cards (``?backtests=``), studies
(``?studies=``) and schedules (``?schedules=``), Settings → Usage's studies (``?studies=``) and
Settings → Notifications' deliveries (``?deliveries=``) show :data:`PER_PAGE` items a page; a
list builds only its page's items. A page
past the last one is refused as a leaderboard page is (``page (in the query): expected a page
from 1 to 2, got '3'. Use the Newer and Older links under the table.``).

>>> p = Pager.at(1, total=120, per_page=50, href=lambda n: f"?page={n}")
>>> p.first, p.last, p.pages, p.newer, p.older, p.older_count
(1, 50, 3, None, '?page=2', 50)
>>> Pager.at(3, total=120, per_page=50, href=lambda n: f"?page={n}").older_count
0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from typestrict_pipeline.console.board_pages import page_count
from typestrict_pipeline.errors import InputError

PER_PAGE = 50
"""Items a console list shows at once."""
FIX = "use the Newer and Older links under the table"


def requested(text: str | None, param: str = "page") -> int:
    """The page a query's ``param`` asks for: a whole number from 1 (1 when not given); whether
    the list has that page is checked by :meth:`Pager.at` once its length is known.

    >>> requested(None), requested("7")
    (1, 7)
    >>> requested("-1", "studies")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: studies (in the query): expected a page number from 1, got '-1'. Use the Newer and Older links under the table.
    """
    if text is None:
        return 1
    value = text.strip()
    if value.isascii() and value.isdigit() and len(value) <= 9 and int(value) >= 1:
        return int(value)
    raise InputError("a page number from 1", repr(text[:40]), FIX, file=f"{param} (in the query)")


def hrefs(path: str, query: Mapping[str, str], param: str, kept: tuple[str, ...]) -> Callable[[int], str]:
    """Links to the pages of one list of a console page, the other lists' pages kept
    (``kept``: the page parameters of that console page; nothing else of the query is echoed).

    >>> hrefs("/console/backtests", {"studies": "2", "x": "y"}, "backtests", ("backtests", "studies"))(3)
    '/console/backtests?studies=2&backtests=3'
    """
    def href(number: int) -> str:
        q = {k: query[k] for k in kept if k != param and k in query}
        return f"{path}?{urlencode({**q, param: number})}"

    return href


@dataclass(frozen=True)
class Pager:
    """Page ``number`` of ``pages`` of a list of ``total`` items, ``per_page`` a page: its items
    ``first`` to ``last`` (from 1), and the links to the newer and the older page."""

    number: int
    pages: int
    total: int
    per_page: int
    first: int
    last: int
    newer: str | None
    older: str | None
    older_count: int

    @classmethod
    def at(cls, number: int, *, total: int, per_page: int = PER_PAGE,
           href: Callable[[int], str], param: str = "page") -> Pager:
        """The pager of page ``number``; refused (``InputError``) past the last page."""
        pages = page_count(total, per_page)
        if not 1 <= number <= pages:
            raise InputError(f"a page from 1 to {pages:,}", repr(str(number)), FIX, file=f"{param} (in the query)")
        first = (number - 1) * per_page
        last = min(total, first + per_page)
        return cls(number, pages, total, per_page, first + 1, last,
                   href(number - 1) if number > 1 else None,
                   href(number + 1) if number < pages else None,
                   min(per_page, total - last))

    @property
    def offset(self) -> int:
        """Items before this page."""
        return self.first - 1


__all__ = ["FIX", "PER_PAGE", "Pager", "hrefs", "requested"]
