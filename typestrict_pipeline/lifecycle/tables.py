"""The lifecycle area's tables (schema: migration ``lifecycle_0001``).

* ``lifecycle_leases``: who works on an object now (a backtest, a study, a training's
  submission claim): the process's identity (host, boot, id, start tick) and its last heartbeat.
  The primary key ``(kind, object_id)`` makes a lease exclusive; a lease whose process is dead
  (:func:`typestrict_pipeline.processes.identity_alive`) or whose heartbeat is stale is taken
  over, never waited for.
* ``training_lifecycle``: one row per training the product charged when it started (created
  through the API or the CLI), and per training whose verdict run refused its predictions: its
  state (:class:`~typestrict_pipeline.lifecycle.trainings.TrainingState`), the deadline that
  moves it next, how many submissions it had, and why it is where it is.

Times are aware UTC (:class:`~typestrict_pipeline.store.UTCDateTime`).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from typestrict_pipeline.store import Base, UTCDateTime


class LeaseRow(Base):
    __tablename__ = "lifecycle_leases"

    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    object_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    boot_id: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int] = mapped_column(Integer)
    start_ticks: Mapped[int] = mapped_column(BigInteger)
    token: Mapped[str] = mapped_column(String(32))
    acquired_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class TrainingRow(Base):
    __tablename__ = "training_lifecycle"

    training_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(200), index=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    deadline_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True, index=True)
    submissions: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(16), nullable=True)
