"""``Idempotency-Key``: a client retries a request that charges or spends without doing it twice.

The one rule (docs/api.md, "Retrying safely: Idempotency-Key"), for the routes that declare the
:func:`idempotency_key` dependency (``POST /v1/trainings``, ``/v1/backtests``, ``/v1/studies``):

* the header is optional; when sent, once, 1 to 64 characters of ``A-Z a-z 0-9 _ -``
  (:func:`parse_key`; anything else is a ``422``);
* a key belongs to the caller's workspace: another workspace's same key is another key;
* the first request with a key **claims** it (a row of ``api_idempotency``), does its work, and
  **stores its answer** (status, body, headers) when it succeeded (2xx); a refusal or an error
  **releases** the key (the row is deleted), so the corrected request may use it again;
* the same key with the same request (method, path and :func:`fingerprint` of the JSON body)
  gets the stored answer again, byte for byte, with ``Idempotent-Replayed: true``; nothing is
  created or charged again;
* the same key with another request: ``422 idempotency_key_reused``;
* the same key while the first is being worked on: ``409 idempotency_key_in_use`` with
  ``Retry-After``; a claim older than :data:`CLAIM_TIMEOUT` (its process died mid-work) is taken
  over, so no key is blocked for good;
* a row is forgotten :data:`KEEP_FOR` (24 hours) after its claim: the key is then a new request.

>>> fingerprint("POST", "/v1/x", {"b": 1, "a": [True, None]}) == fingerprint("POST", "/v1/x", {"a": [True, None], "b": 1})
True
>>> fingerprint("POST", "/v1/x", {"a": 1}) == fingerprint("POST", "/v1/y", {"a": 1})
False
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

import anyio
from fastapi import Header, Request, Response
from sqlalchemy import Engine, Index, Integer, LargeBinary, String, Text, delete, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Mapped, mapped_column
from starlette.concurrency import run_in_threadpool

from typestrict_pipeline.api.errors import ApiError, _shown
from typestrict_pipeline.store import Base, UTCDateTime, session_scope, utcnow

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
KEEP_FOR = dt.timedelta(hours=24)
"""How long a key's answer is kept: a key used again later is a new request."""
CLAIM_TIMEOUT = dt.timedelta(minutes=5)
"""How long a claim blocks its key without an answer: a request that has not answered within it
(its process died, its store connection dropped mid-work) is given up, and the key's next request
takes the claim over. Above the slowest create (a training's split of a 200,000-row dataset takes
seconds) and above the server's body deadline (``body_timeout_s``, 300 s), after which the
request has been answered or dropped."""
log = logging.getLogger("typestrict.api")
_NOT_STORED = frozenset({"content-length", "date", "server", "set-cookie"})


class IdempotencyRow(Base):
    """One key of one workspace: claimed (``completed_at`` null) or answered."""

    __tablename__ = "api_idempotency"
    __table_args__ = (Index("ix_api_idempotency_claimed_at", "claimed_at"),)

    workspace_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    claim_id: Mapped[str] = mapped_column(String(32))
    method: Mapped[str] = mapped_column(String(10))
    path: Mapped[str] = mapped_column(String(200))
    fingerprint: Mapped[str] = mapped_column(String(64))
    claimed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    completed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    status: Mapped[int | None] = mapped_column(Integer(), nullable=True)
    body: Mapped[bytes | None] = mapped_column(LargeBinary(), nullable=True)
    headers: Mapped[str | None] = mapped_column(Text(), nullable=True)


def idempotency_key(
    idempotency_key: Annotated[str | None, Header(
        alias=HEADER, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
        description=("Optional: retry this request safely. 1 to 64 characters of A-Z a-z 0-9 _ -, "
                     "a new one per request (a UUID4). The same key and the same request within 24 "
                     "hours get the first answer again (header Idempotent-Replayed: true), nothing "
                     "is created or charged twice; docs/api.md, \"Retrying safely\"."))] = None,
) -> str | None:
    """The route's ``Idempotency-Key`` (declared for the schema; checked and applied by
    :func:`run_idempotent`, which the route's edge runs around it)."""
    return idempotency_key


