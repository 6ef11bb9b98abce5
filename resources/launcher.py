"""The run launcher of the product's Dagster instance: Dagster's default, plus a health check.

Dagster's ``DefaultRunLauncher`` cannot tell run monitoring whether a run's process is alive,
so a run whose process was killed (``kill -9``, the OOM killer, a crash) stays "started" until
someone marks it failed by hand, unless it was launched by a code server that watches it. This
launcher answers run monitoring's question from the run's own events: the process id that
emitted the run's start event, checked on this host (:func:`typestrict_pipeline.processes.process_alive`,
safe against a reused id). It covers runs started anywhere on the host (launched by the daemon,
the UI or ``dagster job execute``). Named in the instance configuration written by
:mod:`typestrict_pipeline.instance` (``run_launcher``); a deployment whose runs execute on other
hosts needs a launcher of its own (see docs/operations.md).
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus
from dagster._serdes.config_class import ConfigurableClassData

from typestrict_pipeline.processes import process_alive


class WatchedRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose runs' processes run monitoring can check (same host)."""

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> "WatchedRunLauncher":
        return cls(inst_data=inst_data)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        records = self._instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1
        ).records
        event = records[0].event_log_entry if records else None
        pid = event.dagster_event.pid if event and event.dagster_event else None
        if event is None or pid is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, "the run has not reported its process yet")
        if process_alive(pid, running_at=event.timestamp):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"process {pid} is running")
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"the run's process {pid} is gone (killed or crashed) before the run finished; "
            "its retries, if any, follow (run_retries)",
        )
