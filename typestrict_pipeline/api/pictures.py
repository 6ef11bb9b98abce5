"""The pictures of the result page, behind one function (the same ones the Dagster UI shows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typestrict_pipeline.api.page import Picture


def result_pictures(audit: Mapping[str, Any]) -> list[Picture]:
    """PNG pictures for a model's audit; empty until the plotting module is available."""
    return []
