"""The model client interface: probabilities over a decision's answers, plus token usage.

Every client answers the same question for one example at a time (``classify``) and reports the
tokens that call used, so a caller (the refund pipeline, the backtest cost meter) can count spend.
``classify_many`` runs many examples, optionally on a thread pool, and keeps the input order.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

__all__ = [
    "ClassifyItem",
    "ClassifyResult",
    "Completion",
    "ModelClient",
    "TokenLogprob",
    "Usage",
]


@dataclass(frozen=True)
class Usage:
    """Tokens one call (or a sum of calls) used.

    Attributes:
        prompt_tokens: tokens sent.
        completion_tokens: tokens generated.
        calls: HTTP requests made (attempts, retries included); 0 for a file client.

    >>> Usage(10, 1, 1) + Usage(5, 2, 2)
    Usage(prompt_tokens=15, completion_tokens=3, calls=3)
    >>> (Usage(10, 1, 1) + Usage(5, 2, 2)).total_tokens
    18
    """

    prompt_tokens: int
    completion_tokens: int
    calls: int = 1

    @property
    def total_tokens(self) -> int:
        """prompt + completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.calls + other.calls,
        )

    @classmethod
    def zero(cls) -> Usage:
        """No tokens, no calls."""
        return cls(0, 0, 0)


@dataclass(frozen=True)
class TokenLogprob:
    """One alternative for a generated token.

    Attributes:
        token: the token text.
        logprob: its natural-log probability.
    """

    token: str
    logprob: float


@dataclass(frozen=True)
class Completion:
    """One chat completion.

    Attributes:
        text: the assistant message's content.
        usage: tokens used (and HTTP attempts made, retries included).
        model: the model name the endpoint reported.
        finish_reason: why generation stopped, as reported (None if absent).
        first_token_top_logprobs: the first generated token's alternatives, most likely first
            (empty unless ``logprobs`` was asked).
        attempts: HTTP attempts made (1 = no retry).
        latency_s: wall time of the whole call, retries and waits included.
    """

    text: str
    usage: Usage
    model: str
    finish_reason: str | None
    first_token_top_logprobs: tuple[TokenLogprob, ...]
    attempts: int
    latency_s: float


@dataclass(frozen=True)
class ClassifyItem:
    """One example to classify.

    Attributes:
        id: the example id.
        text: its text, exactly as in the dataset.
        options: the decision's answers (single) or this example's options (multiple choice).
    """

    id: str
    text: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class ClassifyResult:
    """A client's answer for one example.

    Attributes:
        id: the example id.
        options: the options, as asked.
        probabilities: one per option, aligned with ``options``.
        usage: tokens and calls this example cost.
    """

    id: str
    options: tuple[str, ...]
    probabilities: tuple[float, ...]
    usage: Usage


class ModelClient(abc.ABC):
    """Gives probabilities over an example's options for a question.

    Implementations: :class:`~typestrict_pipeline.clients.file.PredictionsFileClient` (recorded
    probabilities) and :class:`~typestrict_pipeline.clients.openai_http.OpenAICompatibleClient`
    (an OpenAI-compatible endpoint). Implementations are safe to call from several threads.
    """

    @abc.abstractmethod
    def classify(self, question: str, item: ClassifyItem, *, decision: str) -> ClassifyResult:
        """Probabilities over ``item.options`` for ``question`` about ``item.text``.

        Args:
            question: the decision's question.
            item: the example and its options.
            decision: the decision's name (a file client looks predictions up by it).

        Returns:
            The probabilities, aligned with ``item.options``, and the usage.

        Raises:
            ModelClientError: the model failed or answered something unusable.
        """

    def classify_many(
        self,
        question: str,
        items: Sequence[ClassifyItem],
        *,
        decision: str,
        max_workers: int = 1,
    ) -> list[ClassifyResult]:
        """:meth:`classify` for each item, in input order, on up to ``max_workers`` threads.

        Bounded by construction: an item's call is started only while fewer than
        ``max_workers`` calls are in flight and no call has failed yet, so once a call fails
        no further call starts, and the calls made are at most those that had succeeded when the
        first failure came back plus ``max_workers`` (the failed one and the ones in flight,
        which are waited for: no thread outlives the call). The failure of the earliest item
        among those made is raised.
        """
        if max_workers <= 1 or len(items) <= 1:
            return [self.classify(question, item, decision=decision) for item in items]
        results: list[ClassifyResult | None] = [None] * len(items)
        failed: tuple[int, BaseException] | None = None
        with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="model-client") as pool:
            in_flight: dict[Future[ClassifyResult], int] = {}
            nxt = 0

            def fill() -> int:
                started = nxt
                while started < len(items) and len(in_flight) < max_workers:
                    future = pool.submit(self.classify, question, items[started], decision=decision)
                    in_flight[future] = started
                    started += 1
                return started

            nxt = fill()
            while in_flight:
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    i = in_flight.pop(future)
                    error = future.exception()
                    if error is None:
                        results[i] = future.result()
                    elif failed is None or i < failed[0]:
                        failed = (i, error)
                if failed is None:
                    nxt = fill()
        if failed is not None:
            raise failed[1]
        return [r for r in results if r is not None]
