"""Scheduled re-runs, end to end on the store: enable, cancel, evaluate ticks, execute a re-run.

Guarantees, all enforced by the database:

* one enabled schedule per lineage (partial unique index on ``rerun_schedules``);
* one evaluation per schedule and cadence slot, however many evaluators (sensor, schedule,
  two daemons): a conditional ``UPDATE ... SET last_slot = :slot WHERE last_slot < :slot``;
* one re-run per lineage position: ``rerun_lineage`` is unique on ``(lineage_root_id, seq)``
  and on ``run_key``; executing a run key a second time does nothing;
* one notification per changed winner: the outbox's unique ``dedupe_key``.

The cadence is an interval (``30m``, ``6h``, ``1d``, ``7d``) anchored at the moment the schedule
was enabled: slot ``n`` starts at ``enabled_at + n·cadence`` and a schedule is evaluated at most
once per slot (the first evaluation after the slot starts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.errors import ConflictError, InputError, NotFoundError
from typestrict_pipeline.lifecycle.leases import LeaseKind, holder, release_in, take_in
from typestrict_pipeline.reruns.decide import (
    MSG_IN_FLIGHT,
    MSG_NO_USD_BUDGET,
    MSG_WORKSPACE_NOT_SET_UP,
    Fire,
    PreviousOutcome,
    Skip,
    SkipKind,
    SubscriptionState,
    TickState,
    decide_tick,
    not_set_up_message,
)
from typestrict_pipeline.reruns.lineage import LineageEntry, render_panel
from typestrict_pipeline.reruns.notify import (
    KIND_WINNER_CHANGED,
    TITLE_WINNER_CHANGED,
    enqueue,
    notification_enabled,
)
from typestrict_pipeline.reruns.studies import (
    API_ADD_DATA,
    CLI_ADD_DATA,
    CONSOLE_ADD_DATA,
    STORED_ADD_DATA,
    AddDataWords,
    RerunSpec,
    StudiesPort,
    StudyFacts,
)
from typestrict_pipeline.reruns.tables import (
    LineageRow,
    LineageState,
    RerunSchedule,
    RerunTick,
    ScheduleState,
    StudyRerunSetting,
    TickOutcome,
)
from typestrict_pipeline.reruns.timeline import (
    Outlook,
    Timeline,
    format_when,
    next_evaluation,
    outlook,
    skip_message,
)
from typestrict_pipeline.reruns.workspace import (
    API_WORKSPACE,
    CLI_WORKSPACE,
    CONSOLE_WORKSPACE,
    SpendSource,
    WorkspaceStatus,
    WorkspaceWords,
    workspace_status,
)
from typestrict_pipeline.store import session_scope, utcnow
from typestrict_pipeline.study.tables import StudyRow, StudyState
from typestrict_pipeline.values import PERSON, email

_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MIN_CADENCE_SECONDS = 60
LOST_CLAIM_AFTER = dt.timedelta(minutes=10)


MAX_CADENCE = dt.timedelta(days=366)


def parse_cadence(text: str) -> int:
    """A cadence such as ``30m``, ``6h``, ``1d`` or ``1w``, in seconds: at least one minute, at
    most 366 days (:func:`typestrict_pipeline.values.duration`).

    >>> parse_cadence("1d"), parse_cadence("30m")
    (86400, 1800)
    >>> parse_cadence("9999999999999999999w")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a cadence like 1d, 12h, 30m or 1w, from 1 minute to 366 days, got '9999999999999999999w'. Write a whole number followed by m, h, d or w.
    """
    from typestrict_pipeline.values import duration

    return int(duration(text, "a cadence", lo=dt.timedelta(seconds=MIN_CADENCE_SECONDS), hi=MAX_CADENCE,
                        units="mhdw", fix="write a whole number followed by m, h, d or w").total_seconds())


def format_cadence(seconds: int) -> str:
    """The shortest exact form of a cadence.

    >>> format_cadence(86400), format_cadence(5400)
    ('1d', '90m')
    """
    for unit in ("w", "d", "h", "m"):
        size = _UNIT_SECONDS[unit]
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def current_slot(enabled_at: dt.datetime, cadence_seconds: int, now: dt.datetime) -> int:
    """The cadence slot ``now`` falls in (−1 before the schedule was enabled).

    >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    >>> current_slot(t0, 3600, t0), current_slot(t0, 3600, t0 + dt.timedelta(minutes=150))
    (0, 2)
    """
    if now < enabled_at:
        return -1
    return int((now - enabled_at).total_seconds() // cadence_seconds)


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as the CLI and the UI show it."""

    id: int
    workspace_id: str
    workflow_id: str
    root_study_id: str
    lineage_root_id: str
    owner: str
    cadence: str
    state: ScheduleState
    min_unseen_steps: int
    budget_micro_usd: int
    enabled_at: dt.datetime
    cancelled_at: dt.datetime | None
    cancelled_by: str | None
    off_reason: str | None
    last_tick_at: dt.datetime | None
    last_outcome: TickOutcome | None
    last_message: str | None
    last_run_key: str | None
    last_slot: int = -1


def _view(row: RerunSchedule) -> ScheduleView:
    return ScheduleView(
        id=row.id, workspace_id=row.workspace_id, workflow_id=row.workflow_id,
        root_study_id=row.root_study_id, lineage_root_id=row.lineage_root_id, owner=row.owner,
        cadence=format_cadence(row.cadence_seconds), state=row.state,
        min_unseen_steps=row.min_unseen_steps, budget_micro_usd=row.budget_micro_usd,
        enabled_at=row.enabled_at, cancelled_at=row.cancelled_at, cancelled_by=row.cancelled_by,
        off_reason=row.off_reason, last_tick_at=row.last_tick_at, last_outcome=row.last_outcome,
        last_message=row.last_message, last_run_key=row.last_run_key, last_slot=row.last_slot,
    )


# --------------------------------------------------------------------------- study settings


def min_unseen_steps_of(engine: Engine, study_id: str) -> int | None:
    """A value recorded in the legacy ``rerun_study_settings`` table, or None.

    Before ``studies_0004`` the minimum was recorded here at enable time; the study's own
    column is now the source of truth and this table is only read for such older studies.
    """
    with session_scope(engine) as session:
        row = session.get(StudyRerunSetting, study_id)
        return None if row is None else row.min_unseen_steps


# --------------------------------------------------------------------------- enable / cancel


def _window_label(facts: StudyFacts, start: dt.datetime, end: dt.datetime) -> str:
    from typestrict_pipeline.study.folds import window_label

    return window_label(start, end, facts.step)


def _lineage_of(session: Session, study_id: str) -> LineageRow | None:
    return session.execute(
        select(LineageRow).where(LineageRow.study_id == study_id).order_by(LineageRow.id.desc())
    ).scalars().first()


@dataclass(frozen=True)
class MinUnseenWords:
    """How a door words a refusal of :func:`enable_schedule`: "Min unseen steps for a re-run"
    (the CLI's flags, the API's field, the console's form fields) and how the lineage's enabled
    schedule is turned off first (the CLI's command, the API's route, the console's button)."""

    create: str
    """How a study is created with its minimum."""
    give: str
    """How this call gives the minimum once."""
    leave_out: str
    """How this call leaves it out."""
    cancel: str
    """How schedule ``{id}`` (of root study ``{study}``) is cancelled."""


