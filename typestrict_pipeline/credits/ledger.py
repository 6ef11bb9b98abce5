"""The credit ledger: one credit per training, returned exactly once by a ``refund``/``failed`` verdict.

The ledger is append-only (``credit_entries``); each workspace's balance (``credit_accounts``) is
the running total of its entries, updated in the same transaction as every entry. The
exactly-once guarantees are enforced by the database, not by the caller:

* ``UNIQUE (kind, reference)`` on the entries: one ``spend`` and one ``settlement`` per training
  (the reference is the training id), one ``grant`` per idempotency key;
* every write first updates the workspace's account row, which serializes the writers of one
  workspace (a row lock on PostgreSQL, the database write lock on SQLite, taken up front with
  ``BEGIN IMMEDIATE``), and ``CHECK (balance >= 0)`` refuses an overdraft;
* a writer that loses a race gets an ``IntegrityError``, its whole transaction (balance change
  included) is rolled back, and it reads back the winner's entry instead.

The first settled verdict of a training is final: settling again with the same verdict is a
no-op, and with a different verdict it moves no credit and reports the disagreement
(``Settlement.verdict_changed``); a correction is an explicit ``adjust`` entry. See
``docs/credits.md`` for the model and the argument.

>>> import tempfile, pathlib
>>> from typestrict_pipeline.store import open_store
>>> db = pathlib.Path(tempfile.mkdtemp()) / "store.db"
>>> ledger = CreditLedger(open_store(f"sqlite:///{db}"))
>>> _ = ledger.grant("demo", 3, reference="invoice-1", reason="welcome credits")
>>> _ = ledger.spend("demo", "tr_1")
>>> s = ledger.settle("demo", "tr_1", Verdict.REFUND, reason="the model did not beat Jev")
>>> (s.refunded, s.newly_settled, ledger.balance("demo"))
(True, True, 3)
>>> ledger.settle("demo", "tr_1", Verdict.REFUND, reason="again").newly_settled
False
>>> ledger.balance("demo")
3
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.credits.tables import CreditAccount, CreditEntry, EntryKind
from typestrict_pipeline.errors import InputError, StoreError
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import session_scope, utcnow

__all__ = [
    "CreditLedger",
    "InsufficientCreditsError",
    "LedgerLine",
    "Settlement",
    "run_transaction",
    "settle_in_session",
]

T = TypeVar("T")

_MAX_ATTEMPTS = 6
_ID_MAX = 200


class InsufficientCreditsError(StoreError):
    """A workspace has fewer credits than the operation needs; the message says how to add some
    (the operator's command: ``typestrict credits grant``). ``missing`` is what was expected and
    got, without what to do, for a door whose reader cannot run that command (:meth:`at_door`).

    >>> err = InsufficientCreditsError("expected at least 1 credit(s) in workspace 'acme', got 0",
    ...                                fix="Add credits with `typestrict credits grant acme N --reference KEY`")
    >>> err.at_door("Ask the operator to add credits to this workspace")
    "expected at least 1 credit(s) in workspace 'acme', got 0. Ask the operator to add credits to this workspace"
    """

    def __init__(self, missing: str, *, fix: str) -> None:
        super().__init__(f"{missing}. {fix}")
        self.missing = missing
        self.fix = fix

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (a run's process) with its facts
        return _insufficient, (self.missing, self.fix)

    def at_door(self, fix: str) -> str:
        """The message with ``fix`` as what to do (the API's and the console's words)."""
        return f"{self.missing}. {fix}"


def _insufficient(missing: str, fix: str) -> InsufficientCreditsError:
    return InsufficientCreditsError(missing, fix=fix)


@dataclass(frozen=True)
class LedgerLine:
    """One ledger entry, as read back (immutable snapshot).

    Attributes:
        id: the entry's id (increasing in commit order within a workspace).
        workspace_id: the workspace whose balance it changed.
        kind: grant, spend, settlement or adjustment.
        reference: the training id (spend, settlement) or the caller's key (grant, adjustment).
        training_id: the training it belongs to, or None.
        amount: the change in credits (signed integer; 0 for a settlement that keeps it spent).
        balance_after: the workspace's balance right after this entry.
        verdict: the settled verdict (settlements only).
        reason: why, in words.
        created_at: when it was written (aware UTC).
        audit_sha256: the SHA-256 of the audit file a settlement settled (None otherwise, and
            for settlements written before the ledger recorded it).
    """

    id: int
    workspace_id: str
    kind: EntryKind
    reference: str
    training_id: str | None
    amount: int
    balance_after: int
    verdict: Verdict | None
    reason: str
    created_at: dt.datetime
    audit_sha256: str | None = None

    def describe(self) -> str:
        """One human-readable line, as the CLI and the Dagster metadata show it.

        >>> line = LedgerLine(7, "demo", EntryKind.SETTLEMENT, "tr_1", "tr_1", 1, 5,
        ...                   Verdict.REFUND, "the model did not beat Jev",
        ...                   dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
        >>> line.describe()
        '#7 2026-01-02T03:04:05Z settlement +1 -> 5  training=tr_1 verdict=refund  the model did not beat Jev'
        """
        when = self.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        parts = [f"#{self.id} {when} {self.kind.value} {self.amount:+d} -> {self.balance_after}"]
        extra = []
        if self.training_id is not None:
            extra.append(f"training={self.training_id}")
        elif self.kind in (EntryKind.GRANT, EntryKind.ADJUSTMENT):
            extra.append(f"reference={self.reference}")
        if self.verdict is not None:
            extra.append(f"verdict={self.verdict.value}")
        if self.audit_sha256 is not None:
            extra.append(f"audit_sha256={self.audit_sha256}")
        if extra:
            parts.append(" ".join(extra))
        parts.append(self.reason)
        return "  ".join(parts)


@dataclass(frozen=True)
class Settlement:
    """What settling a training's verdict did.

    Attributes:
        training_id: the training.
        workspace_id: its workspace.
        verdict: the verdict the ledger holds (the first one settled: final).
        requested_verdict: the verdict this call asked to settle.
        refunded: whether the settled verdict returned the credit.
        newly_settled: True only for the call that wrote the settlement entry.
        spent_now: True when this call also wrote the training's spend entry (it had not been
            charged when it was started).
        balance: the workspace's balance after the call.
        lines: the training's ledger entries (spend, settlement), in order.
        audit_sha256: the SHA-256 of the audit the ledger settled (None: none recorded).
        requested_audit_sha256: the SHA-256 of the audit this call brought (None: none).
    """

    training_id: str
    workspace_id: str
    verdict: Verdict
    requested_verdict: Verdict
    refunded: bool
    newly_settled: bool
    spent_now: bool
    balance: int
    lines: tuple[LedgerLine, ...]
    audit_sha256: str | None = None
    requested_audit_sha256: str | None = None

    @property
    def verdict_changed(self) -> bool:
        """A later verdict disagreed with the settled one (no credit moved; see the docs)."""
        return self.verdict != self.requested_verdict

    @property
    def audit_changed(self) -> bool:
        """This call brought an audit other than the one settled (nothing was accepted)."""
        return (self.audit_sha256 is not None and self.requested_audit_sha256 is not None
                and self.audit_sha256 != self.requested_audit_sha256)


def _line(entry: CreditEntry) -> LedgerLine:
    return LedgerLine(
        id=entry.id,
        workspace_id=entry.workspace_id,
        kind=EntryKind(entry.kind),
        reference=entry.reference,
        training_id=entry.training_id,
        amount=entry.amount,
        balance_after=entry.balance_after,
        verdict=Verdict(entry.verdict) if entry.verdict is not None else None,
        reason=entry.reason,
        created_at=entry.created_at,
        audit_sha256=entry.audit_sha256,
    )


_NAME = re.compile(r"[^\s/\\]+")
MAX_CREDITS_PER_ENTRY = 1_000_000
"""The most credits one grant or adjustment may move (a typo like 10**30 is refused)."""


def _check_id(what: str, value: str) -> str:
    """A workspace or training id is a name: printable, no spaces, no ``/`` or ``\\``, not ``.``
    or ``..`` (it is used in paths); a reference is any printable text. At most ``_ID_MAX``.

    >>> _check_id("workspace id", "../../etc")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a workspace id without spaces, '/' or '\\\\' that is not '.' or '..', got '../../etc'. Use a plain name such as 'acme-prod'.
    """
    if not isinstance(value, str) or not value.strip() or len(value) > _ID_MAX:
        raise InputError(
            f"a non-empty {what} of at most {_ID_MAX} characters",
            repr(value)[:80],
            f"pass the {what} as a plain string",
        )
    if what == "reference":
        if not value.isprintable():
            raise InputError(
                "a reference of printable characters", repr(value)[:80], "remove control characters"
            )
        return value
    if not _NAME.fullmatch(value) or value in (".", "..") or not value.isprintable():
        raise InputError(
            f"a {what} without spaces, '/' or '\\\\' that is not '.' or '..'",
            repr(value)[:80],
            "use a plain name such as 'acme-prod'",
        )
    return value


def _check_amount(amount: object, *, positive: bool) -> int:
    if isinstance(amount, int) and not isinstance(amount, bool):
        if abs(amount) > MAX_CREDITS_PER_ENTRY:
            raise InputError(
                f"at most {MAX_CREDITS_PER_ENTRY:,} credits in one entry",
                f"a number of {len(str(abs(amount)))} digits",
                "split it into several entries, or check the number",
            )
        if amount > 0 if positive else amount != 0:
            return amount
    if positive:
        raise InputError("a positive whole number of credits", repr(amount)[:40], "grant 1 or more")
    raise InputError("a non-zero whole number of credits", repr(amount)[:40], "pass e.g. 1 or -1")


def _check_now(now: dt.datetime) -> dt.datetime:
    if now.tzinfo is None:
        raise InputError(
            "a timezone-aware time", repr(now), "pass datetime.now(timezone.utc) or another aware value"
        )
    return now


def run_transaction(engine: Engine, work: Callable[[Session], T]) -> T:
    """Run ``work`` in one transaction, retried when it lost a uniqueness race.

    On SQLite the transaction starts with ``BEGIN IMMEDIATE`` so that writers queue on the
    database lock (``busy_timeout``) instead of failing on a stale snapshot. On PostgreSQL
    (READ COMMITTED) the writers of one workspace queue on its account row. An
    ``IntegrityError`` rolls the whole transaction back; ``work`` is then run again and sees the
    winner's rows.

    Raises:
        StoreError: still conflicting after several attempts.
    """
    last: IntegrityError | None = None
    for _attempt in range(_MAX_ATTEMPTS):
        try:
            with session_scope(engine) as session:
                if engine.dialect.name == "sqlite":
                    session.execute(text("BEGIN IMMEDIATE"))
                return work(session)
        except IntegrityError as exc:
            last = exc
    raise StoreError(
        f"a ledger write that commits within {_MAX_ATTEMPTS} attempts, got a uniqueness conflict "
        f"every time ({last.orig if last else '?'}). Retry later; report it if it persists"
    )


def _find(session: Session, kind: EntryKind, reference: str) -> CreditEntry | None:
    return session.scalars(
        select(CreditEntry).where(CreditEntry.kind == kind, CreditEntry.reference == reference)
    ).first()


def _once(session: Session, kind: EntryKind, *, workspace_id: str, reference: str,
          training_id: str | None, amount: int, reason: str, now: dt.datetime,
          create_account: bool) -> LedgerLine:
    """A grant's or an adjustment's entry, once per ``reference``: the entry it already is when
    the same workspace and amount repeat it (:func:`_repeat` refuses another), else a new one."""
    found = _find(session, kind, reference)
    if found is not None:
        return _line(_repeat(found, workspace_id, amount))
    return _line(_append(session, workspace_id=workspace_id, kind=kind, reference=reference,
                         training_id=training_id, amount=amount, verdict=None, reason=reason,
                         now=now, create_account=create_account))


def _repeat(found: CreditEntry, workspace_id: str, amount: int) -> CreditEntry:
    """The entry already under a grant's or an adjustment's reference, when this call repeats it
    (same workspace, same amount: it adds nothing); another workspace or amount is refused, so a
    reference names one entry and a reused one never hides a grant that was not made.

    >>> entry = CreditEntry(id=3, workspace_id="demo", kind=EntryKind.GRANT, reference="inv-7",
    ...                     amount=20, created_at=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
    >>> _repeat(entry, "demo", 20).id
    3
    >>> _repeat(entry, "other", 5)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a reference of its own for a grant of +5 to workspace 'other', got 'inv-7', the reference of ledger entry #3 (grant +20 to workspace 'demo', 2026-06-01T00:00:00Z). Write this grant under a new reference (e.g. its invoice id); see entry #3 with `typestrict credits ledger demo`; repeating that grant exactly (workspace 'demo', +20) adds nothing.
    """
    if found.workspace_id == workspace_id and found.amount == amount:
        return found
    kind = EntryKind(found.kind).value
    when = found.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise InputError(
        f"a reference of its own for a{'n' if kind[0] in 'aeiou' else ''} {kind} of {amount:+d} to "
        f"workspace {workspace_id!r}",
        f"{found.reference!r}, the reference of ledger entry #{found.id} ({kind} {found.amount:+d} to "
        f"workspace {found.workspace_id!r}, {when})",
        f"write this {kind} under a new reference (e.g. its {'invoice' if kind == 'grant' else 'ticket'} "
        f"id); see entry #{found.id} with `typestrict credits ledger {found.workspace_id}`; repeating "
        f"that {kind} exactly (workspace {found.workspace_id!r}, {found.amount:+d}) adds nothing",
    )


def _append(
    session: Session,
    *,
    workspace_id: str,
    kind: EntryKind,
    reference: str,
    training_id: str | None,
    amount: int,
    verdict: Verdict | None,
    reason: str,
    now: dt.datetime,
    create_account: bool,
    audit_sha256: str | None = None,
) -> CreditEntry:
    """Change the balance and append the entry, in the caller's transaction.

    The account row is updated first: that takes the workspace's lock, so entries of one
    workspace are written one at a time and ``balance_after`` follows commit order.
    """
    stmt = (
        update(CreditAccount)
        .where(CreditAccount.workspace_id == workspace_id)
        .values(balance=CreditAccount.balance + amount, updated_at=now)
        .returning(CreditAccount.balance)
    )
    if amount < 0:
        stmt = stmt.where(CreditAccount.balance + amount >= 0)
    balance = session.execute(stmt, execution_options={"synchronize_session": False}).scalar()
    if balance is None:
        current = session.scalar(
            select(CreditAccount.balance).where(CreditAccount.workspace_id == workspace_id)
        )
        if current is None and create_account and amount >= 0:
            session.add(
                CreditAccount(workspace_id=workspace_id, balance=amount, created_at=now, updated_at=now)
            )
            session.flush()  # a concurrent creator makes this an IntegrityError: retried
            balance = amount
        else:
            have = 0 if current is None else current
            raise InsufficientCreditsError(
                f"expected at least {-amount} credit(s) in workspace {workspace_id!r} for "
                f"{kind.value} {reference!r}, got {have}"
                + ("" if current is not None else " (the workspace has no credit account)"),
                fix=f"Add credits with `typestrict credits grant {workspace_id} N --reference KEY`",
            )
    entry = CreditEntry(
        workspace_id=workspace_id,
        kind=kind,
        reference=reference,
        training_id=training_id,
        amount=amount,
        balance_after=balance,
        verdict=verdict.value if verdict is not None else None,
        reason=reason,
        created_at=now,
        audit_sha256=audit_sha256,
    )
    session.add(entry)
    session.flush()  # UNIQUE (kind, reference): the loser of a race fails here and rolls back
    return entry


def _spend_in(session: Session, workspace_id: str, training_id: str, reason: str, now: dt.datetime
              ) -> tuple[CreditEntry, bool]:
    existing = _find(session, EntryKind.SPEND, training_id)
    if existing is not None:
        _same_workspace(existing, workspace_id, training_id)
        return existing, False
    try:
        return (
            _append(
                session,
                workspace_id=workspace_id,
                kind=EntryKind.SPEND,
                reference=training_id,
                training_id=training_id,
                amount=-1,
                verdict=None,
                reason=reason,
                now=now,
                create_account=False,
            ),
            True,
        )
    except InsufficientCreditsError:
        # A racing spend of the same training may have taken the last credit: then it is spent.
        existing = _find(session, EntryKind.SPEND, training_id)
        if existing is not None:
            _same_workspace(existing, workspace_id, training_id)
            return existing, False
        raise


def _same_workspace(entry: CreditEntry, workspace_id: str, training_id: str) -> None:
    if entry.workspace_id != workspace_id:
        raise InputError(
            f"training {training_id!r} in workspace {entry.workspace_id!r} (as its ledger says)",
            f"workspace {workspace_id!r}",
            "check the training's manifest: a training belongs to one workspace",
        )


def _training_lines(session: Session, training_id: str) -> tuple[LedgerLine, ...]:
    rows = session.scalars(
        select(CreditEntry).where(CreditEntry.training_id == training_id).order_by(CreditEntry.id)
    ).all()
    return tuple(_line(r) for r in rows)


def _balance(session: Session, workspace_id: str) -> int:
    value = session.scalar(
        select(CreditAccount.balance).where(CreditAccount.workspace_id == workspace_id)
    )
    return 0 if value is None else int(value)


def settle_in_session(
    session: Session,
    workspace_id: str,
    training_id: str,
    verdict: Verdict,
    *,
    reason: str,
    now: dt.datetime,
    charge_if_unspent: bool = True,
    audit_sha256: str | None = None,
) -> Settlement:
    """Settle a verdict inside the caller's transaction (see :meth:`CreditLedger.settle`).

    Use it through :func:`run_transaction` so that a lost race is retried. ``audit_sha256`` (the
    settled audit file's digest) is recorded on a new settlement line; a later call with another
    digest changes nothing and says so (``Settlement.audit_changed``).
    """
    verdict = Verdict(verdict)
    existing = _find(session, EntryKind.SETTLEMENT, training_id)
    spent_now = False
    newly = False
    if existing is None:
        spend = _find(session, EntryKind.SPEND, training_id)
        if spend is None:
            if not charge_if_unspent:
                raise InputError(
                    f"a spend entry for training {training_id!r} before its verdict is settled",
                    "none",
                    f"record the start with `typestrict credits spend {workspace_id} {training_id}`",
                )
            _, spent_now = _spend_in(session, workspace_id, training_id, "training registered", now)
        else:
            _same_workspace(spend, workspace_id, training_id)
        existing = _append(
            session,
            workspace_id=workspace_id,
            kind=EntryKind.SETTLEMENT,
            reference=training_id,
            training_id=training_id,
            amount=1 if verdict.refunds_credit else 0,
            verdict=verdict,
            reason=reason,
            now=now,
            create_account=False,
            audit_sha256=audit_sha256,
        )
        newly = True
    else:
        _same_workspace(existing, workspace_id, training_id)
    settled = Verdict(existing.verdict) if existing.verdict is not None else verdict
    if newly:
        from typestrict_pipeline.lifecycle.trainings import mark_settled_in

        mark_settled_in(session, training_id, settled, now=now)
    return Settlement(
        training_id=training_id,
        workspace_id=workspace_id,
        verdict=settled,
        requested_verdict=verdict,
        refunded=settled.refunds_credit,
        newly_settled=newly,
        spent_now=spent_now,
        balance=_balance(session, workspace_id),
        lines=_training_lines(session, training_id),
        audit_sha256=existing.audit_sha256,
        requested_audit_sha256=audit_sha256,
    )


class CreditLedger:
    """The credit ledger over one store (SQLite or PostgreSQL), independent of Dagster.

    Every method is one transaction and is safe to call concurrently from threads or processes
    (each thread should share the engine, not a session). Times are aware UTC; pass ``now`` to
    make a call deterministic.

    Args:
        engine: an engine on a store whose schema is current (``open_store``).
        clock: the time source used when ``now`` is not given.
    """

    def __init__(self, engine: Engine, clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.engine = engine
        self._clock = clock

    def _now(self, now: dt.datetime | None) -> dt.datetime:
        return _check_now(now if now is not None else self._clock())

    def grant(
        self,
        workspace_id: str,
        amount: int,
        *,
        reference: str,
        reason: str = "credits added",
        now: dt.datetime | None = None,
    ) -> LedgerLine:
        """Add ``amount`` credits to a workspace (creating its account), once per ``reference``.

        Args:
            workspace_id: the workspace (a plain string).
            amount: credits to add, a positive integer.
            reference: idempotency key (an invoice id...): a second grant with the same key,
                workspace and amount returns the first entry and adds nothing; with another
                workspace or amount it is refused (``InputError`` naming the first entry).
            reason: why, in words (shown in the ledger).
            now: the entry's time (default: the clock).

        Returns:
            The grant's ledger line.

        Raises:
            InputError: ``amount`` is not a positive integer, an id is empty, or ``reference``
                is another workspace's or another amount's grant.
        """
        _check_id("workspace id", workspace_id)
        _check_id("reference", reference)
        _check_amount(amount, positive=True)
        when = self._now(now)

        return run_transaction(self.engine, lambda session: _once(
            session, EntryKind.GRANT, workspace_id=workspace_id, reference=reference,
            training_id=None, amount=amount, reason=reason, now=when, create_account=True))

    def adjust(
        self,
        workspace_id: str,
        amount: int,
        *,
        reference: str,
        reason: str,
        training_id: str | None = None,
        now: dt.datetime | None = None,
    ) -> LedgerLine:
        """Record a manual correction (positive or negative), once per ``reference``.

        This is how an operator corrects a settlement after the fact: the settlement entry
        stays, and the correction is a new entry with its reason.

        Raises:
            InputError: ``amount`` is 0 or not an integer, the reason is empty, or ``reference``
                is another workspace's or another amount's adjustment (the same ones repeat it:
                nothing added).
            InsufficientCreditsError: a negative adjustment would overdraw the workspace.
        """
        _check_id("workspace id", workspace_id)
        _check_id("reference", reference)
        _check_amount(amount, positive=False)
        if not reason.strip():
            raise InputError("a reason for the adjustment", "an empty string", "say why in --reason")
        when = self._now(now)

        return run_transaction(self.engine, lambda session: _once(
            session, EntryKind.ADJUSTMENT, workspace_id=workspace_id, reference=reference,
            training_id=training_id, amount=amount, reason=reason, now=when,
            create_account=amount > 0))

    def spend(
        self,
        workspace_id: str,
        training_id: str,
        *,
        reason: str = "training started",
        now: dt.datetime | None = None,
    ) -> LedgerLine:
        """Take the one credit a training costs, once (idempotent per training).

        The training opens in ``awaiting_predictions`` with its deadline in the same transaction
        (:mod:`typestrict_pipeline.lifecycle.trainings`): a credit never waits without one. A
        training whose verdict has settled is never opened again by a repeated spend.

        Raises:
            InsufficientCreditsError: the workspace has no credit left.
            InputError: the training was already charged to another workspace.
        """
        _check_id("workspace id", workspace_id)
        _check_id("training id", training_id)
        when = self._now(now)

        def work(session: Session) -> LedgerLine:
            from typestrict_pipeline.lifecycle.trainings import open_in

            entry, new = _spend_in(session, workspace_id, training_id, reason, when)
            # its deadline starts now; a repeated spend of a training whose verdict settled opens
            # nothing (it opened it "awaiting predictions" with a new deadline, to expire later)
            if new or _find(session, EntryKind.SETTLEMENT, training_id) is None:
                open_in(session, workspace_id, training_id, now=when)
            return _line(entry)

        return run_transaction(self.engine, work)

    def settle(
        self,
        workspace_id: str,
        training_id: str,
        verdict: Verdict,
        *,
        reason: str,
        now: dt.datetime | None = None,
        charge_if_unspent: bool = True,
        audit_sha256: str | None = None,
    ) -> Settlement:
        """Bring a training's verdict to the ledger, exactly once.

        ``refund`` and ``failed`` return the credit (+1), ``beats`` and ``kept`` keep it spent
        (a 0 entry, so every verdict is on the ledger). The first settlement is final: calling
        again (a re-materialization, a retry, a concurrent run) returns it with
        ``newly_settled=False``; a different verdict moves nothing and sets ``verdict_changed``.

        Args:
            workspace_id: the training's workspace.
            training_id: the training (its model id too).
            verdict: the verdict to settle.
            reason: why, in words (the failure reason for ``failed``).
            now: the entry's time (default: the clock).
            charge_if_unspent: if the training was never charged (registered by its manifest
                only), charge it first in the same transaction; if False, refuse.
            audit_sha256: the SHA-256 of the audit file settled, recorded on the line.

        Returns:
            The settlement as the ledger holds it.

        Raises:
            InsufficientCreditsError: the training must be charged first and there is no credit.
            InputError: bad ids, or the training belongs to another workspace.
        """
        _check_id("workspace id", workspace_id)
        _check_id("training id", training_id)
        verdict = Verdict(verdict)
        when = self._now(now)
        return run_transaction(
            self.engine,
            lambda s: settle_in_session(
                s, workspace_id, training_id, verdict, reason=reason, now=when,
                charge_if_unspent=charge_if_unspent, audit_sha256=audit_sha256,
            ),
        )

    def workspaces(self) -> list[str]:
        """Every workspace that has a credit account, sorted."""
        with session_scope(self.engine) as session:
            return list(session.scalars(select(CreditAccount.workspace_id).order_by(CreditAccount.workspace_id)))

    def balance(self, workspace_id: str) -> int:
        """The workspace's balance in credits (0 for a workspace that has no account yet)."""
        with session_scope(self.engine) as session:
            return _balance(session, workspace_id)

    def has_account(self, workspace_id: str) -> bool:
        """Whether the workspace has a credit account (any entry ever)."""
        with session_scope(self.engine) as session:
            return session.get(CreditAccount, workspace_id) is not None

    def entries_total(self, workspace_id: str) -> int:
        """The sum of the workspace's ledger entries (always equal to :meth:`balance`)."""
        with session_scope(self.engine) as session:
            rows = session.scalars(
                select(CreditEntry.amount).where(CreditEntry.workspace_id == workspace_id)
            ).all()
            return int(sum(rows))

    def lines(self, workspace_id: str, *, training_id: str | None = None, limit: int | None = None,
              offset: int = 0) -> list[LedgerLine]:
        """The workspace's ledger entries in order, optionally only one training's; ``limit`` of
        them after the first ``offset`` (every one from ``offset`` when ``limit`` is None)."""
        with session_scope(self.engine) as session:
            stmt = select(CreditEntry).where(CreditEntry.workspace_id == workspace_id)
            if training_id is not None:
                stmt = stmt.where(CreditEntry.training_id == training_id)
            stmt = stmt.order_by(CreditEntry.id).offset(offset)
            return [_line(r) for r in session.scalars(stmt if limit is None else stmt.limit(limit)).all()]

    def count_lines(self, workspace_id: str) -> int:
        """How many ledger entries the workspace has."""
        with session_scope(self.engine) as session:
            return int(session.scalar(select(func.count()).select_from(CreditEntry)
                                      .where(CreditEntry.workspace_id == workspace_id)) or 0)

    def training_lines(self, training_id: str) -> list[LedgerLine]:
        """One training's entries (spend, settlement), in order."""
        with session_scope(self.engine) as session:
            return list(_training_lines(session, training_id))
