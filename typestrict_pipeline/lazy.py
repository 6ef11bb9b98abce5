"""Heavy modules imported on first use, so that loading the code location stays quick.

Every Dagster run process loads the whole code location before its first step; SciPy's
``stats``/``integrate``/``special`` alone were about a quarter of that import time
(``python -X importtime -c "import typestrict_pipeline.definitions"``, docs/benchmarks.md). A
module that needs them at call time binds a :class:`LazyModule` instead and keeps its call sites
(``stats.norm.cdf(...)``); type checkers see the real module through ``TYPE_CHECKING``::

    if TYPE_CHECKING:
        from scipy import stats
    else:
        stats = LazyModule("scipy.stats")

>>> m = LazyModule("json")
>>> m.dumps([1])
'[1]'
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module ``name``; imports it at the first attribute read (thread-safe:
    :func:`importlib.import_module` holds the import lock)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"
