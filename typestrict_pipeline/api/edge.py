"""The API's edge for JSON bodies: the media type, strict decoding, exact numbers.

Every ``/v1`` route that takes a JSON body is an :class:`StrictJsonRoute` (routers are made by
:func:`api_router`). Before FastAPI reads the body:

* the caller's API key is checked and its request token taken (the route's own
  :func:`~typestrict_pipeline.api.deps.get_workspace`, run once): a caller without a valid key, or
  over its rate limit, is answered ``401``/``429`` before one byte of the body is read or decoded;
* each query parameter may come once, and a whole number is written in decimal digits (``100``;
  ``1.0``, ``+5`` or ``1e3`` are refused with ``422``: :func:`query_problem`);
* a body of more than 64 KiB is decoded in a worker thread, never on the server's event loop, at
  most two at once (:data:`LARGE_DECODES`): a large body delays only its own answer and other
  large ones, never other requests;
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
import re
import typing
from collections.abc import Callable, Coroutine, Mapping
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Path, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams

from typestrict_pipeline.api.errors import API_FIX, ApiError, validation_message
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

    Every ``charset`` parameter counts, not the first only: ``charset=utf-8;charset=latin-1`` is
    not UTF-8 (which one the client meant is ambiguous).

    >>> foreign_charset("application/json; charset=utf-8; charset=latin-1")
    'latin-1'
    """
    if not value:
        return None
    message = email.message.Message()
    message["content-type"] = value
    for name, charset in message.get_params(failobj=[])[1:]:
        if name.strip().lower() == "charset" and charset.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return charset.strip()
    return None


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


def check_content_coding(request: Request) -> None:
    """Refuse (``415``, with ``Accept-Encoding: identity``) a request whose body is sent with a
    content coding (``Content-Encoding: gzip``, ``br`` ...): the API reads bodies as sent, so a
    compressed JSON body would be refused as "not UTF-8" and a compressed upload stored compressed
    under its plain name. Every route that reads a body calls it before reading one byte.

    Raises:
        ApiError: a ``Content-Encoding`` other than ``identity``.
    """
    codings = [c.strip() for c in ",".join(request.headers.getlist("content-encoding")).split(",")]
    sent = [c for c in codings if c and c.lower() != "identity"]
    if sent:
        raise ApiError(415, "unsupported_media_type",
                       f"expected a body sent as is (no Content-Encoding), got 'Content-Encoding: "
                       f"{', '.join(sent)[:60]}'. Send the body uncompressed, without a "
                       "Content-Encoding header", headers={"Accept-Encoding": "identity"})


def _dependants(dependant: Dependant) -> list[Dependant]:
    """``dependant`` and its dependencies, at any depth."""
    found, stack = [], [dependant]
    while stack:
        one = stack.pop()
        found.append(one)
        stack.extend(one.dependencies)
    return found


def query_params(dependant: Dependant) -> dict[str, bool]:
    """The route's query parameters: name -> whether it is a whole number."""
    params: dict[str, bool] = {}
    for one in _dependants(dependant):
        for param in one.query_params:
            annotation = param.field_info.annotation
            params[param.alias] = annotation is int or int in typing.get_args(annotation)
    return params


_WHOLE = re.compile(r"-?[0-9]+")


def query_problem(query: QueryParams, params: Mapping[str, bool], *, fix: str = API_FIX,
                  only_these: bool = False) -> str | None:
    """What is wrong with a request's query, by the one rule of every route (the API's and the
    console's, each with its own ``fix``): each parameter at most once, and a whole number written in decimal digits (``100``; not ``1.0``, ``+5``, ``1e3``
    nor `` 5``), worded as the schema's refusals are (:func:`validation_message`); with
    ``only_these`` (the API's routes, whose bodies refuse an unknown field too), no parameter
    the route does not take: ``?limt=5`` answered the default page as if it were read. None when
    nothing is.

    >>> query_problem(QueryParams("limit=%2B5"), {"limit": True})
    "limit (in the query): expected a whole number, got '+5'. Fix the request (the schema is at /v1/openapi.json)"
    >>> query_problem(QueryParams("limit=1&limit=2"), {"limit": True})
    "limit (in the query): expected it once (a repeated parameter is ambiguous), got ['1', '2']. Fix the request (the schema is at /v1/openapi.json)"
    >>> query_problem(QueryParams("limit=20&offset=0"), {"limit": True, "offset": True})
    >>> query_problem(QueryParams("limt=5"), {"limit": True, "offset": True}, only_these=True)
    "limt (in the query): expected one of the route's query parameters (limit, offset), got '5'. Fix the request (the schema is at /v1/openapi.json)"
    >>> query_problem(QueryParams("v=2"), {}, only_these=True)
    "v (in the query): expected no query parameter (the route takes none), got '2'. Fix the request (the schema is at /v1/openapi.json)"
    """
    if only_these:
        for name in dict.fromkeys(query.keys()):
            if name not in params:
                takes = (f"one of the route's query parameters ({', '.join(params)})" if params
                         else "no query parameter (the route takes none)")
                return validation_message([{"loc": ("query", name), "input": query.get(name, "")[:40],
                                            "msg": takes}], fix=fix)
    for name, whole in params.items():
        values = query.getlist(name)
        if len(values) > 1:
            return validation_message([{"loc": ("query", name), "input": [v[:40] for v in values[:5]],
                                        "msg": "It once (a repeated parameter is ambiguous)"}], fix=fix)
        if whole and values and not _WHOLE.fullmatch(values[0]):
            return validation_message([{"type": "int_parsing", "loc": ("query", name), "input": values[0][:40]}],
                                      fix=fix)
    return None


