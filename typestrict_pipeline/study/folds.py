"""The time layout of a study: walk-forward folds, a purge gap, an embargo, a sealed holdout.

::

    fold 1: [  tune T1  ][gap][ eval E1 ]
    fold 2:            [  tune T2  ][gap][ eval E2 ]
    fold K:                       [  tune TK  ][gap][ eval EK ][embargo][==== holdout H ====]

* Eval windows have equal length, are contiguous and disjoint; concatenated they are the
  out-of-sample series every statistic uses.
* Each tune window ends ``gap`` steps before its eval window starts, with ``gap ≥ horizon``
  (purging: no tune outcome is learned after the eval window begins).
* After the last eval window comes an embargo of at least ``horizon`` steps, then the holdout:
  the last slice of time. Nothing in the search may read data known at or after the holdout's
  start (:attr:`FoldLayout.seal_at`); the point-in-time layer enforces it.

Windows are half-open ``[start, end)``; a window's decision steps are ``start + i·step``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from typestrict_pipeline.errors import InputError, NotEnoughDataError


@dataclass(frozen=True)
class Window:
    """A half-open time window ``[start, end)`` of ``steps`` decision steps."""

    start: dt.datetime
    end: dt.datetime
    steps: int

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "steps": self.steps}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Window:
        return Window(
            start=dt.datetime.fromisoformat(data["start"]),
            end=dt.datetime.fromisoformat(data["end"]),
            steps=int(data["steps"]),
        )


@dataclass(frozen=True)
class Fold:
    """One fold: a window the candidate is tuned on and a later one it is scored on."""

    index: int
    tune: Window
    eval: Window


@dataclass(frozen=True)
class FoldLayout:
    """Every window of a study, decided before the search starts."""

    step: dt.timedelta
    horizon_steps: int
    gap_steps: int
    embargo_steps: int
    folds: tuple[Fold, ...]
    holdout: Window

    @property
    def seal_at(self) -> dt.datetime:
        """No datum known at or after this time may be read during the search."""
        return self.holdout.start

    @property
    def search_steps_per_candidate(self) -> int:
        """Steps one candidate runs over all folds, tune and eval windows."""
        return sum(f.tune.steps + f.eval.steps for f in self.folds)

    def to_json(self) -> dict[str, Any]:
        return {
            "step_seconds": self.step.total_seconds(),
            "horizon_steps": self.horizon_steps,
            "gap_steps": self.gap_steps,
            "embargo_steps": self.embargo_steps,
            "folds": [
                {"index": f.index, "tune": f.tune.to_json(), "eval": f.eval.to_json()}
                for f in self.folds
            ],
            "holdout": self.holdout.to_json(),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> FoldLayout:
        return FoldLayout(
            step=dt.timedelta(seconds=float(data["step_seconds"])),
            horizon_steps=int(data["horizon_steps"]),
            gap_steps=int(data["gap_steps"]),
            embargo_steps=int(data["embargo_steps"]),
            folds=tuple(
                Fold(
                    index=int(f["index"]),
                    tune=Window.from_json(f["tune"]),
                    eval=Window.from_json(f["eval"]),
                )
                for f in data["folds"]
            ),
            holdout=Window.from_json(data["holdout"]),
        )


def _aware(name: str, value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        raise InputError(
            f"a timezone-aware UTC time for {name}",
            repr(value),
            "pass e.g. datetime(2015, 1, 1, tzinfo=timezone.utc)",
        )
    return value.astimezone(dt.UTC)


MIN_SCORED_STEPS = 2
"""The fewest steps of a scored window (eval, holdout): :func:`plan_folds` refuses fewer, and
the doors that bound their own inputs (``typestrict study run --eval-steps``, ``--holdout-steps``)
refuse fewer in their own words."""


def plan_folds(
    *,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta,
    n_folds: int,
    tune_steps: int,
    eval_steps: int,
    holdout_steps: int,
    horizon_steps: int = 1,
    gap_steps: int | None = None,
    embargo_steps: int | None = None,
    earliest_holdout_start: dt.datetime | None = None,
) -> FoldLayout:
    """Lay out ``n_folds`` walk-forward folds and a holdout at the end of ``[start, end)``.

    The holdout is the last ``holdout_steps`` steps before ``end``; the embargo precedes it;
    the eval windows precede the embargo back to back; each tune window ends ``gap_steps``
    before its eval window.

    Args:
        start: first time the data can be replayed from (aware).
        end: end of the data (exclusive, aware).
        step: step size, e.g. one day.
        n_folds: number of folds, ≥ 1.
        tune_steps: steps in each tune (in-sample) window, ≥ 1.
        eval_steps: steps in each eval (out-of-sample) window, ≥ 2.
        holdout_steps: steps in the holdout, ≥ 2.
        horizon_steps: steps until a decision's outcome is known, ≥ 1.
        gap_steps: purge gap, ≥ ``horizon_steps`` (default ``horizon_steps``).
        embargo_steps: embargo before the holdout, ≥ ``horizon_steps`` (default ``horizon_steps``).
        earliest_holdout_start: the holdout may not start before this time (a re-run's holdout
            must be data that arrived after the previous holdout).

    Returns:
        The layout.

    Raises:
        InputError: a size is out of range or a time is naive.
        NotEnoughDataError: ``[start, end)`` is too short for the layout, or the holdout would
            start before ``earliest_holdout_start``.

    >>> utc = dt.UTC
    >>> lay = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=utc), end=dt.datetime(2013, 1, 1, tzinfo=utc),
    ...                  step=dt.timedelta(days=1), n_folds=4, tune_steps=60, eval_steps=30, holdout_steps=60)
    >>> [f.eval.start.date().isoformat() for f in lay.folds], lay.holdout.start.date().isoformat()
    (['2012-07-04', '2012-08-03', '2012-09-02', '2012-10-02'], '2012-11-02')
    """
    start = _aware("start", start)
    end = _aware("end", end)
    gap = horizon_steps if gap_steps is None else gap_steps
    embargo = horizon_steps if embargo_steps is None else embargo_steps
    checks: list[tuple[str, int, int]] = [
        ("n_folds", n_folds, 1),
        ("tune_steps", tune_steps, 1),
        ("eval_steps", eval_steps, MIN_SCORED_STEPS),
        ("holdout_steps", holdout_steps, MIN_SCORED_STEPS),
        ("horizon_steps", horizon_steps, 1),
        ("gap_steps", gap, horizon_steps),
        ("embargo_steps", embargo, horizon_steps),
    ]
    for name, value, low in checks:
        if not isinstance(value, int) or value < low:
            raise InputError(
                f"{name} to be a whole number ≥ {low}",
                repr(value),
                f"set {name} to at least {low}"
                + (" (the gap and embargo must cover the outcome horizon)" if "_steps" in name
                   and name in ("gap_steps", "embargo_steps") else ""),
            )
    if step <= dt.timedelta(0):
        raise InputError("a positive step size", str(step), "use e.g. timedelta(days=1)")
    need = n_folds * eval_steps + tune_steps + gap + embargo + holdout_steps
    have = max(0, (end - start) // step)

    def too_short() -> NotEnoughDataError:
        return NotEnoughDataError(
            f"expected at least {need} steps of data for {n_folds} folds × ({tune_steps} tune + "
            f"{gap} gap + {eval_steps} eval) + {embargo} embargo + {holdout_steps} holdout, "
            f"got {have}. Use fewer or shorter folds, or a longer time range."
        )

    # Counted in steps first, so no date is ever computed before the data (or the calendar).
    if holdout_steps > have and earliest_holdout_start is None:
        raise too_short()
    holdout = Window(end - min(holdout_steps, have) * step, end, holdout_steps)
    if earliest_holdout_start is not None:
        earliest = _aware("earliest_holdout_start", earliest_holdout_start)
        if holdout_steps > have or holdout.start < earliest:
            unseen = max(0, int((end - earliest) / step))
            raise NotEnoughDataError(
                f"Not enough unseen data yet: {unseen} of {holdout_steps} steps "
                f"(expected the holdout to start at or after {earliest.isoformat()}, "
                f"got {(holdout.start if holdout_steps <= have else start).isoformat()}). "
                "Add data or extend the time range; "
                "a shorter holdout is never scored."
            )
    if need > have:
        raise too_short()
    eval_end = holdout.start - embargo * step
    folds: list[Fold] = []
    for k in range(n_folds):
        e_start = eval_end - (n_folds - k) * eval_steps * step
        ev = Window(e_start, e_start + eval_steps * step, eval_steps)
        t_end = e_start - gap * step
        tu = Window(t_end - tune_steps * step, t_end, tune_steps)
        folds.append(Fold(k + 1, tu, ev))
    if folds[0].tune.start < start:
        raise too_short()
    return FoldLayout(
        step=step,
        horizon_steps=horizon_steps,
        gap_steps=gap,
        embargo_steps=embargo,
        folds=tuple(folds),
        holdout=holdout,
    )


def window_label(start: dt.datetime, end: dt.datetime, step: dt.timedelta) -> str:
    """A window of steps ``[start, end)`` as a reader writes it: its first and last step,
    inclusive (the leaderboard, the lineage panel and the schedules say it the same way).

    >>> day = dt.timedelta(days=1)
    >>> window_label(dt.datetime(2015, 9, 2, tzinfo=dt.UTC), dt.datetime(2015, 12, 31, tzinfo=dt.UTC), day)
    '2015-09-02 – 2015-12-30'
    >>> window_label(dt.datetime(2015, 9, 2, tzinfo=dt.UTC), dt.datetime(2015, 9, 2, 3, tzinfo=dt.UTC),
    ...              dt.timedelta(hours=1))
    '2015-09-02 00:00 UTC – 2015-09-02 02:00 UTC'
    """
    last = end - step
    if step >= dt.timedelta(days=1) and step % dt.timedelta(days=1) == dt.timedelta(0):
        return f"{start.date().isoformat()} – {last.date().isoformat()}"
    return (f"{start.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC – "
            f"{last.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC")
