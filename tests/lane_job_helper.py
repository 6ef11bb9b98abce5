"""A reconstructable two-step job on the warm multiprocess executor whose steps share the tag
``lane: store``, for the test of ``tag_concurrency_limits`` (tests/ is on the run's ``PYTHONPATH``).

Each step writes ``<name>.start`` and ``<name>.end`` (wall-clock seconds) into the folder at
``LANE_TEST_DIR``. With ``wait_for_company`` a step waits (up to 60 s) until the other step has
started, so it proves the two ran at once; without, it works for half a second.
"""

import os
import time
from pathlib import Path

import dagster as dg

from resources.executor import warm_multiprocess_executor


def _step(name: str) -> dg.OpDefinition:
    other = "right" if name == "left" else "left"

    @dg.op(name=name, tags={"lane": "store"}, config_schema={"wait_for_company": dg.Field(bool, default_value=False)})
    def work(context: dg.OpExecutionContext) -> None:
        folder = Path(os.environ["LANE_TEST_DIR"])
        (folder / f"{name}.start").write_text(repr(time.time()))
        if context.op_config["wait_for_company"]:
            deadline = time.monotonic() + 60
            while not (folder / f"{other}.start").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            time.sleep(0.5)
        (folder / f"{name}.end").write_text(repr(time.time()))

    return work


_LEFT, _RIGHT = _step("left"), _step("right")


@dg.job(executor_def=warm_multiprocess_executor)
def lane_job() -> None:
    _LEFT()
    _RIGHT()


def make_lane_job() -> dg.JobDefinition:
    """``lane_job`` (``dg.reconstructable`` needs a module-level function)."""
    return lane_job
