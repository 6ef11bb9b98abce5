"""Model records: what a settled training delivered, how long its files stay, and its audit.

A training's verdict is settled in ONE transaction that writes the ledger entries (see
:mod:`typestrict_pipeline.credits.ledger`) and the model record, with the audit file's exact bytes.
Retention later deletes the files of records whose ``expires_at`` has passed (everything the
training keeps of the customer's data: its folder but its manifest, and the pipeline's values
stored for it) and marks them expired; the record and its audit stay, so the audit can be served
byte-identical at any time. :func:`sweep_retention` is the one rule every door runs; it also
clears the trainings that ended without a model record.

The model id is the training id (one model per training).

>>> import tempfile, pathlib, datetime as dt
>>> from typestrict_pipeline.store import open_store
>>> tmp = pathlib.Path(tempfile.mkdtemp())
>>> engine = open_store(f"sqlite:///{tmp / 'store.db'}")
>>> files = tmp / "tr_1" / "model"; files.mkdir(parents=True); _ = (files / "w.bin").write_bytes(b"1")
>>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
>>> r = settle_training(engine, SettlementRequest("demo", "tr_1", Verdict.KEPT, "kept",
...     keep_if_loses=True, model_dir=files, audit_json=b'{"a": 1}'), now=t0)
Traceback (most recent call last):
...
typestrict_pipeline.credits.ledger.InsufficientCreditsError: expected at least 1 credit(s) in workspace 'demo' ...
>>> from typestrict_pipeline.credits.ledger import CreditLedger
>>> _ = CreditLedger(engine).grant("demo", 1, reference="gift", now=t0)
>>> r = settle_training(engine, SettlementRequest("demo", "tr_1", Verdict.KEPT, "kept",
...     keep_if_loses=True, model_dir=files, audit_json=b'{"a": 1}'), now=t0)
>>> (r.settlement.refunded, r.model.delivered, r.model.expires_at.date().isoformat())
(False, True, '2026-01-31')
>>> [m.model_id for m in expire_models(engine, now=t0 + dt.timedelta(days=30))]
['tr_1']
>>> files.exists(), audit_bytes(engine, "tr_1")
(False, b'{"a": 1}')
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from typestrict_pipeline.credits.ledger import (
    Settlement,
    _check_id,
    _check_now,
    run_transaction,
    settle_in_session,
)
from typestrict_pipeline.credits.tables import ModelRecord, ModelState
from typestrict_pipeline.errors import ConflictError, InputError, NotFoundError, StoreError
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import rows_by_id, session_scope, utcnow

__all__ = [
    "DEFAULT_RETENTION_DAYS",
    "KEPT_AFTER_EXPIRY",
    "ORPHAN_GRACE",
    "PIPELINE_VALUES",
    "ModelInfo",
    "RetentionError",
    "RetentionPolicy",
    "RetentionSweep",
    "SettledAuditError",
    "SettlementRequest",
    "SettlementResult",
    "audit_bytes",
    "clear_training_files",
    "cleared_ended_trainings",
    "dagster_storage_from_env",
    "due_for_expiry",
    "expire_models",
    "get_model",
    "list_models",
    "model_files",
    "models_of",
    "never_committed",
    "pipeline_value_roots",
    "removed_orphans",
    "settle_training",
    "settle_training_in",
    "settled_audit_sha256",
    "sweep_retention",
    "training_folder_of",
]

DEFAULT_RETENTION_DAYS = 30


@dataclass(frozen=True)
class RetentionPolicy:
    """How long a model's files stay after its verdict is settled.

    Attributes:
        days: whole days (default 30, as the product page promises for a kept model).

    >>> RetentionPolicy().days
    30
    >>> RetentionPolicy(0)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a retention of at least 1 whole day, got 0. Set retention_days to 1 or more.
    """

    days: int = DEFAULT_RETENTION_DAYS

    def __post_init__(self) -> None:
        if isinstance(self.days, bool) or not isinstance(self.days, int) or self.days < 1:
            raise InputError(
                "a retention of at least 1 whole day", repr(self.days), "set retention_days to 1 or more"
            )

    def expires_at(self, settled_at: dt.datetime) -> dt.datetime:
        """When files settled at ``settled_at`` expire (exactly ``days`` × 24 h later)."""
        return settled_at + dt.timedelta(days=self.days)


@dataclass(frozen=True)
class SettlementRequest:
    """A training's verdict, ready to be settled.

    Attributes:
        workspace_id: the training's workspace.
        training_id: the training (and model) id.
        verdict: beats, kept, refund or failed.
        reason: why, in words; for ``failed`` the failure reason (recorded in the ledger).
        keep_if_loses: the option the training was started with (recorded on the model).
        model_dir: the folder of the model's files (deleted when they expire).
        audit_json: the audit file's exact bytes, or None when there is none (a failed training).
    """

    workspace_id: str
    training_id: str
    verdict: Verdict
    reason: str
    keep_if_loses: bool
    model_dir: Path
    audit_json: bytes | None


@dataclass(frozen=True)
class ModelInfo:
    """A model record, as read back (without the audit bytes).

    Attributes:
        model_id: the model id (= training id).
        workspace_id: its workspace.
        verdict: the settled verdict.
        keep_if_loses: the option it was trained with.
        delivered: whether it can be downloaded (``beats`` and ``kept``) while its files last.
        files_path: its files' folder.
        state: available or expired.
        settled_at: when the verdict was settled.
        expires_at: when its files expire.
        expired_at: when retention deleted them, or None.
        audit_sha256: SHA-256 of the stored audit, or None when there is no audit.
    """

    model_id: str
    workspace_id: str
    verdict: Verdict
    keep_if_loses: bool
    delivered: bool
    files_path: Path
    state: ModelState
    settled_at: dt.datetime
    expires_at: dt.datetime
    expired_at: dt.datetime | None
    audit_sha256: str | None

    @property
    def downloadable(self) -> bool:
        """Delivered and its files not yet expired."""
        return self.delivered and self.state is ModelState.AVAILABLE


@dataclass(frozen=True)
class SettlementResult:
    """The ledger's settlement and the model record, after one settle call."""

    settlement: Settlement
    model: ModelInfo


