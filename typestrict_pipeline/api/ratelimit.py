"""Rate limits per API key: one token bucket per key, so one workspace cannot starve another.

Each key has a bucket of ``burst`` tokens, refilled at ``rate_per_s`` tokens a second up to
``burst``; a request takes one token, and a request that finds none is answered ``429`` with
``Retry-After`` (whole seconds until a token is back), before any work is done for it. Buckets are
per key (a workspace's keys each have their own), checked after the key is verified, so a caller
who only knows a key's id cannot spend its tokens. Requests whose key is refused are limited per
client address with the same rule, so guessing keys is limited too. A signed-in console session
counts against its workspace's bucket.

The buckets live in the server process: with ``typestrict api --workers N`` each worker keeps its
own, so a key gets at most N times the rate (documented in ``docs/api.md``). At most
``max_buckets`` idle buckets are kept (the least recently used go first; a bucket that returns
starts full, which only ever favours the caller).

>>> clock = ManualClock()
>>> buckets = TokenBuckets(RateLimit(rate_per_s=1.0, burst=2), clock=clock)
>>> [buckets.take("k") for _ in range(3)]
[None, None, 1.0]
>>> clock.advance(1.0); buckets.take("k")
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from typestrict_pipeline.api.errors import ApiError

DEFAULT_RATE_PER_S = 10.0
DEFAULT_BURST = 30


@dataclass(frozen=True)
class RateLimit:
    """A token bucket's size and refill.

    Attributes:
        rate_per_s: tokens added a second (the sustained requests a second a key may make).
        burst: the bucket's size (requests a key may make at once after a pause).
    """

    rate_per_s: float = DEFAULT_RATE_PER_S
    burst: int = DEFAULT_BURST

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0) or self.burst < 1:
            raise ValueError(f"expected a positive rate and a burst of at least 1, got {self}")

    def describe(self) -> str:
        """``20 requests a second per key (bursts of 60)``."""
        return f"{self.rate_per_s:g} requests a second per key (bursts of {self.burst})"


class ManualClock:
    """A clock that moves only when told (seconds): for tests and benchmarks that count."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class TokenBuckets:
    """Token buckets by key (thread-safe).

    Args:
        limit: every bucket's size and refill.
        clock: seconds, monotonic (default :func:`time.monotonic`).
        max_buckets: most buckets kept.
    """

    def __init__(self, limit: RateLimit, *, clock: Callable[[], float] = time.monotonic,
                 max_buckets: int = 100_000) -> None:
        self.limit = limit
        self.clock = clock
        self.max_buckets = max_buckets
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> float | None:
        """Take a token for ``key``: None when allowed, else the seconds until one is back."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (float(self.limit.burst), now))
            tokens = min(float(self.limit.burst), tokens + max(0.0, now - at) * self.limit.rate_per_s)
            wait = None
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.limit.rate_per_s
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_buckets:
                self._buckets.popitem(last=False)
            return wait

    def check(self, key: str) -> None:
        """Take a token for ``key`` or raise the ``429``.

        Raises:
            ApiError: 429 ``rate_limited`` with ``Retry-After`` (whole seconds, at least 1).
        """
        wait = self.take(key)
        if wait is None:
            return
        seconds = max(1, math.ceil(wait))
        raise ApiError(
            429, "rate_limited",
            f"expected at most {self.limit.describe()}, got more from this "
            f"{'key' if key.startswith('key:') else 'caller'}. Retry after {seconds} s (the "
            "Retry-After header says when); spread the requests out or use fewer at once",
            headers={"Retry-After": str(seconds)},
        )




RATE_CHECKED = "typestrict.rate_checked"
"""Scope key set by :class:`RateLimitMiddleware` when it took the request's token already."""
KEY_CHECKED = "typestrict.key_checked"
"""Scope key set with it: the :class:`~typestrict_pipeline.api.keys.KeyCheck` of the request's key
(verified in the last seconds, :meth:`KeyVerifier.check_known`), so it is not judged twice."""


class RateLimitMiddleware:
    """Refuse a key's request over its limit before it enters the application.

    For a request whose key was verified in the last seconds (:meth:`KeyVerifier.check_known`:
    no store read, nothing that blocks the event loop), the token is taken here and a refused
    request is answered ``429`` at once: a flood of refused requests costs a digest each, not a
    trip through routing, dependencies and a worker thread, so it does not queue ahead of other
    workspaces' requests. Any other request goes on, and its key's check and token are taken by
    the route's dependency as usual.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith("/v1/"):
            ctx = getattr(getattr(scope.get("app"), "state", None), "ctx", None)
            sent = [v for k, v in scope.get("headers", []) if k == b"authorization"]
            header = sent[0] if len(sent) == 1 else None  # two: the route's 401 (api.deps.get_workspace)
            if ctx is not None and ctx.limiter is not None and header is not None:
                scheme, _, value = header.decode("latin-1").strip().partition(" ")
                checked = ctx.keys.check_known(value.strip()) if scheme.lower() == "bearer" else None
                if checked is not None and checked.key_id is not None:
                    try:
                        ctx.limiter.check(f"key:{checked.key_id}")
                    except ApiError as refused:
                        await _send_error(send, refused)
                        return
                    state = scope.setdefault("state", {})
                    state[RATE_CHECKED] = True
                    state[KEY_CHECKED] = checked
        await self.app(scope, receive, send)


async def _send_error(send: Any, error: ApiError) -> None:
    import json

    from typestrict_pipeline.api.errors import error_body

    body = json.dumps(error_body(error.code, str(error))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["DEFAULT_BURST", "DEFAULT_RATE_PER_S", "KEY_CHECKED", "RATE_CHECKED", "ManualClock", "RateLimit",
           "RateLimitMiddleware", "TokenBuckets"]
