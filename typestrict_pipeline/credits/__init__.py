"""Credits: the per-training credit ledger, model records, retention and stored audits.

Plain typed Python over the domain store (no Dagster): the Dagster wiring is in
``assets/credits.py`` and ``resources/credits.py``, the commands in ``typestrict credits`` and
``typestrict audit``. See ``docs/credits.md``.
"""

from typestrict_pipeline.credits.intake import IntakeDecision, decide, parse_cursor, run_key
from typestrict_pipeline.credits.ledger import (
    CreditLedger,
    InsufficientCreditsError,
    LedgerLine,
    Settlement,
    run_transaction,
    settle_in_session,
)
from typestrict_pipeline.credits.models import (
    DEFAULT_RETENTION_DAYS,
    ModelInfo,
    RetentionError,
    RetentionPolicy,
    RetentionSweep,
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
    settled_audit_sha256,
    sweep_retention,
)
from typestrict_pipeline.credits.reasons import settlement_reason
from typestrict_pipeline.credits.tables import (
    CreditAccount,
    CreditEntry,
    EntryKind,
    ModelRecord,
    ModelState,
)

__all__ = [
    "DEFAULT_RETENTION_DAYS",
    "CreditAccount",
    "CreditEntry",
    "CreditLedger",
    "EntryKind",
    "InsufficientCreditsError",
    "IntakeDecision",
    "LedgerLine",
    "ModelInfo",
    "ModelRecord",
    "ModelState",
    "RetentionError",
    "RetentionPolicy",
    "RetentionSweep",
    "SettledAuditError",
    "Settlement",
    "SettlementRequest",
    "SettlementResult",
    "audit_bytes",
    "decide",
    "due_for_expiry",
    "expire_models",
    "get_model",
    "list_models",
    "model_files",
    "parse_cursor",
    "run_key",
    "run_transaction",
    "settle_in_session",
    "settle_training",
    "settled_audit_sha256",
    "settlement_reason",
    "sweep_retention",
]
