"""The reruns migration creates exactly the tables and columns the models declare, on both backends,
and the partial unique index keeps one enabled schedule per lineage."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import Table, inspect
from sqlalchemy.exc import IntegrityError

import typestrict_pipeline.reruns.tables as tables
from typestrict_pipeline.reruns.tables import RerunSchedule, ScheduleState
from typestrict_pipeline.store import open_store, session_scope

MODELS = [tables.StudyRerunSetting, tables.RerunSchedule, tables.RerunTick, tables.LineageRow,
          tables.Workspace, tables.NotificationSetting, tables.OutboxMessage, tables.DataEndRow]


def test_migration_matches_the_models(store_url: str) -> None:
    engine = open_store(store_url)
    insp = inspect(engine)
    for model in MODELS:
        table = model.__table__
        assert isinstance(table, Table)
        db_columns = {c["name"]: c for c in insp.get_columns(table.name)}
        assert set(db_columns) == {c.name for c in table.columns}, table.name
        for column in table.columns:
            assert db_columns[column.name]["nullable"] == column.nullable, (table.name, column.name)


def _schedule(lineage: str, state: ScheduleState) -> RerunSchedule:
    return RerunSchedule(workspace_id="w", workflow_id="f", root_study_id=lineage, lineage_root_id=lineage,
                         owner="a@x", cadence_seconds=3600, min_unseen_steps=5, budget_micro_usd=1,
                         state=state, enabled_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), last_slot=-1)


def test_one_enabled_schedule_per_lineage(store_url: str) -> None:
    engine = open_store(store_url)
    with session_scope(engine) as s:
        s.add_all([_schedule("7", ScheduleState.CANCELLED), _schedule("7", ScheduleState.CANCELLED),
                   _schedule("7", ScheduleState.ENABLED), _schedule("8", ScheduleState.ENABLED)])
    with pytest.raises(IntegrityError), session_scope(engine) as s:
        s.add(_schedule("7", ScheduleState.ENABLED))
