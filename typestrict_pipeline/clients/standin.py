"""A STAND-IN OpenAI-compatible chat-completions server, for tests, demos and benchmarks.

It is a real HTTP server on 127.0.0.1 (``ThreadingHTTPServer``: concurrent requests are served in
parallel), but it is **not a model**: its answers come from a pluggable Python function. It is
labelled a stand-in everywhere it shows: the ``Server`` header, ``system_fingerprint``
(``"typestrict-standin"``), the default model name (``"standin"``), its ``repr`` and logs.

- ``POST /v1/chat/completions``: an OpenAI-style chat completion, with ``usage`` and, when asked
  (``logprobs: true``), the first token's ``top_logprobs``.
- ``GET /v1/models``: the one stand-in model.
- ``latency_s``: every request waits this long before answering (in its own thread).
- Faults: :meth:`StandinServer.add_faults` queues answers such as 429 with ``Retry-After`` or
  500, served to the next requests in order, before normal answers resume.

Token usage is an estimate, deterministic: ``ceil(characters / 4)`` per message content (plus 3
per message) for the prompt, and ``ceil(characters / 4)`` (at least 1) for the reply.

>>> with StandinServer(latency_s=0.0) as server:
...     server.base_url.startswith("http://127.0.0.1:")
True
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from typestrict_pipeline.clients.prompt import ClassificationPrompt, parse_classification_prompt

__all__ = [
    "STANDIN_FINGERPRINT",
    "AnswerFn",
    "ChatRequest",
    "Fault",
    "StandinReply",
    "StandinServer",
    "classification_answer",
    "distribution_reply",
    "estimate_tokens",
    "hashed_answer",
]

STANDIN_FINGERPRINT = "typestrict-standin"
_SERVER_HEADER = "typestrict-standin/1 (stand-in, not a real model)"


@dataclass(frozen=True)
class ChatRequest:
    """A chat-completions request as the stand-in received it.

    Attributes:
        model: the requested model name.
        messages: the messages.
        max_tokens: as sent (None if absent).
        logprobs: whether log-probabilities were asked.
        top_logprobs: how many alternatives were asked (None if absent).
        authorization: the ``Authorization`` header as received (tests check the Bearer key).
        body: the whole decoded request body.
    """

    model: str
    messages: tuple[Mapping[str, Any], ...]
    max_tokens: int | None
    logprobs: bool
    top_logprobs: int | None
    authorization: str | None
    body: Mapping[str, Any]

    def __repr__(self) -> str:  # never print a key, even a test one
        return f"ChatRequest(model={self.model!r}, messages={len(self.messages)}, logprobs={self.logprobs})"


@dataclass(frozen=True)
class StandinReply:
    """What the answer function says.

    Attributes:
        text: the reply text (also the first token, when logprobs are asked).
        top_logprobs: (token, natural-log probability) alternatives for the first token.
        prompt_tokens: override the prompt-token estimate.
        completion_tokens: override the completion-token estimate.
    """

    text: str
    top_logprobs: tuple[tuple[str, float], ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


AnswerFn = Callable[[ChatRequest], StandinReply]


@dataclass(frozen=True)
class Fault:
    """A faulty answer, served once.

    Attributes:
        status: the HTTP status (e.g. 429, 500, 503).
        retry_after: the ``Retry-After`` header value in seconds (None: not sent).
        body: the error body.
        delay_s: extra wait before answering (e.g. to trip a client timeout).
    """

    status: int
    retry_after: float | None = None
    body: str = "stand-in fault"
    delay_s: float = 0.0

    @classmethod
    def rate_limited(cls, retry_after: float | None = 0.05) -> Fault:
        """429 Too Many Requests, with ``Retry-After`` (seconds)."""
        return cls(429, retry_after, "rate limited (stand-in fault)")

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """A 5xx error."""
        return cls(status, None, "internal error (stand-in fault)")

    @classmethod
    def slow(cls, delay_s: float) -> Fault:
        """A normal answer, but only after ``delay_s`` more seconds."""
        return cls(200, None, "", delay_s)


def estimate_tokens(text: str) -> int:
    """The stand-in's token estimate: ceil(characters / 4), at least 1.

    >>> estimate_tokens("abcde"), estimate_tokens("")
    (2, 1)
    """
    return max(1, math.ceil(len(text) / 4))


def distribution_reply(
    probabilities: Mapping[str, float], *, top: int | None = None
) -> StandinReply:
    """A reply whose first token's alternatives carry ``probabilities`` (label → p).

    The text is the most probable label (ties: the first given). Labels with p = 0 are left out
    (a log of 0 does not exist).

    >>> r = distribution_reply({"A": 0.75, "B": 0.25})
    >>> r.text, [round(math.exp(lp), 6) for _, lp in r.top_logprobs]
    ('A', [0.75, 0.25])
    """
    items = [(k, float(v)) for k, v in probabilities.items() if v > 0]
    if not items:
        raise ValueError("expected at least one positive probability, got none. Give one.")
    items.sort(key=lambda kv: -kv[1])
    if top is not None:
        items = items[:top]
    return StandinReply(text=items[0][0], top_logprobs=tuple((k, math.log(v)) for k, v in items))


def classification_answer(
    judge: Callable[[ClassificationPrompt], Mapping[str, float]],
    *,
    fallback: str = "stand-in reply",
) -> AnswerFn:
    """An answer function for the project's classification prompts.

    Args:
        judge: given the parsed prompt (question, text, options, labels), returns
            option text → probability.
        fallback: the reply to any other conversation.

    Returns:
        An :data:`AnswerFn` replying with the best option's label and the alternatives'
        log-probabilities.
    """

    def answer(request: ChatRequest) -> StandinReply:
        prompt = parse_classification_prompt(request.messages)
        if prompt is None:
            return StandinReply(text=fallback)
        probs = judge(prompt)
        by_label = {
            label: float(probs.get(option, 0.0))
            for label, option in zip(prompt.labels, prompt.options, strict=True)
        }
        return distribution_reply(by_label, top=request.top_logprobs)

    return answer


def _hashed_distribution(prompt: ClassificationPrompt) -> dict[str, float]:
    digest = hashlib.sha256(prompt.text.encode("utf-8")).digest()
    weights = [1 + digest[i % len(digest)] for i in range(len(prompt.options))]
    total = sum(weights)
    return {option: w / total for option, w in zip(prompt.options, weights, strict=True)}


hashed_answer: AnswerFn = classification_answer(_hashed_distribution)
"""The default answer: a deterministic distribution from the text's SHA-256 (no skill at all)."""


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    faults: deque[Fault] = field(default_factory=deque)
    requests: list[ChatRequest] = field(default_factory=list)
    served: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # silent: never print request lines or headers

    def version_string(self) -> str:
        return _SERVER_HEADER

    def _send_json(
        self, status: int, payload: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Standin", "true")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        self._send_json(
            status,
            {"error": {"message": message, "type": "standin_error", "code": status}},
            headers,
        )

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.server.owner.model_name,
                            "object": "model",
                            "owned_by": STANDIN_FINGERPRINT,
                        }
                    ],
                },
            )
        else:
            self._error(404, f"no such path {self.path!r} on the stand-in server")

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no such path {self.path!r} on the stand-in server")
            return
        state = owner._state
        with state.lock:
            state.served += 1
            number = state.served
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            fault = state.faults.popleft() if state.faults else None
        finished = False

        def finish() -> None:
            # A request stops counting as in flight once its reply is ready, *before* it is
            # written: the client may send its next request as soon as it has read this one.
            nonlocal finished
            if not finished:
                finished = True
                with state.lock:
                    state.in_flight -= 1

        try:
            delay = owner.latency_s + (fault.delay_s if fault is not None else 0.0)
            if delay > 0:
                time.sleep(delay)
            if fault is not None and fault.status != 200:
                headers = (
                    {"Retry-After": f"{fault.retry_after:g}"}
                    if fault.retry_after is not None
                    else None
                )
                finish()
                self._error(fault.status, fault.body, headers)
                return
            try:
                body = json.loads(raw)
                messages = tuple(body["messages"])
                if not isinstance(body, dict) or not all(isinstance(m, dict) for m in messages):
                    raise TypeError
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
                finish()
                self._error(400, "expected a JSON body with 'messages'")
                return
            top = body.get("top_logprobs")
            request = ChatRequest(
                model=str(body.get("model", "")),
                messages=messages,
                max_tokens=body.get("max_tokens")
                if isinstance(body.get("max_tokens"), int)
                else None,
                logprobs=bool(body.get("logprobs")),
                top_logprobs=top if isinstance(top, int) else None,
                authorization=self.headers.get("Authorization"),
                body=body,
            )
            with state.lock:
                state.requests.append(request)
            try:
                reply = owner.answer(request)
            except Exception as exc:  # the answer function is test code: report, don't crash
                finish()
                self._error(500, f"stand-in answer function failed: {type(exc).__name__}")
                return
            payload = owner._completion_payload(request, reply, number=number)
            finish()
            self._send_json(200, payload)
        finally:
            finish()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    owner: StandinServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout) is normal here; anything else is printed as usual."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, BrokenPipeError | ConnectionResetError | ConnectionAbortedError):
            return
        super().handle_error(request, client_address)


