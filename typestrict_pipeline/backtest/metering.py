"""Metering: every model call, tool call, retry and judge call is counted and priced.

Money is integer micro-USD (1 USD = 1_000_000 micro-USD) everywhere. A call's cost is
``ceil((input_tokens * input_price + output_tokens * output_price) / 1_000_000)`` with prices in
micro-USD per million tokens: rounding each call *up* to the next micro-USD never under-counts
spend (the bias is under 1 micro-USD per call, documented in ``docs/method/backtests.md``).

Every record carries the :class:`RunMode` of the run that made it (``HISTORICAL`` for a
backtest, ``LIVE`` for a live run), so spend can be reported apart and a historical call can
never be read back as live.

>>> prices = PriceTable(models={"m": ModelPrice(150_000, 600_000)})   # $0.15 / $0.60 per 1M tokens
>>> prices.model_cost("m", input_tokens=1_000, output_tokens=10)
156
>>> format_usd(156)
'$0.0002'
"""

from __future__ import annotations

import enum
import inspect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from typestrict_pipeline.errors import (
    EndpointUnreachableError,
    InputError,
    ModelClientError,
    TypeStrictError,
)

MICRO_USD_PER_USD = 1_000_000
TOKENS_PER_PRICE_UNIT = 1_000_000

__all__ = [
    "MICRO_USD_PER_USD",
    "UNCAPPED_OUTPUT_TOKENS",
    "BudgetRefused",
    "CallGate",
    "CallKind",
    "CallRecord",
    "CompletionLike",
    "Meter",
    "MeteredModel",
    "MeteredTool",
    "ModelClient",
    "ModelPrice",
    "PriceTable",
    "RunMode",
    "UsageLike",
    "call_bound",
    "format_usd",
    "prompt_token_bound",
]


class RunMode(enum.StrEnum):
    """Whether a run replays history or decides now.

    Attributes:
        HISTORICAL: a backtest (or a study's backtest): a replayed decision, never a live one.
        LIVE: a live run of the workflow (``typestrict run`` or the live schedule).
    """

    HISTORICAL = "HISTORICAL"
    LIVE = "LIVE"


class CallKind(enum.StrEnum):
    """What a metered call was.

    Attributes:
        MODEL: a model call made by a decision.
        TOOL: a tool call made by a decision.
        JUDGE: a model call made by the scoring function (the scoring judge).
    """

    MODEL = "model"
    TOOL = "tool"
    JUDGE = "judge"


def format_usd(micro_usd: int) -> str:
    """Micro-USD as people read a cost: the product's one rule,
    :func:`typestrict_pipeline.study.limits.format_usd` (the run card, the Backtests tab, Settings →
    Usage, ``typestrict backtest``, ``typestrict usage`` and the leaderboard's Cost all write it):
    cents from $1, four decimals from $0.0001, six below.

    >>> format_usd(1_234_567), format_usd(12_345), format_usd(156), format_usd(-5)
    ('$1.23', '$0.0123', '$0.0002', '-$0.000005')
    """
    from typestrict_pipeline.study.limits import format_usd as people_usd

    return people_usd(int(micro_usd))


