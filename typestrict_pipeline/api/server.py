"""The HTTP server under the API: uvicorn on its h11 protocol, with every part of a request
bounded before it is read.

:class:`BoundedH11Protocol` is uvicorn's ``H11Protocol`` with these limits (:class:`RequestLimits`),
each enforced as bytes arrive, so refusing a request costs O(the limit), never O(what the client
sends), and for every request of a connection alike: the second request on a kept-open connection,
or the n-th, sent after the answers or pipelined (with the first, in the same read), goes through
the same checks as the first and gets the same refusal (bytes that come before the current request
is answered are held, reading paused, and read once it is):

* **the request line and headers** together: at most ``max_header_bytes`` (16 KiB) and
  ``max_headers`` header lines (100); beyond either, ``431`` and the connection closes (counted
  on the raw bytes before the parser sees them: a 64 MiB header line is refused after its first
  16 KiB; the blank line ending them is found as the parser finds it, even split between two
  reads);
* **a malformed request** (its request line, a header line, a ``Content-Length`` that is not a
  number, a transfer coding other than ``chunked``, both ``Content-Length`` and
  ``Transfer-Encoding``, a chunk-size line that is not a size in hexadecimal): ``400`` in the
  API's error shape, saying what was wrong, and the connection closes (uvicorn's own answer is a
  plain-text 400); a request refused at its head never reaches the application;
* **a chunked body** is followed as it arrives (:class:`ChunkedBody`), before the parser spends
  anything on it: every byte of it on the wire, its framing included, counts toward the route's
  body limit (``max_body_bytes``, ``max_upload_bytes``: the application's limits, by the same
  rule, :func:`~typestrict_pipeline.api.app.body_limit`), a chunk whose announced size would take
  it past the limit is refused before a byte of it is read, and it has at most ``max_chunks``
  chunks (65,536: each one costs the parser an event, however small): past any of these, the
  same ``413`` as a body over its limit, and the connection closes;
* **a chunked body's trailer** (header fields after its last chunk; the API reads none, and
  accepts them as HTTP/1.1 allows) has the bounds of headers, counted on the wire as it arrives:
  at most ``max_header_bytes`` bytes and ``max_headers`` fields, or ``431`` and the connection
  closes;
* **a header timeout**: a request's headers must arrive within ``header_timeout_s`` (10 s) of
  its first byte, or of the connection when nothing comes (``408``, closed): a slow client
  cannot hold a connection by trickling headers; for a next request whose first bytes came while
  the server was answering the one before, from when the server reads them;
* **a body timeout**: the body must keep coming: ``body_idle_timeout_s`` (30 s) without a byte
  while the server waits for one, or ``body_timeout_s`` (300 s, the operator's
  ``TYPESTRICT_BODY_TIMEOUT_S``) in all, ends it with ``408``;
* **an unread body is never drained**: when the answer is sent before the body was read (a
  ``413`` for a body over its limit, chunked or not, a ``401``), the connection closes instead
  of reading the rest.

Body sizes are also the application's (``BodyLimitMiddleware`` in ``app.py``:
``Content-Length`` checked first, a body's data counted as it is read, the same ``413``).

Every refusal is the API's error shape ``{"error": {"code", "message"}}``, except on a console
address (its request line's path, when the headers are not whole yet): a plain page with the
same message (:func:`request_line_path`, ``error_page_bytes``). :data:`CONNECTIONS`
keeps the last connections' bytes read and parser events (what the tests read to prove the
bounds: work counted, not timed).

:func:`uvicorn_options` is what every server of the API is started with (``typestrict api``,
``make api``, the tests).
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections import deque
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit

import h11
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.h11_impl import H11Protocol

from typestrict_pipeline.api.app import (
    BODY_TIMEOUT_ENV,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_UPLOAD,
    MAX_BODY_ENV,
    body_limit,
    body_limits_from_env,
    body_timeout_from_env,
    limit_setting,
    too_large_message,
)
from typestrict_pipeline.console.web import PREFIX as CONSOLE_PREFIX
from typestrict_pipeline.console.web import is_console_path


@dataclass(frozen=True)
class RequestLimits:
    """Bounds of one request (see the module docstring)."""

    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_idle_timeout_s: float = 30.0
    body_timeout_s: float = 300.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD
    max_chunks: int = 65_536


@dataclass
class ConnectionRecord:
    """What one connection cost the server: bytes read, the parser's events (a request, a piece
    of body, its end), and the status it was refused with."""

    bytes_read: int = 0
    events: int = 0
    refused: int | None = None


CONNECTIONS: deque[ConnectionRecord] = deque(maxlen=256)
"""The most recent connections' records, newest last (the tests read them)."""


