"""A Hypothesis state machine over a training's life through the API: create, read the split,
submit (valid, partial, or for ids that do not exist), resubmit, cancel, a verdict run's refusal
and settlement, a deadline passing, fetch. After every step the ledger balances (spends =
settlements + open trainings, each open one with a deadline), the balance is what a plain model
of the rules says, and every training is in the state the model says (docs/lifecycle.md).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from typestrict_pipeline.credits import CreditLedger, SettlementRequest, settle_training
from typestrict_pipeline.lifecycle.trainings import (
    expire_due,
    ledger_balance,
    record_refusal,
    training_status,
)
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

_spec = importlib.util.spec_from_file_location("api_support", Path(__file__).with_name("test_api_support.py"))
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

CREDITS = 4
OPEN = {"awaiting_predictions", "judging", "failed"}


class TrainingLifecycle(RuleBasedStateMachine):
    """The API on a fresh store per example; ``model`` holds what each training's state must be."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lifecycle-stateful-"))
        self.url = f"sqlite:///{self.dir / 'store.db'}"
        csv, jev = support.make_dataset(self.dir, n=100, seed=9)
        self.csv = csv
        self.key = support.new_key(self.url, "acme", credits=CREDITS)
        self.engine = open_store(self.url)
        self.server = support.ApiServer(self.url, self.dir / "home",
                                        jev_source={"kind": "file", "path": str(jev)}).__enter__()
        self.client = self.server.client(self.key)
        assert self.client.put("/v1/files/reviews.csv", content=csv).status_code == 201
        self.good = support.model_predictions(csv, skill=0.9)
        self.model: dict[str, str] = {}
        self.refunds = 0

    def teardown(self) -> None:
        self.client.close()
        self.server.__exit__(None, None, None)
        self.engine.dispose()
        shutil.rmtree(self.dir, ignore_errors=True)  # each example's store, dataset and home

    def _pick(self, data: Any, states: set[str] | None = None) -> str | None:
        ids = sorted(t for t, s in self.model.items() if states is None or s in states)
        return data.draw(st.sampled_from(ids)) if ids else None

    @property
    def spent(self) -> int:
        return len(self.model)

    # --- rules -----------------------------------------------------------------------------

    @rule()
    def create(self) -> None:
        r = self.client.post("/v1/trainings", json=support.TRAINING_BODY)
        if CREDITS - self.spent + self.refunds <= 0:
            assert r.status_code == 402, r.text
            return
        assert r.status_code == 201, r.text
        self.model[r.json()["id"]] = "awaiting_predictions"

    @rule(data=st.data())
    def split(self, data: Any) -> None:
        tid = self._pick(data)
        if tid is not None:
            r = self.client.get(f"/v1/trainings/{tid}/split")
            assert r.status_code == 200 and r.json()["training_ids_sha256"]

    @rule(data=st.data(), kind=st.sampled_from(["valid", "partial", "ghosts"]))
    def submit(self, data: Any, kind: str) -> None:
        tid = self._pick(data)
        if tid is None:
            return
        predictions = self.good
        if kind == "partial":
            rng = random.Random(data.draw(st.integers(0, 10**6)))
            predictions = rng.sample(self.good, len(self.good) // 2)
        elif kind == "ghosts":
            predictions = [{**p, "id": "ghost-" + p["id"]} for p in self.good[:5]]
        r = self.client.post(f"/v1/trainings/{tid}/predictions", json={"predictions": predictions})
        state = self.model[tid]
        if state not in ("awaiting_predictions", "failed"):
            assert r.status_code == 409, r.text
        elif kind == "valid":
            assert r.status_code == 202, r.text
            self.model[tid] = "judging"
        else:
            assert r.status_code == 422, r.text
            assert "nothing was stored or charged" in r.json()["error"]["message"].lower()

    @rule(data=st.data())
    def cancel(self, data: Any) -> None:
        tid = self._pick(data)
        if tid is None:
            return
        r = self.client.post(f"/v1/trainings/{tid}/cancel")
        if self.model[tid] in ("awaiting_predictions", "failed"):
            assert r.status_code == 200, r.text
            self.model[tid] = "cancelled"
            self.refunds += 1
        else:
            assert r.status_code == 409, r.text

    @precondition(lambda self: any(s == "judging" for s in self.model.values()))
    @rule(data=st.data())
    def refused_by_its_run(self, data: Any) -> None:
        tid = self._pick(data, {"judging"})
        assert tid is not None
        assert record_refusal(self.engine, tid, "acme", "predictions refused by the run (test)")
        self.model[tid] = "failed"

    @precondition(lambda self: any(s == "judging" for s in self.model.values()))
    @rule(data=st.data(), verdict=st.sampled_from(list(Verdict)))
    def settled_by_its_run(self, data: Any, verdict: Verdict) -> None:
        tid = self._pick(data, {"judging"})
        assert tid is not None
        home = self.dir / "home" / "trainings" / tid
        settle_training(self.engine, SettlementRequest("acme", tid, verdict, verdict.value, keep_if_loses=False,
                                                       model_dir=home / "model", audit_json=None))
        self.model[tid] = "settled"
        self.refunds += verdict.refunds_credit

    @rule(data=st.data())
    def a_deadline_passes(self, data: Any) -> None:
        tid = self._pick(data, OPEN)
        if tid is None:
            return
        status = training_status(self.engine, tid)
        assert status is not None and status.deadline_at is not None
        ended = expire_due(self.engine, now=status.deadline_at, training_ids=[tid],
                           trainings_dir=self.dir / "home" / "trainings")
        assert [e.training_id for e in ended] == [tid] and ended[0].refunded
        self.model[tid] = "expired"
        self.refunds += 1

    @rule(data=st.data())
    def fetch(self, data: Any) -> None:
        tid = self._pick(data)
        if tid is None:
            return
        read = self.client.get(f"/v1/trainings/{tid}").json()
        assert read["state"] == self.model[tid]
        assert (read["deadline_at"] is not None) == (self.model[tid] in OPEN)

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def the_ledger_balances(self) -> None:
        found = ledger_balance(self.engine)
        assert found.balanced, found.describe()
        assert len(found.open_trainings) == sum(1 for s in self.model.values() if s in OPEN)
        assert CreditLedger(self.engine).balance("acme") == CREDITS - self.spent + self.refunds

    @invariant()
    def every_state_is_the_models(self) -> None:
        for tid, state in self.model.items():
            status = training_status(self.engine, tid)
            assert status is not None and status.state.value == state
            assert (status.deadline_at is not None) == (state in OPEN)
            if status.deadline_at is not None:
                assert status.deadline_at > status.updated_at - dt.timedelta(seconds=1)


TrainingLifecycle.TestCase.settings = settings(
    max_examples=6, stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_the_training_lifecycle_keeps_the_ledger_balanced = TrainingLifecycle.TestCase
