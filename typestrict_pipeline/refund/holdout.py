"""The held-out test examples, exactly as the refund page says, drawn deterministically.

The rule (``docs/method/refund.md``, "The test examples (split)"):

- 20% of the labeled examples, drawn per answer so each answer keeps its share, up to 2,000.
- With a group column, the test takes whole groups until it reaches that 20%; the other rows of
  those groups stay out of training too (role ``excluded``).
- When the data has no answers, the examples a person labeled in review are the test (drawn from
  the evaluation groups when there are groups).
- Seeded by the dataset: the same content gives the same test examples whatever the row order.

The algorithm, step by step (no random generator anywhere: every "draw" is an order by SHA-256):

1. **Stratum rows.** The rows that carry an answer (the right answer, or in the no-answer case the
   review label). For multiple choice the stratum is the right option's position (1..K).
2. **Seed.** ``sha256(b"typestrict-holdout-v1\\0" + decision + b"\\0" + source + b"\\0" +
   b"".join(sorted(sha256(json([id, text, answer, group])))))`` over every row: sorted, so row
   order cannot matter; any change of content changes it.
3. **Quotas.** With n stratum rows and n_a per answer, the exact shares are q_a = n_a/5, or
   q_a = 2000·n_a/n when n/5 > 2000 (capped). The total is T = round-half-up(Σ q_a); each answer
   gets floor(q_a), and the T − Σ floor(q_a) remaining units go to the answers with the largest
   remainders (ties: the answer's order). So every answer's test count is within one example of
   its exact share. The no-answer case takes every reviewed row (q_a = n_a), capped the same way.
4. **Groups in hash order.** Every group (a row with no group value is its own group; without a
   group column every row is) is ranked by ``sha256(seed + b"group\\0" + key)``. **Identical
   texts are one group:** rows whose texts are equal after :func:`normalize_text` (Unicode NFKC,
   case folded, runs of white space made one space, trimmed) are joined, with every group any of
   them belongs to, into one group (union-find); its key is the smallest of its members' keys.
   So a text is never on both sides of the split. ``rows_joined_by_text`` counts the rows of
   groups that were joined this way.
5. **Pass 1, whole groups that fit.** In that order, a group is taken for the test when, for every
   answer, its stratum rows fit in what remains of the answer's quota. All its stratum rows are
   test.
6. **Pass 2, top up.** If a quota is still open (every remaining group overshoots it), the next
   groups in hash order that hold rows of an open answer are taken; of those groups' rows of each
   answer, the first ones by ``sha256(seed + b"row\\0" + id)`` fill the quota and are test, the
   others are ``excluded`` (this is the only case where a stratum row of a test group is not
   test). Without a group column pass 2 never runs.
7. **Roles.** A row of a test group: ``test`` if selected, else ``excluded`` (it may not be
   trained on: the model must never see a group it is measured on). A row outside the test groups:
   ``train`` if it is a stratum row; an unlabeled row is ``excluded`` in the labeled case (nothing
   to train on) and ``train`` in the no-answer case (the training data are then the unlabeled rows).

**Columnar.** :func:`split_decisions` reads the texts once more in bounded batches
(:attr:`~typestrict_pipeline.refund.dataset.Dataset.texts`), computes every row's seed digest and
a key of its normalised text (``refund.rowdigest``), and runs the passes with NumPy over units in
rank order; a Python object is built only for the test rows (:attr:`Holdout.test_rows`). The
ids are not held: the test rows', pass 2's and the ungrouped units' are read again from the
file (``refund.sources``), and the test rows are kept as row numbers, the roles as one byte a row.
``tests/refund_reference.py`` keeps the row-by-row implementation this one is proved against.

>>> rows = [HoldoutRecord(id=str(i), text=f"t{i}", answer="yes" if i % 4 else "no", group=None)
...         for i in range(20)]
>>> h = draw_holdout(rows, decision="d")
>>> h.summary.n_test, [(a.answer, a.labeled, a.test) for a in h.summary.per_answer]
(4, [('no', 5, 1), ('yes', 15, 3)])
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.errors import DatasetError, NotEnoughDataError
from typestrict_pipeline.refund.dataset import Dataset, DecisionLabels
from typestrict_pipeline.refund.rowdigest import (
    key_records,
    normalize_text,
    order_by_digest,
    row_digests,
    sha256_each,
    shared_key_rows,
    shared_key_rows_of,
    text_keys,
)
from typestrict_pipeline.refund.runreads import active_cache
from typestrict_pipeline.refund.sources import KEEP_ROWS, MemoryTexts, TextSource, aligned
from typestrict_pipeline.refund.spill import Buckets
from typestrict_pipeline.refund.splitrows import (
    SEED_DOMAIN,
    SplitRows,
    join_units,
    member_of,
    seed_of,
    seed_of_parts,
)
from typestrict_pipeline.refund.types import DecisionKind, Role

__all__ = [
    "SEED_DOMAIN",
    "TEST_CAP",
    "TEST_FRACTION",
    "AnswerSplit",
    "Holdout",
    "HoldoutRecord",
    "HoldoutRow",
    "HoldoutSource",
    "HoldoutSummary",
    "SplitRows",
    "allocate_quotas",
    "check_something_to_train_on",
    "draw_holdout",
    "holdout_seed",
    "join_identical_texts",
    "keep_test_rows",
    "normalize_text",
    "split_dataset",
    "split_decisions",
    "training_ids",
    "training_mask",
]

TEST_FRACTION = Fraction(1, 5)
"""The share of labeled examples held out (20%)."""
TEST_CAP = 2000
"""At most this many test examples per decision."""


def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


class HoldoutSource(enum.StrEnum):
    """Where the test examples' answers come from.

    Attributes:
        LABELED: the dataset's answers (20% of labeled examples).
        REVIEWED: no answers in the data; the examples a person labeled in review.
    """

    LABELED = "labeled"
    REVIEWED = "reviewed"


@dataclass(frozen=True)
class HoldoutRecord:
    """One row as the split sees it.

    Attributes:
        id: unique row id.
        text: the text (part of the seed).
        answer: the stratum answer (right answer, review label, or option position), or None.
        group: the group value, or None (own group).
    """

    id: str
    text: str
    answer: str | None
    group: str | None


@dataclass(frozen=True)
class HoldoutRow:
    """One row of the result.

    Attributes:
        id: the row id.
        role: test, train or excluded.
        answer: its stratum answer, or None.
        group: its group value, or None.
        unit: the key of the group it was drawn with: ``"g\\0" + group`` or ``"r\\0" + id``
            (a row without a group value), or, when identical texts joined several such groups,
            the smallest of their keys. The group bootstrap resamples these.
    """

    id: str
    role: Role
    answer: str | None
    group: str | None
    unit: str = ""


@dataclass(frozen=True)
class AnswerSplit:
    """Counts for one answer.

    Attributes:
        answer: the answer (for multiple choice, the option position "1".."K").
        labeled: rows with this answer (labeled or reviewed, per ``source``).
        share: the exact share aimed at (a fraction: n_a/5, or 2000·n_a/n when capped).
        target: the integer quota (within one of ``share``).
        test / train / excluded: where this answer's rows went.
    """

    answer: str
    labeled: int
    share: Fraction
    target: int
    test: int
    train: int
    excluded: int


@dataclass(frozen=True)
class HoldoutSummary:
    """What the split did, for metadata, the audit and the result page.

    Attributes:
        decision: the decision's name.
        source: labeled or reviewed.
        seed_sha256: the seed, hex.
        n_rows: rows in the dataset.
        n_labeled: stratum rows.
        n_test / n_train / n_excluded: rows per role.
        target_test: the total quota T.
        capped: whether the 2,000 cap applied.
        grouped: whether a group column was used.
        groups_test: distinct group values on the test side.
        groups_train: distinct group values with at least one train row.
        rows_excluded_from_train: rows of test groups that are not test.
        per_answer: counts per answer, in answer order.
        rows_joined_by_text: rows of groups (or single rows) that an identical text (after
            :func:`normalize_text`) joined with another group, so they are drawn together.
        groups_joined_by_text: how many joined groups those rows form.
    """

    decision: str
    source: HoldoutSource
    seed_sha256: str
    n_rows: int
    n_labeled: int
    n_test: int
    n_train: int
    n_excluded: int
    target_test: int
    capped: bool
    grouped: bool
    groups_test: int
    groups_train: int
    rows_excluded_from_train: int
    per_answer: tuple[AnswerSplit, ...]
    rows_joined_by_text: int = 0
    groups_joined_by_text: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (fractions written as ``"num/den"`` strings, exact)."""
        return {
            "decision": self.decision,
            "source": self.source.value,
            "seed_sha256": self.seed_sha256,
            "n_rows": self.n_rows,
            "n_labeled": self.n_labeled,
            "n_test": self.n_test,
            "n_train": self.n_train,
            "n_excluded": self.n_excluded,
            "target_test": self.target_test,
            "test_fraction": [TEST_FRACTION.numerator, TEST_FRACTION.denominator],
            "cap": TEST_CAP,
            "capped": self.capped,
            "grouped": self.grouped,
            "groups_test": self.groups_test,
            "groups_train": self.groups_train,
            "rows_excluded_from_train": self.rows_excluded_from_train,
            "rows_joined_by_text": self.rows_joined_by_text,
            "groups_joined_by_text": self.groups_joined_by_text,
            "per_answer": [
                {
                    "answer": a.answer,
                    "labeled": a.labeled,
                    "share": str(a.share),
                    "target": a.target,
                    "test": a.test,
                    "train": a.train,
                    "excluded": a.excluded,
                }
                for a in self.per_answer
            ],
        }


