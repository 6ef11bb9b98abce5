"""Every state has an exit: lifecycles, deadlines, leases and liveness (no Dagster import).

* :mod:`~typestrict_pipeline.lifecycle.trainings`: a training's states, the deadlines that settle
  its credit, cancel, and the ledger invariant (spends = settlements + open trainings).
* :mod:`~typestrict_pipeline.lifecycle.leases`: which process works on what, checked by process
  identity (safe against reused ids) and heartbeats.
* :mod:`~typestrict_pipeline.lifecycle.reaper`: backtests and studies whose process died are
  marked ``interrupted`` (when and why); cancel any that has not ended.

The tables of ``docs/lifecycle.md`` are these modules' enums; ``tests/test_lifecycle_docs.py``
compares them.
"""