CLI_MIN_UNSEEN = MinUnseenWords(create="create the study with --min-unseen-steps N",
                                give="pass --min-unseen-steps N here once", leave_out="leave --min-unseen-steps out",
                                cancel="typestrict schedule cancel {id}")
API_MIN_UNSEEN = MinUnseenWords(create="create the study with min_unseen_steps",
                                give="send min_unseen_steps here once", leave_out="leave min_unseen_steps out",
                                cancel="POST /v1/schedules/{id}/cancel")
CONSOLE_MIN_UNSEEN = MinUnseenWords(create='create the study with "Min unseen steps for a re-run"',
                                    give='fill "Min unseen steps for a re-run" on this form once',
                                    leave_out='leave "Min unseen steps for a re-run" empty',
                                    cancel='the button "Turn this schedule off" of schedule {id} in the Studies section '
                                           'of the Backtests tab, /console/backtests#schedule-{id}')


def enable_schedule(
    engine: Engine,
    port: StudiesPort,
    *,
    study_id: str,
    cadence: str,
    owner: str,
    min_unseen_steps: int | None = None,
    now: dt.datetime | None = None,
    words: MinUnseenWords = CLI_MIN_UNSEEN,
) -> ScheduleView:
    """Enable re-runs of a finished study on a cadence.

    The study must be finished with a winner and have a USD budget (each re-run copies it).
    Picking a finished re-run continues its lineage; later re-runs of that lineage that were
    cancelled or failed are set aside (kept in the panel, no longer "the previous study") and
    their studies cancelled, which frees the workflow.

    Args:
        engine: the store.
        port: the studies area.
        study_id: the finished study to re-run from.
        cadence: how often to check (``1d``, ``6h``, ...).
        owner: who sets it up (gets the "winner changed" notification).
        min_unseen_steps: only for a study created without "Min unseen steps for a re-run"
            (older studies, or one created without it): it is then stored on the lineage's root
            study once. A study that has its own value uses it; a different value is refused.
        now: the current time (default: now).
        words: how the caller's door names the minimum in a refusal (default: the CLI's flags).

    Raises:
        NotFoundError: no such study.
        InputError: not finished, no USD budget, no minimum, bad cadence, an owner that is not
            one e-mail address (:func:`typestrict_pipeline.values.email`, the rule of the CLI and
            the API alike).
        ConflictError: a schedule is already enabled on this lineage.
    """
    at = now or utcnow()
    seconds = parse_cadence(cadence)
    owner = email(owner, PERSON)
    facts = port.get(study_id)
    if facts is None:
        raise NotFoundError(f"expected an existing study id, got {study_id}. List studies and pick a finished one.")
    if facts.outcome is not PreviousOutcome.FINISHED:
        raise InputError(
            "a finished study with a winner to re-run from", f"study {study_id} in state {facts.state}",
            "wait for it to finish, or pick a finished study",
        )
    if facts.budget_micro_usd is None:
        raise InputError(
            "a study with a USD budget (a scheduled study is the same spend, repeated)",
            f"study {study_id} without one ({MSG_NO_USD_BUDGET})",
            "create a study with a USD budget and schedule from that one",
        )
    with session_scope(engine) as session:
        entry = _lineage_of(session, study_id)
        lineage_root = study_id if entry is None else entry.lineage_root_id
    root_stored = facts if lineage_root == study_id else port.get(lineage_root)
    # The study's own value (set when it was created) is the source of truth: the lineage
    # root's, else the picked study's; the legacy settings table only for older studies.
    minimum = (
        (None if root_stored is None else root_stored.min_unseen_steps)
        or facts.min_unseen_steps
        or min_unseen_steps_of(engine, lineage_root)
        or min_unseen_steps_of(engine, study_id)
    )
    if minimum is None:
        if min_unseen_steps is None:
            raise InputError(
                "Min unseen steps for a re-run, set when the study was created", f"none for study {study_id}",
                f"{words.create}, or {words.give} (it is then stored on the study)",
            )
        minimum = port.set_min_unseen_steps(lineage_root, min_unseen_steps)
        if minimum != min_unseen_steps:  # set concurrently by someone else: theirs stands
            raise InputError(
                f"Min unseen steps for a re-run to match the study's ({minimum})", str(min_unseen_steps),
                words.leave_out,
            )
    elif min_unseen_steps is not None and min_unseen_steps != minimum:
        raise InputError(
            f"Min unseen steps for a re-run to match the study's ({minimum})", str(min_unseen_steps),
            f"{words.leave_out}: it is set when the study is created",
        )
    set_aside: list[str] = []
    root_facts = facts if lineage_root == study_id else port.get(lineage_root)
    if root_facts is None:
        raise NotFoundError(f"expected the lineage's root study {lineage_root} to exist, got none. Pick a new study.")
    try:
        with session_scope(engine) as session:
            rows = session.execute(
                select(LineageRow).where(LineageRow.lineage_root_id == lineage_root).order_by(LineageRow.seq)
            ).scalars().all()
            if not rows:
                session.add(LineageRow(
                    lineage_root_id=lineage_root, seq=0, schedule_id=None, study_id=study_id,
                    parent_study_id=None, run_key=None, state=LineageState.FINISHED, superseded=False,
                    learn_end=None, holdout_start=facts.index(facts.holdout_start),
                    holdout_end=facts.index(facts.holdout_end), unseen_steps=None,
                    window_label=_window_label(facts, facts.holdout_start, facts.holdout_end),
                    winner=facts.winner_label, holdout_score=facts.holdout_score,
                    baseline_score=facts.baseline_score, holdout_se=facts.holdout_se,
                    winner_changed=None, created_at=at, finished_at=at,
                ))
            else:
                picked = next((r for r in rows if r.study_id == study_id), None)
                live = [r for r in rows if not r.superseded]
                assert picked is not None
                after = [r for r in live if r.seq > picked.seq]
                unfinished = [r for r in after if r.state in (LineageState.PENDING, LineageState.RUNNING)]
                finished_later = [r for r in after if r.state is LineageState.FINISHED]
                if unfinished or finished_later:
                    newest = max(after, key=lambda r: r.seq)
                    raise InputError(
                        f"the newest finished study of the lineage of study {lineage_root}",
                        f"study {study_id}, followed by re-run #{newest.seq} ({newest.state.value})",
                        "enable from the newest finished study of the lineage",
                    )
                for r in after:  # cancelled or failed re-runs after the picked one: set aside
                    r.superseded = True
                    if r.study_id is not None:
                        set_aside.append(r.study_id)
            session.add(RerunSchedule(
                workspace_id=facts.workspace_id, workflow_id=facts.workflow_id, root_study_id=study_id,
                lineage_root_id=lineage_root, owner=owner.strip(), cadence_seconds=seconds,
                min_unseen_steps=minimum, budget_micro_usd=facts.budget_micro_usd,
                state=ScheduleState.ENABLED, enabled_at=at, last_slot=-1,
            ))
            session.flush()
    except IntegrityError:
        existing = [s for s in list_schedules(engine, lineage_root_id=lineage_root) if s.state is ScheduleState.ENABLED]
        which = f"schedule {existing[0].id}" if existing else "another schedule"
        cancel = words.cancel.format(id=existing[0].id if existing else "ID",
                                     study=existing[0].root_study_id if existing else lineage_root)
        raise ConflictError(
            f"expected no enabled schedule on the lineage of study {lineage_root}, got {which}. "
            f"Cancel it first ({cancel}), then enable again."
        ) from None
    for failed_study in set_aside:  # a failed study keeps its workflow's lock until cancelled
        port.cancel(failed_study)
    views = [s for s in list_schedules(engine, lineage_root_id=lineage_root) if s.state is ScheduleState.ENABLED]
    return views[0]