def _error_bytes(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def error_page_bytes(status: int, message: str) -> bytes:
    """The page a console address gets when the server refuses its request by itself (a body
    that stopped coming, one past its limit): the status and the message, as the console's own
    error pages say them, with no script and a link back. The application, its templates and
    the session are never reached here (the request is cut before it is whole).

    >>> error_page_bytes(408, "expected <the body>").decode().count("&lt;the body&gt;")
    1
    """
    phrase = html.escape(HTTPStatus(status).phrase)
    said = html.escape(message.rstrip("."))
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{phrase} · TypeStrict"
            f"</title></head><body><main><h1>{phrase}</h1><p>{said}.</p>"
            f"<p><a href=\"{CONSOLE_PREFIX}\">Back to the console</a></p></main></body></html>").encode()


def request_line_path(line: bytes) -> str:
    """The path a request line names (``GET /console/x?y HTTP/1.1`` → ``/console/x``), read from
    the head's first bytes when the server refuses a request before its headers are whole (a
    ``431``, the headers' ``408``): percent-decoded as the application's ``path`` is, the
    absolute form's path too; ``""`` when no request line is whole there yet or it is not one.

    >>> request_line_path(b"GET /console/studies?page=2 HTTP/1.1\\r\\nHost: t")
    '/console/studies'
    >>> request_line_path(b"\\r\\nPOST http://h/%63onsole/sign-in HTTP/1.1\\r\\n")
    '/console/sign-in'
    >>> request_line_path(b"GET /console"), request_line_path(b"GARBAGE\\r\\n"), request_line_path(b"GET * HTTP/1.1\\r\\n")
    ('', '', '')
    """
    head = line.lstrip(b"\r\n")
    end = head.find(b"\n")
    if end < 0:
        return ""
    parts = head[:end].rstrip(b"\r").split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return ""
    target = parts[1].decode("latin-1")
    if not target.startswith("/"):
        try:
            target = urlsplit(target).path
        except ValueError:
            return ""
    if not target.startswith("/"):
        return ""
    return unquote(target.split("?", 1)[0].split("#", 1)[0])


@dataclass(frozen=True)
class Refusal:
    """An answer the server gives by itself, before the application: status, code, message."""

    status: int
    code: str
    message: str


MAX_CHUNK_LINE = 1024
"""The longest chunk-size line (its size and its extensions) this server reads."""

_BOTH_LENGTHS = "Content-Length and Transfer-Encoding both set"

