"""The workflows registered in the code location, and the named datasets they replay.

:func:`default_registry` is what the Dagster code location, the CLI and the CI leak tests use:
every workflow in it gets a backtest job, a live job and the leak tests. The planted canaries in
:mod:`.canary` are deliberately not registered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache

from typestrict_pipeline.backtest.pit import PointInTimeTable
from typestrict_pipeline.backtest.workflow import WorkflowRegistry
from typestrict_pipeline.errors import InputError

__all__ = ["DATASETS", "default_registry", "load_dataset"]


def _seattle() -> Mapping[str, PointInTimeTable]:
    from typestrict_pipeline.backtest.workflows.weather import load_seattle_weather

    return {"weather": load_seattle_weather()}


DATASETS: dict[str, Callable[[], Mapping[str, PointInTimeTable]]] = {"seattle_weather": _seattle}
"""Dataset name -> loader of its point-in-time tables (the launchpad's ``dataset``)."""


def load_dataset(name: str) -> Mapping[str, PointInTimeTable]:
    """The tables of a named dataset.

    Raises:
        InputError: unknown name.
    """
    try:
        loader = DATASETS[name]
    except KeyError:
        raise InputError(f"a dataset name ({', '.join(sorted(DATASETS))})", repr(name),
                         "pick one, or pass a CSV with event_time and known_time columns") from None
    return loader()


@lru_cache(maxsize=1)
def default_registry() -> WorkflowRegistry:
    """The code location's workflows (built on first use; importing this module does nothing)."""
    from typestrict_pipeline.backtest.workflows.weather import WEATHER

    registry = WorkflowRegistry()
    registry.register(WEATHER, active=True)
    return registry
