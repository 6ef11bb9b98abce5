"""The demo's Dagster runs, in process and stoppable.

Dagster's in-process execution turns a stop signal that arrives during a run into a failed run
(``DagsterExecutionInterruptedError`` in a step), and Dagster's calls (a run, a sensor's
evaluation) leave SIGTERM with SIGINT's handler when they end: ignored when the demo was started
in the background. :func:`execute` gives both signals the handlers the demo started with
(:func:`remember_stop_signals`) before and after each run, and turns an interrupted run into
``KeyboardInterrupt``, so ``kill`` stops the demo between runs and during them.

Between the end of Dagster's call and the handlers given back there is a moment where Dagster
has already copied SIGINT's handler (ignored) to SIGTERM: :func:`stop_signals_kept` gives SIGINT,
for the length of the call, a handler that does what the demo's own handler of the signal
received would do, so the handler Dagster copies to SIGTERM at its end still stops the demo.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
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


@contextlib.contextmanager
def stop_signals_kept() -> Iterator[None]:
    """The demo's stop-signal handlers before and after a Dagster call, and no moment in between
    where SIGTERM is ignored: for the call's length SIGINT's handler does, for the signal it
    receives, what the demo's own handler of that signal does (an ignored SIGINT stays ignored),
    so when Dagster ends by copying SIGINT's handler to SIGTERM a SIGTERM still stops the demo."""
    handlers = stop_handlers() if _at_start is None else _at_start
    restore_stop_signals(handlers)
    if threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            restore_stop_signals(handlers)
        return
    signal.signal(signal.SIGINT, _as_started(handlers))
    heard, said = os.pipe()  # each signal a Python handler caught, Dagster's included
    os.set_blocking(heard, False)
    os.set_blocking(said, False)
    before = signal.set_wakeup_fd(said, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(before)
        caught = _drain(heard)
        os.close(heard)
        os.close(said)
        restore_stop_signals(handlers)
        _act_on_swallowed(caught, handlers)


def _drain(fd: int) -> bytes:
    out = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 512):
            out += chunk
    return out


def _act_on_swallowed(caught: bytes, handlers: StopHandlers) -> None:
    """A stop signal Dagster caught during its call and dropped at its end (its handler records
    the signal and raises it only inside a step's interruptible part; a run whose step had
    passed that point finished as if nothing had come, and the demo ran on): stop as the demo's
    own handler of that signal would, now. An ignored signal never reaches a handler."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        own = handlers.get(signum, signal.SIG_DFL)
        if signum in caught and own is not signal.SIG_IGN and own is not None:
            raise KeyboardInterrupt(f"{signal.Signals(signum).name} during a Dagster call")


def _as_started(handlers: StopHandlers) -> Any:
    """A handler that acts on each stop signal as ``handlers`` (the demo's at its start) would."""

    def handle(signum: int, frame: FrameType | None) -> None:
        own = handlers.get(signum, signal.SIG_DFL)
        if own is signal.SIG_IGN or own is None:
            return
        if callable(own):
            own(signum, frame)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)  # the default action: end the process by the signal
        os.kill(os.getpid(), signum)

    return handle


def execute(job: dg.JobDefinition, **kwargs: Any) -> dg.ExecuteInProcessResult:
    """``job.execute_in_process(**kwargs)`` with the handlers the demo started with, before the
    run (a Dagster call since the last run, such as a sensor's evaluation, may have changed
    them), during its end (:func:`stop_signals_kept`) and after it; ``KeyboardInterrupt`` when a
    stop signal interrupted the run."""
    with stop_signals_kept():
        result = job.execute_in_process(**kwargs)
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