_FRAMING: tuple[tuple[str, str], ...] = (
    ("illegal request line", "a request line that is not 'METHOD /target HTTP/1.1'"),
    ("no request line received", "an empty line where the request line goes"),
    ("illegal header line", "a header line that is not 'Name: value' (a name of letters, digits and "
                            "!#$%&'*+-.^_`|~, a value without control characters)"),
    ("continuation line at start of headers", "a first header line that starts with a space"),
    ("bad Content-Length", "a Content-Length that is not a whole number of bytes of at most 20 digits"),
    ("conflicting Content-Length headers", "two different Content-Length values"),
    (_BOTH_LENGTHS, "both a Content-Length and a Transfer-Encoding (one body, two lengths)"),
    ("multiple Transfer-Encoding headers", "more than one Transfer-Encoding header"),
    ("Only Transfer-Encoding: chunked is supported",
     "a Transfer-Encoding other than 'chunked' (the one coding this server reads)"),
    ("Missing mandatory Host: header", "an HTTP/1.1 request without a Host header"),
    ("Found multiple Host: headers", "more than one Host header"),
    ("illegal chunk header of more than", f"a chunk-size line longer than {MAX_CHUNK_LINE:,} bytes (its extensions)"),
    ("illegal chunk header", "a chunk-size line that is not a size in hexadecimal followed by CRLF"),
    ("malformed chunk footer", "a chunk whose data is not followed by CRLF (its size is not its length)"),
    ("Receive buffer too long", "headers (or a chunked body's trailer) going on past the parser's bound without "
                                "their end"),
)


def framing_message(detail: str) -> str:
    """The message of the 400 for a request the HTTP parser refused; ``detail`` is the parser's
    reason (h11's, or this module's own checks').

    >>> framing_message("bad Content-Length")
    'expected a well-formed HTTP/1.1 request, got a Content-Length that is not a whole number of bytes of at most 20 digits. Fix the request (an HTTP library or curl frames requests right)'
    """
    what = next((said for reason, said in _FRAMING if detail.startswith(reason)),
                f"a request the HTTP parser could not read ({detail[:120]})")
    return (f"expected a well-formed HTTP/1.1 request, got {what}. Fix the request (an HTTP library or "
            "curl frames requests right)")


_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]+)(?:;[^\n]*)?[ \t]*\r\n")
"""A chunk-size line as h11 reads it (its size in hexadecimal, extensions, CRLF), the digits unbounded
(a size beyond the body's bound is a 413, not a 400)."""

_BLANK_LINE = re.compile(rb"\n\r?\n")
"""The end of a request's head, as h11 finds it (CRLF CRLF, or bare line feeds)."""


