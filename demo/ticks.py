"""The demo's sensor ticks, recorded on the demo's Dagster instance so the UI shows its history.

The demo evaluates the real sensors itself (in process, with the demo's resources) and runs what
they ask for in process, so it can print each step. This module records what a daemon would
have recorded: one tick per evaluation (skipped with its reason, or successful with the runs it
requested), stored under the sensor's selector in the code location ``workspace.yaml`` names, so
the UI's sensor page lists the ticks; and the tags that make a run "launched by" its sensor.

It uses Dagster's tick records (``dagster._core.scheduler.instigation``), which are not public
API: pinned Dagster 1.13.27; ``tests/test_ui_browser.py`` checks the UI shows them.
"""

import time
from collections.abc import Sequence

import dagster as dg
from dagster._core.definitions.repository_definition.valid_definitions import (
    SINGLETON_REPOSITORY_NAME,
)
from dagster._core.definitions.selector import InstigatorSelector
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus
from dagster._serdes import create_snapshot_id

UI_LOCATION = "typestrict_pipeline"  # workspace.yaml's location_name (what `make ui` serves)
SENSOR_TAG = "dagster/sensor_name"
TICK_TAG = "dagster/tick"
RUN_KEY_TAG = "dagster/run_key"


def sensor_selector_id(sensor_name: str, location_name: str = UI_LOCATION) -> str:
    """The id the UI looks a sensor's ticks up by (location, repository, sensor name)."""
    return create_snapshot_id(
        InstigatorSelector(location_name=location_name, repository_name=SINGLETON_REPOSITORY_NAME,
                           name=sensor_name)
    )


class SensorTick:
    """One evaluation of ``sensor_name``, recorded as a tick when it starts.

    Call :meth:`skipped` or :meth:`fired` when the evaluation is known; runs launched for a
    fired tick carry :meth:`run_tags`.
    """

    def __init__(self, instance: dg.DagsterInstance, sensor_name: str) -> None:
        selector = sensor_selector_id(sensor_name)
        self.instance = instance
        self.sensor_name = sensor_name
        self._tick = instance.create_tick(TickData(
            instigator_origin_id=selector, instigator_name=sensor_name,
            instigator_type=InstigatorType.SENSOR, status=TickStatus.STARTED,
            timestamp=time.time(), selector_id=selector,
        ))

    @property
    def tick_id(self) -> int:
        """The tick's id in the instance."""
        tick_id: int = self._tick.tick_id
        return tick_id

    def run_tags(self, run_key: str | None) -> dict[str, str]:
        """The tags of a run this tick launched (the UI then shows it as launched by the sensor)."""
        tags = {SENSOR_TAG: self.sensor_name, TICK_TAG: str(self.tick_id)}
        if run_key is not None:
            tags[RUN_KEY_TAG] = run_key
        return tags

    def skipped(self, reason: str | None, cursor: str | None = None) -> None:
        """Record the tick as skipped with ``reason`` (what the sensor said)."""
        tick = self._tick.with_status(TickStatus.SKIPPED).with_reason(reason or "").with_cursor(cursor)
        self.instance.update_tick(tick)

    def fired(self, run_ids: Sequence[str], run_keys: Sequence[str | None],
              cursor: str | None = None) -> None:
        """Record the tick as successful, with the runs it launched."""
        tick = self._tick
        for run_id, key in zip(run_ids, run_keys, strict=True):
            tick = tick.with_run_info(run_id, key)
        self.instance.update_tick(tick.with_status(TickStatus.SUCCESS).with_cursor(cursor))
