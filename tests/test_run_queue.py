"""The product's run queue (``resources/run_queue.py``): Dagster's queue, looked at every half second.

The instance the product writes must name it with its half-second interval and keep the
``concurrency`` block's limits (one run per training); an interval the daemon cannot honour is
refused with the product's message when the instance loads. The shipped templates in deploy/
name the same queue and the same run launcher (its warm start and preloaded modules) as the
instance the product writes, so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from resources.run_queue import PromptRunQueue
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.instance import (
    RUN_COORDINATOR,
    RUN_LAUNCHER,
    TRAINING_TAG,
    postgres_instance_config,
    sqlite_instance_config,
    write_instance_yaml,
)

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def test_the_written_instance_looks_at_the_queue_every_half_second_with_its_limits(tmp_path: Path) -> None:
    write_instance_yaml(tmp_path, sqlite_instance_config(tmp_path))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, PromptRunQueue)
        assert coordinator.dequeue_interval_seconds == 0.5
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None and queue.max_concurrent_runs == 2
        assert {"key": TRAINING_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in (
            queue.tag_concurrency_limits)
    pg = postgres_instance_config({"DAGSTER_PG_URL": "postgresql+psycopg2://u@127.0.0.1:5432/d"})
    assert pg["run_coordinator"] == sqlite_instance_config(tmp_path)["run_coordinator"]


@pytest.mark.parametrize("interval", [0.1, 61.0])
def test_an_interval_the_daemon_cannot_honour_is_refused(tmp_path: Path, interval: float) -> None:
    config = sqlite_instance_config(tmp_path)
    config["run_coordinator"]["config"]["dequeue_interval_seconds"] = interval
    write_instance_yaml(tmp_path, config)
    with pytest.raises(InputError, match=r"dequeue_interval_seconds between 0\.5 and 60"):
        dg.DagsterInstance.from_config(str(tmp_path)).run_coordinator  # noqa: B018


@pytest.mark.parametrize("template", ["dagster.yaml", "dagster.postgres.yaml"])
def test_the_shipped_templates_name_the_same_queue_and_launcher_as_the_written_instance(
        template: str) -> None:
    shipped = yaml.safe_load((DEPLOY / template).read_text())
    assert shipped["run_coordinator"] == RUN_COORDINATOR
    assert shipped["run_launcher"] == RUN_LAUNCHER  # warm start, and the modules it preloads
