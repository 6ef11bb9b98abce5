"""Retention: files expire after N days (explicit "now" values, no sleeping); audits never do."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pytest
from sqlalchemy import Engine

from typestrict_pipeline.credits import (
    CreditLedger,
    ModelState,
    RetentionError,
    RetentionPolicy,
    SettledAuditError,
    SettlementRequest,
    SettlementResult,
    audit_bytes,
    due_for_expiry,
    expire_models,
    get_model,
    list_models,
    model_files,
    settle_training,
)
from typestrict_pipeline.errors import InputError, NotFoundError, StoreError
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

T0 = dt.datetime(2026, 5, 1, 9, 30, tzinfo=dt.UTC)
AUDIT = b'{"format":"typestrict-audit","overall":{"verdict":"kept"},"x":0.1}\n'


def _model(root: Path, training_id: str) -> Path:
    folder = root / training_id / "model"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"w" * 128)
    (folder / "sub").mkdir()
    (folder / "sub" / "config.json").write_text("{}")
    return folder


def _settle(engine: Engine, root: Path, training_id: str, verdict: Verdict, when: dt.datetime,
            policy: RetentionPolicy | None = None, audit: bytes | None = AUDIT) -> SettlementResult:
    return settle_training(
        engine,
        SettlementRequest("ws", training_id, verdict, f"{verdict.value}", keep_if_loses=verdict is Verdict.KEPT,
                          model_dir=root / training_id / "model", audit_json=audit),
        now=when, policy=policy,
    )


def test_files_expire_after_30_days_and_the_audit_stays(store_url: str, tmp_path: Path) -> None:
    engine = open_store(store_url)
    CreditLedger(engine).grant("ws", 5, reference="g", now=T0)
    root = tmp_path / "trainings"
    kept = _model(root, "kept1")
    beats = _model(root, "beats1")
    _settle(engine, root, "kept1", Verdict.KEPT, T0)
    _settle(engine, root, "beats1", Verdict.BEATS, T0 + dt.timedelta(days=2))
    assert model_files(engine, "kept1") == kept.resolve()  # delivered: downloadable

    day29 = T0 + dt.timedelta(days=29, hours=23, minutes=59)
    assert expire_models(engine, now=day29, allowed_root=root) == []
    assert kept.exists() and beats.exists()

    day30 = T0 + dt.timedelta(days=30)
    assert [m.model_id for m in due_for_expiry(engine, day30)] == ["kept1"]
    expired = expire_models(engine, now=day30, allowed_root=root)
    assert [m.model_id for m in expired] == ["kept1"]
    assert not kept.exists() and beats.exists()
    info = get_model(engine, "kept1")
    assert info.state is ModelState.EXPIRED and info.expired_at == day30
    assert audit_bytes(engine, "kept1") == AUDIT  # byte-identical, after expiry
    with pytest.raises(NotFoundError, match=r"they expired at 2026-05-31T09:30:00\+00:00.*typestrict audit kept1"):
        model_files(engine, "kept1")

    assert expire_models(engine, now=day30, allowed_root=root) == []  # second sweep: nothing
    later = expire_models(engine, now=T0 + dt.timedelta(days=32), allowed_root=root)
    assert [m.model_id for m in later] == ["beats1"] and not beats.exists()
    assert [m.state for m in list_models(engine, "ws")] == [ModelState.EXPIRED, ModelState.EXPIRED]
    assert audit_bytes(engine, "beats1") == AUDIT
    engine.dispose()


def test_retention_is_configurable_and_fixed_at_settlement(sqlite_url: str, tmp_path: Path) -> None:
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("ws", 5, reference="g", now=T0)
    root = tmp_path / "t"
    _model(root, "a")
    _model(root, "b")
    _settle(engine, root, "a", Verdict.BEATS, T0, RetentionPolicy(7))
    _settle(engine, root, "b", Verdict.BEATS, T0, RetentionPolicy(30))
    assert get_model(engine, "a").expires_at == T0 + dt.timedelta(days=7)
    assert [m.model_id for m in expire_models(engine, now=T0 + dt.timedelta(days=7))] == ["a"]
    with pytest.raises(InputError, match="expected a retention of at least 1 whole day, got 0"):
        RetentionPolicy(0)
    engine.dispose()


def test_refunded_models_are_not_delivered_and_failed_ones_have_no_audit(sqlite_url: str,
                                                                        tmp_path: Path) -> None:
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("ws", 5, reference="g", now=T0)
    root = tmp_path / "t"
    _model(root, "r")
    _settle(engine, root, "r", Verdict.REFUND, T0)
    _settle(engine, root, "f", Verdict.FAILED, T0, audit=None)
    with pytest.raises(NotFoundError, match="expected a delivered model for 'r', got verdict 'refund'"):
        model_files(engine, "r")
    with pytest.raises(NotFoundError, match="expected an audit for model 'f', got none"):
        audit_bytes(engine, "f")
    with pytest.raises(NotFoundError, match="expected a model with id 'nope'"):
        audit_bytes(engine, "nope")
    # The refunded model's files expire on the same clock; the failed one had none: no error.
    assert {m.model_id for m in expire_models(engine, now=T0 + dt.timedelta(days=30))} == {"r", "f"}
    engine.dispose()


def test_expiry_refuses_to_delete_outside_the_trainings_folder(sqlite_url: str, tmp_path: Path) -> None:
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("ws", 2, reference="g", now=T0)
    elsewhere = tmp_path / "precious"
    _model(elsewhere, "x")
    _settle(engine, elsewhere, "x", Verdict.BEATS, T0)
    inside = tmp_path / "trainings"
    _model(inside, "y")
    _settle(engine, inside, "y", Verdict.BEATS, T0)
    with pytest.raises(RetentionError, match=r"got 1 it could not delete now \(1 other was\): x: expected model files under .*Refusing to delete.*run the sweep again") as err:
        expire_models(engine, now=T0 + dt.timedelta(days=31), allowed_root=inside)
    assert isinstance(err.value, StoreError)
    assert [m.model_id for m in err.value.expired] == ["y"]  # the bad record did not block the others
    assert (elsewhere / "x" / "model" / "weights.bin").exists()
    assert not (inside / "y" / "model").exists()
    assert get_model(engine, "x").state is ModelState.AVAILABLE
    engine.dispose()


def test_the_first_audit_is_kept(sqlite_url: str, tmp_path: Path) -> None:
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("ws", 1, reference="g", now=T0)
    _settle(engine, tmp_path, "t", Verdict.BEATS, T0, audit=None)
    _settle(engine, tmp_path, "t", Verdict.BEATS, T0, audit=b"first\n")
    # another audit for a settled training is refused, not silently ignored (issue 5/7)
    with pytest.raises(SettledAuditError, match="other bytes") as refused:
        _settle(engine, tmp_path, "t", Verdict.BEATS, T0, audit=b"second\n")
    assert refused.value.settled == hashlib.sha256(b"first\n").hexdigest()
    assert audit_bytes(engine, "t") == b"first\n"
    engine.dispose()
