"""A step failure that shows the product's message, and no stack trace, in the Dagster UI.

A plain ``dg.Failure`` ends a step with its description, but Dagster records the exception's
traceback with it and the run page prints "Stack Trace:" and a screen of framework frames under
the product's message, which already says what was expected, what was got and what to do.

:class:`ProductFailure` is a ``dg.Failure`` (the step fails the same way: no retry policy
applies, its metadata shows beside the message) that also carries the error as Dagster records
errors coming from another process: one :class:`~dagster._utils.error.SerializableErrorInfo`
with the message and an empty stack. Dagster stores that record as the step's error
(``serializable_error_info_from_exc_info`` hoists it), so the UI shows the message alone. The
traceback is not lost for a developer: ``TYPESTRICT_DEBUG=1`` keeps the plain ``dg.Failure``.
"""

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterUserCodeProcessError
from dagster_shared.error import SerializableErrorInfo

from typestrict_pipeline.errors import InputError, TypeStrictError
from typestrict_pipeline.refund.manifest import PredictionsFileSource, TrainingManifest


class ProductFailure(DagsterUserCodeProcessError, dg.Failure):
    """``dg.Failure(description, metadata)`` recorded without a stack trace.

    >>> err = ProductFailure("expected a manifest, got none. Put it there.", error="InputError")
    >>> isinstance(err, dg.Failure), err.description, err.user_code_process_error_infos[0].stack
    (True, 'expected a manifest, got none. Put it there.', [])
    """

    def __init__(self, description: str, metadata: Mapping[str, Any] | None = None, *,
                 error: str = "Failure") -> None:
        # DagsterUserCodeProcessError takes the error record, then (along the MRO) dg.Failure
        # takes the description; the metadata and "no retries" are dg.Failure's own.
        super().__init__(description, user_code_process_error_infos=[
            SerializableErrorInfo(message=description, stack=[], cls_name=error)])  # type: ignore[no-untyped-call]
        failed = dg.Failure(description=description, metadata={"error": error, **dict(metadata or {})},
                            allow_retries=False)
        self.metadata = failed.metadata
        self.allow_retries = False


def failure(description: str, metadata: Mapping[str, Any] | None = None, *,
            error: str = "Failure") -> dg.Failure:
    """The failure to raise for a problem the product checks: :class:`ProductFailure`, or a plain
    ``dg.Failure`` (with its traceback) when ``TYPESTRICT_DEBUG=1``."""
    if os.environ.get("TYPESTRICT_DEBUG"):
        return dg.Failure(description=description, metadata={"error": error, **dict(metadata or {})})
    return ProductFailure(description, metadata, error=error)


@contextlib.contextmanager
def product_failure(manifest: TrainingManifest | None = None, system: str | None = None) -> Iterator[None]:
    """Turn the product's own errors into a step failure whose message is the error's text.

    The run page then shows what went wrong and what to do as the failure reason, not a stack
    trace; the error's class is kept in the failure's metadata, with the system whose input it
    was when known (``jev``: the server's Jev, which the customer cannot fix; ``model``), read by
    ``verdict_refusal_sensor`` (assets/lifecycle.py).
    """
    try:
        yield
    except TypeStrictError as exc:
        if system is None and manifest is not None and isinstance(exc, InputError):
            jev = manifest.jev
            if isinstance(jev, PredictionsFileSource) and exc.file == str(jev.path):
                system = "jev"
        metadata = {"system": system} if system is not None else None
        raise failure(str(exc), metadata, error=type(exc).__name__) from None