def cancel_schedule(engine: Engine, schedule_id: int, *, by: str, now: dt.datetime | None = None) -> ScheduleView:
    """Cancel a schedule (a re-run already running finishes; no new one starts)."""
    by = email(by, PERSON)
    with session_scope(engine) as session:
        row = session.get(RerunSchedule, schedule_id, with_for_update=True)
        if row is None:
            raise NotFoundError(f"expected an existing schedule id, got {schedule_id}. List them with `typestrict schedule status`.")
        if row.state is ScheduleState.ENABLED:
            row.state = ScheduleState.CANCELLED
            row.cancelled_at = now or utcnow()
            row.cancelled_by = by
        return _view(row)


def get_schedule(engine: Engine, schedule_id: int) -> ScheduleView:
    """One schedule; :class:`NotFoundError` naming the id when it does not exist."""
    with session_scope(engine) as session:
        row = session.get(RerunSchedule, schedule_id)
        if row is None:
            raise NotFoundError(f"expected an existing schedule id, got {schedule_id}. List them with `typestrict schedule status`.")
        return _view(row)


def list_schedules(
    engine: Engine, *, workspace_id: str | None = None, study_id: str | None = None, lineage_root_id: str | None = None,
    limit: int | None = None, offset: int = 0,
) -> list[ScheduleView]:
    """Schedules, newest first, optionally of one workspace, study (root) or lineage; ``limit``
    of them from ``offset`` (a console page's)."""
    q = select(RerunSchedule).order_by(RerunSchedule.id.desc())
    if workspace_id is not None:
        q = q.where(RerunSchedule.workspace_id == workspace_id)
    if study_id is not None:
        q = q.where((RerunSchedule.root_study_id == study_id) | (RerunSchedule.lineage_root_id == study_id))
    if lineage_root_id is not None:
        q = q.where(RerunSchedule.lineage_root_id == lineage_root_id)
    if limit is not None:
        q = q.limit(limit).offset(offset)
    with session_scope(engine) as session:
        return [_view(r) for r in session.execute(q).scalars().all()]


def count_schedules(engine: Engine, *, workspace_id: str, study_id: str | None = None,
                    newer_than: int | None = None) -> int:
    """How many schedules the workspace (or one study of it) has, turned off ones included (each
    turn on is a new one); only those newer than the schedule ``newer_than`` when given."""
    q = select(func.count()).select_from(RerunSchedule).where(RerunSchedule.workspace_id == workspace_id)
    if study_id is not None:
        q = q.where((RerunSchedule.root_study_id == study_id) | (RerunSchedule.lineage_root_id == study_id))
    if newer_than is not None:
        q = q.where(RerunSchedule.id > newer_than)
    with session_scope(engine) as session:
        return int(session.execute(q).scalar_one())


# --------------------------------------------------------------------------- ticks


@dataclass(frozen=True)
class TickResult:
    """One evaluation of one schedule.

    ``run_key`` is set when the tick fired (or re-requests a claimed re-run whose run was lost).
    """

    schedule_id: int
    slot: int
    outcome: TickOutcome
    message: str
    kind: SkipKind | None
    run_key: str | None
    entry_id: int | None


def _previous(session: Session, lineage_root: str) -> LineageRow:
    row = session.execute(
        select(LineageRow)
        .where(LineageRow.lineage_root_id == lineage_root, LineageRow.superseded.is_(False))
        .order_by(LineageRow.seq.desc())
    ).scalars().first()
    assert row is not None, "a schedule's lineage always has its root entry"
    return row


def tick_state(
    engine: Engine,
    port: StudiesPort,
    schedule: ScheduleView,
    *,
    now: dt.datetime,
    spend: SpendSource,
    workspaces: dict[str, WorkspaceStatus | None] | None = None,
) -> tuple[TickState, LineageRow]:
    """Gather the state one tick decides on (see :func:`~typestrict_pipeline.reruns.decide.decide_tick`).

    ``workspaces``: the workspace states already read by this tick (filled as they are read), so
    a tick over many schedules of one workspace reads its subscription and spend once; nothing a
    tick does (claims, records) changes them.
    """
    root = port.get(schedule.root_study_id)
    grid = port.get(schedule.lineage_root_id) if schedule.lineage_root_id != schedule.root_study_id else root
    # Liveness first: a study or backtest of the workflow whose process died is ended here
    # (interrupted), so "in flight" below is only ever said of a live one.
    in_flight = port.workflow_in_flight(schedule.workspace_id, schedule.workflow_id)
    with session_scope(engine) as session:
        prev = _previous(session, schedule.lineage_root_id)
        session.expunge(prev)
    if prev.state is LineageState.RUNNING and not prev.study_id and _set_aside_orphan(engine, prev.id, now):
        with session_scope(engine) as session:
            prev = _previous(session, schedule.lineage_root_id)
            session.expunge(prev)
    if prev.state is LineageState.RUNNING and prev.study_id:
        ran = port.get(prev.study_id)
        if ran is None or ran.outcome is not PreviousOutcome.IN_PROGRESS:
            # Its study is no longer in flight but its run did not record the end (the run's
            # process died, or the study was interrupted, cancelled or deleted meanwhile): the
            # entry ends here as its run would have ended it, never "in flight" for ever.
            _conclude(engine, port, prev, ran, now=now)
            with session_scope(engine) as session:
                prev = _previous(session, schedule.lineage_root_id)
                session.expunge(prev)
    with session_scope(engine) as session:
        last_seq = session.execute(
            select(func.max(LineageRow.seq)).where(LineageRow.lineage_root_id == schedule.lineage_root_id)
        ).scalar_one()
    if workspaces is None:
        ws = workspace_status(engine, schedule.workspace_id, now, spend)
    else:
        if schedule.workspace_id not in workspaces:
            workspaces[schedule.workspace_id] = workspace_status(engine, schedule.workspace_id, now, spend)
        ws = workspaces[schedule.workspace_id]
    if prev.state in (LineageState.PENDING, LineageState.RUNNING):
        outcome = PreviousOutcome.IN_PROGRESS
    elif prev.state is LineageState.FINISHED:
        facts = port.get(prev.study_id) if prev.study_id else None
        outcome = PreviousOutcome.NOT_FINISHED if facts is None else facts.outcome
    else:
        outcome = PreviousOutcome.NOT_FINISHED
    available = 0
    if grid is not None:
        data_end = port.data_end(grid)
        available = 0 if data_end is None else max(0, grid.index(data_end))
    state = TickState(
        lineage_root_id=schedule.lineage_root_id,
        next_seq=int(last_seq) + 1,  # set-aside positions are never reused
        root_exists=root is not None and grid is not None,
        root_budget_micro_usd=None if root is None else root.budget_micro_usd,
        subscription=SubscriptionState.EXPIRED if ws is None else ws.subscription,
        usage_budget_micro_usd=0 if ws is None else ws.usage_budget_micro_usd,
        usage_spent_micro_usd=0 if ws is None else ws.spent_micro_usd,
        previous=outcome,
        previous_study_id=prev.study_id or "",
        previous_holdout_end=prev.holdout_end,
        workflow_in_flight=in_flight,
        available_end=available,
        min_unseen_steps=schedule.min_unseen_steps,
        embargo_steps=0 if grid is None else grid.embargo_steps,
        workspace_id=schedule.workspace_id,
        workspace_set_up=ws is not None,
    )
    return state, prev


