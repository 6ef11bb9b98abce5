"""Resources of the credits area (not built yet)."""

from typing import Any


def default_resources() -> dict[str, Any]:
    return {}
