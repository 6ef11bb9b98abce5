"""Demo part "credits": the ledger after the refund part, then retention and audits over time.

1. For every demo training the refund part settled (``credit_settlement`` runs in ``verdict_job``),
   print its verdict, the workspace's balance and the training's ledger lines, read from the
   store the refund part used (``TYPESTRICT_STORE_URL`` / ``TYPESTRICT_HOME`` as it left them,
   else a ``store.db`` under the demo folder).
2. A walk through the credit rules on a scratch store under ``<root>/credits`` (so the refund
   part's models are left alone): the four verdict kinds settled, each twice and then eight
   times at once from threads (one refund each, never two), the retention sweep at day 29 and
   day 30 (explicit times, no waiting) and the audit served byte-identical after the files
   expired. The judgements there are real rule outputs on seeded synthetic decisions (seeds 11 to
   14), labelled as such.
"""

import datetime as dt
import os
import threading
from pathlib import Path

from typestrict_pipeline.credits import (
    CreditLedger,
    ModelState,
    SettlementRequest,
    audit_bytes,
    get_model,
    list_models,
    settle_training,
    settlement_reason,
    sweep_retention,
)
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.rule import TrainingJudgement, failed_training, judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import default_store_url, open_store, typestrict_home


def _refund_part_store(root: Path) -> str | None:
    if os.environ.get("TYPESTRICT_STORE_URL") or os.environ.get("TYPESTRICT_HOME"):
        return default_store_url()
    found = sorted(root.rglob("store.db"))
    found = [p for p in found if "credits" not in p.relative_to(root).parts]
    return f"sqlite:///{found[0]}" if found else None


def _print_refund_trainings(root: Path) -> int:
    """Print the refund part's ledger; return how many checks failed (balance, audits)."""
    url = _refund_part_store(root)
    print("-- The refund part's trainings on the ledger --")
    if url is None:
        print("(no store from the refund part found; nothing settled there)")
        return 0
    bad = 0
    engine = open_store(url)
    try:
        ledger = CreditLedger(engine)
        workspaces = ledger.workspaces()
        if not workspaces:
            print(f"(the store {engine.url.render_as_string(hide_password=True)} has no credit account yet)")
        for ws in workspaces:
            bad += ledger.balance(ws) != ledger.entries_total(ws)
            print(f"workspace {ws}: balance {ledger.balance(ws)} credits "
                  f"(= sum of its {len(ledger.lines(ws))} entries: {ledger.entries_total(ws)})")
            for line in ledger.lines(ws):
                if line.training_id is None:
                    print(f"  {line.describe()}")
            for model in list_models(engine, ws):
                audit_file = typestrict_home() / "audits" / f"{model.model_id}.json"
                same = (model.audit_sha256 is not None and audit_file.is_file()
                        and audit_bytes(engine, model.model_id) == audit_file.read_bytes())
                bad += model.audit_sha256 is not None and not same
                print(f"  training {model.model_id}: verdict {model.verdict.value}, "
                      f"{'delivered' if model.delivered else 'not delivered'}, files until "
                      f"{model.expires_at:%Y-%m-%d}, audit sha256 {(model.audit_sha256 or 'none')[:12]} "
                      f"(`typestrict audit {model.model_id}` = {audit_file.name}: {same})")
                for line in ledger.lines(ws, training_id=model.model_id):
                    print(f"    {line.describe()}")
    finally:
        engine.dispose()
    return bad


def _judgement(verdict: Verdict, seed: int) -> TrainingJudgement:
    if verdict is Verdict.FAILED:
        return failed_training("the trainer ran out of GPU memory at epoch 3", keep_if_loses=True)
    good = verdict is Verdict.BEATS
    data = synthetic_decision(seed=seed, n=300, n_answers=3,
                              model_skill=2.0 if good else 0.3, jev_skill=0.3 if good else 2.0)
    return judge([data], keep_if_loses=verdict is Verdict.KEPT)


