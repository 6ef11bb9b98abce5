"""Backends a study runs its candidates on, built from the study's stored configuration.

* ``{"backend": "synthetic", ...}``: :class:`~typestrict_pipeline.study.runner.SyntheticBackend`
  (a trivial workflow for tests and benchmarks).
* ``{"backend": "engine", "setup": "package.module:function", "setup_args": {...},
  "max_in_flight": 8}``: the backtest engine (:func:`typestrict_pipeline.backtest.engine.run_backtest`)
  on a :class:`WorkflowSetup` returned by ``function(**setup_args)``.

The configuration is plain JSON stored with the study, so any process (a Dagster step in a
subprocess, a re-execution after a crash) rebuilds the same backend.

The holdout is sealed by the point-in-time layer: during the search every table is replaced by
``table.truncated(seal − 1 µs)``, so a row known at or after the holdout's start does not exist
for a search run (a read of it is impossible, not merely forbidden).
"""

from __future__ import annotations

import datetime as dt
import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from typestrict_pipeline.backtest.metering import CallGate
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.study.folds import Window
from typestrict_pipeline.study.runner import (
    CandidateSpec,
    ShouldStop,
    StudyBackend,
    SyntheticBackend,
    WindowOutcome,
)
from typestrict_pipeline.study.tables import WindowKind


@dataclass
class WorkflowSetup:
    """What the engine needs to replay one workflow version."""

    workflow: Any  # typestrict_pipeline.backtest.workflow.Workflow
    data: Any  # Mapping[str, PointInTimeTable] | PointInTimeTable
    clients: Mapping[str, Any] = field(default_factory=dict)
    tools: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    prices: Any = None  # PriceTable | None


@dataclass
class EngineBackend:
    """Runs each window as a backtest with the engine, under the study's budget guard."""

    setup: WorkflowSetup
    max_in_flight: int = 8
    _sealed: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _data(self, seal_at: dt.datetime | None) -> Any:
        from typestrict_pipeline.backtest.pit import PointInTimeTable

        data = self.setup.data
        if seal_at is None:
            return data
        key = seal_at.isoformat()
        with self._lock:
            if key not in self._sealed:
                cut = seal_at - dt.timedelta(microseconds=1)
                if isinstance(data, PointInTimeTable):
                    self._sealed[key] = data.truncated(cut)
                else:
                    self._sealed[key] = {n: t.truncated(cut) for n, t in data.items()}
            return self._sealed[key]

    def run_window(self, candidate: CandidateSpec, window: Window, kind: WindowKind, *,
                   seal_at: dt.datetime | None, should_stop: ShouldStop) -> WindowOutcome:
        from typestrict_pipeline.backtest.engine import run_backtest
        from typestrict_pipeline.backtest.pit import format_time

        wf = self.setup.workflow
        step = (window.end - window.start) / window.steps
        state = {"cost": 0, "finished": 0, "started": 0, "max_step": 0}
        lock = threading.Lock()
        check = getattr(should_stop, "check", None)

        def on_step(rec: Any) -> None:
            with lock:
                c = int(rec.cost_micro_usd)
                state["cost"] += c
                state["finished"] += 1
                state["max_step"] = max(state["max_step"], c)

        def stop() -> bool:
            with lock:
                cost, started = state["cost"], state["started"]
                finished, max_step = state["finished"], state["max_step"]
            if check is not None:
                halt = bool(check(cost, started, finished, max_step))
            else:
                # A plain should_stop: count steps in flight at the largest step cost seen.
                halt = should_stop(cost + (started - finished) * max_step, started)
            if not halt:
                with lock:
                    state["started"] += 1
            return halt

        # Reserve before calling: the study's guard admits each model, judge and tool call for
        # the most it can cost before it is made (a CallGate), so the budget is never passed.
        gate = should_stop if isinstance(should_stop, CallGate) else None
        result = run_backtest(
            wf, data=self._data(seal_at), start=window.start, end=window.end - step, step=step,
            params=dict(candidate.params) or None, prompts=dict(candidate.prompts) or None,
            clients=self.setup.clients, tools=self.setup.tools, prices=self.setup.prices,
            max_in_flight=self.max_in_flight, should_stop=stop, on_step=on_step, gate=gate,
        )
        if result.gave_up is not None:
            # Its model endpoint does not answer (the engine's fail-fast rule): every later window
            # would end so too, so the window fails with why, and the study with it (never a
            # window "cut" as if a limit had stopped it).
            from typestrict_pipeline.errors import EndpointUnreachableError

            raise EndpointUnreachableError(result.card.stop_reason or "", endpoint=result.gave_up.endpoint,
                                           transport=result.gave_up.transport)
        scores = [(format_time(s.t), float(s.score)) for s in result.steps if s.score is not None]
        cost = sum(int(s.cost_micro_usd) for s in result.steps)
        done = len(result.steps)
        refused = bool(getattr(should_stop, "cut", False))
        return WindowOutcome(scores, cost, done, cut=refused or done < window.steps)


def load_setup(spec: str, args: Mapping[str, Any] | None = None) -> WorkflowSetup:
    """Call ``package.module:function(**args)`` and check it returned a :class:`WorkflowSetup`."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InputError("a setup 'package.module:function'", repr(spec), "fix the study's setup")
    fn = getattr(importlib.import_module(module_name), attr)
    setup = fn(**dict(args or {}))
    if not isinstance(setup, WorkflowSetup):
        raise InputError(f"{spec} to return a WorkflowSetup", type(setup).__name__,
                         "return typestrict_pipeline.study.backends.WorkflowSetup(...)")
    return setup


_CACHE: dict[str, StudyBackend] = {}
_CACHE_LOCK = threading.Lock()


def backend_from_config(config: Mapping[str, Any]) -> StudyBackend:
    """The backend a study's configuration describes (cached per process and configuration).

    >>> isinstance(backend_from_config({"backend": "synthetic", "cost_per_step": 5}), SyntheticBackend)
    True
    """
    import json

    key = json.dumps(dict(config), sort_keys=True, default=str)
    args = config.get("setup_args")
    if isinstance(args, Mapping) and "dataset" in args:  # a new backend once its data changed
        from typestrict_pipeline.backtest.workflows import dataset_stamp

        key += "|" + dataset_stamp(str(args["dataset"]))
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    kind = config.get("backend", "synthetic")
    backend: StudyBackend
    if kind == "synthetic":
        opts = {k: v for k, v in config.items()
                if k in ("noise", "common", "cost_per_step", "seed", "sleep_s")}
        backend = SyntheticBackend(**opts)
    elif kind == "engine":
        setup = load_setup(str(config["setup"]), config.get("setup_args"))
        backend = EngineBackend(setup, max_in_flight=int(config.get("max_in_flight", 8)))
    else:
        raise InputError("backend 'synthetic' or 'engine'", repr(kind), "fix the study's config")
    with _CACHE_LOCK:
        _CACHE[key] = backend
    return backend
