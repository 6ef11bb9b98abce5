"""The OpenAI-compatible HTTP client against the real local stand-in server."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator

import pytest

from typestrict_pipeline.clients import (
    ChatRequest,
    ClassifyItem,
    Fault,
    OpenAICompatibleClient,
    StandinReply,
    StandinServer,
    classification_answer,
)
from typestrict_pipeline.clients.prompt import ClassificationPrompt
from typestrict_pipeline.errors import ModelClientError

KEY_ENV = "TYPESTRICT_TEST_MODEL_KEY"
SECRET = "sk-test-9f8e7d6c5b4a-do-not-leak"


def judge(prompt: ClassificationPrompt) -> dict[str, float]:
    if prompt.options == ("fresh", "rotten", "plot"):
        return {"fresh": 0.6, "rotten": 0.3, "plot": 0.1}
    return {
        o: (0.7 if i == 0 else 0.3 / (len(prompt.options) - 1))
        for i, o in enumerate(prompt.options)
    }


@pytest.fixture
def server() -> Iterator[StandinServer]:
    with StandinServer(classification_answer(judge)) as s:
        yield s


class Sleeps:
    """Records each wait and really waits (so Retry-After is honoured in real time)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self.lock:
            self.waits.append(seconds)
        time.sleep(seconds)


ITEM = ClassifyItem(id="r1", text="A joyous, clever film.", options=("fresh", "rotten", "plot"))


def test_probabilities_come_from_the_answer_logprobs(server: StandinServer) -> None:
    client = OpenAICompatibleClient(server.base_url, "jev-standin", top_logprobs=5)
    result = client.classify("Fresh, rotten or plot?", ITEM, decision="sentiment")
    assert result.id == "r1" and result.options == ITEM.options
    for got, want in zip(result.probabilities, (0.6, 0.3, 0.1), strict=True):
        assert math.isclose(got, want, rel_tol=1e-12)
    assert math.isclose(math.fsum(result.probabilities), 1.0, rel_tol=1e-12)
    assert (
        result.usage.calls == 1
        and result.usage.completion_tokens == 1
        and result.usage.prompt_tokens > 20
    )
    (request,) = server.requests
    assert request.logprobs and request.top_logprobs == 5 and request.max_tokens == 1
    assert request.model == "jev-standin" and request.body["temperature"] == 0.0
    assert request.authorization is None  # no api_key_env: no header


def test_options_missing_from_the_alternatives_get_zero_and_the_rest_renormalises(
    server: StandinServer,
) -> None:
    client = OpenAICompatibleClient(server.base_url, "m", top_logprobs=2)  # only A and B come back
    result = client.classify("q?", ITEM, decision="sentiment")
    assert math.isclose(result.probabilities[0], 0.6 / 0.9) and math.isclose(
        result.probabilities[1], 0.3 / 0.9
    )
    assert result.probabilities[2] == 0.0


def test_multiple_choice_each_example_its_own_options(server: StandinServer) -> None:
    client = OpenAICompatibleClient(server.base_url, "m")
    items = [
        ClassifyItem("a", "heist", ("Ocean's", "Heat", "Up", "Cars")),
        ClassifyItem("b", "balloon", ("Up", "Cars")),
    ]
    results = client.classify_many("Which title?", items, decision="title", max_workers=2)
    assert [r.id for r in results] == ["a", "b"]
    assert [round(p, 9) for p in results[0].probabilities] == [0.7, 0.1, 0.1, 0.1]
    assert [round(p, 9) for p in results[1].probabilities] == [0.7, 0.3]


def test_no_answer_label_among_the_alternatives_is_an_error() -> None:
    def chatty(_: ChatRequest) -> StandinReply:
        return StandinReply("Well", (("Well", -0.1), ("Sure", -2.5)))

    with StandinServer(chatty) as s:
        client = OpenAICompatibleClient(s.base_url, "m")
        with pytest.raises(
            ModelClientError,
            match=r"expected one of the option labels \['A', 'B', 'C'\] among the first answer token's alternatives, got \['Well', 'Sure'\]",
        ):
            client.classify("q?", ITEM, decision="d")


