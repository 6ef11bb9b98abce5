"""The backtest engine: replay a workflow over history, one step at a time.

:func:`run_backtest` runs the workflow once per step ``t = start, start + step, ..., end``.
At each step ``decide`` sees only the rows known at ``t`` (:mod:`~typestrict_pipeline.backtest.pit`),
``outcome`` sees the data known at ``t + horizon`` (what happened next), ``score`` compares the
two. Every model, tool and judge call goes through a metered client (:mod:`.metering`); each
step's decision, outcome, score, cost, status and error are kept in a :class:`StepRecord`, and
the whole run is summarised in a :class:`RunCard`. Everything is marked ``HISTORICAL``.

Stateless workflows run their steps concurrently on ``max_in_flight`` threads, which also bounds
the model calls in flight (a semaphore shared by every metered client of the run); stateful
workflows run in order. Results are always in step order, whatever the completion order.

A step whose ``decide`` raises or returns ``None`` is recorded as failed with its error; the
backtest goes on (``on_step_error="continue"``) or stops there (``"stop"``), keeping what ran.
A read of the future (:class:`~typestrict_pipeline.errors.LookAheadError`) is never a step
failure: it stops the backtest and is raised, because the workflow itself is wrong.

>>> import datetime as dt
>>> from typestrict_pipeline.backtest.pit import PointInTimeTable
>>> from typestrict_pipeline.backtest.workflow import Workflow
>>> day = dt.timedelta(days=1)
>>> t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
>>> table = PointInTimeTable("x", event_time=[t0 + i * day for i in range(10)],
...     known_time=[t0 + (i + 1) * day for i in range(10)], columns={"v": list(range(10))})
>>> wf = Workflow("persist", decide=lambda c: int(c.data["x"].last("v")),
...     outcome=lambda c: int(c.data["x"].last("v")), score=lambda d, o, c: -abs(d - o),
...     tables=("x",), horizon=day, outcome_description="the next day's value")
>>> result = run_backtest(wf, data=table, start=t0 + day, end=t0 + 9 * day, step=day)
>>> [s.score for s in result.steps][:3], result.card.mean_score, result.card.mode
([-1.0, -1.0, -1.0], -1.0, <RunMode.HISTORICAL: 'HISTORICAL'>)
"""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import math
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from typestrict_pipeline.backtest.metering import (
    CallGate,
    CallKind,
    CallRecord,
    Meter,
    MeteredModel,
    MeteredTool,
    PriceTable,
    RunMode,
    format_usd,
)
from typestrict_pipeline.backtest.pit import (
    PointInTimeTable,
    PointInTimeView,
    format_time,
    to_datetime64,
)
from typestrict_pipeline.backtest.workflow import (
    DecisionContext,
    OutcomeContext,
    ParamValue,
    ScoreContext,
    Workflow,
    check_columns,
)
from typestrict_pipeline.errors import (
    EndpointUnreachableError,
    InputError,
    LookAheadError,
    for_customers,
)

__all__ = [
    "BacktestResult",
    "BacktestStatus",
    "EndpointGaveUp",
    "EndpointWatch",
    "LiveDecision",
    "OnStepError",
    "RunCard",
    "ScoreBucket",
    "StepRecord",
    "StepStatus",
    "backtest_outcome",
    "check_range_in_data",
    "for_workspace",
    "parse_step",
    "plan_steps",
    "replay_decisions",
    "run_backtest",
    "run_live",
]

SCORE_BUCKETS = 20

UNREACHABLE_STEPS = 3
"""Consecutive steps that failed on the way to a model endpoint which has not answered once in
this backtest, after which the backtest ends ``failed`` (:class:`EndpointWatch`,
``docs/lifecycle.md`` says why 3)."""
UNREACHABLE_STEPS_AFTER_ANSWER = 10
"""The same, for an endpoint that answered earlier steps of this backtest and then went away: a
longer run of failures, so a restart of the model server does not end a backtest that worked."""

ENDPOINT_GONE_ADVICE = (
    "Check the model URL (--model-url; TYPESTRICT_BACKTEST_MODEL_URL for runs launched from the API or "
    "Dagster) and that the model server runs and is reachable from here, then run the backtest again")
"""What to do about a model endpoint that does not answer (:func:`backtest_outcome`), as the
operator reads it: the CLI (``backtest run``, ``backtest show``), the logs and the Dagster UI."""
STEPS_FAILED_ADVICE = (
    "Fix what the first error names (the model endpoint, its model name or key, the workflow) "
    "and run the backtest again")
"""What to do about a backtest whose every step that ran failed, as the operator reads it."""
WORKSPACE_ADVICE = (
    "The model endpoint and the workflow's code are the platform's, not this workspace's: run the "
    "backtest again later, and if it keeps failing, send the platform's operator this message and "
    "the backtest's id (the study's, for a study)")
"""What a workspace reads in place of :data:`ENDPOINT_GONE_ADVICE` and
:data:`STEPS_FAILED_ADVICE` (:func:`for_workspace`): it cannot set the model URL, the model's name
or key or a workflow's code, which are the platform operator's."""


class StepStatus(enum.StrEnum):
    """How one step ended.

    Attributes:
        OK: decided and scored.
        UNSCORED: decided, but the outcome is not in the data (``outcome`` returned ``None``).
        FAILED: ``decide``, ``outcome`` or ``score`` raised, or no decision was returned.
    """

    OK = "ok"
    UNSCORED = "unscored"
    FAILED = "failed"


class BacktestStatus(enum.StrEnum):
    """Where a backtest is (``docs/lifecycle.md``, "Backtests").

    Attributes:
        RUNNING: started, not finished (only seen in the store); its process holds a lease.
        COMPLETED: every planned step ran, and not every one failed (those that did are counted
            on the run card).
        STOPPED: it stopped early: a step failed with ``on_step_error="stop"``, or the caller's
            ``should_stop`` said so (a study's budget); what ran is kept.
        FAILED: the engine stopped on an error that is not a step's (for example a read of the
            future), or every step that ran failed (:func:`backtest_outcome`); what ran is kept.
        INTERRUPTED: its process stopped (Ctrl-C, SIGTERM) or died (``kill -9``, a crash, a
            reboot: found by its lease); ``error`` says when and why; what ran is kept.
        CANCELLED: a person cancelled it (``typestrict backtest cancel``); what ran is kept.
    """

    RUNNING = "running"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