class StandinServer:
    """A stand-in OpenAI-compatible server on 127.0.0.1, run in a background thread.

    Args:
        answer: the answer function (default :data:`hashed_answer`).
        latency_s: seconds every request waits before its answer (requests wait in parallel).
        port: the port (0: a free one).
        model_name: the model name reported (default ``"standin"``).
        report_usage: include ``usage`` in answers (False imitates a server that omits it).
    """

    def __init__(
        self,
        answer: AnswerFn | None = None,
        *,
        latency_s: float = 0.0,
        port: int = 0,
        model_name: str = "standin",
        report_usage: bool = True,
    ) -> None:
        self.answer: AnswerFn = answer if answer is not None else hashed_answer
        self.latency_s = latency_s
        self.model_name = model_name
        self.report_usage = report_usage
        self._port = port
        self._state = _State()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not running"
        return f"StandinServer(stand-in, {where}, latency_s={self.latency_s:g})"

    # lifecycle ---------------------------------------------------------------------------

    def start(self) -> StandinServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError(
                "expected a stopped stand-in server, got a running one. Stop it first."
            )
        server = _Server(("127.0.0.1", self._port), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="standin-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # introspection -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port."""
        if self._server is None:
            raise RuntimeError(
                "expected a running stand-in server, got a stopped one. Start it first."
            )
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def add_faults(self, *faults: Fault) -> None:
        """Queue faulty answers for the next requests, in order."""
        with self._state.lock:
            self._state.faults.extend(faults)

    @property
    def requests(self) -> list[ChatRequest]:
        """A copy of the chat requests answered normally, in arrival order."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def served(self) -> int:
        """Chat requests received (faults included), counted when their handling starts."""
        with self._state.lock:
            return self._state.served

    @property
    def max_in_flight(self) -> int:
        """The most chat requests handled at the same time."""
        with self._state.lock:
            return self._state.max_in_flight

    # payload -----------------------------------------------------------------------------

    def _completion_payload(
        self, request: ChatRequest, reply: StandinReply, *, number: int = 0
    ) -> dict[str, Any]:
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = sum(
                3 + estimate_tokens(str(m.get("content", ""))) for m in request.messages
            )
        completion_tokens = (
            reply.completion_tokens
            if reply.completion_tokens is not None
            else estimate_tokens(reply.text)
        )
        logprobs: dict[str, Any] | None = None
        if request.logprobs:
            alternatives = list(reply.top_logprobs) or [(reply.text, 0.0)]
            if request.top_logprobs is not None:
                alternatives = alternatives[: max(request.top_logprobs, 1)]
            chosen = next((lp for tok, lp in reply.top_logprobs if tok == reply.text), 0.0)
            logprobs = {
                "content": [
                    {
                        "token": reply.text,
                        "logprob": chosen,
                        "bytes": list(reply.text.encode("utf-8")),
                        "top_logprobs": [
                            {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))}
                            for tok, lp in alternatives
                        ],
                    }
                ]
            }
        payload: dict[str, Any] = {
            "id": f"chatcmpl-standin-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or self.model_name,
            "system_fingerprint": STANDIN_FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "logprobs": logprobs,
                    "finish_reason": "stop",
                }
            ],
        }
        if self.report_usage:
            payload["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        return payload


def main(argv: list[str] | None = None) -> int:
    """Run a stand-in server from the command line until Ctrl-C (or ``--for-seconds``).

    ``python -m typestrict_pipeline.clients.standin --port 8000 --latency 0.2``
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m typestrict_pipeline.clients.standin",
        description="A STAND-IN OpenAI-compatible chat-completions server (not a real model).",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--model-name", default="standin")
    parser.add_argument("--for-seconds", type=float, default=None, help="stop after this long")
    args = parser.parse_args(argv)
    with StandinServer(latency_s=args.latency, port=args.port, model_name=args.model_name) as server:
        print(f"stand-in server (not a real model) at {server.base_url}", flush=True)
        try:
            if args.for_seconds is not None:
                time.sleep(args.for_seconds)
            else:
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
