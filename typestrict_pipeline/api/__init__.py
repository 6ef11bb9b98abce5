"""The customer HTTP API (FastAPI, served by uvicorn: ``typestrict api``).

:func:`create_app` builds the application; the routers in ``api/routes`` wire the same core
functions the CLI and the Dagster assets call (trainings land in the folder ``training_sensor``
watches; verdicts, audits and credits come from the store). See ``docs/api.md``.
"""

from typestrict_pipeline.api.app import create_app

__all__ = ["create_app"]