@dataclass(frozen=True)
class ModelPrice:
    """A model's price in integer micro-USD per million tokens.

    Attributes:
        input_micro_usd_per_mtok: price of one million prompt tokens.
        output_micro_usd_per_mtok: price of one million completion tokens.
    """

    input_micro_usd_per_mtok: int
    output_micro_usd_per_mtok: int

    def __post_init__(self) -> None:
        for name in ("input_micro_usd_per_mtok", "output_micro_usd_per_mtok"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(
                    f"{name} as a non-negative integer (micro-USD per million tokens)",
                    repr(value),
                    "write prices in micro-USD, for example 150000 for $0.15 per 1M tokens",
                )

    def cost(self, input_tokens: int, output_tokens: int) -> int:
        """Cost of one call in micro-USD, rounded up."""
        numerator = (
            input_tokens * self.input_micro_usd_per_mtok
            + output_tokens * self.output_micro_usd_per_mtok
        )
        return -(-numerator // TOKENS_PER_PRICE_UNIT)


@dataclass(frozen=True)
class PriceTable:
    """Prices of models (per token) and tools (per call), in integer micro-USD.

    A model or tool missing from the table is an error, never free: an unpriced call would make
    a run look cheaper than it was.

    Attributes:
        models: model name -> :class:`ModelPrice`.
        tools: tool name -> micro-USD per call.
    """

    models: Mapping[str, ModelPrice] = field(default_factory=dict)
    tools: Mapping[str, int] = field(default_factory=dict)

    def model_price(self, model: str) -> ModelPrice:
        """The price of ``model``.

        Raises:
            InputError: the model has no price.
        """
        try:
            return self.models[model]
        except KeyError:
            raise InputError(
                f"a price for model {model!r} in the price table",
                f"none (priced models: {sorted(self.models) or 'none'})",
                "add the model's input and output prices before running it: every call is costed",
            ) from None

    def model_cost(self, model: str, *, input_tokens: int, output_tokens: int) -> int:
        """Micro-USD for one call of ``model``."""
        return self.model_price(model).cost(input_tokens, output_tokens)

    def tool_cost(self, tool: str) -> int:
        """Micro-USD for one call of ``tool``.

        Raises:
            InputError: the tool has no price.
        """
        try:
            return int(self.tools[tool])
        except KeyError:
            raise InputError(
                f"a per-call price for tool {tool!r} in the price table",
                f"none (priced tools: {sorted(self.tools) or 'none'})",
                "add the tool's price (0 for a free tool, written explicitly)",
            ) from None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy (stored with each backtest, so its costs can be re-checked)."""
        return {
            "models": {
                k: {"input_micro_usd_per_mtok": v.input_micro_usd_per_mtok,
                    "output_micro_usd_per_mtok": v.output_micro_usd_per_mtok}
                for k, v in sorted(self.models.items())
            },
            "tools": dict(sorted(self.tools.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PriceTable:
        """The inverse of :meth:`to_json`.

        >>> PriceTable.from_json({"models": {"m": {"input_micro_usd_per_mtok": 1,
        ...     "output_micro_usd_per_mtok": 2}}}).model_price("m")
        ModelPrice(input_micro_usd_per_mtok=1, output_micro_usd_per_mtok=2)
        """
        models = {
            str(k): ModelPrice(int(v["input_micro_usd_per_mtok"]), int(v["output_micro_usd_per_mtok"]))
            for k, v in dict(data.get("models", {})).items()
        }
        tools = {str(k): int(v) for k, v in dict(data.get("tools", {})).items()}
        return cls(models=models, tools=tools)


@runtime_checkable
class UsageLike(Protocol):
    """Token counts of one completion (OpenAI's ``usage`` object)."""

    prompt_tokens: int
    completion_tokens: int


@runtime_checkable
class CompletionLike(Protocol):
    """What a model client's ``complete`` returns: the text and its token usage."""

    text: str
    usage: Any


@runtime_checkable
class ModelClient(Protocol):
    """The model-client interface the engine meters (``typestrict_pipeline.clients`` implements it).

    ``complete(messages, **kwargs)`` sends OpenAI-style chat messages and returns an object with
    ``text`` and ``usage`` (``prompt_tokens``, ``completion_tokens``); a ``model`` attribute on the
    client (or on the completion) names the price-table entry.
    """

    def complete(self, messages: Sequence[Mapping[str, str]], **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One metered call (a retry is its own record, with ``attempt`` > 1).

    Attributes:
        kind: model, tool or judge.
        name: the client or tool name the workflow used (``ctx.models[name]``).
        model: the priced model (or the tool name for a tool).
        input_tokens: prompt tokens (0 for a tool, or for an attempt that got no answer).
        output_tokens: completion tokens.
        cost_micro_usd: what the call cost.
        latency_s: wall time of the call.
        attempt: 1 for the first try, 2 for the first retry, ...
        ok: whether the call returned.
        error: the error of a failed call.
        mode: HISTORICAL or LIVE.
        step_index: the backtest step that made it (``None`` for a live run).
        started_at_unix: wall-clock start, seconds since the epoch (usage is grouped by its UTC day).
    """

    kind: CallKind
    name: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_micro_usd: int
    latency_s: float
    attempt: int
    ok: bool
    error: str | None
    mode: RunMode
    step_index: int | None
    started_at_unix: float


class Meter:
    """Collects the call records of one step (or one live run); thread-safe.

    Args:
        mode: the run's mode, stamped on every record.
        step_index: the step the calls belong to (``None`` for a live run).
    """

    __slots__ = ("mode", "reached", "records", "step_index", "total_micro_usd", "unreachable")

    _lock = threading.Lock()  # shared: adding a record is rare next to everything else a step does

    def __init__(self, mode: RunMode, step_index: int | None = None) -> None:
        self.mode = mode
        self.step_index = step_index
        self.records: list[CallRecord] = []
        self.total_micro_usd = 0
        # What the backtest's fail-fast rule reads (engine.EndpointWatch): a model or judge call
        # of this step got an answer (or failed other than on the way), and the last call that
        # never reached its endpoint (connection refused, name unknown, timed out).
        self.reached = False
        self.unreachable: EndpointUnreachableError | None = None

    def add(self, record: CallRecord) -> None:
        """Add one record (the record's mode must be the meter's)."""
        if record.mode is not self.mode:
            raise TypeStrictError(
                f"expected a {self.mode.value} call record in a {self.mode.value} run, got a "
                f"{record.mode.value} one. Historical and live calls are never mixed."
            )
        with self._lock:
            self.records.append(record)
            self.total_micro_usd += record.cost_micro_usd


def _usage_tokens(result: Any) -> tuple[int, int]:
    usage = getattr(result, "usage", None)
    if usage is None:
        raise ModelClientError(
            "expected a completion with token usage (prompt_tokens, completion_tokens), got "
            f"{type(result).__name__} without usage. A call that cannot be costed cannot be metered; "
            "use a client that reports usage."
        )
    if isinstance(usage, Mapping):
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    else:
        pt = getattr(usage, "prompt_tokens", getattr(usage, "input_tokens", None))
        ct = getattr(usage, "completion_tokens", getattr(usage, "output_tokens", None))
    if not isinstance(pt, int) or not isinstance(ct, int):
        raise ModelClientError(
            f"expected integer token counts in the completion's usage, got {usage!r}. "
            "Use a client that reports prompt_tokens and completion_tokens."
        )
    return pt, ct


UNCAPPED_OUTPUT_TOKENS = 16_384
"""The output tokens a call that sets no ``max_tokens`` is reserved for (the largest completion
limit of the models the product prices); a call with ``max_tokens`` is reserved for that many."""


def prompt_token_bound(messages: Sequence[Mapping[str, str]]) -> int:
    """An upper bound of a chat request's prompt tokens: one per UTF-8 byte of every field (a
    BPE token is at least one byte) plus 8 per message and 8 for the reply's priming.

    >>> prompt_token_bound([{"role": "user", "content": "héllo"}])
    26
    """
    total = 8
    for message in messages:
        total += 8 + sum(len(str(v).encode("utf-8")) for v in message.values())
    return total


def call_bound(prices: PriceTable, model: str, messages: Sequence[Mapping[str, str]],
               max_tokens: Any) -> int:
    """The most one call of ``model`` can cost (micro-USD): :func:`prompt_token_bound` input
    tokens and ``max_tokens`` (else :data:`UNCAPPED_OUTPUT_TOKENS`) output tokens."""
    out = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) \
        and max_tokens > 0 else UNCAPPED_OUTPUT_TOKENS
    return prices.model_cost(model, input_tokens=prompt_token_bound(messages), output_tokens=out)


class BudgetRefused(ModelClientError):
    """A call was not made: what it could cost did not fit in what the run may still spend."""


@runtime_checkable
class CallGate(Protocol):
    """Reserve before calling: ``admit(bound)`` before a call that can cost at most ``bound``
    micro-USD (False: the call is not made), ``settle(bound, cost)`` once it returned or failed.
    A study's budget guard is one (``typestrict_pipeline.study.runner``)."""

    def admit(self, bound_micro: int) -> bool: ...

    def settle(self, bound_micro: int, cost_micro: int) -> None: ...


def _refused(name: str, bound: int) -> BudgetRefused:
    return BudgetRefused(
        f"expected room for one more call of {name!r} (up to {format_usd(bound)}) in what this run "
        "may still spend, got none: the study's budget is reached, so the call was not made. "
        "Raise the budget to run further"
    )


class MeteredModel:
    """A model client whose every attempt is recorded and priced, with bounded calls in flight.

    Args:
        name: the name the workflow uses (``ctx.models[name]``).
        client: the underlying client (anything with ``complete(messages, **kwargs)``).
        model: the price-table entry (default: ``client.model``).
        prices: the price table.
        meter: where records go.
        kind: ``MODEL`` for decisions, ``JUDGE`` for the scoring judge.
        in_flight: a semaphore shared by every metered client of the run: the bound on calls in
            flight (``max_in_flight``).
        retries: extra attempts after a failure; every attempt is recorded (and priced when it
            reports usage).
        mark_requests: send the run's mode in the request's ``metadata`` (clients with ``extra``).
        gate: reserve before calling: each attempt is admitted by ``gate`` for the most it can
            cost (:func:`call_bound`) before it is sent, and settled with its cost after.
    """

    __slots__ = ("client", "gate", "in_flight", "kind", "mark_requests", "meter", "model", "name",
                 "prices", "retries")

    def __init__(
        self,
        name: str,
        client: Any,
        *,
        prices: PriceTable,
        meter: Meter,
        model: str | None = None,
        kind: CallKind = CallKind.MODEL,
        in_flight: threading.Semaphore | None = None,
        retries: int = 0,
        mark_requests: bool = True,
        gate: CallGate | None = None,
    ) -> None:
        self.name = name
        self.mark_requests = mark_requests
        self.gate = gate
        self.client = client
        self.model = model or str(getattr(client, "model", name))
        self.prices = prices
        self.meter = meter
        self.kind = kind
        self.in_flight = in_flight
        self.retries = retries
        prices.model_price(self.model)  # fail before the first call, not after it

    @property
    def mode(self) -> RunMode:
        """HISTORICAL or LIVE: the mode every call of this client is recorded under."""
        return self.meter.mode

    def complete(self, messages: Sequence[Mapping[str, str]], **kwargs: Any) -> Any:
        """Send ``messages``; record and price every attempt; return the completion.

        Clients whose ``complete`` takes an ``extra`` mapping of request fields (the project's
        OpenAI-compatible client) also get ``metadata: {"typestrict_mode": "HISTORICAL"|"LIVE"}``
        in the request, so the model side can tell replays from live calls. Attempts the client
        retried by itself (``completion.attempts > 1``) are recorded as failed attempts with no
        tokens (a provider does not bill a failed request).

        Raises:
            ModelClientError: every attempt failed (each one is recorded).
        """
        if self.mark_requests and _accepts_extra(self.client):
            extra = dict(kwargs.get("extra") or {})
            metadata = dict(extra.get("metadata") or {})
            metadata["typestrict_mode"] = self.meter.mode.value
            extra["metadata"] = metadata
            kwargs["extra"] = extra
        last: BaseException | None = None
        attempt = 0
        bound = 0
        if self.gate is not None:
            bound = call_bound(self.prices, self.model, messages, kwargs.get("max_tokens"))
        for _ in range(self.retries + 1):
            attempt += 1
            if self.gate is not None and not self.gate.admit(bound):
                raise _refused(self.name, bound)
            started = time.time()
            t0 = time.perf_counter()
            try:
                if self.in_flight is not None:
                    with self.in_flight:
                        result = self.client.complete(messages, **kwargs)
                else:
                    result = self.client.complete(messages, **kwargs)
                pt, ct = _usage_tokens(result)
            except Exception as exc:  # every failure is recorded, then retried or raised
                last = exc
                if isinstance(exc, EndpointUnreachableError):
                    self.meter.unreachable = exc
                else:
                    self.meter.reached = True
                self.meter.add(
                    CallRecord(self.kind, self.name, self.model, 0, 0, 0,
                               time.perf_counter() - t0, attempt, False,
                               f"{exc.__class__.__name__}: {exc}", self.meter.mode,
                               self.meter.step_index, started)
                )
                if self.gate is not None:
                    self.gate.settle(bound, 0)
                continue
            latency = time.perf_counter() - t0
            self.meter.reached = True
            inner = getattr(result, "attempts", 1)
            for _k in range(int(inner) - 1 if isinstance(inner, int) else 0):
                self.meter.add(
                    CallRecord(self.kind, self.name, self.model, 0, 0, 0, 0.0, attempt, False,
                               "retried by the client (no answer billed)", self.meter.mode,
                               self.meter.step_index, started)
                )
                attempt += 1
            model = str(getattr(result, "model", None) or self.model)
            if model not in self.prices.models:
                model = self.model
            cost = self.prices.model_cost(model, input_tokens=pt, output_tokens=ct)
            self.meter.add(
                CallRecord(self.kind, self.name, model, pt, ct, cost, latency,
                           attempt, True, None, self.meter.mode, self.meter.step_index, started)
            )
            if self.gate is not None:
                self.gate.settle(bound, cost)
            return result
        # The client's own attempts are inside ``last`` ("within 4 attempt(s)"): these are the
        # step's tries of the whole call, said apart so the two counts never read as one.
        tries = "no answer" if self.retries == 0 else f"no answer in {self.retries + 1} tries of the call"
        raise ModelClientError(
            f"expected an answer from model client {self.name!r}, got {tries}: {last}. "
            "Check the model endpoint."
        ) from last


_EXTRA_CACHE: dict[type, bool] = {}


def _accepts_extra(client: Any) -> bool:
    """Whether ``client.complete`` takes an ``extra`` keyword (cached per client class)."""
    cls = type(client)
    known = _EXTRA_CACHE.get(cls)
    if known is None:
        try:
            known = "extra" in inspect.signature(client.complete).parameters
        except (TypeError, ValueError):
            known = False
        _EXTRA_CACHE[cls] = known
    return known


class MeteredTool:
    """A tool (any callable) whose every call is recorded and priced per call.

    Args:
        name: the tool's name (``ctx.tools[name]``) and its price-table entry.
        fn: the callable.
        prices: the price table.
        meter: where records go.
    """

    __slots__ = ("fn", "gate", "meter", "name", "price")

    def __init__(self, name: str, fn: Callable[..., Any], *, prices: PriceTable, meter: Meter,
                 gate: CallGate | None = None) -> None:
        self.name = name
        self.fn = fn
        self.meter = meter
        self.price = prices.tool_cost(name)
        self.gate = gate

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the tool; a failed call is recorded (and priced: the provider charged it) and re-raised."""
        if self.gate is not None:
            if not self.gate.admit(self.price):
                raise _refused(self.name, self.price)
            try:
                return self._call(*args, **kwargs)
            finally:
                self.gate.settle(self.price, self.price)
        return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        started = time.time()
        t0 = time.perf_counter()
        try:
            out = self.fn(*args, **kwargs)
        except Exception as exc:
            self.meter.add(CallRecord(CallKind.TOOL, self.name, self.name, 0, 0, self.price,
                                      time.perf_counter() - t0, 1, False,
                                      f"{exc.__class__.__name__}: {exc}", self.meter.mode,
                                      self.meter.step_index, started))
            raise
        self.meter.add(CallRecord(CallKind.TOOL, self.name, self.name, 0, 0, self.price,
                                  time.perf_counter() - t0, 1, True, None, self.meter.mode,
                                  self.meter.step_index, started))
        return out
