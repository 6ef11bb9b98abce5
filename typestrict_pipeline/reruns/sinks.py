"""Real local servers that receive notifications: an SMTP server and a webhook endpoint.

They speak the real protocols on a real socket (``127.0.0.1``, a free port), so the transports in
:mod:`typestrict_pipeline.reruns.notify` are tested end to end without any outside service, and the
demo can show the mail that arrived. ``fail_next`` makes the next answers temporary failures
(SMTP ``451``, HTTP ``503``) to exercise retries.

>>> with LocalSmtpServer() as server:
...     import smtplib
...     with smtplib.SMTP(server.host, server.port) as s:
...         _ = s.sendmail("a@x", ["b@y"], "Subject: hi\\r\\n\\r\\nbody")
...     [m.recipients for m in server.messages]
[['b@y']]
"""

from __future__ import annotations

import json
import socketserver
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass
class ReceivedMail:
    """One message the SMTP server accepted."""

    sender: str
    recipients: list[str]
    data: bytes

    @property
    def message(self) -> Message:
        """The parsed message (headers and body)."""
        return message_from_bytes(self.data)


@dataclass
class _SmtpState:
    messages: list[ReceivedMail] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _SmtpHandler(socketserver.StreamRequestHandler):
    server: _SmtpTCPServer

    def _reply(self, line: str) -> None:
        self.wfile.write((line + "\r\n").encode())

    def handle(self) -> None:
        state = self.server.state
        self._reply("220 localhost typestrict test SMTP")
        sender, recipients = "", list[str]()
        while True:
            raw = self.rfile.readline(65536)
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            verb = line[:4].upper()
            if verb in ("HELO", "EHLO"):
                self._reply("250 localhost")
            elif verb == "MAIL":
                sender, recipients = line.split(":", 1)[1].strip().strip("<>").split(">")[0], []
                self._reply("250 OK")
            elif verb == "RCPT":
                recipients.append(line.split(":", 1)[1].strip().strip("<>").split(">")[0])
                self._reply("250 OK")
            elif verb == "DATA":
                self._reply("354 End data with <CR><LF>.<CR><LF>")
                chunks: list[bytes] = []
                while True:
                    data_line = self.rfile.readline(1 << 20)
                    if not data_line or data_line in (b".\r\n", b".\n"):
                        break
                    chunks.append(data_line[1:] if data_line.startswith(b"..") else data_line)
                with state.lock:
                    if state.fail_next > 0:
                        state.fail_next -= 1
                        self._reply("451 Temporary failure, try again later")
                        continue
                    state.messages.append(ReceivedMail(sender, list(recipients), b"".join(chunks)))
                self._reply("250 OK: queued")
            elif verb == "RSET":
                sender, recipients = "", []
                self._reply("250 OK")
            elif verb == "NOOP":
                self._reply("250 OK")
            elif verb == "QUIT":
                self._reply("221 Bye")
                return
            else:
                self._reply("502 Command not implemented")


class _SmtpTCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: _SmtpState) -> None:
        self.state = state
        super().__init__(address, _SmtpHandler)


class _LocalServer:
    host: str
    port: int
    _server: socketserver.BaseServer
    _thread: threading.Thread

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LocalSmtpServer(_LocalServer):
    """An SMTP server on ``127.0.0.1`` (free port) that keeps what it receives in memory."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._state = _SmtpState()
        self._server = _SmtpTCPServer((host, port), self._state)
        self.host, self.port = host, int(self._server.server_address[1])
        self._start()

    @property
    def messages(self) -> list[ReceivedMail]:
        """Messages accepted so far (a copy)."""
        with self._state.lock:
            return list(self._state.messages)

    def fail_next(self, n: int) -> None:
        """Answer the next ``n`` messages with ``451`` (a temporary failure)."""
        with self._state.lock:
            self._state.fail_next = n


class _WebhookHandler(BaseHTTPRequestHandler):
    server: _WebhookHTTPServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        with self.server.lock:
            if self.server.fail_next > 0:
                self.server.fail_next -= 1
                self.send_response(503)
                self.end_headers()
                return
            self.server.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


class _WebhookHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        self.received: list[dict[str, Any]] = []
        self.fail_next = 0
        self.lock = threading.Lock()
        super().__init__(address, _WebhookHandler)


class LocalWebhookServer(_LocalServer):
    """An HTTP endpoint on ``127.0.0.1`` that keeps the JSON bodies POSTed to it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._http = _WebhookHTTPServer((host, port))
        self._server = self._http
        self.host, self.port = host, int(self._http.server_address[1])
        self._start()

    @property
    def url(self) -> str:
        """The endpoint to configure in a :class:`~typestrict_pipeline.reruns.notify.WebhookTransport`."""
        return f"http://{self.host}:{self.port}/hook"

    @property
    def received(self) -> list[dict[str, Any]]:
        """Payloads received so far (a copy)."""
        with self._http.lock:
            return list(self._http.received)

    def fail_next(self, n: int) -> None:
        """Answer the next ``n`` requests with ``503``."""
        with self._http.lock:
            self._http.fail_next = n
