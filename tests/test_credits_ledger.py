"""The credit ledger: every verdict kind reaches it exactly once, on both backends, under races."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Callable
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from typestrict_pipeline.credits import (
    CreditEntry,
    CreditLedger,
    EntryKind,
    InsufficientCreditsError,
    SettlementRequest,
    settle_training,
)
from typestrict_pipeline.errors import InputError, StoreError
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import Base, open_store, session_scope

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def ledger(store_url: str) -> CreditLedger:
    return CreditLedger(open_store(store_url))


def _entries(engine: Engine, training_id: str) -> Counter[EntryKind]:
    with session_scope(engine) as s:
        kinds = s.scalars(select(CreditEntry.kind).where(CreditEntry.training_id == training_id)).all()
    return Counter(EntryKind(k) for k in kinds)


# --- migrations ---------------------------------------------------------------------------------


def test_migration_creates_the_credits_tables_and_matches_the_models(store_url: str) -> None:
    engine = open_store(store_url)
    names = set(inspect(engine).get_table_names())
    assert {"credit_accounts", "credit_entries", "model_records"} <= names
    with engine.connect() as conn:
        heads = {r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))}
        assert "credits_0003" in heads
        ours = {"credit_accounts", "credit_entries", "model_records"}
        diff = [
            d for d in compare_metadata(MigrationContext.configure(conn), Base.metadata)
            if _table_of(d) in ours
        ]
    assert diff == [], diff
    engine.dispose()


def _table_of(diff: object) -> str | None:
    # compare_metadata yields tuples (op, object, ...) or lists of column modifications.
    item = diff[0] if isinstance(diff, list) else diff
    assert isinstance(item, tuple)
    for part in item[1:]:
        table = getattr(part, "table", None)
        if table is not None and hasattr(table, "name"):
            return str(table.name)
        if hasattr(part, "name") and hasattr(part, "columns"):
            return str(part.name)
        if isinstance(part, str):
            return part
    return None


def test_the_database_itself_refuses_a_second_settlement(store_url: str) -> None:
    """The guarantee is in the schema, not only in the code: a raw duplicate insert fails."""
    engine = open_store(store_url)
    CreditLedger(engine).grant("w", 2, reference="g", now=T0)
    CreditLedger(engine).settle("w", "t", Verdict.REFUND, reason="r", now=T0)
    with pytest.raises(IntegrityError), session_scope(engine) as s:
        s.add(CreditEntry(workspace_id="w", kind=EntryKind.SETTLEMENT, reference="t", training_id="t",
                          amount=1, balance_after=3, verdict="refund", reason="dup", created_at=T0))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text("UPDATE credit_accounts SET balance = -1 WHERE workspace_id = 'w'"))
    bad_rows: list[dict[str, Any]] = [
        # a second refund for the same training, under another reference
        dict(kind="settlement", reference="t-again", training_id="t", amount=1),
        # a refund of two credits
        dict(kind="settlement", reference="u", training_id="u", amount=2),
        # a spend that charges two
        dict(kind="spend", reference="v", training_id="v", amount=-2),
        # a grant that takes credits away
        dict(kind="grant", reference="g2", training_id=None, amount=-1),
    ]
    for row in bad_rows:
        with pytest.raises(IntegrityError), session_scope(engine) as s:
            s.add(CreditEntry(workspace_id="w", kind=EntryKind(row["kind"]), reference=row["reference"],
                              training_id=row["training_id"], amount=row["amount"], balance_after=3,
                              verdict=None, reason="bad", created_at=T0))
    engine.dispose()


# --- each verdict kind, sequentially, both backends ---------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "refunded"),
    [(Verdict.BEATS, False), (Verdict.KEPT, False), (Verdict.REFUND, True), (Verdict.FAILED, True)],
)
def test_each_verdict_kind_reaches_the_ledger_exactly_once(
    ledger: CreditLedger, verdict: Verdict, refunded: bool
) -> None:
    ledger.grant("ws", 5, reference="inv-1", now=T0)
    ledger.spend("ws", "tr", now=T0)
    assert ledger.balance("ws") == 4
    first = ledger.settle("ws", "tr", verdict, reason="because", now=T0)
    assert first.newly_settled and first.refunded is refunded and not first.spent_now
    for _ in range(3):  # re-materialization, retries
        again = ledger.settle("ws", "tr", verdict, reason="because", now=T0)
        assert not again.newly_settled and not again.verdict_changed
    expected = 5 - 1 + (1 if refunded else 0)
    assert ledger.balance("ws") == expected == ledger.entries_total("ws")
    assert _entries(ledger.engine, "tr") == Counter({EntryKind.SPEND: 1, EntryKind.SETTLEMENT: 1})
    settlement = [ln for ln in ledger.lines("ws", training_id="tr") if ln.kind is EntryKind.SETTLEMENT]
    assert settlement[0].amount == (1 if refunded else 0) and settlement[0].verdict is verdict


def test_failed_refunds_whatever_keep_if_loses_says_and_records_the_reason(store_url: str,
                                                                          tmp_path: Path) -> None:
    engine = open_store(store_url)
    CreditLedger(engine).grant("ws", 1, reference="g", now=T0)
    req = SettlementRequest("ws", "tr_f", Verdict.FAILED, "failed: out of GPU memory at epoch 3",
                            keep_if_loses=True, model_dir=tmp_path / "none", audit_json=None)
    result = settle_training(engine, req, now=T0)
    assert result.settlement.refunded and result.settlement.spent_now
    assert not result.model.delivered and result.model.keep_if_loses
    assert CreditLedger(engine).balance("ws") == 1
    lines = CreditLedger(engine).lines("ws", training_id="tr_f")
    assert [(ln.kind, ln.amount) for ln in lines] == [(EntryKind.SPEND, -1), (EntryKind.SETTLEMENT, 1)]
    assert lines[1].reason == "failed: out of GPU memory at epoch 3"
    engine.dispose()


def test_kept_is_delivered_without_refund(store_url: str, tmp_path: Path) -> None:
    engine = open_store(store_url)
    CreditLedger(engine).grant("ws", 1, reference="g", now=T0)
    req = SettlementRequest("ws", "tr_k", Verdict.KEPT, "did not beat Jev; kept",
                            keep_if_loses=True, model_dir=tmp_path, audit_json=b"{}")
    result = settle_training(engine, req, now=T0)
    assert not result.settlement.refunded and result.model.delivered and result.model.downloadable
    assert CreditLedger(engine).balance("ws") == 0
    engine.dispose()


def test_a_different_later_verdict_moves_no_credit(ledger: CreditLedger) -> None:
    ledger.grant("ws", 2, reference="g", now=T0)
    ledger.settle("ws", "tr", Verdict.BEATS, reason="beats", now=T0)
    later = ledger.settle("ws", "tr", Verdict.REFUND, reason="re-run", now=T0)
    assert later.verdict is Verdict.BEATS and later.requested_verdict is Verdict.REFUND
    assert later.verdict_changed and not later.refunded and not later.newly_settled
    assert ledger.balance("ws") == 1
    # The correction an operator can make is an explicit, referenced entry.
    ledger.adjust("ws", 1, reference="ticket-7", reason="verdict corrected to refund", training_id="tr")
    ledger.adjust("ws", 1, reference="ticket-7", reason="verdict corrected to refund", training_id="tr")
    assert ledger.balance("ws") == 2 == ledger.entries_total("ws")


def test_settlement_charges_an_unspent_training_once(ledger: CreditLedger) -> None:
    ledger.grant("ws", 1, reference="g", now=T0)
    s = ledger.settle("ws", "tr", Verdict.REFUND, reason="r", now=T0)
    assert s.spent_now and s.balance == 1
    assert [ln.balance_after for ln in s.lines] == [0, 1]


def test_spend_is_idempotent_and_refuses_an_overdraft(ledger: CreditLedger) -> None:
    ledger.grant("ws", 1, reference="g", now=T0)
    ledger.spend("ws", "a", now=T0)
    ledger.spend("ws", "a", now=T0)  # same training: no second charge, even at balance 0
    assert ledger.balance("ws") == 0
    with pytest.raises(InsufficientCreditsError, match=r"expected at least 1 credit\(s\) in workspace 'ws'.*got 0"):
        ledger.spend("ws", "b", now=T0)
    with pytest.raises(InsufficientCreditsError, match="has no credit account"):
        ledger.spend("nobody", "c", now=T0)
    with pytest.raises(InputError, match=r"expected a spend entry for training .z. before"):
        ledger.settle("ws", "z", Verdict.REFUND, reason="r", charge_if_unspent=False)


def test_grants_are_idempotent_per_reference(ledger: CreditLedger) -> None:
    ledger.grant("ws", 3, reference="inv-9", now=T0)
    ledger.grant("ws", 3, reference="inv-9", now=T0)
    assert ledger.balance("ws") == 3
    with pytest.raises(InputError, match="expected a positive whole number of credits, got 0"):
        ledger.grant("ws", 0, reference="x")
    with pytest.raises(InputError, match="timezone-aware"):
        ledger.grant("ws", 1, reference="y", now=dt.datetime(2026, 1, 1))


def test_a_reference_names_one_grant_or_adjustment(ledger: CreditLedger) -> None:
    """A reference reused for another workspace or another amount is refused (nothing added,
    the first entry named); the same workspace and amount repeat it and add nothing."""
    first = ledger.grant("demo", 20, reference="fuzz", now=T0)
    for ws, amount in (("other", 5), ("demo", 5), ("other", 20)):
        with pytest.raises(InputError, match=(
                rf"^expected a reference of its own for a grant of \+{amount} to workspace '{ws}', got 'fuzz', "
                rf"the reference of ledger entry #{first.id} \(grant \+20 to workspace 'demo', .*\)\. "
                r"Write this grant under a new reference .*`typestrict credits ledger demo`")):
            ledger.grant(ws, amount, reference="fuzz", now=T0)
    assert ledger.grant("demo", 20, reference="fuzz", now=T0).id == first.id  # a repeat: a no-op
    assert (ledger.balance("demo"), ledger.has_account("other"), len(ledger.lines("demo"))) == (20, False, 1)
    adj = ledger.adjust("demo", -2, reference="T-1", reason="fix", now=T0)
    with pytest.raises(InputError, match=r"for an adjustment of \+2 to workspace 'demo', got 'T-1'"):
        ledger.adjust("demo", 2, reference="T-1", reason="fix", now=T0)
    assert ledger.adjust("demo", -2, reference="T-1", reason="fix", now=T0).id == adj.id
    assert ledger.balance("demo") == 18 == ledger.entries_total("demo")


def test_a_training_belongs_to_one_workspace(ledger: CreditLedger) -> None:
    ledger.grant("a", 1, reference="ga", now=T0)
    ledger.grant("b", 1, reference="gb", now=T0)
    ledger.spend("a", "tr", now=T0)
    with pytest.raises(InputError, match="training 'tr' in workspace 'a'"):
        ledger.settle("b", "tr", Verdict.REFUND, reason="r", now=T0)


# --- truly concurrent writers on the real PostgreSQL server -------------------------------------


def _race(n: int, target: Callable[[int], object]) -> list[BaseException]:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.postgres
def test_concurrent_settlements_refund_exactly_once_on_postgres(pg_url: str) -> None:
    engine = open_store(pg_url)
    ledger = CreditLedger(engine)
    ledger.grant("ws", 10, reference="g", now=T0)
    trainings = [f"tr{i}" for i in range(4)]
    verdicts = [Verdict.REFUND, Verdict.FAILED, Verdict.BEATS, Verdict.KEPT]
    for tr in trainings:
        ledger.spend("ws", tr, now=T0)
    results: list[tuple[str, bool, Verdict]] = []
    lock = threading.Lock()

    def settle(i: int) -> None:
        tr = trainings[i % 4]
        s = ledger.settle("ws", tr, verdicts[i % 4], reason="race", now=T0)
        with lock:
            results.append((tr, s.newly_settled, s.verdict))

    errors = _race(16, settle)  # 4 racers per training, all released at once
    assert errors == []
    newly = Counter(tr for tr, was_new, _ in results if was_new)
    assert newly == Counter({tr: 1 for tr in trainings})
    for tr in trainings:
        assert _entries(engine, tr) == Counter({EntryKind.SPEND: 1, EntryKind.SETTLEMENT: 1})
    # 10 granted, 4 spent, 2 refunded (refund, failed)
    assert ledger.balance("ws") == 8 == ledger.entries_total("ws")
    # balance_after follows commit order: a gap-free running total
    lines = ledger.lines("ws")
    running = 0
    for ln in lines:
        running += ln.amount
        assert ln.balance_after == running
    engine.dispose()


@pytest.mark.postgres
def test_concurrent_first_settlements_with_conflicting_verdicts_on_postgres(pg_url: str) -> None:
    """Unspent training, racers disagreeing on the verdict: one spend, one settlement, exact."""
    engine = open_store(pg_url)
    ledger = CreditLedger(engine)
    ledger.grant("ws", 1, reference="g", now=T0)
    outcomes: list[Verdict] = []

    def settle(i: int) -> None:
        v = Verdict.REFUND if i % 2 else Verdict.BEATS
        outcomes.append(ledger.settle("ws", "tr", v, reason="race", now=T0).verdict)

    assert _race(8, settle) == []
    assert len(set(outcomes)) == 1  # every racer reports the same, final verdict
    final = outcomes[0]
    assert _entries(engine, "tr") == Counter({EntryKind.SPEND: 1, EntryKind.SETTLEMENT: 1})
    assert ledger.balance("ws") == (1 if final.refunds_credit else 0) == ledger.entries_total("ws")
    engine.dispose()


@pytest.mark.postgres
def test_concurrent_spends_never_overdraw_on_postgres(pg_url: str) -> None:
    engine = open_store(pg_url)
    ledger = CreditLedger(engine)
    ledger.grant("ws", 3, reference="g", now=T0)
    refused: list[str] = []

    def spend(i: int) -> None:
        try:
            ledger.spend("ws", f"t{i}", now=T0)
        except InsufficientCreditsError:
            refused.append(f"t{i}")

    assert _race(8, spend) == []
    assert len(refused) == 5
    assert ledger.balance("ws") == 0 == ledger.entries_total("ws")
    engine.dispose()


@pytest.mark.postgres
def test_concurrent_settlements_in_separate_processes_on_postgres(pg_url: str) -> None:
    """Processes, not threads: separate interpreters and connections racing on one training."""
    import multiprocessing as mp

    engine = open_store(pg_url)
    CreditLedger(engine).grant("ws", 1, reference="g", now=T0)
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_settle_in_child, args=(pg_url, start)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert _entries(engine, "tr") == Counter({EntryKind.SPEND: 1, EntryKind.SETTLEMENT: 1})
    assert CreditLedger(engine).balance("ws") == 1 == CreditLedger(engine).entries_total("ws")
    engine.dispose()


def _settle_in_child(url: str, start: EventType) -> None:
    engine = open_store(url)
    engine.dispose(close=False)  # never reuse the parent's pooled connections after fork
    start.wait()
    CreditLedger(engine).settle("ws", "tr", Verdict.REFUND, reason="race", now=T0)


def test_concurrent_settlements_on_sqlite(sqlite_url: str) -> None:
    """SQLite (the embedded default) serializes writers with BEGIN IMMEDIATE: same result."""
    engine = open_store(sqlite_url)
    ledger = CreditLedger(engine)
    ledger.grant("ws", 1, reference="g", now=T0)
    assert _race(6, lambda i: ledger.settle("ws", "tr", Verdict.FAILED, reason="x", now=T0)) == []
    assert _entries(engine, "tr") == Counter({EntryKind.SPEND: 1, EntryKind.SETTLEMENT: 1})
    assert ledger.balance("ws") == 1
    engine.dispose()


def test_run_transaction_gives_up_with_a_clear_message(sqlite_url: str) -> None:
    from typestrict_pipeline.credits import run_transaction

    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("ws", 1, reference="g", now=T0)

    def always_conflicts(session: Session) -> None:
        session.add(CreditEntry(workspace_id="ws", kind=EntryKind.GRANT, reference="g",
                                amount=1, balance_after=2, reason="dup", created_at=T0))
        session.flush()

    with pytest.raises(StoreError, match="uniqueness conflict every time"):
        run_transaction(engine, always_conflicts)
    engine.dispose()


def test_the_credits_branch_downgrades_and_upgrades_again(store_url: str) -> None:
    from alembic import command

    from typestrict_pipeline.store.engine import alembic_config, migration_lock

    engine = open_store(store_url)
    CreditLedger(engine).grant("w", 1, reference="g", now=T0)
    with migration_lock(), engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "credits@base")
    assert not {"credit_accounts", "credit_entries", "model_records"} & set(inspect(engine).get_table_names())
    with migration_lock(), engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "heads")
    assert CreditLedger(engine).balance("w") == 0  # fresh tables
    assert CreditLedger(engine).grant("w", 2, reference="g", now=T0).balance_after == 2
    engine.dispose()


@pytest.mark.postgres
def test_concurrent_settle_training_writes_one_model_record_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """What two concurrent `credit_settlement` runs do: ledger entries and model record together."""
    from typestrict_pipeline.credits import audit_bytes, list_models

    engine = open_store(pg_url)
    CreditLedger(engine).grant("ws", 1, reference="g", now=T0)
    req = SettlementRequest("ws", "tr", Verdict.FAILED, "failed: disk full", keep_if_loses=True,
                            model_dir=tmp_path / "tr" / "model", audit_json=b'{"v":1}\n')
    newly: list[bool] = []
    assert _race(8, lambda i: newly.append(settle_training(engine, req, now=T0).settlement.newly_settled)) == []
    assert sorted(newly) == [False] * 7 + [True]
    assert _entries(engine, "tr") == Counter({EntryKind.SPEND: 1, EntryKind.SETTLEMENT: 1})
    assert [m.model_id for m in list_models(engine, "ws")] == ["tr"]
    assert audit_bytes(engine, "tr") == b'{"v":1}\n'
    assert CreditLedger(engine).balance("ws") == 1 == CreditLedger(engine).entries_total("ws")
    engine.dispose()
