"""Per-workspace API keys: created once, stored hashed, compared in constant time.

A key is ``tsk_<key_id>_<secret>``: ``key_id`` (16 hex characters) names the row, ``secret`` is
32 random bytes (URL-safe base64, 256 bits from :mod:`secrets`). Only SHA-256 of the secret is
stored, so a leaked store does not leak usable keys; the plain key is returned once, by
:func:`create_api_key`, and never logged or shown again. :func:`workspace_for_key` finds the
row by ``key_id`` and compares the secret's digest with :func:`hmac.compare_digest`.

Schema: Alembic branch ``api`` (``api_0001_keys``).

>>> parse_key("tsk_0123456789abcdef_" + "A" * 43)[0]
'0123456789abcdef'
>>> parse_key("Bearer nope") is None
True
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, Index, String, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from typestrict_pipeline.errors import InputError, NotFoundError
from typestrict_pipeline.store import Base, UTCDateTime, session_scope, utcnow

KEY_PREFIX = "tsk_"
_KEY = re.compile(r"tsk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_KEY_ID = re.compile(r"[0-9a-f]{16}")


class ApiKeyRow(Base):
    """One API key of one workspace (the secret itself is never stored)."""

    __tablename__ = "api_keys"
    __table_args__ = (Index("ix_api_keys_workspace_id", "workspace_id"),)

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(200))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    label: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


@dataclass(frozen=True)
class ApiKeyInfo:
    """A key as listed: never its secret."""

    key_id: str
    workspace_id: str
    label: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


@dataclass(frozen=True)
class NewApiKey:
    """A key just created: ``key`` is the only time the plain key exists outside its holder."""

    info: ApiKeyInfo
    key: str


def check_workspace_id(workspace_id: str) -> str:
    """Refuse a workspace id that breaks the one rule of workspace ids
    (:func:`typestrict_pipeline.values.workspace_id`).

    >>> check_workspace_id("demo")
    'demo'
    """
    from typestrict_pipeline.values import workspace_id as one_rule

    return one_rule(workspace_id)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def parse_key(text: str) -> tuple[str, str] | None:
    """``(key_id, secret)`` of a well-formed key, else None."""
    match = _KEY.fullmatch(text)
    if match is None:
        return None
    return match.group(1), match.group(2)


def _info(row: ApiKeyRow) -> ApiKeyInfo:
    return ApiKeyInfo(row.key_id, row.workspace_id, row.label, row.created_at, row.revoked_at)


def _spelled_otherwise(session: Session, workspace_id: str) -> str | None:
    """The id of another workspace that differs from ``workspace_id`` only in letter case."""
    found: str | None = session.execute(
        select(ApiKeyRow.workspace_id).where(
            func.lower(ApiKeyRow.workspace_id) == workspace_id.lower(),
            ApiKeyRow.workspace_id != workspace_id,
        ).order_by(ApiKeyRow.created_at).limit(1)
    ).scalar_one_or_none()
    return found


def create_api_key(engine: Engine, workspace_id: str, *, label: str = "") -> NewApiKey:
    """Create a key for ``workspace_id``; the returned ``key`` is shown once and never stored.

    Raises:
        InputError: ``workspace_id`` breaks the one rule of workspace ids, or a key (revoked or
            not) already belongs to a workspace spelled the same in other letter case: each
            workspace has a folder of files named by its id, and on a file system that ignores
            case (macOS, Windows) ``Acme`` and ``acme`` would share one.
    """
    check_workspace_id(workspace_id)
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    now = utcnow()
    with session_scope(engine) as s:
        other = _spelled_otherwise(s, workspace_id)
        if other is not None:
            raise InputError(
                f"a workspace id that no other workspace spells in other letter case (workspace "
                f"'{other}' exists)", repr(workspace_id),
                f"create the key for '{other}' if you mean that workspace, or choose another id: "
                "each workspace's files are kept in a folder named by its id, and on a file system "
                "that ignores case both would share one")
        row = ApiKeyRow(key_id=key_id, workspace_id=workspace_id, secret_sha256=_digest(secret),
                        label=label[:200], created_at=now, revoked_at=None)
        s.add(row)
        s.flush()
        info = _info(row)
    return NewApiKey(info=info, key=f"{KEY_PREFIX}{key_id}_{secret}")


def key_id_of(text: str) -> str:
    """The key id in ``text``: a key id (16 hex characters) or a whole key. Never echoes it.

    >>> key_id_of("0123456789abcdef"), key_id_of("tsk_0123456789abcdef_" + "A" * 43)
    ('0123456789abcdef', '0123456789abcdef')
    >>> key_id_of("tsk_0123456789abcdef_secret")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a key id (the 16 hex characters after tsk_) or a whole key (tsk_<id>_<43 characters>), got a value of 27 characters that is neither (not shown: it may hold a secret). Copy the id from `typestrict api-key list WORKSPACE`.
    """
    value = text.strip()
    if _KEY_ID.fullmatch(value):
        return value
    parsed = parse_key(value)
    if parsed is not None:
        return parsed[0]
    raise InputError(
        "a key id (the 16 hex characters after tsk_) or a whole key (tsk_<id>_<43 characters>)",
        f"a value of {len(text)} characters that is neither (not shown: it may hold a secret)",
        "copy the id from `typestrict api-key list WORKSPACE`",
    )


def revoke_api_key(engine: Engine, key_or_id: str) -> ApiKeyInfo:
    """Revoke a key by its id (the 16 hex characters after ``tsk_``) or by the whole key;
    idempotent. No message ever shows what was given beyond the id.

    Raises:
        InputError: neither an id nor a key.
        NotFoundError: no key has that id.
    """
    key_id = key_id_of(key_or_id)
    with session_scope(engine) as s:
        row = s.get(ApiKeyRow, key_id)
        if row is None:
            raise NotFoundError(
                f"expected an API key with id {key_id}, got none. List the workspace's keys "
                "with `typestrict api-key list WORKSPACE` and pass one of their ids"
            )
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        return _info(row)


def list_api_keys(engine: Engine, workspace_id: str) -> list[ApiKeyInfo]:
    """A workspace's keys, oldest first (ids and labels only)."""
    with session_scope(engine) as s:
        rows = s.scalars(select(ApiKeyRow).where(ApiKeyRow.workspace_id == workspace_id)
                         .order_by(ApiKeyRow.created_at, ApiKeyRow.key_id)).all()
        return [_info(r) for r in rows]


