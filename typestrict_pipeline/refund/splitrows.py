"""What every decision's split shares, prepared from the rows: units and seeds.

:class:`SplitRows` holds each row's unit (its group, identical texts joined); :func:`seed_of` is
the holdout seed over the rows' digests (``refund.rowdigest``). Both are computed while the
dataset is read (``refund.dataset``), so the split (``refund.holdout``) needs no second read of
the texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.refund.rowdigest import text_labels
from typestrict_pipeline.refund.rowseed import update_sorted
from typestrict_pipeline.refund.sources import TextSource

__all__ = ["SEED_DOMAIN", "SplitRows", "join_units", "member_of", "seed_of", "seed_of_parts", "seed_prefix"]

SEED_DOMAIN = b"typestrict-holdout-v1\0"
"""Domain-separation prefix of the holdout seed (bump the version if the algorithm changes)."""


def seed_of(digests: npt.NDArray[np.uint8], decision: str, source: str) -> bytes:
    """``SHA-256(SEED_DOMAIN + decision + "\\0" + source + "\\0" + sorted row digests)``."""
    return seed_of_parts([digests], decision, source)


def seed_prefix(decision: str, source: str) -> bytes:
    """What the seed hashes before the sorted digests."""
    return SEED_DOMAIN + decision.encode("utf-8") + b"\0" + source.encode("ascii") + b"\0"


def seed_of_parts(parts: Iterable[npt.NDArray[np.uint8]], decision: str, source: str) -> bytes:
    """:func:`seed_of` of digests given in parts ordered between them (``refund.spill.Buckets``:
    by first byte), each sorted here: one part in memory at a time."""
    h = hashlib.sha256(seed_prefix(decision, source))
    update_sorted(h, parts)
    return h.digest()


_CHUNK = 1 << 20


@dataclass(frozen=True, eq=False)
class SplitRows:
    """What every decision's split shares: the rows' ids, groups and (text-joined) units.

    Attributes:
        id_source: where every row's id is read again (input order; the ids are not kept).
        group_codes: each row's group as an index into ``group_values`` (-1: none).
        group_values: the distinct group values.
        grouped: whether the data has a group column.
        units: each row's unit after joining identical texts: a group's code, or
            ``len(group_values) + row`` for a row without a group value (int32 while they fit).
        rows_joined_by_text / groups_joined_by_text: see :class:`HoldoutSummary`.
    """

    id_source: TextSource
    group_codes: npt.NDArray[np.int32]
    group_values: pa.Array
    grouped: bool
    units: npt.NDArray[Any]
    rows_joined_by_text: int
    groups_joined_by_text: int

    @property
    def n(self) -> int:
        """Rows."""
        return len(self.units)

    @property
    def ids(self) -> pa.Array:
        """Every row's id (read again: the whole column in memory, for small data)."""
        return self.id_source.values()

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """The ids of ``rows`` (ascending), read again."""
        return self.id_source.at(np.asarray(rows, dtype=np.int64))

    def group_at(self, i: int) -> str | None:
        """Row ``i``'s group value."""
        code = int(self.group_codes[i])
        return None if code < 0 else str(self.group_values[code].as_py())

    def unit_key(self, unit: int) -> str:
        r"""A unit's key: ``"g\0" + group`` or ``"r\0" + id``."""
        return self.unit_key_texts(np.array([unit], dtype=np.int64))[0]

    def unit_key_texts(self, units: npt.NDArray[Any]) -> list[str]:
        """The keys of ``units`` (any order, repeats allowed), the ids they need read at once."""
        distinct, back = np.unique(np.asarray(units, dtype=np.int64), return_inverse=True)
        g = len(self.group_values)
        split = int(np.searchsorted(distinct, g))
        words = self.group_values.take(pa.array(distinct[:split])).to_pylist()
        keys = ["g\0" + str(w) for w in words]
        keys += ["r\0" + i for i in self.ids_at(distinct[split:] - g)]
        return [keys[int(k)] for k in back.reshape(-1)]

    def unit_keys(self, units: npt.NDArray[np.int64]) -> pa.Array:
        """The keys of ascending ``units``, as Arrow binary (group units first)."""
        g = len(self.group_values)
        split = int(np.searchsorted(units, g))
        parts = []
        for prefix, values in ((b"g\0", self.group_values.take(pa.array(units[:split]))),
                               (b"r\0", self.id_source.take(np.asarray(units[split:] - g,
                                                                        dtype=np.int64)))):
            if len(values):
                parts.append(pc.binary_join_element_wise(
                    pa.scalar(prefix, pa.large_binary()), values.cast(pa.large_binary()),
                    pa.scalar(b"", pa.large_binary())))
        parts = [p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p for p in parts]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.large_binary())