def parse_key(sent: list[str]) -> str | None:
    """The request's key: None without the header.

    >>> parse_key([]), parse_key(["a-b_C9"])
    (None, 'a-b_C9')
    >>> parse_key(["a b"])
    Traceback (most recent call last):
    ...
    typestrict_pipeline.api.errors.ApiError: Idempotency-Key (in the headers): expected 1 to 64 characters of A-Z a-z 0-9 _ -, got 'a b'. Send a new random key per request (a UUID4 is one)
    >>> parse_key(["k1", "k2"])
    Traceback (most recent call last):
    ...
    typestrict_pipeline.api.errors.ApiError: Idempotency-Key (in the headers): expected it once, got 2 Idempotency-Key headers. Send one key, once

    Raises:
        ApiError: ``422 invalid_input``: sent twice, empty, too long or another character.
    """
    if not sent:
        return None
    if len(sent) > 1:
        raise ApiError(422, "invalid_input",
                       f"{HEADER} (in the headers): expected it once, got {len(sent)} {HEADER} headers. "
                       "Send one key, once")
    if KEY_PATTERN.fullmatch(sent[0]) is None:
        got = "an empty value" if not sent[0] else _shown(sent[0])
        raise ApiError(422, "invalid_input",
                       f"{HEADER} (in the headers): expected 1 to 64 characters of A-Z a-z 0-9 _ -, "
                       f"got {got}. Send a new random key per request (a UUID4 is one)")
    return sent[0]


def canonical(value: Any) -> str:
    """A decoded JSON body written one way: keys sorted, no whitespace, text as UTF-8, numbers as
    the client wrote them (a fraction or an exponent is decoded as ``Decimal``, kept as written).

    >>> canonical({"b": [1, Decimal("0.10")], "a": "é", "c": None})
    '{"a":"é","b":[1,0.10],"c":null}'
    """
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{canonical(v)}"
                              for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def fingerprint(method: str, path: str, body: Any) -> str:
    """SHA-256 of the request's body, written :func:`canonical`-ly (a client that sends the same
    JSON with other whitespace or another key order sends the same request), with its method and
    path."""
    return hashlib.sha256(f"{method} {path}\n{canonical(body)}".encode()).hexdigest()


@dataclass(frozen=True)
class Stored:
    """A key's stored answer."""

    status: int
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Claim:
    """The request's claim of its key (:func:`claim`): its answer is stored under it, or it is released."""

    workspace_id: str
    key: str
    claim_id: str


def _ago(then: dt.datetime, now: dt.datetime) -> str:
    return f"{max(0, int((now - then).total_seconds()))} s ago"


def _in_use(key: str, got: str) -> ApiError:
    """The ``409`` of a key whose first request has not answered yet.

    >>> print(_in_use("k1", "it still being worked on (since 2 s ago)"))
    expected the first request with Idempotency-Key 'k1' to have answered, got it still being worked on (since 2 s ago). Retry after a moment: its answer is then replayed
    """
    return ApiError(409, "idempotency_key_in_use",
                    f"expected the first request with {HEADER} {key!r} to have answered, got {got}. "
                    "Retry after a moment: its answer is then replayed", headers={"Retry-After": "1"})


def claim(engine: Engine, workspace_id: str, key: str, method: str, path: str, digest: str,
          now: dt.datetime | None = None) -> Claim | Stored:
    """Claim ``key`` for this request (a :class:`Claim`), or the stored answer of the same request
    made before (a :class:`Stored`).

    Raises:
        ApiError: ``422 idempotency_key_reused`` (another request used the key), ``409
            idempotency_key_in_use`` (the same request is being worked on).
    """
    now = now or utcnow()
    mine = Claim(workspace_id, key, secrets.token_hex(16))
    row = IdempotencyRow(workspace_id=workspace_id, key=key, claim_id=mine.claim_id, method=method,
                         path=path, fingerprint=digest, claimed_at=now)
    with session_scope(engine) as s:  # forget this workspace's answers older than KEEP_FOR
        s.execute(delete(IdempotencyRow).where(IdempotencyRow.workspace_id == workspace_id,
                                               IdempotencyRow.claimed_at < now - KEEP_FOR))
    try:
        with session_scope(engine) as s:
            s.add(row)
        return mine
    except IntegrityError:
        pass  # the key is known: whose request, and in which state?
    with session_scope(engine) as s:
        found = s.get(IdempotencyRow, (workspace_id, key))
        if found is None:  # released (or forgotten) since: claim it afresh, unless another did
            s.add(row)
            try:
                s.flush()
            except IntegrityError:
                raise _in_use(key, "it being worked on again") from None
            return mine
        if (found.method, found.path, found.fingerprint) != (method, path, digest):
            other = " with another body" if (found.method, found.path) == (method, path) else ""
            raise ApiError(422, "idempotency_key_reused",
                           f"expected {HEADER} {key!r} again only with the request it was first used "
                           f"for ({found.method} {found.path}, {_ago(found.claimed_at, now)}), got "
                           f"{method} {path}{other}. Use a new key "
                           "for each new request (the same key only to retry the same request)")
        if found.completed_at is not None and found.status is not None and found.body is not None:
            return Stored(found.status, found.body, json.loads(found.headers or "{}"))
        if now - found.claimed_at < CLAIM_TIMEOUT:
            raise _in_use(key, f"it still being worked on (since {_ago(found.claimed_at, now)})")
        taken = s.execute(update(IdempotencyRow).where(
            IdempotencyRow.workspace_id == workspace_id, IdempotencyRow.key == key,
            IdempotencyRow.claim_id == found.claim_id, IdempotencyRow.completed_at.is_(None),
        ).values(claim_id=mine.claim_id, claimed_at=now).execution_options(synchronize_session=False))
        if getattr(taken, "rowcount", 0) != 1:  # another retry took it over first
            raise _in_use(key, "it being worked on again")
        return mine


