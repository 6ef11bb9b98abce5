"""Files served from disk with a strong ETag (the quoted SHA-256 of their bytes) and ``If-None-Match``.

A file's ETag is its SHA-256, never its size and modification time: two different audits can
have the same size and the same second. A digest the product recorded (an audit's, at settlement)
is used as it is; any other file's is computed once and kept, keyed by the file's
``(path, size, mtime_ns)`` (a changed file is hashed again), at most :data:`MAX_DIGESTS` of them.

Every answer says ``Cache-Control: private, no-cache`` for a workspace's file (a shared cache must
not keep it, and a browser must ask again, sending its ETag: an unchanged file is then a ``304``
with no body) and ``no-cache`` for a public one (the verifier).

A small file (at most :data:`MAX_KEPT_FILE` bytes) is read once, checked against its SHA-256 and
kept in memory (at most :data:`MAX_KEPT_BYTES` in all, least recently served dropped first), keyed
by its digest's key and the digest: a plain ``GET`` of it is then one send from memory, with no trip to the thread
pool per 64 KiB chunk. Range requests, ``HEAD`` and larger files are Starlette's
:class:`FileResponse` as before; a file whose bytes no longer match the digest is streamed as it
is, never kept.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.responses import (
    FileResponse,
    JSONResponse,
    MalformedRangeHeader,
    RangeNotSatisfiable,
    Response,
)
from starlette.types import Receive, Scope, Send

from typestrict_pipeline.api.errors import error_body

MAX_DIGESTS = 4096
PRIVATE = "private, no-cache"
PUBLIC = "no-cache"

MAX_KEPT_FILE = 4 << 20
"""The largest file kept in memory once served (bytes): a 2,000 × 20 audit is 1.8 MB."""
MAX_KEPT_BYTES = 64 << 20
"""All kept files together (bytes)."""

_DIGESTS: OrderedDict[tuple[str, int, int], str] = OrderedDict()
_KEPT: OrderedDict[tuple[str, int, int, str], bytes] = OrderedDict()
_kept_bytes = 0
_LOCK = threading.Lock()


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (``*``, a list, weak or strong: the weak
    comparison RFC 9110 asks of ``If-None-Match``).

    >>> etag_matches('W/"ab", "cd"', '"cd"'), etag_matches(None, '"cd"'), etag_matches("*", '"x"')
    (True, False, True)
    """
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def if_none_match(headers: Headers | list[tuple[bytes, bytes]]) -> str | None:
    """A request's ``If-None-Match``, every header line of it: the field is a list, and several
    lines are one list (RFC 9110 §5.3), so ``"x"`` then the file's ETag on two lines names the
    file (it was a ``200``: the first line only was read by the routes, the last by the known
    audit's fast path). None when none was sent.

    >>> if_none_match([(b"if-none-match", b'"x"'), (b"accept", b"*/*"), (b"if-none-match", b'"ab"')])
    '"x", "ab"'
    >>> if_none_match([]) is None
    True
    """
    if isinstance(headers, Headers):
        values = headers.getlist("if-none-match")
    else:
        values = [value.decode("latin-1") for name, value in headers if name == b"if-none-match"]
    return ", ".join(values) if values else None


def file_sha256(path: Path, stat: os.stat_result) -> str:
    """The SHA-256 of the file at ``path`` whose ``os.stat`` is ``stat``: read once per
    ``(path, size, mtime_ns)``, then kept (it reads the file: call it off the event loop)."""
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _LOCK:
        found = _DIGESTS.get(key)
        if found is not None:
            _DIGESTS.move_to_end(key)
            return found
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    sha = digest.hexdigest()
    with _LOCK:
        _DIGESTS[key] = sha
        while len(_DIGESTS) > MAX_DIGESTS:
            _DIGESTS.popitem(last=False)
    return sha


def _kept(key: tuple[str, int, int, str]) -> bytes | None:
    with _LOCK:
        data = _KEPT.get(key)
        if data is not None:
            _KEPT.move_to_end(key)
        return data


def kept_bytes(path: Path, stat: os.stat_result, sha256: str) -> bytes | None:
    """The bytes of the file at ``path`` (``os.stat`` ``stat``, SHA-256 ``sha256``) when they are
    kept in memory already (checked against the digest when they were read); None otherwise. It
    reads nothing: the event loop may call it."""
    return _kept((str(path), stat.st_size, stat.st_mtime_ns, sha256))


def read_kept(path: Path, stat: os.stat_result, sha256: str) -> bytes | None:
    """The bytes of the file at ``path`` (``os.stat`` ``stat``), kept for the next request, when
    they still have that size and SHA-256; None when they do not (it reads the file: call it off
    the event loop).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     f = Path(tmp) / "a.json"
    ...     _ = f.write_bytes(b"{}")
    ...     st = os.stat(f)
    ...     read_kept(f, st, hashlib.sha256(b"{}").hexdigest()), read_kept(f, st, "0" * 64)
    (b'{}', None)
    """
    global _kept_bytes
    key = (str(path), stat.st_size, stat.st_mtime_ns, sha256)
    found = _kept(key)
    if found is not None:
        return found
    with open(path, "rb") as handle:
        data = handle.read(MAX_KEPT_FILE + 1)
    if len(data) != stat.st_size or hashlib.sha256(data).hexdigest() != sha256:
        return None
    with _LOCK:
        if key not in _KEPT:
            _KEPT[key] = data
            _kept_bytes += len(data)
        while _kept_bytes > MAX_KEPT_BYTES:
            _, dropped = _KEPT.popitem(last=False)
            _kept_bytes -= len(dropped)
    return data


