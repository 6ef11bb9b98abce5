"""Credits: cost of an exactly-once settlement, alone and under a race, on PostgreSQL and SQLite.

Run: ``.venv/bin/python -m bench.bench_credits_settle`` (needs PostgreSQL at 127.0.0.1:5432, user
postgres, database test; a scratch database is created and dropped).

Measured per backend:
- ``settle (charge + settlement)``: one ``CreditLedger.settle`` of a training never charged
  (spend + settlement + balance, one transaction), sequentially, N trainings.
- ``plain insert``: the straightforward alternative, one INSERT of a ledger row per training with
  no balance update, no lock, no uniqueness retry (what "just log it" costs).
- ``race``: 8 threads released together by a barrier settle the same training; wall time per
  race, and on PostgreSQL the number of rolled-back transactions (``pg_stat_database``), which
  shows how many losers really collided in the database (a loser that reads after the winner
  committed finds its row and has nothing to roll back).
"""

import datetime as dt
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.scratch import scratch_databases
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

N_SEQ = 200
N_RACES = 20
RACERS = 8
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _rollbacks(url: str, name: str) -> int:
    eng = create_engine(url)
    with eng.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        value = conn.execute(
            text("SELECT xact_rollback FROM pg_stat_database WHERE datname = :n"), {"n": name}
        ).scalar()
    eng.dispose()
    return int(value or 0)


def _measure(url: str, pg_name: str | None) -> dict[str, float]:
    engine = open_store(url)
    ledger = CreditLedger(engine)
    ledger.grant("bench", 10 * (N_SEQ + N_RACES), reference="g", now=T0)

    started = time.perf_counter()
    for i in range(N_SEQ):
        ledger.settle("bench", f"seq{i}", Verdict.REFUND, reason="bench", now=T0)
    settle_ms = (time.perf_counter() - started) * 1000 / N_SEQ

    started = time.perf_counter()
    for i in range(N_SEQ):
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO credit_entries (workspace_id, kind, reference, training_id, amount, "
                    "balance_after, verdict, reason, created_at) VALUES ('plain', 'settlement', :r, :r, "
                    "1, 0, 'refund', 'bench', :t)"
                ),
                {"r": f"plain{i}", "t": T0.replace(tzinfo=None)},
            )
    plain_ms = (time.perf_counter() - started) * 1000 / N_SEQ

    before = _rollbacks(url, pg_name) if pg_name else 0
    race_ms = 0.0
    for k in range(N_RACES):
        barrier = threading.Barrier(RACERS)

        def racer(tid: str = f"race{k}", b: threading.Barrier = barrier) -> None:
            b.wait()
            ledger.settle("bench", tid, Verdict.REFUND, reason="bench", now=T0)

        threads = [threading.Thread(target=racer) for _ in range(RACERS)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        race_ms += (time.perf_counter() - started) * 1000
    time.sleep(0.6)  # the statistics collector flushes about every 500 ms
    rollbacks = (_rollbacks(url, pg_name) - before) if pg_name else float("nan")
    granted = 10 * (N_SEQ + N_RACES)  # every training charged once and refunded once
    exact = ledger.balance("bench") == ledger.entries_total("bench") == granted
    engine.dispose()
    return {
        "settle_ms": settle_ms,
        "plain_ms": plain_ms,
        "race_ms": race_ms / N_RACES,
        "rollbacks": rollbacks,
        "exact": float(exact),
    }


def main() -> None:
    results: dict[str, dict[str, float]] = {}
    with scratch_databases("ts_bench", "settle") as (url,):
        results["postgresql"] = _measure(url, url.rsplit("/", 1)[1])
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = _measure(f"sqlite:///{Path(tmp) / 'store.db'}", None)
    print(f"{'backend':<11} {'settle ms':>10} {'plain ms':>9} {'ratio':>6} {'race ms':>8} "
          f"{'race/settle':>11} {'rollbacks':>10} exact")
    for backend, r in results.items():
        print(
            f"{backend:<11} {r['settle_ms']:>10.2f} {r['plain_ms']:>9.2f} "
            f"{r['settle_ms'] / r['plain_ms']:>6.2f} {r['race_ms']:>8.1f} "
            f"{r['race_ms'] / r['settle_ms']:>11.1f} {r['rollbacks']:>10.0f} {bool(r['exact'])}"
        )
    print(f"(N = {N_SEQ} sequential settlements; {N_RACES} races of {RACERS} threads on one training; "
          f"rollbacks: PostgreSQL transactions rolled back during the races, at most "
          f"{N_RACES * (RACERS - 1)} = one per losing racer; a loser that starts after the winner "
          f"committed reads its row and rolls nothing back)")


if __name__ == "__main__":
    main()