class SettledAuditError(ConflictError):
    """A training's audit was settled already and this one has other bytes: it is refused.

    Attributes:
        training_id: the training.
        settled: the SHA-256 of the audit settled (final).
        offered: the SHA-256 of the audit refused.
    """

    def __init__(self, training_id: str, settled: str, offered: str) -> None:
        self.training_id, self.settled, self.offered = training_id, settled, offered
        super().__init__(
            f"expected the audit of training {training_id!r} to be the one settled (SHA-256 "
            f"{settled}), got one with other bytes (SHA-256 {offered}): a settled training's "
            "audit never changes, so this one was refused and nothing was written. The settled "
            f"verdict and audit stand (`typestrict audit {training_id}`; check a copy with "
            f"`python3 verify_audit.py --expect-sha256 {settled} audit.json`); if the verdict "
            "itself was wrong, correct the credit with `typestrict credits adjust`"
        )


def settled_audit_sha256(engine: Engine, training_id: str) -> str | None:
    """The SHA-256 of the audit settled for ``training_id`` (None: not settled with an audit).

    The model record's, else the ledger's settlement line's.
    """
    from typestrict_pipeline.credits.tables import CreditEntry, EntryKind

    with session_scope(engine) as session:
        row = session.get(ModelRecord, training_id)
        if row is not None and row.audit_sha256 is not None:
            return row.audit_sha256
        found: str | None = session.scalar(
            select(CreditEntry.audit_sha256).where(
                CreditEntry.kind == EntryKind.SETTLEMENT, CreditEntry.reference == training_id)
        )
        return found


def _info(row: ModelRecord) -> ModelInfo:
    return ModelInfo(
        model_id=row.model_id,
        workspace_id=row.workspace_id,
        verdict=Verdict(row.verdict),
        keep_if_loses=row.keep_if_loses,
        delivered=row.delivered,
        files_path=Path(row.files_path),
        state=ModelState(row.state),
        settled_at=row.settled_at,
        expires_at=row.expires_at,
        expired_at=row.expired_at,
        audit_sha256=row.audit_sha256,
    )


