"""The demo's Dagster runs, in process and stoppable.

Dagster's in-process execution turns a stop signal that arrives during a run into a failed run
(``DagsterExecutionInterruptedError`` in a step), and Dagster's calls (a run, a sensor's
evaluation) leave SIGTERM with SIGINT's handler when they end: ignored when the demo was started
in the background. :func:`execute` gives both signals the handlers the demo started with
(:func:`remember_stop_signals`) before and after each run, and turns an interrupted run into
``KeyboardInterrupt``, so ``kill`` stops the demo between runs and during them.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from typestrict_pipeline.processes import StopHandlers, restore_stop_signals, stop_handlers

INTERRUPTED = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")
_at_start: StopHandlers | None = None


def remember_stop_signals() -> None:
    """Keep the stop signals' handlers as they are now, before any Dagster call, for
    :func:`execute` to give back."""
    global _at_start
    _at_start = stop_handlers()


def execute(job: dg.JobDefinition, **kwargs: Any) -> dg.ExecuteInProcessResult:
    """``job.execute_in_process(**kwargs)`` with the handlers the demo started with, before the
    run (a Dagster call since the last run, such as a sensor's evaluation, may have changed
    them) and after it; ``KeyboardInterrupt`` when a stop signal interrupted the run."""
    handlers = stop_handlers() if _at_start is None else _at_start
    restore_stop_signals(handlers)
    try:
        result = job.execute_in_process(**kwargs)
    finally:
        restore_stop_signals(handlers)
    if interrupted(result):
        raise KeyboardInterrupt(f"run {result.run_id} was interrupted by a stop signal")
    return result


def interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a step or the run failed because of a stop signal (the error or any error it
    came from or during)."""
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:
            if error.cls_name in INTERRUPTED:
                return True
            error = error.cause or error.context
    return False
