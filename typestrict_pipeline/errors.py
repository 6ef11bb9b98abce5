"""The project's own error hierarchy.

Every message has one shape: what was expected, what was got, and what to do.
Errors that come from a file name the file, and where it applies the row and the
column, so a user can go straight to the fix.

>>> err = InputError("a probability between 0 and 1", "-0.2",
...                  "fix the predictions file", file="p.jsonl", row=3, column="p_rotten")
>>> print(err)
p.jsonl, row 3, column 'p_rotten': expected a probability between 0 and 1, got -0.2. Fix the predictions file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

#: A URL: its scheme and host kept; its user, port, path and query dropped, up to a space, a
#: quote or the end (punctuation just before them is the sentence's, not the URL's).
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://(?:[^\s/@'\"]*@)?([^\s/:'\"?#]+)"
                  r"[^\s'\"]*?(?=[.,;:)\]]*(?:[\s'\"]|$))")
#: An absolute path of the server: cut to its last name. The product's own routes (``/v1/…``,
#: ``/console/…``) are what a message tells the customer to call, and stay.
_PATH = re.compile(r"(?<![\w.~:/])/(?!v1/|console/)(?:[^\s/'\"]+/)+([^\s/'\"]+)")


def for_customers(text: str) -> str:
    """A stored error as a workspace's console and API show it: each URL cut to its scheme and
    host (a webhook's path and query often hold its secret; a user and password are dropped) and
    each absolute path of the server to its last name. For what the server wrote down from an
    exception (a failed delivery, a failed study or backtest): the operator's CLI and logs keep
    the whole text.

    >>> for_customers("RuntimeError: expected a 2xx answer from the webhook "
    ...               "https://bot:pw@hooks.example.com:8443/services/T0/B0/s3cret?x=1, got 500")
    'RuntimeError: expected a 2xx answer from the webhook https://hooks.example.com, got 500'
    >>> for_customers("PermissionError: [Errno 13] Permission denied: '/srv/ts/home/notifications.log'")
    "PermissionError: [Errno 13] Permission denied: '…/notifications.log'"
    >>> for_customers("expected a value in [0.0, 1.0], got 1.5 on 2013/01/02 for a/b")
    'expected a value in [0.0, 1.0], got 1.5 on 2013/01/02 for a/b'
    >>> for_customers("create the study again later (POST /v1/studies); see /console/studies/3")
    'create the study again later (POST /v1/studies); see /console/studies/3'
    """
    return _PATH.sub(r"…/\1", _URL.sub(r"\1://\2", text))


MAX_LISTED = 20
"""Most items a message lists (column names, answers, values); the rest are counted."""
MAX_ITEM_CHARS = 80
"""Longest item a message shows, as written (longer ones are cut and say their length)."""


def listed(items: Iterable[Any], *, limit: int = MAX_LISTED, plain: bool = False) -> str:
    """Items as a message shows them: a list as Python writes it, cut after ``limit`` items with
    how many more there are, each item at most :data:`MAX_ITEM_CHARS` characters. The one way a
    message lists names or values, so an error about a file of a million columns stays short.
    ``plain``: the items as text, separated by commas, without brackets or quotes.

    >>> listed(["id", "text"])
    "['id', 'text']"
    >>> listed([f"c{i}" for i in range(1_000_000)], limit=3)
    "['c0', 'c1', 'c2', … and 999,997 more]"
    >>> listed(["x" * 200])
    "['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (200 characters)']"
    >>> listed(["temp_max", "event_time"], plain=True)
    'temp_max, event_time'
    """
    values = items if isinstance(items, list | tuple) else list(items)
    shown = [_item(v, plain) for v in islice(values, limit)]
    more = len(values) - len(shown)
    tail = [f"… and {more:,} more"] if more > 0 else []
    text = ", ".join([*shown, *tail])
    return text if plain else f"[{text}]"


def _item(value: Any, plain: bool) -> str:
    if isinstance(value, str) and len(value) > MAX_ITEM_CHARS:
        value = f"{value[:MAX_ITEM_CHARS]}… ({len(value):,} characters)"
    text = str(value) if plain and isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_ITEM_CHARS * 2 else f"{text[:MAX_ITEM_CHARS]}…"


class TypeStrictError(Exception):
    """Base class of every error this project raises on purpose."""


def _locate(file: str | None, row: int | None, column: str | None) -> str:
    parts: list[str] = []
    if file is not None:
        parts.append(str(file))
    if row is not None:
        parts.append(f"row {row}")
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts)


def shown_as(exc: TypeStrictError, names: Mapping[str, str]) -> TypeStrictError:
    """The same error (same class, same status) with each server-side text of ``names`` (a
    staging file's path, an internal key) replaced by what the customer calls it.

    >>> err = InputError("4 cells", "2 cells", "fix the row", file="/srv/.staging-1/dataset.csv", row=5)
    >>> print(shown_as(err, {"/srv/.staging-1/dataset.csv": "ragged.csv"}))
    ragged.csv, row 5: expected 4 cells, got 2 cells. Fix the row.
    """

    def sub(text: str) -> str:
        for server, shown in names.items():
            text = text.replace(server, shown)
        return text

    out = type(exc).__new__(type(exc))
    out.__dict__.update({k: sub(v) if isinstance(v, str) else v for k, v in exc.__dict__.items()})
    out.args = tuple(sub(a) if isinstance(a, str) else a for a in exc.args)
    return out


class InputError(TypeStrictError, ValueError):
    """Bad input found at the edge: a file, a manifest, a configuration.

    ``row`` is 1-based and counts data rows (the header of a CSV is not a row).
    """

    def __init__(
        self,
        expected: str,
        got: str,
        fix: str,
        *,
        file: str | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.expected = expected
        self.got = got
        self.fix = fix
        self.file = file
        self.row = row
        self.column = column
        where = _locate(file, row, column)
        prefix = f"{where}: " if where else ""
        fix_text = fix[:1].upper() + fix[1:] if fix else ""
        if fix_text and not fix_text.endswith("."):
            fix_text += "."
        super().__init__(f"{prefix}expected {expected}, got {got}. {fix_text}".rstrip())


class ManifestError(InputError):
    """A training manifest is malformed or refers to something that does not exist."""


class PredictionsError(InputError):
    """A predictions file (or a model's answer) is malformed."""


class DatasetError(InputError):
    """A dataset is malformed: columns, texts, ids, answers, groups."""


class NotEnoughDataError(TypeStrictError, ValueError):
    """There is too little data to do what was asked; the message says how much is needed."""


class ModelClientError(TypeStrictError, RuntimeError):
    """A model endpoint failed after its retries, or answered something unusable."""


class EndpointUnreachableError(ModelClientError):
    """Every attempt of a call failed on the way (the connection was refused or dropped, the name
    did not resolve, no answer came within the timeout): the endpoint never answered it, so the
    call reached no model and cost nothing. An HTTP answer (400, 429, 500 ...) is not this.

    Attributes:
        endpoint: the URL called (a base URL carries no user or password: ``values.base_url``).
        transport: what the last attempt got (``connection failed ([Errno 111] Connection
            refused)``, ``no answer within the 30 s timeout``).
    """

    def __init__(self, message: str, *, endpoint: str, transport: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.transport = transport


class StoreError(TypeStrictError, RuntimeError):
    """The domain store refused or failed an operation; the message says why and what to do."""


class NotFoundError(StoreError, LookupError):
    """A record that was asked for by id does not exist; the message names the id.

    A workspace's record looked up by a door (:meth:`in_workspace`) keeps what was missing apart
    from how to find it, so each door says the finding in its own words (:meth:`at_door`): the
    API names its list route, the console its pages.

    >>> e = NotFoundError.in_workspace("study", "99", "Check the id (GET /v1/studies lists them)")
    >>> str(e)
    "expected a study with id '99' in this workspace, got none. Check the id (GET /v1/studies lists them)"
    >>> e.at_door("Open it from the console's pages")
    "expected a study with id '99' in this workspace, got none. Open it from the console's pages"
    >>> e.what
    'study'
    >>> NotFoundError("gone").at_door("Open it from the console's pages")
    'gone'
    """

    def __init__(self, message: str, *, missing: str | None = None, what: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing
        self.what = what

    @classmethod
    def in_workspace(cls, what: str, ident: object, find: str, *, cut: int = 40) -> NotFoundError:
        """``what`` with id ``ident`` (shown cut to ``cut`` characters) is not in the caller's
        workspace; ``find`` says how to find the right id at the door that raises it."""
        missing = f"expected a {what} with id {str(ident)[:cut]!r} in this workspace, got none"
        return cls(f"{missing}. {find}", missing=missing, what=what)

    def at_door(self, find: str) -> str:
        """The message with ``find`` as what to do (a door whose reader cannot use the raising
        door's advice); the message itself when it was not built by :meth:`in_workspace`."""
        return f"{self.missing}. {find}" if self.missing is not None else str(self)


class LookAheadError(TypeStrictError, RuntimeError):
    """A workflow tried to read data that was not yet known at its decision time."""


class LimitError(TypeStrictError, ValueError):
    """A study was configured without a required limit, or with an impossible one."""


class ConflictError(StoreError):
    """The operation conflicts with one in flight (for example a second study on one workflow)."""
