"""The per-row digests the split needs, computed a batch at a time from Arrow columns.

- :func:`row_digests`: ``SHA-256(json.dumps([id, text, answer, group], ensure_ascii=False,
  separators=(",", ":")))`` of every row, the seed's input. The JSON text is built by Arrow
  string kernels (quotes, backslashes and the short escapes replaced in place); a row holding
  another control character is encoded by :mod:`json` itself. Only the hashing itself is a
  Python call per row (``hashlib``, the same SHA-256 as the reference).
- :func:`text_keys`: a 64-bit key of each row's text after :func:`normalize_text`, computed with
  NumPy over the Arrow buffers (ASCII texts are normalised by Arrow kernels; others by
  :func:`normalize_text`). Equal texts get equal keys; two different texts rarely do, and
  :func:`identical_text_groups` checks every shared key on the texts themselves, so the join is
  exact.

>>> import pyarrow as pa
>>> d = row_digests(pa.array(["1"]), pa.array(['say "hi"']), pa.array(["yes"]), pa.array([None]))
>>> import hashlib, json
>>> d[0].tobytes() == hashlib.sha256(json.dumps(["1", 'say "hi"', "yes", None],
...     ensure_ascii=False, separators=(",", ":")).encode()).digest()
True
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.refund.cells import python_whitespace
from typestrict_pipeline.refund.spill import order_by_digest

__all__ = [
    "identical_text_groups",
    "key_records",
    "normalize_text",
    "order_by_digest",
    "row_digests",
    "row_messages",
    "sha256_each",
    "shared_key_rows",
    "shared_key_rows_of",
    "string_keys",
    "text_keys",
    "text_labels",
]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_SPECIAL = r'[\x00-\x1f"\\]'
_OTHER_CONTROL = r"[\x00-\x07\x0b\x0e-\x1f]"
_SHORT_ESCAPES = (
    ("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"),
    ("\b", "\\b"), ("\f", "\\f"),
)


def normalize_text(text: str) -> str:
    r"""The form in which two texts count as identical for the split.

    Unicode NFKC (so full-width letters, ligatures and composed accents compare equal), case
    folded, every run of white space made one space, trimmed.

    >>> normalize_text("  Great\tMOVIE!\n") == normalize_text("great movie!")
    True
    >>> normalize_text("ﬁne") == normalize_text("FINE")
    True
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def sha256_each(messages: pa.Array) -> npt.NDArray[np.uint8]:
    """SHA-256 of every value of a binary or string array, as an ``(n, 32)`` byte array."""
    values = messages.cast(pa.large_binary()).to_pylist()
    # map with the unbound ``digest``: no bytecode per row (measured 0.55 s against 0.92 s for a
    # list comprehension over a million 72-byte messages)
    joined = b"".join(map(_DIGEST, map(hashlib.sha256, values)))
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(values), 32)


_DIGEST = type(hashlib.sha256()).digest


