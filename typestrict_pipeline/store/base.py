"""The declarative base every domain table derives from, and the UTC time type.

Tables live beside the domain they serve (for example ``typestrict_pipeline.ledger.tables``);
their schema changes are Alembic migrations under ``typestrict_pipeline/store/migrations``,
one branch per area (``branch_labels``), all applied with ``upgrade heads``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import DateTime, MetaData, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base with a stable constraint naming convention (migrations rely on it)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timestamp stored as naive UTC and always read back as an aware UTC datetime.

    Naive datetimes are refused on write: a local time would make stored times depend on the
    writer's time zone (the mistake Optuna fixed in its issue #6708).
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if not isinstance(value, dt.datetime) or value.tzinfo is None:
            raise ValueError(
                f"expected a timezone-aware datetime, got {value!r}. "
                "Pass datetime.now(timezone.utc) or another aware value."
            )
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        assert isinstance(value, dt.datetime)
        return value.replace(tzinfo=dt.UTC)


def utcnow() -> dt.datetime:
    """The current time, aware, in UTC."""
    return dt.datetime.now(dt.UTC)
