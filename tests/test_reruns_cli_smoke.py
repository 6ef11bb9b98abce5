"""One smoke test through the real code location: ``dagster sensor preview study_rerun_sensor``
loads ``typestrict_pipeline.definitions`` in a subprocess and prints the page's skip message."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.service import enable_schedule
from typestrict_pipeline.reruns.studies import record_data_end
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store

ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)


@pytest.mark.slow
def test_dagster_sensor_preview_prints_the_skip_reason(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    root = scenario.create_root_study(engine, workspace="demo", root_end=ROOT_END, budget_micro_usd=10**6,
                                      min_unseen_steps=20, workflow=scenario.backend(shift_at=ROOT_END))
    scenario.run(engine, root)
    enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1d", owner="ana@example.com")
    record_data_end(engine, "demo", scenario.WORKFLOW, ROOT_END + dt.timedelta(days=7))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = {**os.environ, "DAGSTER_HOME": str(home), "TYPESTRICT_STORE_URL": url}
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "sensor", "preview", "study_rerun_sensor", "-m", "typestrict_pipeline.definitions"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Not enough unseen data yet: 7 of 20 steps" in proc.stdout, proc.stdout + proc.stderr[-2000:]