def test_retries_429_and_500_with_backoff_then_succeeds(server: StandinServer) -> None:
    sleeps = Sleeps()
    server.add_faults(Fault.rate_limited(retry_after=0.15), Fault.server_error(503))
    client = OpenAICompatibleClient(
        server.base_url, "m", max_attempts=4, backoff_base_s=0.05, sleep=sleeps
    )
    result = client.classify("q?", ITEM, decision="d")
    # retry 1 honours Retry-After (0.15 s); retry 2 has none: backoff 0.05 * 2^1 = 0.1 s
    # (the waits the client asked for, not the wall time: no timing asserts in tests)
    assert sleeps.waits == [0.15, 0.1]
    assert result.usage.calls == 3 and server.served == 3
    assert math.isclose(result.probabilities[0], 0.6)


def test_gives_up_after_max_attempts_with_a_clear_error(server: StandinServer) -> None:
    sleeps = Sleeps()
    server.add_faults(*[Fault.server_error()] * 5)
    client = OpenAICompatibleClient(
        server.base_url, "m", max_attempts=3, backoff_base_s=0.01, sleep=sleeps
    )
    with pytest.raises(ModelClientError) as info:
        client.classify("q?", ITEM, decision="d")
    assert str(info.value) == (
        f"{server.base_url}/chat/completions: expected a successful answer within 3 attempt(s), got HTTP 500 "
        '({"error": {"message": "internal error (stand-in fault)", "type": "standin_error", "code": 500}}) '
        "on the last one. Check that the endpoint is up, or raise max_attempts / timeout_s."
    )
    assert server.served == 3 and sleeps.waits == [0.01, 0.02]


def test_other_client_errors_are_not_retried(server: StandinServer) -> None:
    server.add_faults(Fault(400, None, "bad request"))
    client = OpenAICompatibleClient(server.base_url, "m", max_attempts=4, backoff_base_s=0.01)
    with pytest.raises(ModelClientError, match=r"got HTTP 400 .*\(not retried\)"):
        client.classify("q?", ITEM, decision="d")
    assert server.served == 1


def test_timeout_is_honoured_and_retried(server: StandinServer) -> None:
    server.add_faults(Fault.slow(1.5))
    client = OpenAICompatibleClient(server.base_url, "m", timeout_s=0.2, max_attempts=1)
    with pytest.raises(
        ModelClientError, match=r"got no answer within the 0.2 s timeout on the last one"
    ):
        client.classify("q?", ITEM, decision="d")
    # one attempt, given up on at the timeout (the message says so); no wall-time assert
    assert server.served == 1
    server.add_faults(Fault.slow(1.5))
    client = OpenAICompatibleClient(
        server.base_url, "m", timeout_s=0.2, max_attempts=2, backoff_base_s=0.01
    )
    assert client.classify("q?", ITEM, decision="d").usage.calls == 2


def test_connection_refused_is_retried_then_reported() -> None:
    with StandinServer() as s:
        url = s.base_url
    client = OpenAICompatibleClient(url, "m", max_attempts=2, backoff_base_s=0.01)
    with pytest.raises(ModelClientError, match=r"within 2 attempt\(s\), got connection failed"):
        client.classify("q?", ITEM, decision="d")


def test_api_key_is_sent_as_bearer_but_never_logged_shown_or_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)

    def echo_key(request: ChatRequest) -> StandinReply:  # a careless server echoing the header
        raise RuntimeError(str(request.authorization))

    with StandinServer(classification_answer(judge)) as s, caplog.at_level(logging.DEBUG):
        client = OpenAICompatibleClient(s.base_url, "m", api_key_env=KEY_ENV, backoff_base_s=0.01)
        s.add_faults(Fault.rate_limited(0.01), Fault(401, None, f"invalid key {SECRET}"))
        with pytest.raises(ModelClientError) as info:
            client.classify("q?", ITEM, decision="d")
        assert SECRET not in str(info.value) and "invalid key ***" in str(info.value)
        result = client.classify("q?", ITEM, decision="d")
        assert result.usage.calls == 1
        assert s.requests[-1].authorization == f"Bearer {SECRET}"
        assert (
            SECRET not in repr(client)
            and SECRET not in repr(s.requests[-1])
            and SECRET not in repr(s)
        )
        s.answer = echo_key
        with pytest.raises(ModelClientError) as info:
            client.classify("q?", ITEM, decision="d")
        assert SECRET not in str(info.value)
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert SECRET not in caplog.text


