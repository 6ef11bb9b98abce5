"""What the training sensor decides: which registered trainings are new (pure, no I/O).

A training is registered when its manifest appears at
``${TYPESTRICT_HOME}/trainings/<training_id>/manifest.json`` (only finished trainings get one:
``training.status`` is ``succeeded`` or ``failed``). Each tick, the sensor lists the ids that have
a manifest and asks :func:`decide` which of them to add as ``trainings`` partitions and to
request a verdict run for.

The cursor is a small JSON document: ``{"v": 1, "pending": [ids]}``, the ids requested by
earlier ticks whose partition did not exist yet when the cursor was written. An id is known
(never requested again) when it is in the cursor or already a ``trainings`` partition. Ids
whose partition exists are dropped from the cursor, so it stays small however many trainings
there are. The run key ``verdict:<training_id>`` is a second guard: Dagster never launches two
runs with one run key from one sensor.

>>> d = decide(["a", "b"], known_partitions=[], cursor=None)
>>> d.new, d.cursor
(('a', 'b'), '{"v": 1, "pending": ["a", "b"]}')
>>> decide(["a", "b"], known_partitions=[], cursor=d.cursor).new
()
>>> d2 = decide(["a", "b", "c"], known_partitions=["a", "b"], cursor=d.cursor)
>>> d2.new, d2.cursor
(('c',), '{"v": 1, "pending": ["c"]}')
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from typestrict_pipeline.errors import InputError

__all__ = ["CURSOR_VERSION", "IntakeDecision", "decide", "parse_cursor", "run_key"]

CURSOR_VERSION = 1


@dataclass(frozen=True)
class IntakeDecision:
    """One tick's decision.

    Attributes:
        new: training ids to add as partitions and request a verdict run for, sorted.
        cursor: the cursor to store after this tick.
        known: how many manifest ids were already known.
    """

    new: tuple[str, ...]
    cursor: str
    known: int


def run_key(training_id: str) -> str:
    """The run key of a training's verdict run.

    >>> run_key("tr_1")
    'verdict:tr_1'
    """
    return f"verdict:{training_id}"


def parse_cursor(cursor: str | None) -> frozenset[str]:
    """The pending ids in a cursor (empty for no cursor).

    Raises:
        InputError: the cursor is not one this sensor wrote.

    >>> sorted(parse_cursor('{"v": 1, "pending": ["x"]}'))
    ['x']
    >>> parse_cursor("7")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a training_sensor cursor like {"v": 1, "pending": [...]}, got '7'. Reset the sensor's cursor in the UI (or `dagster sensor cursor --delete training_sensor`).
    """
    if not cursor:
        return frozenset()
    try:
        data = json.loads(cursor)
        ok = (
            isinstance(data, dict)
            and data.get("v") == CURSOR_VERSION
            and isinstance(data.get("pending"), list)
            and all(isinstance(x, str) for x in data["pending"])
        )
    except ValueError:
        ok = False
    if not ok:
        raise InputError(
            'a training_sensor cursor like {"v": 1, "pending": [...]}',
            repr(cursor[:80]),
            "reset the sensor's cursor in the UI (or `dagster sensor cursor --delete training_sensor`)",
        )
    return frozenset(data["pending"])


def decide(
    manifest_ids: Iterable[str], *, known_partitions: Iterable[str], cursor: str | None
) -> IntakeDecision:
    """Which ids are new, and the next cursor.

    Args:
        manifest_ids: ids of the trainings that have a manifest now.
        known_partitions: the ``trainings`` partitions that already exist.
        cursor: the cursor stored by the previous tick (or None).

    Returns:
        The decision (new ids sorted, so run requests come in a stable order).
    """
    pending = parse_cursor(cursor)
    partitions = frozenset(known_partitions)
    ids = sorted(set(manifest_ids))
    new = tuple(i for i in ids if i not in pending and i not in partitions)
    still_pending = sorted((pending | set(new)) - partitions)
    next_cursor = json.dumps({"v": CURSOR_VERSION, "pending": still_pending})
    return IntakeDecision(new=new, cursor=next_cursor, known=len(ids) - len(new))
