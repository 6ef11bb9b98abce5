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

>>> rows = [HoldoutRecord(id=str(i), text=f"t{i}", answer="yes" if i % 4 else "no", group=None)
...         for i in range(20)]
>>> h = draw_holdout(rows, decision="d")
>>> h.summary.n_test, [(a.answer, a.labeled, a.test) for a in h.summary.per_answer]
(4, [('no', 5, 1), ('yes', 15, 3)])
"""

from __future__ import annotations

import enum
import hashlib
import json
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from typestrict_pipeline.errors import DatasetError, NotEnoughDataError
from typestrict_pipeline.refund.dataset import Dataset
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
    "allocate_quotas",
    "draw_holdout",
    "holdout_seed",
    "join_identical_texts",
    "normalize_text",
    "split_dataset",
    "split_decisions",
    "training_ids",
]

TEST_FRACTION = Fraction(1, 5)
"""The share of labeled examples held out (20%)."""
TEST_CAP = 2000
"""At most this many test examples per decision."""
SEED_DOMAIN = b"typestrict-holdout-v1\0"
"""Domain-separation prefix of the holdout seed (bump the version if the algorithm changes)."""


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


@dataclass(frozen=True)
class Holdout:
    """The split of one decision.

    Attributes:
        decision: the decision's name.
        rows: every row with its role, in the input order.
        summary: counts and flags.
    """

    decision: str
    rows: tuple[HoldoutRow, ...]
    summary: HoldoutSummary

    def ids(self, role: Role) -> tuple[str, ...]:
        """The ids with ``role``, sorted (a canonical order independent of the file)."""
        return tuple(sorted(r.id for r in self.rows if r.role is role))

    @property
    def test_ids(self) -> tuple[str, ...]:
        """The test ids, sorted."""
        return self.ids(Role.TEST)


_ROW_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Encodes a row exactly as ``json.dumps([id, text, answer, group], ensure_ascii=False,
separators=(",", ":"))`` does (one encoder, built once)."""