class ChunkedBody:
    """The framing of one chunked request body, followed as its bytes arrive, before the parser
    sees them.

    Every byte of the body on the wire counts toward ``limit`` (the size lines, extensions and
    CRLFs as much as the data: a body of one-byte chunks costs its framing, not its payload), and
    each chunk's announced size is checked when its line ends, so a chunk that would take the body
    past ``limit`` is refused before one byte of it is read; beyond ``max_chunks`` chunks, the
    body is refused too (each chunk costs the parser an event, whatever its size). The trailer
    after the last chunk (header fields, up to a blank line, found as the parser finds it) is
    followed too, by the bounds of a request's headers: at most ``max_trailer_bytes`` bytes and
    ``max_trailer_fields`` fields, counted as they arrive, or a ``431`` (its bytes are not the
    body's: the application never sees a trailer). ``used`` says how many bytes of the data last
    fed were the body's: all of them until it is ``done``; what follows is the next request's.

    >>> body = ChunkedBody(limit=40, max_chunks=2)
    >>> body.feed(b"5\\r\\nhello\\r\\n3;ext=1\\r"), body.seen, body.chunks
    (None, 18, 1)
    >>> body.feed(b"\\nabc\\r\\n0\\r\\n\\r\\n"), body.seen, body.chunks, body.done
    (None, 27, 2, True)
    >>> body = ChunkedBody(limit=40, max_chunks=2)
    >>> body.feed(b"1\\r\\na\\r\\n0\\r\\nX-T: 1\\r\\n\\r\\nGET / HTTP/1.1\\r\\n"), body.done, body.used, body.seen
    (None, True, 19, 9)
    >>> ChunkedBody(limit=40, max_chunks=2, max_trailer_fields=1).feed(b"0\\r\\nA: 1\\r\\nB: 2\\r\\n").status
    431
    >>> ChunkedBody(limit=40, max_chunks=2, max_trailer_bytes=10).feed(b"0\\r\\nA: " + b"x" * 10).message
    "expected a chunked body's trailer (the fields after its last chunk) of at most 10 bytes, got more. Send a shorter trailer, or none (the API reads none)"
    >>> ChunkedBody(limit=40, max_chunks=2).feed(b"FFFFFFFFFFFFFFFFFFFF\\r\\n").status
    413
    >>> ChunkedBody(limit=40, max_chunks=2).feed(b"1\\r\\na\\r\\n1\\r\\nb\\r\\n1\\r\\n").message
    'expected a chunked request body of at most 2 chunks, got more. Send it in larger chunks, or with a Content-Length'
    >>> ChunkedBody(limit=40, max_chunks=2).feed(b"zz\\r\\n").status, ChunkedBody(40, 2).feed(b"1\\r\\nab").status
    (400, 400)
    """

    def __init__(self, limit: int, max_chunks: int, max_trailer_bytes: int = 16 * 1024,
                 max_trailer_fields: int = 100, setting: str = MAX_BODY_ENV) -> None:
        self.limit = limit
        self.setting = setting  # the server's setting of ``limit``, named in the 413
        self.max_chunks = max_chunks
        self.max_trailer_bytes = max_trailer_bytes
        self.max_trailer_fields = max_trailer_fields
        self.seen = 0
        self.chunks = 0
        self.done = False
        self.used = 0
        self._trailer: bytearray | None = None  # after the last chunk's line: the trailer so far
        self._trailer_lines = 0
        self._left = 0  # bytes of the current chunk's data still to come
        self._crlf = b""  # what is still to come of the CRLF after them
        self._line = bytearray()  # the current chunk-size line, up to MAX_CHUNK_LINE bytes

    def feed(self, data: bytes) -> Refusal | None:
        """Follow ``data``, the body's next bytes; a refusal when they break a bound. Once the
        trailer's blank line is read (``done``), the rest (from ``used`` on) is not the body's."""
        pos, end_of_data = 0, len(data)
        while pos < end_of_data and not self.done:
            if self._trailer is not None:  # after the last chunk
                pos, refusal = self._read_trailer(data, pos)
                if refusal is not None:
                    return refusal
                continue
            if self._left:  # the chunk's data
                taken = min(self._left, end_of_data - pos)
                self._left -= taken
                self.seen += taken
                pos += taken
                continue
            if self._crlf:  # the CRLF after it
                expected = self._crlf[: end_of_data - pos]
                if data[pos:pos + len(expected)] != expected:
                    return Refusal(400, "bad_request", framing_message("malformed chunk footer"))
                self._crlf = self._crlf[len(expected):]
                self.seen += len(expected)
                pos += len(expected)
                continue
            room = MAX_CHUNK_LINE + 1 - len(self._line)  # enough to see a line too long
            newline = data.find(b"\n", pos, pos + room)
            stop = min(end_of_data, pos + room) if newline < 0 else newline + 1
            self._line += data[pos:stop]
            self.seen += stop - pos
            pos = stop
            if self.seen > self.limit:
                return self._too_large(f"more: {self.seen:,} bytes, its chunk framing included, had arrived "
                                       "when it was stopped")
            if len(self._line) > MAX_CHUNK_LINE:
                return Refusal(400, "bad_request", framing_message(
                    f"illegal chunk header of more than {MAX_CHUNK_LINE:,} bytes"))
            if newline < 0:
                continue
            refusal = self._chunk(bytes(self._line))
            self._line.clear()
            if refusal is not None:
                return refusal
        self.used = pos
        return None

    def _read_trailer(self, data: bytes, pos: int) -> tuple[int, Refusal | None]:
        """Read the trailer from ``data[pos:]``, up to its end as h11 finds it (an empty line first,
        or a blank line after fields); the position after what was read, and a refusal when the
        trailer goes past a bound."""
        trailer = self._trailer
        assert trailer is not None
        before = len(trailer)
        trailer += data[pos:pos + self.max_trailer_bytes + 1 - before]  # enough to see it too long
        if trailer[:1] == b"\n" or trailer[:2] == b"\r\n":
            end = 1 if trailer[:1] == b"\n" else 2
        else:
            match = _BLANK_LINE.search(trailer, max(0, before - 2))
            end = -1 if match is None else match.end()
        if end >= 0:
            del trailer[end:]
            self.done = True
        self._trailer_lines += trailer.count(b"\n", min(before, len(trailer)))
        fields = self._trailer_lines - (1 if self.done else 0)  # (the blank line ending it is none)
        if len(trailer) > self.max_trailer_bytes:
            return pos, Refusal(431, "request_header_too_large",
                                "expected a chunked body's trailer (the fields after its last chunk) of at most "
                                f"{self.max_trailer_bytes} bytes, got more. Send a shorter trailer, or none (the API "
                                "reads none)")
        if fields > self.max_trailer_fields:
            return pos, Refusal(431, "request_header_too_large",
                                f"expected at most {self.max_trailer_fields} trailer fields after a chunked body's "
                                "last chunk, got more. Send fewer, or none (the API reads none)")
        return pos + len(trailer) - before, None

    def _chunk(self, line: bytes) -> Refusal | None:
        match = _CHUNK_LINE.fullmatch(line)
        if match is None:
            return Refusal(400, "bad_request", framing_message(f"illegal chunk header: {line[:40]!r}"))
        digits = match.group(1).lstrip(b"0")
        if not digits:
            self._trailer = bytearray()  # the last chunk: its trailer follows
            return None
        size = int(digits, 16)  # at most MAX_CHUNK_LINE digits
        if self.seen + size + 2 > self.limit:
            chunk = (f"a chunk of {size:,} bytes" if len(digits) <= 20
                     else f"a chunk whose size has {len(digits):,} hexadecimal digits")
            return self._too_large(f"more: {chunk} announced after {self.seen:,} bytes of the body")
        self.chunks += 1
        if self.chunks > self.max_chunks:
            return Refusal(413, "payload_too_large",
                           f"expected a chunked request body of at most {self.max_chunks:,} chunks, got more. "
                           "Send it in larger chunks, or with a Content-Length")
        self._left = size
        self._crlf = b"\r\n"
        return None

    def _too_large(self, got: str) -> Refusal:
        return Refusal(413, "payload_too_large", too_large_message(self.limit, got, self.setting))


