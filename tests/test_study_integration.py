"""Studies ↔ re-runs integration: the minimum set at creation, the baseline on the holdout,
the lineage under the leaderboard, deleting a study, promoted parameters in live runs."""

from __future__ import annotations

import datetime as dt

import pytest

from typestrict_pipeline.errors import LimitError
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyRow

UTC = dt.UTC
DAY = dt.timedelta(days=1)
LAST = repo.LastBacktest(30, 10)


def _config(**overrides: object) -> StudyConfig:
    base: dict[str, object] = dict(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.50, 0.60]}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 6, 1, tzinfo=UTC),
        step=DAY, n_folds=2, tune_steps=10, eval_steps=10, holdout_steps=20,
        max_candidates=2, max_total_steps=100_000, budget_micro=1_000_000,
        backend={"backend": "synthetic", "cost_per_step": 3},
    )
    base.update(overrides)
    return StudyConfig(**base)  # type: ignore[arg-type]


def test_min_unseen_steps_is_set_when_the_study_is_created(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    with pytest.raises(LimitError, match="Min unseen steps for a re-run as a whole number ≥ 1, got 0"):
        create_study_from_config(engine, _config(min_unseen_steps=0), last_backtest=LAST)
    sid = create_study_from_config(engine, _config(min_unseen_steps=20), last_backtest=LAST)
    with session_scope(engine) as s:
        row = s.get(StudyRow, sid)
        assert row is not None and row.min_unseen_steps == 20
    # Set once: a later "set if missing" keeps the study's own value.
    assert repo.set_min_unseen_steps(engine, sid, 5) == 20
