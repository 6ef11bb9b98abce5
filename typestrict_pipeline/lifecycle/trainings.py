"""A training's life: its states, what moves each, and the deadlines that settle its credit.

The table (``docs/lifecycle.md``, "Trainings") and this module are one: :class:`TrainingState`
holds exactly the states the table names. Every transition is one conditional ``UPDATE ... WHERE
state IN (...)`` in the transaction that moves the money, so a state and the ledger never
disagree, two movers never both win, and no state waits for ever:

* ``awaiting_predictions`` (charged, split readable) ends by a valid submission (``judging``), a
  cancel (``cancelled``) or its deadline (``expired``);
* ``judging`` ends by its settlement (``settled``), a verdict run that refused the predictions for
  a reason the customer can fix (``failed``), or its deadline (``expired``);
* ``failed`` ends by a corrected submission (``judging``), a cancel or its deadline.

``expired`` and ``cancelled`` settle the credit exactly as the product page says for a training
that failed: it comes back, once (the ledger's ``UNIQUE (kind, reference)``), with the reason on
the ledger line, and an operator is notified (the outbox, :mod:`typestrict_pipeline.reruns.notify`).

>>> import tempfile, pathlib
>>> from typestrict_pipeline.store import open_store
>>> from typestrict_pipeline.credits import CreditLedger
>>> engine = open_store(f"sqlite:///{pathlib.Path(tempfile.mkdtemp()) / 's.db'}")
>>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
>>> _ = CreditLedger(engine).grant("acme", 1, reference="gift", now=t0)
>>> start_training(engine, "acme", "tr_1", now=t0).state
<TrainingState.AWAITING_PREDICTIONS: 'awaiting_predictions'>
>>> CreditLedger(engine).balance("acme")
0
>>> [e.training_id for e in expire_due(engine, now=t0 + DEFAULT_DEADLINES.predictions)]
['tr_1']
>>> training_status(engine, "tr_1").state, CreditLedger(engine).balance("acme")
(<TrainingState.EXPIRED: 'expired'>, 1)
>>> ledger_balance(engine).balanced
True
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from typestrict_pipeline.credits.ledger import _spend_in, run_transaction
from typestrict_pipeline.credits.reasons import settlement_reason
from typestrict_pipeline.credits.tables import CreditEntry, EntryKind
from typestrict_pipeline.errors import ConflictError, InputError, NotFoundError
from typestrict_pipeline.lifecycle.tables import TrainingRow
from typestrict_pipeline.refund.manifest import KeyWords, request_field
from typestrict_pipeline.refund.trained_on import API_TRAINED_ON, CLI_TRAINED_ON, TrainedOnWords
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import rows_by_id, session_scope, typestrict_home, utcnow

__all__ = [
    "API_WORDS",
    "CLI_WORDS",
    "DEFAULT_DEADLINES",
    "OPERATORS_ENV",
    "Deadlines",
    "Expired",
    "LedgerBalance",
    "TrainingState",
    "TrainingStatus",
    "TrainingWords",
    "begin_judging_in",
    "cancel_training",
    "expire_due",
    "judging_since",
    "ledger_balance",
    "mark_settled_in",
    "open_in",
    "record_refusal",
    "start_training",
    "statuses_of",
    "submitted_ids",
    "training_status",
]

T = TypeVar("T")

OPERATORS_ENV = "TYPESTRICT_OPERATORS"
"""Who is told when a deadline settles a training (default ``operators``: the outbox's file)."""
KIND_TRAINING_EXPIRED = "training_expired"


class TrainingState(enum.StrEnum):
    """Where a training is (``docs/lifecycle.md``, "Trainings").

    Attributes:
        AWAITING_PREDICTIONS: started and charged; its split can be read; its model's predictions
            are due by its deadline.
        JUDGING: predictions accepted (checked against the split); its verdict run decides, by
            its deadline.
        FAILED: its verdict run refused the predictions for a reason the customer can fix (the
            message says which); a corrected submission is accepted until its deadline.
        SETTLED: its verdict is on the ledger (beats, kept, refund or failed). An end.
        EXPIRED: a deadline passed first; the credit came back (settled as ``failed``). An end.
        CANCELLED: the customer cancelled it before judging; the credit came back. An end.
    """

    AWAITING_PREDICTIONS = "awaiting_predictions"
    JUDGING = "judging"
    FAILED = "failed"
    SETTLED = "settled"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """An end: nothing moves it any more."""
        return self in (TrainingState.SETTLED, TrainingState.EXPIRED, TrainingState.CANCELLED)

    @property
    def accepts_submission(self) -> bool:
        """Predictions may be posted (the first ones, or corrected ones)."""
        return self in (TrainingState.AWAITING_PREDICTIONS, TrainingState.FAILED)


OPEN_STATES = tuple(s.value for s in TrainingState if not s.is_terminal)
_SUBMITTABLE = tuple(s.value for s in TrainingState if s.accepts_submission)

_MAX_HOURS = 24 * 366


@dataclass(frozen=True)
class Deadlines:
    """How long each open state may last before the training expires and its credit comes back.

    Attributes:
        predictions: from the start (or from a refusal, in ``failed``) to the predictions.
            Default 7 days (``docs/lifecycle.md`` says why).
        verdict: from accepted predictions to the settled verdict. Default 24 hours.

    >>> Deadlines.from_env({"TYPESTRICT_VERDICT_DEADLINE_HOURS": "6"}).verdict
    datetime.timedelta(seconds=21600)
    >>> Deadlines.from_env({"TYPESTRICT_PREDICTIONS_DEADLINE_HOURS": "0"})
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: TYPESTRICT_PREDICTIONS_DEADLINE_HOURS: expected a whole number of hours from 1 to 8784, got '0'. Set it to e.g. 168 (7 days), or unset it for the default.
    """

    predictions: dt.timedelta = dt.timedelta(days=7)
    verdict: dt.timedelta = dt.timedelta(hours=24)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Deadlines:
        """From ``TYPESTRICT_PREDICTIONS_DEADLINE_HOURS`` and ``TYPESTRICT_VERDICT_DEADLINE_HOURS``."""
        env = os.environ if environ is None else environ
        out = cls()
        for name, attr in (("TYPESTRICT_PREDICTIONS_DEADLINE_HOURS", "predictions"),
                           ("TYPESTRICT_VERDICT_DEADLINE_HOURS", "verdict")):
            raw = env.get(name)
            if raw is None or raw == "":
                continue
            text = raw.strip()
            if not (text.isascii() and text.isdigit() and 1 <= int(text) <= _MAX_HOURS):
                raise InputError(f"a whole number of hours from 1 to {_MAX_HOURS}", repr(raw[:40]),
                                 "set it to e.g. 168 (7 days), or unset it for the default",
                                 file=name)
            out = cls(**{**out.__dict__, attr: dt.timedelta(hours=int(text))})
        return out


DEFAULT_DEADLINES = Deadlines()


@dataclass(frozen=True)
class TrainingStatus:
    """A training's lifecycle row, as read back."""

    training_id: str
    workspace_id: str
    state: TrainingState
    created_at: dt.datetime
    updated_at: dt.datetime
    deadline_at: dt.datetime | None
    submissions: int
    reason: str | None
    verdict: Verdict | None


def _status(row: TrainingRow) -> TrainingStatus:
    return TrainingStatus(
        training_id=row.training_id, workspace_id=row.workspace_id, state=TrainingState(row.state),
        created_at=row.created_at, updated_at=row.updated_at, deadline_at=row.deadline_at,
        submissions=row.submissions, reason=row.reason,
        verdict=Verdict(row.verdict) if row.verdict else None,
    )


def _when(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hours(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:g} h" if hours < 48 else f"{hours / 24:g} days"


# --- transitions -----------------------------------------------------------------------------


def start_training(
    engine: Engine,
    workspace_id: str,
    training_id: str,
    *,
    now: dt.datetime | None = None,
    deadlines: Deadlines | None = None,
    before_commit: Callable[[], None] | None = None,
) -> TrainingStatus:
    """Charge the training's credit and open it in ``awaiting_predictions``, in one transaction.

    ``before_commit`` (e.g. moving the training's prepared folder into place) runs inside the
    transaction after the charge: if it raises, the charge is rolled back with it, so a write
    that fails after the charge never keeps the credit (charge last, release always).

    Raises:
        InsufficientCreditsError: the workspace has no credit left.
    """
    at = now or utcnow()

    def work(session: Session) -> TrainingStatus:
        _spend_in(session, workspace_id, training_id, "training started", at)
        status = open_in(session, workspace_id, training_id, now=at, deadlines=deadlines)
        if before_commit is not None:
            before_commit()
        return status

    return run_transaction(engine, work)


def open_in(
    session: Session,
    workspace_id: str,
    training_id: str,
    *,
    now: dt.datetime,
    deadlines: Deadlines | None = None,
) -> TrainingStatus:
    """Open a charged training in ``awaiting_predictions`` with its deadline (caller's
    transaction); a training that already has a row keeps it."""
    row = session.get(TrainingRow, training_id)
    if row is None:
        limit = (deadlines or Deadlines.from_env()).predictions
        row = TrainingRow(
            training_id=training_id, workspace_id=workspace_id,
            state=TrainingState.AWAITING_PREDICTIONS.value, created_at=now, updated_at=now,
            deadline_at=now + limit, submissions=0, reason=None, verdict=None,
        )
        session.add(row)
        session.flush()
    return _status(row)


@dataclass(frozen=True)
class TrainingWords:
    """How a door names what to do next about a training, in its own words: the rules (which
    state refuses what) are this module's, one for every door; only the way to read a training,
    its verdict or the list is spelled per door. ``{id}`` is the training's id in the CLI's words
    and stays ``{id}`` (the route's parameter) in the API's.

    Attributes:
        read: how to read a training's state.
        verdict: how to read a settled training's verdict.
        find: how to find a training's id.
        trained_on: where a statement of what the model was trained on was written, and what
            to do when the split refuses it (:class:`~typestrict_pipeline.refund.trained_on.TrainedOnWords`).
        files: how to put a dataset in the workspace's files and name it for a training.
        resend: how to send corrected predictions after a refusal.
        test_rows: what to send instead of predictions past the row bound (the split's test
            examples only, and where the door lists them).
        keys: how a refusal of the training's fields names one (a manifest key in, the door's
            field out: :data:`~typestrict_pipeline.refund.manifest.KeyWords`); None: the
            manifest's key (a door that creates no training).
        credits: what to do when the workspace has no credit left for a training (credits are
            the operator's to grant: ``typestrict credits grant``, a command of the operator's CLI).
    """

    read: str
    verdict: str
    find: str
    trained_on: TrainedOnWords
    files: str
    resend: str
    test_rows: str = ""
    keys: KeyWords | None = None
    credits: str = "ask the operator to add credits to this workspace (typestrict credits grant)"

    def say(self, text: str, training_id: str) -> str:
        return text.replace("{training}", training_id)


API_WORDS = TrainingWords(
    read="read GET /v1/trainings/{id}",
    verdict="read its verdict with GET /v1/models/{id}",
    find="Check the id (list them with the API) and that you use this workspace's key",
    trained_on=API_TRAINED_ON,
    files="Upload the file with PUT /v1/files/{name} and name it in dataset.path",
    resend="correct them and post them again",
    test_rows="send the predictions of the split's test examples only (GET /v1/trainings/{id}/split "
              "lists them as test_ids, at most 2,000 per decision), not every row of the dataset",
    keys=request_field,
    credits="Ask the operator to add credits to this workspace (GET /v1/workspaces/{workspace} shows its balance)",
)
"""The API's words: its routes and its requests' JSON fields (the console has its own,
``console.pages.trainings.CONSOLE_WORDS``: its pages, fields and buttons)."""

CLI_WORDS = TrainingWords(
    read="see it with `typestrict training show {training}`",
    verdict="read its verdict with `typestrict training show {training}`",
    find="Check the id: `typestrict training list WORKSPACE` lists a workspace's trainings",
    trained_on=CLI_TRAINED_ON,
    files="Create trainings through the API or the console (`typestrict api`)",
    resend="correct them and run `typestrict training submit {training} PREDICTIONS.jsonl` again",
    test_rows="submit the predictions of the split's test examples only (`typestrict split` on the "
              "training's manifest shows them, at most 2,000 per decision), not every row of the dataset",
)
"""``typestrict training``'s words: commands and options, never routes or fields."""


def _refused_submission(training_id: str, state: TrainingState, reason: str | None,
                        words: TrainingWords = API_WORDS) -> ConflictError:
    if state is TrainingState.JUDGING:
        got = "its predictions already accepted and being judged"
        todo = f"Its verdict follows; {words.say(words.read, training_id)}"
    elif state is TrainingState.SETTLED:
        got = "it already settled"
        todo = words.say(words.verdict, training_id)
        todo = todo[:1].upper() + todo[1:]
    else:
        got = f"it {state.value}" + (f" ({reason})" if reason else "")
        todo = "Start a new training"
    return ConflictError(
        f"expected training {training_id!r} to await its predictions (or corrected ones after a "
        f"refusal), got {got}. {todo}"
    )


def begin_judging_in(
    session: Session,
    training_id: str,
    *,
    now: dt.datetime,
    deadlines: Deadlines = DEFAULT_DEADLINES,
    words: TrainingWords = API_WORDS,
) -> TrainingStatus | None:
    """Accept a submission: ``awaiting_predictions``/``failed`` → ``judging``, in the caller's
    transaction. None when the training has no lifecycle row (registered by its manifest only).
    A refusal says what to do in ``words`` (the caller's door).

    Raises:
        ConflictError: the training is in a state that accepts no submission.
    """
    row = session.get(TrainingRow, training_id, with_for_update=True)
    if row is None:
        return None
    moved = session.execute(
        update(TrainingRow)
        .where(TrainingRow.training_id == training_id, TrainingRow.state.in_(_SUBMITTABLE))
        .values(state=TrainingState.JUDGING.value, updated_at=now,
                deadline_at=now + deadlines.verdict, submissions=TrainingRow.submissions + 1,
                reason=None),
        execution_options={"synchronize_session": False},
    ).rowcount  # type: ignore[attr-defined]
    session.expire(row)
    row = session.get(TrainingRow, training_id)
    assert row is not None
    if not moved:
        raise _refused_submission(training_id, TrainingState(row.state), row.reason, words)
    return _status(row)


def check_accepts_submission(engine: Engine, training_id: str, words: TrainingWords = API_WORDS) -> None:
    """Refuse early (before any work) a submission to a training that cannot take one, saying
    what to do in ``words`` (the caller's door)."""
    found = training_status(engine, training_id)
    if found is not None and not found.state.accepts_submission:
        raise _refused_submission(training_id, found.state, found.reason, words)


def mark_settled_in(session: Session, training_id: str, verdict: Verdict, *, now: dt.datetime) -> None:
    """The verdict reached the ledger: an open training becomes ``settled`` (caller's transaction)."""
    session.execute(
        update(TrainingRow)
        .where(TrainingRow.training_id == training_id, TrainingRow.state.in_(OPEN_STATES))
        .values(state=TrainingState.SETTLED.value, verdict=Verdict(verdict).value, updated_at=now,
                deadline_at=None),
        execution_options={"synchronize_session": False},
    )


def record_refusal(
    engine: Engine,
    training_id: str,
    workspace_id: str,
    message: str,
    *,
    now: dt.datetime | None = None,
    deadlines: Deadlines = DEFAULT_DEADLINES,
) -> bool:
    """A verdict run refused the predictions for a reason the customer can fix: ``judging`` (or
    ``awaiting_predictions``, for a manifest written by hand) → ``failed`` with ``message``, due
    again by ``now + deadlines.predictions``.

    A training registered by its manifest only (never charged, no row yet) gets a ``failed`` row
    too, so its state says why. Returns whether the state changed.
    """
    at = now or utcnow()
    text = message.strip()[:4000] or "its predictions were refused"

    def work(session: Session) -> bool:
        row = session.get(TrainingRow, training_id, with_for_update=True)
        if row is None:
            session.add(TrainingRow(
                training_id=training_id, workspace_id=workspace_id,
                state=TrainingState.FAILED.value, created_at=at, updated_at=at,
                deadline_at=at + deadlines.predictions, submissions=1, reason=text, verdict=None))
            session.flush()
            return True
        return bool(session.execute(
            update(TrainingRow)
            .where(TrainingRow.training_id == training_id,
                   TrainingRow.state.in_([TrainingState.JUDGING.value,
                                          TrainingState.AWAITING_PREDICTIONS.value]))
            .values(state=TrainingState.FAILED.value, reason=text, updated_at=at,
                    deadline_at=at + deadlines.predictions),
            execution_options={"synchronize_session": False},
        ).rowcount)  # type: ignore[attr-defined]

    return run_transaction(engine, work)


def training_status(engine: Engine, training_id: str) -> TrainingStatus | None:
    """The training's lifecycle row, or None (a training registered by its manifest only)."""
    with session_scope(engine) as session:
        row = session.get(TrainingRow, training_id)
        return None if row is None else _status(row)


def statuses_of(engine: Engine, training_ids: Sequence[str]) -> dict[str, TrainingStatus]:
    """The lifecycle rows of ``training_ids`` that have one, by id, in one query (a list's page:
    :func:`training_status` each would be a query each)."""
    return rows_by_id(engine, TrainingRow.training_id, training_ids, _status)


def judging_since(engine: Engine) -> list[tuple[str, int, dt.datetime]]:
    """``(training id, submissions, judging since)`` of every training being judged."""
    with session_scope(engine) as session:
        rows = session.execute(select(TrainingRow.training_id, TrainingRow.submissions,
                                      TrainingRow.updated_at)
                               .where(TrainingRow.state == TrainingState.JUDGING.value)).all()
    return [(str(t), int(n), u) for t, n, u in rows]


def submitted_ids(engine: Engine, training_ids: Iterable[str]) -> set[str]:
    """Which of ``training_ids`` are being judged after a submission through the API or the CLI
    (their predictions were checked against the split when they were accepted)."""
    wanted = list(training_ids)
    if not wanted:
        return set()
    with session_scope(engine) as session:
        return set(session.scalars(select(TrainingRow.training_id).where(
            TrainingRow.training_id.in_(wanted), TrainingRow.state == TrainingState.JUDGING.value)))


def training_statuses(engine: Engine, workspace_id: str) -> dict[str, TrainingStatus]:
    """Every lifecycle row of a workspace, by training id."""
    with session_scope(engine) as session:
        rows = session.scalars(select(TrainingRow).where(TrainingRow.workspace_id == workspace_id))
        return {r.training_id: _status(r) for r in rows}


# --- ends that return the credit -------------------------------------------------------------


@dataclass(frozen=True)
class Expired:
    """A training a deadline (or a cancel) ended, and what it did to the credit."""

    training_id: str
    workspace_id: str
    was: TrainingState
    state: TrainingState
    reason: str
    refunded: bool


def _keep_if_loses(folder: Path) -> bool:
    for name in ("manifest.json", "api-draft.json"):
        try:
            doc = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        options = doc.get("options") if isinstance(doc, dict) else None
        return bool(options.get("keep_if_loses")) if isinstance(options, dict) else False
    return False


def _close_in(
    session: Session,
    row: TrainingRow,
    *,
    to: TrainingState,
    reason: str,
    now: dt.datetime,
    trainings_dir: Path,
) -> Expired | None:
    """Move an open training to ``to`` and return its credit, in the caller's transaction.

    None when another mover ended it first (the conditional update found no open row)."""
    from typestrict_pipeline.credits.models import (
        RetentionPolicy,
        SettlementRequest,
        settle_training_in,
    )

    was = TrainingState(row.state)
    conditions = [TrainingRow.training_id == row.training_id, TrainingRow.state.in_(OPEN_STATES)]
    if to is TrainingState.EXPIRED:
        conditions.append(TrainingRow.deadline_at <= now)
    moved = session.execute(
        update(TrainingRow).where(*conditions)
        .values(state=to.value, reason=reason, updated_at=now, deadline_at=None,
                verdict=Verdict.FAILED.value),
        execution_options={"synchronize_session": False},
    ).rowcount  # type: ignore[attr-defined]
    if not moved:
        return None
    charged = session.scalar(select(CreditEntry.id).where(
        CreditEntry.kind == EntryKind.SPEND, CreditEntry.reference == row.training_id)) is not None
    refunded = False
    if charged:
        folder = trainings_dir / row.training_id
        result = settle_training_in(session, SettlementRequest(
            workspace_id=row.workspace_id, training_id=row.training_id, verdict=Verdict.FAILED,
            reason=settlement_reason(Verdict.FAILED, failure_reason=reason),
            keep_if_loses=_keep_if_loses(folder), model_dir=folder / "model", audit_json=None,
        ), now=now, policy=RetentionPolicy())
        refunded = result.settlement.newly_settled and result.settlement.refunded
    return Expired(row.training_id, row.workspace_id, was, to, reason, refunded)


def _notify_in(session: Session, ended: Expired, now: dt.datetime) -> None:
    """Tell the operators, through the outbox, in the same transaction (once per training)."""
    from typestrict_pipeline.reruns.tables import OutboxMessage, OutboxState

    credit = "its credit came back" if ended.refunded else "no credit moved (it was never charged)"
    session.add(OutboxMessage(
        dedupe_key=f"{KIND_TRAINING_EXPIRED}:{ended.training_id}", kind=KIND_TRAINING_EXPIRED,
        recipient=os.environ.get(OPERATORS_ENV, "operators") or "operators",
        subject=f"Training {ended.training_id} expired; {credit}",
        body=(f"Training {ended.training_id} of workspace {ended.workspace_id} was "
              f"{ended.was.value} when its deadline passed: {ended.reason}.\n"
              f"It is now expired and {credit} (settled as failed on the ledger). Nothing is "
              "left to do; look at its verdict runs if this was not the customer's doing.\n"),
        state=OutboxState.PENDING, attempts=0, next_attempt_at=now, created_at=now,
    ))


def _expiry_reason(row: TrainingRow) -> str:
    deadline = row.deadline_at
    assert deadline is not None
    when = _when(deadline)
    state = TrainingState(row.state)
    if state is TrainingState.AWAITING_PREDICTIONS:
        return (f"expired: no predictions arrived by its deadline {when} "
                f"({_hours(deadline - row.created_at)} after it started)")
    if state is TrainingState.JUDGING:
        return (f"expired: its verdict did not complete by its deadline {when} "
                f"({_hours(deadline - row.updated_at)} after its predictions were accepted)")
    return (f"expired: no corrected predictions arrived by its deadline {when} after they were "
            f"refused ({(row.reason or '').strip()[:500]})")


def expire_due(
    engine: Engine,
    *,
    now: dt.datetime | None = None,
    training_ids: Iterable[str] | None = None,
    trainings_dir: Path | None = None,
    limit: int = 500,
) -> list[Expired]:
    """End every open training whose deadline has passed: ``expired``, its credit back, once.

    Each training is its own transaction (a conditional update, the settlement, the operators'
    notification), so a crash between two leaves each one either untouched or fully ended, and
    two sweeps at once end each training once. ``training_ids`` limits the sweep (the API checks
    the one training it is about to show).
    """
    at = now or utcnow()
    folder = trainings_dir or typestrict_home() / "trainings"
    with session_scope(engine) as session:
        stmt = select(TrainingRow.training_id).where(
            TrainingRow.state.in_(OPEN_STATES), TrainingRow.deadline_at <= at)
        if training_ids is not None:
            stmt = stmt.where(TrainingRow.training_id.in_(list(training_ids)))
        due = list(session.scalars(stmt.order_by(TrainingRow.deadline_at).limit(limit)))
    out: list[Expired] = []
    for tid in due:
        def work(session: Session, tid: str = tid) -> Expired | None:
            row = session.get(TrainingRow, tid, with_for_update=True)
            if row is None or row.state not in OPEN_STATES or row.deadline_at is None \
                    or row.deadline_at > at:
                return None
            ended = _close_in(session, row, to=TrainingState.EXPIRED, reason=_expiry_reason(row),
                              now=at, trainings_dir=folder)
            if ended is not None:
                _notify_in(session, ended, at)
            return ended

        ended = _locked(engine, work)
        if ended is not None:
            out.append(ended)
    return out


def _locked(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work`` in one ledger transaction (SQLite: the write lock taken first)."""
    return run_transaction(engine, work)


def cancel_training(
    engine: Engine,
    workspace_id: str,
    training_id: str,
    *,
    now: dt.datetime | None = None,
    trainings_dir: Path | None = None,
    words: TrainingWords = API_WORDS,
) -> Expired:
    """The customer cancels a training before it is judged: ``cancelled``, its credit back.
    A refusal says what to do in ``words`` (the caller's door).

    Raises:
        NotFoundError: no such training in this workspace.
        ConflictError: it is being judged, or already ended.
    """
    at = now or utcnow()
    folder = trainings_dir or typestrict_home() / "trainings"

    def work(session: Session) -> Expired:
        row = session.get(TrainingRow, training_id, with_for_update=True)
        if row is None or row.workspace_id != workspace_id:
            raise NotFoundError(
                f"expected a training with id {training_id[:200]!r} in this workspace, got none. "
                f"{words.find}")
        state = TrainingState(row.state)
        if state is TrainingState.JUDGING or state.is_terminal:
            raise ConflictError(
                f"expected training {training_id!r} awaiting its predictions (or refused ones) to "
                f"cancel, got it {state.value}. "
                + ("Its verdict follows on its own; a refund comes back by itself"
                   if state is TrainingState.JUDGING else "Nothing is left to cancel"))
        ended = _close_in(session, row, to=TrainingState.CANCELLED,
                          reason=f"cancelled by the customer while {state.value}", now=at,
                          trainings_dir=folder)
        assert ended is not None  # the row was read under its lock in an open state
        return ended

    return _locked(engine, work)


# --- the invariant ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerBalance:
    """The ledger's training entries against the trainings' states.

    Balanced when ``spends == settlements + open`` and every open training (charged, not settled)
    is in an open state with a deadline: no credit waits on anything but a clock.
    """

    spends: int
    settlements: int
    open_trainings: tuple[tuple[str, str, dt.datetime | None], ...]
    without_deadline: tuple[str, ...] = field(default=())

    @property
    def balanced(self) -> bool:
        return (self.spends == self.settlements + len(self.open_trainings)
                and not self.without_deadline)

    def describe(self) -> str:
        """``spends 5 = settlements 4 + open 1; every open training has a deadline``."""
        head = (f"spends {self.spends} {'=' if self.spends == self.settlements + len(self.open_trainings) else '!='} "
                f"settlements {self.settlements} + open {len(self.open_trainings)}")
        if self.without_deadline:
            return head + f"; open without a deadline: {', '.join(self.without_deadline[:10])}"
        return head + "; every open training has a deadline"


def ledger_balance(engine: Engine, workspace_id: str | None = None) -> LedgerBalance:
    """Check the invariant over the whole store (or one workspace)."""
    with session_scope(engine) as session:
        def refs(kind: EntryKind) -> set[str]:
            stmt = select(CreditEntry.reference).where(CreditEntry.kind == kind)
            if workspace_id is not None:
                stmt = stmt.where(CreditEntry.workspace_id == workspace_id)
            return set(session.scalars(stmt))

        spent, settled = refs(EntryKind.SPEND), refs(EntryKind.SETTLEMENT)
        open_ids = sorted(spent - settled)
        rows = {r.training_id: r for r in session.scalars(
            select(TrainingRow).where(TrainingRow.training_id.in_(open_ids)))} if open_ids else {}
        n_settled = session.scalar(
            select(func.count()).select_from(CreditEntry).where(
                CreditEntry.kind == EntryKind.SETTLEMENT,
                *([CreditEntry.workspace_id == workspace_id] if workspace_id is not None else [])))
    opened = tuple((t, rows[t].state if t in rows else "unknown",
                    rows[t].deadline_at if t in rows else None) for t in open_ids)
    missing = tuple(t for t, state, deadline in opened
                    if deadline is None or state not in OPEN_STATES)
    return LedgerBalance(len(spent), int(n_settled or 0), opened, missing)
