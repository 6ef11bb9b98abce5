"""The product's run queue: Dagster's queued run coordinator, looked at twice a second.

Dagster's ``QueuedRunCoordinator`` takes its look-again interval in whole seconds (at least 1,
default 5): a run a sensor requests waits on average half the interval plus the queue's own
pass before it is launched. That wait is as long as a third of a verdict on the project's
machine (the verdict takes 1.5-2 s in process). This subclass takes the interval in seconds
with a fraction (``dequeue_interval_seconds``, 0.5 to 60; the daemon's loop wakes every half
second, so 0.5 is the shortest that takes effect); everything else (the limits in the
instance's ``concurrency`` block, the per-tag limits, retries of user-code failures) is
Dagster's own. Named in the instance configuration written by :mod:`typestrict_pipeline.instance`
(``run_coordinator``) and in ``deploy/dagster*.yaml``.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._serdes.config_class import ConfigurableClassData

from typestrict_pipeline.errors import InputError

SHORTEST_INTERVAL_S = 0.5
"""The daemon's loop waits in half-second steps, so a shorter interval would not take effect."""


class PromptRunQueue(QueuedRunCoordinator):
    """``QueuedRunCoordinator`` whose dequeue interval may be a fraction of a second (>= 0.5)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None,
                 dequeue_interval_seconds: float = 0.5, **kwargs: Any) -> None:
        super().__init__(inst_data=inst_data, dequeue_interval_seconds=1, **kwargs)
        self._interval = float(dequeue_interval_seconds)

    @property
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]
        return self._interval

    @classmethod
    def config_type(cls) -> Any:
        fields = dict(super().config_type())  # type: ignore[arg-type]
        fields["dequeue_interval_seconds"] = dg.Field(
            dg.Float, is_required=False, default_value=SHORTEST_INTERVAL_S,
            description="Seconds between the daemon's looks at the queue (0.5 to 60).")
        return fields

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> "PromptRunQueue":
        interval = float(config_value.get("dequeue_interval_seconds", SHORTEST_INTERVAL_S))
        if not SHORTEST_INTERVAL_S <= interval <= 60:
            raise InputError("run_coordinator.config.dequeue_interval_seconds between 0.5 and 60 "
                             "(seconds)", repr(interval), "fix dagster.yaml (the daemon looks at "
                             "the queue every half second at most)")
        rest = {k: v for k, v in config_value.items() if k != "dequeue_interval_seconds"}
        return cls(inst_data=inst_data, dequeue_interval_seconds=interval, **rest)
