"""The customer HTTP API (FastAPI, served by uvicorn: ``typestrict api``).

:func:`create_app` builds the application; the routers in ``api/routes`` wire the same core
functions the CLI and the Dagster assets call (trainings land in the folder ``training_sensor``
watches; verdicts, audits and credits come from the store). See ``docs/api.md``.

``create_app`` is imported when first asked for (PEP 562): the package's plain modules (the
keys, the rate limit's defaults) are read by commands that never serve (``typestrict api-key``),
which then do not import FastAPI and the routers.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typestrict_pipeline.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from typestrict_pipeline.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