def _record_in(session: Session, req: SettlementRequest, verdict: Verdict, now: dt.datetime,
               policy: RetentionPolicy) -> ModelRecord:
    row = session.get(ModelRecord, req.training_id)
    if row is None:
        row = ModelRecord(
            model_id=req.training_id,
            workspace_id=req.workspace_id,
            verdict=verdict.value,
            keep_if_loses=req.keep_if_loses,
            delivered=verdict in (Verdict.BEATS, Verdict.KEPT),
            files_path=str(Path(req.model_dir).resolve()),
            state=ModelState.AVAILABLE,
            settled_at=now,
            expires_at=policy.expires_at(now),
            expired_at=None,
            audit_json=req.audit_json,
            audit_sha256=hashlib.sha256(req.audit_json).hexdigest() if req.audit_json is not None else None,
        )
        session.add(row)
        session.flush()  # primary key: a concurrent settler fails here and retries
    elif row.audit_json is None and req.audit_json is not None:
        # The first settlement had no audit yet; the first audit that arrives is kept, once.
        session.execute(
            update(ModelRecord)
            .where(ModelRecord.model_id == req.training_id, ModelRecord.audit_json.is_(None))
            .values(audit_json=req.audit_json, audit_sha256=hashlib.sha256(req.audit_json).hexdigest()),
            execution_options={"synchronize_session": False},
        )
        session.expire(row)
        row = session.get(ModelRecord, req.training_id)
        assert row is not None
    return row


def settle_training(
    engine: Engine,
    request: SettlementRequest,
    *,
    now: dt.datetime | None = None,
    policy: RetentionPolicy | None = None,
) -> SettlementResult:
    """Settle a training's verdict on the ledger and record its model, in one transaction.

    Exactly once per training whatever the number of calls, retries or concurrent runs: the
    ledger's settlement entry and the model record are written together or not at all, and the
    first verdict settled is final (later calls return it; ``settlement.verdict_changed`` tells
    that a later verdict disagreed).

    Args:
        engine: the store.
        request: what to settle.
        now: the settlement time (default: now, UTC); the retention clock starts here.
        policy: retention (default 30 days).

    The audit is part of what is settled: its SHA-256 goes on the ledger's settlement line and
    the model record, and a later call with an audit of other bytes is refused
    (:class:`SettledAuditError`) before anything is written.

    Returns:
        The settlement and the model record.

    Raises:
        InsufficientCreditsError: the training was never charged and the workspace is empty.
        SettledAuditError: the training was settled with another audit.
        InputError: bad ids or time.
    """
    _check_id("workspace id", request.workspace_id)
    _check_id("training id", request.training_id)
    when = _check_now(now if now is not None else utcnow())
    retention = policy or RetentionPolicy()
    Verdict(request.verdict)  # refuses an unknown verdict before any write

    return run_transaction(
        engine, lambda session: settle_training_in(session, request, now=when, policy=retention))


def settle_training_in(
    session: Session, request: SettlementRequest, *, now: dt.datetime, policy: RetentionPolicy
) -> SettlementResult:
    """:func:`settle_training` inside the caller's transaction (run it with
    :func:`~typestrict_pipeline.credits.ledger.run_transaction`). The training's lifecycle row,
    if it has one, becomes ``settled`` in the same transaction (``settle_in_session``).

    The audit's SHA-256 goes on the settlement line and the model record; an audit of other
    bytes for a training settled with an audit is refused (:class:`SettledAuditError`) before
    anything is written."""
    offered = (hashlib.sha256(request.audit_json).hexdigest()
               if request.audit_json is not None else None)
    row = session.get(ModelRecord, request.training_id)
    if (row is not None and row.audit_sha256 is not None and offered is not None
            and row.audit_sha256 != offered):
        raise SettledAuditError(request.training_id, row.audit_sha256, offered)
    settlement = settle_in_session(
        session, request.workspace_id, request.training_id, Verdict(request.verdict),
        reason=request.reason, now=now, audit_sha256=offered,
    )
    if settlement.audit_changed:
        assert settlement.audit_sha256 is not None and offered is not None
        raise SettledAuditError(request.training_id, settlement.audit_sha256, offered)
    row = _record_in(session, request, settlement.verdict, now, policy)
    return SettlementResult(settlement=settlement, model=_info(row))