class KeyState(enum.Enum):
    """What a presented key is.

    Attributes:
        VALID: issued, its secret matches, not revoked.
        MALFORMED: not of the form ``tsk_<16 hex>_<43 characters>`` (no key of this server).
        UNKNOWN: well formed, but no key has that id, or its secret does not match. The two are
            one state on purpose: telling them apart would tell a caller which ids exist.
        REVOKED: issued and revoked; only said to the holder of the whole key (the secret must
            match), so an id alone never tells whether its key was revoked.
    """

    VALID = "valid"
    MALFORMED = "malformed"
    UNKNOWN = "unknown"
    REVOKED = "revoked"


@dataclass(frozen=True)
class KeyCheck:
    """A presented key's state, its workspace when valid, when it was revoked when revoked."""

    state: KeyState
    workspace_id: str | None = None
    revoked_at: dt.datetime | None = None
    key_id: str | None = None


@dataclass(frozen=True)
class _Stored:
    """What the store holds of one key id (never its secret: only the secret's digest)."""

    secret_sha256: str
    workspace_id: str
    revoked_at: dt.datetime | None


def _lookup(engine: Engine, key_id: str) -> _Stored | None:
    with session_scope(engine) as s:
        row = s.get(ApiKeyRow, key_id) if key_id else None
        return None if row is None else _Stored(row.secret_sha256, row.workspace_id, row.revoked_at)


def _judge(key: str, lookup: Callable[[str], _Stored | None]) -> KeyCheck:
    """The same work whatever ``key`` is: one lookup, one digest, one constant-time comparison."""
    parsed = parse_key(key)
    key_id, secret = parsed if parsed is not None else ("", "")
    stored = lookup(key_id) if key_id else None
    ok = hmac.compare_digest(stored.secret_sha256 if stored is not None else "0" * 64, _digest(secret))
    if parsed is None:
        return KeyCheck(KeyState.MALFORMED)
    if stored is None or not ok:
        return KeyCheck(KeyState.UNKNOWN)
    if stored.revoked_at is not None:
        return KeyCheck(KeyState.REVOKED, revoked_at=stored.revoked_at)
    return KeyCheck(KeyState.VALID, workspace_id=stored.workspace_id, key_id=key_id)


def check_key(engine: Engine, key: str) -> KeyCheck:
    """What ``key`` is (:class:`KeyState`), read from the store, paying the same work whatever it is.

    The secret's digest is compared with :func:`hmac.compare_digest`; a malformed key or an
    unknown id still pays one digest, one read and one comparison, so the time taken does not
    tell whether an id exists either.
    """
    return _judge(key, lambda key_id: _lookup(engine, key_id))


class KeyVerifier:
    """:func:`check_key` with what the store said about each key id kept for ``ttl_s`` seconds
    (found or not: an unknown id is kept like a known one, so neither answers faster), at most
    ``max_entries`` ids. The API server checks every request's key with it: a busy key costs one
    digest, not one read of the store, and answering its 429s stays cheap. A key revoked in the
    store is refused within ``ttl_s`` seconds.

    >>> import sqlalchemy
    >>> verifier = KeyVerifier(sqlalchemy.create_engine("sqlite://"), ttl_s=10.0)
    >>> verifier.check("not a key").state
    <KeyState.MALFORMED: 'malformed'>
    """

    def __init__(self, engine: Engine, *, ttl_s: float = 10.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._seen: OrderedDict[str, tuple[float, _Stored | None]] = OrderedDict()
        self._lock = threading.Lock()

    def _lookup(self, key_id: str) -> _Stored | None:
        now = self.clock()
        with self._lock:
            hit = self._seen.get(key_id)
            if hit is not None and now - hit[0] < self.ttl_s:
                self._seen.move_to_end(key_id)
                return hit[1]
        stored = _lookup(self.engine, key_id)
        with self._lock:
            self._seen[key_id] = (now, stored)
            self._seen.move_to_end(key_id)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
        return stored

    def check(self, key: str) -> KeyCheck:
        """What ``key`` is (see :func:`check_key`)."""
        return _judge(key, self._lookup)

    def check_known(self, key: str) -> KeyCheck | None:
        """What ``key`` is when its id was looked up in the last ``ttl_s`` seconds, without reading
        the store (it never blocks: the server's event loop may call it); None otherwise."""
        parsed = parse_key(key)
        if parsed is None:
            return None
        now = self.clock()
        with self._lock:
            hit = self._seen.get(parsed[0])
        if hit is None or now - hit[0] >= self.ttl_s:
            return None
        return _judge(key, lambda _: hit[1])


def workspace_for_key(engine: Engine, key: str) -> str | None:
    """The workspace of a valid, unrevoked key, else None (:func:`check_key` says why)."""
    return check_key(engine, key).workspace_id
