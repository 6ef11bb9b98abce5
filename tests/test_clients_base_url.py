"""The OpenAI-compatible client's own guard on its base URL, against a real local HTTP server:
a path prefix is kept when ``/chat/completions`` is joined to it, and a base URL with a query, a
fragment or a user and password is refused before any request, with what to write instead."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.test_backtest_failed_steps import _completion, model_server
from typestrict_pipeline.cli import main
from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
from typestrict_pipeline.errors import InputError


def recording_server(paths: list[str]) -> contextlib.AbstractContextManager[str]:
    """A real endpoint on 127.0.0.1 that answers every POST with a completion and records its
    path (query included); its root URL (no path)."""
    return model_server(lambda body: _completion("0.5"), paths=paths, base_path="")


@pytest.mark.parametrize("prefix", ["/prefix/v1", "/prefix/v1/", "/a/b/c/v1", "/v1", ""])
def test_a_path_prefix_is_kept_when_chat_completions_is_joined(prefix: str) -> None:
    paths: list[str] = []
    with recording_server(paths) as root:
        client = OpenAICompatibleClient(root + prefix, "m", max_attempts=1)
        assert client.complete([{"role": "user", "content": "hi"}]).text == "0.5"
    assert paths == [prefix.rstrip("/") + "/chat/completions"]


REFUSED = [
    ("/v1?api-version=2024-06-01", "without a query (?…) or a fragment (#…): /chat/completions is appended to its path"),
    ("/v1?", "without a query (?…) or a fragment (#…)"),
    ("/v1#frag", "without a query (?…) or a fragment (#…)"),
    ("/v1/chat/completions", "as the base URL the client appends /chat/completions to"),
]


@pytest.mark.parametrize("tail, expected", REFUSED)
def test_a_query_a_fragment_or_the_full_url_is_refused_before_any_request(tail: str, expected: str) -> None:
    paths: list[str] = []
    with recording_server(paths) as root, pytest.raises(InputError) as refused:
        OpenAICompatibleClient(root + tail, "m", max_attempts=1).complete([{"role": "user", "content": "hi"}])
    assert f"expected the model endpoint's base_url {expected}" in str(refused.value)
    assert paths == []


def test_a_user_and_password_are_refused_and_the_password_never_shown() -> None:
    paths: list[str] = []
    with recording_server(paths) as root, pytest.raises(InputError) as refused:
        url = root.replace("http://", "http://ana:s3cret@") + "/v1"
        OpenAICompatibleClient(url, "m", max_attempts=1).complete([{"role": "user", "content": "hi"}])
    text = str(refused.value)
    assert "expected the model endpoint's base_url without a user or password (user:password@), got " in text
    assert "ana:***@127.0.0.1" in text and "s3cret" not in text
    assert "put the endpoint's key in an environment variable and name it with api_key_env" in text
    assert paths == []


@pytest.mark.parametrize("tail, expected", [
    ("/v1?key=abc", "expected --model-url without a query (?…) or a fragment (#…)"),
    ("/v1/chat/completions", "expected --model-url as the base URL the client appends /chat/completions to"),
])
def test_the_cli_refuses_such_a_model_url_before_the_store_or_any_call(
    tail: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths: list[str] = []
    db = tmp_path / "store.db"
    with recording_server(paths) as root:
        code = main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-03",
                     "--model-url", root + tail, "--model", "m", "--price-in", "1", "--price-out", "1",
                     "--store", f"sqlite:///{db}", "--new-store"])
    assert code == 2
    assert expected in capsys.readouterr().err
    assert paths == [] and not db.exists()


def test_the_cli_hides_the_password_of_a_model_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-03",
                 "--model-url", "https://ana:s3cret@api.example.com/v1", "--model", "m", "--price-in", "1",
                 "--price-out", "1", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--new-store"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("expected --model-url without a user or password (user:password@), got "
            "'https://ana:***@api.example.com/v1'. Give the base URL alone, e.g. https://api.example.com/v1; put "
            "the endpoint's key in an environment variable and name it with --api-key-env.") in err
    assert "s3cret" not in err
