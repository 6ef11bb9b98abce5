"""One JSON error shape for every answer that is not a success: ``{"error": {"code", "message"}}``.

The ``message`` is the same text the CLI prints for the same error (the project's one shape: what
was expected, what was got, what to do). :func:`status_for` maps each error class to its HTTP
status once, for every route; :func:`validation_message` words a schema's refusal once, for the
API's 422 and the console's forms alike.

>>> from typestrict_pipeline.errors import NotFoundError
>>> status_for(NotFoundError("x"))
(404, 'not_found')
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from typestrict_pipeline.credits import InsufficientCreditsError
from typestrict_pipeline.errors import (
    ConflictError,
    InputError,
    LimitError,
    NotEnoughDataError,
    NotFoundError,
    StoreError,
    TypeStrictError,
)


class ApiError(TypeStrictError):
    """An error the API answers with a given status and code (401, 410, 413 ...)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFoundError, 404, "not_found"),
    (InsufficientCreditsError, 402, "insufficient_credits"),
    (ConflictError, 409, "conflict"),
    (LimitError, 422, "limit"),
    (NotEnoughDataError, 422, "not_enough_data"),
    (InputError, 422, "invalid_input"),
    (StoreError, 503, "store_unavailable"),
    (TypeStrictError, 400, "bad_request"),
)


def status_for(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and error code of one of our errors."""
    if isinstance(exc, ApiError):
        return exc.status, exc.code
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return 500, "internal"


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one error shape.

    >>> error_body("not_found", "expected a model")
    {'error': {'code': 'not_found', 'message': 'expected a model'}}
    """
    return {"error": {"code": code, "message": message}}


API_FIX = "Fix the request (the schema is at /v1/openapi.json)"
"""What to do about a request the API's schema refused (a program's author reads it)."""


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxtuple, _SHORT.maxset = 2, 4, 4, 4, 4
_SHORT.maxstring = _SHORT.maxother = 80


def _shown(value: Any) -> str:
    """A refused value as written, at most 80 characters; a list or an object is shortened before
    it is written out (a body of millions of items costs no more than a small one).

    >>> _shown([{}] * 3_000_000)
    '[{}, {}, {}, {}, ...]'
    >>> _shown("x" * 100) == repr("x" * 100)[:80]
    True
    """
    if isinstance(value, list | dict | tuple | set | frozenset):
        return _SHORT.repr(value)[:80]
    return repr(value)[:80]


def validation_message(errors: Sequence[Mapping[str, Any]], *, fix: str = API_FIX) -> str:
    """The first validation error in the product's shape, its pattern or bound as written, then
    ``fix``: what to do, for whoever reads it (the API's 422: :data:`API_FIX`; the console's
    forms pass their own words, a person at a form has no schema to read).

    >>> validation_message([{"type": "string_pattern_mismatch", "loc": ("path", "name"),
    ...     "msg": "String should match pattern '^[A-Z]+$'", "input": "ab", "ctx": {"pattern": "^[A-Z]+$"}}])
    "name (in the path): expected a string matching the pattern '^[A-Z]+$', got 'ab'. Fix the request (the schema is at /v1/openapi.json)"
    >>> validation_message([{"type": "missing", "loc": ("body", "start")}], fix="Correct the field and submit again.")
    'start: expected a value (it is required), got nothing. Correct the field and submit again.'
    """
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ())]
    where = ".".join(p for p in loc[1:] if p) if loc[:1] in (["body"], ["path"], ["query"]) else ".".join(loc)
    if loc[:1] in (["path"], ["query"]):
        where = f"{where} (in the {loc[0]})"
    ctx = first.get("ctx") or {}
    kind = first.get("type", "")
    expected = {
        "string_pattern_mismatch": f"a string matching the pattern '{ctx.get('pattern')}'",
        "missing": "a value (it is required)",
        "extra_forbidden": "only the fields of the schema (a typo?)",
        "string_too_long": f"at most {ctx.get('max_length')} characters",
        "string_too_short": f"at least {ctx.get('min_length')} character(s)",
        "too_long": f"at most {ctx.get('max_length')} items",
        "too_short": f"at least {ctx.get('min_length')} items",
        "int_parsing": "a whole number",
        "int_from_float": "a whole number",
        "int_type": "a whole number (a JSON number without a fraction, not a string or true/false)",
        "bool_type": "true or false (JSON, not a string or a number)",
        "greater_than_equal": f"a number of at least {ctx.get('ge')}",
        "less_than_equal": f"a number of at most {ctx.get('le')}",
    }.get(kind)
    if expected is None:
        msg = str(first.get("msg", "a valid value"))
        expected = msg[:1].lower() + msg[1:]  # the rest as written (patterns keep their case)
    got = "nothing" if kind == "missing" or "input" not in first else _shown(first.get("input"))
    return f"{where or '(body)'}: expected {expected}, got {got}. {fix}"
