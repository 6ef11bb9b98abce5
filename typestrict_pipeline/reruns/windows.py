"""Where a re-run may learn and where it is scored, in step indices.

Steps are the workflow's decision steps counted from the dataset's first step (step ``i`` is the
``i``-th decision time). A window is half-open, ``[start, end)``.

The rule (``docs/method/reruns.md`` §1):

* the previous study's holdout ends at ``prev_holdout_end``; every step at or after it is
  *unseen*: no study in the lineage has been scored on it or picked a winner with it;
* a re-run fires only when at least ``min_unseen_steps`` unseen steps exist; it never scores a
  shorter window;
* its holdout is the ``min_unseen_steps`` most recent steps, ``[available_end − L, available_end)``
  with ``L = min_unseen_steps``: the same length every run (so the holdout scores of a lineage
  are exchangeable, which is what the "best expected of k under noise" line assumes) and the
  newest data (so it answers "is the winner still the winner now");
* its folds may learn from everything before ``holdout.start − embargo_steps``, including the
  previous holdout, which is spent once it has picked a winner.

So the holdouts of a lineage are disjoint, each starts at or after the previous one's end, and
each is unseen when its re-run is planned.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class StepWindow:
    """A half-open window of steps ``[start, end)``.

    >>> StepWindow(100, 120).length
    20
    >>> StepWindow(100, 120).overlaps(StepWindow(119, 130))
    True
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(
                f"expected a step window with 0 ≤ start ≤ end, got [{self.start}, {self.end}). "
                "Fix the window bounds."
            )

    @property
    def length(self) -> int:
        """How many steps the window holds."""
        return self.end - self.start

    def overlaps(self, other: StepWindow) -> bool:
        """Whether the two windows share at least one step."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class RerunWindows:
    """The windows of one planned re-run.

    Attributes:
        learn_end: the folds (tune and eval windows) may use steps ``< learn_end`` only.
        holdout: the new, unseen holdout the re-run's winner is scored on.
        unseen_steps: how many unseen steps existed when it was planned (≥ the holdout length).
    """

    learn_end: int
    holdout: StepWindow
    unseen_steps: int


def unseen_steps(prev_holdout_end: int, available_end: int) -> int:
    """Steps that arrived after the previous holdout (never negative).

    >>> unseen_steps(100, 107), unseen_steps(100, 90)
    (7, 0)
    """
    return max(0, available_end - prev_holdout_end)


def plan_rerun_windows(
    prev_holdout_end: int,
    available_end: int,
    min_unseen_steps: int,
    embargo_steps: int = 0,
) -> RerunWindows | None:
    """The next re-run's windows, or ``None`` while fewer than ``min_unseen_steps`` are unseen.

    Args:
        prev_holdout_end: end (exclusive) of the previous study's holdout in the lineage.
        available_end: end (exclusive) of the steps whose outcome is known now.
        min_unseen_steps: the study's "Min unseen steps for a re-run" (≥ 1); also the holdout length.
        embargo_steps: steps dropped between the folds' data and the holdout (≥ 0).

    Returns:
        The windows, or ``None`` when not enough unseen data exists.

    Raises:
        ValueError: on a minimum below 1 or a negative embargo.

    >>> plan_rerun_windows(100, 107, 20) is None
    True
    >>> w = plan_rerun_windows(100, 125, 20, embargo_steps=2)
    >>> w.holdout, w.learn_end, w.unseen_steps
    (StepWindow(start=105, end=125), 103, 25)
    """
    if min_unseen_steps < 1:
        raise ValueError(
            f"expected a minimum of at least 1 unseen step, got {min_unseen_steps}. "
            "Set 'Min unseen steps for a re-run' to a positive number."
        )
    if embargo_steps < 0:
        raise ValueError(f"expected an embargo ≥ 0 steps, got {embargo_steps}. Fix the study layout.")
    unseen = unseen_steps(prev_holdout_end, available_end)
    if unseen < min_unseen_steps:
        return None
    holdout = StepWindow(available_end - min_unseen_steps, available_end)
    return RerunWindows(
        learn_end=max(0, holdout.start - embargo_steps), holdout=holdout, unseen_steps=unseen
    )


def check_chain(
    root_holdout: StepWindow, reruns: list[RerunWindows], min_unseen_steps: int
) -> None:
    """Assert the lineage invariants; raise ``ValueError`` naming the first re-run that breaks one.

    Every holdout is ``min_unseen_steps`` long, starts at or after the previous holdout's end
    (so it is new), and the folds learn only from steps before it.

    >>> root = StepWindow(80, 100)
    >>> check_chain(root, [plan_rerun_windows(100, 120, 20)], 20)
    """
    prev = root_holdout
    for j, rerun in enumerate(reruns, start=1):
        h = rerun.holdout
        if h.length != min_unseen_steps:
            raise ValueError(f"re-run {j}: expected a holdout of {min_unseen_steps} steps, got {h.length}.")
        if h.start < prev.end:
            raise ValueError(
                f"re-run {j}: expected a holdout starting at or after step {prev.end} "
                f"(the previous holdout's end), got {h.start}."
            )
        if rerun.learn_end > h.start:
            raise ValueError(
                f"re-run {j}: expected folds to learn only before step {h.start}, got up to {rerun.learn_end}."
            )
        prev = h
