"""Dagster resources, one module per area; each exposes ``default_resources() -> dict``.

Resource keys are unique across areas. Each resource is a ``ConfigurableResource`` interface
with a real implementation and a test one (a local file, a local server), chosen here.
"""

import importlib
from typing import Any

AREAS = ("refund", "store", "credits", "backtests", "studies", "reruns", "io")


def default_resources() -> dict[str, Any]:
    """The resources of every area for the embedded default (env vars select production)."""
    merged: dict[str, Any] = {}
    for name in AREAS:
        part: dict[str, Any] = importlib.import_module(f"resources.{name}").default_resources()
        clash = merged.keys() & part.keys()
        if clash:
            raise RuntimeError(f"resource keys defined twice: {sorted(clash)}; rename one of them")
        merged.update(part)
    return merged
