"""Every list of the API pages one way: ``?limit=`` and ``?offset=``, and two headers.

``GET /v1/trainings``, ``/v1/models``, ``/v1/studies``, ``/v1/backtests``, ``/v1/datasets`` and
``/v1/files`` (and ``/v1/notifications``, its ``deliveries``) answer at most ``limit`` items (1 to :data:`LIST_LIMIT_MAX`, default
:data:`LIST_LIMIT`) after skipping ``offset`` (0 to :data:`LIST_OFFSET_MAX`), in the list's own
order (docs/api.md, "Lists, a page at a time"). The body stays a JSON array; the answer says
the rest in headers:

* ``X-Total-Count``: how many items the whole list holds;
* ``Link``: ``<...?limit=200&offset=200>; rel="next"`` while items remain after this page (the
  path and query of the next page, every other query parameter kept; RFC 8288), and
  ``rel="prev"`` from the second page on.

A list costs the items of its page, not the workspace's whole history: each route reads the
cheap keys of its list (ids, names, rows), then builds only the page's items. Before paging,
``/v1/studies`` and ``/v1/backtests`` answered their 200 newest and no older one, and the other
lists answered everything.

>>> window(450, limit=200, offset=400)
slice(400, 450, None)
>>> links("/v1/trainings", {"limit": "200"}, total=450, limit=200, offset=200)
'</v1/trainings?limit=200&offset=400>; rel="next", </v1/trainings?limit=200&offset=0>; rel="prev"'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import Depends, Query, Request, Response

LIST_LIMIT = 200
"""Items a list answers when ``limit`` is not given (the cap ``/v1/studies`` and
``/v1/backtests`` had before paging)."""
LIST_LIMIT_MAX = 1000
"""The most items one page holds (as a leaderboard page)."""
LIST_OFFSET_MAX = 100_000_000
"""The largest ``offset`` (beyond any list a workspace holds; a bound, so a query is never a
number of a thousand digits)."""


def window(total: int, *, limit: int, offset: int) -> slice:
    """The page's items of a list of ``total``: ``[offset, offset + limit)``, cut at the end.

    >>> window(3, limit=200, offset=0), window(3, limit=200, offset=5)
    (slice(0, 3, None), slice(3, 3, None))
    """
    start = min(offset, total)
    return slice(start, min(total, start + limit))


def links(path: str, query: Mapping[str, str], *, total: int, limit: int, offset: int) -> str | None:
    """The ``Link`` header of a page: the next one while items remain, the previous one after
    the first page; None for a list that fits on its first page.

    >>> links("/v1/files", {}, total=3, limit=200, offset=0) is None
    True
    """
    def at(start: int) -> str:
        kept = {k: v for k, v in query.items() if k not in ("limit", "offset")}
        return f"<{path}?{urlencode({**kept, 'limit': limit, 'offset': start})}>"

    out = []
    if offset + limit < total:
        out.append(f'{at(offset + limit)}; rel="next"')
    if offset > 0:
        out.append(f'{at(max(0, min(offset, total) - limit))}; rel="prev"')
    return ", ".join(out) or None


@dataclass(frozen=True)
class Page:
    """The page a list request asked for; :meth:`of` says the total and gives the window."""

    limit: int
    offset: int
    request: Request
    response: Response

    def of(self, total: int) -> slice:
        """Set ``X-Total-Count`` and ``Link`` for a list of ``total`` items; the page's window."""
        self.response.headers["X-Total-Count"] = str(total)
        link = links(self.request.url.path, self.request.query_params, total=total,
                     limit=self.limit, offset=self.offset)
        if link is not None:
            self.response.headers["Link"] = link
        return window(total, limit=self.limit, offset=self.offset)


def _page(
    request: Request,
    response: Response,
    limit: Annotated[int, Query(
        ge=1, le=LIST_LIMIT_MAX,
        description=f"At most this many items (1 to {LIST_LIMIT_MAX:,}; default {LIST_LIMIT}). "
                    "X-Total-Count says how many the list holds, Link rel=\"next\" where the next page is.")
    ] = LIST_LIMIT,
    offset: Annotated[int, Query(
        ge=0, le=LIST_OFFSET_MAX, description="Items to skip first, in the list's order (default 0).")
    ] = 0,
) -> Page:
    return Page(limit, offset, request, response)


ListPage = Annotated[Page, Depends(_page)]
"""A list route's page (``?limit=`` and ``?offset=``)."""

__all__ = ["LIST_LIMIT", "LIST_LIMIT_MAX", "LIST_OFFSET_MAX", "ListPage", "Page", "links", "window"]
