"""The decision of one tick for one schedule: fire a re-run, or skip with the product's reason.

Pure: the caller gathers the schedule's state (:class:`TickState`) from the store and the
studies, this module decides (:func:`decide_tick`). The messages are the product page's wording
("Why was my scheduled study skipped?"), verbatim, with the real numbers.

The checks run in a fixed order; the first that applies is the reason shown:

1. the root study was deleted (the schedule turns itself off);
2. the root study has no USD budget;
3. the workspace has no subscription record at all (never set up; told apart from expired);
4. the workspace subscription expired;
5. the workspace usage budget is exhausted;
6. the previous study in the lineage did not finish (cancelled or failed, no winner);
7. a study or backtest of the workflow is in flight (including the previous re-run);
8. fewer unseen steps than the minimum.

Workspace and lineage problems come before "in flight" and "not enough data" because they are
the ones that need the user to act; the last two clear by themselves.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from typestrict_pipeline.reruns.windows import RerunWindows, plan_rerun_windows, unseen_steps

MSG_ROOT_DELETED = "The root study was deleted"
MSG_NO_USD_BUDGET = "The root study has no USD budget"
MSG_SUBSCRIPTION_EXPIRED = "Workspace subscription expired"
MSG_WORKSPACE_NOT_SET_UP = "Workspace subscription never set up"
MSG_USAGE_EXHAUSTED = "Workspace usage budget exhausted"
MSG_PREVIOUS_NOT_FINISHED = "The previous study in the lineage did not finish"
MSG_IN_FLIGHT = "A study or backtest was in flight"


def not_set_up_message(workspace_id: str) -> str:
    """The message for a workspace that has no subscription record (never set up), with the fix.

    >>> not_set_up_message("demo")
    'Workspace subscription never set up: typestrict schedule workspace demo --subscription ACTIVE --budget-usd 50 sets it'
    """
    return (f"{MSG_WORKSPACE_NOT_SET_UP}: typestrict schedule workspace {workspace_id} "
            "--subscription ACTIVE --budget-usd 50 sets it")


def not_enough_message(unseen: int, minimum: int) -> str:
    """The product's message for too few unseen steps.

    >>> not_enough_message(7, 20)
    'Not enough unseen data yet: 7 of 20 steps'
    """
    return f"Not enough unseen data yet: {unseen} of {minimum} steps"


class SkipKind(enum.StrEnum):
    """Why a tick did not fire (one per row of the product page's table)."""

    ROOT_DELETED = "ROOT_DELETED"
    NO_USD_BUDGET = "NO_USD_BUDGET"
    WORKSPACE_NOT_SET_UP = "WORKSPACE_NOT_SET_UP"
    SUBSCRIPTION_EXPIRED = "SUBSCRIPTION_EXPIRED"
    USAGE_EXHAUSTED = "USAGE_EXHAUSTED"
    PREVIOUS_NOT_FINISHED = "PREVIOUS_NOT_FINISHED"
    IN_FLIGHT = "IN_FLIGHT"
    NOT_ENOUGH_DATA = "NOT_ENOUGH_DATA"


class PreviousOutcome(enum.StrEnum):
    """The state of the last study in the lineage, as the decision needs it."""

    FINISHED = "FINISHED"  # has a winner (finished, or stopped by a limit after ranking)
    IN_PROGRESS = "IN_PROGRESS"  # claimed, queued or running
    NOT_FINISHED = "NOT_FINISHED"  # cancelled or failed: no winner to re-run from


class SubscriptionState(enum.StrEnum):
    """A workspace's subscription."""

    ACTIVE = "ACTIVE"
    EXPIRED = "EXPIRED"


@dataclass(frozen=True)
class TickState:
    """Everything one tick needs to decide for one schedule.

    Attributes:
        lineage_root_id: the study the lineage starts from.
        next_seq: the position the next re-run would take in the lineage (root = 0).
        root_exists: False once the root study was deleted.
        root_budget_micro_usd: the root study's USD budget (None: created without one).
        subscription: the workspace's subscription state.
        usage_budget_micro_usd: the workspace's usage budget for the current period.
        usage_spent_micro_usd: what the workspace spent in the current period.
        previous: the last study in the lineage.
        previous_study_id: its id (the parent of the next re-run).
        previous_holdout_end: end (exclusive) of its holdout, in steps.
        workflow_in_flight: a study or backtest of the workflow is running.
        available_end: end (exclusive) of the steps known now.
        min_unseen_steps: the study's "Min unseen steps for a re-run".
        embargo_steps: steps between the folds' data and the holdout.
        workspace_id: the schedule's workspace (named in the "never set up" message).
        workspace_set_up: False when the workspace has no subscription record at all.
    """

    lineage_root_id: str
    next_seq: int
    root_exists: bool
    root_budget_micro_usd: int | None
    subscription: SubscriptionState
    usage_budget_micro_usd: int
    usage_spent_micro_usd: int
    previous: PreviousOutcome
    previous_study_id: str
    previous_holdout_end: int
    workflow_in_flight: bool
    available_end: int
    min_unseen_steps: int
    embargo_steps: int = 0
    workspace_id: str = ""
    workspace_set_up: bool = True


@dataclass(frozen=True)
class Skip:
    """The tick does not fire; ``message`` is what the UI and the CLI show."""

    kind: SkipKind
    message: str

    @property
    def turns_schedule_off(self) -> bool:
        """Only a deleted root study turns the schedule off; every other skip retries."""
        return self.kind is SkipKind.ROOT_DELETED


@dataclass(frozen=True)
class Fire:
    """The tick fires one re-run, identified by ``run_key`` (the same key every evaluation)."""

    run_key: str
    seq: int
    parent_study_id: str
    windows: RerunWindows


def rerun_run_key(lineage_root_id: str, seq: int) -> str:
    """The run key of the ``seq``-th re-run of a lineage.

    It depends only on the lineage and the position, so however often a tick is evaluated
    (again, by the sensor and the schedule, by two daemons) it names the same run, which Dagster
    launches once; the store's unique ``(lineage, seq)`` backs this up.

    >>> rerun_run_key("study-7", 2)
    'study-rerun:study-7:2'
    """
    return f"study-rerun:{lineage_root_id}:{seq}"


def decide_tick(state: TickState) -> Fire | Skip:
    """Decide one tick for one schedule.

    Args:
        state: the schedule's state now.

    Returns:
        :class:`Fire` with the run key and the new re-run's windows, or :class:`Skip` with the
        product's message.

    >>> base = TickState("s1", 1, True, 10_000, SubscriptionState.ACTIVE, 5_000_000, 0,
    ...                  PreviousOutcome.FINISHED, "s1", 100, False, 107, 20)
    >>> decide_tick(base).message
    'Not enough unseen data yet: 7 of 20 steps'
    >>> import dataclasses
    >>> fire = decide_tick(dataclasses.replace(base, available_end=120))
    >>> fire.run_key, fire.windows.holdout
    ('study-rerun:s1:1', StepWindow(start=100, end=120))
    """
    if not state.root_exists:
        return Skip(SkipKind.ROOT_DELETED, MSG_ROOT_DELETED)
    if state.root_budget_micro_usd is None:
        return Skip(SkipKind.NO_USD_BUDGET, MSG_NO_USD_BUDGET)
    if not state.workspace_set_up:
        return Skip(SkipKind.WORKSPACE_NOT_SET_UP, not_set_up_message(state.workspace_id))
    if state.subscription is not SubscriptionState.ACTIVE:
        return Skip(SkipKind.SUBSCRIPTION_EXPIRED, MSG_SUBSCRIPTION_EXPIRED)
    if state.usage_spent_micro_usd >= state.usage_budget_micro_usd:
        return Skip(SkipKind.USAGE_EXHAUSTED, MSG_USAGE_EXHAUSTED)
    if state.previous is PreviousOutcome.NOT_FINISHED:
        return Skip(SkipKind.PREVIOUS_NOT_FINISHED, MSG_PREVIOUS_NOT_FINISHED)
    if state.previous is PreviousOutcome.IN_PROGRESS or state.workflow_in_flight:
        return Skip(SkipKind.IN_FLIGHT, MSG_IN_FLIGHT)
    windows = plan_rerun_windows(
        state.previous_holdout_end, state.available_end, state.min_unseen_steps, state.embargo_steps
    )
    if windows is None:
        unseen = unseen_steps(state.previous_holdout_end, state.available_end)
        return Skip(SkipKind.NOT_ENOUGH_DATA, not_enough_message(unseen, state.min_unseen_steps))
    return Fire(
        run_key=rerun_run_key(state.lineage_root_id, state.next_seq),
        seq=state.next_seq,
        parent_study_id=state.previous_study_id,
        windows=windows,
    )
