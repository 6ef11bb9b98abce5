"""Keep Python's garbage collector off the objects a process already held while a hot loop runs.

A study step runs hundreds of window backtests in a process that has imported Dagster, pandas,
SciPy and the code location: some 400,000 objects tracked by the cyclic garbage collector. The
loop allocates heavily, so the collector's oldest generation is collected again and again, and
each full collection walks every one of those objects (0.1-0.2 s each on the project's machine:
0.2-0.5 s of a 2.5 s, 64 x 4 study, docs/benchmarks.md). :func:`frozen_heap` moves the objects
that exist when it is entered into the permanent generation (:func:`gc.freeze`) and returns them
to the oldest generation when it is left (:func:`gc.unfreeze`), so only what the loop itself
creates is scanned in between. Nothing is lost: garbage that existed at entry is collected after
exit, like any other.

The same call is Python's recipe for a process that forks without exec (``gc.freeze()`` before
``fork()``): a child's collections then leave its parent's pages alone (no copy-on-write).
If the heap is already frozen on entry (a forked child of a frozen parent), it is frozen again
at entry and left frozen at exit: the freeze was not this call's to undo. Entries nest and may
overlap across threads; the heap is unfrozen when the last one leaves.

>>> import gc
>>> before = gc.get_freeze_count()
>>> with frozen_heap():
...     gc.get_freeze_count() > before
True
>>> gc.get_freeze_count() == before
True
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_heap"]

_lock = threading.Lock()
_depth = 0
_owner = False  # whether the outermost entry found the heap unfrozen (and so unfreezes it)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Within the block, collections skip the objects that existed at its (outermost) entry."""
    global _depth, _owner
    with _lock:
        if _depth == 0:
            _owner = gc.get_freeze_count() == 0
            gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _owner:
                gc.unfreeze()