class StrictJsonRoute(APIRoute):
    """A route whose caller is checked, then its query (:func:`query_problem`) and its JSON body
    (see the module), before FastAPI reads them; a route that declares
    :func:`~typestrict_pipeline.api.idempotency.idempotency_key` then runs under its
    ``Idempotency-Key`` (:func:`~typestrict_pipeline.api.idempotency.run_idempotent`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        from typestrict_pipeline.api.deps import WORKSPACE_CHECKED, authenticate, get_workspace
        from typestrict_pipeline.api.idempotency import idempotency_key, run_idempotent

        handler = super().get_route_handler()
        params = query_params(self.dependant)
        keyed = any(one.call is get_workspace for one in _dependants(self.dependant))
        idempotent = keyed and any(one.call is idempotency_key for one in _dependants(self.dependant))

        async def strict(request: Request) -> Response:
            if self.body_field is None and not request.scope.get("query_string"):
                return await handler(request)  # nothing to check before the route's own checks
            if keyed:  # the key's store read and digest: in a thread too
                await run_in_threadpool(authenticate, request)
            problem = query_problem(request.query_params, params, only_these=True)
            if problem is not None:
                raise ApiError(422, "invalid_input", problem)
            if self.body_field is not None:
                await _decode_json(request)
            if idempotent:  # docs/api.md, "Retrying safely: Idempotency-Key"
                return await run_idempotent(request, request.app.state.ctx.engine,
                                            request.scope["state"][WORKSPACE_CHECKED], handler)
            return await handler(request)

        return strict


INLINE_DECODE_BYTES = 64 * 1024
"""A body up to this size is decoded on the event loop (a millisecond at most); a larger one in a
worker thread, at most :data:`LARGE_DECODES` at once."""
LARGE_DECODES = 2
"""Large bodies decoded at once per server process: more wait for their turn without holding a
thread, so large bodies never take the threads every other request's key check needs."""


def _decoders(request: Request) -> anyio.CapacityLimiter:
    """The server's limiter of large decodes (made on its event loop, kept on the application)."""
    limiter = getattr(request.app.state, "json_decoders", None)
    if not isinstance(limiter, anyio.CapacityLimiter):
        limiter = anyio.CapacityLimiter(LARGE_DECODES)
        request.app.state.json_decoders = limiter
    return limiter


def _check_json_type(content_type: str | None) -> None:
    """Refuse (``415``) a body whose ``Content-Type`` is not JSON, or not UTF-8."""
    if not is_json_media_type(content_type):
        raise _unsupported(content_type)
    charset = foreign_charset(content_type)
    if charset is not None:
        raise _foreign_charset(charset)


def _declares_body(request: Request) -> bool:
    """Whether the request's head announces a body (a ``Content-Length`` other than 0, or a
    chunked one): its media type is then checked before one byte of it is read, so a body the
    route would refuse (``text/plain``, ``charset=latin-1``) is neither waited for (up to the
    body deadline), nor held (up to 16 MiB), nor asked for with ``100 Continue``. A request
    without a body keeps its own answer (the schema's "expected a value")."""
    length = request.headers.get("content-length")
    return (length is not None and length.strip().strip("0") != "") or "transfer-encoding" in request.headers


async def _decode_json(request: Request) -> None:
    """The request's JSON body checked and decoded (in a worker thread) for FastAPI to read."""
    check_content_coding(request)
    sent = request.headers.getlist("content-type")
    if len(sent) > 1:  # the first was read: 'application/json' then 'text/plain' was JSON, reversed a 415
        raise ApiError(415, "unsupported_media_type",
                       f"expected one Content-Type header, got {len(sent)} "
                       f"({', '.join(repr(v[:40]) for v in sent[:3])}). Send the body as JSON with "
                       "one 'Content-Type: application/json' header")
    content_type = sent[0] if sent else None
    if _declares_body(request):  # refused on its headers: none of its body is read (or asked for)
        _check_json_type(content_type)
    body = await request.body()
    if not body:
        return
    _check_json_type(content_type)
    try:
        if len(body) <= INLINE_DECODE_BYTES:
            request._json = decode_body(body)
        else:
            request._json = await anyio.to_thread.run_sync(decode_body, body, limiter=_decoders(request))
    except InputError as exc:
        raise ApiError(422, "invalid_input", f"{exc} The schema is at /v1/openapi.json") from None


PathId = Annotated[str, Path(description=(
    "The object's id as the API prints it. Any other spelling (a numbered object's id with a "
    "leading zero, a sign, a space or other digits: `values.row_id`) names no object: 404, like "
    "an id that does not exist."))]
"""The type of every object's id in a path (API and console): no length or pattern of its own,
so that no spelling is a 422 where another is a 404; each route's lookup is the one judge."""


def api_router(**options: Any) -> APIRouter:
    """An ``APIRouter`` of :class:`StrictJsonRoute` routes (every ``/v1`` router)."""
    return APIRouter(route_class=StrictJsonRoute, **options)


__all__ = ["PathId", "StrictJsonRoute", "api_router", "check_content_coding", "decode_body", "foreign_charset",
           "is_json_media_type", "query_params", "query_problem"]
