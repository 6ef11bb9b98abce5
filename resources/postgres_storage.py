"""The production Dagster storage: Dagster's PostgreSQL storage, run ends read once runs say so.

Dagster writes a run's end to the event log and then to the run's row, two statements on
PostgreSQL; the daemon's run retries that read the event log in between skip the run for good
(:mod:`resources.run_ends`). On SQLite the gap was seconds on a busy machine and lost a killed
run's retry in this project's suite; on PostgreSQL it is normally milliseconds, and the same
rule closes it. :class:`PatientPostgresStorage` is Dagster's ``storage: postgres`` (the same
configuration, tables and database) whose event log answers the daemon's cursor reads with
:func:`resources.run_ends.settled_logs`. Named in the instance configuration written by
:mod:`typestrict_pipeline.instance` (``storage: custom:``) and in
``deploy/dagster.postgres.yaml``.
"""

from typing import Any

from dagster._core.storage.config import PostgresStorageConfig
from dagster._core.storage.runs.base import RunStorage
from dagster._serdes import ConfigurableClassData
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.storage import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

from resources.run_ends import SettledRunEnds

__all__ = ["PatientPostgresEventLogStorage", "PatientPostgresStorage"]


class PatientPostgresEventLogStorage(SettledRunEnds, PostgresEventLogStorage):
    """Dagster's PostgreSQL event log whose cursor reads of run ends wait for the runs' rows
    (:class:`resources.run_ends.SettledRunEnds`)."""

    def __init__(self, postgres_url: str, runs: RunStorage, should_autocreate_tables: bool = True,
                 token_provider: Any = None) -> None:
        super().__init__(postgres_url, should_autocreate_tables, token_provider=token_provider)
        self._runs = runs


class PatientPostgresStorage(DagsterPostgresStorage):
    """Dagster's ``storage: postgres`` (same configuration and tables), run ends read by cursor
    once their runs' rows say so."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data: ConfigurableClassData | None = None, token_provider: Any = None) -> None:
        # DagsterPostgresStorage.__init__ is not called (it would open Dagster's own event log
        # first); this is what it does, with the patient event log.
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        self._run_storage = PostgresRunStorage(postgres_url, should_autocreate_tables,
                                               token_provider=token_provider)
        self._event_log_storage = PatientPostgresEventLogStorage(
            postgres_url, self._run_storage, should_autocreate_tables, token_provider=token_provider)
        self._schedule_storage = PostgresScheduleStorage(postgres_url, should_autocreate_tables,
                                                         token_provider=token_provider)
        self._instance_weakref = None

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData | None, config_value: PostgresStorageConfig
    ) -> "PatientPostgresStorage":
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=bool(config_value.get("should_autocreate_tables", True)),
                   token_provider=get_token_provider_from_config(config_value))
