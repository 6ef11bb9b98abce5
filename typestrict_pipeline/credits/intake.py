"""What the training sensor decides: which registered trainings are new (pure, no I/O).

A training is registered when its manifest appears at
``${TYPESTRICT_HOME}/trainings/<training_id>/manifest.json`` (only finished trainings get one:
``training.status`` is ``succeeded`` or ``failed``). Each tick, the sensor lists the ids that have
a manifest and asks :func:`decide` which of them to add as ``trainings`` partitions and to
request a verdict run for.

The cursor is a small JSON document: ``{"v": 2, "pending": [ids], "refused": {id: files}}``:
the ids requested by earlier ticks whose partition did not exist yet when the cursor was
written, and the trainings refused before any run (:func:`screen`: their predictions do not fit
their split) with a fingerprint of their files, so an unchanged refused training is not checked
again and a corrected one is. An id is known (never requested again) when it is pending or
already a ``trainings`` partition. Ids whose partition exists are dropped from the cursor, so it
stays small however many trainings there are. The run key ``verdict:<training_id>`` is a second
guard: Dagster never launches two runs with one run key from one sensor; a corrected submission
after a refusal gets its own (:func:`rerun_key`, :func:`resubmitted`).

>>> d = decide(["a", "b"], known_partitions=[], cursor=None)
>>> d.new, d.cursor
(('a', 'b'), '{"v": 2, "pending": ["a", "b"]}')
>>> decide(["a", "b"], known_partitions=[], cursor=d.cursor).new
()
>>> d2 = decide(["a", "b", "c"], known_partitions=["a", "b"], cursor=d.cursor)
>>> d2.new, d2.cursor
(('c',), '{"v": 2, "pending": ["c"]}')
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from typestrict_pipeline.errors import InputError

__all__ = [
    "CURSOR_VERSION",
    "IntakeDecision",
    "decide",
    "fingerprint",
    "next_cursor",
    "parse_cursor",
    "parse_refused",
    "rerun_key",
    "resubmitted",
    "run_key",
    "screen",
]

CURSOR_VERSION = 2


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


def fingerprint(paths: Iterable[Path]) -> str:
    """What a refused training's files look like now (size and mtime of each): a change means
    the customer corrected something, and the training is checked again.

    >>> fingerprint([])
    ''
    """
    parts = []
    for path in paths:
        try:
            st = path.stat()
            parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append("-")
    return ",".join(parts)


def parse_refused(cursor: str | None) -> dict[str, str]:
    """The refused trainings a cursor remembers (id -> fingerprint of their files).

    >>> parse_refused('{"v": 2, "pending": [], "refused": {"t": "1:2"}}')
    {'t': '1:2'}
    """
    parse_cursor(cursor)
    if not cursor:
        return {}
    data = json.loads(cursor)
    refused = data.get("refused", {})
    return {str(k): str(v) for k, v in refused.items()} if isinstance(refused, dict) else {}


def screen(
    new: Iterable[str],
    *,
    refused: Mapping[str, str],
    fingerprints: Callable[[str], str],
    check: Callable[[str], str | None],
    limit: int = 8,
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Which new trainings may be requested: ``(accepted, refused now, messages)``.

    A training refused earlier whose files did not change is not checked again; at most
    ``limit`` are checked in one tick (the others wait for the next).

    >>> screen(["a", "b"], refused={}, fingerprints=lambda t: "f", check=lambda t: "bad" if t == "b" else None)
    (['a'], {'b': 'f'}, {'b': 'bad'})
    """
    accepted: list[str] = []
    still: dict[str, str] = {}
    messages: dict[str, str] = {}
    checked = 0
    for tid in new:
        fp = fingerprints(tid)
        if refused.get(tid) == fp:
            still[tid] = fp
            continue
        if checked == limit:
            continue
        checked += 1
        problem = check(tid)
        if problem is None:
            accepted.append(tid)
        else:
            still[tid] = fp
            messages[tid] = problem
    return accepted, still, messages


def rerun_key(training_id: str, submission: int) -> str:
    """The run key of a training's verdict run after its ``submission``-th accepted predictions
    (a corrected submission after a refusal gets a run of its own).

    >>> rerun_key("tr_1", 2)
    'verdict:tr_1:2'
    """
    return f"verdict:{training_id}:{submission}"


def resubmitted(
    judging: Iterable[tuple[str, int, dt.datetime]],
    *,
    partitions: Iterable[str],
    last_run_created: Callable[[str], dt.datetime | None],
) -> list[tuple[str, int]]:
    """Judging trainings whose partition exists and whose last verdict run predates their
    latest accepted submission: they need a run of their own (``rerun_key``).

    >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    >>> resubmitted([("a", 2, t)], partitions=["a"], last_run_created=lambda _: t - dt.timedelta(hours=1))
    [('a', 2)]
    >>> resubmitted([("a", 2, t)], partitions=["a"], last_run_created=lambda _: t + dt.timedelta(seconds=1))
    []
    """
    known = set(partitions)
    out = []
    for tid, submission, since in judging:
        if tid not in known:
            continue  # a new training: the manifest path requests its first run
        last = last_run_created(tid)
        if last is None or last < since:
            out.append((tid, submission))
    return out


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
            and data.get("v") in (1, CURSOR_VERSION)
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
    manifest_ids: Iterable[str], *, known_partitions: Iterable[str], cursor: str | None,
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
    refused = parse_refused(cursor)
    doc: dict[str, object] = {"v": CURSOR_VERSION, "pending": still_pending}
    if refused:
        doc["refused"] = refused
    return IntakeDecision(new=new, cursor=json.dumps(doc), known=len(ids) - len(new))


def next_cursor(cursor: str | None, *, requested: Iterable[str], refused: Mapping[str, str],
                known_partitions: Iterable[str]) -> str:
    """The cursor after a tick: the ids requested (now or before) whose partition does not exist
    yet, and the refused ones with their files' fingerprints. An id that was neither (not checked
    yet in this tick) is new again next tick.

    >>> next_cursor('{"v": 2, "pending": ["a"]}', requested=["b"], refused={"c": "f"}, known_partitions=["a"])
    '{"v": 2, "pending": ["b"], "refused": {"c": "f"}}'
    """
    pending = (set(parse_cursor(cursor)) | set(requested)) - set(known_partitions)
    doc: dict[str, object] = {"v": CURSOR_VERSION, "pending": sorted(pending)}
    if refused:
        doc["refused"] = dict(sorted(refused.items()))
    return json.dumps(doc)