@dataclass(frozen=True, eq=False)
class Holdout:
    """The split of one decision, held as columns (a Python object only per test row).

    Attributes:
        decision: the decision's name.
        summary: counts and flags.
        roles: each row's role code (0 test, 1 train, 2 excluded), in input order.
        strata: each row's stratum answer as an index into ``answers`` (-1: none).
        answers: the answers in order (for multiple choice, the option positions "1".."K").
        data: the rows' ids, groups and units (shared by a dataset's decisions).
    """

    decision: str
    summary: HoldoutSummary
    roles: npt.NDArray[np.uint8]
    strata: npt.NDArray[np.int16]
    answers: tuple[str, ...]
    data: SplitRows

    def role_mask(self, role: Role) -> npt.NDArray[np.bool_]:
        """True for the rows with ``role``."""
        mask: npt.NDArray[np.bool_] = self.roles == _ROLES.index(role)
        return mask

    def ids(self, role: Role) -> tuple[str, ...]:
        """The ids with ``role``, sorted (a canonical order independent of the file)."""
        chosen = self.data.id_source.take(np.flatnonzero(self.role_mask(role)))
        return tuple(chosen.take(pc.sort_indices(chosen)).to_pylist())

    @functools.cached_property
    def test_ids(self) -> tuple[str, ...]:
        """The test ids, sorted."""
        return self.ids(Role.TEST)

    def row(self, i: int) -> HoldoutRow:
        """Row ``i`` (0-based) as a :class:`HoldoutRow`."""
        return self.rows_at(np.array([i], dtype=np.int64))[0]

    def rows_at(self, positions: npt.NDArray[np.int64]) -> tuple[HoldoutRow, ...]:
        """The rows at ``positions`` (0-based, ascending) as :class:`HoldoutRow` objects, the
        ids and keys they need read at once."""
        rows = np.asarray(positions, dtype=np.int64)
        ids = self.data.ids_at(rows)
        units = self.data.unit_key_texts(self.data.units[rows])
        out = []
        for k, i in enumerate(rows.tolist()):
            code = int(self.strata[i])
            out.append(HoldoutRow(
                id=ids[k],
                role=_ROLES[int(self.roles[i])],
                answer=None if code < 0 else self.answers[code],
                group=self.data.group_at(i),
                unit=units[k],
            ))
        return tuple(out)

    @functools.cached_property
    def test_rows(self) -> tuple[HoldoutRow, ...]:
        """The test rows, in input order."""
        return self.rows_at(np.flatnonzero(self.roles == _TEST))

    @functools.cached_property
    def rows(self) -> tuple[HoldoutRow, ...]:
        """Every row with its role, in input order (a Python object per row: for small data)."""
        return self.rows_at(np.arange(self.data.n, dtype=np.int64))

    def columns(self, head: int | None = None) -> pa.Table:
        """Every row as ``decision, id, group, answer, role`` columns (Arrow, no Python rows);
        with ``head``, the first ``head`` rows only (their ids alone are read)."""
        data = self.data
        n = data.n if head is None else min(head, data.n)
        strata_np, group_codes = self.strata[:n], data.group_codes[:n]
        strata = pa.array(strata_np.astype(np.int32), mask=strata_np < 0)
        codes = pa.array(group_codes, mask=group_codes < 0)
        ids = data.ids if head is None else data.id_source.take(np.arange(n, dtype=np.int64))
        return pa.table({
            "decision": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, dtype=np.int32)), pa.array([self.decision])),
            "id": ids,
            "group": data.group_values.take(codes),
            "answer": pa.array(list(self.answers), pa.large_string()).take(strata),
            "role": pa.array([r.value for r in _ROLES]).take(pa.array(self.roles[:n])),
        })

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Holdout):
            return NotImplemented
        return (
            self.decision == other.decision
            and self.summary == other.summary
            and self.answers == other.answers
            and np.array_equal(self.roles, other.roles)
            and np.array_equal(self.strata, other.strata)
            and _text(self.data.ids).equals(_text(other.data.ids))
            and np.array_equal(self.data.units, other.data.units)
        )

    __hash__ = None  # type: ignore[assignment]


