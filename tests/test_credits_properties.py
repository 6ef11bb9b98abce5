"""Ledger invariants over random sequences of grants, spends and settlements (hypothesis, SQLite).

Whatever the order and repetition of operations: the balance equals the sum of the entries and
the model's prediction of it; a training has at most one spend and one settlement; its settled
verdict is the first one asked; a refund is paid only for a training that was charged.
"""

from __future__ import annotations

import atexit
import datetime as dt
import itertools
import shutil
import tempfile
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from typestrict_pipeline.credits import CreditLedger, EntryKind, InsufficientCreditsError
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

T0 = dt.datetime(2026, 7, 1, tzinfo=dt.UTC)
TRAININGS = ["t0", "t1", "t2", "t3"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.integers(1, 3), st.sampled_from(["g0", "g1", "g2"])),
        st.tuples(st.just("spend"), st.sampled_from(TRAININGS)),
        st.tuples(st.just("settle"), st.sampled_from(TRAININGS), st.sampled_from(list(Verdict))),
    ),
    max_size=25,
)


_COUNTER = itertools.count()


@cache
def _engine() -> Engine:
    # One store for every example (migrating a fresh one each time costs ~0.4 s); each example
    # gets its own workspace and ids, so examples never see each other's entries.
    folder = Path(tempfile.mkdtemp(prefix="credits-prop-"))
    atexit.register(shutil.rmtree, folder, True)
    return open_store(f"sqlite:///{folder / 'store.db'}")


@settings(max_examples=60, deadline=None)
@given(sequence=ops)
def test_random_sequences_keep_the_ledger_exact(sequence: list[tuple[Any, ...]]) -> None:
    n = next(_COUNTER)
    ws = f"ws{n}"
    ledger = CreditLedger(_engine())
    # The model: a plain-Python ledger with the documented rules.
    balance, spent, settled = 0, set(), {}
    grants: dict[str, int] = {}
    for op in sequence:
        if op[0] == "grant":
            _, amount, key = op
            try:
                ledger.grant(ws, amount, reference=f"{ws}:{key}", now=T0)
            except InputError:  # the reference is another amount's grant: refused, nothing added
                assert grants.get(key, amount) != amount
                continue
            assert grants.get(key, amount) == amount
            if key not in grants:
                grants[key] = amount
                balance += amount
        elif op[0] == "spend":
            tid = f"{ws}:{op[1]}"
            try:
                ledger.spend(ws, tid, now=T0)
                refused = False
            except InsufficientCreditsError:
                refused = True
            if tid not in spent:
                assert refused == (balance < 1)
                if not refused:
                    spent.add(tid)
                    balance -= 1
        else:
            _, short, verdict = op
            tid = f"{ws}:{short}"
            try:
                s = ledger.settle(ws, tid, verdict, reason="r", now=T0)
            except InsufficientCreditsError:
                assert tid not in spent and balance < 1
                continue
            if tid not in settled:
                if tid not in spent:
                    spent.add(tid)
                    balance -= 1
                settled[tid] = verdict
                balance += 1 if verdict.refunds_credit else 0
                assert s.newly_settled
            else:
                assert not s.newly_settled
            assert s.verdict is settled[tid]
        assert ledger.balance(ws) == balance == ledger.entries_total(ws)
    lines = ledger.lines(ws)
    per = Counter((ln.kind, ln.reference) for ln in lines)
    assert all(n == 1 for n in per.values())
    assert {ln.reference for ln in lines if ln.kind is EntryKind.SETTLEMENT} <= {
        ln.reference for ln in lines if ln.kind is EntryKind.SPEND
    }
