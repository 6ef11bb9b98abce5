"""Fixed-width records held in memory up to a bound, then spilled to disk in 256 buckets.

The split needs three per-row tables whose order matters only at the end: each row's seed digest
(32 bytes; the seed hashes them sorted), each row's text key (to find texts that another row
shares) and each row's id key (to find a repeated id). At customers' sizes they do not fit in
memory beside the ids (100 million rows: 3.2 GB of digests alone), so a :class:`Buckets` keeps
its records in memory until they pass :data:`MEMORY_BYTES`, then writes them, partitioned by
their first byte, to 256 files in a private temporary folder (``tempfile``: ``$TMPDIR``, else
``/tmp``), removed by :meth:`Buckets.close` (and when the object is collected).
:meth:`Buckets.parts` gives the records back a bucket at a time in order of their first byte,
so a caller that sorts each part sees every record in sorted order, holding one bucket (1/256
of the records) at a time.

>>> import numpy as np
>>> b = Buckets(2, memory_bytes=4)
>>> b.add(np.array([[3, 1], [1, 2], [3, 0]], dtype=np.uint8))
>>> b.add(np.array([[2, 9]], dtype=np.uint8))
>>> [p.tolist() for p in b.parts()], b.rows, b.spilled
([[[1, 2]], [[2, 9]], [[3, 1], [3, 0]]], 4, True)
>>> b.close()
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["MEMORY_BYTES", "Buckets", "order_by_digest"]

MEMORY_BYTES = 32 << 20
"""Bytes of records a :class:`Buckets` holds in memory before it writes them to disk (a load
holds three: each row's seed digest, text key and id key; 32 MB is a million rows' digests)."""


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


class Buckets:
    """Records of ``width`` bytes, in memory while small, else in 256 files by first byte."""

    def __init__(self, width: int, *, memory_bytes: int | None = None) -> None:
        self.width = width
        self.memory_bytes = MEMORY_BYTES if memory_bytes is None else memory_bytes
        self.rows = 0
        self._blocks: list[npt.NDArray[np.uint8]] = []
        self._held = 0
        self._folder: str | None = None
        self._finalizer: weakref.finalize[[str], Buckets] | None = None

    @property
    def spilled(self) -> bool:
        """Whether records went to disk."""
        return self._folder is not None

    def add(self, records: npt.NDArray[np.uint8]) -> None:
        """Keep ``(m, width)`` records (copied: the caller may reuse its array)."""
        if len(records) == 0:
            return
        block = np.ascontiguousarray(records, dtype=np.uint8).reshape(-1, self.width)
        self._blocks.append(block.copy() if block.base is not None else block)
        self._held += block.nbytes
        self.rows += len(block)
        if self._held > self.memory_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._blocks:
            return
        block = self._blocks[0] if len(self._blocks) == 1 else np.concatenate(self._blocks)
        self._blocks, self._held = [], 0
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="typestrict-spill-")
            self._finalizer = weakref.finalize(self, _remove, self._folder)
        ends = np.cumsum(np.bincount(block[:, 0], minlength=256))
        ordered = block[np.argsort(block[:, 0], kind="stable")]
        del block
        start = 0
        for bucket, end in enumerate(ends.tolist()):
            if end > start:
                with open(os.path.join(self._folder, f"{bucket:02x}"), "ab") as handle:
                    handle.write(ordered[start:end].data)
            start = end

    def parts(self) -> Iterator[npt.NDArray[np.uint8]]:
        """Every record as ``(k, width)`` arrays, in order of first byte between arrays (all of
        them in one array when nothing was spilled)."""
        if self._folder is None:
            if self._blocks:
                yield self._blocks[0] if len(self._blocks) == 1 else np.concatenate(self._blocks)
            return
        self._flush()
        for bucket in range(256):
            path = Path(self._folder, f"{bucket:02x}")
            if path.exists():
                yield np.fromfile(path, dtype=np.uint8).reshape(-1, self.width)

    def close(self) -> None:
        """Forget the records and remove the folder on disk."""
        self._blocks, self._held = [], 0
        if self._finalizer is not None:
            self._finalizer()
        self._folder = None


def order_by_digest(digests: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """The permutation that sorts ``(n, 32)`` digests ascending as byte strings.

    Sorted on the first 8 bytes (one NumPy sort), then any run of equal first bytes by the whole
    digest, so the order is exactly ``sorted(digests)``. (Here, beside the buckets, so that the
    seed's worker process needs NumPy alone: ``refund.rowseed``.)

    >>> d = np.array([[2] + [0] * 31, [1] + [9] * 31, [1] + [0] * 31], dtype=np.uint8)
    >>> order_by_digest(d).tolist()
    [2, 1, 0]
    """
    n = len(digests)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    head = np.ascontiguousarray(digests[:, :8]).view(">u8").reshape(n)
    order = np.argsort(head).astype(np.int64)  # equal heads are ordered below
    sorted_head = head[order]
    ties = np.flatnonzero(sorted_head[1:] == sorted_head[:-1])
    if ties.size:
        starts = np.unique(np.concatenate([ties, ties + 1]))
        # fix each run of equal heads by the full digests (runs are rare: equal 64-bit prefixes)
        run_start = 0
        positions = starts.tolist()
        k = 0
        while k < len(positions):
            run_start = positions[k]
            run_end = run_start
            while k + 1 < len(positions) and positions[k + 1] == run_end + 1 \
                    and sorted_head[positions[k + 1]] == sorted_head[run_start]:
                k += 1
                run_end = positions[k]
            members = order[run_start:run_end + 1]
            order[run_start:run_end + 1] = sorted(members, key=lambda i: digests[i].tobytes())
            k += 1
    return order
