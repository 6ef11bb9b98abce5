"""The data that flows between the refund pieces: split → predictions → judgement → audit.

These types are the contract between ``refund.holdout`` / ``refund.dataset`` /
``refund.predictions`` (which build them from files and model clients) and ``refund.metrics`` /
``refund.rule`` / ``refund.audit`` (which judge them). They hold hashes, answer indices and
probabilities, never an example's text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DecisionKind(enum.StrEnum):
    """How a decision's answers are laid out.

    Attributes:
        SINGLE: one fixed list of answers shared by every example (``answers`` in the manifest).
        MULTIPLE_CHOICE: each example offers its own options; the metrics read answers as
            option positions (see ``docs/method/refund.md``).
    """

    SINGLE = "single"
    MULTIPLE_CHOICE = "multiple_choice"


class Role(enum.StrEnum):
    """What the split made of a row.

    Attributes:
        TEST: held out; both systems are measured on it.
        TRAIN: may be used to train the model.
        EXCLUDED: neither: an unlabeled row, or a row of a test group that is not itself a test
            example (it stays out of training so no group is seen on both sides).
    """

    TEST = "test"
    TRAIN = "train"
    EXCLUDED = "excluded"


class Verdict(enum.StrEnum):
    """The outcome of a training.

    Attributes:
        BEATS: the model beats Jev; the credit stays spent.
        KEPT: the model did not beat Jev, ``keep_if_loses`` was on; delivered, no refund.
        REFUND: the model did not beat Jev (ties included); the credit comes back.
        FAILED: the training failed on our side; the credit comes back, whatever the options.
    """

    BEATS = "beats"
    KEPT = "kept"
    REFUND = "refund"
    FAILED = "failed"

    @property
    def refunds_credit(self) -> bool:
        """Whether this verdict returns the training's credit."""
        return self in (Verdict.REFUND, Verdict.FAILED)


@dataclass(frozen=True)
class JudgedRow:
    """One test example as the judgement sees it.

    Attributes:
        text_sha256: lowercase hex SHA-256 of the example's text as UTF-8 (as sent to the model).
        y: index of the right answer in ``DecisionData.answers``.
        p_model: the trained model's probabilities, aligned with ``DecisionData.answers``.
        p_jev: Jev's probabilities, aligned the same way.
        n_options: multiple choice only: how many options this example offered (its positions
            ``0 .. n_options - 1``). Vectors may then be given over those options only; the
            judgement pads them with 0.0 up to the decision's answer count. ``None`` means all of
            ``answers`` (or, for a shorter vector, its length).
        group_sha256: the SHA-256 name of the example's group
            (:func:`typestrict_pipeline.refund.stream.group_sha256` of its key), or ``None`` when
            the test examples carry no groups. Either every row of a decision has one or none
            does; with groups the bootstrap resamples whole groups.
    """

    text_sha256: str
    y: int
    p_model: tuple[float, ...]
    p_jev: tuple[float, ...]
    n_options: int | None = None
    group_sha256: str | None = None


@dataclass(frozen=True)
class DecisionData:
    """Everything needed to judge one decision of one training.

    Attributes:
        name: the decision's name (unique within a training).
        kind: single answer list or multiple choice.
        answers: the probability columns, in order. For a single decision, the manifest's answers;
            for multiple choice, option positions (see ``docs/method/refund.md``).
        rows: the test examples, in any order (the judgement sorts them canonically).
    """

    name: str
    kind: DecisionKind
    answers: tuple[str, ...]
    rows: tuple[JudgedRow, ...]
