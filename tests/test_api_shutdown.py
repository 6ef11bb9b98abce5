"""A request still in flight when the server's shutdown grace ends is answered in the API's words.

``typestrict api`` gives requests in flight ``GRACEFUL_SHUTDOWN_S`` after Ctrl-C or SIGTERM, then
uvicorn cancels them: it answered each with a plain-text ``500 Internal Server Error`` (a bug, by
the API's own codes). Now ``503 shutting_down`` in the API's error shape, with ``Retry-After``,
saying the request may or may not have been carried out; a console address gets the console's
plain page. The server is stopped as a signal stops it (``should_exit``), on a real socket.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path

import uvicorn

from tests.test_api_support import UNUSED_JEV, new_key
from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.server import RequestLimits, uvicorn_options

# Timeouts no busy machine reaches: only the shutdown ends these requests.
PATIENT = RequestLimits(header_timeout_s=120.0, body_idle_timeout_s=120.0, body_timeout_s=300.0)


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while part := sock.recv(65536):
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


def test_a_request_cut_by_the_shutdown_gets_a_503_in_the_apis_words(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "ws")
    app = create_app(url, tmp_path / "home", jev_source=UNUSED_JEV, rate_limit=None)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=1, **uvicorn_options(PATIENT))
    handler = _Kept()  # after the Config, which sets uvicorn's loggers up
    logged = handler.records
    logging.getLogger("uvicorn.error").addHandler(handler)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        time.sleep(0.05)
    api = socket.create_connection(("127.0.0.1", port), timeout=60)
    console = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        # Two requests whose bodies have begun and not ended: the application is reading them.
        api.sendall(b"POST /v1/studies/estimate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key.encode()
                    + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"workflow\":")
        console.sendall(b"POST /console/sign-in HTTP/1.1\r\nHost: t\r\nContent-Type: "
                        b"application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nkey=tsk_")
        time.sleep(0.5)  # both read by the server (a shutdown closes connections with no request)
        server.should_exit = True  # what Ctrl-C and SIGTERM set
        status, headers, body = _answer(api)
        assert status == 503 and headers.get("content-type") == "application/json", (status, headers, body[:300])
        assert headers.get("retry-after") == "10"
        error = json.loads(body)["error"]
        assert error["code"] == "shutting_down", error
        assert error["message"].startswith("expected an answer before the server stopped, got the server stopping")
        assert "may have been carried out or not" in error["message"] and "Idempotency-Key" in error["message"]
        status, headers, body = _answer(console)
        assert status == 503 and headers.get("content-type") == "text/html; charset=utf-8", (status, body[:300])
        page = body.decode()
        assert "<h1>Service Unavailable</h1>" in page and "may have been carried out" in page
        assert "Idempotency-Key" not in page and "look for it (Trainings, Backtests)" in page
        assert '<a href="/console">' in page and "Internal Server Error" not in page
    finally:
        api.close()
        console.close()
        server.should_exit = True
        thread.join(timeout=60)
        listener.close()
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert not thread.is_alive()
    # uvicorn says it cancelled them (one line); no "Exception in ASGI application" and traceback
    assert not [r.getMessage() for r in logged if r.exc_info or "Exception" in r.getMessage()], "a traceback"
    assert any("Cancel 2 running task(s)" in r.getMessage() for r in logged)  # the grace did end them
