"""The API's edge for JSON bodies: the media type, strict decoding, exact numbers.

Every ``/v1`` route that takes a JSON body is an :class:`StrictJsonRoute` (routers are made by
:func:`api_router`). Before FastAPI reads the body:

* the caller's API key is checked and its request token taken (the route's own
  :func:`~typestrict_pipeline.api.deps.get_workspace`, run once): a caller without a valid key, or
  over its rate limit, is answered ``401``/``429`` before one byte of the body is read or decoded;
* the body is decoded in a worker thread, never on the server's event loop: a large body delays
  only its own answer, not other requests;
* a body sent with another ``Content-Type`` than ``application/json`` (or ``…+json``) is
  refused with ``415`` and the type expected, and so is one whose ``charset`` is not UTF-8;
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
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

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


def foreign_charset(value: str | None) -> str | None:
    """The ``charset`` a ``Content-Type`` header names when it is not UTF-8 (the only encoding
    the API decodes a JSON body from, RFC 8259), else None.

    >>> foreign_charset("application/json; charset=utf-16"), foreign_charset("application/json; charset=UTF-8")
    ('utf-16', None)
    >>> foreign_charset("application/json")
    """
    if not value:
        return None
    message = email.message.Message()
    message["content-type"] = value
    charset = message.get_param("charset")
    if not isinstance(charset, str) or charset.strip().lower() in ("utf-8", "utf8"):
        return None
    return charset.strip()


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


def _foreign_charset(charset: str) -> ApiError:
    return ApiError(415, "unsupported_media_type",
                    f"expected a JSON body encoded as UTF-8, got 'charset={charset[:40]}' in its "
                    "Content-Type. Send the JSON as UTF-8, with 'Content-Type: application/json' "
                    "(or '; charset=utf-8')")


def _needs(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether ``call`` is among the dependencies of ``dependant``, at any depth."""
    stack = list(dependant.dependencies)
    while stack:
        found = stack.pop()
        if found.call is call:
            return True
        stack.extend(found.dependencies)
    return False


class StrictJsonRoute(APIRoute):
    """A route whose caller is checked, then whose JSON body passes the edge's checks (see the
    module), before FastAPI reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        from typestrict_pipeline.api.deps import authenticate, get_workspace

        handler = super().get_route_handler()
        if self.body_field is None:
            return handler
        keyed = _needs(self.dependant, get_workspace)

        async def strict(request: Request) -> Response:
            if keyed:  # the key's store read and digest: in a thread too
                await run_in_threadpool(authenticate, request)
            content_type = request.headers.get("content-type")
            body = await request.body()
            if body:
                if not is_json_media_type(content_type):
                    raise _unsupported(content_type)
                charset = foreign_charset(content_type)
                if charset is not None:
                    raise _foreign_charset(charset)
                try:
                    request._json = await run_in_threadpool(decode_body, body)
                except InputError as exc:
                    raise ApiError(422, "invalid_input",
                                   f"{exc} The schema is at /v1/openapi.json") from None
            return await handler(request)

        return strict


def api_router(**options: Any) -> APIRouter:
    """An ``APIRouter`` of :class:`StrictJsonRoute` routes (every ``/v1`` router)."""
    return APIRouter(route_class=StrictJsonRoute, **options)


__all__ = ["StrictJsonRoute", "api_router", "decode_body", "foreign_charset", "is_json_media_type"]