def member_of(values: npt.NDArray[Any], chosen: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """``np.isin(values, chosen)`` a million values at a time, with ``chosen`` sorted once: no
    copy of ``values`` (NumPy's own sorts their concatenation).

    >>> member_of(np.array([4, 1, 7, 1]), np.array([7, 1])).tolist()
    [False, True, True, True]
    """
    out = np.zeros(len(values), dtype=bool)
    if len(chosen) == 0:
        return out
    table = np.unique(chosen)
    for start in range(0, len(values), _CHUNK):
        part = values[start:start + _CHUNK]
        at = np.minimum(np.searchsorted(table, part), len(table) - 1)
        out[start:start + len(part)] = table[at] == part
    return out


def own_units(group_codes: npt.NDArray[np.int32], g: int) -> npt.NDArray[Any]:
    """Each row's own unit: its group's code, or ``g + row`` without a group value (no
    temporary of the rows' size)."""
    n = len(group_codes)
    dtype = np.int32 if g + n < 2**31 - 1 else np.int64
    own = np.arange(g, g + n, dtype=dtype)
    np.copyto(own, group_codes, where=group_codes >= 0, casting="unsafe")
    return own


def join_units(
    ids: TextSource,
    group_codes: npt.NDArray[np.int32],
    group_values: pa.Array,
    grouped: bool,
    shared: npt.NDArray[np.int64],
    texts_at: Callable[[npt.NDArray[np.int64]], list[str]],
) -> SplitRows:
    """Each row's unit, groups that share a text joined (connected components).

    ``shared``: the rows (ascending) whose text key another row has
    (:func:`~typestrict_pipeline.refund.rowdigest.shared_key_rows`); their texts are read to
    join exactly those whose normalised texts are equal.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    g = len(group_values)
    own = own_units(group_codes, g)
    rows, labels = text_labels(shared, texts_at)
    base = SplitRows(ids, group_codes, group_values, grouped, own, 0, 0)
    if rows.size == 0:
        return base
    members, member_index = np.unique(own[rows], return_inverse=True)
    m = len(members)
    size = m + int(labels.max()) + 1
    graph = coo_matrix(
        (np.ones(len(rows), dtype=np.int8), (member_index, m + labels)), shape=(size, size)
    )
    _, component = connected_components(graph, directed=False)
    comp = component[:m]
    per = np.bincount(comp)
    joined = np.flatnonzero(per > 1)
    if joined.size == 0:
        return base
    root = members.copy()
    by_comp = np.argsort(comp, kind="stable")
    starts = np.searchsorted(comp[by_comp], joined)
    spans = [by_comp[s:s + int(per[c])] for c, s in zip(joined.tolist(), starts.tolist(),
                                                          strict=True)]
    every = np.concatenate(spans)  # every joined member's key at once (one read of the ids)
    keys = dict(zip(members[every].tolist(), base.unit_key_texts(members[every]), strict=True))
    for span in spans:
        units = members[span]
        smallest = min(units.tolist(), key=keys.__getitem__)
        root[span] = smallest
    in_joined = per[comp] > 1
    moved_units = members[in_joined]  # sorted: members are
    count = 0
    for start in range(0, len(own), _CHUNK):  # a million rows at a time: no temporary of n
        part = own[start:start + _CHUNK]  # a view: own is this function's array
        at = np.minimum(np.searchsorted(moved_units, part), len(moved_units) - 1)
        moved = moved_units[at] == part
        count += int(np.count_nonzero(moved))
        part[moved] = root[np.searchsorted(members, part[moved])]
    return SplitRows(ids, group_codes, group_values, grouped, own, count, int(joined.size))


@dataclass(frozen=True, eq=False)
class PreparedSplit:
    """What the load computed for the split while the texts went by.

    Attributes:
        rows: every row's unit (identical texts joined).
        labeled_seeds: each decision's seed when its test comes from the right answers (a
            decision with no answer column, or no labeled row, is seeded by the split itself).
    """

    rows: SplitRows
    labeled_seeds: dict[str, bytes]
