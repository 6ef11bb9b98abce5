"""A schedule's timeline: when it is evaluated next, what it decided last, what would make it fire.

Between data arrivals a schedule's normal state is *skipped*, so "skipped" alone tells a reader
little. The timeline adds the three things they ask next:

* **when** the schedule is evaluated again (:func:`next_evaluation`): the start of its next
  cadence slot, or now when the current slot was not evaluated yet (the sensor then takes it at
  its next tick);
* **what it decided last**, with the reason (the tick's message, as recorded);
* **what would make it fire** (:func:`outlook`): "needs 9 more steps; the data end at
  2015-10-10", which command adds data, or that it **can never fire** (its data is a built-in
  dataset that cannot grow past the minimum, or its root study has no USD budget), which is
  said when the schedule is enabled and at each evaluation.

Pure: the caller gathers the schedule's state (``reruns.service.schedule_timeline``).

>>> import datetime as dt
>>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
>>> when, due = next_evaluation(t0, 3600, 0, t0 + dt.timedelta(minutes=20))
>>> format_when(when), due
('2026-01-01 01:00 UTC', False)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from typestrict_pipeline.reruns.decide import Fire, Skip, SkipKind, TickState
from typestrict_pipeline.reruns.studies import CLI_ADD_DATA, AddDataWords, DataSource
from typestrict_pipeline.reruns.tables import ScheduleState, TickOutcome
from typestrict_pipeline.reruns.windows import unseen_steps

NEVER = "It can never fire"


def next_evaluation(enabled_at: dt.datetime, cadence_seconds: int, last_slot: int,
                    now: dt.datetime) -> tuple[dt.datetime, bool]:
    """When a schedule is evaluated next, and whether that is due now.

    Slot ``n`` starts at ``enabled_at + n·cadence`` and is evaluated once, by the first evaluator
    (the sensor, every minute) after it starts. When the current slot was not evaluated yet the
    evaluation is due now (returned time: the slot's start); otherwise it is the next slot's
    start.

    >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    >>> when, due = next_evaluation(t0, 3600, -1, t0 + dt.timedelta(minutes=20))
    >>> format_when(when), due
    ('2026-01-01 00:00 UTC', True)
    """
    cadence = dt.timedelta(seconds=cadence_seconds)
    if now < enabled_at:
        return enabled_at, False
    slot = int((now - enabled_at).total_seconds() // cadence_seconds)
    if slot > last_slot:
        return enabled_at + slot * cadence, True
    return enabled_at + (slot + 1) * cadence, False


def format_step_time(t: dt.datetime, step: dt.timedelta) -> str:
    """A step's time as a reader writes it: the day for daily (or longer) steps, else minutes.

    >>> format_step_time(dt.datetime(2015, 10, 10, tzinfo=dt.UTC), dt.timedelta(days=1))
    '2015-10-10'
    >>> format_step_time(dt.datetime(2015, 10, 10, 6, tzinfo=dt.UTC), dt.timedelta(hours=1))
    '2015-10-10 06:00 UTC'
    """
    if step >= dt.timedelta(days=1) and step % dt.timedelta(days=1) == dt.timedelta(0):
        return t.date().isoformat()
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def format_when(t: dt.datetime) -> str:
    """A wall-clock time in UTC, to the minute.

    >>> format_when(dt.datetime(2026, 12, 1, 17, 0, 30, tzinfo=dt.UTC))
    '2026-12-01 17:00 UTC'
    """
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _steps(n: int, more: bool = False) -> str:
    extra = " more" if more else ""
    return f"{n}{extra} step" if n == 1 else f"{n}{extra} steps"


@dataclass(frozen=True)
class Outlook:
    """What would make a schedule fire.

    Attributes:
        would: what it does next, starting with a verb ("fires at its next evaluation: ...",
            "needs 9 more steps ...", "never fires: ...").
        never_fires: why it can never fire (``None`` when it can).
        unseen_steps: steps after the previous holdout with a known outcome (when known).
        needed_steps: how many more it needs before it fires (0 when it would fire now).
        data_end: the last step whose outcome is known, as written (``None`` when none is).
    """

    would: str
    never_fires: str | None = None
    unseen_steps: int | None = None
    needed_steps: int | None = None
    data_end: str | None = None


def outlook(decision: Fire | Skip, state: TickState, source: DataSource | None, *,
            time_of: Callable[[int], dt.datetime], step: dt.timedelta,
            workflow_id: str, words: AddDataWords = CLI_ADD_DATA) -> Outlook:
    """What would make the schedule fire, from what a tick would decide now.

    Args:
        decision: :func:`~typestrict_pipeline.reruns.decide.decide_tick` of ``state``.
        state: the schedule's state now.
        source: where its data comes from (``None`` when the root study is gone).
        time_of: step index -> time on the lineage's grid.
        step: the grid's step.
        workflow_id: the workflow (named in the messages).
        words: the door's words for what brings new steps or restores the workspace
            (:class:`~typestrict_pipeline.reruns.studies.AddDataWords`).

    >>> from typestrict_pipeline.reruns.decide import PreviousOutcome, SubscriptionState, decide_tick
    >>> from typestrict_pipeline.reruns.studies import DataKind
    >>> day = dt.timedelta(days=1)
    >>> origin = dt.datetime(2015, 1, 1, tzinfo=dt.UTC)
    >>> state = TickState("7", 1, True, 10_000, SubscriptionState.ACTIVE, 5_000_000, 0,
    ...                   PreviousOutcome.FINISHED, "7", 273, False, 274, 10)
    >>> o = outlook(decide_tick(state), state, DataSource(DataKind.REGISTERED, "live"),
    ...             time_of=lambda i: origin + i * day, step=day, workflow_id="seattle_rain")
    >>> o.would
    'needs 9 more steps (has 1 of 10); the data end at 2015-10-01; add rows: typestrict data append live FILE.csv'
    >>> outlook(decide_tick(state), state, DataSource(DataKind.BUILT_IN, "seattle_weather"),
    ...         time_of=lambda i: origin + i * day, step=day, workflow_id="seattle_rain").never_fires[:61]
    'It can never fire: its data, built-in dataset seattle_weather'
    """
    last_known = None if state.available_end <= 0 else format_step_time(time_of(state.available_end - 1), step)
    unseen = unseen_steps(state.previous_holdout_end, state.available_end)
    if isinstance(decision, Fire):
        return Outlook(
            f"fires at its next evaluation: {unseen} unseen steps, {state.min_unseen_steps} needed; "
            f"the re-run is scored on the newest {_steps(decision.windows.holdout.length)}",
            unseen_steps=unseen, needed_steps=0, data_end=last_known)
    kind = decision.kind
    if kind is SkipKind.NOT_ENOUGH_DATA:
        needed = state.min_unseen_steps - unseen
        where = (f"the data end at {last_known}" if last_known is not None
                 else "no step with a known outcome yet")
        if source is not None and not source.can_grow:
            never = (f"{NEVER}: its data, {source.label()}, end at {last_known or 'its first step'} "
                     f"and cannot grow, and it needs {needed} more unseen "
                     f"{'step' if needed == 1 else 'steps'} (has {unseen} of {state.min_unseen_steps}). "
                     f"Cancel it; {source.how_to_add(state.workspace_id, workflow_id, words)}")
            return Outlook(f"never fires: needs {_steps(needed, True)}, and its data cannot grow",
                           never, unseen, needed, last_known)
        how = "" if source is None else f"; {source.how_to_add(state.workspace_id, workflow_id, words)}"
        return Outlook(f"needs {_steps(needed, True)} (has {unseen} of {state.min_unseen_steps}); {where}{how}",
                       None, unseen, needed, last_known)
    if kind is SkipKind.NO_USD_BUDGET:
        return Outlook("never fires: the root study has no USD budget",
                       f"{NEVER}: create a study with a USD budget and schedule from that one",
                       unseen, None, last_known)
    if kind is SkipKind.ROOT_DELETED:
        return Outlook("never fires: the root study was deleted (the schedule turns itself off)",
                       f"{NEVER}: the root study was deleted. Pick a new study and enable again",
                       None, None, None)
    if kind is SkipKind.PREVIOUS_NOT_FINISHED:
        return Outlook("fires after you cancel the schedule and enable it again from a finished study",
                       None, unseen, None, last_known)
    if kind is SkipKind.IN_FLIGHT:
        return Outlook(f"fires once the study or backtest running on workflow {workflow_id} ends "
                       "(it retries at each evaluation)", None, unseen, None, last_known)
    return Outlook(f"fires once workspace {state.workspace_id} is restored: "
                   f"{words.restored.format(workspace=state.workspace_id)}", None, unseen, None, last_known)


def skip_message(decision: Skip, view_outlook: Outlook) -> str:
    """A tick's skip message: the product's reason, and that the schedule can never fire when so.

    >>> skip_message(Skip(SkipKind.NOT_ENOUGH_DATA, "Not enough unseen data yet: 1 of 30 steps"),
    ...              Outlook("never", "It can never fire: its data ... cannot grow"))
    'Not enough unseen data yet: 1 of 30 steps. It can never fire: its data ... cannot grow'
    """
    if (view_outlook.never_fires is None or decision.kind is SkipKind.ROOT_DELETED
            or view_outlook.never_fires in decision.message):
        return decision.message  # a deleted root turns the schedule off: it is not evaluated again
    return f"{decision.message}. {view_outlook.never_fires}"


@dataclass(frozen=True)
class Timeline:
    """A schedule's timeline (what ``typestrict schedule status``, the API and the UI show).

    Attributes:
        schedule_id: the schedule.
        state: enabled, cancelled or off.
        cadence: as written (``1h``).
        next_evaluation_at: the next evaluation (``None`` unless enabled).
        due_now: the current slot was not evaluated yet (the sensor takes it at its next tick).
        last_evaluated_at: the last evaluation (``None`` before the first).
        last_outcome: fired or skipped.
        last_message: its reason, as recorded.
        outlook: what would make it fire (``None`` unless enabled).
    """

    schedule_id: int
    state: ScheduleState
    cadence: str
    next_evaluation_at: dt.datetime | None
    due_now: bool
    last_evaluated_at: dt.datetime | None
    last_outcome: TickOutcome | None
    last_message: str | None
    outlook: Outlook | None

    @property
    def never_fires(self) -> str | None:
        """Why it can never fire (``None`` when it can, or when it is not enabled)."""
        return None if self.outlook is None else self.outlook.never_fires

    def next_evaluation_text(self) -> str:
        """The next evaluation, as a reader wants it.

        >>> t = Timeline(3, ScheduleState.ENABLED, "1h", dt.datetime(2026, 12, 1, 17, tzinfo=dt.UTC),
        ...              False, None, None, None, None)
        >>> t.next_evaluation_text()
        '2026-12-01 17:00 UTC (every 1h)'
        """
        if self.state is not ScheduleState.ENABLED or self.next_evaluation_at is None:
            return f"none ({self.state.value.lower()})"
        if self.due_now:
            return (f"due now (its {format_when(self.next_evaluation_at)} slot was not evaluated yet: "
                    "the sensor's next tick, within a minute while the daemon runs)")
        return f"{format_when(self.next_evaluation_at)} (every {self.cadence})"

    def last_decision_text(self) -> str:
        """The last decision and its reason."""
        if self.last_evaluated_at is None or self.last_outcome is None:
            return "not evaluated yet"
        label = "skipped" if self.last_outcome is TickOutcome.SKIPPED else "fired"
        return f"{label} at {format_when(self.last_evaluated_at)}: {self.last_message}"

    def lines(self) -> list[str]:
        """The timeline as indented lines for the CLI."""
        out = [f"  next evaluation: {self.next_evaluation_text()}",
               f"  last decision: {self.last_decision_text()}"]
        if self.outlook is not None:
            out.append(f"  fires: {self.outlook.would}")
            if self.outlook.never_fires:
                out.append(f"  {self.outlook.never_fires}")
        return out

    def to_json(self) -> dict[str, object]:
        """The timeline as JSON-ready values (times ISO 8601 UTC)."""
        o = self.outlook
        return {
            "next_evaluation_at": None if self.next_evaluation_at is None else self.next_evaluation_at.isoformat(),
            "due_now": self.due_now,
            "last_evaluated_at": None if self.last_evaluated_at is None else self.last_evaluated_at.isoformat(),
            "last_outcome": None if self.last_outcome is None else self.last_outcome.value,
            "last_message": self.last_message,
            "fires": None if o is None else o.would,
            "never_fires": None if o is None else o.never_fires,
            "unseen_steps": None if o is None else o.unseen_steps,
            "needed_steps": None if o is None else o.needed_steps,
            "data_end": None if o is None else o.data_end,
        }
