"""Decision workflows: what they read, how they decide, what happened next, how it is scored.

A :class:`Workflow` is plain data and three functions:

* ``decide(ctx: DecisionContext) -> decision``: called once per step with the point-in-time
  views of the data (``ctx.data[table]``, only rows known at ``ctx.t``), the parameters
  (``ctx.params``), the prompts (``ctx.prompts``), the metered model clients (``ctx.models``)
  and tools (``ctx.tools``); returns the decision (anything JSON-serialisable; ``None`` is not a
  decision: the step is recorded as failed).
* ``outcome(ctx: OutcomeContext) -> outcome``: *what happened next*, defined explicitly per
  workflow: it reads views at ``t + horizon`` (``horizon`` is part of the workflow) and returns
  the outcome the decision at ``t`` is scored against, or ``None`` if it is not in the data
  (the step is then recorded as unscored). It is never shown to ``decide``.
* ``score(decision, outcome, ctx: ScoreContext) -> float``: compares them (higher is better);
  ``ctx.models`` are metered as the scoring judge.

Each workflow has a stable **version id** derived from its code (the source of the modules
defining its three functions), its prompts, its default parameters and its shape (tables,
horizon, statefulness): change any of them and the id changes. :meth:`Workflow.variant` makes
the version with other defaults (a study's candidate). One version per workflow is **active**
(the live one): :class:`WorkflowRegistry` holds it in code, the store can override it per
workspace (``typestrict_pipeline.backtest.store.activate_version``).

>>> import datetime as dt
>>> wf = Workflow(
...     name="always_rain",
...     decide=lambda ctx: True,
...     outcome=lambda ctx: True,
...     score=lambda d, o, ctx: float(d == o),
...     tables=("weather",),
...     horizon=dt.timedelta(days=1),
...     outcome_description="whether it rained on the next day",
...     params={"threshold": Param(0.5, "probability above which we say rain")},
... )
>>> wf.version_id == wf.variant(params={"threshold": 0.5}).version_id
True
>>> wf.version_id == wf.variant(params={"threshold": 0.6}).version_id
False
>>> wf.variant(params={"threshold": -0.0}).version_id == wf.variant(params={"threshold": 0}).version_id
True
>>> wf.resolve_params({"threshold": "high"})
Traceback (most recent call last):
...
typestrict_pipeline.errors.InputError: parameter 'threshold' of workflow 'always_rain': expected a number (like the default 0.5), got 'high'. Pass a value of the parameter's type.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import inspect
import json
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from typestrict_pipeline.backtest.metering import MeteredModel, MeteredTool, PriceTable, RunMode
from typestrict_pipeline.backtest.pit import (
    EVENT_TIME,
    KNOWN_TIME,
    PointInTimeTable,
    PointInTimeView,
)
from typestrict_pipeline.errors import InputError, NotFoundError, listed

__all__ = [
    "COLUMN_KINDS",
    "TIME_KIND",
    "DecisionContext",
    "OutcomeContext",
    "Param",
    "ScoreContext",
    "Workflow",
    "WorkflowFixture",
    "WorkflowRegistry",
    "check_columns",
    "columns_read",
    "columns_text",
]

ParamValue = bool | int | float | str

COLUMN_KINDS = ("number", "text", "bool")
"""The kinds of value column a workflow may declare (those :mod:`.workflows.datasets` stores)."""
TIME_KIND = "time"
"""The kind of ``event_time`` and ``known_time`` in :func:`columns_read`: ISO 8601 with a UTC offset."""


@dataclass(frozen=True)
class Param:
    """A workflow parameter: its default and what it means.

    Attributes:
        default: the default value (bool, int, float or str); overrides must have its type
            (an int is accepted for a float).
        description: one line for the launchpad and the docs.
        minimum: smallest allowed value for numbers (inclusive), if any.
        maximum: largest allowed value for numbers (inclusive), if any.
        choices: the allowed values for strings, if restricted.
    """

    default: ParamValue
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


@dataclass(slots=True)
class DecisionContext:
    """What ``decide`` receives at one step.

    Attributes:
        t: the step's time (aware UTC): the decision is made with what was known then.
        step_index: 0-based step number (``None`` for a live run).
        data: table name -> the view of that table at ``t`` (only rows known at or before ``t``).
        params: the run's parameters (defaults merged with overrides).
        prompts: the run's prompts by step name.
        models: client name -> metered model client (``.complete(messages)``).
        tools: tool name -> metered tool (callable).
        mode: HISTORICAL in a backtest, LIVE in a live run.
        state: for a stateful workflow, a dict carried from step to step (in order); ``None``
            for a stateless one.
    """

    t: dt.datetime
    step_index: int | None
    data: Mapping[str, PointInTimeView]
    params: Mapping[str, ParamValue]
    prompts: Mapping[str, str]
    models: Mapping[str, MeteredModel]
    tools: Mapping[str, MeteredTool]
    mode: RunMode
    state: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class OutcomeContext:
    """What ``outcome`` receives: the data as known at ``t + horizon`` (what happened next).

    Attributes:
        t: the decision's time.
        horizon: the workflow's horizon; ``data`` is as of ``t + horizon``.
        data: table name -> the view at ``t + horizon``.
        params: the run's parameters.
    """

    t: dt.datetime
    horizon: dt.timedelta
    data: Mapping[str, PointInTimeView]
    params: Mapping[str, ParamValue]


@dataclass(frozen=True, slots=True)
class ScoreContext:
    """What ``score`` receives besides the decision and the outcome.

    Attributes:
        t: the decision's time.
        params: the run's parameters.
        prompts: the run's prompts (a judge's prompt lives here).
        models: judge clients, metered with kind ``judge``.
    """

    t: dt.datetime
    params: Mapping[str, ParamValue]
    prompts: Mapping[str, str]
    models: Mapping[str, MeteredModel]


@dataclass(frozen=True)
class WorkflowFixture:
    """A small, real setup on which CI runs the leak tests of a workflow.

    Attributes:
        data: the tables to replay.
        start: first step time.
        end: last step time.
        step: step size.
        clients: model clients by name (for example a stand-in server's client).
        prices: the price table covering those clients.
        tools: tool callables by name.
    """

    data: Mapping[str, PointInTimeTable]
    start: dt.datetime
    end: dt.datetime
    step: dt.timedelta
    clients: Mapping[str, Any] = field(default_factory=dict)
    prices: PriceTable = field(default_factory=PriceTable)
    tools: Mapping[str, Callable[..., Any]] = field(default_factory=dict)


FixtureFactory = Callable[[], contextlib.AbstractContextManager[WorkflowFixture]]


@functools.lru_cache(maxsize=512)
def _code_text(fn: Callable[..., Any]) -> str:
    """The code that defines ``fn``: its own source (or bytecode) plus its whole module's source.

    Hashing the module too is deliberately conservative: a helper the function calls lives there,
    so any change that could change a decision changes the version (and sometimes one that could
    not). The function's own source and name tell apart two functions of one module. Read once
    per function object in a process (every window run of a study builds its workflow anew and
    asks for its version): the code that runs is the code that was loaded, whatever the file on
    disk says later.
    """
    parts = [getattr(fn, "__qualname__", repr(fn))]
    try:
        parts.append(inspect.getsource(fn))
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        parts.append(_code_fingerprint(code) if code is not None else repr(fn))
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    if module is not None:
        with contextlib.suppress(OSError, TypeError):
            parts.append(inspect.getsource(module))
    return "\n".join(parts)


def _code_fingerprint(code: types.CodeType) -> str:
    consts = [
        _code_fingerprint(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts
    ]
    return f"{code.co_code.hex()}|{consts}|{code.co_names}|{code.co_varnames}"


@dataclass(frozen=True)
class Workflow:
    """A decision workflow (see the module docstring for the three functions).

    Attributes:
        name: unique name (``[a-z0-9_]+``).
        decide: ``decide(ctx: DecisionContext) -> decision``.
        outcome: ``outcome(ctx: OutcomeContext) -> outcome | None``: what happened next.
        score: ``score(decision, outcome, ctx: ScoreContext) -> float``.
        tables: names of the tables ``decide`` and ``outcome`` read.
        horizon: how long after a decision its outcome is known (the outcome views are at
            ``t + horizon``).
        outcome_description: what happened next, in words (shown on the run card and the docs).
        params: parameter name -> :class:`Param` (its default).
        prompts: step name -> prompt template.
        models: names of the model clients ``decide`` uses.
        judges: names of the model clients ``score`` uses (metered as the scoring judge).
        tools: names of the tools ``decide`` uses.
        stateful: whether a decision depends on earlier decisions (then steps run in order and
            ``ctx.state`` is carried); stateless workflows run steps concurrently.
        description: one paragraph for people.
        fixture: a context manager factory yielding a :class:`WorkflowFixture`: the setup on
            which CI runs this workflow's leak tests (required to register it).
        columns: table -> value column -> its kind (``"number"``, ``"text"`` or ``"bool"``):
            the columns ``decide`` and ``outcome`` read. A dataset is checked against them
            before it is registered or replayed (:func:`check_columns`); a table left out is
            not checked.
    """

    name: str
    decide: Callable[[DecisionContext], Any]
    outcome: Callable[[OutcomeContext], Any]
    score: Callable[[Any, Any, ScoreContext], float | None]
    tables: tuple[str, ...]
    horizon: dt.timedelta
    outcome_description: str
    params: Mapping[str, Param] = field(default_factory=dict)
    prompts: Mapping[str, str] = field(default_factory=dict)
    models: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    stateful: bool = False
    description: str = ""
    fixture: FixtureFactory | None = field(default=None, compare=False)
    columns: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c == "_" for c in self.name) or self.name != self.name.lower():
            raise InputError("a workflow name of lowercase letters, digits and _", repr(self.name), "rename it")
        if self.horizon <= dt.timedelta(0):
            raise InputError(
                "a positive horizon (how long after a decision its outcome is known)",
                str(self.horizon),
                f"set the horizon of workflow {self.name!r}",
            )
        if not self.outcome_description.strip():
            raise InputError(
                "a description of what happened next (the outcome each decision is scored by)",
                "an empty one",
                f"describe the outcome of workflow {self.name!r}",
            )
        if not self.tables:
            raise InputError("at least one table the workflow reads", "none", "list its tables")
        for pname, p in self.params.items():
            _check_value(self.name, pname, p, p.default)
        for table, kinds in self.columns.items():
            bad = [k for k in kinds.values() if k not in COLUMN_KINDS]
            if table not in self.tables or bad:
                raise InputError(f"columns of tables workflow {self.name!r} reads ({', '.join(self.tables)}), "
                                 f"each of a kind in {list(COLUMN_KINDS)}", f"table {table!r} ({bad or 'not read'})",
                                 "fix the columns declaration")

    def __hash__(self) -> int:
        return hash((self.name, self.version_id))

    # -- versions ---------------------------------------------------------------------------

    @property
    def version_id(self) -> str:
        """A stable id from the code, prompts, default parameters and shape: ``"v" + 16 hex``."""
        cached = self.__dict__.get("_version_id")
        if cached is None:
            payload = {
                "name": self.name,
                "code": [_code_text(self.decide), _code_text(self.outcome), _code_text(self.score)],
                "prompts": dict(sorted(self.prompts.items())),
                "params": {k: [type(v.default).__name__, v.default] for k, v in sorted(self.params.items())},
                "tables": list(self.tables),
                "horizon_s": self.horizon.total_seconds(),
                "models": list(self.models),
                "judges": list(self.judges),
                "tools": list(self.tools),
                "stateful": self.stateful,
            }
            blob = json.dumps(payload, sort_keys=True, default=str).encode()
            cached = "v" + hashlib.sha256(blob).hexdigest()[:16]
            object.__setattr__(self, "_version_id", cached)
        return str(cached)

    @property
    def default_params(self) -> dict[str, ParamValue]:
        """Parameter name -> default."""
        return {k: p.default for k, p in self.params.items()}

    def resolve_params(self, overrides: Mapping[str, Any] | None) -> dict[str, ParamValue]:
        """Defaults merged with ``overrides``, each checked.

        Raises:
            InputError: an unknown parameter, or a value of the wrong type or out of range.
        """
        out = self.default_params
        for k, v in (overrides or {}).items():
            if k not in self.params:
                raise InputError(
                    f"a parameter of workflow {self.name!r} ({', '.join(self.params) or 'it has none'})",
                    repr(k),
                    "check the parameter name",
                )
            p = self.params[k]
            if isinstance(p.default, float) and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            _check_value(self.name, k, p, v)
            # One value, one version: -0.0 (a JSON -0, a --param or --grid "-0") is the number 0
            # and gets its version id, not a second one (adding 0.0 leaves any other float as is).
            out[k] = v + 0.0 if isinstance(v, float) else v
        return out

    def resolve_prompts(self, overrides: Mapping[str, str] | None) -> dict[str, str]:
        """Default prompts merged with ``overrides``.

        Raises:
            InputError: a prompt for a step the workflow does not have, not a string, or longer
                than :data:`~typestrict_pipeline.values.MAX_PROMPT_CHARS` (the one bound of a
                prompt, whichever door it came in by: it is stored and sent at every step).
        """
        from typestrict_pipeline.values import MAX_PROMPT_CHARS

        out = dict(self.prompts)
        for k, v in (overrides or {}).items():
            if k not in self.prompts:
                raise InputError(
                    f"a prompt step of workflow {self.name!r} ({', '.join(self.prompts) or 'it has none'})",
                    repr(k[:80]),
                    "check the step name",
                )
            if not isinstance(v, str) or not v.strip():
                raise InputError(f"a non-empty prompt for step {k!r}", repr(v)[:80], "write the prompt")
            if len(v) > MAX_PROMPT_CHARS:
                raise InputError(f"a prompt for step {k!r} of at most {MAX_PROMPT_CHARS:,} characters",
                                 f"{len(v):,} characters", "shorten the prompt")
            _check_template(k, self.prompts[k], v)
            out[k] = v
        return out

    def variant(
        self, *, params: Mapping[str, Any] | None = None, prompts: Mapping[str, str] | None = None
    ) -> Workflow:
        """The version of this workflow whose defaults are ``params`` and ``prompts`` merged in.

        Identical overrides give the identical version id, so a study's candidate and a backtest
        run with the same overrides share one version.
        """
        resolved = self.resolve_params(params)
        new_params = {k: replace(p, default=resolved[k]) for k, p in self.params.items()}
        new = replace(self, params=new_params, prompts=self.resolve_prompts(prompts))
        new.__dict__.pop("_version_id", None)
        return new


def _template_fields(text: str) -> set[str] | None:
    """The fields of ``text`` read as a ``str.format`` template (``{date}``, ``{total_mm:.1f}``),
    or None when it is not one (an unbalanced brace, a field inside a format spec)."""
    import string

    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    fields = set()
    for _literal, name, spec, _conversion in parsed:
        if name is None:
            continue
        if "{" in (spec or ""):
            return None
        fields.add(name)
    return fields


def _check_template(step: str, default: str, override: str) -> None:
    """A prompt override of a step whose default prompt is a template (it has ``{fields}``,
    which the workflow fills with ``str.format`` at each step) may use only those fields, by
    name (no ``{x.attr}`` or ``{x[0]}``), and must be a template itself (a literal brace is
    ``{{`` or ``}}``). Otherwise every step failed on it (``decide: KeyError: 'nope'``) after the
    backtest was stored; now it is refused before. A step whose default has no field takes any text.

    Raises:
        InputError: naming the step, the fields it may use and what was found.
    """
    known = _template_fields(default)
    if not known:
        return
    used = _template_fields(override)
    listed = ", ".join("{" + f + "}" for f in sorted(known))
    expected = (f"a prompt for step {step!r} that uses only the fields the workflow fills ({listed}), "
                "with {{ and }} for a literal brace")
    fix = "use those fields by name, and write {{ or }} for a brace the text itself holds"
    if used is None:
        raise InputError(expected, "a brace that opens or closes no field", fix)
    unknown = sorted(used - known)
    if unknown:
        raise InputError(expected, ", ".join("{" + f[:60] + "}" for f in unknown[:5]), fix)


def _check_value(workflow: str, name: str, p: Param, v: Any) -> None:
    from typestrict_pipeline.values import shown

    where = f"parameter {name!r} of workflow {workflow!r}: "
    d = p.default
    if isinstance(d, bool):
        ok, kind = isinstance(v, bool), "true or false"
    elif isinstance(d, int):
        ok, kind = isinstance(v, int) and not isinstance(v, bool), "a whole number"
    elif isinstance(d, float):
        ok, kind = isinstance(v, (int, float)) and not isinstance(v, bool), "a number"
    else:
        ok, kind = isinstance(v, str), "a string"
    if not ok:
        raise _prefixed(where, f"{kind} (like the default {shown(d)})", shown(v),
                        "pass a value of the parameter's type")
    is_number = isinstance(v, (int, float)) and not isinstance(v, bool)
    if is_number and (
        (p.minimum is not None and v < p.minimum) or (p.maximum is not None and v > p.maximum)
    ):
        raise _prefixed(where, f"a value in [{p.minimum}, {p.maximum}]", shown(v), "pass a value in range")
    if p.choices is not None and v not in p.choices:
        raise _prefixed(where, f"one of {list(p.choices)}", shown(v), "pick one of the choices")


def _prefixed(where: str, expected: str, got: str, fix: str) -> InputError:
    err = InputError(expected, got, fix)
    err.args = (where + str(err),)
    return err


class WorkflowRegistry:
    """The workflows of the code location, their versions and the active (live) version of each.

    Registering a workflow makes it a version; the first registered version of a name (or one
    registered with ``active=True``) is active. Thread-safe.

    >>> import datetime as dt, contextlib
    >>> reg = WorkflowRegistry()
    >>> wf = Workflow("w", lambda c: 1, lambda c: 1, lambda d, o, c: 1.0, ("t",),
    ...               dt.timedelta(days=1), "the value on the next day",
    ...               fixture=lambda: contextlib.nullcontext())
    >>> reg.register(wf).name, reg.active("w").version_id == wf.version_id
    ('w', True)
    """

    def __init__(self) -> None:
        self._versions: dict[str, dict[str, Workflow]] = {}
        self._active: dict[str, str] = {}
        self._lock = threading.Lock()

    def register(self, workflow: Workflow, *, active: bool = False) -> Workflow:
        """Add ``workflow`` as a version of its name.

        Raises:
            InputError: the workflow has no leak-test fixture (every registered workflow is
                leak-tested in CI).
        """
        if workflow.fixture is None:
            raise InputError(
                f"a leak-test fixture on workflow {workflow.name!r}",
                "none",
                "give it fixture=... (a small real setup): CI runs the leak tests on every "
                "registered workflow",
            )
        with self._lock:
            versions = self._versions.setdefault(workflow.name, {})
            versions[workflow.version_id] = workflow
            if active or workflow.name not in self._active:
                self._active[workflow.name] = workflow.version_id
        return workflow

    def names(self) -> list[str]:
        """Registered workflow names, sorted."""
        with self._lock:
            return sorted(self._versions)

    def __iter__(self) -> Iterator[Workflow]:
        """Every registered version, by name then registration order."""
        with self._lock:
            items = [wf for name in sorted(self._versions) for wf in self._versions[name].values()]
        return iter(items)

    def versions(self, name: str) -> list[Workflow]:
        """Every registered version of ``name``."""
        with self._lock:
            return list(self._lookup(name).values())

    def _lookup(self, name: str) -> dict[str, Workflow]:
        try:
            return self._versions[name]
        except KeyError:
            from typestrict_pipeline.values import shown

            raise NotFoundError(
                f"expected a registered workflow, got {shown(name, 80)} (registered: "
                f"{', '.join(sorted(self._versions)) or 'none'}). Check the name."
            ) from None

    def get(self, name: str, version_id: str | None = None) -> Workflow:
        """A version of ``name`` (the active one by default).

        Raises:
            NotFoundError: unknown name or version.
        """
        with self._lock:
            versions = self._lookup(name)
            vid = version_id or self._active[name]
            try:
                return versions[vid]
            except KeyError:
                raise NotFoundError(
                    f"expected a version of workflow {name!r} ({', '.join(versions)}), got "
                    f"{vid!r}. Register that version first."
                ) from None

    def active(self, name: str) -> Workflow:
        """The active (live) version of ``name`` in code."""
        return self.get(name)

    def activate(self, name: str, version_id: str) -> Workflow:
        """Make ``version_id`` the active version of ``name`` (in this process).

        Raises:
            NotFoundError: unknown name or version.
        """
        wf = self.get(name, version_id)
        with self._lock:
            self._active[name] = version_id
        return wf


def _first_bad_cell(values: Any, kind: str) -> int | None:
    """The index of the first cell that is not of ``kind`` (a missing number, NaN, is a number:
    the outcome says so), else None."""
    import numpy as np

    from typestrict_pipeline.values import looks_numeric

    if kind == "text":
        return None
    if kind == "bool":
        if values.dtype == np.bool_:
            return None
        ok = [isinstance(v, (bool, np.bool_)) for v in values]
    else:
        if np.issubdtype(values.dtype, np.number) and not np.issubdtype(values.dtype, np.bool_):
            return None
        ok = [(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)))
              or (isinstance(v, str) and looks_numeric(v)) for v in values]
    bad = [i for i, good in enumerate(ok) if not good]
    return bad[0] if bad else None


def columns_read(workflow: Workflow) -> dict[str, dict[str, str]]:
    """The columns a dataset for ``workflow`` must have, per table it reads: ``event_time`` and
    ``known_time`` (kind :data:`TIME_KIND`), then the value columns it declares
    (:attr:`Workflow.columns`) with their kind (``"number"``, ``"text"`` or ``"bool"``): what
    :func:`check_columns` asks for, in its order. A table without declared columns lists the two
    times only (its value columns are not checked).

    >>> import datetime as dt
    >>> wf = Workflow("w", lambda c: 1, lambda c: 1, lambda d, o, c: 1.0, ("t", "u"), dt.timedelta(days=1),
    ...               "the value on the next day", columns={"t": {"x": "number", "ok": "bool"}})
    >>> columns_read(wf)
    {'t': {'event_time': 'time', 'known_time': 'time', 'x': 'number', 'ok': 'bool'}, 'u': {'event_time': 'time', 'known_time': 'time'}}
    """
    return {table: {EVENT_TIME: TIME_KIND, KNOWN_TIME: TIME_KIND, **workflow.columns.get(table, {})}
            for table in workflow.tables}


def columns_text(columns: Mapping[str, Mapping[str, str]]) -> str:
    """:func:`columns_read` in one line, as the CLI and the console show it.

    >>> columns_text({"t": {"event_time": "time", "known_time": "time", "x": "number"}, "u": {"y": "text"}})
    't: event_time (time), known_time (time), x (number); u: y (text)'
    """
    return "; ".join(f"{table}: " + ", ".join(f"{c} ({kind})" for c, kind in kinds.items())
                     for table, kinds in columns.items())


def check_columns(workflow: Workflow, tables: Mapping[str, PointInTimeTable], *, dataset: str = "the dataset",
                  fix: str = "register the dataset again with those columns", file: str | None = None) -> None:
    """Refuse data that lacks a column ``workflow`` declares (:attr:`Workflow.columns`), or
    holds a cell of another kind (text in a number column), naming the table, row and column
    (and ``file``, the file the rows were read from, when the caller names one), before anything
    is stored or launched. ``fix`` is the advice, which depends on where the data came from.

    >>> import datetime as dt, pandas as pd
    >>> wf = Workflow("w", lambda c: 1, lambda c: 1, lambda d, o, c: 1.0, ("t",), dt.timedelta(days=1),
    ...               "the value on the next day", columns={"t": {"x": "number"}})
    >>> t = PointInTimeTable.from_frame("t", pd.DataFrame({"event_time": ["2012-01-01T00:00Z", "2012-01-02T00:00Z"],
    ...     "known_time": ["2012-01-02T00:00Z", "2012-01-03T00:00Z"], "x": ["1.5", "lots"]}))
    >>> check_columns(wf, {"t": t}, dataset="'mine'")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: row 2, column 'x': expected a number in column 'x' of table 't' of 'mine' (workflow 'w' reads it as one; an empty cell for a missing value), got 'lots'. Register the dataset again with those columns.
    """
    from typestrict_pipeline.errors import DatasetError
    from typestrict_pipeline.values import shown

    for name, kinds in workflow.columns.items():
        table = tables.get(name)
        if table is None:
            continue  # a missing table is refused with the tables (plan_steps)
        missing = [c for c in kinds if c not in table.columns]
        if missing:
            raise DatasetError(
                f"the columns workflow {workflow.name!r} reads in table {name!r} of {dataset} "
                f"({', '.join(columns_read(workflow)[name])})",
                f"columns {listed(table.columns, plain=True) or 'none'} (missing: {listed(missing, plain=True)})", fix,
                file=file)
        for col, kind in kinds.items():
            i = _first_bad_cell(table.cells(col), kind)
            if i is not None:
                what = "a number" if kind == "number" else "true or false"
                raise DatasetError(
                    f"{what} in column {col!r} of table {name!r} of {dataset} (workflow {workflow.name!r} "
                    "reads it as one; an empty cell for a missing value)",
                    shown(table.cells(col)[i]), fix, file=file, row=table.source_row(i), column=col)
