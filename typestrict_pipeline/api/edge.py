"""The API's edge for JSON bodies: the media type, strict decoding, exact numbers.

Every ``/v1`` route that takes a JSON body is an :class:`StrictJsonRoute` (routers are made by
:func:`api_router`). Before FastAPI reads the body:

* a body sent with another ``Content-Type`` than ``application/json`` (or ``…+json``) is
  refused with ``415`` and the type expected;
* the body is decoded the one strict way every file of the product is
  (:func:`typestrict_pipeline.files.loads_strict`): invalid JSON, a key twice in one object,
  ``NaN``/``Infinity``, absurd numbers or nesting are refused with ``422`` naming the line and the
  column, in the product's one shape (expected, got, what to do);
* numbers with a fraction or an exponent are decoded as :class:`~decimal.Decimal`, exactly as
  written: money (``budget_usd``) is never read through a binary float.

>>> decode_body(b'{"budget_usd": 0.1}')
{'budget_usd': Decimal('0.1')}
>>> decode_body(b'{"a": 1,\\n "a": 2}')
Traceback (most recent call last):
...
typestrict_pipeline.errors.InputError: request body, line 2, column 2: expected each key once in an object, got the key 'a' twice. Remove one of them (a repeated key is ambiguous).
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.files import JSONLimits, loads_strict

JSON_LIMITS = JSONLimits(exact_numbers=True)
BODY_NAME = "request body"


def is_json_media_type(value: str | None) -> bool:
    """Whether a ``Content-Type`` header names JSON (``application/json``, ``application/x+json``).

    >>> is_json_media_type("application/json; charset=utf-8"), is_json_media_type("text/plain")
    (True, False)
    """
    if not value:
        return False
    message = email.message.Message()
    message["content-type"] = value
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def decode_body(body: bytes) -> Any:
    """A JSON body decoded strictly, non-integer numbers as ``Decimal``.

    Raises:
        InputError: not UTF-8, or not strict JSON (with the line and the column).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("a body of UTF-8 text", f"a byte that is not UTF-8 at byte {exc.start + 1}",
                         "send the JSON encoded as UTF-8", file=BODY_NAME) from None
    return loads_strict(text.removeprefix("\ufeff"), file=BODY_NAME, limits=JSON_LIMITS)


def _unsupported(got: str | None) -> ApiError:
    shown = "no Content-Type" if not got else repr(got[:100])
    return ApiError(415, "unsupported_media_type",
                    f"expected a JSON body with 'Content-Type: application/json', got {shown}. "
                    "Send the body as JSON with that header (curl: -H 'Content-Type: application/json')")


class StrictJsonRoute(APIRoute):
    """A route whose JSON body passes the edge's checks (see the module) before FastAPI reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            body = await request.body()
            if body:
                content_type = request.headers.get("content-type")
                if not is_json_media_type(content_type):
                    raise _unsupported(content_type)
                try:
                    request._json = decode_body(body)
                except InputError as exc:
                    raise ApiError(422, "invalid_input",
                                   f"{exc} The schema is at /v1/openapi.json") from None
            return await handler(request)

        return strict


def api_router(**options: Any) -> APIRouter:
    """An ``APIRouter`` of :class:`StrictJsonRoute` routes (every ``/v1`` router)."""
    return APIRouter(route_class=StrictJsonRoute, **options)


__all__ = ["StrictJsonRoute", "api_router", "decode_body", "is_json_media_type"]
