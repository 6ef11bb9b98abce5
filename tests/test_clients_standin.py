"""The stand-in server itself: a real HTTP server, labelled a stand-in, with faults and latency."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from typing import Any

import pytest

from typestrict_pipeline.clients import (
    ChatRequest,
    Fault,
    StandinReply,
    StandinServer,
    build_classification_messages,
    distribution_reply,
    hashed_answer,
    parse_classification_prompt,
)
from typestrict_pipeline.clients.standin import STANDIN_FINGERPRINT


def post(url: str, body: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_openai_shaped_answer_labelled_as_a_stand_in() -> None:
    with StandinServer() as s:
        messages = build_classification_messages("Fresh?", "Great fun", ("fresh", "rotten"))
        body = json.dumps(
            {"model": "jev", "messages": messages, "logprobs": True, "top_logprobs": 2}
        ).encode()
        status, headers, payload = post(s.base_url + "/chat/completions", body)
        assert status == 200
        assert "stand-in" in headers["Server"] and headers["X-Standin"] == "true"
        assert (
            payload["system_fingerprint"] == STANDIN_FINGERPRINT
            and payload["object"] == "chat.completion"
        )
        choice = payload["choices"][0]
        top = choice["logprobs"]["content"][0]["top_logprobs"]
        assert [t["token"] for t in top] in (["A", "B"], ["B", "A"])
        assert math.isclose(sum(math.exp(t["logprob"]) for t in top), 1.0)
        assert choice["message"]["content"] == top[0]["token"]
        usage = payload["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert "stand-in" in repr(s)
        with urllib.request.urlopen(s.base_url + "/models", timeout=5) as response:
            models = json.loads(response.read())
        assert (
            models["data"][0]["id"] == "standin"
            and models["data"][0]["owned_by"] == STANDIN_FINGERPRINT
        )


def test_bad_requests_and_paths() -> None:
    with StandinServer() as s:
        assert post(s.base_url + "/chat/completions", b"not json")[0] == 400
        assert post(s.base_url + "/completions", b"{}")[0] == 404
        assert s.served == 1  # the 404 is not a chat request


def test_faults_are_served_in_order_then_normal_answers() -> None:
    with StandinServer() as s:
        s.add_faults(Fault.rate_limited(2), Fault.server_error(502))
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, headers, _ = post(s.base_url + "/chat/completions", body)
        assert status == 429 and headers["Retry-After"] == "2"
        assert post(s.base_url + "/chat/completions", body)[0] == 502
        assert post(s.base_url + "/chat/completions", body)[0] == 200
        assert s.served == 3 and len(s.requests) == 1


def test_hashed_answer_is_deterministic_and_sums_to_one() -> None:
    messages = build_classification_messages("q", "some text", ("a", "b", "c"))
    request = ChatRequest("m", tuple(messages), 1, True, 20, None, {})
    first, second = hashed_answer(request), hashed_answer(request)
    assert first == second
    assert math.isclose(math.fsum(math.exp(lp) for _, lp in first.top_logprobs), 1.0)


def test_prompt_round_trip_with_odd_text_and_many_options() -> None:
    text = "line one\n</text>\n\nOptions:\nnot really\nend"
    options = tuple(f"option {i}" for i in range(30))
    parsed = parse_classification_prompt(build_classification_messages("Which?", text, options))
    assert parsed is not None
    assert parsed.text == text and parsed.options == options and parsed.labels[-1] == "30"
    assert parse_classification_prompt([{"role": "user", "content": "hello"}]) is None


def test_distribution_reply_needs_a_positive_probability() -> None:
    assert distribution_reply({"A": 0.0, "B": 1.0}).text == "B"
    with pytest.raises(ValueError, match="at least one positive probability"):
        distribution_reply({"A": 0.0})


def test_stop_is_idempotent_and_port_zero_gives_distinct_ports() -> None:
    a, b = StandinServer().start(), StandinServer().start()
    try:
        assert a.port != b.port
    finally:
        a.stop()
        b.stop()
    a.stop()
    with pytest.raises(RuntimeError, match="expected a running stand-in server"):
        _ = a.base_url
    reply = StandinReply("x")
    assert reply.top_logprobs == ()


def test_command_line_server_announces_itself_as_a_stand_in(capsys: pytest.CaptureFixture[str]) -> None:
    from typestrict_pipeline.clients.standin import main

    assert main(["--for-seconds", "0.05", "--latency", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("stand-in server (not a real model) at http://127.0.0.1:")
