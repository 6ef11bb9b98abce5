"""Scheduled re-runs of a finished study: tick decisions, windows, lineage, workspace, notifications.

Pure core (no Dagster import). The Dagster wiring is in ``assets/reruns.py`` and
``resources/reruns.py``; the command line in ``typestrict_pipeline/cli/schedule.py``.
Method: ``docs/method/reruns.md``; user-facing page: ``docs/scheduled-reruns.md``.
"""
