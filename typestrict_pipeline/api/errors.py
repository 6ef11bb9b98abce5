"""One JSON error shape for every answer that is not a success: ``{"error": {"code", "message"}}``.

The ``message`` is the same text the CLI prints for the same error (the project's one shape: what
was expected, what was got, what to do). :func:`status_for` maps each error class to its HTTP
status once, for every route.

>>> from typestrict_pipeline.errors import NotFoundError
>>> status_for(NotFoundError("x"))
(404, 'not_found')
"""

from __future__ import annotations

from typing import Any

from typestrict_pipeline.credits import InsufficientCreditsError
from typestrict_pipeline.errors import (
    ConflictError,
    InputError,
    LimitError,
    NotEnoughDataError,
    NotFoundError,
    StoreError,
    TypeStrictError,
)


class ApiError(TypeStrictError):
    """An error the API answers with a given status and code (401, 410, 413 ...)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFoundError, 404, "not_found"),
    (InsufficientCreditsError, 402, "insufficient_credits"),
    (ConflictError, 409, "conflict"),
    (LimitError, 422, "limit"),
    (NotEnoughDataError, 422, "not_enough_data"),
    (InputError, 422, "invalid_input"),
    (StoreError, 503, "store_unavailable"),
    (TypeStrictError, 400, "bad_request"),
)


def status_for(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and error code of one of our errors."""
    if isinstance(exc, ApiError):
        return exc.status, exc.code
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return 500, "internal"


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one error shape.

    >>> error_body("not_found", "expected a model")
    {'error': {'code': 'not_found', 'message': 'expected a model'}}
    """
    return {"error": {"code": code, "message": message}}
