"""Progress of long work (a 10-million-row dataset read, a study's candidates), one shape for all.

The core reports :class:`Progress` to a callback; the wiring decides where it goes:

- the CLI draws a bar on a terminal (``cli.common.progress``);
- Dagster logs a line and records an observation with the figures every N% (:func:`every`);
- the console reads the last report of a run with :func:`read_progress`, the one function that
  tells how far a run is: reports are written to ``<home>/progress/<key>.json`` by
  :func:`write_progress` (atomically, so a reader never sees half a file).

A report stays after its run ends (the console shows how far a finished run got), except when
the work is refused at its first step: :func:`clear_progress` removes it, so a bad input that
fails its run before anything is stored leaves nothing behind in the home either.

>>> seen = []
>>> report = every(25, seen.append)
>>> for done in range(0, 101, 5):
...     report(Progress("reading", done, 100))
>>> [p.done for p in seen]
[0, 25, 50, 75, 100]
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from typestrict_pipeline.files import write_atomic

__all__ = [
    "Progress",
    "ProgressFn",
    "clear_progress",
    "every",
    "progress_path",
    "read_progress",
    "training_key",
    "write_progress",
]


@dataclass(frozen=True)
class Progress:
    """How far one piece of work is.

    Attributes:
        what: what is being done, in words ("reading the dataset").
        done: units done so far.
        total: units in all, or None when not known in advance (a CSV file's rows); 0 is a
            real total (a dataset that is a header without rows: nothing to do, all of it done).
        unit: what a unit is ("rows", "candidates").
    """

    what: str
    done: int
    total: int | None
    unit: str = "rows"

    @property
    def percent(self) -> float | None:
        """Done as a percentage of the total (None when the total is not known; 100 when the
        total is 0: there was nothing to do).

        >>> Progress("reading", 1, 4).percent, Progress("reading", 0, 0).percent
        (25.0, 100.0)
        >>> Progress("reading", 3, None).percent is None
        True
        """
        if self.total is None:
            return None
        if self.total <= 0:
            return 100.0
        return min(100.0, 100.0 * self.done / self.total)

    def line(self) -> str:
        """One line for a log: ``reading the dataset: 40% (4,000,000 of 10,000,000 rows)``.

        >>> Progress("reading", 3, None).line()
        'reading: 3 rows'
        >>> Progress("reading", 0, 0).line()
        'reading: 100% (0 of 0 rows)'
        """
        percent = self.percent
        if self.total is None or percent is None:
            return f"{self.what}: {self.done:,} {self.unit}"
        return f"{self.what}: {percent:.0f}% ({self.done:,} of {self.total:,} {self.unit})"


ProgressFn = Callable[[Progress], None]


def every(percent: int, report: ProgressFn, *, unknown_step: int = 1_000_000) -> ProgressFn:
    """A callback that passes on the first report, one per ``percent`` step, and the last.

    With no total, one report per ``unknown_step`` units.
    """
    last: list[int] = [-1]

    def step(p: Progress) -> int:
        if p.total:
            return int(p.done * 100 // p.total) // percent
        return p.done // unknown_step

    def maybe(p: Progress) -> None:
        s = step(p)
        finished = p.total is not None and p.done >= p.total
        if s > last[0] or (finished and last[0] != -2):
            last[0] = -2 if finished else s
            report(p)

    return maybe


_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def progress_path(home: Path, key: str) -> Path:
    """Where the progress of ``key`` (a Dagster run id, a study id) is written under ``home``.

    Raises:
        ValueError: a key that is not a plain name (it names a file).
    """
    if not _KEY.match(key) or key in {".", ".."}:
        raise ValueError(f"expected a run or study id of letters, digits, '_', '-', '.', got {key!r}")
    return home / "progress" / f"{key}.json"


def training_key(training_id: str) -> str:
    """The key a training's verdict run also records its progress under, so a page that knows
    the training, not the run, can read it.

    >>> training_key("rt-tiny")
    'training-rt-tiny'
    """
    return f"training-{training_id}"


def write_progress(home: Path, key: str, progress: Progress) -> None:
    """Record ``progress`` as the latest of ``key`` (what :func:`read_progress` returns)."""
    data = json.dumps(asdict(progress), sort_keys=True).encode("utf-8")
    write_atomic(progress_path(home, key), data)


def clear_progress(home: Path, key: str) -> None:
    """Forget the progress recorded for ``key`` (nothing happens when there is none).

    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp())
    >>> write_progress(home, "run-1", Progress("reading the dataset", 5, 10))
    >>> clear_progress(home, "run-1"); clear_progress(home, "run-1")
    >>> read_progress(home, "run-1") is None
    True
    """
    progress_path(home, key).unlink(missing_ok=True)


def read_progress(home: Path, key: str) -> Progress | None:
    """The latest progress recorded for ``key``, or None (nothing recorded, or unreadable).

    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp())
    >>> write_progress(home, "run-1", Progress("reading the dataset", 5, 10))
    >>> read_progress(home, "run-1").line(), read_progress(home, "run-2")
    ('reading the dataset: 50% (5 of 10 rows)', None)
    """
    try:
        raw = json.loads(progress_path(home, key).read_text(encoding="utf-8"))
        total = raw["total"]
        return Progress(what=str(raw["what"]), done=int(raw["done"]),
                        total=None if total is None else int(total), unit=str(raw["unit"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