def _record(engine: Engine, schedule_id: int, at: dt.datetime, source: str, result: TickResult, *, off: bool) -> None:
    _record_many(engine, at, source, [(result, off)])


def _record_many(engine: Engine, at: dt.datetime, source: str, results: Sequence[tuple[TickResult, bool]]) -> None:
    """Record ticks (and their schedules' last outcome; ``off`` turns one off), in one transaction."""
    if not results:
        return
    with session_scope(engine) as session:
        for result, off in results:
            session.add(RerunTick(schedule_id=result.schedule_id, at=at, source=source, outcome=result.outcome,
                                  kind=None if result.kind is None else result.kind.value,
                                  message=result.message, run_key=result.run_key))
            values: dict[str, object] = {
                "last_tick_at": at, "last_outcome": result.outcome, "last_message": result.message,
            }
            if result.run_key is not None:
                values["last_run_key"] = result.run_key
            if off:
                values["state"] = ScheduleState.OFF
                values["off_reason"] = result.message
            session.execute(update(RerunSchedule).where(RerunSchedule.id == result.schedule_id).values(**values))


def _claim_slot(engine: Engine, schedule_id: int, slot: int) -> bool:
    return bool(_claim_slots(engine, [(schedule_id, slot)]))


def _claim_slots(engine: Engine, due: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Claim every ``(schedule, slot)`` of one tick in one transaction; the ones this tick won."""
    won: list[tuple[int, int]] = []
    with session_scope(engine) as session:
        for schedule_id, slot in due:
            done = session.execute(  # type: ignore[attr-defined]
                update(RerunSchedule)
                .where(RerunSchedule.id == schedule_id, RerunSchedule.state == ScheduleState.ENABLED,
                       RerunSchedule.last_slot < slot)
                .values(last_slot=slot)
            ).rowcount
            if done == 1:
                won.append((schedule_id, slot))
    return won


def evaluate_schedule(
    engine: Engine,
    port: StudiesPort,
    schedule_id: int,
    *,
    now: dt.datetime | None = None,
    spend: SpendSource,
    source: str = "manual",
    slot: int | None = None,
) -> TickResult | None:
    """Evaluate one schedule once: fire (claiming the next lineage position) or skip with the reason.

    With ``slot``, the evaluation first claims that cadence slot and returns None when another
    evaluator already took it. Without, it always evaluates (``typestrict schedule tick``).
    """
    at = now or utcnow()
    view = get_schedule(engine, schedule_id)
    if view.state is not ScheduleState.ENABLED:
        return None
    if slot is not None and not _claim_slot(engine, schedule_id, slot):
        return None
    result, off = _decide_claimed(engine, port, view, at, spend, -1 if slot is None else slot)
    _record(engine, schedule_id, at, source, result, off=off)
    return result


def _decide_claimed(
    engine: Engine,
    port: StudiesPort,
    view: ScheduleView,
    at: dt.datetime,
    spend: SpendSource,
    used_slot: int,
    workspaces: dict[str, WorkspaceStatus | None] | None = None,
) -> tuple[TickResult, bool]:
    """Decide one schedule whose slot is claimed (a fire claims its lineage position); not recorded.

    Returns the result and whether the decision turns the schedule off.
    """
    schedule_id = view.id
    state, prev = tick_state(engine, port, view, now=at, spend=spend, workspaces=workspaces)
    decision = decide_tick(state)
    if isinstance(decision, Skip):
        rerequest = None
        if (decision.kind is SkipKind.IN_FLIGHT and prev.state is LineageState.PENDING
                and prev.run_key is not None and at - prev.created_at >= LOST_CLAIM_AFTER):
            rerequest = prev.run_key  # claimed but never started: ask again (Dagster dedups the key)
        # a schedule that can never fire says so at each evaluation
        message = skip_message(decision, _outlook(port, view, state, decision, STORED_ADD_DATA))  # every door reads it
        result = TickResult(schedule_id, used_slot, TickOutcome.SKIPPED, message, decision.kind,
                            rerequest, prev.id if rerequest else None)
        return result, decision.turns_schedule_off
    assert isinstance(decision, Fire)
    entry_id, label = _claim_rerun(engine, port, view, decision, at)
    message = (f"Fired re-run #{decision.seq}: scored on {label} ({decision.windows.holdout.length} of "
               f"{decision.windows.unseen_steps} unseen steps). {lineage_hint(view.lineage_root_id)}")
    return TickResult(schedule_id, used_slot, TickOutcome.FIRED, message, None, decision.run_key, entry_id), False


def _outlook(port: StudiesPort, view: ScheduleView, state: TickState, decision: Fire | Skip,
             words: AddDataWords) -> Outlook:
    """What would make the schedule fire (see :func:`~typestrict_pipeline.reruns.timeline.outlook`),
    in the door's ``words``."""
    grid = port.get(view.lineage_root_id)
    if grid is None:
        return outlook(decision, state, None, time_of=lambda i: utcnow(), step=dt.timedelta(days=1),
                       workflow_id=view.workflow_id, words=words)
    return outlook(decision, state, port.data_source(grid), time_of=grid.time, step=grid.step,
                   workflow_id=view.workflow_id, words=words)


def schedule_timeline(
    engine: Engine, port: StudiesPort, view: ScheduleView, *, now: dt.datetime | None = None,
    spend: SpendSource, words: AddDataWords = CLI_ADD_DATA,
) -> Timeline:
    """The schedule's timeline: next evaluation, last decision, what would make it fire (what
    brings new steps in the door's ``words``: the CLI's commands by default).

    For an enabled schedule it asks, without recording anything, what a tick would decide now.
    """
    at = now or utcnow()
    enabled = view.state is ScheduleState.ENABLED
    when, due = next_evaluation(view.enabled_at, parse_cadence(view.cadence), view.last_slot, at)
    looking = None
    if enabled:
        state, _ = tick_state(engine, port, view, now=at, spend=spend)
        looking = _outlook(port, view, state, decide_tick(state), words)
    return Timeline(
        schedule_id=view.id, state=view.state, cadence=view.cadence,
        next_evaluation_at=when if enabled else None, due_now=due and enabled,
        last_evaluated_at=view.last_tick_at, last_outcome=view.last_outcome,
        last_message=view.last_message, outlook=looking,
    )


MAX_LISTED = 20
"""A sensor tick's reason lists at most this many schedules (the study_schedules asset has all)."""


def tick_reason(views: Sequence[ScheduleView], results: Sequence[TickResult], *, now: dt.datetime) -> str:
    """The reason text of one evaluation of the schedules, so the tick says it all: each skip
    evaluated now first (the product's message, then which schedule and when it is evaluated
    next), then every other enabled schedule's next evaluation and last decision.

    ``views`` are read after the results were recorded.

    >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    >>> v = ScheduleView(3, "demo", "wx", "7", "7", "ana@example.com", "1h", ScheduleState.ENABLED, 10,
    ...                  10_000, t0, None, None, None, t0, TickOutcome.SKIPPED,
    ...                  "Not enough unseen data yet: 1 of 10 steps", None, 0)
    >>> print(tick_reason([v], [], now=t0 + dt.timedelta(minutes=5)))
    No re-run schedule is due. Schedule 3 (study 7, every 1h): next evaluation 2026-01-01 01:00 UTC; last: Not enough unseen data yet: 1 of 10 steps
    >>> r = TickResult(3, 0, TickOutcome.SKIPPED, "Not enough unseen data yet: 1 of 10 steps", None, None, None)
    >>> print(tick_reason([v], [r], now=t0 + dt.timedelta(minutes=5)))
    Not enough unseen data yet: 1 of 10 steps (schedule 3: study 7, every 1h; next evaluation 2026-01-01 01:00 UTC)
    """
    by_id = {v.id: v for v in views}
    enabled = sorted((v for v in views if v.state is ScheduleState.ENABLED), key=lambda v: v.id)

    def nxt(v: ScheduleView) -> str:
        when, due = next_evaluation(v.enabled_at, parse_cadence(v.cadence), v.last_slot, now)
        return "due now" if due else format_when(when)

    said = []
    for r in sorted(results, key=lambda r: r.schedule_id)[:MAX_LISTED]:
        v = by_id.get(r.schedule_id)
        where = f"schedule {r.schedule_id}" if v is None else (
            f"schedule {v.id}: study {v.root_study_id}, every {v.cadence}"
            + (f"; next evaluation {nxt(v)}" if v.state is ScheduleState.ENABLED else f"; now {v.state.value}"))
        said.append(f"{r.message} ({where})" if r.outcome is TickOutcome.SKIPPED else f"Fired: {r.message} ({where})")
    done = {r.schedule_id for r in results}
    others = [f"Schedule {v.id} (study {v.root_study_id}, every {v.cadence}): next evaluation {nxt(v)}; "
              + (f"last: {v.last_message}" if v.last_message else "not evaluated yet")
              for v in enabled if v.id not in done][:max(0, MAX_LISTED - len(said))]
    more = len(enabled) + len([r for r in results if r.schedule_id not in {v.id for v in enabled}])
    listed = len(said) + len(others)
    tail = [f"and {more - listed} more (the study_schedules asset lists them all)"] if more > listed else []
    if not said:
        head = "No re-run schedule is due"
        if not enabled:
            return f"{head}: no schedule is enabled"
        return f"{head}. " + ". ".join(others + tail)
    text = "; ".join(said)
    if others:
        text += ". Not due: " + ". ".join(others)
    return text + ("" if not tail else ". " + tail[0])


def schedules_stamp(views: Sequence[ScheduleView]) -> str:
    """A short fingerprint of what the schedules' timelines are made of (changes when one is
    enabled, cancelled or evaluated), so their overview is recorded again only then.

    >>> schedules_stamp([])
    'e3b0c44298fc'
    """
    import hashlib

    text = "|".join(f"{v.id}:{v.state.value}:{v.last_slot}:{v.last_tick_at}:{v.last_message}" for v in views)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def timelines(engine: Engine, port: StudiesPort, views: Sequence[ScheduleView], *, now: dt.datetime,
              spend: SpendSource) -> list[tuple[ScheduleView, Timeline]]:
    """Each schedule with its timeline (what would make it fire asked of the enabled ones)."""
    out = []
    for v in views:
        try:
            out.append((v, schedule_timeline(engine, port, v, now=now, spend=spend)))
        except Exception as exc:  # one broken schedule must not hide the others
            out.append((v, Timeline(v.id, v.state, v.cadence, None, False, v.last_tick_at, v.last_outcome,
                                    f"{v.last_message} (timeline unavailable: {type(exc).__name__})", None)))
    return out


def schedules_reading(engine: Engine, port: StudiesPort, dataset: str, *, now: dt.datetime | None = None,
                      spend: SpendSource) -> list[tuple[ScheduleView, Timeline]]:
    """The enabled schedules whose lineage replays ``dataset``, each with its timeline (when it
    reads new rows, and what it will then decide)."""
    at = now or utcnow()
    out = []
    for view in list_schedules(engine):
        if view.state is not ScheduleState.ENABLED:
            continue
        root = port.get(view.lineage_root_id)
        if root is None or port.data_source(root).name != dataset:
            continue
        out.append((view, schedule_timeline(engine, port, view, now=at, spend=spend)))
    return sorted(out, key=lambda pair: pair[0].id)


def reading_text(view: ScheduleView, timeline: Timeline) -> str:
    """When one schedule reads a dataset's new rows, and what it will then decide.

    >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    >>> v = ScheduleView(3, "demo", "wx", "7", "7", "ana@example.com", "1h", ScheduleState.ENABLED, 5,
    ...                  10_000, t0, None, None, None, None, None, None, None, 0)
    >>> tl = Timeline(3, ScheduleState.ENABLED, "1h", t0 + dt.timedelta(hours=1), False, None, None, None,
    ...               Outlook("fires at its next evaluation: 10 unseen steps, 5 needed"))
    >>> reading_text(v, tl)
    'schedule 3 (re-runs study 7 every 1h) reads them at its next evaluation, 2026-01-01 01:00 UTC (every 1h): it fires at its next evaluation: 10 unseen steps, 5 needed'
    """
    o = timeline.outlook
    then = "" if o is None else (f". {o.never_fires}" if o.never_fires else f": it {o.would}")
    return (f"schedule {view.id} (re-runs study {view.root_study_id} every {view.cadence}) reads them at its "
            f"next evaluation, {timeline.next_evaluation_text()}{then}")


def lineage_hint(lineage_root_id: str) -> str:
    """How to open a lineage's panel, as every fired tick and re-run run says it.

    >>> lineage_hint("12")
    'Lineage: typestrict schedule lineage 12, or the study_lineage asset, partition 12'
    """
    return f"Lineage: typestrict schedule lineage {lineage_root_id}, or the study_lineage asset, partition {lineage_root_id}"


def _claim_rerun(
    engine: Engine, port: StudiesPort, view: ScheduleView, fire: Fire, at: dt.datetime
) -> tuple[int, str]:
    grid = port.get(view.lineage_root_id)
    assert grid is not None
    h = fire.windows.holdout
    label = _window_label(grid, grid.time(h.start), grid.time(h.end))
    try:
        with session_scope(engine) as session:
            row = LineageRow(
                lineage_root_id=view.lineage_root_id, seq=fire.seq, schedule_id=view.id, study_id=None,
                parent_study_id=fire.parent_study_id, run_key=fire.run_key, state=LineageState.PENDING,
                superseded=False, learn_end=fire.windows.learn_end, holdout_start=h.start, holdout_end=h.end,
                unseen_steps=fire.windows.unseen_steps,
                window_label=label,
                created_at=at,
            )
            session.add(row)
            session.flush()
            return int(row.id), label
    except IntegrityError:
        with session_scope(engine) as session:
            existing = session.execute(select(LineageRow).where(LineageRow.run_key == fire.run_key)).scalar_one()
            return int(existing.id), existing.window_label


def parse_cursor(cursor: str | None) -> dict[int, int]:
    """The sensor cursor: ``"id:slot,id:slot"`` → ``{id: slot}`` (the last slot evaluated per schedule).

    >>> parse_cursor("3:10,7:2"), parse_cursor(None)
    ({3: 10, 7: 2}, {})
    """
    if not cursor:
        return {}
    out: dict[int, int] = {}
    for part in cursor.split(","):
        sid, _, slot = part.partition(":")
        out[int(sid)] = int(slot)
    return out


def format_cursor(slots: dict[int, int]) -> str:
    """Inverse of :func:`parse_cursor`.

    >>> format_cursor({7: 2, 3: 10})
    '3:10,7:2'
    """
    return ",".join(f"{k}:{v}" for k, v in sorted(slots.items()))


def evaluate_due(
    engine: Engine,
    port: StudiesPort,
    *,
    now: dt.datetime | None = None,
    spend: SpendSource,
    source: str,
    cursor: dict[int, int] | None = None,
) -> tuple[list[TickResult], dict[int, int]]:
    """Evaluate every enabled schedule whose cadence slot has come (once per slot).

    Args:
        engine: the store.
        port: the studies area.
        now: the current time.
        spend: the workspace spend source.
        source: who evaluates (``sensor``, ``schedule``, ``cli``), recorded with each tick.
        cursor: last slot evaluated per schedule (the sensor's cursor); slots at or below it
            are not evaluated again.

    Returns:
        The results, and the updated cursor.
    """
    at = now or utcnow()
    seen = dict(cursor or {})
    with session_scope(engine) as session:
        rows = session.execute(
            select(RerunSchedule.id, RerunSchedule.enabled_at, RerunSchedule.cadence_seconds, RerunSchedule.last_slot)
            .where(RerunSchedule.state == ScheduleState.ENABLED)
            .order_by(RerunSchedule.id)
        ).all()
    due: list[tuple[int, int]] = []
    for sid, enabled_at, cadence, last_slot in rows:
        slot = current_slot(enabled_at, cadence, at)
        if slot < 0 or slot <= max(last_slot, seen.get(sid, -1)):
            continue
        due.append((sid, slot))
        seen[sid] = slot
    if not due:
        return [], seen
    # one transaction claims every due slot and one records every tick (not two per schedule);
    # a fire still claims its lineage position in its own transaction, as it must be unique
    won = _claim_slots(engine, due)
    views = _views(engine, [sid for sid, _ in won])
    decided: list[tuple[TickResult, bool]] = []
    workspaces: dict[str, WorkspaceStatus | None] = {}
    for sid, slot in won:
        try:
            decided.append(_decide_claimed(engine, port, views[sid], at, spend, slot, workspaces))
        except Exception as exc:  # one broken schedule must not stop the others
            decided.append((TickResult(sid, slot, TickOutcome.SKIPPED,
                                       f"Evaluation failed: {type(exc).__name__}: {exc}", None, None, None), False))
    _record_many(engine, at, source, decided)
    return [result for result, _ in decided], seen


def _views(engine: Engine, schedule_ids: Sequence[int]) -> dict[int, ScheduleView]:
    """The views of the given schedules, in one query."""
    if not schedule_ids:
        return {}
    with session_scope(engine) as session:
        rows = session.execute(select(RerunSchedule).where(RerunSchedule.id.in_(schedule_ids))).scalars().all()
        return {int(r.id): _view(r) for r in rows}


# --------------------------------------------------------------------------- executing a re-run


@dataclass(frozen=True)
class RerunRecord:
    """A lineage entry after :func:`execute_rerun`."""

    entry_id: int
    run_key: str
    seq: int
    state: LineageState
    study_id: str | None
    winner: str | None
    winner_changed: bool | None
    notified: bool
    detail: str


def _record_view(row: LineageRow, notified: bool, detail: str) -> RerunRecord:
    return RerunRecord(row.id, row.run_key or "", row.seq, row.state, row.study_id, row.winner,
                       row.winner_changed, notified, detail)


def _set_aside_orphan(engine: Engine, entry_id: int, now: dt.datetime) -> bool:
    """A ``RUNNING`` entry with no study whose claiming run's process is gone (it died between
    the claim and the record of its study) is set aside (``CANCELLED``, never shown), like an
    entry whose workflow was taken: it created nothing this schedule follows, and the next
    position fires with a new run key. A live claimer's entry is left to it. Returns whether it
    set the entry aside.
    """
    held = holder(engine, LeaseKind.RERUN, str(entry_id))
    if held is not None and held.alive(now):
        return False
    why = "no process holds it" if held is None else held.why_dead()
    with session_scope(engine) as session:
        changed = session.execute(  # type: ignore[attr-defined]
            update(LineageRow)
            .where(LineageRow.id == entry_id, LineageRow.state == LineageState.RUNNING,
                   LineageRow.study_id.is_(None))
            .values(state=LineageState.CANCELLED, superseded=True, finished_at=now,
                    error=f"released: its run ended before it created its study ({why})")
        ).rowcount
        release_in(session, LeaseKind.RERUN, str(entry_id))
    return bool(changed)


def execute_rerun(engine: Engine, port: StudiesPort, run_key: str, *, now: dt.datetime | None = None) -> RerunRecord:
    """Create and run the re-run a tick claimed; idempotent on ``run_key``.

    A second execution of a finished key returns it unchanged; a run that was interrupted after
    creating its study resumes that study (the studies area never re-runs finished work).
    """
    with session_scope(engine) as session:
        row = session.execute(select(LineageRow).where(LineageRow.run_key == run_key)).scalar_one_or_none()
        if row is None:
            raise NotFoundError(f"expected a claimed re-run with run key {run_key!r}, got none. It is created by a tick.")
        claimed = session.execute(  # type: ignore[attr-defined]
            update(LineageRow)
            .where(LineageRow.id == row.id, LineageRow.state == LineageState.PENDING)
            .values(state=LineageState.RUNNING)
        ).rowcount
        if claimed:  # this process holds the entry until its study is recorded (then the study's lease)
            take_in(session, LeaseKind.RERUN, str(row.id), force=True)
        session.refresh(row)
        session.expunge(row)
    if not claimed:
        if row.state is not LineageState.RUNNING or row.study_id is None:
            return _record_view(row, False, f"already {row.state.value.lower()}; nothing to do")
        study_id = row.study_id  # an interrupted run: resume its study
    else:
        study_id = None
    with session_scope(engine) as session:
        sched = session.get(RerunSchedule, row.schedule_id) if row.schedule_id is not None else None
        if sched is None:
            raise NotFoundError(f"expected the schedule of re-run {run_key!r}, got none.")
        owner, budget, root_id = sched.owner, sched.budget_micro_usd, sched.root_study_id
    parent = port.get(row.parent_study_id or "")
    grid = port.get(row.lineage_root_id)
    if parent is None or grid is None:
        _finish_entry(engine, row.id, state=LineageState.FAILED, error="the parent or root study no longer exists")
        with session_scope(engine) as session:
            failed = session.get(LineageRow, row.id)
            assert failed is not None
            return _record_view(failed, False, "failed: the parent or root study was deleted")
    if study_id is None:
        spec = RerunSpec(
            parent=parent, root=grid, holdout_start=grid.time(row.holdout_start),
            holdout_end=grid.time(row.holdout_end), holdout_steps=row.holdout_end - row.holdout_start,
            budget_micro_usd=budget, name=f"re-run #{row.seq} of study {row.lineage_root_id} (schedule {row.schedule_id}, root {root_id})",
        )
        try:
            study_id = port.create_rerun(spec)
        except ConflictError:
            # Another study took the workflow between the tick and this run: release the claim
            # (set aside, never shown: it created nothing); the next tick skips with "in flight"
            # and later fires the next position, with a new run key.
            with session_scope(engine) as session:
                session.execute(
                    update(LineageRow)
                    .where(LineageRow.id == row.id, LineageRow.state == LineageState.RUNNING)
                    .values(state=LineageState.CANCELLED, superseded=True, finished_at=utcnow(),
                            error=f"released: {MSG_IN_FLIGHT}")
                )
                release_in(session, LeaseKind.RERUN, str(row.id))
            return RerunRecord(row.id, run_key, row.seq, LineageState.CANCELLED, None, None, None, False, MSG_IN_FLIGHT)
        except Exception as exc:
            _finish_entry(engine, row.id, state=LineageState.FAILED, error=f"{type(exc).__name__}: {exc}")
            with session_scope(engine) as session:
                release_in(session, LeaseKind.RERUN, str(row.id))
            raise
        with session_scope(engine) as session:
            session.execute(update(LineageRow).where(LineageRow.id == row.id).values(study_id=study_id))
            release_in(session, LeaseKind.RERUN, str(row.id))
    try:
        port.run(study_id)
    except Exception as exc:
        port.mark_failed(study_id, f"{type(exc).__name__}: {exc}")
        _finish_entry(engine, row.id, state=LineageState.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    return _conclude(engine, port, row, port.get(study_id), now=now, parent=parent, owner=owner)


def _conclude(
    engine: Engine, port: StudiesPort, row: LineageRow, facts: StudyFacts | None, *,
    now: dt.datetime | None, parent: StudyFacts | None = None, owner: str | None = None,
) -> RerunRecord:
    """End a ``RUNNING`` entry from its study's end: ``FINISHED`` (scored, its winner recorded,
    the owner told once when the winner changed), else ``CANCELLED`` or ``FAILED`` with why.

    Its run calls it when the study returns; a tick calls it for an entry whose study is no
    longer in flight while the entry still says ``RUNNING`` (``parent`` and ``owner`` are then
    read here).
    """
    if facts is not None and facts.state == "INTERRUPTED":  # its process died: the re-run ended
        _finish_entry(engine, row.id, state=LineageState.FAILED,
                      error=f"the re-run's study {facts.study_id} was interrupted (its process is "
                            "gone); re-execute its run to resume it")
        return _record_view(_entry(engine, row.id), False, "the re-run study was interrupted (FAILED)")
    if facts is not None and facts.outcome is PreviousOutcome.FINISHED and parent is None:
        parent = port.get(row.parent_study_id or "")
    if facts is None or facts.outcome is not PreviousOutcome.FINISHED or parent is None:
        state = LineageState.CANCELLED if facts is not None and facts.state == "CANCELLED" else LineageState.FAILED
        if facts is None:
            error = "the re-run's study was deleted"
        elif facts.outcome is PreviousOutcome.FINISHED:
            error = "the parent study no longer exists"
        else:
            error = f"study ended {facts.state}"
        _finish_entry(engine, row.id, state=state, error=error)
        return _record_view(_entry(engine, row.id), False,
                            f"the re-run study ended without a winner ({state.value})")
    with session_scope(engine) as session:
        sched = session.get(RerunSchedule, row.schedule_id) if row.schedule_id is not None else None
        owner = owner if owner is not None or sched is None else sched.owner
        workspace = None if sched is None else sched.workspace_id
    changed = facts.winner_key != parent.winner_key
    _finish_entry(engine, row.id, state=LineageState.FINISHED, facts=facts, winner_changed=changed, at=now)
    notified = False
    if changed and owner is not None and workspace is not None:
        notified = _notify_winner_changed(engine, entry_id=row.id, owner=owner, workspace=workspace,
                                          parent=parent, facts=facts, seq=row.seq,
                                          lineage_root=row.lineage_root_id, now=now)
    return _record_view(_entry(engine, row.id), notified, "finished")


def _entry(engine: Engine, entry_id: int) -> LineageRow:
    with session_scope(engine) as session:
        row = session.get(LineageRow, entry_id)
        assert row is not None
        session.expunge(row)
        return row


def fail_claim(engine: Engine, run_key: str, reason: str) -> bool:
    """Mark a claimed re-run whose Dagster run ended before starting it as failed.

    Returns True when a ``PENDING`` claim was changed; the next tick then says "The previous
    study in the lineage did not finish".
    """
    with session_scope(engine) as session:
        changed = session.execute(  # type: ignore[attr-defined]
            update(LineageRow)
            .where(LineageRow.run_key == run_key, LineageRow.state == LineageState.PENDING)
            .values(state=LineageState.FAILED, error=reason[:2000], finished_at=utcnow())
        ).rowcount
    return bool(changed)


def _finish_entry(
    engine: Engine, entry_id: int, *, state: LineageState, facts: StudyFacts | None = None,
    winner_changed: bool | None = None, error: str | None = None, at: dt.datetime | None = None,
) -> None:
    values: dict[str, object] = {"state": state, "finished_at": at or utcnow(), "error": error}
    if facts is not None:
        values.update(winner=facts.winner_label, holdout_score=facts.holdout_score,
                      baseline_score=facts.baseline_score, holdout_se=facts.holdout_se,
                      winner_changed=winner_changed)
    with session_scope(engine) as session:
        session.execute(update(LineageRow).where(LineageRow.id == entry_id).values(**values))


def _notify_winner_changed(
    engine: Engine, *, entry_id: int, owner: str, workspace: str, parent: StudyFacts, facts: StudyFacts,
    seq: int, lineage_root: str, now: dt.datetime | None,
) -> bool:
    with session_scope(engine) as session:
        wanted = notification_enabled(session, owner, KIND_WINNER_CHANGED, workspace)
    if not wanted:
        return False
    score = "none" if facts.holdout_score is None else f"{facts.holdout_score:.4f}"
    body = (
        f"{TITLE_WINNER_CHANGED}.\n\n"
        f"Re-run #{seq} of study {lineage_root} (study {facts.study_id}, workflow {facts.workflow_id}) "
        f"picked a different winner from the previous run (study {parent.study_id}).\n"
        f"  previous winner: {parent.winner_label}\n"
        f"  new winner:      {facts.winner_label}\n"
        f"  holdout score:   {score}\n\n"
        f"See the lineage: typestrict schedule lineage {lineage_root}\n"
        "You get this because you set up the schedule; turn it off in the console's Settings → "
        f"Notifications (/console/settings/notifications) or with: typestrict schedule notifications {owner} --off"
    )
    return enqueue(engine, dedupe_key=f"winner-changed:{entry_id}", kind=KIND_WINNER_CHANGED, recipient=owner,
                   subject=TITLE_WINNER_CHANGED, body=body, now=now)


# --------------------------------------------------------------------------- lineage and status


def lineage_root_of(engine: Engine, study_id: str) -> str:
    """The lineage a study belongs to (its own id when it is a root or unscheduled)."""
    with session_scope(engine) as session:
        entry = _lineage_of(session, study_id)
        return study_id if entry is None else entry.lineage_root_id


def lineage_entries(engine: Engine, study_id: str) -> list[LineageEntry]:
    """Every study of the lineage ``study_id`` belongs to, in order (set-aside ones marked)."""
    root = lineage_root_of(engine, study_id)
    with session_scope(engine) as session:
        rows = session.execute(
            select(LineageRow).where(LineageRow.lineage_root_id == root).order_by(LineageRow.seq)
        ).scalars().all()
        rows = [r for r in rows if not (r.superseded and r.study_id is None)]  # released claims
        # A finished study is said as its leaderboard says it: "Budget reached" when a limit
        # stopped it (the panel said "Finished" under a leaderboard whose State said "Budget
        # reached", beside a holdout "not scored").
        ids = [int(r.study_id) for r in rows if r.state is LineageState.FINISHED and r.study_id
               and r.study_id.isdigit()]
        stopped = {str(i) for i in session.execute(
            select(StudyRow.id).where(StudyRow.id.in_(ids), StudyRow.state == StudyState.BUDGET_REACHED)
        ).scalars()} if ids else set()
        return [
            LineageEntry(
                seq=r.seq, study_id=r.study_id,
                state=(StudyState.BUDGET_REACHED.value if r.study_id in stopped else r.state.value)
                + (" (set aside)" if r.superseded else ""),
                window=r.window_label, winner=r.winner, holdout_score=r.holdout_score,
                baseline_score=r.baseline_score, holdout_se=r.holdout_se, winner_changed=r.winner_changed,
            )
            for r in rows
        ]


def lineage_text(engine: Engine, study_id: str) -> str:
    """The lineage panel of a study, as text."""
    entries = lineage_entries(engine, study_id)
    if not entries:
        return f"Study {study_id} has no lineage yet: enable a schedule on it to start one."
    return f"Lineage of study {lineage_root_of(engine, study_id)}\n" + render_panel(entries)


def recent_ticks(engine: Engine, schedule_id: int, limit: int = 5) -> list[RerunTick]:
    """The schedule's latest evaluations, newest first."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(RerunTick).where(RerunTick.schedule_id == schedule_id)
            .order_by(RerunTick.at.desc(), RerunTick.id.desc()).limit(limit)
        ).scalars().all()
        for r in rows:
            session.expunge(r)
        return list(rows)


@dataclass(frozen=True)
class StatusWords:
    """How a door says what to do in a schedule's status (:func:`status_text`): what brings new
    steps, what fixes the workspace's scheduled work, and, in a tick's stored reason (written
    once, in the CLI's words), how to open the lineage and who sets a workspace up. The CLI's
    leave the stored reason as it is.

    >>> v = ScheduleView(3, "acme", "wx", "7", "7", "ana@example.com", "1h", ScheduleState.ENABLED, 5,
    ...                  10_000, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), None, None, None, None, None, None, None, 0)
    >>> API_STATUS.stored("Fired re-run #1. " + lineage_hint("7"), v)
    'Fired re-run #1. Lineage: GET /v1/studies/7/lineage'
    """

    data: AddDataWords
    workspace: WorkspaceWords
    lineage: str | None = None
    """How the lineage of root study ``{root}`` is opened (None: the stored words)."""
    set_up: str | None = None
    """Who sets up a workspace never set up (None: the stored words, the operator's command)."""

    def stored(self, text: str, view: ScheduleView) -> str:
        """A tick's stored reason with its hints in this door's words."""
        if self.lineage is not None:
            text = text.replace(lineage_hint(view.lineage_root_id), self.lineage.format(root=view.lineage_root_id))
        if self.set_up is not None:
            text = text.replace(not_set_up_message(view.workspace_id), f"{MSG_WORKSPACE_NOT_SET_UP}: {self.set_up}")
        return text


CLI_STATUS = StatusWords(CLI_ADD_DATA, CLI_WORKSPACE)
"""``typestrict schedule status``: the operator's commands."""
API_STATUS = StatusWords(API_ADD_DATA, API_WORKSPACE, lineage="Lineage: GET /v1/studies/{root}/lineage",
                         set_up="the operator sets it up (a subscription and a usage budget)")
"""A schedule through the API (``ScheduleOut.status_text`` and ``last_message``)."""
CONSOLE_STATUS = StatusWords(CONSOLE_ADD_DATA, CONSOLE_WORKSPACE,
                             lineage="Lineage: the Lineage section of /console/studies/{root}",
                             set_up="the operator sets it up (a subscription and a usage budget)")
"""A schedule on the console's study page."""


def status_text(engine: Engine, view: ScheduleView, *, ticks: int = 5, port: StudiesPort | None = None,
                now: dt.datetime | None = None, words: StatusWords = CLI_STATUS) -> str:
    """What ``typestrict schedule status`` prints for one schedule: its settings, its timeline
    (next evaluation, last decision with its reason, what would make it fire) and recent ticks;
    what to do in the door's ``words`` (the API and the console pass their own)."""
    from typestrict_pipeline.study.limits import format_usd

    lines = [
        f"Schedule {view.id}: re-run study {view.root_study_id} every {view.cadence} — {view.state.value}",
        f"  workspace {view.workspace_id}, workflow {view.workflow_id}; set up by {view.owner} "
        f"on {view.enabled_at.strftime('%Y-%m-%d %H:%M UTC')}",
        f"  each re-run's USD budget: {format_usd(view.budget_micro_usd)}; "
        f"min unseen steps for a re-run: {view.min_unseen_steps}",
    ]
    if view.state is ScheduleState.ENABLED:
        from typestrict_pipeline.reruns.workspace import store_spend_source, workspace_warning

        warning = workspace_warning(engine, view.workspace_id, utcnow(), store_spend_source(engine),
                                    words=words.workspace)
        lines.append(f"  workspace: {warning}" if warning else
                     f"  workspace {view.workspace_id}: subscription active, usage budget left")
    if view.state is ScheduleState.CANCELLED:
        when = view.cancelled_at.strftime("%Y-%m-%d %H:%M UTC") if view.cancelled_at else "?"
        lines.append(f"  cancelled by {view.cancelled_by} on {when}")
    if view.state is ScheduleState.OFF:
        lines.append(f"  turned itself off: {view.off_reason}")
    if view.state is ScheduleState.ENABLED:
        from typestrict_pipeline.reruns.studies import StoreStudies
        from typestrict_pipeline.reruns.workspace import store_spend_source

        timeline = schedule_timeline(engine, port or StoreStudies(engine), view, now=now,
                                     spend=store_spend_source(engine), words=words.data)
        lines += timeline.lines()
    elif view.last_tick_at is None:
        lines.append("  not evaluated yet")
    else:
        label = "Skipped" if view.last_outcome is TickOutcome.SKIPPED else "Fired"
        lines.append(f"  {label} ({view.last_tick_at.strftime('%Y-%m-%d %H:%M UTC')}): {view.last_message}")
    history = recent_ticks(engine, view.id, ticks)
    if len(history) > 1:
        lines.append("  recent ticks:")
        for t in history:
            lines.append(f"    {t.at.strftime('%Y-%m-%d %H:%M:%S')}  {t.source:<8} {t.outcome.value:<7} {t.message}")
    return words.stored("\n".join(lines), view)
