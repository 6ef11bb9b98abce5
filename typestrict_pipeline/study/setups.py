"""Workflow setups a study's engine backend can name (``{"backend": "engine", "setup": ...}``).

:func:`registered_workflow` replays a workflow of the code location's registry on a named
dataset with its stand-in model server (offline; the real HTTP client and metering) or an
OpenAI-compatible endpoint. The stand-in server lives as long as the process (one per process
and configuration), so every window run of a Dagster step process shares it.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from typing import Any

from typestrict_pipeline.study.backends import WorkflowSetup

_STACK = contextlib.ExitStack()
_LOCK = threading.Lock()
atexit.register(_STACK.close)


def registered_workflow(
    workflow: str,
    dataset: str,
    *,
    version_id: str | None = None,
    latency_s: float = 0.02,
    base_url: str | None = None,
    model: str | None = None,
    input_micro_usd_per_mtok: int = 0,
    output_micro_usd_per_mtok: int = 0,
) -> WorkflowSetup:
    """A registered workflow (its active version, or ``version_id``) on a named dataset.

    Without ``base_url`` the workflow's stand-in model server answers (``latency_s`` per call).
    """
    from typestrict_pipeline.backtest.service import (
        STUDY_ENDPOINT_ADVICE,
        endpoint_models,
        standin_models,
    )
    from typestrict_pipeline.backtest.workflow import check_columns
    from typestrict_pipeline.backtest.workflows import default_registry, load_dataset

    registry = default_registry()
    wf = registry.get(workflow, version_id)
    data = load_dataset(dataset)
    check_columns(wf, data)  # before a study is stored on data its workflow cannot read
    with _LOCK:
        if base_url is None:
            models = _STACK.enter_context(standin_models(wf, latency_s=latency_s,
                                                         endpoint_advice=STUDY_ENDPOINT_ADVICE))
        else:
            models = _STACK.enter_context(endpoint_models(
                wf, base_url=base_url, model=model or "model",
                input_micro_usd_per_mtok=input_micro_usd_per_mtok,
                output_micro_usd_per_mtok=output_micro_usd_per_mtok))
    return WorkflowSetup(workflow=wf, data=data, clients=dict(models.clients), prices=models.prices)


def setup_args(**kwargs: Any) -> dict[str, Any]:
    """Keyword arguments of :func:`registered_workflow`, as stored in a study's configuration."""
    return dict(kwargs)
