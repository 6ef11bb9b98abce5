"""Dagster wiring for the refund area (not built yet)."""

import dagster as dg


def build_defs() -> dg.Definitions:
    return dg.Definitions()