def _walkthrough(root: Path) -> int:
    print("\n-- Credit rules, on a scratch store (seeded synthetic decisions) --")
    home = root / "credits"
    trainings = home / "trainings"
    engine = open_store(f"sqlite:///{home / 'store.db'}")
    ledger = CreditLedger(engine)
    t0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)
    ledger.grant("acme", 5, reference="invoice-0001", reason="5 credits bought", now=t0)
    plan = [("acme-beats", Verdict.BEATS, 11), ("acme-kept", Verdict.KEPT, 12),
            ("acme-refund", Verdict.REFUND, 13), ("acme-failed", Verdict.FAILED, 14)]
    for i, (training_id, verdict, seed) in enumerate(plan):
        ledger.spend("acme", training_id, now=t0 + dt.timedelta(minutes=i))
        judgement = _judgement(verdict, seed)
        if judgement.verdict is not verdict:
            print(f"unexpected verdict {judgement.verdict.value} for {training_id}")
            return 1
        files = trainings / training_id / "model"
        files.mkdir(parents=True, exist_ok=True)
        (files / "weights.bin").write_bytes(bytes(256))
        audit_path = write_audit(home / "audits" / f"{training_id}.json",
                                 build_audit(judgement, training_id=training_id,
                                             model_id=f"{training_id}-model", jev_id="jev-demo"))
        request = SettlementRequest(
            "acme", training_id, verdict,
            settlement_reason(verdict, won=judgement.won if judgement.decisions else None,
                              decisions=len(judgement.decisions) or None,
                              needed=judgement.needed or None,
                              failure_reason=judgement.failure_reason),
            keep_if_loses=verdict is not Verdict.BEATS and verdict is not Verdict.REFUND,
            model_dir=files, audit_json=audit_path.read_bytes())
        first = settle_training(engine, request, now=t0 + dt.timedelta(hours=1, minutes=i))
        # A re-materialization, then eight concurrent runs of the same training.
        settle_training(engine, request, now=t0 + dt.timedelta(hours=2))
        threads = [threading.Thread(target=settle_training, args=(engine, request),
                                    kwargs={"now": t0 + dt.timedelta(hours=3)}) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"{training_id}: verdict {first.settlement.verdict.value}, credit "
              f"{'returned' if first.settlement.refunded else 'stays spent'}, balance now "
              f"{ledger.balance('acme')} (settled 10 times, {sum(1 for ln in ledger.lines('acme', training_id=training_id) if ln.kind.value == 'settlement')} settlement line)")
    print("ledger of workspace acme:")
    for line in ledger.lines("acme"):
        print(f"  {line.describe()}")
    balance, total = ledger.balance("acme"), ledger.entries_total("acme")
    print(f"balance {balance} = 5 bought - 4 spent + 2 returned; sum of entries {total}")
    if balance != 3 or total != 3:
        return 1

    settled = get_model(engine, "acme-kept").settled_at
    day29 = settled + dt.timedelta(days=29)
    day30 = settled + dt.timedelta(days=30)
    print(f"\nretention sweep at {day29:%Y-%m-%d %H:%M} UTC: "
          f"{len(sweep_retention(engine, now=day29, trainings_dir=trainings).expired)} expired")
    expired = sweep_retention(engine, now=day30, trainings_dir=trainings).expired
    print(f"retention sweep at {day30:%Y-%m-%d %H:%M} UTC: {len(expired)} expired "
          f"({', '.join(m.model_id for m in expired)}); files left: "
          f"{sorted(p.parent.name for p in trainings.glob('*/model'))}")
    kept = get_model(engine, "acme-kept")
    same = audit_bytes(engine, "acme-kept") == (home / "audits" / "acme-kept.json").read_bytes()
    print(f"acme-kept: state {kept.state.value}; `typestrict audit acme-kept` byte-identical to "
          f"its audit file: {same}")
    engine.dispose()
    return 0 if same and kept.state is ModelState.EXPIRED else 1


def run(root: Path) -> int:
    """Print the refund part's ledger, then walk through the credit rules; 0 on success."""
    print("\n== Credits: one credit per training, back exactly once on refund or failure ==")
    bad = _print_refund_trainings(root)
    return 1 if bad else _walkthrough(root)