def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


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
    encode = _ROW_ENCODER.encode
    sha = hashlib.sha256
    digests = sorted(
        sha(encode([r.id, r.text, r.answer, r.group]).encode("utf-8")).digest() for r in records
    )
    return _digest(
        SEED_DOMAIN,
        decision.encode("utf-8"),
        b"\0",
        source.value.encode("ascii"),
        b"\0",
        b"".join(digests),
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


def join_identical_texts(
    records: Sequence[HoldoutRecord],
) -> tuple[list[str], int, int]:
    r"""Each row's group key after joining groups that share a text (union-find).

    A row's own key is ``"g\0" + group``, or ``"r\0" + id`` without a group value. Rows whose
    texts are equal after :func:`normalize_text` put their groups together; a joined group's
    key is the smallest of its members' keys (so the result does not depend on row order).

    Args:
        records: every row.

    Returns:
        (each row's key, rows in joined groups, joined groups).

    >>> recs = [HoldoutRecord("1", "Hi", "a", "x"), HoldoutRecord("2", "hi ", "a", "y"),
    ...         HoldoutRecord("3", "other", "a", "y"), HoldoutRecord("4", "new", "a", None)]
    >>> keys, rows, groups = join_identical_texts(recs)
    >>> keys == ["g\0x"] * 3 + ["r\x004"], rows, groups
    (True, 3, 1)
    """
    own = [("g\0" + r.group) if r.group is not None else ("r\0" + r.id) for r in records]
    parent: dict[str, str] = {k: k for k in own}

    def find(key: str) -> str:
        root = key
        while parent[root] != root:
            root = parent[root]
        while parent[key] != root:
            parent[key], key = root, parent[key]
        return root

    first_with_text: dict[str, str] = {}
    for r, key in zip(records, own, strict=True):
        text: object = r.text
        if not isinstance(text, str):  # a missing text (NaN from a frame) joins nothing
            continue
        other = first_with_text.setdefault(normalize_text(text), key)
        a, b = find(key), find(other)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the smaller key stays the root
    keys = [find(k) for k in own]
    members: dict[str, set[str]] = {}
    for key, root in zip(own, keys, strict=True):
        members.setdefault(root, set()).add(key)
    joined = {root for root, m in members.items() if len(m) > 1}
    return keys, sum(1 for root in keys if root in joined), len(joined)


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
    """Split one decision's rows into test, train and excluded (algorithm in the module doc).

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

    Returns:
        The :class:`Holdout`.

    Raises:
        DatasetError: duplicate ids, or an answer not in ``answer_order``.
        NotEnoughDataError: too few answered rows to hold out even one test example.
    """
    seen: set[str] = set()
    for r in records:
        if r.id in seen:
            raise DatasetError("unique ids", f"{r.id!r} twice", "make the ids unique", column="id")
        seen.add(r.id)
    present = {r.answer for r in records if r.answer is not None}
    answers = list(answer_order) if answer_order is not None else sorted(present)
    unknown = sorted(present - set(answers))
    if unknown:
        raise DatasetError(
            f"answers among {answers}",
            f"{unknown}",
            "list every answer of the decision",
            column="answer",
        )
    index = {a: i for i, a in enumerate(answers)}
    counts = [0] * len(answers)
    for r in records:
        if r.answer is not None:
            counts[index[r.answer]] += 1
    n_labeled = sum(counts)
    share_of = fraction if source is HoldoutSource.LABELED else Fraction(1)
    quotas, shares, capped = allocate_quotas(counts, fraction=share_of, cap=cap)
    if sum(quotas) == 0:
        which = "labeled" if source is HoldoutSource.LABELED else "reviewed"
        need = _round_half_up_inverse(share_of)
        raise NotEnoughDataError(
            f"expected enough {which} examples of decision {decision!r} to hold out at least one "
            f"test example (at least {need}), got {n_labeled}. Label more examples before training."
        )
    seed = holdout_seed(records, decision=decision, source=source)
    is_grouped = any(r.group is not None for r in records) if grouped is None else grouped

    # Groups (identical texts joined): key -> row positions; stratum counts per group.
    unit_of, rows_joined, groups_joined = join_identical_texts(records)
    group_rows: dict[str, list[int]] = {}
    for pos, key in enumerate(unit_of):
        group_rows.setdefault(key, []).append(pos)
    group_prefix = hashlib.sha256(seed + b"group\0")

    def group_rank(key: str) -> bytes:  # == sha256(seed + b"group\0" + key)
        h = group_prefix.copy()
        h.update(key.encode("utf-8"))
        return h.digest()

    order = sorted(group_rows, key=group_rank)

    remaining = list(quotas)
    open_total = sum(remaining)
    test_groups: set[str] = set()
    selected: set[int] = set()

    counts_of: dict[str, dict[int, int]] = {}
    for key, positions in group_rows.items():
        out: dict[int, int] = {}
        for pos in positions:
            stratum = records[pos].answer
            if stratum is not None:
                si = index[stratum]
                out[si] = out.get(si, 0) + 1
        counts_of[key] = out

    # Pass 1: whole groups that fit.
    for key in order:
        if open_total == 0:
            break
        gc = counts_of[key]
        if not gc or any(c > remaining[a] for a, c in gc.items()):
            continue
        test_groups.add(key)
        for a, c in gc.items():
            remaining[a] -= c
            open_total -= c
        selected.update(pos for pos in group_rows[key] if records[pos].answer is not None)

    # Pass 2: top up open quotas with the next groups; surplus rows of those groups are excluded.
    if open_total:
        for key in order:
            if open_total == 0:
                break
            if key in test_groups:
                continue
            gc = counts_of[key]
            if not any(remaining[ai] > 0 for ai in gc):
                continue
            test_groups.add(key)
            by_answer: dict[int, list[int]] = {}
            for pos in group_rows[key]:
                label = records[pos].answer
                if label is not None:
                    by_answer.setdefault(index[label], []).append(pos)
            for ai, positions in by_answer.items():
                positions.sort(key=lambda p: _digest(seed, b"row\0", records[p].id.encode("utf-8")))
                take = min(len(positions), remaining[ai])
                selected.update(positions[:take])
                remaining[ai] -= take
                open_total -= take

    in_test_group = set()
    for key in test_groups:
        in_test_group.update(group_rows[key])

    rows: list[HoldoutRow] = []
    per = [[0, 0, 0] for _ in answers]  # test, train, excluded
    role_index = {Role.TEST: 0, Role.TRAIN: 1, Role.EXCLUDED: 2}
    excluded_from_train = 0
    groups_train: set[str] = set()
    groups_test: set[str] = set()
    for pos, r in enumerate(records):
        if pos in in_test_group:
            role = Role.TEST if pos in selected else Role.EXCLUDED
            if role is Role.EXCLUDED:
                excluded_from_train += 1
            if r.group is not None:
                groups_test.add(r.group)
        elif r.answer is not None or source is HoldoutSource.REVIEWED:
            role = Role.TRAIN
            if r.group is not None:
                groups_train.add(r.group)
        else:
            role = Role.EXCLUDED
        if r.answer is not None:
            per[index[r.answer]][role_index[role]] += 1
        rows.append(HoldoutRow(id=r.id, role=role, answer=r.answer, group=r.group, unit=unit_of[pos]))

    n_test = sum(1 for row in rows if row.role is Role.TEST)
    n_train = sum(1 for row in rows if row.role is Role.TRAIN)
    summary = HoldoutSummary(
        decision=decision,
        source=source,
        seed_sha256=seed.hex(),
        n_rows=len(records),
        n_labeled=n_labeled,
        n_test=n_test,
        n_train=n_train,
        n_excluded=len(records) - n_test - n_train,
        target_test=sum(quotas),
        capped=capped,
        grouped=is_grouped,
        groups_test=len(groups_test),
        groups_train=len(groups_train),
        rows_excluded_from_train=excluded_from_train,
        per_answer=tuple(
            AnswerSplit(
                answer=a,
                labeled=counts[i],
                share=shares[i],
                target=quotas[i],
                test=per[i][0],
                train=per[i][1],
                excluded=per[i][2],
            )
            for i, a in enumerate(answers)
        ),
        rows_joined_by_text=rows_joined,
        groups_joined_by_text=groups_joined,
    )
    return Holdout(decision=decision, rows=tuple(rows), summary=summary)


def _round_half_up_inverse(share: Fraction) -> int:
    """The fewest answered rows for which round-half-up(n · share) ≥ 1."""
    n = 1
    while _round_half_up(n * share) < 1:
        n += 1
    return n


def split_dataset(
    dataset: Dataset, decision: str, *, fraction: Fraction = TEST_FRACTION, cap: int = TEST_CAP
) -> Holdout:
    """Split one decision of a validated dataset.

    Uses the right answers when the decision has any labeled example, else the review labels.
    For multiple choice the stratum is the right option's position ("1".."K").

    Args:
        dataset: the validated dataset.
        decision: the decision's name.
        fraction: held-out share (default 1/5).
        cap: the most test rows (default 2,000).

    Returns:
        The :class:`Holdout`.

    Raises:
        NotEnoughDataError: too few examples to hold out any test.
    """
    labels = dataset.decision(decision)
    source = HoldoutSource.LABELED if labels.n_labeled else HoldoutSource.REVIEWED
    values = labels.labels if source is HoldoutSource.LABELED else labels.reviews
    if labels.spec.kind is DecisionKind.MULTIPLE_CHOICE:
        assert labels.options is not None
        strata: list[str | None] = [
            None if v is None else str(labels.options[i].index(v) + 1) for i, v in enumerate(values)
        ]
        k_max = max(len(o) for o in labels.options)
        answer_order: list[str] = [str(k) for k in range(1, k_max + 1)]
    else:
        strata = list(values)
        answer_order = list(labels.spec.answers)
    records = [
        HoldoutRecord(id=ex.id, text=ex.text, answer=strata[i], group=ex.group)
        for i, ex in enumerate(dataset.examples)
    ]
    return draw_holdout(
        records,
        decision=decision,
        source=source,
        answer_order=answer_order,
        grouped=dataset.columns.group is not None,
        fraction=fraction,
        cap=cap,
    )


def split_decisions(dataset: Dataset) -> tuple[Holdout, ...]:
    """Split every decision of the dataset, each with its own seed, in manifest order."""
    return tuple(split_dataset(dataset, d.name) for d in dataset.decisions)


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
    common = {r.id for r in holdouts[0].rows if r.role is Role.TRAIN}
    for h in holdouts[1:]:
        common &= {r.id for r in h.rows if r.role is Role.TRAIN}
    return frozenset(common)