class CheckedConnection(h11.Connection):
    """h11's server side of one connection, which counts the events it parses into ``record``,
    keeps the error it raised (uvicorn answers a parser error without its reason), and refuses a
    request h11 accepts but this server does not: one with both Content-Length and
    Transfer-Encoding (h11 lets the second win; two readers of the same bytes could disagree on
    where its body ends). A refused request never reaches the application. ``chunked`` and
    ``length`` are the framing of the last request it read (its body chunked, or of ``length``
    bytes: 0 without a Content-Length)."""

    def __init__(self, max_incomplete_event_size: int, record: ConnectionRecord) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size)
        self.record = record
        self.error: h11.RemoteProtocolError | None = None
        self.chunked = False
        self.length = 0

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        try:
            event = super().next_event()
            if isinstance(event, h11.Request):
                names = {name for name, _ in event.headers}
                if b"content-length" in names and b"transfer-encoding" in names:
                    raise h11.RemoteProtocolError(_BOTH_LENGTHS)
                self.chunked = b"transfer-encoding" in names
                lengths = [value for name, value in event.headers if name == b"content-length"]
                self.length = int(lengths[0]) if lengths else 0  # (h11 checked it: digits, one value)
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise
        if event is not h11.NEED_DATA and event is not h11.PAUSED:
            self.record.events += 1
        return event


