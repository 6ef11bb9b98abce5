"""What every decision's split shares, prepared from the rows: units and seeds.

:class:`SplitRows` holds each row's unit (its group, identical texts joined); :func:`seed_of` is
the holdout seed over the rows' digests (``refund.rowdigest``). Both are computed while the
dataset is read (``refund.dataset``), so the split (``refund.holdout``) needs no second read of
the texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.refund.rowdigest import identical_text_groups, order_by_digest

__all__ = ["SEED_DOMAIN", "SplitRows", "join_units", "seed_of"]

SEED_DOMAIN = b"typestrict-holdout-v1\0"
"""Domain-separation prefix of the holdout seed (bump the version if the algorithm changes)."""


def seed_of(digests: npt.NDArray[np.uint8], decision: str, source: str) -> bytes:
    """``SHA-256(SEED_DOMAIN + decision + "\\0" + source + "\\0" + sorted row digests)``."""
    order = order_by_digest(digests)
    h = hashlib.sha256()
    for part in (SEED_DOMAIN, decision.encode("utf-8"), b"\0", source.encode("ascii"), b"\0"):
        h.update(part)
    for start in range(0, len(order), _CHUNK):  # sorted a million at a time: no second copy
        h.update(np.ascontiguousarray(digests[order[start:start + _CHUNK]]).data)
    return h.digest()


_CHUNK = 1 << 20


@dataclass(frozen=True, eq=False)
class SplitRows:
    """What every decision's split shares: the rows' ids, groups and (text-joined) units.

    Attributes:
        ids: every row's id (Arrow text), in input order.
        group_codes: each row's group as an index into ``group_values`` (-1: none).
        group_values: the distinct group values.
        grouped: whether the data has a group column.
        units: each row's unit after joining identical texts: a group's code, or
            ``len(group_values) + row`` for a row without a group value.
        rows_joined_by_text / groups_joined_by_text: see :class:`HoldoutSummary`.
    """

    ids: pa.Array
    group_codes: npt.NDArray[np.int32]
    group_values: pa.Array
    grouped: bool
    units: npt.NDArray[np.int64]
    rows_joined_by_text: int
    groups_joined_by_text: int

    @property
    def n(self) -> int:
        """Rows."""
        return len(self.ids)

    def group_at(self, i: int) -> str | None:
        """Row ``i``'s group value."""
        code = int(self.group_codes[i])
        return None if code < 0 else str(self.group_values[code].as_py())

    def unit_key(self, unit: int) -> str:
        r"""A unit's key: ``"g\0" + group`` or ``"r\0" + id``."""
        g = len(self.group_values)
        if unit < g:
            return "g\0" + str(self.group_values[unit].as_py())
        return "r\0" + str(self.ids[unit - g].as_py())

    def unit_keys(self, units: npt.NDArray[np.int64]) -> pa.Array:
        """The keys of ascending ``units``, as Arrow binary (group units first)."""
        g = len(self.group_values)
        split = int(np.searchsorted(units, g))
        parts = []
        for prefix, values in ((b"g\0", self.group_values.take(pa.array(units[:split]))),
                               (b"r\0", self.ids.take(pa.array(units[split:] - g)))):
            if len(values):
                parts.append(pc.binary_join_element_wise(
                    pa.scalar(prefix, pa.large_binary()), values.cast(pa.large_binary()),
                    pa.scalar(b"", pa.large_binary())))
        return pa.concat_arrays(parts) if parts else pa.array([], pa.large_binary())


def join_units(
    ids: pa.Array,
    group_codes: npt.NDArray[np.int32],
    group_values: pa.Array,
    grouped: bool,
    keys: npt.NDArray[np.uint64],
    texts_at: Callable[[npt.NDArray[np.int64]], list[str]],
    missing: npt.NDArray[np.bool_] | None = None,
) -> SplitRows:
    """Each row's unit, groups that share a text joined (connected components); a row whose
    text is ``missing`` joins nothing."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n, g = len(ids), len(group_values)
    own = np.where(group_codes >= 0, group_codes.astype(np.int64), g + np.arange(n, dtype=np.int64))
    rows, labels = identical_text_groups(keys, texts_at, missing)
    base = SplitRows(ids, group_codes, group_values, grouped, own, 0, 0)
    if rows.size == 0:
        return base
    members, member_of = np.unique(own[rows], return_inverse=True)
    m = len(members)
    size = m + int(labels.max()) + 1
    graph = coo_matrix(
        (np.ones(len(rows), dtype=np.int8), (member_of, m + labels)), shape=(size, size)
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
    for c, s in zip(joined.tolist(), starts.tolist(), strict=True):
        units = members[by_comp[s:s + int(per[c])]]
        smallest = min(units.tolist(), key=base.unit_key)
        root[by_comp[s:s + int(per[c])]] = smallest
    in_joined = per[comp] > 1
    moved = np.isin(own, members[in_joined])
    units_out = own.copy()
    units_out[moved] = root[np.searchsorted(members, own[moved])]
    return SplitRows(ids, group_codes, group_values, grouped, units_out,
                     int(np.count_nonzero(moved)), int(joined.size))




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