class OnStepError(enum.StrEnum):
    """What a failed step does to the backtest.

    Attributes:
        CONTINUE: record it and go on.
        STOP: record it and start no further step.
    """

    CONTINUE = "continue"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step of a backtest.

    Attributes:
        index: 0-based step number.
        t: the decision time (aware UTC).
        status: ok, unscored or failed.
        decision: what ``decide`` returned (``None`` when it failed).
        outcome: what happened next (``None`` when unknown or when the step failed first).
        score: the score (``None`` unless the status is ok: never a silent 0).
        cost_micro_usd: what the step's calls cost (its judge calls included).
        calls: every metered call of the step, retries and judge calls included.
        error: the error of a failed step (``"ExceptionType: message"``).
        mode: always HISTORICAL for a backtest step.
    """

    index: int
    t: dt.datetime
    status: StepStatus
    decision: Any
    outcome: Any
    score: float | None
    cost_micro_usd: int
    calls: tuple[CallRecord, ...]
    error: str | None
    mode: RunMode = RunMode.HISTORICAL


@dataclass(frozen=True)
class ScoreBucket:
    """The mean score of a run of consecutive steps (the run card's score over time).

    Attributes:
        start: first step time in the bucket.
        end: last step time in the bucket.
        steps: steps in the bucket.
        scored: steps with a score.
        mean_score: mean of the scores (``None`` if none was scored).
    """

    start: dt.datetime
    end: dt.datetime
    steps: int
    scored: int
    mean_score: float | None


def _dt_json(t: dt.datetime) -> str:
    return format_time(t)


def _dt_parse(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(dt.UTC)


@dataclass(frozen=True)
class RunCard:
    """The summary of a backtest: what the materialization's metadata and the store show.

    Attributes:
        workflow: workflow name.
        version_id: the workflow version that ran (with its parameters and prompts).
        mode: always HISTORICAL for a backtest.
        status: completed, stopped or failed.
        start: first step time.
        end: last step time (as configured).
        step: step size.
        steps_planned: how many steps the range holds.
        steps_run: how many ran (ok + unscored + failed).
        steps_ok: decided and scored.
        steps_unscored: decided, no outcome in the data.
        steps_failed: failed.
        mean_score: mean score over the ok steps (``None`` if there are none).
        score_over_time: up to 20 buckets of consecutive steps with their mean score.
        cost_micro_usd: total cost of every call (models, tools, retries, judge).
        model_calls: model-call attempts (retries included).
        judge_calls: judge-call attempts.
        tool_calls: tool calls.
        failed_calls: attempts that failed (and were retried or gave up).
        input_tokens: prompt tokens, all calls.
        output_tokens: completion tokens, all calls.
        max_in_flight: the bound on concurrent steps and model calls.
        wall_seconds: how long the run took.
        stop_reason: why it stopped early (``None`` if it completed).
        first_error: the first failed step's error, if any.
        params: the parameters it ran with.
        tables: table name -> rows in the replayed data.
        outcome_description: what happened next, in the workflow's words.
    """

    workflow: str
    version_id: str
    mode: RunMode
    status: BacktestStatus
    start: dt.datetime
    end: dt.datetime
    step: dt.timedelta
    steps_planned: int
    steps_run: int
    steps_ok: int
    steps_unscored: int
    steps_failed: int
    mean_score: float | None
    score_over_time: tuple[ScoreBucket, ...]
    cost_micro_usd: int
    model_calls: int
    judge_calls: int
    tool_calls: int
    failed_calls: int
    input_tokens: int
    output_tokens: int
    max_in_flight: int
    wall_seconds: float
    stop_reason: str | None
    first_error: str | None
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    tables: Mapping[str, int] = field(default_factory=dict)
    outcome_description: str = ""

    @property
    def cost_per_step_micro_usd(self) -> float | None:
        """Mean cost of a step that ran (``None`` if none ran). For display; budgets use the integers."""
        return self.cost_micro_usd / self.steps_run if self.steps_run else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (stored with the backtest; :meth:`from_json` reads it back)."""
        return {
            "workflow": self.workflow,
            "version_id": self.version_id,
            "mode": self.mode.value,
            "status": self.status.value,
            "start": _dt_json(self.start),
            "end": _dt_json(self.end),
            "step_seconds": self.step.total_seconds(),
            "steps_planned": self.steps_planned,
            "steps_run": self.steps_run,
            "steps_ok": self.steps_ok,
            "steps_unscored": self.steps_unscored,
            "steps_failed": self.steps_failed,
            "mean_score": self.mean_score,
            "score_over_time": [
                {"start": _dt_json(b.start), "end": _dt_json(b.end), "steps": b.steps,
                 "scored": b.scored, "mean_score": b.mean_score}
                for b in self.score_over_time
            ],
            "cost_micro_usd": self.cost_micro_usd,
            "model_calls": self.model_calls,
            "judge_calls": self.judge_calls,
            "tool_calls": self.tool_calls,
            "failed_calls": self.failed_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "max_in_flight": self.max_in_flight,
            "wall_seconds": self.wall_seconds,
            "stop_reason": self.stop_reason,
            "first_error": self.first_error,
            "params": dict(self.params),
            "tables": dict(self.tables),
            "outcome_description": self.outcome_description,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunCard:
        """The inverse of :meth:`to_json`."""
        return cls(
            workflow=d["workflow"],
            version_id=d["version_id"],
            mode=RunMode(d["mode"]),
            status=BacktestStatus(d["status"]),
            start=_dt_parse(d["start"]),
            end=_dt_parse(d["end"]),
            step=dt.timedelta(seconds=d["step_seconds"]),
            steps_planned=d["steps_planned"],
            steps_run=d["steps_run"],
            steps_ok=d["steps_ok"],
            steps_unscored=d["steps_unscored"],
            steps_failed=d["steps_failed"],
            mean_score=d["mean_score"],
            score_over_time=tuple(
                ScoreBucket(_dt_parse(b["start"]), _dt_parse(b["end"]), b["steps"], b["scored"],
                            b["mean_score"])
                for b in d["score_over_time"]
            ),
            cost_micro_usd=d["cost_micro_usd"],
            model_calls=d["model_calls"],
            judge_calls=d["judge_calls"],
            tool_calls=d["tool_calls"],
            failed_calls=d["failed_calls"],
            input_tokens=d["input_tokens"],
            output_tokens=d["output_tokens"],
            max_in_flight=d["max_in_flight"],
            wall_seconds=d["wall_seconds"],
            stop_reason=d["stop_reason"],
            first_error=d["first_error"],
            params=dict(d.get("params", {})),
            tables=dict(d.get("tables", {})),
            outcome_description=d.get("outcome_description", ""),
        )

    def to_text(self) -> str:
        """The run card as plain text (what ``make demo`` and ``typestrict backtest run`` print)."""
        per_step = self.cost_per_step_micro_usd
        mean = "n/a (no scored step)" if self.mean_score is None else f"{self.mean_score:.4f}"
        lines = [
            f"Backtest run card: {self.workflow} @ {self.version_id}   [{self.mode.value}]",
            f"  status          {self.status.value}" + (f" ({self.stop_reason})" if self.stop_reason else ""),
            f"  time range      {_dt_json(self.start)} .. {_dt_json(self.end)}",
            f"  step size       {_human_step(self.step)}",
            f"  steps           {self.steps_run} run of {self.steps_planned} planned: "
            f"{self.steps_ok} scored, {self.steps_unscored} unscored, {self.steps_failed} failed",
            f"  mean score      {mean}",
            f"  scored against  {self.outcome_description}",
            f"  cost            {format_usd(self.cost_micro_usd)} total, "
            + ("n/a per step" if per_step is None else f"{format_usd(round(per_step))} per step")
            + f" ({self.model_calls} model, {self.judge_calls} judge, {self.tool_calls} tool calls; "
            f"{self.failed_calls} failed attempts; {self.input_tokens} in / {self.output_tokens} out tokens)",
            f"  concurrency     {self.max_in_flight} in flight, {self.wall_seconds:.2f} s wall",
            f"  parameters      {json_compact(self.params)}",
        ]
        if self.first_error:
            lines.append(f"  first error     {self.first_error}")
        if self.score_over_time:
            lines.append("  score over time")
            for b in self.score_over_time:
                bar = "" if b.mean_score is None else "#" * max(0, min(40, round(b.mean_score * 40)))
                m = "   n/a" if b.mean_score is None else f"{b.mean_score:6.3f}"
                lines.append(f"    {b.start.date()} .. {b.end.date()}  {m}  {bar}")
        return "\n".join(lines)


def json_compact(d: Mapping[str, Any]) -> str:
    """``{"a": 1}`` as ``a=1`` pairs (for one-line display)."""
    return ", ".join(f"{k}={v!r}" for k, v in d.items()) or "(none)"


def human_duration(d: dt.timedelta) -> str:
    """A duration in words: days, hours, minutes, seconds.

    >>> human_duration(dt.timedelta(days=1)), human_duration(dt.timedelta(days=2, hours=6))
    ('1 day', '2 days 6 hours')
    """
    s = int(d.total_seconds())
    if s == 0:
        return "0 seconds"
    parts = []
    for unit, secs in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        n, s = divmod(s, secs)
        if n:
            parts.append(f"{n} {unit}{'s' if n != 1 else ''}")
    return " ".join(parts)


_human_step = human_duration


def parse_step(text: str) -> dt.timedelta:
    """A step size from ``"1d"``, ``"12h"``, ``"30m"``, ``"45s"`` or ``"1w"``, at most 366 days
    (:func:`typestrict_pipeline.values.duration`).

    Raises:
        InputError: anything else (``²d``, ``99999999999d``, ``P1D``, ``1.5d``).

    >>> parse_step("1d"), parse_step("6h")
    (datetime.timedelta(days=1), datetime.timedelta(seconds=21600))
    """
    from typestrict_pipeline.values import duration

    return duration(text, "a step size")


def format_step(d: dt.timedelta) -> str:
    """A step size or horizon as a person writes it (the inverse of :func:`parse_step`).

    >>> format_step(dt.timedelta(days=1)), format_step(dt.timedelta(hours=6)), format_step(dt.timedelta(weeks=2))
    ('1d', '6h', '2w')
    >>> format_step(dt.timedelta(seconds=90))
    '90s'
    """
    seconds = int(d.total_seconds())
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class EndpointGaveUp:
    """Why a backtest stopped calling a model endpoint that does not answer (:class:`EndpointWatch`).

    Attributes:
        endpoint: the URL called.
        transport: what the last attempt got (``connection failed (...)``, ``no answer within ...``).
        consecutive: the consecutive steps that failed so.
        answered_before: whether the endpoint answered an earlier step of this backtest.
    """

    endpoint: str
    transport: str
    consecutive: int
    answered_before: bool


class EndpointWatch:
    """The fail-fast rule of a backtest's model endpoint, one per run (not thread-safe: the
    engine calls :meth:`observe` under a lock, in the order steps finish).

    A step *failed on the way* when it failed and a model or judge call of it never reached its
    endpoint (:class:`~typestrict_pipeline.errors.EndpointUnreachableError`: connection refused,
    unknown host, no answer within the timeout, on every attempt) while no call of it got an
    answer. :data:`UNREACHABLE_STEPS` such steps in a row, the endpoint never having answered in
    this backtest, or :data:`UNREACHABLE_STEPS_AFTER_ANSWER` in a row after it did, and the
    backtest gives up: it ends ``failed`` (:func:`backtest_outcome`). Any other finished step
    breaks the run; an HTTP answer (400, 429, 500) is an answer, never counted here.

    >>> from typestrict_pipeline.errors import EndpointUnreachableError as E
    >>> w, e = EndpointWatch(), E("m", endpoint="http://h/v1/chat/completions", transport="connection failed")
    >>> [w.observe(failed=True, reached=False, unreachable=e) for _ in range(3)][-1].consecutive
    3
    """

    def __init__(self) -> None:
        self.answered = False
        self.streak = 0
        self.gave_up: EndpointGaveUp | None = None

    def observe(self, *, failed: bool, reached: bool,
                unreachable: EndpointUnreachableError | None) -> EndpointGaveUp | None:
        """Count one finished step; the reason to give up, once, when the rule is met."""
        if not (failed and unreachable is not None and not reached):
            self.streak = 0
            self.answered = self.answered or reached
            return None
        self.streak += 1
        limit = UNREACHABLE_STEPS_AFTER_ANSWER if self.answered else UNREACHABLE_STEPS
        if self.gave_up is None and self.streak >= limit:
            self.gave_up = EndpointGaveUp(unreachable.endpoint, unreachable.transport, self.streak,
                                          self.answered)
            return self.gave_up
        return None


@dataclass
class BacktestResult:
    """Everything a backtest produced.

    Attributes:
        workflow: the workflow version that ran (its defaults are the run's parameters/prompts).
        params: the parameters it ran with.
        prompts: the prompts it ran with.
        steps: the steps that ran, in step order.
        card: the run card.
        gave_up: why it stopped calling a model endpoint that does not answer (``None``: it did not).
    """

    workflow: Workflow
    params: dict[str, ParamValue]
    prompts: dict[str, str]
    steps: list[StepRecord]
    card: RunCard
    gave_up: EndpointGaveUp | None = None

    @property
    def version_id(self) -> str:
        """The version that ran."""
        return self.workflow.version_id

    @property
    def mode(self) -> RunMode:
        """Always HISTORICAL."""
        return self.card.mode


@dataclass(frozen=True)
class LiveDecision:
    """A live decision (``typestrict run``): made now, with everything known now.

    Attributes:
        workflow: workflow name.
        version_id: the version that decided.
        as_of: the time of the decision (what was known then).
        decision: the decision (``None`` if it failed).
        status: ok or failed.
        error: the error of a failed decision.
        cost_micro_usd: what its calls cost.
        calls: its metered calls, all LIVE.
        params: the parameters it ran with.
        mode: always LIVE.
    """

    workflow: str
    version_id: str
    as_of: dt.datetime
    decision: Any
    status: StepStatus
    error: str | None
    cost_micro_usd: int
    calls: tuple[CallRecord, ...]
    params: Mapping[str, ParamValue]
    mode: RunMode = RunMode.LIVE


# --- validation -------------------------------------------------------------------------------


def _as_tables(workflow: Workflow, data: Any) -> dict[str, PointInTimeTable]:
    if isinstance(data, PointInTimeTable):
        data = {data.name: data}
    if not isinstance(data, Mapping):
        raise InputError(
            "point-in-time tables (every row with the time it became known)",
            type(data).__name__,
            "build them with PointInTimeTable.from_frame(name, frame, known_time='...')",
        )
    tables: dict[str, PointInTimeTable] = {}
    for name, table in data.items():
        if not isinstance(table, PointInTimeTable):
            raise InputError(
                f"table {name!r} as a PointInTimeTable (every row with the time it became known)",
                type(table).__name__,
                "build it with PointInTimeTable.from_frame(name, frame, known_time='...'); data "
                "without knowledge times cannot be replayed without looking ahead",
            )
        tables[str(name)] = table
    missing = [t for t in workflow.tables if t not in tables]
    if missing:
        raise InputError(
            f"the tables workflow {workflow.name!r} reads ({', '.join(workflow.tables)})",
            f"tables {sorted(tables) or 'none'} (missing: {', '.join(missing)})",
            "pass every table it reads",
        )
    return {t: tables[t] for t in workflow.tables}


def _aware(name: str, t: Any) -> dt.datetime:
    if not isinstance(t, dt.datetime) or t.tzinfo is None:
        raise InputError(
            f"{name} as a timezone-aware datetime",
            repr(t),
            "pass datetime(..., tzinfo=datetime.UTC); times are UTC",
        )
    return t.astimezone(dt.UTC)


MAX_BACKTEST_STEPS = 10_000_000
"""Most steps one backtest may run (the CLI's bound on step counts); refused before any is made."""


def plan_steps(
    workflow: Workflow,
    data: Mapping[str, PointInTimeTable] | PointInTimeTable,
    *,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta,
) -> list[dt.datetime]:
    """The step times of a backtest, after checking the range, the step and the data.

    Rules: ``start <= end``; ``step > 0`` and ``end - start`` a whole number of steps; every
    table has a row known at ``start`` (a first decision with nothing known is not a decision);
    and the outcome of the last step, known at ``end + horizon``, is within the data (its last
    knowledge time); the tables hold the columns the workflow declares, of their kinds
    (:func:`~typestrict_pipeline.backtest.workflow.check_columns`).

    Raises:
        InputError: one of the rules is broken; the message gives the range that would work.
    """
    tables = _as_tables(workflow, data)
    check_columns(workflow, tables)
    start = _aware("start", start)
    end = _aware("end", end)
    if not isinstance(step, dt.timedelta) or step <= dt.timedelta(0):
        raise InputError(
            "a positive step size (for example 1 day)",
            human_duration(step) if isinstance(step, dt.timedelta) and step >= dt.timedelta(0) else repr(step),
            "pass a positive step",
        )
    if end < start:
        raise InputError(
            "a time range whose end is not before its start",
            f"{format_time(start)} .. {format_time(end)}",
            "swap them or pick another range",
        )
    span = end - start
    n, left = divmod(span, step)
    if n + 1 > MAX_BACKTEST_STEPS:  # counted before any step time is made
        raise InputError(
            f"a backtest of at most {MAX_BACKTEST_STEPS:,} steps",
            f"{n + 1:,} steps of {human_duration(step)} from {format_time(start)} to {format_time(end)}",
            "use a larger step or a shorter range",
        )
    if left:
        raise InputError(
            f"a step size that fits the time range a whole number of times "
            f"({format_time(start)} .. {format_time(end)} is {human_duration(span)})",
            f"a step of {human_duration(step)}: {n} step{'' if n == 1 else 's'} and {human_duration(left)} left over",
            f"end the range at {format_time(start + n * step)} or {format_time(start + (n + 1) * step)}, "
            "or pick a step that divides it",
        )
    check_range_in_data(workflow, tables, start=start, end=end)
    return [start + i * step for i in range(n + 1)]


def check_range_in_data(workflow: Workflow, data: Mapping[str, PointInTimeTable] | PointInTimeTable, *,
                        start: dt.datetime, end: dt.datetime) -> None:
    """Refuse decisions from ``start`` to ``end`` that the data cannot hold: every table must have
    a row known at ``start``, and the outcome of the decision at ``end``, known at
    ``end + horizon``, must be within it (its last knowledge time). :func:`plan_steps`' rule,
    also what a study's windows are held to before the study is stored.

    Raises:
        InputError: the range is not inside the data; the message gives the range that is.
    """
    for name, table in _as_tables(workflow, data).items():
        first, last = table.first_known, table.last_known
        last_decision = last - workflow.horizon
        if start < first or end > last_decision:
            raise InputError(
                f"a time range inside the data of table {name!r}: decisions from "
                f"{format_time(first)} (when its first row is known) to {format_time(last_decision)} "
                f"(the last time whose outcome, {human_duration(workflow.horizon)} later, is known)",
                f"{format_time(start)} .. {format_time(end)}",
                "pick a range inside it, or replay more data",
            )


def _check_services(
    workflow: Workflow,
    clients: Mapping[str, Any],
    tools: Mapping[str, Callable[..., Any]],
    prices: PriceTable,
) -> None:
    for name in (*workflow.models, *workflow.judges):
        if name not in clients:
            raise InputError(
                f"a model client named {name!r} (workflow {workflow.name!r} uses "
                f"{', '.join((*workflow.models, *workflow.judges))})",
                f"clients {sorted(clients) or 'none'}",
                "pass clients={...} with every model it uses",
            )
        MeteredModel(name, clients[name], prices=prices, meter=Meter(RunMode.HISTORICAL))
    for name in workflow.tools:
        if name not in tools:
            raise InputError(
                f"a tool named {name!r}", f"tools {sorted(tools) or 'none'}", "pass tools={...}"
            )
        prices.tool_cost(name)


def _error_text(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"


# --- the run ------------------------------------------------------------------------------------


_NONE: Mapping[str, Any] = types.MappingProxyType({})


class _Run:
    """One backtest's shared state (the step function, the stop flag, the results)."""

    def __init__(
        self,
        workflow: Workflow,
        tables: dict[str, PointInTimeTable],
        times: list[dt.datetime],
        params: dict[str, ParamValue],
        prompts: dict[str, str],
        clients: Mapping[str, Any],
        tools: Mapping[str, Callable[..., Any]],
        prices: PriceTable,
        max_in_flight: int,
        retries: int,
        on_step_error: OnStepError,
        should_stop: Callable[[], bool] | None,
        on_step: Callable[[StepRecord], None] | None,
        score: bool = True,
        gate: CallGate | None = None,
        fail_fast: bool = True,
    ) -> None:
        self.wf = workflow
        self.watch = EndpointWatch() if fail_fast else None
        self.watch_lock = threading.Lock()
        self.reached: dict[int, tuple[bool, EndpointUnreachableError | None]] = {}
        self.gate = gate
        self.score = score
        self.times = times
        self.params = params
        self.prompts = prompts
        self.clients = clients
        self.tools = tools
        self.prices = prices
        self.retries = retries
        self.mark_requests = True
        self.on_step_error = on_step_error
        self.should_stop = should_stop
        self.on_step = on_step
        self.in_flight = threading.BoundedSemaphore(max_in_flight)
        self.records: list[StepRecord | None] = [None] * len(times)
        self.stop_reason: str | None = None
        self.fatal: BaseException | None = None
        self.stop = threading.Event()
        self.cb_lock = threading.Lock()
        self.state: dict[str, Any] | None = {} if workflow.stateful else None
        t64 = np.array([to_datetime64(t) for t in times[:1]], dtype="datetime64[us]")
        step64 = (
            np.timedelta64(int((times[1] - times[0]).total_seconds() * 1_000_000), "us")
            if len(times) > 1
            else np.timedelta64(0, "us")
        )
        grid = t64[0] + step64 * np.arange(len(times)) if len(times) else t64
        hz = np.timedelta64(int(workflow.horizon.total_seconds() * 1_000_000), "us")
        # One vectorised search per table for every step's decision and outcome cut-offs.
        self.tables = [(name, tab, tab.cutoffs(grid).tolist(),
                        tab.cutoffs(grid + hz).tolist() if score else [])
                       for name, tab in tables.items()]
        self.horizon = workflow.horizon

    def step(self, i: int) -> StepRecord:
        wf = self.wf
        t = self.times[i]
        meter = Meter(RunMode.HISTORICAL, i)
        views: dict[str, PointInTimeView] = {
            name: tab.view_at(kd[i], t) for name, tab, kd, _ in self.tables
        }
        models = {
            n: MeteredModel(n, self.clients[n], prices=self.prices, meter=meter,
                            in_flight=self.in_flight, retries=self.retries,
                            mark_requests=self.mark_requests, gate=self.gate)
            for n in wf.models
        } if wf.models else _NONE
        tools = {
            n: MeteredTool(n, self.tools[n], prices=self.prices, meter=meter, gate=self.gate)
            for n in wf.tools
        } if wf.tools else _NONE
        ctx = DecisionContext(t, i, views, self.params, self.prompts, models, tools,
                              RunMode.HISTORICAL, self.state)
        decision: Any = None
        outcome: Any = None
        score: float | None = None
        status = StepStatus.OK
        error: str | None = None
        try:
            decision = wf.decide(ctx)
        except LookAheadError:
            raise
        except Exception as exc:  # a step's failure is recorded, never lost
            status, error = StepStatus.FAILED, "decide: " + _error_text(exc)
        del ctx, views
        if status is StepStatus.OK and decision is None:
            status = StepStatus.FAILED
            error = (
                f"decide: expected a decision from workflow {wf.name!r} at {format_time(t)}, got "
                "None. Return a value (or raise to mark the step failed with a reason)."
            )
        if status is StepStatus.OK and not self.score:
            status = StepStatus.UNSCORED
        if status is StepStatus.OK:
            t_next = t + self.horizon
            oviews = {name: tab.view_at(ko[i], t_next) for name, tab, _, ko in self.tables}
            try:
                outcome = wf.outcome(OutcomeContext(t, self.horizon, oviews, self.params))
            except LookAheadError:
                raise
            except Exception as exc:
                status, error = StepStatus.FAILED, "outcome: " + _error_text(exc)
            if status is StepStatus.OK and outcome is None:
                status = StepStatus.UNSCORED
        if status is StepStatus.OK:
            judges = {
                n: MeteredModel(n, self.clients[n], prices=self.prices, meter=meter,
                                kind=CallKind.JUDGE, in_flight=self.in_flight, retries=self.retries,
                                mark_requests=self.mark_requests, gate=self.gate)
                for n in wf.judges
            } if wf.judges else _NONE
            try:
                raw = wf.score(decision, outcome, ScoreContext(t, self.params, self.prompts, judges))
                score = float(raw)  # type: ignore[arg-type]
                if not math.isfinite(score):
                    raise ValueError(f"expected a finite score, got {raw!r}")
            except Exception as exc:
                status, error, score = StepStatus.FAILED, "score: " + _error_text(exc), None
        if self.watch is not None:
            self.reached[i] = (meter.reached, meter.unreachable)
        return StepRecord(i, t, status, decision, outcome, score, meter.total_micro_usd,
                          tuple(meter.records) if meter.records else (), error)

    def finish_step(self, rec: StepRecord) -> None:
        self.records[rec.index] = rec
        if self.on_step is not None:
            with self.cb_lock:
                self.on_step(rec)
        if self.watch is not None:
            reached, unreachable = self.reached.pop(rec.index, (False, None))
            with self.watch_lock:
                gave_up = self.watch.observe(failed=rec.status is StepStatus.FAILED, reached=reached,
                                             unreachable=unreachable)
            if gave_up is not None:  # the steps in flight finish and are kept; none starts
                self.stop.set()
        if rec.status is StepStatus.FAILED and self.on_step_error is OnStepError.STOP:
            self.halt(f"step {rec.index} at {format_time(rec.t)} failed and on_step_error is 'stop'")

    def halt(self, reason: str) -> None:
        with self.cb_lock:
            if self.stop_reason is None:
                self.stop_reason = reason
        self.stop.set()

    def worker(self, counter: itertools.count[int]) -> None:
        n = len(self.times)
        try:
            while not self.stop.is_set():
                if self.should_stop is not None and self.should_stop():
                    self.halt("stopped by the caller (a limit was reached)")
                    return
                i = next(counter)
                if i >= n:
                    return
                self.finish_step(self.step(i))
        except BaseException as exc:
            with self.cb_lock:
                if self.fatal is None:
                    self.fatal = exc
            self.stop.set()


def run_backtest(
    workflow: Workflow,
    *,
    data: Mapping[str, PointInTimeTable] | PointInTimeTable,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta,
    params: Mapping[str, Any] | None = None,
    prompts: Mapping[str, str] | None = None,
    clients: Mapping[str, Any] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    prices: PriceTable | None = None,
    mode: RunMode = RunMode.HISTORICAL,
    max_in_flight: int = 8,
    retries: int = 0,
    on_step_error: OnStepError | str = OnStepError.CONTINUE,
    should_stop: Callable[[], bool] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    mark_requests: bool = True,
    gate: CallGate | None = None,
) -> BacktestResult:
    """Replay ``workflow`` over ``data``, one step per ``step`` from ``start`` to ``end`` inclusive.

    Args:
        workflow: the workflow (any version).
        data: the tables to replay (a mapping by name, or one table).
        start: first decision time (aware).
        end: last decision time (aware); ``end - start`` must be a whole number of steps.
        step: step size.
        params: parameter overrides (the run's version is ``workflow.variant(params, prompts)``).
        prompts: prompt overrides.
        clients: model clients by name (every name in ``workflow.models`` and ``.judges``).
        tools: tool callables by name.
        prices: the price table (every model and tool must be priced).
        mode: must be HISTORICAL: a backtest is never live (use :func:`run_live`).
        max_in_flight: steps (and model calls) in flight at once for a stateless workflow.
        retries: extra attempts per model call after a failure (each attempt is metered).
        on_step_error: ``"continue"`` or ``"stop"`` after a failed step.
        should_stop: called before each step starts; ``True`` starts no further step
            (a study's budget). Steps in flight finish and are kept.
        on_step: called with each finished step (serialised; from worker threads), for example to
            persist steps as they finish.
        mark_requests: send ``metadata: {"typestrict_mode": "HISTORICAL"}`` with each model
            request (clients taking ``extra``); turn off only for an endpoint that rejects it
            (the calls are still recorded as HISTORICAL).
        gate: reserve before calling (a study's budget): every model, judge and tool call is
            admitted by ``gate`` for the most it can cost before it is made; a call refused is
            not made and its step fails with the reason.

    Returns:
        The steps that ran, in order, and the run card.

    Raises:
        InputError: bad range, step, data, clients, prices, parameters or prompts.
        LookAheadError: the workflow read the future (the backtest stops; nothing is scored
            after it).
    """
    if mode is not RunMode.HISTORICAL:
        raise InputError(
            "mode HISTORICAL (a backtest replays the past)",
            str(mode),
            "use run_live for a live decision: a replayed decision is never a live one",
        )
    try:
        policy = OnStepError(on_step_error)
    except ValueError:
        raise InputError("on_step_error 'continue' or 'stop'", repr(on_step_error), "pick one") from None
    if not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise InputError("max_in_flight of at least 1", repr(max_in_flight), "pass a positive integer")
    if retries < 0:
        raise InputError("retries of at least 0", repr(retries), "pass 0 or more")
    run_wf = workflow.variant(params=params, prompts=prompts) if (params or prompts) else workflow
    resolved_params = run_wf.default_params
    resolved_prompts = dict(run_wf.prompts)
    clients = dict(clients or {})
    tools = dict(tools or {})
    prices = prices or PriceTable()
    tables = _as_tables(run_wf, data)
    times = plan_steps(run_wf, tables, start=start, end=end, step=step)
    _check_services(run_wf, clients, tools, prices)

    run = _Run(run_wf, tables, times, resolved_params, resolved_prompts, clients, tools, prices,
               max_in_flight, retries, policy, should_stop, on_step, gate=gate)
    run.mark_requests = mark_requests
    started = time.perf_counter()
    workers = 1 if run_wf.stateful else min(max_in_flight, len(times))
    counter = itertools.count()
    if workers <= 1:
        run.worker(counter)
    else:
        threads = [threading.Thread(target=run.worker, args=(counter,), daemon=True,
                                    name=f"backtest-{run_wf.name}-{j}") for j in range(workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    wall = time.perf_counter() - started
    steps = [r for r in run.records if r is not None]
    gave_up = None if run.watch is None else run.watch.gave_up
    status, reason = backtest_outcome(steps, planned=len(times), stop_reason=run.stop_reason,
                                      fatal=None if run.fatal is None else _error_text(run.fatal),
                                      gave_up=gave_up)
    card = build_card(run_wf, steps, times=times, step=step, status=status, stop_reason=reason,
                      max_in_flight=max_in_flight, wall_seconds=wall,
                      tables={n: t.n_rows for n, t in tables.items()})
    result = BacktestResult(run_wf, resolved_params, resolved_prompts, steps, card, gave_up)
    if run.fatal is not None:
        fatal = run.fatal
        fatal.backtest_result = result  # type: ignore[attr-defined]
        raise fatal
    return result


def short_of_complete(backtest_id: str, card: RunCard, *, keep_going: str) -> str | None:
    """Why a backtest that did not complete is not a success, what ran and what to do (``None``:
    it completed). One sentence for ``backtest run``'s stderr and the Dagster run's failure;
    ``keep_going`` is how the reader's surface says "run every step and count the failed ones"
    (``--on-step-error continue``, the launchpad's ``on_step_error: continue``).

    >>> from types import SimpleNamespace
    >>> card = SimpleNamespace(status=BacktestStatus.CANCELLED, stop_reason="cancelled by ana",
    ...                        first_error=None, steps_run=3, steps_planned=10)
    >>> short_of_complete("b1", card, keep_going="x")  # doctest: +NORMALIZE_WHITESPACE
    'backtest b1 was cancelled while it ran (cancelled by ana); 3 of 10 planned steps ran and are kept. Run the backtest again for a complete one.'
    """
    ran = f"{card.steps_run:,} of {card.steps_planned:,} planned steps ran and are kept"
    if card.status is BacktestStatus.COMPLETED:
        return None
    if card.status is BacktestStatus.STOPPED:
        first = f" (the first error: {card.first_error})" if card.first_error else ""
        return (f"backtest {backtest_id} stopped before its end: {card.stop_reason}{first}; {ran}. "
                f"Fix what the error names and run the backtest again, or pass {keep_going} "
                "to run every step and count the failed ones.")
    if card.status is BacktestStatus.CANCELLED:
        return (f"backtest {backtest_id} was cancelled while it ran ({card.stop_reason}); {ran}. "
                "Run the backtest again for a complete one.")
    if card.status is BacktestStatus.INTERRUPTED:
        return (f"backtest {backtest_id} ended interrupted while it ran ({card.stop_reason}); {ran}. "
                "Run the backtest again for a complete one.")
    return f"backtest {backtest_id} failed: {card.stop_reason}."


def backtest_outcome(
    steps: Sequence[StepRecord], *, planned: int, stop_reason: str | None, fatal: str | None,
    gave_up: EndpointGaveUp | None = None,
) -> tuple[BacktestStatus, str | None]:
    """How a backtest that ran ``steps`` of ``planned`` ended, and why (``None``: it completed).

    The one rule of a backtest's end, for every door (``typestrict backtest run``, the API's and
    the launchpad's Dagster run): what it returns is stored, and the CLI, the API and the console
    show it:

    * an error that is not a step's (``fatal``, a read of the future): ``failed`` with it;
    * a model endpoint that does not answer (``gave_up``, :class:`EndpointWatch`: 3 steps in a
      row failed on the way to it, 10 once it had answered): ``failed``, naming the endpoint, what
      its connection got, the steps tried and what to check, whatever ``on_step_error`` says;
    * every step that ran failed (an endpoint that answers 500, or garbage, to every call):
      ``failed``, with how many failed, the first error and what to do. Nothing was decided, so
      there is nothing to score and nothing to estimate a study's cost from; it was never
      ``completed``;
    * stopped early (``on_step_error="stop"``, a caller's limit) with some step not failed:
      ``stopped`` with why;
    * otherwise ``completed``, some steps possibly failed: the run card counts them
      (``steps_failed``) and shows the first error.

    >>> backtest_outcome([], planned=3, stop_reason=None, fatal=None)
    (<BacktestStatus.COMPLETED: 'completed'>, None)
    """
    if fatal is not None:
        return BacktestStatus.FAILED, fatal
    if gave_up is not None:
        before = ("after answering earlier steps of this backtest" if gave_up.answered_before
                  else "it has not answered once in this backtest")
        return BacktestStatus.FAILED, (
            f"expected the model endpoint {gave_up.endpoint} to answer, got {_first_line(gave_up.transport)} "
            f"on every attempt of {gave_up.consecutive} steps in a row ({before}), so the backtest stopped "
            f"after {len(steps):,} of {planned:,} planned steps instead of calling it for each. "
            f"{ENDPOINT_GONE_ADVICE}; nothing was charged for calls that never reached it, and what ran is kept")
    failed = [s for s in steps if s.status is StepStatus.FAILED]
    if steps and len(failed) == len(steps):
        return BacktestStatus.FAILED, (
            f"expected at least one step of the backtest to run without failing, got every step that "
            f"ran failed ({len(steps):,} of {planned:,} planned; the first: {_first_line(failed[0].error)}). "
            f"{STEPS_FAILED_ADVICE}; what ran is kept")
    if stop_reason is not None and len(steps) < planned:
        return BacktestStatus.STOPPED, stop_reason
    return BacktestStatus.COMPLETED, None


def for_workspace(text: str) -> str:
    """A stored error or run card of a backtest (or of a study, whose window's backtest failed so)
    as a workspace's API and console show it: the operator's advice of :func:`backtest_outcome`
    (:data:`ENDPOINT_GONE_ADVICE`, :data:`STEPS_FAILED_ADVICE`: a command-line flag, an environment
    variable, the model server) replaced by :data:`WORKSPACE_ADVICE`, then each URL cut to its
    scheme and host and each server path to its last name
    (:func:`~typestrict_pipeline.errors.for_customers`). Applied when read, so rows stored by
    earlier versions (the same sentences) read the same; the operator's CLI keeps the whole text.

    >>> gone = EndpointGaveUp("http://10.0.0.5:8000/v1/chat/completions", "connection failed (refused)", 3, False)
    >>> _, error = backtest_outcome([], planned=3, stop_reason=None, fatal=None, gave_up=gone)
    >>> ENDPOINT_GONE_ADVICE in error
    True
    >>> shown = for_workspace(error)
    >>> shown.startswith("expected the model endpoint http://10.0.0.5 to answer, got connection failed")
    True
    >>> WORKSPACE_ADVICE + "; nothing was charged" in shown, "--model-url" in shown, "MODEL_URL" in shown
    (True, False, False)
    >>> for_workspace("OSError: cannot read /srv/ts/table.parquet")
    'OSError: cannot read …/table.parquet'
    """
    for operators in (ENDPOINT_GONE_ADVICE, STEPS_FAILED_ADVICE):
        text = text.replace(operators, WORKSPACE_ADVICE)
    return for_customers(text)


def _first_line(error: str | None, limit: int = 300) -> str:
    """A step's error on one line, at most ``limit`` characters."""
    text = " ".join((error or "no error recorded").split()).rstrip(".")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def replay_decisions(
    workflow: Workflow,
    *,
    data: Mapping[str, PointInTimeTable] | PointInTimeTable,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta,
    clients: Mapping[str, Any] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    prices: PriceTable | None = None,
    max_in_flight: int = 8,
) -> list[StepRecord]:
    """Run only ``decide`` at each step (no outcome, no score): what the leak tests compare.

    The range needs data known at ``start`` but no outcome after ``end``, so it also works on a
    table cut at ``end`` (truncation invariance). Steps are ``unscored`` (or ``failed``).

    Raises:
        InputError: bad range, step, data, clients or prices.
        LookAheadError: the workflow read the future.
    """
    tables = _as_tables(workflow, data)
    start, end = _aware("start", start), _aware("end", end)
    if not isinstance(step, dt.timedelta) or step <= dt.timedelta(0) or end < start:
        raise InputError("a positive step and start <= end", f"step {step}, {start} .. {end}",
                         "fix the range")
    n, left = divmod(end - start, step)
    if left:
        raise InputError("a step that fits the range a whole number of times",
                         f"{n} step{'' if n == 1 else 's'} and {left} left over", "fix the range or the step")
    for name, table in tables.items():
        if start < table.first_known:
            raise InputError(f"a start at or after {format_time(table.first_known)} (table {name!r})",
                             format_time(start), "start later")
    clients, tools, prices = dict(clients or {}), dict(tools or {}), prices or PriceTable()
    _check_services(workflow, clients, tools, prices)
    times = [start + i * step for i in range(n + 1)]
    run = _Run(workflow, tables, times, workflow.default_params, dict(workflow.prompts), clients,
               tools, prices, max_in_flight, 0, OnStepError.CONTINUE, None, None, score=False,
               fail_fast=False)
    counter = itertools.count()
    workers = 1 if workflow.stateful else min(max_in_flight, len(times))
    threads = [threading.Thread(target=run.worker, args=(counter,), daemon=True)
               for _ in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if run.fatal is not None:
        raise run.fatal
    return [r for r in run.records if r is not None]


def build_card(
    workflow: Workflow,
    steps: Sequence[StepRecord],
    *,
    times: Sequence[dt.datetime],
    step: dt.timedelta,
    status: BacktestStatus,
    stop_reason: str | None,
    max_in_flight: int,
    wall_seconds: float,
    tables: Mapping[str, int],
) -> RunCard:
    """The run card of a (possibly partial) list of steps."""
    ok = [s for s in steps if s.status is StepStatus.OK]
    scores = [s.score for s in ok if s.score is not None]
    calls = [c for s in steps for c in s.calls]
    failed = [s for s in steps if s.status is StepStatus.FAILED]
    return RunCard(
        workflow=workflow.name,
        version_id=workflow.version_id,
        mode=RunMode.HISTORICAL,
        status=status,
        start=times[0],
        end=times[-1],
        step=step,
        steps_planned=len(times),
        steps_run=len(steps),
        steps_ok=len(ok),
        steps_unscored=sum(1 for s in steps if s.status is StepStatus.UNSCORED),
        steps_failed=len(failed),
        mean_score=math.fsum(scores) / len(scores) if scores else None,
        score_over_time=score_buckets(steps),
        cost_micro_usd=sum(s.cost_micro_usd for s in steps),
        model_calls=sum(1 for c in calls if c.kind is CallKind.MODEL),
        judge_calls=sum(1 for c in calls if c.kind is CallKind.JUDGE),
        tool_calls=sum(1 for c in calls if c.kind is CallKind.TOOL),
        failed_calls=sum(1 for c in calls if not c.ok),
        input_tokens=sum(c.input_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls),
        max_in_flight=max_in_flight,
        wall_seconds=wall_seconds,
        stop_reason=stop_reason,
        first_error=failed[0].error if failed else None,
        params=workflow.default_params,
        tables=dict(tables),
        outcome_description=workflow.outcome_description,
    )


def score_buckets(steps: Sequence[StepRecord], buckets: int = SCORE_BUCKETS) -> tuple[ScoreBucket, ...]:
    """Split the steps into up to ``buckets`` runs of consecutive steps, with each run's mean score.

    >>> score_buckets([])
    ()
    """
    n = len(steps)
    if n == 0:
        return ()
    k = min(buckets, n)
    edges = [round(j * n / k) for j in range(k + 1)]
    out = []
    for a, b in itertools.pairwise(edges):
        chunk = steps[a:b]
        sc = [s.score for s in chunk if s.score is not None]
        out.append(ScoreBucket(chunk[0].t, chunk[-1].t, len(chunk), len(sc),
                               math.fsum(sc) / len(sc) if sc else None))
    return tuple(out)


def run_live(
    workflow: Workflow,
    *,
    data: Mapping[str, PointInTimeTable] | PointInTimeTable,
    as_of: dt.datetime | None = None,
    params: Mapping[str, Any] | None = None,
    prompts: Mapping[str, str] | None = None,
    clients: Mapping[str, Any] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    prices: PriceTable | None = None,
    retries: int = 0,
) -> LiveDecision:
    """Decide now: one LIVE decision with everything known at ``as_of`` (default: now, UTC).

    Nothing here is scored (what happens next is not known yet). Every call is metered as LIVE.

    Raises:
        InputError: no row is known at ``as_of``, or bad clients, prices, parameters or prompts.
    """
    run_wf = workflow.variant(params=params, prompts=prompts) if (params or prompts) else workflow
    tables = _as_tables(run_wf, data)
    now = _aware("as_of", as_of) if as_of is not None else dt.datetime.now(dt.UTC)
    clients = dict(clients or {})
    tools = dict(tools or {})
    prices = prices or PriceTable()
    _check_services(run_wf, clients, tools, prices)
    for name, tab in tables.items():
        if now < tab.first_known:
            raise InputError(
                f"a decision time at or after {format_time(tab.first_known)}, when the first row of "
                f"table {name!r} is known",
                format_time(now),
                "decide later, or pass data that was known by then",
            )
    meter = Meter(RunMode.LIVE, None)
    sem = threading.BoundedSemaphore(8)
    ctx = DecisionContext(
        now, None, {n: t.view(now) for n, t in tables.items()}, run_wf.default_params,
        dict(run_wf.prompts),
        {n: MeteredModel(n, clients[n], prices=prices, meter=meter, in_flight=sem, retries=retries)
         for n in run_wf.models},
        {n: MeteredTool(n, tools[n], prices=prices, meter=meter) for n in run_wf.tools},
        RunMode.LIVE, {} if run_wf.stateful else None,
    )
    decision: Any = None
    status, error = StepStatus.OK, None
    try:
        decision = run_wf.decide(ctx)
    except LookAheadError:
        raise
    except Exception as exc:
        status, error = StepStatus.FAILED, "decide: " + _error_text(exc)
    if status is StepStatus.OK and decision is None:
        status = StepStatus.FAILED
        error = (f"decide: expected a decision from workflow {run_wf.name!r}, got None. "
                 "Return a value (or raise to mark the run failed with a reason).")
    return LiveDecision(run_wf.name, run_wf.version_id, now, decision, status, error,
                        meter.total_micro_usd, tuple(meter.records), run_wf.default_params)