class _KeptFileResponse(FileResponse):
    """A :class:`FileResponse` whose plain ``GET`` of a small file is sent from memory in one
    piece (same status and headers); anything else is the parent's."""

    def __init__(self, path: Path, *, sha256: str, stat_result: os.stat_result, **kwargs: Any) -> None:
        super().__init__(path, stat_result=stat_result, **kwargs)
        self.sha256 = sha256

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stat = self.stat_result
        ranged = self._range_answer(scope)
        if isinstance(ranged, Response):
            await ranged(scope, receive, send)
            return
        scope = ranged
        plain = (scope["type"] == "http" and scope["method"] == "GET" and self.status_code == 200
                 and not any(name == b"range" for name, _ in scope["headers"]))
        if plain and stat is not None and stat.st_size <= MAX_KEPT_FILE:
            data = _kept((str(self.path), stat.st_size, stat.st_mtime_ns, self.sha256))
            if data is None:
                data = await anyio.to_thread.run_sync(read_kept, Path(self.path), stat, self.sha256)
            if data is not None:
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                await send({"type": "http.response.body", "body": data, "more_body": False})
                if self.background is not None:
                    await self.background()
                return
        await super().__call__(scope, receive, send)


    def _range_answer(self, scope: Scope) -> Scope | Response:
        """The request as it is to be served, or the error of a ``Range`` it cannot be served
        with, in the API's one shape (Starlette answered those in plain text: "Malformed range
        header."): ``400`` for a range that is no byte range, ``416`` (with ``Content-Range``) for
        one outside the file. A range of another unit than bytes is ignored (RFC 9110 §14.2): the
        whole file is served."""
        headers = Headers(scope=scope)
        value, if_range = headers.get("range"), headers.get("if-range")
        if len(headers.getlist("range")) > 1 and self.status_code == 200:  # the first was served
            shown = ", ".join(repr(v[:40]) for v in headers.getlist("range")[:3])
            return JSONResponse(error_body("invalid_range", (
                f"expected one Range header, got {len(headers.getlist('range'))} ({shown}). Send the "
                "ranges in one header ('bytes=0-99,200-299'), or none to get the whole file")),
                status_code=400)
        if (value is None or self.status_code != 200 or scope.get("method") not in ("GET", "HEAD")
                or (if_range is not None and not self._should_use_range(if_range))):
            return scope
        unit, _, _ = value.partition("=")
        size = self.stat_result.st_size if self.stat_result is not None else 0
        if unit.strip().lower() != "bytes":
            return {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"range"]}
        try:
            self._parse_range_header(value, size)
        except MalformedRangeHeader:
            return JSONResponse(error_body("invalid_range", (
                f"expected a Range of bytes of the file (e.g. 'bytes=0-1023'), got {value[:80]!r}. "
                "Fix the header, or send none to get the whole file")), status_code=400)
        except RangeNotSatisfiable:
            return JSONResponse(error_body("range_not_satisfiable", (
                f"expected a Range within the file's {size:,} bytes (the first is byte 0), got "
                f"{value[:80]!r}. Ask for bytes before {size:,}, or send no Range to get the whole file")),
                status_code=416, headers={"Content-Range": f"bytes */{size}"})
        return scope


def serve_file(path: Path, *, if_none_match: str | None, media_type: str, cache_control: str,
               sha256: str | None = None, stat: os.stat_result | None = None,
               headers: dict[str, str] | None = None, filename: str | None = None) -> Response:
    """``path`` streamed from disk (Starlette's :class:`FileResponse`), its ETag the quoted
    SHA-256 (``sha256`` when the product recorded it, else :func:`file_sha256`); a ``304`` with
    the same headers and no body when ``if_none_match`` names it. ``filename`` names the download
    (``Content-Disposition: attachment``)."""
    stat = stat if stat is not None else os.stat(path)
    sha = sha256 if sha256 is not None else file_sha256(path, stat)
    etag = f'"{sha}"'
    sent = {**(headers or {}), "ETag": etag, "Cache-Control": cache_control}
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers=sent)
    return _KeptFileResponse(path, sha256=sha, media_type=media_type, headers=sent, stat_result=stat,
                             filename=filename)


__all__ = ["MAX_DIGESTS", "MAX_KEPT_BYTES", "MAX_KEPT_FILE", "PRIVATE", "PUBLIC", "etag_matches",
           "file_sha256", "if_none_match", "kept_bytes", "read_kept", "serve_file"]
