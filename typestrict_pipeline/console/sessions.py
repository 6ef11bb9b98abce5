"""Console sessions: a workspace key, typed once into the sign-in form, exchanged for a session.

Plain typed Python over the store (no FastAPI); ``console/web.py`` turns a session into a cookie.

* **The key is used once.** :func:`sign_in` checks it exactly as the API does
  (:func:`~typestrict_pipeline.api.keys.workspace_for_key`) and returns a new session token:
  32 random bytes (256 bits from :mod:`secrets`), URL-safe base64. The key is never stored in
  the session, never put in the cookie, a URL or a log.
* **Only the token's SHA-256 is stored** (table ``console_sessions``), like API keys: a leaked
  store holds no usable session.
* **Expiry.** A session ends :data:`SESSION_MAX_AGE` after sign-in whatever happens, and earlier
  after :data:`SESSION_IDLE` without a request; also at sign-out, and as soon as the key it was
  opened with is revoked (every lookup joins the key's row).
* **CSRF.** Each session has one CSRF token, derived from the session token (HMAC-SHA-256 with
  the token as key): the server can recompute it, a page holds it, another site cannot read
  either. :func:`csrf_matches` compares in constant time.

Schema: Alembic branch ``console`` (``console_0001_sessions``).

>>> token = "A" * 43
>>> csrf_matches(token, csrf_token(token)), csrf_matches(token, "nope")
(True, False)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Engine, Index, String, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from typestrict_pipeline.api.keys import ApiKeyRow, parse_key, workspace_for_key
from typestrict_pipeline.store import Base, UTCDateTime, session_scope, utcnow

SESSION_MAX_AGE = dt.timedelta(hours=8)
"""A session ends this long after sign-in, however active (a working day)."""
SESSION_IDLE = dt.timedelta(hours=1)
"""A session ends after this long without a request."""
_TOUCH_EVERY = dt.timedelta(minutes=1)  # last_seen_at is written at most once a minute


class ConsoleSessionRow(Base):
    """One signed-in browser (the token itself is never stored, only its SHA-256)."""

    __tablename__ = "console_sessions"
    __table_args__ = (Index("ix_console_sessions_expires_at", "expires_at"),)

    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(200))
    key_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


@dataclass(frozen=True)
class ConsoleSession:
    """A live session as a request sees it.

    Attributes:
        workspace_id: the workspace of the key it was opened with.
        key_id: that key's id (never its secret).
        csrf: the CSRF token every form of this session carries.
        expires_at: when it ends at the latest (sooner when idle for :data:`SESSION_IDLE`).
    """

    workspace_id: str
    key_id: str
    csrf: str
    expires_at: dt.datetime


@dataclass(frozen=True)
class NewSession:
    """A session just opened: ``token`` goes into the cookie and nowhere else."""

    token: str
    session: ConsoleSession


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def csrf_token(token: str) -> str:
    """The CSRF token of the session whose token is ``token`` (64 hex characters).

    >>> len(csrf_token("x")), csrf_token("x") == csrf_token("x"), csrf_token("x") == csrf_token("y")
    (64, True, False)
    """
    return hmac.new(token.encode("utf-8"), b"typestrict-console-csrf-v1", hashlib.sha256).hexdigest()


def csrf_matches(token: str, given: str | None) -> bool:
    """Whether ``given`` is the session's CSRF token (constant-time comparison)."""
    if not given or len(given) > 200:
        return False
    return hmac.compare_digest(csrf_token(token).encode("ascii"), given.encode("utf-8", "replace"))


def sign_in(engine: Engine, key: str, *, now: dt.datetime | None = None) -> NewSession | None:
    """Open a session with an API key; None when the key is not a valid, unrevoked key.

    The reason a key is refused is never told apart (the same rule as the API's 401). Expired
    sessions are removed on the way.

    Args:
        engine: the domain store.
        key: the workspace key as typed (surrounding spaces are ignored).
        now: the time (tests); default now.
    """
    key = key.strip()
    workspace = workspace_for_key(engine, key) if len(key) <= 200 else None
    parsed = parse_key(key)
    if workspace is None or parsed is None:
        return None
    at = now or utcnow()
    token = secrets.token_urlsafe(32)
    expires = at + SESSION_MAX_AGE
    with session_scope(engine) as s:
        s.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.expires_at <= at))
        s.add(ConsoleSessionRow(token_sha256=_digest(token), workspace_id=workspace, key_id=parsed[0],
                                created_at=at, last_seen_at=at, expires_at=expires))
    return NewSession(token, ConsoleSession(workspace, parsed[0], csrf_token(token), expires))


def session_for(engine: Engine, token: str | None, *, now: dt.datetime | None = None) -> ConsoleSession | None:
    """The live session of ``token``, else None (unknown, signed out, expired, idle, key revoked).

    A live session's idle clock is reset (written at most once a minute).
    """
    if not token or len(token) > 100:
        return None
    at = now or utcnow()
    with session_scope(engine) as s:
        found = s.execute(
            select(ConsoleSessionRow, ApiKeyRow.revoked_at)
            .join(ApiKeyRow, ApiKeyRow.key_id == ConsoleSessionRow.key_id, isouter=True)
            .where(ConsoleSessionRow.token_sha256 == _digest(token))
        ).first()
        if found is None:
            return None
        row, revoked_at = found
        if revoked_at is not None or row.expires_at <= at or row.last_seen_at + SESSION_IDLE <= at:
            s.delete(row)
            return None
        if at - row.last_seen_at >= _TOUCH_EVERY:
            row.last_seen_at = at
        return ConsoleSession(row.workspace_id, row.key_id, csrf_token(token), row.expires_at)


def sign_out(engine: Engine, token: str | None) -> bool:
    """End the session of ``token``; False when there was none (already ended)."""
    if not token or len(token) > 100:
        return False
    with session_scope(engine) as s:
        done = s.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.token_sha256 == _digest(token)))
        return bool(getattr(done, "rowcount", 0))


__all__ = ["SESSION_IDLE", "SESSION_MAX_AGE", "ConsoleSession", "ConsoleSessionRow", "NewSession",
           "csrf_matches", "csrf_token", "session_for", "sign_in", "sign_out"]
