"""The warm multiprocess executor: Dagster's multiprocess executor, with ``fork`` as a start method.

Dagster's multiprocess executor starts each step in a fresh interpreter (``spawn``: ~3 s of
imports a step on the project's machine) or forks it from a forkserver that imports the code
location first (``forkserver``: ~2 s before the first step, serial). Dagster leaves out ``fork``
because a fork copies only the calling thread: a lock held by another thread stays held forever
in the child. The run process that orchestrates a job's steps has already imported the code
location, so a step forked from it starts in milliseconds.

This executor offers ``fork`` and takes it only when that hazard is absent: when the run process
has no thread but its main thread as the run starts (checked, and said in an engine event). The
run process of an open-source Dagster instance starts none (no run cancellation or metrics thread
unless the instance or the run's tags ask for one), and the executor's own loop starts none: the
parent only reads the step processes' queues. Where another thread runs, the run falls back to
``forkserver`` preloading ``fallback_preload_modules`` and says so. Otherwise it is Dagster's
executor unchanged: the same step processes, events, retries, interrupts (Terminate sets each
step's termination event), ``max_concurrent`` and ``tag_concurrency_limits``.

What a forked step inherits and why that is safe: Dagster's storages open a connection per use
(no pool is carried over), and a step opens its own instance and store engines; the run process
executes no step, so no model client, cache or connection of a step's is copied half-used.
Python's ``logging`` and ``random`` reinitialise their locks and state in a forked child, and the
child ends with ``os._exit`` (multiprocessing), so nothing of the parent's is flushed or closed.

Configure it like Dagster's ``multi_or_in_process_executor``::

    execution:
      config:
        multiprocess:
          max_concurrent: 2
          tag_concurrency_limits:   # optional, as in Dagster's executor
            - {key: lane, value: store, limit: 1}
          start_method:
            fork: {}          # or forkserver: {preload_modules: [...]}, or spawn: {}
"""

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.events import EngineEventData
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.tags import get_tag_concurrency_limits_config
from dagster._core.executor.in_process import InProcessExecutor
from dagster._core.executor.multiprocess import MultiprocessExecutor

from typestrict_pipeline.heap import frozen_heap


def _selector(fields: dict[str, Any]) -> Any:
    return dg.Selector(fields)  # type: ignore[no-untyped-call]


_RETRIES = dg.Field(_selector({"enabled": {}, "disabled": {}}), default_value={"enabled": {}},
                    description="Whether a failed step may be retried (Dagster's retries).")

_MULTIPROCESS = dg.Field({
    "max_concurrent": dg.Field(dg.Noneable(dg.Int), default_value=None,
                               description="How many step processes run at once (unset or 0: "
                               "one per core)."),
    "tag_concurrency_limits": get_tag_concurrency_limits_config(),  # type: ignore[no-untyped-call]
    "start_method": dg.Field(_selector({
        "fork": dg.Field({"fallback_preload_modules": dg.Field([str], is_required=False,
                                                               description=(
            "What the forkserver preloads if the run process has another thread and the run "
            "falls back to forkserver (default: the job's module)."))},
            description="Fork each step from the run process, which has imported the code "
            "location (milliseconds a step); falls back to forkserver when the run process has "
            "another thread."),
        "forkserver": dg.Field({"preload_modules": dg.Field([str], is_required=False)},
                               description="Fork each step from a server that imports these "
                               "modules first (Dagster's forkserver)."),
        "spawn": dg.Field({}, description="Start each step in a fresh interpreter (Dagster's "
                          "default)."),
    }), default_value={"fork": {}}, description="How step processes start."),
    "retries": _RETRIES,
}, description="Execute each step in its own process.")


class WarmMultiprocessExecutor(MultiprocessExecutor):
    """Dagster's :class:`MultiprocessExecutor` with ``start_method="fork"`` when the run process
    is single-threaded (see the module docstring), else ``forkserver``."""

    def __init__(self, retries: RetryMode, max_concurrent: int | None, start_method: str,
                 preload: Sequence[str] | None,
                 tag_concurrency_limits: list[dict[str, Any]] | None = None) -> None:
        super().__init__(retries=retries, max_concurrent=max_concurrent,
                         tag_concurrency_limits=tag_concurrency_limits,
                         start_method=start_method, explicit_forkserver_preload=preload)

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        if self._start_method == "fork":
            others = other_threads()
            if others:
                self._start_method = "forkserver"
                message = (f"Warm multiprocess executor: the run process has other threads "
                           f"({', '.join(others)}), so forking a step is unsafe; steps start "
                           f"from a forkserver instead.")
            else:
                message = ("Warm multiprocess executor: steps fork from this run process "
                           "(single-threaded).")
            yield dg.DagsterEvent.engine_event(plan_context, message, EngineEventData())
        if self._start_method != "fork":
            yield from super().execute(plan_context, execution_plan)
            return
        # Python's recipe for forking without exec: the run process's heap is frozen while it
        # forks steps, so a step's collections neither walk nor copy its parent's pages
        with frozen_heap():
            yield from super().execute(plan_context, execution_plan)


def other_threads() -> list[str]:
    """Names of the live threads other than the calling one (a fork would not copy them).

    >>> done = threading.Event()
    >>> poller = threading.Thread(target=done.wait, name="doctest-poller")
    >>> poller.start()
    >>> "doctest-poller" in other_threads()
    True
    >>> done.set(); poller.join()
    >>> "doctest-poller" in other_threads()
    False
    """
    me = threading.current_thread()
    return [t.name for t in threading.enumerate() if t is not me]


def _retry_mode(config: Mapping[str, Any]) -> RetryMode:
    return RetryMode.from_config(config.get("retries") or {"enabled": {}}) or RetryMode.ENABLED


def _requirements(config: Mapping[str, Any]) -> Sequence[dg.ExecutorRequirement]:
    return dg.multiple_process_executor_requirements() if "multiprocess" in config else []


@dg.executor(
    name="warm_multiprocess",
    config_schema=dg.Field(_selector({"multiprocess": _MULTIPROCESS,
                                        "in_process": {"retries": _RETRIES}}),
                           default_value={"multiprocess": {}}),
    requirements=_requirements,
)
def warm_multiprocess_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Dagster's ``multi_or_in_process_executor`` with ``fork`` as a start method (the default):
    a step forks from the run process, which has imported the code location."""
    config: Mapping[str, Any] = init_context.executor_config
    if "in_process" in config:
        return InProcessExecutor(retries=_retry_mode(config["in_process"]), marker_to_close=None)
    multi: Mapping[str, Any] = config["multiprocess"]
    (method, options), = multi.get("start_method", {"fork": {}}).items()
    preload = options.get("fallback_preload_modules" if method == "fork" else "preload_modules")
    return WarmMultiprocessExecutor(retries=_retry_mode(multi),
                                    max_concurrent=multi.get("max_concurrent"),
                                    start_method=method, preload=preload,
                                    tag_concurrency_limits=multi.get("tag_concurrency_limits"))
