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
from typestrict_pipeline.values import shown

__all__ = ["DATASETS", "dataset_stamp", "default_registry", "load_dataset"]


def _seattle() -> Mapping[str, PointInTimeTable]:
    from typestrict_pipeline.backtest.workflows.weather import load_seattle_weather

    return {"weather": load_seattle_weather()}


DATASETS: dict[str, Callable[[], Mapping[str, PointInTimeTable]]] = {"seattle_weather": _seattle}
"""Dataset name -> loader of its point-in-time tables (the launchpad's ``dataset``)."""


def load_dataset(name: str) -> Mapping[str, PointInTimeTable]:
    """The tables of a named dataset: a built-in one (:data:`DATASETS`) or a registered one
    (:mod:`.datasets`, ``typestrict data register``), read afresh when its files changed.

    Raises:
        InputError: unknown name.
    """
    from typestrict_pipeline.backtest.workflows.datasets import (
        is_registered,
        list_datasets,
        load_registered,
    )

    loader = DATASETS.get(name)
    if loader is not None:
        return loader()
    if is_registered(name):
        return load_registered(name)
    names = sorted([*DATASETS, *(d.name for d in list_datasets())])
    raise InputError(f"a dataset name ({', '.join(names)})", shown(name, 80),
                     "pick one, register one (typestrict data register), or pass a CSV with event_time "
                     "and known_time columns")


def dataset_stamp(name: str) -> str:
    """A token that changes whenever a named dataset's files change (for caches keyed on data).

    Built-in Seattle weather: its CSV's stamp; a registered dataset: its table files' stamps;
    an unknown name: ``""``.
    """
    from typestrict_pipeline.backtest.pit import source_stamp
    from typestrict_pipeline.backtest.workflows.datasets import datasets_dir, is_registered

    if name == "seattle_weather":
        from typestrict_pipeline.backtest.workflows.weather import _csv_path

        return str(source_stamp(_csv_path()))
    if is_registered(name):
        folder = datasets_dir() / name
        return ";".join(f"{p.name}:{source_stamp(p)}" for p in sorted(folder.glob("*.csv")))
    return ""


@lru_cache(maxsize=1)
def default_registry() -> WorkflowRegistry:
    """The code location's workflows (built on first use; importing this module does nothing)."""
    from typestrict_pipeline.backtest.workflows.weather import WEATHER

    registry = WorkflowRegistry()
    registry.register(WEATHER, active=True)
    return registry
