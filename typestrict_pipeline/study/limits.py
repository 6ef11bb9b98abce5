"""A study's limits and its USD estimate (pure arithmetic, integer micro-USD).

Two limits are always required (max candidates, max total steps); a USD budget is optional.
The estimate comes from a real run: the last completed backtest of this workflow version in
this workspace, ``cost / steps × steps the study will run``, rounded up to a whole micro-USD.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from typestrict_pipeline.errors import LimitError

MICRO = 1_000_000

NO_BACKTEST_MESSAGE = (
    "This version has no completed backtest in your workspace to estimate from. "
    "Run one, then try again, or leave the USD budget empty."
)


class StopLimit(enum.StrEnum):
    """Which limit stopped a study (shown beside "Budget reached")."""

    MAX_CANDIDATES = "Max candidates"
    MAX_TOTAL_STEPS = "Max total steps"
    BUDGET_USD = "Budget (USD)"


@dataclass(frozen=True)
class StudyLimits:
    """The limits of one study. ``budget_micro`` is ``None`` when no USD budget was set."""

    max_candidates: int | None
    max_total_steps: int | None
    budget_micro: int | None = None

    def validate(self) -> None:
        """Refuse a study without both required limits, or with a non-positive one.

        >>> StudyLimits(None, 100).validate()
        Traceback (most recent call last):
        ...
        typestrict_pipeline.errors.LimitError: expected Max candidates (a whole number ≥ 1), got nothing. Every study has a limit: set Max candidates and Max total steps (there is no unlimited option)
        """
        for name, value in (("Max candidates", self.max_candidates),
                            ("Max total steps", self.max_total_steps)):
            if value is None:
                raise LimitError(
                    f"expected {name} (a whole number ≥ 1), got nothing. Every study has a "
                    "limit: set Max candidates and Max total steps (there is no unlimited option)"
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LimitError(f"expected {name} to be a whole number ≥ 1, got {value!r}. "
                                 f"Set {name} to a positive whole number.")
        if self.budget_micro is not None and (
            isinstance(self.budget_micro, bool) or not isinstance(self.budget_micro, int)
            or self.budget_micro <= 0
        ):
            raise LimitError(
                f"expected a USD budget above $0, got {format_usd(self.budget_micro)}. "
                "Enter a positive budget or leave the USD budget empty."
            )


def usd_to_micro(usd: object) -> int:
    """Parse a USD amount (``"0.25"``, ``"$1"``, a ``Decimal``) into integer micro-USD, exactly
    (:func:`typestrict_pipeline.values.money_micro`: finite, 0 to 1,000,000, at most 6 decimals).

    >>> usd_to_micro("0.25"), usd_to_micro("$1.000001")
    (250000, 1000001)
    >>> usd_to_micro("Infinity")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.LimitError: expected a USD amount from 0 to 1,000,000 with at most 6 decimals (e.g. 0.25), got 'Infinity'. Enter the budget in dollars, e.g. 0.25.
    """
    from typestrict_pipeline.errors import InputError
    from typestrict_pipeline.values import money_micro

    try:
        return money_micro(usd, fix="enter the budget in dollars, e.g. 0.25")
    except InputError as exc:
        raise LimitError(str(exc)) from None


def format_usd(micro: int | None, *, exact: bool = False) -> str:
    """Format micro-USD for people: ``$0.0123``; ``—`` when unknown (never a fake $0). The
    product's one rule for an amount spent (a backtest's cost, a study's spend, Settings → Usage,
    the CLI's tables): cents from $1, four decimals from $0.0001, six below; the sign first;
    nothing spent ``$0.00``.

    >>> format_usd(12_345), format_usd(None), format_usd(2_500_000), format_usd(7, exact=True)
    ('$0.0123', '—', '$2.50', '$0.000007')
    >>> format_usd(-5), format_usd(-1_234_567)
    ('-$0.000005', '-$1.23')

    Rounded in whole numbers, halves up (the estimate's rule, :func:`format_estimate`), never
    through a float, whose binary value sent halves either way (1,235,000 µ$ was "$1.24" and
    1,255,000 "$1.25"; 123,450 and 123,550 were both "$0.1235"; a spend of 1,005,000 read "$1.00"
    beside its estimate "≈ $1.01"):

    >>> format_usd(1_005_000), format_usd(1_045_000), format_usd(123_550), format_usd(999_950)
    ('$1.01', '$1.05', '$0.1236', '$1.0000')

    Nothing spent is a real $0 and reads as cents, ``$0.00`` (it read ``$0.000000``, as if an
    amount had been rounded away); a cost not tracked stays ``—`` (the caller's "not tracked"),
    never $0. ``exact`` keeps every micro-USD, zero included:

    >>> format_usd(0), format_usd(0, exact=True), format_usd(1)
    ('$0.00', '$0.000000', '$0.000001')
    """
    if micro is None:
        return "—"
    if micro == 0 and not exact:
        return "$0.00"
    sign, size = ("-" if micro < 0 else ""), abs(micro)
    if exact or size < 100:  # below $0.0001: every micro-USD
        return f"{sign}${size // MICRO}.{size % MICRO:06d}"
    if size >= MICRO:  # ≥ $1: cents are enough
        cents = (size + 5_000) // 10_000
        return f"{sign}${cents // 100:,}.{cents % 100:02d}"
    tenths = (size + 50) // 100  # ≥ $0.0001: to the ten-thousandth of a dollar
    return f"{sign}${tenths // 10_000}.{tenths % 10_000:04d}"


def plain_usd(micro: int) -> str:
    """Micro-USD as the plain decimal a form's USD field shows, which :func:`usd_to_micro` reads
    back exactly (never ``5e-05``, which it refuses, nor ``50.0``).

    >>> plain_usd(50_000_000), plain_usd(250_000), plain_usd(50), plain_usd(1), plain_usd(0)
    ('50', '0.25', '0.00005', '0.000001', '0')
    """
    from decimal import Decimal

    return format(Decimal(micro).scaleb(-6).normalize(), "f")


HOLDOUT_RUNS = 2
"""Runs on the holdout slice: the winner's and the baseline's."""


def study_total_steps(n_candidates: int, search_steps_per_candidate: int, holdout_steps: int) -> int:
    """Steps a study will run: candidates × (Σ folds' tune + eval steps) + the holdout.

    The holdout is run twice: by the winner, then by the baseline on the same slice (see
    ``docs/method/studies.md``, "Baseline on the holdout"), so it counts twice.

    >>> study_total_steps(2, 2 * (30 + 30), 60)
    360
    """
    return n_candidates * search_steps_per_candidate + HOLDOUT_RUNS * holdout_steps


def estimate_cost_micro(last_cost_micro: int, last_steps: int, steps: int) -> int:
    """``ceil(last_cost × steps / last_steps)`` in integer micro-USD (no float rounding).

    >>> estimate_cost_micro(1_000, 3, 10)
    3334
    """
    if last_steps <= 0:
        raise LimitError(f"expected the last backtest to have run at least 1 step, got "
                         f"{last_steps}. Run a complete backtest first.")
    return -(-last_cost_micro * steps // last_steps)


def format_estimate(micro: int) -> str:
    """An estimate as the form shows it: to the cent from $0.01 (it is an estimate: "≈"), and to
    the first digits that are not zero below; exact micro-USD in ``--json`` and the API.

    >>> format_estimate(12_000), format_estimate(10_000), format_estimate(2_500_000)
    ('$0.01', '$0.01', '$2.50')
    >>> format_estimate(2_000), format_estimate(7)
    ('$0.0020', '$0.000007')
    """
    if micro >= 10_000:
        cents = (micro + 5_000) // 10_000  # to the nearest cent, halves up
        return f"${cents // 100:,}.{cents % 100:02d}"
    return format_usd(micro)


def estimate_text(micro: int, n_candidates: int, n_folds: int) -> str:
    """The form's estimate line, in the page's words: ``≈ $0.01 for 2 candidates × 2 folds × 2
    windows + the holdout``.

    "The holdout" is both of the runs on the holdout slice, the winner's and the baseline's on
    the same steps (``docs/method/studies.md``, "What the estimate counts"): they are counted in
    the estimate, and reserved together. ``n_candidates`` is the number left after "Max
    candidates" (those that will run).

    >>> estimate_text(12_000, 2, 2)
    '≈ $0.01 for 2 candidates × 2 folds × 2 windows + the holdout'
    """
    c = "candidate" if n_candidates == 1 else "candidates"
    f = "fold" if n_folds == 1 else "folds"
    return (f"≈ {format_estimate(micro)} for {n_candidates} {c} × {n_folds} {f} × 2 windows "
            "+ the holdout")