def test_missing_key_variable_names_the_variable_only(
    monkeypatch: pytest.MonkeyPatch, server: StandinServer
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    client = OpenAICompatibleClient(server.base_url, "m", api_key_env=KEY_ENV)
    with pytest.raises(
        ModelClientError,
        match=rf"expected the API key in the environment variable {KEY_ENV}, got nothing",
    ):
        client.classify("q?", ITEM, decision="d")
    assert server.served == 0
    monkeypatch.setenv(KEY_ENV, SECRET)  # read at call time, not when the client was made
    assert client.classify("q?", ITEM, decision="d").usage.calls == 1


def test_complete_returns_text_usage_and_alternatives(server: StandinServer) -> None:
    client = OpenAICompatibleClient(server.base_url, "m")
    c = client.complete([{"role": "user", "content": "Hello there"}], max_tokens=5)
    assert c.text == "stand-in reply" and c.finish_reason == "stop" and c.attempts == 1
    assert c.usage.prompt_tokens == 3 + 3 and c.usage.completion_tokens == 4
    assert c.first_token_top_logprobs == ()
    c = client.complete(
        [{"role": "user", "content": "Hi"}], logprobs=True, top_logprobs=3, extra={"seed": 7}
    )
    assert c.first_token_top_logprobs[0].token == "stand-in reply"
    assert server.requests[-1].body["seed"] == 7
    with pytest.raises(ValueError, match="other than 'model'"):
        client.complete([{"role": "user", "content": "x"}], extra={"model": "other"})


def test_a_response_without_usage_is_refused() -> None:
    with StandinServer(report_usage=False) as s:
        client = OpenAICompatibleClient(s.base_url, "m")
        with pytest.raises(
            ModelClientError,
            match=r"expected a chat completion with 'usage' \(prompt_tokens and completion_tokens\), needed to count cost",
        ):
            client.complete([{"role": "user", "content": "x"}])


def test_concurrent_calls_run_in_parallel() -> None:
    with StandinServer(classification_answer(judge), latency_s=0.2) as s:
        client = OpenAICompatibleClient(s.base_url, "m")
        items = [ClassifyItem(str(i), f"text {i}", ("fresh", "rotten", "plot")) for i in range(8)]
        results = client.classify_many("q?", items, decision="d", max_workers=8)
        assert [r.id for r in results] == [str(i) for i in range(8)]
        # overlap measured by the server, not by wall time (the machine may be busy)
        assert s.max_in_flight >= 2


def test_retry_after_as_an_http_date_and_as_seconds() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from typestrict_pipeline.clients.openai_http import _parse_retry_after

    assert _parse_retry_after("1.5") == 1.5
    assert _parse_retry_after("-3") == 0.0
    assert _parse_retry_after("soon") is None and _parse_retry_after(None) is None
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    waited = _parse_retry_after(when)
    assert waited is not None and 25 < waited <= 30


@pytest.mark.parametrize("workers", [2, 4])
def test_a_failing_batch_stops_early_instead_of_calling_every_example(
    server: StandinServer, workers: int
) -> None:
    # The first answers fail: at most ``workers`` calls were in flight when the first failure
    # came back, and none starts after it. A bound by construction, not a race: the old
    # "fewer than 50 of 200" failed on a busy machine (50 calls made), this holds on any.
    server.add_faults(*[Fault(400, None, "bad")] * workers)
    client = OpenAICompatibleClient(server.base_url, "m", max_attempts=1)
    items = [ClassifyItem(str(i), f"t{i}", ("a", "b")) for i in range(200)]
    with pytest.raises(ModelClientError, match="HTTP 400"):
        client.classify_many("q?", items, decision="d", max_workers=workers)
    assert server.served <= workers


def test_a_batch_never_has_more_calls_in_flight_than_its_workers(server: StandinServer) -> None:
    client = OpenAICompatibleClient(server.base_url, "m", max_attempts=1)
    items = [ClassifyItem(str(i), f"t{i}", ("a", "b")) for i in range(40)]
    out = client.classify_many("q?", items, decision="d", max_workers=3)
    assert [r.id for r in out] == [str(i) for i in range(40)]  # in input order
    assert server.served == 40 and server.max_in_flight <= 3
