"""Dagster wiring for the studies area (not built yet)."""

import dagster as dg


def build_defs() -> dg.Definitions:
    return dg.Definitions()
