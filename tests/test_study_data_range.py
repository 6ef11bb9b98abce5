"""A study whose windows reach past its data is refused before it is stored, as a backtest is.

Before, ``typestrict study run seattle_rain --end 2099-01-01`` (or ``POST /v1/studies``) stored
the study, launched its run and only then failed, at its first window, with the data's range;
``POST /v1/studies/estimate`` priced it."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select

from typestrict_pipeline.api.studies import estimate_study
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import StudyRow

UTC = dt.UTC
BACKEND = {"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow",
           "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_weather", "latency_s": 0.0}}
INSIDE = ("expected a time range inside the data of table 'weather': decisions from 2012-01-02T00:00:00Z "
          "(when its first row is known) to 2015-12-31T00:00:00Z (the last time whose outcome, 1 day later, "
          "is known), got ")


def _config(end: dt.datetime) -> StudyConfig:
    return StudyConfig(
        workspace="demo", workflow="seattle_rain", workflow_version="vtest",
        space=SearchSpace(grid={"threshold": [0.3, 0.6]}), start=dt.datetime(2012, 1, 2, tzinfo=UTC),
        end=end, step=dt.timedelta(days=1), n_folds=2, tune_steps=10, eval_steps=10, holdout_steps=10,
        max_candidates=2, max_total_steps=1000, backend=BACKEND)


def test_a_study_past_the_end_of_its_data_is_refused_before_it_is_stored(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    late = _config(dt.datetime(2016, 1, 2, tzinfo=UTC))  # its last holdout decision: 2016-01-01
    with pytest.raises(InputError) as refused:
        create_study_from_config(engine, late)
    assert str(refused.value).startswith(INSIDE + "2015-11-21T00:00:00Z .. 2016-01-01T00:00:00Z. Pick a range")
    with pytest.raises(InputError, match="expected a time range inside the data of table 'weather'"):
        estimate_study(engine, late)
    with session_scope(engine) as s:
        assert s.execute(select(func.count()).select_from(StudyRow)).scalar_one() == 0
    # The last day the data can score is still a study's: nothing inside the data is refused.
    assert create_study_from_config(engine, _config(dt.datetime(2016, 1, 1, tzinfo=UTC))) == 1