def complete(engine: Engine, mine: Claim, status: int, body: bytes, headers: dict[str, str]) -> None:
    """Store the answer of the request that holds the claim."""
    with session_scope(engine) as s:
        s.execute(update(IdempotencyRow).where(
            IdempotencyRow.workspace_id == mine.workspace_id, IdempotencyRow.key == mine.key,
            IdempotencyRow.claim_id == mine.claim_id,
        ).values(status=status, body=body, headers=json.dumps(headers), completed_at=utcnow())
            .execution_options(synchronize_session=False))


def release(engine: Engine, mine: Claim) -> None:
    """Give the key back (the request was refused or failed): the next request with it is new."""
    with session_scope(engine) as s:
        s.execute(delete(IdempotencyRow).where(
            IdempotencyRow.workspace_id == mine.workspace_id, IdempotencyRow.key == mine.key,
            IdempotencyRow.claim_id == mine.claim_id).execution_options(synchronize_session=False))


def replay(stored: Stored) -> Response:
    """The stored answer again, byte for byte, marked as replayed."""
    return Response(content=stored.body, status_code=stored.status,
                    headers={**stored.headers, REPLAYED: "true"})


async def settle(step: Callable[..., None], engine: Engine, mine: Claim, *args: Any) -> None:
    """Store the answer (or release the key), trying again a moment later when the store is busy
    or unreachable; the work is done and answered whatever happens here: a claim that could not
    be settled is given up after :data:`CLAIM_TIMEOUT` (its key answers ``409`` until then)."""
    for attempt in range(3):
        try:
            await run_in_threadpool(step, engine, mine, *args)
            return
        except SQLAlchemyError as exc:
            log.warning("Idempotency-Key %r of workspace %r: %s failed (%s), attempt %d of 3",
                        mine.key, mine.workspace_id, step.__name__, type(exc).__name__, attempt + 1)
            if attempt < 2:
                await anyio.sleep(0.2 * (attempt + 1))


async def run_idempotent(request: Request, engine: Engine, workspace_id: str,
                         handler: Callable[[Request], Awaitable[Response]]) -> Response:
    """``handler(request)`` under the request's ``Idempotency-Key`` (none: as it is). The body
    must be decoded already (the route's edge keeps it on the request)."""
    key = parse_key(request.headers.getlist(HEADER))
    if key is None:
        return await handler(request)
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    body = getattr(request, "_json", None)
    digest = fingerprint(request.method, path, body)
    got = await run_in_threadpool(claim, engine, workspace_id, key, request.method, path[:200], digest)
    if isinstance(got, Stored):
        return replay(got)
    try:
        response = await handler(request)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await settle(release, engine, got)
        raise
    content = getattr(response, "body", None)
    with anyio.CancelScope(shield=True):
        if 200 <= response.status_code < 300 and isinstance(content, bytes):
            kept = {k: v for k, v in response.headers.items() if k.lower() not in _NOT_STORED}
            await settle(complete, engine, got, response.status_code, content, kept)
        else:
            await settle(release, engine, got)
    return response


__all__ = ["CLAIM_TIMEOUT", "HEADER", "KEEP_FOR", "REPLAYED", "Claim", "IdempotencyRow", "Stored",
           "canonical", "claim", "complete", "fingerprint", "idempotency_key", "parse_key", "release",
           "replay", "run_idempotent", "settle"]
