"""Files served from disk with a strong ETag (the quoted SHA-256 of their bytes) and ``If-None-Match``.

A file's ETag is its SHA-256, never its size and modification time: two different audits can
have the same size and the same second. A digest the product recorded (an audit's, at settlement)
is used as it is; any other file's is computed once and kept, keyed by the file's
``(path, size, mtime_ns)`` (a changed file is hashed again), at most :data:`MAX_DIGESTS` of them.

Every answer says ``Cache-Control: private, no-cache`` for a workspace's file (a shared cache must
not keep it, and a browser must ask again, sending its ETag: an unchanged file is then a ``304``
with no body) and ``no-cache`` for a public one (the verifier).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

from starlette.responses import FileResponse, Response

MAX_DIGESTS = 4096
PRIVATE = "private, no-cache"
PUBLIC = "no-cache"

_DIGESTS: OrderedDict[tuple[str, int, int], str] = OrderedDict()
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
    return FileResponse(path, media_type=media_type, headers=sent, stat_result=stat, filename=filename)


__all__ = ["MAX_DIGESTS", "PRIVATE", "PUBLIC", "etag_matches", "file_sha256", "serve_file"]
