"""Dagster wiring for the backtests area (not built yet)."""

import dagster as dg


def build_defs() -> dg.Definitions:
    return dg.Definitions()
