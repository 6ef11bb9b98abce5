"""A client for an OpenAI-compatible ``/v1/chat/completions`` endpoint (stdlib ``urllib`` only).

- **Probabilities from log-probabilities.** :meth:`OpenAICompatibleClient.classify` shows the
  options with labels (``A``, ``B``, ...; see :mod:`typestrict_pipeline.clients.prompt`) and asks
  for one token with ``logprobs: true, top_logprobs: N`` at temperature 0. It takes the *first
  generated token*'s alternatives (the ``top_logprobs`` list, plus the sampled token itself),
  maps each token to a label with :func:`~typestrict_pipeline.clients.prompt.match_label`, adds
  ``exp(logprob)`` of the tokens naming the same label (``"A"`` and ``" A"``), and divides by the
  total over all labels, so the probabilities sum to 1 over the options. An option none of whose
  tokens is among the alternatives gets 0.0 (it was less likely than every listed alternative).
  If no alternative names any option, the call fails with :class:`ModelClientError`: there is no
  number to give, and it is never made up.
- **Retries.** HTTP 429 and 5xx, connection errors and timeouts are retried up to
  ``max_attempts`` attempts in all. The wait before retry r (1-based) is the server's
  ``Retry-After`` (seconds or an HTTP date) when it sends one, else
  ``backoff_base_s · 2^(r-1)``; either is capped at ``backoff_max_s``. No jitter (deterministic).
  Other 4xx answers fail at once.
- **Timeouts.** ``timeout_s`` bounds connecting and each socket read of one attempt.
- **API key.** Read from the environment variable ``api_key_env`` at each call, sent as
  ``Authorization: Bearer ...``; it is never stored on the client, logged, or put in an error
  message or a ``repr`` (any echo of it in a server's error body is replaced by ``***``).
- **Threads.** Each call opens its own connection; the client holds no mutable state, so one
  client can serve many threads.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import math
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from typestrict_pipeline.clients.base import (
    ClassifyItem,
    ClassifyResult,
    Completion,
    ModelClient,
    TokenLogprob,
    Usage,
)
from typestrict_pipeline.clients.prompt import (
    build_classification_messages,
    match_label,
    option_labels,
)
from typestrict_pipeline.errors import EndpointUnreachableError, ModelClientError
from typestrict_pipeline.values import base_url as base_url_rule

__all__ = ["OpenAICompatibleClient"]

logger = logging.getLogger(__name__)

_RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))
_BODY_SNIPPET = 300


class _Retryable(Exception):
    """A retryable failure; ``answered``: the endpoint answered (HTTP 429 or 5xx), else the
    attempt failed on the way (connection, name, timeout)."""

    def __init__(self, what: str, retry_after: float | None = None, *, answered: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after
        self.answered = answered


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class OpenAICompatibleClient(ModelClient):
    """Chat completions and answer probabilities from an OpenAI-compatible endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended to its
            path: ``http://h/prefix/v1`` calls ``http://h/prefix/v1/chat/completions``); one
            with a query, a fragment or a user and password is refused
            (:func:`typestrict_pipeline.values.base_url`: ``InputError``, a ``ValueError``).
        model: the model name sent with each request.
        api_key_env: environment variable holding the API key (None: no Authorization header).
        timeout_s: seconds for connecting and for each read, per attempt.
        max_attempts: attempts in all (1 = no retry).
        backoff_base_s: first retry wait when the server gives no ``Retry-After``.
        backoff_max_s: the longest single wait.
        top_logprobs: alternatives asked for the answer token (1..20).
        sleep: the wait function (``time.sleep``).

    >>> OpenAICompatibleClient("http://127.0.0.1:9/v1", "m", api_key_env="MY_KEY")
    OpenAICompatibleClient(base_url='http://127.0.0.1:9/v1', model='m', api_key_env='MY_KEY')
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 60.0,
        top_logprobs: int = 20,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Its own guard, whoever built it (the CLI and a manifest check the same rule first): a
        # base URL is joined with /chat/completions by its path, so a query, a fragment or a
        # user and password in it is refused (values.base_url), never sent.
        base_url_rule(base_url, "the model endpoint's base_url", key_option="api_key_env")
        if max_attempts < 1:
            raise ValueError(f"expected max_attempts >= 1, got {max_attempts}. Use 1 for no retry.")
        if timeout_s <= 0 or backoff_base_s < 0 or backoff_max_s < 0:
            raise ValueError(
                "expected a positive timeout and non-negative backoff, got otherwise. Fix them."
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.top_logprobs = top_logprobs
        self._sleep = sleep

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    @property
    def url(self) -> str:
        """The chat-completions URL."""
        return f"{self.base_url}/chat/completions"

    # ---------------------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ModelClientError(
                f"{self.url}: expected the API key in the environment variable {self.api_key_env}, "
                "got nothing. Set it before running, or set api_key_env to null for an endpoint without a key."
            )
        return key

    def _scrub(self, text: str, key: str | None) -> str:
        if key:
            text = text.replace(key, "***")
        return text

    def _wait_for(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        return float(min(self.backoff_base_s * (2 ** (attempt - 1)), self.backoff_max_s))

    def _attempt(self, body: bytes, key: str | None) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read()[:_BODY_SNIPPET].decode("utf-8", "replace")
            except Exception:
                detail = ""
            what = f"HTTP {exc.code}" + (
                f" ({self._scrub(detail, key).strip()})" if detail.strip() else ""
            )
            if exc.code in _RETRY_STATUSES:
                raise _Retryable(what, _parse_retry_after(exc.headers.get("Retry-After")),
                                 answered=True) from None
            raise ModelClientError(
                f"{self.url}: expected a successful answer, got {what}. "
                "Check the model name, the request and the API key's permissions (not retried)."
            ) from None
        except TimeoutError:
            raise _Retryable(f"no answer within the {self.timeout_s:g} s timeout") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError | socket.timeout):
                raise _Retryable(f"no answer within the {self.timeout_s:g} s timeout") from None
            raise _Retryable(f"connection failed ({self._scrub(str(reason), key)})") from None
        except (http.client.HTTPException, ConnectionError) as exc:
            raise _Retryable(f"connection failed ({type(exc).__name__})") from None
        try:
            decoded = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            snippet = self._scrub(raw[:120].decode("utf-8", "replace"), key)
            raise ModelClientError(
                f"{self.url}: expected a JSON chat completion, got {snippet!r}. "
                "Check that base_url points at an OpenAI-compatible /v1 endpoint."
            ) from None
        if not isinstance(decoded, dict):
            raise ModelClientError(
                f"{self.url}: expected a JSON object, got {type(decoded).__name__}. Check the endpoint."
            )
        return decoded

    def _post(self, payload: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        key = self._api_key()
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        last = ""
        answered = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self._attempt(body, key), attempt
            except _Retryable as exc:
                last = exc.what
                answered = answered or exc.answered
                if attempt == self.max_attempts:
                    break
                wait = self._wait_for(attempt, exc.retry_after)
                logger.warning(
                    "model endpoint %s: attempt %d of %d failed (%s); retrying in %.3f s",
                    self.url,
                    attempt,
                    self.max_attempts,
                    last,
                    wait,
                )
                if wait > 0:
                    self._sleep(wait)
        message = (f"{self.url}: expected a successful answer within {self.max_attempts} attempt(s), "
                   f"got {last} on the last one. Check that the endpoint is up, or raise max_attempts / timeout_s.")
        if not answered:  # no attempt reached the endpoint: a backtest's fail-fast rule counts these
            raise EndpointUnreachableError(message, endpoint=self.url, transport=last)
        raise ModelClientError(message)

    # ---------------------------------------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = 0.0,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Completion:
        """One chat completion, with retries.

        Args:
            messages: ``[{"role": ..., "content": ...}, ...]``.
            max_tokens: the most tokens to generate (None: the endpoint's default).
            temperature: sampling temperature (None: not sent).
            logprobs: ask for log-probabilities of the generated tokens.
            top_logprobs: alternatives per token (needs ``logprobs``).
            extra: more request fields, sent as given (they may not override ``model`` or
                ``messages``).

        Returns:
            The :class:`Completion` (text, usage with attempts, first-token alternatives).

        Raises:
            ModelClientError: every attempt failed, a non-retryable status, a missing key, or an
                answer without ``choices``/``usage``.
        """
        payload: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if temperature is not None:
            payload["temperature"] = temperature
        if logprobs:
            payload["logprobs"] = True
            if top_logprobs is not None:
                payload["top_logprobs"] = top_logprobs
        for k, v in (extra or {}).items():
            if k in ("model", "messages"):
                raise ValueError(
                    f"expected extra fields other than {k!r}, got {k!r}. Pass it as an argument."
                )
            payload[k] = v
        started = time.perf_counter()
        data, attempts = self._post(payload)
        latency = time.perf_counter() - started
        return self._completion(data, attempts, latency)

    def _completion(self, data: dict[str, Any], attempts: int, latency: float) -> Completion:
        def bad(what: str) -> ModelClientError:
            return ModelClientError(
                f"{self.url}: expected a chat completion with {what}, got {json.dumps(data)[:200]}. "
                "Check that the endpoint is OpenAI-compatible."
            )

        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise bad("'choices'")
        choice = choices[0]
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise bad("a text message")
        usage = data.get("usage")
        if (
            not isinstance(usage, dict)
            or not isinstance(usage.get("prompt_tokens"), int)
            or not isinstance(usage.get("completion_tokens"), int)
        ):
            raise bad("'usage' (prompt_tokens and completion_tokens), needed to count cost")
        alternatives: list[TokenLogprob] = []
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and isinstance(lp.get("content"), list) and lp["content"]:
            first = lp["content"][0]
            if isinstance(first, dict):
                seen: set[str] = set()
                for alt in (first.get("top_logprobs") or []) + [first]:
                    if (
                        isinstance(alt, dict)
                        and isinstance(alt.get("token"), str)
                        and isinstance(alt.get("logprob"), int | float)
                        and alt["token"] not in seen
                    ):
                        seen.add(alt["token"])
                        alternatives.append(TokenLogprob(alt["token"], float(alt["logprob"])))
        alternatives.sort(key=lambda t: -t.logprob)
        model = data.get("model")
        finish = choice.get("finish_reason")
        return Completion(
            text=text,
            usage=Usage(usage["prompt_tokens"], usage["completion_tokens"], attempts),
            model=model if isinstance(model, str) else self.model,
            finish_reason=finish if isinstance(finish, str) else None,
            first_token_top_logprobs=tuple(alternatives),
            attempts=attempts,
            latency_s=latency,
        )

    def probabilities_from_logprobs(
        self, alternatives: Sequence[TokenLogprob], options: Sequence[str]
    ) -> tuple[float, ...]:
        """Turn the first token's alternatives into probabilities over the options.

        Args:
            alternatives: token alternatives with natural-log probabilities.
            options: the options, in order (labelled as in the prompt).

        Returns:
            One probability per option, summing to 1.

        Raises:
            ModelClientError: no alternative names any option.

        >>> import math
        >>> c = OpenAICompatibleClient("http://127.0.0.1:9/v1", "m")
        >>> c.probabilities_from_logprobs(
        ...     [TokenLogprob("A", math.log(0.6)), TokenLogprob(" A", math.log(0.1)),
        ...      TokenLogprob("B", math.log(0.2)), TokenLogprob("Sure", math.log(0.1))], ["yes", "no"])
        (0.77777777777..., 0.22222222222...)
        """
        labels = option_labels(len(options))
        mass = [0.0] * len(options)
        for alt in alternatives:
            i = match_label(alt.token, labels)
            if i is not None:
                mass[i] += math.exp(alt.logprob)
        total = math.fsum(mass)
        if not total > 0.0:
            tokens = [a.token for a in alternatives[:10]]
            raise ModelClientError(
                f"{self.url}: expected one of the option labels {list(labels)} among the first "
                f"answer token's alternatives, got {tokens}. The model did not answer with a label; "
                "check the model (it must support logprobs) or the question."
            )
        return tuple(m / total for m in mass)

    def classify(self, question: str, item: ClassifyItem, *, decision: str) -> ClassifyResult:
        """Probabilities over ``item.options`` from the first answer token's log-probabilities.

        Raises:
            ModelClientError: see :meth:`complete` and :meth:`probabilities_from_logprobs`.
        """
        messages = build_classification_messages(question, item.text, item.options)
        completion = self.complete(
            messages, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=self.top_logprobs
        )
        if not completion.first_token_top_logprobs:
            raise ModelClientError(
                f"{self.url}: expected log-probabilities in the answer for example {item.id!r}, got none. "
                "Use an endpoint and model that support logprobs: true."
            )
        probs = self.probabilities_from_logprobs(completion.first_token_top_logprobs, item.options)
        return ClassifyResult(
            id=item.id, options=item.options, probabilities=probs, usage=completion.usage
        )