def get_model(engine: Engine, model_id: str) -> ModelInfo:
    """The model record of ``model_id``.

    Raises:
        NotFoundError: there is no such model (an id with a NUL, which no text column holds,
            included: PostgreSQL refused it as a value, a 422 naming the query's parameter
            where any other unknown id is a 404).
    """
    if "\x00" in model_id:
        raise _not_found(model_id)
    with session_scope(engine) as session:
        row = session.get(ModelRecord, model_id)
        if row is None:
            raise _not_found(model_id)
        return _info(row)


def models_of(engine: Engine, model_ids: Sequence[str]) -> dict[str, ModelInfo]:
    """The model records of ``model_ids`` that have one, by id, in one query."""
    return rows_by_id(engine, ModelRecord.model_id, model_ids, _info)


def list_models(engine: Engine, workspace_id: str) -> list[ModelInfo]:
    """A workspace's model records, oldest settlement first."""
    with session_scope(engine) as session:
        rows = session.scalars(
            select(ModelRecord)
            .where(ModelRecord.workspace_id == workspace_id)
            .order_by(ModelRecord.settled_at, ModelRecord.model_id)
        ).all()
        return [_info(r) for r in rows]


def _not_found(model_id: str) -> NotFoundError:
    return NotFoundError(
        f"expected a model with id {model_id!r}, got none in the store. Check the id (it is the training id) "
        "and that its verdict was settled (the credit_settlement asset)"
    )


def audit_bytes(engine: Engine, model_id: str) -> bytes:
    """The model's audit JSON, byte-identical to the audit file written at its verdict.

    Available for the record's whole life, also after its files expired
    (``GET /v1/models/{id}/audit``).

    Raises:
        NotFoundError: no such model, or it has no audit (a failed training).
    """
    with session_scope(engine) as session:
        row = session.get(ModelRecord, model_id)
        if row is None:
            raise _not_found(model_id)
        if row.audit_json is None:
            raise NotFoundError(
                f"expected an audit for model {model_id!r}, got none: its verdict is {row.verdict!r} and no "
                "audit file was written for it. A failed training has nothing to audit"
            )
        return bytes(row.audit_json)


def model_files(engine: Engine, model_id: str) -> Path:
    """The folder of a downloadable model's files.

    Raises:
        NotFoundError: no such model, not delivered (its verdict returned the credit), or expired.
    """
    info = get_model(engine, model_id)
    if not info.delivered:
        raise NotFoundError(
            f"expected a delivered model for {model_id!r}, got verdict {info.verdict.value!r}: "
            "a model whose credit came back is not delivered. Start a new training"
        )
    if info.state is ModelState.EXPIRED:
        when = info.expired_at.isoformat() if info.expired_at else "?"
        raise NotFoundError(
            f"expected model files for {model_id!r}, got none: they expired at {when} "
            f"(kept {((info.expires_at - info.settled_at).days)} days). Its audit is still "
            f"available with `typestrict audit {model_id}`"
        )
    return info.files_path


def due_for_expiry(engine: Engine, now: dt.datetime) -> list[ModelInfo]:
    """Records whose files are still there and whose ``expires_at`` is at or before ``now``."""
    when = _check_now(now)
    with session_scope(engine) as session:
        rows = session.scalars(
            select(ModelRecord)
            .where(ModelRecord.state == ModelState.AVAILABLE, ModelRecord.expires_at <= when)
            .order_by(ModelRecord.expires_at, ModelRecord.model_id)
        ).all()
        return [_info(r) for r in rows]


KEPT_AFTER_EXPIRY = ("manifest.json", "api-draft.json")
"""What stays in a training's folder once its files expire: its manifest (or the draft of one),
the training's definition (workspace, decisions, options, column names; never a row), which the
store reads to show the training and its model record. Everything else in the folder goes: the
dataset's copy (the customer's texts), the Jev copy, the predictions, the stated ids, the
grouping look (it quotes the data's values), the model's files."""

PIPELINE_VALUES = ("dataset", "holdout", "jev_predictions", "model_predictions", "metrics",
                   "verdict", "audit", "credit_settlement")
"""The pipeline's values stored per training (the IO manager's ``<storage>/<asset>/<training
id>``, one file each): the dataset with its texts, the held-out rows, both systems' per-row
answers, and what was computed from them. Retention deletes them with the folder's files
(``tests/test_credits_dagster.py`` checks that these are exactly the assets partitioned by
training)."""