class HeldFlowControl(FlowControl):
    """uvicorn's flow control (reading paused while the application has not read what came), and
    a second reason to pause reading, which uvicorn's resumes do not undo: :meth:`hold`, while the
    connection's current request is read whole and not yet answered."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__(transport)
        self.held = False

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            if not self.held:
                self._transport.resume_reading()

    def hold(self) -> None:
        """Read nothing more until :meth:`release`."""
        self.held = True
        self._transport.pause_reading()

    def release(self) -> None:
        """Read again, unless uvicorn has paused reading for its own reason."""
        self.held = False
        if not self.read_paused:
            self._transport.resume_reading()


class _Stage(Enum):
    """Where the connection's current request is on the wire."""

    HEAD = "the request line and headers"
    BODY = "the body (a chunked body's trailer included)"
    READ = "all of it read, its answer not yet sent: what comes is the next request's"


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the request bounds of :class:`RequestLimits` (class attribute
    ``limits``; a subclass may set others), for every request of a connection.

    The protocol follows each request's parts on the wire (:class:`_Stage`) and hands the parser
    the current request's bytes only: bytes that come once it is read whole (a next request sent
    without waiting for the answer: pipelined, in the same read or later) are held, reading
    paused, and read as the next request once the current one is answered, through the same
    checks as a connection's first request (its header timeout counted from then: the time the
    server took to answer is not the client's)."""

    limits = RequestLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record = ConnectionRecord()
        self.checked = CheckedConnection(self.config.h11_max_incomplete_event_size or self.limits.max_header_bytes,
                                         self.record)
        self.conn = self.checked
        self._stage = _Stage.HEAD
        self._head_bytes = 0
        self._head_lines = 0
        self._tail = b""  # the head's last bytes, for a blank line split between two reads
        self._line = b""  # the head's first bytes, up to its request line's end (for its path)
        self._chunks: ChunkedBody | None = None
        self._length = 0  # of a body with a Content-Length, the bytes still to come
        self._pending = b""  # the next requests' bytes, held while the current one is answered
        self.held_flow: HeldFlowControl | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._body_deadline: float | None = None

    # -- connection --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.held_flow = HeldFlowControl(transport)
        self.flow = self.held_flow
        CONNECTIONS.append(self.record)
        self._arm(self.limits.header_timeout_s, self._header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.record.bytes_read += len(data)
        self._receive(data)

    def _receive(self, data: bytes) -> None:
        """Follow ``data`` through the parts of the connection's current request, checking each
        against its bounds before the parser sees it; hold what comes after the request (the next
        one's bytes) until it is answered."""
        while data and not self._refused() and not self.transport.is_closing():
            if self._stage is _Stage.READ:
                self._pending += data  # at most what one read brought: reading stops here
                assert self.held_flow is not None
                self.held_flow.hold()
                return
            if self._stage is _Stage.HEAD:
                end = self._read_head(data)
                if self._refused():
                    return
                if end < 0:
                    super().data_received(data)
                    return
                super().data_received(data[:end])  # the parser reads the request (or refuses it: a 400)
                if self._refused() or self.transport.is_closing():
                    return
                self._start_body()
            else:
                end = self._read_body(data)
                if end < 0:
                    return
            data = data[end:]

    def _read_body(self, data: bytes) -> int:
        """Hand the parser what of ``data`` is the body's (a chunked body checked first); the offset
        in ``data`` past it, or -1 when the body was refused."""
        self._arm_body()
        if self._chunks is not None:
            refusal = self._chunks.feed(data)
            if refusal is not None:
                self._refuse(refusal.status, refusal.code, refusal.message)
                return -1
            end, done = self._chunks.used, self._chunks.done
        else:
            end = min(self._length, len(data))
            self._length -= end
            done = self._length == 0
        if done:
            self._read_whole()
        super().data_received(data[:end])
        return end

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request the parser refused (``msg`` is its plain-text reason for
        every case): the API's JSON 400 with the parser's reason, and the connection closed."""
        error = self.checked.error
        self._refuse(400, "bad_request", framing_message(str(error) if error is not None else msg))

    # -- the head: request line and headers ----------------------------------------------------

    def _read_head(self, data: bytes) -> int:
        """Count the head's bytes and lines (up to the blank line ending it, found even when it is
        split between two reads) before the parser sees them; refuse with 431 past a bound. The
        offset in ``data`` just past the head, or -1 while it goes on."""
        window = self._tail + data[: self.limits.max_header_bytes + 4]
        match = _BLANK_LINE.search(window)
        end = -1 if match is None else match.end() - len(self._tail)
        head = data if end < 0 else data[:end]
        if self._head_bytes == 0 and head:
            self._arm(self.limits.header_timeout_s, self._header_timeout)  # from the first byte
        self._tail = (self._tail + head[-2:])[-2:]
        if b"\n" not in self._line.lstrip(b"\r\n"):
            self._line += head[: self.limits.max_header_bytes + 4 - len(self._line)]
        self._head_bytes += len(head)
        self._head_lines += head.count(b"\n")
        if self._head_bytes > self.limits.max_header_bytes:
            self._refuse(431, "request_header_too_large",
                         f"expected a request line and headers of at most {self.limits.max_header_bytes} "
                         "bytes, got more. Send shorter headers")
        elif self._head_lines > self.limits.max_headers + 2:  # the request line and the blank line
            self._refuse(431, "request_header_too_large",
                         f"expected at most {self.limits.max_headers} header lines, got more. Send fewer "
                         "headers")
        return end

    def _start_body(self) -> None:
        """The head is read: the header timeout ends, the body's begin; a chunked body is followed
        (:class:`ChunkedBody`) within the route's body limit, its trailer within the header
        bounds; a body with a Content-Length is counted to its end; without a body, the request
        is read whole."""
        self._disarm()
        if not self.checked.chunked and not self.checked.length:
            self._read_whole()
            return
        self._stage = _Stage.BODY
        self._body_deadline = self.loop.time() + self.limits.body_timeout_s
        self._arm_body()
        if self.checked.chunked:
            limit = body_limit(self.scope["method"], self.scope["path"], self.limits.max_body_bytes,
                               self.limits.max_upload_bytes)
            self._chunks = ChunkedBody(limit, self.limits.max_chunks, self.limits.max_header_bytes,
                                       self.limits.max_headers,
                                       setting=limit_setting(self.scope["method"], self.scope["path"]))
        else:
            self._length = self.checked.length

    def _read_whole(self) -> None:
        """The request is read to its last byte: no timeout of the client's until it is answered."""
        self._stage = _Stage.READ
        self._body_deadline = None
        self._disarm()

    def _next_request(self) -> None:
        self._stage = _Stage.HEAD
        self._head_bytes = self._head_lines = 0
        self._tail = self._line = b""
        self._chunks = None
        self._length = 0
        self._body_deadline = None
        self._disarm()

    def _read_held(self) -> None:
        """The current request is answered: read the bytes held meanwhile as the next request's
        (they may hold several), then read on, unless the next request was read whole from them."""
        if self.transport.is_closing() or self._refused():
            return
        held, self._pending = self._pending, b""
        self._receive(held)
        if not self._pending and self.held_flow is not None:
            self.held_flow.release()

    # -- timers ------------------------------------------------------------------------------

    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_timeout(self) -> None:
        self._timer = None
        if self._stage is not _Stage.HEAD or self.transport.is_closing():
            return
        if self._head_bytes == 0 and self.cycle is not None:
            return  # between requests: uvicorn's keep-alive timeout closes an idle connection
        self._refuse(408, "request_timeout",
                     f"expected the request's headers within {self.limits.header_timeout_s:g} s, got "
                     "them too slowly. Send the whole request at once")

    def _arm_body(self) -> None:
        """The body's timer: the idle timeout from now, or the whole-body deadline when that
        comes first (a body that keeps trickling in is cut there, not only one that stops)."""
        delay = self.limits.body_idle_timeout_s
        if self._body_deadline is not None:
            delay = min(delay, max(0.0, self._body_deadline - self.loop.time()))
        self._arm(delay, self._body_timeout)

    def _body_timeout(self) -> None:
        self._timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.cycle is not None and self.cycle.response_complete:
            return
        now = self.loop.time()
        late = self._body_deadline is not None and now >= self._body_deadline
        if self.flow.read_paused and not late:  # the application is not reading: not the client's fault
            self._arm_body()
            return
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()
            return
        if late:  # it kept coming, too slowly for the whole-body deadline: the operator's setting
            self._refuse(408, "request_timeout",
                         f"expected the whole request body within {self.limits.body_timeout_s:g} s, got it still "
                         "arriving then. Send it faster or in smaller parts (split the upload), or ask the "
                         f"operator to raise the server's {BODY_TIMEOUT_ENV}")
            return
        self._refuse(408, "request_timeout",
                     f"expected the request body to keep coming (a byte at least every "
                     f"{self.limits.body_idle_timeout_s:g} s, all of it within {self.limits.body_timeout_s:g} s), "
                     "got it too slowly. Send the body at once")

    # -- answers -----------------------------------------------------------------------------

    def _refused(self) -> bool:
        return self.record.refused is not None

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer ``status`` with the API's error shape and close, reading nothing more."""
        self.record.refused = status
        self._disarm()
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the application's answer, if any, goes nowhere
            cycle.message_event.set()  # and its read of the body ends now
        if self.transport.is_closing():
            return
        if not answering:  # (else half an answer is out: closing is all that is left)
            if self._stage is _Stage.HEAD:  # the headers are not whole: the request line's path, if any
                path = request_line_path(self._line)
            else:
                path = self.cycle.scope.get("path", "") if self.cycle is not None else ""
            if is_console_path(str(path)):  # a person's browser: a page, not the API's JSON
                body, kind = error_page_bytes(status, message), "text/html; charset=utf-8"
            else:
                body, kind = _error_bytes(code, message), "application/json"
            head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: {kind}\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
            self.transport.write(head + body)
        self.transport.close()

    def on_response_complete(self) -> None:
        unread = self._stage is not _Stage.READ
        self._next_request()
        if unread and not self.transport.is_closing():
            # Answered before the body was read (a 413, a 401): close rather than drain it.
            self.transport.close()
            return
        super().on_response_complete()
        self._read_held()


def uvicorn_options(limits: RequestLimits | None = None) -> dict[str, Any]:
    """The keyword arguments every API server gets: the bounded h11 protocol, the parser's own
    buffer bound at the same header size, a short keep-alive, and no WebSocket protocol (the API
    has no WebSocket route: a request asking to upgrade is served as HTTP, by this protocol,
    never handed to one outside these bounds).

    >>> options = uvicorn_options()
    >>> options["http"].__name__, options["h11_max_incomplete_event_size"], options["ws"]
    ('BoundedH11Protocol', 16384, 'none')
    """
    if limits is None:  # the server's body limits and deadline, as create_app reads them
        max_body, max_upload = body_limits_from_env()
        limits = RequestLimits(max_body_bytes=max_body, max_upload_bytes=max_upload,
                               body_timeout_s=float(body_timeout_from_env()))
    protocol: type[BoundedH11Protocol] = BoundedH11Protocol
    if limits != BoundedH11Protocol.limits:
        protocol = type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits})
    return {"http": protocol, "h11_max_incomplete_event_size": protocol.limits.max_header_bytes,
            "timeout_keep_alive": 5, "ws": "none"}
