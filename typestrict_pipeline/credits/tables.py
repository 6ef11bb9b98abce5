"""The credits area's tables: accounts, the append-only ledger, and model records.

Schema changes are Alembic migrations on the ``credits`` branch
(``typestrict_pipeline/store/migrations/versions/credits_0001_ledger.py``); these models must
match them. No foreign keys leave the area; workspace ids are plain strings.
"""

from __future__ import annotations

import datetime as dt
import enum

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Enum,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from typestrict_pipeline.store import Base, UTCDateTime


class EntryKind(enum.StrEnum):
    """What a ledger entry records.

    Attributes:
        GRANT: credits added to a workspace (a purchase, a plan, a gift); ``amount > 0``;
            ``reference`` is the caller's idempotency key (for example the invoice id).
        SPEND: the credit a training costs, taken when it is started or registered
            (``amount == -1``); ``reference`` is the training id.
        SETTLEMENT: the verdict reached the ledger: ``+1`` for ``refund`` and ``failed`` (the
            credit comes back), ``0`` for ``beats`` and ``kept`` (the credit stays spent);
            ``reference`` is the training id. At most one per training, the first is final.
        ADJUSTMENT: a manual correction by an operator, with its reason and reference.
    """

    GRANT = "grant"
    SPEND = "spend"
    SETTLEMENT = "settlement"
    ADJUSTMENT = "adjustment"


class ModelState(enum.StrEnum):
    """Where a model's files are in their retention.

    Attributes:
        AVAILABLE: the files are on disk until ``expires_at``.
        EXPIRED: the files were deleted by retention; the record and its audit stay.
    """

    AVAILABLE = "available"
    EXPIRED = "expired"


def _enum(cls: type[enum.StrEnum], name: str) -> Enum:
    # Stored as the values (lowercase strings), as a VARCHAR with a CHECK, portable to both backends.
    return Enum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=32,
        values_callable=lambda e: [m.value for m in e],
        validate_strings=True,
    )


class CreditAccount(Base):
    """One workspace's balance: the running total of its ledger entries, kept in the same
    transaction as every entry (and checked against their sum by the tests)."""

    __tablename__ = "credit_accounts"

    workspace_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    balance: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False)

    __table_args__ = (CheckConstraint("balance >= 0", name="balance_not_negative"),)


class CreditEntry(Base):
    """One line of the append-only ledger (never updated, never deleted)."""

    __tablename__ = "credit_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workspace_id: Mapped[str] = mapped_column(String(200), nullable=False)
    kind: Mapped[EntryKind] = mapped_column(_enum(EntryKind, "credit_entry_kind"), nullable=False)
    reference: Mapped[str] = mapped_column(String(200), nullable=False)
    training_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    amount: Mapped[int] = mapped_column(Integer, nullable=False)
    balance_after: Mapped[int] = mapped_column(Integer, nullable=False)
    verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False)
    # credits_0003: a settlement's audit file, by its SHA-256 (NULL before, and for other kinds)
    audit_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        # The exactly-once guarantee: one SPEND and one SETTLEMENT per training, one GRANT per key.
        UniqueConstraint("kind", "reference", name="uq_credit_entries_kind_reference"),
        CheckConstraint("balance_after >= 0", name="balance_after_not_negative"),
        # credits_0002: training entries reference their training; amounts fit their kind.
        CheckConstraint(
            "kind NOT IN ('spend', 'settlement') "
            "OR (training_id IS NOT NULL AND reference = training_id)",
            name="training_entries_reference_training",
        ),
        CheckConstraint(
            "(kind = 'grant' AND amount > 0) OR (kind = 'spend' AND amount = -1) "
            "OR (kind = 'settlement' AND amount IN (0, 1)) OR (kind = 'adjustment' AND amount <> 0)",
            name="amount_fits_kind",
        ),
        Index("ix_credit_entries_workspace_id_id", "workspace_id", "id"),
        Index("ix_credit_entries_training_id", "training_id"),
    )


class ModelRecord(Base):
    """A trained model as the product knows it: its verdict, its files' retention, its audit.

    The model id is the training id (one model per training). The audit JSON is stored as the
    exact bytes of the audit file, so it can be served byte-identical after the files expire.
    """

    __tablename__ = "model_records"

    model_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    verdict: Mapped[str] = mapped_column(String(32), nullable=False)
    keep_if_loses: Mapped[bool] = mapped_column(Boolean, nullable=False)
    delivered: Mapped[bool] = mapped_column(Boolean, nullable=False)
    files_path: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[ModelState] = mapped_column(_enum(ModelState, "model_state"), nullable=False)
    settled_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False)
    expired_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # loaded only when asked for: a record read for its state never reads its audit's bytes
    audit_json: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    audit_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (Index("ix_model_records_state_expires_at", "state", "expires_at"),)
