"""One way to time a call in the benchmarks: the median wall and CPU seconds of several runs.

CPU is this process's (every thread), so a multi-threaded alternative is charged in full.

>>> wall, cpu = median_time(lambda: sum(range(1000)), repeat=3)
>>> wall >= 0 and cpu >= 0
True
"""

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int = 3, *,
                warm_up: bool = False) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``repeat`` calls of ``fn``, after one unmeasured call when
    ``warm_up`` (so one-off imports and caches stay out of the figure)."""
    if warm_up:
        fn()
    walls, cpus = [], []
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)
