"""Dagster wiring, one module per area; each exposes ``build_defs() -> dagster.Definitions``.

The statistics and the engines live in ``typestrict_pipeline`` (no Dagster import); the modules
here only turn them into assets, checks, jobs, schedules and sensors.
"""

import importlib

import dagster as dg

# Order is only cosmetic (the UI sorts anyway).
AREAS = ("refund", "credits", "backtests", "studies", "reruns", "lifecycle")


def area_definitions() -> list[dg.Definitions]:
    """Each area's ``Definitions``, in ``AREAS`` order."""
    return [importlib.import_module(f"assets.{name}").build_defs() for name in AREAS]
