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

import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from typestrict_pipeline.api.quota import StorageQuotaError
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
from typestrict_pipeline.lifecycle.trainings import API_WORDS
from typestrict_pipeline.values import shown


class ApiError(TypeStrictError):
    """An error the API answers with a given status and code (401, 410, 413 ...)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFoundError, 404, "not_found"),
    (StorageQuotaError, 409, "storage_quota"),
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


class _JsonRepr(reprlib.Repr):
    """A refused value as the client wrote it: JSON's ``null``, ``true``, ``false`` and numbers
    (the API decodes a number with a fraction as a ``Decimal``: shown as written, not as
    ``Decimal('1.5')``); strings quoted as the rest of the messages quote them."""

    def repr_NoneType(self, value: None, level: int) -> str:
        return "null"

    def repr_bool(self, value: bool, level: int) -> str:
        return "true" if value else "false"

    def repr_Decimal(self, value: Decimal, level: int) -> str:
        return str(value)[:80]


_SHORT = _JsonRepr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxtuple, _SHORT.maxset = 2, 4, 4, 4, 4
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlong = 80


def _shown(value: Any) -> str:
    """A refused value as written, at most 80 characters; a list or an object is shortened before
    it is written out (a body of millions of items costs no more than a small one).

    >>> _shown([{}] * 3_000_000)
    '[{}, {}, {}, {}, ...]'
    >>> _shown("x" * 100) == repr("x" * 100)[:80]
    True
    >>> _shown(None), _shown(True), _shown(Decimal("1.5")), _shown([Decimal("0.1"), False])
    ('null', 'true', '1.5', '[0.1, false]')
    """
    if isinstance(value, str):
        return repr(value)[:80]
    return _SHORT.repr(value)[:80]


_EXPECTED_TYPE = {
    "string_type": "a string",
    "list_type": "a JSON array",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "decimal_type": "a decimal number",
    "decimal_parsing": "a decimal number",
}
"""The JSON type a field expects, for the refusals pydantic words for Python ("Input should be a
valid dictionary or object to extract fields from")."""


_UNION_TAG = re.compile(r"(constrained-)?(str|int|float|decimal|bool|bytes|list|dict|none)|function-.*|.*\[.*\]")
"""How pydantic names a member of a union in an error's location (``('budget_usd', 'decimal')``);
no field of the API's schemas is named so."""


def _union_members(errors: Sequence[Mapping[str, Any]], loc: tuple[Any, ...]) -> list[Mapping[str, Any]]:
    """The errors of every member of the union whose member ``loc`` ends with (its tag), else ``[]``.

    >>> _union_members([{"loc": ("body", "a", "decimal")}, {"loc": ("body", "a", "str")},
    ...                 {"loc": ("body", "b")}], ("body", "a", "decimal"))
    [{'loc': ('body', 'a', 'decimal')}, {'loc': ('body', 'a', 'str')}]
    >>> _union_members([{"loc": ("body", "a", "id")}, {"loc": ("body", "a", "text")}], ("body", "a", "id"))
    []
    """
    def tagged(where: tuple[Any, ...]) -> bool:
        return len(where) >= 2 and isinstance(where[-1], str) and _UNION_TAG.fullmatch(where[-1]) is not None

    if not tagged(loc):
        return []
    members = [e for e in errors if tagged(tuple(e.get("loc", ()))) and tuple(e["loc"])[:-1] == loc[:-1]
               and e.get("type") not in _KEYED]
    return members if len(members) >= 2 else []  # a union has two members at least; one is a key


_KEYED = frozenset({"extra_forbidden", "missing"})
"""Refusals whose location ends with a key of the request (a field left out, one the schema does
not have), never a union member's tag, whatever the key is: ``{"x[]": 1}``, ``{"str": 1}``."""


def _place(part: Any) -> str:
    """One step of a refused value's place as a message shows it: a position, or a key as
    written when it is a short printable name; any other key (one the request made up: empty,
    very long, holding a control, a format character such as U+202E, a lone surrogate) as
    :func:`~typestrict_pipeline.values.shown` writes it, quoted, escaped and cut, so the message
    names the field the person sent without carrying what they sent raw.

    >>> _place(0), _place("decisions"), _place(""), _place("a\\u202eb"), _place("k" * 100)
    ('0', 'decisions', "''", "'a\\\\u202eb'", "'kkkkkkkkkkkkkkkkkkkk… (100 characters)'")
    """
    text = str(part)
    if not isinstance(part, str) or (0 < len(text) <= 64 and text.isprintable() and not {" ", "'"} & set(text)):
        return text
    return shown(text)


def _count(value: Any) -> str:
    """A count as the product writes it (``200,000``); anything else as it is."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


FIELD_FIXES: dict[tuple[str, str], str] = {
    ("predictions", "too_long"): API_WORDS.test_rows[:1].upper() + API_WORDS.test_rows[1:],
    ("trained_on_ids", "too_long"):
        "State trained_on_sha256 instead (one SHA-256 of every training id: training_ids_sha256 "
        "of GET /v1/trainings/{id}/split), or send the ids as a file in a manifest",
}
"""What to do about a bound of the API's schema that a customer's data size meets (the field's
JSON path, the error's type), said before :data:`API_FIX`."""


def _expected(error: Mapping[str, Any]) -> str | None:
    """What one validation error says was expected, in the product's words (None: pydantic's)."""
    ctx = error.get("ctx") or {}
    return {
        "string_pattern_mismatch": f"a string matching the pattern '{ctx.get('pattern')}'",
        "missing": "a value (it is required)",
        "extra_forbidden": "only the fields of the schema (a typo?)",
        "string_too_long": f"at most {ctx.get('max_length')} characters",
        "string_too_short": f"at least {ctx.get('min_length')} character(s)",
        "too_long": f"at most {_count(ctx.get('max_length'))} items",
        "too_short": f"at least {_count(ctx.get('min_length'))} items",
        "int_parsing": "a whole number",
        "int_from_float": "a whole number",
        "int_type": "a whole number (a JSON number without a fraction, not a string or true/false)",
        "bool_type": "true or false (JSON, not a string or a number)",
        "greater_than_equal": f"a number of at least {ctx.get('ge')}",
        "less_than_equal": f"a number of at most {ctx.get('le')}",
        **_EXPECTED_TYPE,
    }.get(str(error.get("type", "")))


def _member_expected(error: Mapping[str, Any]) -> str:
    """What one member of a union expected, naming its type where its bound alone would not.

    >>> _member_expected({"type": "string_too_long", "ctx": {"max_length": 40}})
    'a string of at most 40 characters'
    """
    said = _expected(error) or "another value"
    return f"a string of {said}" if str(error.get("type")) in ("string_too_long", "string_too_short") else said


def validation_message(errors: Sequence[Mapping[str, Any]], *, fix: str = API_FIX,
                       field: Callable[[str], str] | None = None) -> str:
    """The first validation error in the product's shape, its pattern or bound as written, then
    ``fix``: what to do, for whoever reads it (the API's 422: :data:`API_FIX`; the console's
    forms pass their own words, a person at a form has no schema to read). ``field``, when
    given, names the value's place (its JSON path, ``decisions.0.name``) in the door's words
    (a console form's step and label); else the JSON path is shown.

    >>> validation_message([{"type": "string_pattern_mismatch", "loc": ("path", "name"),
    ...     "msg": "String should match pattern '^[A-Z]+$'", "input": "ab", "ctx": {"pattern": "^[A-Z]+$"}}])
    "name (in the path): expected a string matching the pattern '^[A-Z]+$', got 'ab'. Fix the request (the schema is at /v1/openapi.json)"
    >>> print(validation_message([{"type": "too_long", "loc": ("body", "predictions"), "input": [{}] * 3,
    ...     "ctx": {"field_type": "List", "max_length": 200_000, "actual_length": 250_000}}]))
    predictions: expected at most 200,000 items, got 250,000 items. Send the predictions of the split's test examples only (GET /v1/trainings/{id}/split lists them as test_ids, at most 2,000 per decision), not every row of the dataset. Fix the request (the schema is at /v1/openapi.json)
    >>> validation_message([{"type": "missing", "loc": ("body", "start")}], fix="Correct the field and submit again.")
    'start: expected a value (it is required), got nothing. Correct the field and submit again.'
    >>> validation_message([{"type": "decimal_type", "loc": ("body", "budget_usd", "decimal"), "input": True},
    ...     {"type": "string_type", "loc": ("body", "budget_usd", "constrained-str"), "input": True}], fix="")
    'budget_usd: expected a decimal number or a string, got true. '
    >>> validation_message([{"type": "control_character", "loc": ("body", "decisions", 0), "input": {},
    ...     "msg": "text without control characters, found U+0000", "ctx": {"at": ("question",), "text": "a\\x00"}}])
    "decisions.0.question: expected text without control characters, found U+0000, got 'a\\\\x00'. Fix the request (the schema is at /v1/openapi.json)"
    """
    first = errors[0] if errors else {}
    members = _union_members(errors, tuple(first.get("loc", ())))
    ctx = first.get("ctx") or {}
    at = tuple(ctx.get("at", ())) if first.get("type") == "control_character" else ()
    loc = [_place(p) for p in (*first.get("loc", ()), *at)][:-1 if members else None]
    where = ".".join(loc[1:]) if loc[:1] in (["body"], ["path"], ["query"]) else ".".join(loc)
    if loc[:1] in (["path"], ["query"]):
        where = f"{where} (in the {loc[0]})"
    elif field is not None and where:
        where = field(where)
    kind = first.get("type", "")
    expected = (" or ".join(dict.fromkeys(_member_expected(e) for e in members))
                if members else _expected(first))  # a union: what each of its types takes
    if expected is None:
        msg = str(first.get("msg", "a valid value"))
        expected = msg[:1].lower() + msg[1:]  # the rest as written (patterns keep their case)
    got = ("nothing" if kind == "missing" or "input" not in first
           else _shown(ctx["text"]) if at else _shown(first.get("input")))
    actual = ctx.get("actual_length")
    if kind == "too_long" and isinstance(actual, int):
        got = f"{actual:,} items"
    hint = FIELD_FIXES.get((".".join(p for p in loc[1:] if p), kind)) if fix == API_FIX else None
    if hint is not None:
        fix = f"{hint}. {fix}"
    return f"{where or '(body)'}: expected {expected}, got {got}. {fix}"