def _text(ids: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """Ids as one chunked large-string column, to compare whatever their chunks and offsets."""
    chunks = ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]
    return pa.chunked_array([c.cast(pa.large_string()) for c in chunks], type=pa.large_string())


def _round_half_up(x: Fraction) -> int:
    return int((x + Fraction(1, 2)).__floor__())


def allocate_quotas(
    counts: Sequence[int], *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> tuple[list[int], list[Fraction], bool]:
    """Per-answer test quotas by the largest-remainder method.

    Args:
        counts: rows per answer, in answer order.
        fraction: the share to hold out (1/5; 1 for the reviewed case).
        cap: the most test rows in all.

    Returns:
        (quotas, exact shares, capped). Each quota is floor or ceil of its share; the total is
        the share total rounded half up.

    >>> allocate_quotas([73, 54, 11])
    ([15, 11, 2], [Fraction(73, 5), Fraction(54, 5), Fraction(11, 5)], False)
    >>> quotas, shares, capped = allocate_quotas([7403, 5405, 1097])  # Rotten Tomatoes: capped
    >>> quotas, capped
    ([1065, 777, 158], True)
    """
    n = sum(counts)
    if n == 0:
        return [0] * len(counts), [Fraction(0)] * len(counts), False
    capped = n * fraction > cap
    scale = Fraction(cap, n) if capped else fraction
    shares = [c * scale for c in counts]
    total = _round_half_up(sum(shares, Fraction(0)))
    quotas = [int(s.__floor__()) for s in shares]
    left = total - sum(quotas)
    order = sorted(range(len(counts)), key=lambda i: (-(shares[i] - quotas[i]), i))
    for i in order[:left]:
        quotas[i] += 1
    return quotas, shares, capped


def _round_half_up_inverse(share: Fraction) -> int:
    """The fewest answered rows for which round-half-up(n · share) ≥ 1."""
    n = 1
    while _round_half_up(n * share) < 1:
        n += 1
    return n



_ROLES = (Role.TEST, Role.TRAIN, Role.EXCLUDED)
_TEST, _TRAIN, _EXCLUDED = 0, 1, 2
_BLOCK = 4096
_DENSE_CELLS = 1 << 28
"""Units × answers up to this (2 GiB of counts) are counted in one dense table, as every split
of a few answers is; beyond it the counts are sparse (:class:`_UnitCounts`): 200,000 rows
without groups over 10,000 answers asked for a dense table of 14.9 GiB and ended in a
MemoryError (and with 200 more columns, a process killed at 23 GB)."""
_BLOCK_CELLS = 1 << 20
"""A sparse table is made dense a block of units at a time, at most this many cells (8 MiB)."""


@dataclass(frozen=True)
class _UnitCounts:
    """Stratum rows per (unit, answer), the units in one order: a dense ``units × answers``
    table, or its non-zero cells (CSR: the unit ``u``'s cells are ``answer[indptr[u]:indptr[u + 1]]``
    with ``count``), handed to the passes a block of units at a time (:meth:`block`). Both give
    the same blocks, so the split does not depend on which is used."""

    n: int
    a: int
    table: npt.NDArray[np.int64] | None = None
    indptr: npt.NDArray[np.int64] | None = None
    answer: npt.NDArray[np.int64] | None = None
    count: npt.NDArray[np.int64] | None = None

    @property
    def block_units(self) -> int:
        return _BLOCK if self.table is not None else max(1, min(_BLOCK, _BLOCK_CELLS // max(self.a, 1)))

    def take(self, order: npt.NDArray[np.int64]) -> _UnitCounts:
        """The units in ``order``."""
        if self.table is not None:
            return _UnitCounts(self.n, self.a, table=self.table[order])
        assert self.indptr is not None and self.answer is not None and self.count is not None
        starts = self.indptr[order]
        lengths = self.indptr[order + 1] - starts
        indptr = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        cells = np.repeat(starts - indptr[:-1], lengths) + np.arange(int(indptr[-1]), dtype=np.int64)
        return _UnitCounts(self.n, self.a, indptr=indptr, answer=self.answer[cells], count=self.count[cells])

    def block(self, pos: int) -> npt.NDArray[np.int64]:
        """The dense counts of the units from ``pos`` on, :attr:`block_units` of them at most."""
        stop = min(pos + self.block_units, self.n)
        if self.table is not None:
            return self.table[pos:stop]
        assert self.indptr is not None and self.answer is not None and self.count is not None
        out = np.zeros((stop - pos, self.a), dtype=np.int64)
        lo, hi = int(self.indptr[pos]), int(self.indptr[stop])
        rows = np.repeat(np.arange(stop - pos), np.diff(self.indptr[pos:stop + 1]))
        out[rows, self.answer[lo:hi]] = self.count[lo:hi]
        return out


def _pass1(counts: _UnitCounts, remaining: npt.NDArray[np.int64]) -> list[int]:
    """Pass 1 over units in rank order: take each whose rows fit what remains of every quota.

    A unit that does not fit now never fits later (quotas only shrink), so blocks of units are
    tested at once. The units that fit are taken together as long as their running sum fits
    too (each of them then fits what the ones before it left, as taken one by one), and only a
    unit that no longer fits restarts the test after it: a test per quota that fills up, not
    per unit taken (2,000 takes restarted a block of 4,096 units 2,000 times, a decision).
    """
    taken: list[int] = []
    left = int(remaining.sum())
    pos, total = 0, counts.n
    while left > 0 and pos < total:
        block = counts.block(pos)
        fits = np.flatnonzero(np.all(block <= remaining, axis=1))
        if fits.size == 0:
            pos += len(block)
            continue
        running = np.cumsum(block[fits], axis=0)
        within = np.all(running <= remaining, axis=1)  # True, then False from the first overflow
        m = int(np.argmin(within)) if not within.all() else len(fits)
        sums = running[:m].sum(axis=1)
        # as one by one: no take once nothing is left (a unit counts at least one row)
        m = min(m, int(np.searchsorted(sums, left, side="left")) + 1)
        taken.extend((pos + fits[:m]).tolist())
        remaining -= running[m - 1]
        left -= int(sums[m - 1])
        pos += int(fits[m - 1]) + 1
    return taken


def _pass2(
    counts: _UnitCounts, remaining: npt.NDArray[np.int64], skip: npt.NDArray[np.bool_],
    fill: Callable[[int], None],
) -> list[int]:
    """Pass 2: the next units (rank order) holding rows of an open answer, topped up by ``fill``."""
    taken: list[int] = []
    pos, total = 0, counts.n
    while remaining.sum() > 0 and pos < total:
        block = counts.block(pos)
        open_ = remaining > 0
        wanted = np.flatnonzero(~skip[pos:pos + len(block)] & np.any(block[:, open_] > 0, axis=1))
        if wanted.size == 0:
            pos += len(block)
            continue
        j = pos + int(wanted[0])
        taken.append(j)
        fill(j)
        pos = j + 1
    return taken


_ROWS = 1 << 20
"""Rows handled at a time by the passes over every row (bounded temporaries)."""


def _spans(n: int) -> Iterable[slice]:
    return (slice(start, min(start + _ROWS, n)) for start in range(0, n, _ROWS))


def _per_unit(data: SplitRows, strata: npt.NDArray[np.int16], a: int) -> tuple[npt.NDArray[np.int64], _UnitCounts]:
    """The units holding stratum rows (ascending) and their stratum rows per answer.

    Group units (codes below the number of groups) are counted with one ``bincount`` over the
    groups; the other units (a row without a group value, and what identical texts joined to
    it) are few in grouped data and sorted. When the dense table would pass
    :data:`_DENSE_CELLS` (counted before it is made), only its non-zero cells are kept."""
    g = len(data.group_values)
    answered = 0
    for span in _spans(data.n):
        answered += int(np.count_nonzero(strata[span] >= 0))
    if (g + answered) * a > _DENSE_CELLS:
        return _per_unit_sparse(data, strata, a)
    per_group = np.zeros(g * a, dtype=np.int64)
    other_units: list[npt.NDArray[Any]] = []
    other_strata: list[npt.NDArray[np.int16]] = []
    for span in _spans(data.n):
        units, codes = data.units[span], strata[span]
        has = codes >= 0
        in_group = has & (units < g)
        if g:
            per_group += np.bincount(units[in_group].astype(np.int64) * a + codes[in_group],
                                     minlength=g * a)
        rest = has & ~in_group
        if rest.any():
            other_units.append(units[rest])
            other_strata.append(codes[rest])
    table = per_group.reshape(g, a)
    group_units = np.flatnonzero(table.sum(axis=1) > 0)
    units_out, counts = [group_units.astype(np.int64)], [table[group_units]]
    if other_units:
        units_o, index = np.unique(np.concatenate(other_units), return_inverse=True)
        strata_o = np.concatenate(other_strata).astype(np.int64)
        units_out.append(units_o.astype(np.int64))
        counts.append(np.bincount(index * a + strata_o, minlength=len(units_o) * a)
                      .reshape(len(units_o), a))
    dense = np.concatenate(counts)
    return np.concatenate(units_out), _UnitCounts(len(dense), a, table=dense)


def _per_unit_sparse(data: SplitRows, strata: npt.NDArray[np.int16],
                     a: int) -> tuple[npt.NDArray[np.int64], _UnitCounts]:
    """:func:`_per_unit`'s counts as the non-zero (unit, answer) cells: memory in proportion
    to the answered rows, whatever the number of answers."""
    keys: list[npt.NDArray[np.int64]] = []
    weights: list[npt.NDArray[np.int64]] = []
    for span in _spans(data.n):
        codes = strata[span]
        has = codes >= 0
        cell = data.units[span][has].astype(np.int64) * a + codes[has]
        found, times = np.unique(cell, return_counts=True)
        keys.append(found)
        weights.append(times.astype(np.int64))
    cells, where = np.unique(np.concatenate(keys), return_inverse=True)
    count = np.bincount(where, weights=np.concatenate(weights), minlength=len(cells)).astype(np.int64)
    unit_of = cells // a
    units, first = np.unique(unit_of, return_index=True)
    indptr = np.append(first, len(cells)).astype(np.int64)
    return units.astype(np.int64), _UnitCounts(len(units), a, indptr=indptr, answer=cells % a, count=count)


def _rows_of_units(
    data: SplitRows, strata: npt.NDArray[np.int16], wanted: npt.NDArray[np.int64]
) -> dict[int, npt.NDArray[np.int64]]:
    """The stratum rows (ascending) of each unit in ``wanted``, in one pass over the rows."""
    found_rows, found_units = [], []
    for span in _spans(data.n):
        units = data.units[span]
        hit = np.flatnonzero(member_of(units, wanted) & (strata[span] >= 0))
        found_rows.append(hit + span.start)
        found_units.append(units[hit])
    rows = np.concatenate(found_rows).astype(np.int64)
    units = np.concatenate(found_units)
    by_unit = np.argsort(units, kind="stable")
    rows, units = rows[by_unit], units[by_unit]
    bounds = np.searchsorted(units, wanted, side="left").tolist()
    ends = np.searchsorted(units, wanted, side="right").tolist()
    return {int(u): rows[b:e] for u, b, e in zip(wanted.tolist(), bounds, ends, strict=True)}


_ID_ROWS = 1 << 16
"""Rows whose ids pass 2 reads at once (one pass over a CSV or JSON Lines file for the next units
instead of one per unit; at least one unit's rows, however many)."""


def _ids_of_units(
    data: SplitRows, rows_of: dict[int, npt.NDArray[np.int64]], ahead: npt.NDArray[Any]
) -> dict[int, pa.Array]:
    """The ids (large binary) of the rows of the first units of ``ahead`` (rank order) that
    hold at most :data:`_ID_ROWS` rows together (always the first), read in one ``take``.

    >>> import pyarrow as pa
    >>> from typestrict_pipeline.refund.sources import MemoryTexts
    >>> class Rows:
    ...     id_source = MemoryTexts(pa.array(["a", "b", "c", "d"], pa.large_string()))
    >>> got = _ids_of_units(Rows(), {7: np.array([1, 3]), 5: np.array([0])}, np.array([7, 5]))
    >>> {u: ids.to_pylist() for u, ids in got.items()}
    {7: [b'b', b'd'], 5: [b'a']}
    """
    units: list[int] = []
    parts: list[npt.NDArray[np.int64]] = []
    held = 0
    for unit in ahead.tolist():
        rows = rows_of[int(unit)]
        if units and held + len(rows) > _ID_ROWS:
            break
        units.append(int(unit))
        parts.append(rows)
        held += len(rows)
    rows = np.concatenate(parts)
    ascending = np.argsort(rows, kind="stable")  # a unit's rows are its own: no row twice
    read = data.id_source.take(rows[ascending]).cast(pa.large_binary())
    ids = read.take(pa.array(np.argsort(ascending, kind="stable")))
    out: dict[int, pa.Array] = {}
    start = 0
    for unit, part in zip(units, parts, strict=True):
        out[unit] = ids.slice(start, len(part))
        start += len(part)
    return out


def _draw(
    data: SplitRows,
    strata: npt.NDArray[np.int16],
    answers: Sequence[str],
    seed: bytes,
    *,
    decision: str,
    source: HoldoutSource,
    fraction: Fraction,
    cap: int,
) -> Holdout:
    """One decision's split over prepared rows (the algorithm of the module doc).

    Memory beyond the rows' arrays: a few bytes a row (masks and roles), the units' counts and
    ranks; every pass over all rows goes a million rows at a time."""
    n, a = data.n, len(answers)
    counts = np.zeros(a, dtype=np.int64)
    for span in _spans(n):
        codes = strata[span]
        counts += np.bincount(codes[codes >= 0], minlength=a)
    n_labeled = int(counts.sum())
    share_of = fraction if source is HoldoutSource.LABELED else Fraction(1)
    quotas, shares, capped = allocate_quotas(counts.tolist(), fraction=share_of, cap=cap)
    if sum(quotas) == 0:
        which = "labeled" if source is HoldoutSource.LABELED else "reviewed"
        need = _round_half_up_inverse(share_of)
        raise NotEnoughDataError(
            f"expected enough {which} examples of decision {decision!r} to hold out at least one "
            f"test example (at least {need}), got {n_labeled}. Label more examples before training."
        )

    # Units with answered rows, in hash order, and their answered rows per answer.
    units, per_unit = _per_unit(data, strata, a)
    prefix = pa.scalar(seed + b"group\0", pa.large_binary())
    keys = data.unit_keys(units)
    ranks = sha256_each(pc.binary_join_element_wise(prefix, keys, pa.scalar(b"", pa.large_binary())))
    del keys
    order = order_by_digest(ranks)
    del ranks
    ranked = per_unit.take(order)

    # The test rows are at most the quotas' total: kept as row numbers, not a mask of every row.
    remaining = np.array(quotas, dtype=np.int64)
    first = _pass1(ranked, remaining)
    taken = np.zeros(len(units), dtype=bool)
    taken[order[first]] = True
    rows_of = _rows_of_units(data, strata, np.sort(units[order[first]]))
    selected = list(rows_of.values())
    if remaining.sum() > 0:
        skip = taken[order]
        row_prefix = pa.scalar(seed + b"row\0", pa.large_binary())

        ids_of: dict[int, pa.Array] = {}

        def fill(j: int) -> None:
            u = int(order[j])
            if int(units[u]) not in ids_of:  # the next units that may be taken: rows, then ids in one read
                ahead = units[order[j:][~skip[j:]][:512]]
                unseen = np.array([x for x in ahead.tolist() if x not in rows_of], dtype=ahead.dtype)
                if len(unseen):  # a read of ids stopped short of the 512: their rows are known
                    rows_of.update(_rows_of_units(data, strata, np.sort(unseen)))
                ids_of.update(_ids_of_units(data, rows_of, ahead))
            taken[u] = True
            rows = rows_of[int(units[u])]
            ids = ids_of.pop(int(units[u]))
            row_strata = strata[rows]
            if not any(remaining[ai] > 0 and np.any(row_strata == ai) for ai in range(a)):
                return
            for ai in range(a):
                mine = row_strata == ai
                take = min(int(np.count_nonzero(mine)), int(remaining[ai]))
                if take == 0:
                    continue
                digests = sha256_each(pc.binary_join_element_wise(
                    row_prefix, ids.filter(pa.array(mine)), pa.scalar(b"", pa.large_binary())))
                selected.append(rows[mine][order_by_digest(digests)[:take]])
                remaining[ai] -= take

        _pass2(ranked, remaining, skip, fill)

    chosen = np.unique(np.concatenate(selected)) if selected else np.zeros(0, np.int64)
    test_units = np.unique(units[taken])
    roles = np.empty(n, dtype=np.uint8)
    flat = np.zeros(a * 3, dtype=np.int64)
    groups = data.group_codes
    g = len(data.group_values)
    train_groups = np.zeros(g, dtype=bool)
    test_parts: list[npt.NDArray[np.int64]] = []
    n_train = 0
    for span in _spans(n):
        codes, row_groups = strata[span], groups[span]
        answered = codes >= 0
        in_test = member_of(data.units[span], test_units)
        row_roles = np.full(len(codes), _EXCLUDED, dtype=np.uint8)
        trains = ~in_test
        if source is not HoldoutSource.REVIEWED:
            trains &= answered
        row_roles[trains] = _TRAIN
        lo, hi = np.searchsorted(chosen, [span.start, span.stop])
        row_roles[chosen[lo:hi] - span.start] = _TEST  # every chosen row is in a test unit
        roles[span] = row_roles
        test_parts.append(np.flatnonzero(in_test) + span.start)
        n_train += int(np.count_nonzero(row_roles == _TRAIN))
        flat += np.bincount(codes[answered].astype(np.int64) * 3 + row_roles[answered],
                            minlength=a * 3)
        train_groups[row_groups[(row_roles == _TRAIN) & (row_groups >= 0)]] = True
    per = flat.reshape(a, 3)
    test_rows = np.concatenate(test_parts) if test_parts else np.zeros(0, np.int64)
    n_test = int(chosen.size)
    summary = HoldoutSummary(
        decision=decision,
        source=source,
        seed_sha256=seed.hex(),
        n_rows=n,
        n_labeled=n_labeled,
        n_test=n_test,
        n_train=n_train,
        n_excluded=n - n_test - n_train,
        target_test=sum(quotas),
        capped=capped,
        grouped=data.grouped,
        groups_test=int(np.unique(groups[test_rows][groups[test_rows] >= 0]).size),
        groups_train=int(np.count_nonzero(train_groups)),
        rows_excluded_from_train=int(test_rows.size) - n_test,
        per_answer=tuple(
            AnswerSplit(answer=name, labeled=int(counts[i]), share=shares[i], target=quotas[i],
                        test=int(per[i, 0]), train=int(per[i, 1]), excluded=int(per[i, 2]))
            for i, name in enumerate(answers)
        ),
        rows_joined_by_text=data.rows_joined_by_text,
        groups_joined_by_text=data.groups_joined_by_text,
    )
    return Holdout(decision=decision, summary=summary, roles=roles, strata=strata,
                   answers=tuple(answers), data=data)


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """One decision's stratum: codes into ``answers``, and where they come from."""

    name: str
    source: HoldoutSource
    strata: npt.NDArray[np.int16]
    answers: tuple[str, ...]


def _plan(labels: DecisionLabels) -> _Plan:
    source = HoldoutSource.LABELED if labels.n_labeled else HoldoutSource.REVIEWED
    codes = labels.label_codes if source is HoldoutSource.LABELED else labels.review_codes
    if labels.spec.kind is DecisionKind.MULTIPLE_CHOICE:
        answers = tuple(str(k) for k in range(1, labels.max_options + 1))
    else:
        answers = tuple(labels.spec.answers)
    return _Plan(labels.name, source, codes, answers)


def _strings(values: Sequence[str], codes: npt.NDArray[Any]) -> pa.Array:
    return pa.array(list(values), pa.large_string()).take(
        pa.array(codes.astype(np.int64), mask=codes < 0)
    )


def _prepare(
    ids: TextSource,
    group_codes: npt.NDArray[np.int32],
    group_values: pa.Array,
    grouped: bool,
    texts: TextSource,
    plans: Sequence[_Plan],
) -> tuple[SplitRows, list[bytes]]:
    """One pass over the texts: every plan's seed, and every row's unit (identical texts joined).

    The text keys and the digests go to ``refund.spill.Buckets`` (on disk past a bound)."""
    n = len(ids)
    keys = Buckets(16)
    digests = [Buckets(32) for _ in plans]
    id_batches = ids.batches()
    pending: list[pa.Array] = []
    try:
        start = 0
        for batch in texts.batches():
            m = len(batch)
            if start + m > n:
                break
            part = slice(start, start + m)
            keys.add(key_records(text_keys(batch), start))
            batch_ids = aligned(id_batches, m, pending)
            batch_groups = _strings_or_null(group_values, group_codes[part])
            for plan, out in zip(plans, digests, strict=True):
                out.add(row_digests(batch_ids, batch, _strings(plan.answers, plan.strata[part]),
                                    batch_groups))
            start += m
        if start != n:
            raise DatasetError(
                f"{n} rows, as when the dataset was validated", f"{start} rows",
                "run the verdict again on the file as it is now",
            )
        shared = shared_key_rows_of(keys.parts())
        keys.close()
        data = join_units(ids, group_codes, group_values, grouped, shared, texts.at)
        return data, [seed_of_parts(d.parts(), p.name, p.source.value)
                      for p, d in zip(plans, digests, strict=True)]
    finally:
        for buckets in (keys, *digests):
            buckets.close()


def _strings_or_null(values: pa.Array, codes: npt.NDArray[np.int32]) -> pa.Array:
    if not len(values):
        return pa.nulls(len(codes), pa.large_string())
    return values.cast(pa.large_string()).take(pa.array(codes.astype(np.int64), mask=codes < 0))


def split_decisions(
    dataset: Dataset, *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> tuple[Holdout, ...]:
    """Split every decision of the dataset, each with its own seed, in manifest order.

    The texts are read once for all decisions (the seed digests and the identical-text join).
    """
    plans = [_plan(labels) for labels in dataset.decisions]
    data, seeds = _rows_and_seeds(dataset, plans)
    return tuple(
        _draw(data, p.strata, p.answers, s, decision=p.name, source=p.source, fraction=fraction,
              cap=cap)
        for p, s in zip(plans, seeds, strict=True)
    )


def keep_test_rows(dataset: Dataset, holdouts: Sequence[Holdout]) -> None:
    """Within a run's shared reads (``refund.runreads``), read the ids and texts of every
    decision's test rows at once (one take of each column), so the steps after the split find
    them kept: a column too large to keep whole is then read once for all decisions, not once
    per decision and step. Outside a run's shared reads, nothing is read."""
    if active_cache() is None or not holdouts:
        return
    rows = np.unique(np.concatenate([np.flatnonzero(h.roles == _TEST) for h in holdouts]))
    if 0 < len(rows) <= KEEP_ROWS:
        dataset.id_source.take(rows)
        dataset.texts.take(rows)


def _rows_and_seeds(dataset: Dataset, plans: Sequence[_Plan]) -> tuple[SplitRows, list[bytes]]:
    """The units and seeds the load computed; the texts are streamed again only for a decision
    whose test comes from review labels (the load hashed the right answers)."""
    ready = dataset.prepared
    if ready is not None and all(
        p.source is HoldoutSource.LABELED and p.name in ready.labeled_seeds for p in plans
    ):
        return ready.rows, [ready.labeled_seeds[p.name] for p in plans]
    codes = dataset.group_codes
    group_codes = codes if codes is not None else np.full(dataset.n_rows, -1, dtype=np.int32)
    return _prepare(dataset.id_source, group_codes, dataset.group_values,
                    dataset.columns.group is not None, dataset.texts, plans)


def split_dataset(
    dataset: Dataset, decision: str, *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> Holdout:
    """Split one decision of a validated dataset.

    Uses the right answers when the decision has any labeled example, else the review labels.
    For multiple choice the stratum is the right option's position ("1".."K").

    Raises:
        NotEnoughDataError: too few examples to hold out any test.
    """
    plan = _plan(dataset.decision(decision))
    data, (seed,) = _rows_and_seeds(dataset, [plan])
    return _draw(data, plan.strata, plan.answers, seed, decision=plan.name, source=plan.source,
                 fraction=fraction, cap=cap)


def _record_columns(
    records: Sequence[HoldoutRecord],
) -> tuple[MemoryTexts, npt.NDArray[np.int32], pa.Array, MemoryTexts]:
    seen: set[str] = set()
    for r in records:
        if r.id in seen:
            raise DatasetError("unique ids", f"{r.id!r} twice", "make the ids unique", column="id")
        seen.add(r.id)
    ids = MemoryTexts(pa.array([r.id for r in records], pa.large_string()))
    encoded = pc.dictionary_encode(pa.array([r.group for r in records], pa.large_string()))
    codes = np.asarray(pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False),
                       dtype=np.int32)
    texts = MemoryTexts(pa.array([r.text if isinstance(r.text, str) else None for r in records],
                                 pa.large_string()))
    return ids, codes, encoded.dictionary, texts


def draw_holdout(
    records: Sequence[HoldoutRecord],
    *,
    decision: str,
    source: HoldoutSource = HoldoutSource.LABELED,
    answer_order: Sequence[str] | None = None,
    grouped: bool | None = None,
    fraction: Fraction = TEST_FRACTION,
    cap: int = TEST_CAP,
) -> Holdout:
    """Split one decision's rows (records in memory) into test, train and excluded.

    Args:
        records: every row of the dataset.
        decision: the decision's name (part of the seed).
        source: LABELED (hold out ``fraction`` of the answered rows) or REVIEWED (every
            answered row is test, up to ``cap``; unanswered rows outside test groups are train).
        answer_order: the answers in display/tie-break order (default: sorted); answers present
            in the data but not listed are an error.
        grouped: whether the data has a group column (default: any record has a group).
        fraction: the held-out share for LABELED (default 1/5).
        cap: the most test rows (default 2,000).

    Raises:
        DatasetError: duplicate ids, or an answer not in ``answer_order``.
        NotEnoughDataError: too few answered rows to hold out even one test example.
    """
    ids, group_codes, group_values, texts = _record_columns(records)
    present = {r.answer for r in records if r.answer is not None}
    answers = list(answer_order) if answer_order is not None else sorted(present)
    unknown = sorted(present - set(answers))
    if unknown:
        raise DatasetError(
            f"answers among {answers}", f"{unknown}", "list every answer of the decision",
            column="answer",
        )
    index = {a: i for i, a in enumerate(answers)}
    strata = np.array([-1 if r.answer is None else index[r.answer] for r in records],
                      dtype=np.int16)
    is_grouped = any(r.group is not None for r in records) if grouped is None else grouped
    plan = _Plan(decision, source, strata, tuple(answers))
    if all(isinstance(r.text, str) for r in records):
        data, (seed,) = _prepare(ids, group_codes, group_values, is_grouped, texts, [plan])
    else:  # a missing text (NaN from a frame): encoded as json does, joins nothing
        encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        digests = np.frombuffer(b"".join(
            hashlib.sha256(encode([r.id, r.text, r.answer, r.group]).encode("utf-8")).digest()
            for r in records), dtype=np.uint8).reshape(len(records), 32)
        keys = text_keys(texts.texts)
        missing = np.array([not isinstance(r.text, str) for r in records])
        data = join_units(ids, group_codes, group_values, is_grouped,
                          shared_key_rows(keys, missing), texts.at)
        seed = seed_of(digests, decision, source.value)
    return _draw(data, strata, answers, seed, decision=decision, source=source,
                 fraction=fraction, cap=cap)


def holdout_seed(
    records: Iterable[HoldoutRecord], *, decision: str, source: HoldoutSource
) -> bytes:
    """The split's seed: SHA-256 over the sorted row contents, the decision and the source.

    Args:
        records: every row (id, text, answer, group).
        decision: the decision's name (each decision gets its own draw).
        source: labeled or reviewed.

    Returns:
        32 bytes.

    >>> a = [HoldoutRecord("1", "x", "yes", None), HoldoutRecord("2", "y", "no", None)]
    >>> holdout_seed(a, decision="d", source=HoldoutSource.LABELED) == holdout_seed(
    ...     a[::-1], decision="d", source=HoldoutSource.LABELED)
    True
    """
    rows = list(records)
    digests = row_digests(
        pa.array([r.id for r in rows], pa.large_string()),
        pa.array([r.text for r in rows], pa.large_string()),
        pa.array([r.answer for r in rows], pa.large_string()),
        pa.array([r.group for r in rows], pa.large_string()),
    )
    return seed_of(digests, decision, source.value)


def join_identical_texts(
    records: Sequence[HoldoutRecord],
) -> tuple[list[str], int, int]:
    r"""Each row's group key after joining groups that share a text.

    A row's own key is ``"g\0" + group``, or ``"r\0" + id`` without a group value. Rows whose
    texts are equal after :func:`normalize_text` put their groups together; a joined group's
    key is the smallest of its members' keys (so the result does not depend on row order).

    Returns:
        (each row's key, rows in joined groups, joined groups).

    >>> recs = [HoldoutRecord("1", "Hi", "a", "x"), HoldoutRecord("2", "hi ", "a", "y"),
    ...         HoldoutRecord("3", "other", "a", "y"), HoldoutRecord("4", "new", "a", None)]
    >>> keys, rows, groups = join_identical_texts(recs)
    >>> keys == ["g\0x"] * 3 + ["r\x004"], rows, groups
    (True, 3, 1)
    """
    ids, group_codes, group_values, texts = _record_columns(records)
    keys = np.concatenate([text_keys(b) for b in texts.batches()]) if records else \
        np.zeros(0, np.uint64)
    data = join_units(ids, group_codes, group_values, True, shared_key_rows(keys), texts.at)
    return (data.unit_key_texts(data.units), data.rows_joined_by_text,
            data.groups_joined_by_text)


def training_mask(holdouts: Sequence[Holdout]) -> npt.NDArray[np.bool_]:
    """True for the rows a (multi-task) model may train on: ``train`` in every decision's split."""
    if not holdouts:
        return np.zeros(0, dtype=bool)
    mask = holdouts[0].role_mask(Role.TRAIN)
    for h in holdouts[1:]:
        mask = mask & h.role_mask(Role.TRAIN)
    return mask


def training_ids(holdouts: Sequence[Holdout]) -> frozenset[str]:
    """The ids a (multi-task) model may train on: ``train`` in every decision's split.

    A row that is test (or excluded) for one decision must not be trained on for another, or
    the model would see a text it is measured on.

    >>> h = draw_holdout([HoldoutRecord(str(i), f"t{i}", "a" if i % 2 else "b", None)
    ...                   for i in range(10)], decision="d")
    >>> len(training_ids([h]))
    8
    """
    if not holdouts:
        return frozenset()
    mask = training_mask(holdouts)
    return frozenset(holdouts[0].data.ids_at(np.flatnonzero(mask)))


def check_something_to_train_on(
    dataset: Dataset, *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> None:
    """Refuse a dataset whose split would leave no example to train on: every row held out
    (test, or excluded with a test group) in some decision's split, so only a refund could
    follow. Exactly :func:`training_mask` of :func:`split_decisions` being empty, decided
    without drawing the split when the answer is certain (the usual case):

    A row may be trained on when, in every decision, its unit (its group, joined with every
    group an identical text reaches) is not a test unit and, for a decision tested on its
    answers, it has one. Each test unit holds at least one test row (pass 1 takes a unit
    whole; pass 2 takes one only to fill an open quota), so a decision has at most as many test
    units as its quotas' total. When more units hold a row answered in every such decision than
    all decisions' quotas together, one of them is a test unit of none: something remains to
    train on, and nothing more is computed. Otherwise the split is drawn and looked at.

    Raises:
        DatasetError: nothing would remain to train on, naming the file and the column (the
            group column, the text column) and what to do.

    >>> from typestrict_pipeline.refund.dataset import validate_dataset
    >>> from typestrict_pipeline.refund.manifest import parse_manifest
    >>> m = parse_manifest({"manifest_version": 1, "training_id": "t", "workspace_id": "w",
    ...     "dataset": {"path": "data.csv",
    ...                 "columns": {"id": "id", "text": "text", "group": "customer"}},
    ...     "decisions": [{"name": "s", "question": "q?", "answer_column": "label",
    ...                    "answers": ["a", "b"]}],
    ...     "predictions": {"jev": {"kind": "file", "path": "j.jsonl"}},
    ...     "training": {"status": "failed", "reason": "out of memory"}})
    >>> one = validate_dataset({"id": [str(i) for i in range(10)],
    ...     "text": [f"t{i}" for i in range(10)], "label": ["a", "b"] * 5,
    ...     "customer": ["acme"] * 10}, m)
    >>> check_something_to_train_on(one)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.DatasetError: data.csv, column 'customer': expected at least 2 groups so some examples remain to train on, got 1 ('acme'): the test takes whole groups, so all 10 rows would be held out. Add examples of other groups, or declare no group column if the rows do not depend on each other.
    """
    plans = [_plan(labels) for labels in dataset.decisions]
    if not plans:
        return
    rows = dataset.prepared.rows if dataset.prepared is not None else _rows_and_seeds(dataset, plans)[0]
    units = rows.units
    candidate = np.ones(len(units), dtype=bool)
    for plan in plans:
        if plan.source is HoldoutSource.LABELED:
            candidate &= plan.strata >= 0
    totals = []
    for plan in plans:
        answered = plan.strata[plan.strata >= 0].astype(np.int64)
        quotas, _, _ = allocate_quotas(
            np.bincount(answered, minlength=len(plan.answers)).tolist(),
            fraction=fraction if plan.source is HoldoutSource.LABELED else Fraction(1), cap=cap)
        totals.append(sum(quotas))
    if min(totals) == 0:
        return  # too few answers to hold out any test: the split says so when it is read
    most_test_units = sum(totals)
    present = np.zeros(int(units.max()) + 1 if len(units) else 0, dtype=bool)
    present[units[candidate]] = True  # a mask, not np.unique (its hash path: 2.4 s at 1M rows)
    kept = int(np.count_nonzero(present))
    if kept > most_test_units:
        return
    if kept == 0:  # no row answered in every decision tested on its answers
        raise _nothing_to_train_on(dataset, plans, rows, candidate, kept)
    if kept == 1:
        only = int(np.flatnonzero(present)[0])
        if any(bool(np.all(units[plan.strata >= 0] == only)) for plan in plans):
            # One unit holds every row that could be trained on and every answered row of a
            # decision: for that decision it never fits pass 1 (its answers are more than their
            # quotas) and pass 2 takes it, or (review labels) pass 1 takes it whole; so it is
            # held out, and with it everything. No draw needed (with one group of 1,000,000
            # rows the draw takes seconds). With several decisions whose answered rows differ,
            # the unit may stay out of every test: the split is drawn below.
            raise _nothing_to_train_on(dataset, plans, rows, candidate, kept)
    try:
        holdouts = split_decisions(dataset, fraction=fraction, cap=cap)
    except NotEnoughDataError:
        return  # too few answers to hold out any test: the split says so when it is read
    if training_mask(holdouts).any():
        return
    raise _nothing_to_train_on(dataset, plans, rows, candidate, kept)


def _nothing_to_train_on(dataset: Dataset, plans: Sequence[_Plan], rows: SplitRows,
                         candidate: npt.NDArray[np.bool_], units: int) -> DatasetError:
    """Why the split leaves nothing to train on, in the house's words."""
    n = dataset.n_rows
    group, text = dataset.columns.group, dataset.columns.text
    file = dataset.path
    if units == 0:
        names = ", ".join(repr(p.name) for p in plans if p.source is HoldoutSource.LABELED)
        return DatasetError(
            f"at least one row with an answer for every decision ({names}) so some examples "
            "remain to train on", "none: a model of several decisions trains only on rows that "
            "are train in every decision's split",
            "label some rows for every decision, or train the decisions separately", file=file)
    codes = rows.group_codes
    if group is not None and codes.size and bool(np.all(codes >= 0)) and bool(np.all(codes == codes[0])):
        value = rows.group_at(0)
        return DatasetError(
            "at least 2 groups so some examples remain to train on",
            f"1 ({(value or '')[:80]!r}): the test takes whole groups, so all {n:,} rows would be "
            "held out",
            "add examples of other groups, or declare no group column if the rows do not depend "
            "on each other", file=file, column=group)
    if bool(np.all(rows.units == rows.units[0])):
        joined = (f"; identical texts join their groups, so every group of column {group!r} is "
                  "one" if group is not None else "")
        return DatasetError(
            "at least 2 distinct texts so some examples remain to train on",
            f"1: identical texts (compared after normalising Unicode, case and spacing) are held "
            f"out together, so all {n:,} rows would be held out{joined}",
            "add examples with other texts", file=file, column=text)
    where = (f"whole groups of column {group!r} and identical texts together" if group is not None
             else "identical texts together")
    several = (f" answered in every decision ({', '.join(repr(p.name) for p in plans)})"
               if len(plans) > 1 else " with answers")
    return DatasetError(
        "a split that leaves some examples to train on",
        f"all {n:,} rows held out: the test takes 20% of each answer's examples ({where}), and "
        f"each of the {units:,} units{several} is needed for a test",
        "add examples (of more groups, with other texts) for every answer",
        file=file, column=group if group is not None else text)