def pipeline_value_roots(storage: Path | None) -> list[Path]:
    """The folders of :data:`PIPELINE_VALUES` under the Dagster instance's storage folder
    (``$DAGSTER_HOME/storage`` unless configured otherwise); none without one."""
    return [] if storage is None else [storage / name for name in PIPELINE_VALUES]


def dagster_storage_from_env(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$DAGSTER_HOME/storage`` when ``DAGSTER_HOME`` is set (set but empty counts as unset)."""
    home = (os.environ if environ is None else environ).get("DAGSTER_HOME") or ""
    return Path(home) / "storage" if home else None


def _under(path: Path, allowed_root: Path | None) -> None:
    if allowed_root is None:
        return
    root = allowed_root.resolve()
    resolved = path.resolve()
    if resolved == root or root not in resolved.parents:
        raise StoreError(
            f"expected model files under {root}, got {resolved}. Refusing to delete outside "
            "the trainings folder; fix the record's files_path or the trainings_dir setting"
        )


def _remove(path: Path) -> bool:
    """Remove a file, link or folder; False when there was nothing (idempotent)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return True
    if path.exists():
        shutil.rmtree(path)
        return True
    return False


def _safe_id(training_id: str) -> bool:
    return bool(training_id) and "/" not in training_id and "\\" not in training_id \
        and training_id not in (".", "..") and "\x00" not in training_id


def training_folder_of(model_id: str, files_path: Path) -> Path | None:
    """The training's folder when the record's files are its ``<folder>/<training id>/model``
    (every training the product makes), else None (only the files' folder is the model's)."""
    if files_path.name == "model" and files_path.parent.name == model_id and _safe_id(model_id):
        return files_path.parent
    return None


def clear_training_files(training_id: str, folder: Path | None, *, model_dir: Path | None = None,
                         allowed_root: Path | None = None,
                         value_roots: Sequence[Path] = ()) -> bool:
    """Delete everything a training keeps that holds the customer's data or per-row data derived
    from it, keeping only :data:`KEPT_AFTER_EXPIRY`: its pipeline values (``<root>/<training
    id>`` of each of ``value_roots``), its model's files (``model_dir``), then its folder's other
    files. Idempotent (what is gone is skipped), so a run interrupted between two deletions is
    finished by the next one. Returns whether anything was deleted.

    Raises:
        StoreError: the folder or the model's files are outside ``allowed_root`` (nothing was
            deleted).
    """
    for path in (p for p in (folder, model_dir) if p is not None):
        _under(path, allowed_root)
    deleted = False
    if _safe_id(training_id):
        for root in value_roots:
            deleted = _remove(root / training_id) or deleted
    if model_dir is not None:
        deleted = _remove(model_dir) or deleted
    if folder is not None and folder.is_dir() and not folder.is_symlink():
        for entry in sorted(folder.iterdir()):
            if entry.name not in KEPT_AFTER_EXPIRY:
                deleted = _remove(entry) or deleted
    return deleted


def expire_models(
    engine: Engine, *, now: dt.datetime, allowed_root: Path | None = None,
    value_roots: Sequence[Path] = (),
) -> list[ModelInfo]:
    """Delete the files of every record due at ``now`` and mark it expired; keep its audit.

    A model's files are everything its training keeps of the customer's data
    (:func:`clear_training_files`): the training's folder but its manifest, and the pipeline's
    values stored for it (``value_roots``). Safe to run twice or concurrently: files are deleted
    first (deleting missing files is a no-op), then ``UPDATE ... WHERE state = 'available'``
    marks the record, so each record is reported expired by exactly one run. A crash between two
    deletions, or between the deletions and the mark, is finished by the next run.

    Args:
        engine: the store.
        now: the sweep's time (aware UTC; the schedule passes its scheduled time).
        allowed_root: if given, refuse to delete anything outside this folder.
        value_roots: the folders of the pipeline's values stored per training (one file per
            training, named by its id: :data:`PIPELINE_VALUES` under the Dagster storage).

    Returns:
        The records this call expired.

    Raises:
        RetentionError: some records' files are outside ``allowed_root``; every other due
            record was expired first (listed in the error's ``expired``).
    """
    when = _check_now(now)
    expired: list[ModelInfo] = []
    refused: list[str] = []
    for info in due_for_expiry(engine, when):
        try:
            clear_training_files(info.model_id, training_folder_of(info.model_id, info.files_path),
                                 model_dir=info.files_path, allowed_root=allowed_root,
                                 value_roots=value_roots)
        except StoreError as exc:
            refused.append(f"{info.model_id}: {exc}")
            continue  # one bad record must not stop the others from expiring
        except OSError as exc:
            refused.append(f"{info.model_id}: {_not_deleted(exc)}")
            continue
        with session_scope(engine) as session:
            changed = session.execute(
                update(ModelRecord)
                .where(ModelRecord.model_id == info.model_id, ModelRecord.state == ModelState.AVAILABLE)
                .values(state=ModelState.EXPIRED, expired_at=when),
                execution_options={"synchronize_session": False},
            ).rowcount  # type: ignore[attr-defined]
            if changed:
                row = session.get(ModelRecord, info.model_id)
                assert row is not None
                expired.append(_info(row))
    if refused:
        raise RetentionError(expired, refused)
    return expired


def cleared_ended_trainings(
    engine: Engine, *, now: dt.datetime, trainings_dir: Path, value_roots: Sequence[Path] = (),
    policy: RetentionPolicy | None = None,
) -> list[str]:
    """Give a training that ended without a model record (never charged: registered by its
    manifest, then expired or cancelled) the same end as a model's files: ``policy.days`` after it
    ended (its lifecycle row's last move), :func:`clear_training_files` deletes what it keeps of
    the customer's data, its manifest kept. Idempotent; returns the trainings this call deleted
    something of (a second run: none). A charged training always has a record (its settlement,
    ``failed`` for an expiry or a cancel), which :func:`expire_models` expires."""
    from typestrict_pipeline.lifecycle.tables import TrainingRow

    when = _check_now(now)
    ended_by = when - dt.timedelta(days=(policy or RetentionPolicy()).days)
    with session_scope(engine) as session:
        ids = list(session.scalars(
            select(TrainingRow.training_id)
            .outerjoin(ModelRecord, ModelRecord.model_id == TrainingRow.training_id)
            .where(TrainingRow.state.in_(("settled", "expired", "cancelled")),
                   TrainingRow.updated_at <= ended_by, ModelRecord.model_id.is_(None))
            .order_by(TrainingRow.updated_at, TrainingRow.training_id)))
    out, refused = [], []
    for tid in ids:
        try:
            if _safe_id(tid) and clear_training_files(tid, trainings_dir / tid, allowed_root=trainings_dir,
                                                      value_roots=value_roots):
                out.append(tid)
        except OSError as exc:  # one that cannot be deleted now must not stop the others
            refused.append(f"{tid}: {_not_deleted(exc)}")
    if refused:
        raise RetentionError([], refused, cleared=out)
    return out


def _not_deleted(exc: OSError) -> str:
    return (f"expected to delete its files, got {exc.strerror or exc} on {exc.filename or '?'}; what "
            "was deleted stays deleted and the rest waits: fix the cause (permissions, a mount) and "
            "run the sweep again, it finishes the job")


@dataclass(frozen=True)
class RetentionSweep:
    """What one retention sweep did: the models it expired, the trainings without a model whose
    files it deleted, and the leftovers of creations that never committed it removed."""

    expired: list[ModelInfo]
    cleared: list[str]
    orphans: list[str] = field(default_factory=list)


ORPHAN_GRACE = dt.timedelta(days=1)
"""How old a leftover of a creation must be before it is removed: a creation stages and commits
in seconds, so one a day old is a leftover of a process that died, never one in flight."""


def never_committed(engine: Engine, training_ids: Sequence[str]) -> set[str]:
    """Of ``training_ids`` (draft folders: ``api-draft.json``, no manifest), those no lifecycle
    row, ledger line or model record knows: a creation whose charging transaction never committed
    (its process died after moving the folder in, or it is committing now). Nothing was charged
    for them: they are no training (not shown, nothing accepted: ``TrainingStore``), and the
    sweep removes them once :data:`ORPHAN_GRACE` old (:func:`removed_orphans`)."""
    from typestrict_pipeline.credits.tables import CreditEntry
    from typestrict_pipeline.lifecycle.tables import TrainingRow

    names = list(dict.fromkeys(training_ids))
    known: set[str] = set()
    for key in (TrainingRow.training_id, ModelRecord.model_id, CreditEntry.reference):  # IN_CHUNK ids a query
        known |= set(rows_by_id(engine, key, names, lambda _: True))
    return set(names) - known


def removed_orphans(engine: Engine, *, now: dt.datetime, trainings_dir: Path,
                    grace: dt.timedelta = ORPHAN_GRACE) -> list[str]:
    """Remove what a training's creation left when its process died before the charge committed
    (the API stages the folder as ``.staging-<id>`` with the dataset's copy, then moves it in as
    the charging transaction's last step): a ``.staging-*`` folder, and a draft folder
    (``api-draft.json``, no manifest) that no lifecycle row, model record or ledger line knows,
    both last changed ``grace`` or more before ``now``. Nothing was charged for them and no one
    was told they exist, so nothing of them is kept. Returns the folders' names."""
    before = (_check_now(now) - grace).timestamp()
    staged, drafts = [], []
    try:
        entries = sorted(os.scandir(trainings_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_mtime > before:
                continue
            folder = Path(entry.path)
            if entry.name.startswith(".staging-"):
                staged.append(folder)
            elif (not entry.name.startswith(".") and _safe_id(entry.name) and (folder / "api-draft.json").is_file()
                  and not (folder / "manifest.json").exists()):
                drafts.append(folder)
        except OSError:  # removed meanwhile
            continue
    if drafts:
        unknown = never_committed(engine, [f.name for f in drafts])
        drafts = [f for f in drafts if f.name in unknown]
    out = []
    for folder in staged + drafts:
        if _remove(folder):
            out.append(folder.name)
    return sorted(out)


def sweep_retention(
    engine: Engine, *, now: dt.datetime, trainings_dir: Path, value_roots: Sequence[Path] = (),
    policy: RetentionPolicy | None = None,
) -> RetentionSweep:
    """The retention rule, the one every door runs (``typestrict credits expire``, the
    ``retention_job``, the demo): :func:`expire_models` (files of models past ``expires_at``),
    then :func:`cleared_ended_trainings` (trainings that ended without a model, ``policy.days``
    after their end), then :func:`removed_orphans` (what a creation left when its process died
    before the charge). Nothing is deleted outside ``trainings_dir`` and ``value_roots``.

    Raises:
        RetentionError: some models' files are outside ``trainings_dir``, or some files could
            not be deleted now (permissions, a mount); the rest of the sweep was done first
            (``expired``, ``cleared``), and the next sweep finishes what was left.
    """
    refused: list[str] = []
    try:
        expired = expire_models(engine, now=now, allowed_root=trainings_dir, value_roots=value_roots)
    except RetentionError as exc:
        expired, refused = exc.expired, list(exc.refused)
    try:
        cleared = cleared_ended_trainings(engine, now=now, trainings_dir=trainings_dir,
                                          value_roots=value_roots, policy=policy)
    except RetentionError as exc:
        cleared, refused = exc.cleared, refused + exc.refused
    try:
        orphans = removed_orphans(engine, now=now, trainings_dir=trainings_dir)
    except OSError as exc:
        orphans, refused = [], [*refused, f"leftovers of creations: {_not_deleted(exc)}"]
    if refused:
        raise RetentionError(expired, refused, cleared=cleared)
    return RetentionSweep(expired, cleared, orphans)


class RetentionError(StoreError):
    """Some records (or ended trainings) could not be expired; the others were. ``expired``
    lists the models that were, ``cleared`` the ended trainings without a model."""

    def __init__(self, expired: list[ModelInfo], refused: list[str], *, cleared: Sequence[str] = ()) -> None:
        self.expired = expired
        self.refused = refused
        self.cleared = list(cleared)
        done = len(expired) + len(self.cleared)
        super().__init__(
            f"expected retention to delete what every expired training keeps, got {len(refused)} it "
            f"could not delete now ({done} {'other was' if done == 1 else 'others were'}): "
            + "; ".join(refused)
            + ". Fix what each names and run the sweep again (typestrict credits expire, or "
            "retention_job): it finishes what was left"
        )