def _json_strings(values: pa.Array) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Each value as a JSON string literal (null: ``null``), and where :mod:`json` must do it."""
    special = pc.fill_null(pc.match_substring_regex(values, _SPECIAL), False)
    escaped = values
    other = np.zeros(len(values), dtype=bool)
    if pc.any(special).as_py():
        for old, new in _SHORT_ESCAPES:
            escaped = pc.replace_substring(escaped, old, new)
        other = np.asarray(
            pc.fill_null(pc.match_substring_regex(values, _OTHER_CONTROL), False)
            .to_numpy(zero_copy_only=False), dtype=bool)
    quoted = pc.binary_join_element_wise(_s('"'), escaped, _s('"'), _s(""))
    return pc.fill_null(quoted, _s("null")), other


def _data(values: pa.Array) -> npt.NDArray[np.uint8]:
    """The bytes of a large-string array's values end to end (a view of Arrow's buffer; a null's
    bytes, if any, among them)."""
    buffers = values.buffers()
    n = len(values)
    if n == 0 or buffers[2] is None:
        return np.zeros(0, dtype=np.uint8)
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[values.offset:values.offset + n + 1]
    return np.frombuffer(buffers[2], dtype=np.uint8)[int(offsets[0]):int(offsets[-1])]


def _may_need_escape(values: pa.Array) -> bool:
    """Whether any value may hold a quote, a backslash or a control character: one pass over the
    bytes of the whole batch (False: no row needs :data:`_SPECIAL`'s per-row search)."""
    data = _data(values)
    if data.size == 0:
        return False
    return bool(data.min() < 0x20 or (data == 0x22).any() or (data == 0x5C).any())


def _s(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


def _quoted(values: pa.Array) -> pa.Array:
    """Each value between double quotes as is (null: ``null``): JSON for a value needing no escape."""
    quoted = pc.binary_join_element_wise(_s('"'), values, _s('"'), _s(""))
    return pc.fill_null(quoted, _s("null")) if values.null_count else quoted


def _messages(columns: list[pa.Array], escape: bool, end: str = "") -> pa.Array:
    comma = _s(",")
    parts = [_json_strings(c)[0] if escape else _quoted(c) for c in columns]
    return pc.binary_join_element_wise(
        _s("["), parts[0], comma, parts[1], comma, parts[2], comma, parts[3], _s("]" + end), _s(""))


def row_digests(
    ids: pa.Array, texts: pa.Array, answers: pa.Array, groups: pa.Array
) -> npt.NDArray[np.uint8]:
    """``SHA-256`` of each row's ``[id, text, answer, group]`` JSON text (the seed's rows)."""
    return sha256_each(row_messages(ids, texts, answers, groups))


def _special(values: pa.Array) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """The values quoted as JSON strings where no escape is needed (null: ``null``), and where a
    quote, a backslash or a control character needs one. A dictionary column is looked at once
    per distinct value."""
    if isinstance(values, pa.DictionaryArray):
        words = values.dictionary.cast(pa.large_string())
        quoted_words, special_words = _special(words)
        indices = values.indices
        quoted = pc.fill_null(quoted_words.take(indices), _s("null"))
        codes = np.asarray(pc.fill_null(indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        special = np.zeros(len(values), dtype=bool)
        if special_words.any():
            special = np.where(codes >= 0, special_words[np.maximum(codes, 0)], False)
        return quoted, special
    values = values.cast(pa.large_string())
    special = np.asarray(pc.fill_null(pc.match_substring_regex(values, _SPECIAL), False)
                         .to_numpy(zero_copy_only=False), dtype=bool)
    return _quoted(values), special


def row_messages(ids: pa.Array, texts: pa.Array, answers: pa.Array, groups: pa.Array,
                 end: str = "") -> pa.Array:
    """Each row's ``[id, text, answer, group]`` JSON text, as :mod:`json` writes it, then ``end``
    (a newline: ``refund.rowseed``'s framing; a JSON text holds no raw newline).

    Args:
        ids, texts: the rows' ids and texts (a null is written as an empty string: a row with a
            null id or text is refused by the validation before any digest is used).
        answers, groups: the stratum answer and the group value (null: JSON ``null``); either may
            be dictionary-encoded.

    Returns:
        The JSON texts, in row order (Arrow).

    The rows holding a quote, a backslash or a control character are found by one
    regular-expression pass per column (per distinct value of a dictionary column); the others
    are quoted as they are in one join, those are escaped by Arrow string kernels (or, with a rare
    control character, by :mod:`json` itself).
    """
    ids = ids.cast(pa.large_string())
    texts = texts.cast(pa.large_string())
    ids_ = pc.fill_null(ids, _s("")) if ids.null_count else ids
    texts_ = pc.fill_null(texts, _s("")) if texts.null_count else texts
    special = np.zeros(len(ids), dtype=bool)
    for column in (ids_, texts_):
        if not _may_need_escape(column):
            continue
        special |= np.asarray(pc.fill_null(pc.match_substring_regex(column, _SPECIAL), False)
                              .to_numpy(zero_copy_only=False), dtype=bool)
    answers_q, answers_special = _special(answers)
    groups_q, groups_special = _special(groups)
    special |= answers_special | groups_special
    messages = pc.binary_join_element_wise(
        _s('["'), ids_, _s('","'), texts_, _s('",'), answers_q, _s(","), groups_q, _s("]" + end), _s(""))
    if special.any():
        rows = np.flatnonzero(special)
        plain = [_decoded(c).take(pa.array(rows)) for c in (ids_, texts_, answers, groups)]
        escaped = _messages(plain, escape=True, end=end)
        other = np.zeros(len(rows), dtype=bool)
        for c in plain:
            other |= np.asarray(pc.fill_null(pc.match_substring_regex(c, _OTHER_CONTROL), False)
                                .to_numpy(zero_copy_only=False), dtype=bool)
        if other.any():
            exact = escaped.to_pylist()
            for k in np.flatnonzero(other).tolist():
                exact[k] = _ENCODER.encode([c[k].as_py() for c in plain]) + end
            escaped = pa.array(exact, messages.type)
        mask = np.zeros(len(messages), dtype=bool)
        mask[rows] = True
        messages = pc.replace_with_mask(messages, pa.array(mask), escaped)
    return messages


def _decoded(values: pa.Array) -> pa.Array:
    if isinstance(values, pa.DictionaryArray):
        values = values.dictionary_decode()
    return values.cast(pa.large_string())


# ---- text keys: the identical-text join ------------------------------------------------------

_Q = (0x100000001B3 * 0x9E3779B1 | 1) % 2**64
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_LEN = np.uint64(0x9E3779B97F4A7C15)
_SLICE_BYTES = 1 << 16


@cache
def _powers(n: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """``Q**i`` and ``Q**-i`` mod 2**64 for ``i < n`` (n a power of two, grown as needed)."""
    q = np.full(n, np.uint64(_Q), dtype=np.uint64)
    q[0] = 1
    inv = np.full(n, np.uint64(pow(_Q, -1, 2**64)), dtype=np.uint64)
    inv[0] = 1
    return np.cumprod(q, dtype=np.uint64), np.cumprod(inv, dtype=np.uint64)


def _ascii_whitespace_class(*, space: bool = True) -> str:
    chars = [c for c in python_whitespace() if ord(c) < 128 and (space or c != " ")]
    return "[" + "".join(f"\\x{ord(c):02x}" for c in chars) + "]"


def _replace_rows(values: pa.Array, rows: npt.NDArray[np.int64], new: pa.Array) -> pa.Array:
    mask = np.zeros(len(values), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(values, pa.array(mask), new.cast(values.type))


def _normalized(texts: pa.Array) -> pa.Array:
    """:func:`normalize_text` of each text: Arrow kernels for ASCII texts, Python for the rest.

    An ASCII text is its own NFKC form and case-folds as it lowercases; only the texts with
    white space other than single inner spaces go through the (slower) regex collapse.
    """
    data = _data(texts)
    all_ascii = data.size == 0 or int(data.max()) < 0x80  # one pass over the batch's bytes
    ascii_ = np.ones(len(texts), dtype=bool) if all_ascii else np.asarray(
        pc.fill_null(pc.string_is_ascii(texts), True).to_numpy(zero_copy_only=False), dtype=bool)
    out = pc.ascii_lower(texts)
    space = _ascii_whitespace_class()
    rows = np.zeros(0, dtype=np.int64)
    if _may_need_space_fix(texts, data):
        other = _ascii_whitespace_class(space=False)
        needs = pc.fill_null(pc.match_substring_regex(out, other + "|  |^ | $"), False)
        rows = np.flatnonzero(np.asarray(needs.to_numpy(zero_copy_only=False), dtype=bool) & ascii_)
    if rows.size:
        some = out.take(pa.array(rows))
        some = pc.utf8_trim(pc.replace_substring_regex(some, space + "+", " "), " ")
        out = _replace_rows(out, rows, some)
    if not ascii_.all():
        rows = np.flatnonzero(~ascii_)
        exact = [normalize_text(t) for t in texts.take(pa.array(rows)).to_pylist()]
        out = _replace_rows(out, rows, pa.array(exact, pa.large_string()))
    return out


def _may_need_space_fix(texts: pa.Array, data: npt.NDArray[np.uint8]) -> bool:
    """Whether any ASCII text may need its white space collapsed or trimmed (a control
    character, among them every white space but the space; two spaces in a row; a space first
    or last): a pass or two over the batch's bytes (False: no row needs the per-row search)."""
    if data.size == 0:
        return False
    if int(data.min()) < 0x20 or _two_spaces(data):  # may span two rows: the search decides
        return True
    n = len(texts)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset:texts.offset + n + 1]
    offsets = offsets - offsets[0]
    filled = offsets[1:] > offsets[:-1]
    return bool((data[offsets[:-1][filled]] == 0x20).any()
                or (data[offsets[1:][filled] - 1] == 0x20).any())


def _two_spaces(data: npt.NDArray[np.uint8]) -> bool:
    """Whether two spaces follow each other anywhere in ``data`` (the byte pairs at even, then at
    odd positions, compared as 16-bit words).

    >>> [_two_spaces(np.frombuffer(b, np.uint8)) for b in (b"a  b", b"ab  ", b"  ", b"a b c", b" ")]
    [True, True, True, False, False]
    """
    size = len(data)
    even = np.frombuffer(data, dtype="<u2", count=size // 2)
    odd = np.frombuffer(data[1:], dtype="<u2", count=(size - 1) // 2) if size > 1 else even[:0]
    return bool((even == 0x2020).any() or (odd == 0x2020).any())


def _poly_keys(values: pa.Array) -> npt.NDArray[np.uint64]:
    arr = values.cast(pa.large_string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else \
        np.zeros(0, dtype=np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    size = 1 << max(hi - lo, 1).bit_length()
    pw, inv = _powers(size)
    b = data[lo:hi].astype(np.uint64) + np.uint64(1)
    prefix = np.zeros(hi - lo + 1, dtype=np.uint64)
    np.cumsum(b * pw[: hi - lo], out=prefix[1:])
    starts = offsets[:-1] - lo
    ends = offsets[1:] - lo
    h = (prefix[ends] - prefix[starts]) * inv[starts]
    return _mixed(h, (ends - starts).astype(np.uint64))


def _mixed(h: npt.NDArray[np.uint64], lengths: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The keys of polynomial sums ``h`` of strings of ``lengths`` bytes."""
    h ^= lengths * _LEN
    h ^= h >> np.uint64(30)
    h *= _MIX1
    h ^= h >> np.uint64(27)
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


def _long_key(data: npt.NDArray[np.uint8]) -> np.uint64:
    """:func:`_poly_keys`'s key of one string of more than :data:`_SLICE_BYTES` bytes, its sum
    made a slice at a time (``Σ (b_i + 1)·Q**i`` is the slices' sums, each times ``Q**start``):
    the powers held are a slice's, whatever the string's length. Made at once, a string of 64 MB
    (a 32 Mi-character cell of 2-byte characters, the CSV bound) asked for powers of 2**27
    entries, 2 GiB kept for the process's life (``_powers`` is cached), and 1.5 GiB more."""
    pw, _ = _powers(1 << _SLICE_BYTES.bit_length())
    total = 0
    for start in range(0, len(data), _SLICE_BYTES):
        part = data[start:start + _SLICE_BYTES].astype(np.uint64) + np.uint64(1)
        with np.errstate(over="ignore"):
            s = int(np.sum(part * pw[:len(part)], dtype=np.uint64))
        total = (total + s * pow(_Q, start, 2**64)) % 2**64
    h = np.array([total], dtype=np.uint64)
    key: np.uint64 = _mixed(h, np.array([len(data)], dtype=np.uint64))[0]
    return key


def string_keys(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.uint64]:
    """A 64-bit key of each string (equal strings, equal keys; a null is the empty string)."""
    if isinstance(values, pa.ChunkedArray):
        parts = [string_keys(chunk) for chunk in values.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    arr = values.cast(pa.large_string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    out = np.empty(n, dtype=np.uint64)
    start = 0
    while start < n:  # slices of about 64 kB of text: the work stays in the CPU's cache
        end = int(np.searchsorted(offsets, offsets[start] + _SLICE_BYTES, side="right")) - 1
        end = min(max(end, start + 1), n)
        if end == start + 1 and offsets[end] - offsets[start] > _SLICE_BYTES:  # one long string
            lo, hi = int(offsets[start]), int(offsets[end])
            out[start] = _long_key(np.frombuffer(arr.buffers()[2], dtype=np.uint8)[lo:hi])
        else:
            out[start:end] = _poly_keys(arr.slice(start, end - start))
        start = end
    return out


def text_keys(texts: pa.Array) -> npt.NDArray[np.uint64]:
    """A 64-bit key of each text's normalised form (equal forms, equal keys)."""
    return string_keys(_normalized(texts.cast(pa.large_string())))


def shared_key_rows(
    keys: npt.NDArray[np.uint64], missing: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.int64]:
    """The rows (ascending) whose key another row has; a ``missing`` row shares nothing.

    >>> shared_key_rows(np.array([5, 7, 5, 9, 7], dtype=np.uint64)).tolist()
    [0, 1, 2, 4]
    """
    present = np.arange(len(keys)) if missing is None else np.flatnonzero(~missing)
    return _shared(keys[present], present)


def _shared(keys: npt.NDArray[np.uint64], rows: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    order = np.argsort(keys)
    sorted_keys = keys[order]
    same = sorted_keys[1:] == sorted_keys[:-1]
    shared = np.zeros(len(order), dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    return np.sort(rows[order[shared]]).astype(np.int64)


def shared_key_rows_of(parts: Iterable[npt.NDArray[np.uint8]]) -> npt.NDArray[np.int64]:
    """:func:`shared_key_rows` of ``(key, row)`` records (two native uint64 each, 16 bytes),
    given in parts that hold every record of a key together (``refund.spill.Buckets``).

    >>> rec = np.array([[5, 0], [7, 1], [5, 2], [9, 3]], dtype=np.uint64).view(np.uint8)
    >>> shared_key_rows_of([rec]).tolist()
    [0, 2]
    """
    found = []
    for part in parts:
        pairs = np.ascontiguousarray(part).view(np.uint64).reshape(-1, 2)
        found.append(_shared(pairs[:, 0], pairs[:, 1]))
    return np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def key_records(keys: npt.NDArray[np.uint64], start: int) -> npt.NDArray[np.uint8]:
    """Each key with its row (``start`` + position) as a 16-byte record, for
    :func:`shared_key_rows_of`."""
    pairs = np.empty((len(keys), 2), dtype=np.uint64)
    pairs[:, 0] = keys
    pairs[:, 1] = np.arange(start, start + len(keys), dtype=np.uint64)
    return pairs.view(np.uint8)


def text_labels(
    candidates: npt.NDArray[np.int64], texts_at: Callable[[npt.NDArray[np.int64]], list[str]]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Of rows whose text key another row shares, those whose normalised text another row has,
    and a label per such row (equal labels: equal normalised texts)."""
    if candidates.size == 0:
        return candidates, candidates
    label_of: dict[str, int] = {}
    labels = np.array(
        [label_of.setdefault(normalize_text(t), len(label_of)) for t in texts_at(candidates)],
        dtype=np.int64,
    )
    counts = np.bincount(labels)
    keep = counts[labels] > 1  # a different text that only shared a key stays alone
    return candidates[keep], labels[keep]


def identical_text_groups(
    keys: npt.NDArray[np.uint64],
    texts_at: Callable[[npt.NDArray[np.int64]], list[str]],
    missing: npt.NDArray[np.bool_] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The rows whose normalised text another row shares, and a label per such row.

    Args:
        keys: :func:`text_keys` of every row.
        texts_at: the texts of given rows (ascending positions), to check shared keys exactly.
        missing: rows without a text (they join nothing).

    Returns:
        ``(rows, labels)``: rows (ascending) whose normalised text is equal to another row's,
        and for each a label equal between two rows exactly when their normalised texts are.

    >>> import pyarrow as pa
    >>> texts = ["Hi", "hi ", "other", "HI", "new"]
    >>> k = text_keys(pa.array(texts))
    >>> rows, labels = identical_text_groups(k, lambda p: [texts[i] for i in p])
    >>> rows.tolist(), len(set(labels.tolist()))
    ([0, 1, 3], 1)
    """
    if keys.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return text_labels(shared_key_rows(keys, missing), texts_at)
