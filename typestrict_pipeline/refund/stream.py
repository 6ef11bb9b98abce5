"""The bootstrap's seed and its resampling stream (SHAKE-256), as published in the audit format.

Everything here is fixed by ``docs/audit-format.md`` so anyone can rebuild the same resamples with
nothing but a SHA-3 implementation:

* **Seed.** ``SHA-256(b"typestrict-refund-seed-v1\\0" + name + b"\\0" + h_1 + … + h_n)`` where
  ``name`` is the decision's name as UTF-8 and ``h_1 … h_n`` are the 32-byte SHA-256 digests of the
  test examples' texts, sorted ascending (so the seed does not depend on row order; a text that
  appears twice contributes twice).
* **Stream.** ``SHAKE-256(b"typestrict-refund-resample-v1\\0" + seed)`` read as ``n · B`` unsigned
  32-bit little-endian words ``u``. Resample ``b`` (0-based) is the words ``b·n … b·n + n − 1``,
  and each word picks the row ``(u · n) >> 32`` of the canonical row order (multiply-shift; the bias
  is below ``n / 2**32``).
* **Groups.** When the test examples come in groups, each group is named by
  ``SHA-256(b"typestrict-refund-group-v1\\0" + key)`` (:func:`group_sha256`; the key itself is
  never written), the ``G`` distinct groups are put in ascending order of that digest, and the
  same stream is read with ``G`` in place of ``n``: resample ``b`` draws the groups
  ``(u · G) >> 32`` for the words ``b·G … b·G + G − 1`` (as many draws as groups, with
  replacement). A group drawn twice contributes its rows twice.

>>> seed = bootstrap_seed("refund", ["00" * 32, "ff" * 32])
>>> len(seed)
32
>>> resample_indices_python(seed, 3, 2)
[[0, 0, 1], [2, 0, 0]]
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

SEED_DOMAIN = b"typestrict-refund-seed-v1\x00"
STREAM_DOMAIN = b"typestrict-refund-resample-v1\x00"
STREAM_NAME = "shake256-u32le-mulshift-v1"
GROUP_DOMAIN = b"typestrict-refund-group-v1\x00"


def group_sha256(key: str) -> str:
    """The published name of a group: ``SHA-256(GROUP_DOMAIN + key as UTF-8)``, lowercase hex.

    The audit carries this digest, never the key (a customer, a movie, a repository).

    >>> group_sha256("movie-42") == group_sha256("movie-42") != group_sha256("movie-43")
    True
    >>> len(group_sha256(""))
    64
    """
    return hashlib.sha256(GROUP_DOMAIN + key.encode("utf-8")).hexdigest()


def bootstrap_seed(decision_name: str, text_sha256s: Iterable[str]) -> bytes:
    """The 32-byte bootstrap seed of one decision.

    Args:
        decision_name: the decision's name (domain separation between decisions).
        text_sha256s: lowercase hex SHA-256 of every test example's text, in any order.

    Returns:
        ``SHA-256(SEED_DOMAIN + name_utf8 + b"\\0" + b"".join(sorted(digests)))``.

    >>> bootstrap_seed("a", []).hex()[:16] != bootstrap_seed("b", []).hex()[:16]
    True
    """
    digests = sorted(bytes.fromhex(h) for h in text_sha256s)
    h = hashlib.sha256()
    h.update(SEED_DOMAIN)
    h.update(decision_name.encode("utf-8"))
    h.update(b"\x00")
    for d in digests:
        h.update(d)
    return h.digest()


def _stream_bytes(seed: bytes, n: int, resamples: int) -> bytes:
    return hashlib.shake_256(STREAM_DOMAIN + seed).digest(4 * n * resamples)


def resample_words(seed: bytes, n: int, resamples: int) -> npt.NDArray[np.uint32]:
    """The stream's words as a ``(resamples, n)`` array: draw ``j`` of resample ``b`` picks the
    row ``pick_rows(words, n)[b, j]`` (a read-only view of the SHAKE-256 output, no copy).

    Args:
        seed: the 32-byte seed from :func:`bootstrap_seed`.
        n: the number of test examples (rows), or of groups; at least 1.
        resamples: the number of resamples B, at least 1.

    >>> resample_words(bytes(32), 3, 2).shape
    (2, 3)
    """
    if n < 1 or resamples < 1:
        raise ValueError(f"expected n >= 1 and resamples >= 1, got n={n}, resamples={resamples}")
    words = np.frombuffer(_stream_bytes(seed, n, resamples), dtype="<u4")
    return words.reshape(resamples, n)


def pick_rows(
    words: npt.NDArray[np.uint32], n: int, out: npt.NDArray[np.uint64] | None = None
) -> npt.NDArray[np.uint64]:
    """Multiply-shift: the row ``(u · n) >> 32`` each word ``u`` picks, as uint64 (into ``out``).

    One 64-bit buffer written in place (``u · n < 2**64`` for any ``n < 2**32``): a third of the
    passes over memory of widening, multiplying, shifting and casting apart.

    >>> pick_rows(np.array([0, 2**31, 2**32 - 1], dtype=np.uint32), 10).tolist()
    [0, 5, 9]
    """
    picked: npt.NDArray[np.uint64] = np.multiply(words, np.uint64(n), out=out, dtype=np.uint64)
    np.right_shift(picked, np.uint64(32), out=picked)
    return picked


def resample_indices(seed: bytes, n: int, resamples: int) -> npt.NDArray[np.intp]:
    """All resamples' row indices as a ``(resamples, n)`` array (numpy; same values as the stdlib).

    Args:
        seed: the 32-byte seed from :func:`bootstrap_seed`.
        n: the number of test examples (rows), at least 1.
        resamples: the number of resamples B, at least 1.

    Returns:
        ``idx[b, j]``: the row (canonical position) of draw ``j`` of resample ``b``.

    >>> resample_indices(bytes(32), 3, 2).tolist() == resample_indices_python(bytes(32), 3, 2)
    True
    """
    idx = pick_rows(resample_words(seed, n, resamples), n)
    return idx.view(np.int64).astype(np.intp, copy=False)  # no copy on 64-bit


def resample_indices_python(seed: bytes, n: int, resamples: int) -> list[list[int]]:
    """The same indices as :func:`resample_indices`, in plain Python (the verifier's way).

    Args:
        seed: the 32-byte seed.
        n: the number of rows, at least 1.
        resamples: the number of resamples, at least 1.

    Returns:
        One list of ``n`` row indices per resample.
    """
    if n < 1 or resamples < 1:
        raise ValueError(f"expected n >= 1 and resamples >= 1, got n={n}, resamples={resamples}")
    data = _stream_bytes(seed, n, resamples)
    unpack = struct.Struct(f"<{n}I").unpack_from
    return [[(u * n) >> 32 for u in unpack(data, 4 * n * b)] for b in range(resamples)]
