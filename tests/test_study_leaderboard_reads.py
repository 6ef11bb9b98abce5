"""A leaderboard read again reads no scores while the study's finished runs are unchanged, and
reads them again as soon as a run finishes (issue 24: a 10,000 × 8 study's scores are 180,000
JSON documents, about 50 s to read; the console's pages and the API read the leaderboard on every
view).

The store's traffic is observed with SQLAlchemy's ``before_cursor_execute`` event on the real
SQLite store: what counts is whether a statement selecting ``scores_json`` ran.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine, event

from typestrict_pipeline.store import open_store
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.leaderboard import load_leaderboard, render_markdown
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import SyntheticBackend, execute_run, plan_runs
from typestrict_pipeline.study.space import SearchSpace

UTC = dt.UTC


def _study(engine: Engine) -> int:
    layout = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=UTC),
                        end=dt.datetime(2012, 12, 1, tzinfo=UTC), step=dt.timedelta(days=1),
                        n_folds=2, tune_steps=20, eval_steps=20, holdout_steps=20)
    space = SearchSpace(grid={"skill": [0.5 + 0.01 * i for i in range(4)]})
    sid = repo.create_study(engine, workspace="demo", workflow="wx", workflow_version="v1",
                            space=space, layout=layout, limits=StudyLimits(4, 10_000),
                            last_backtest=repo.LastBacktest(1000, 100))
    repo.start_study(engine, sid)
    return sid


def _score_reads(engine: Engine) -> list[str]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "scores_json" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return seen


def test_an_unchanged_study_is_read_once_and_a_finished_run_is_read_at_once(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _study(engine)
    keys = plan_runs(engine, sid)
    backend = SyntheticBackend()
    for key in keys[:-2]:  # the last candidate's last fold (tune, eval) not run yet
        execute_run(engine, key, backend)
    reads = _score_reads(engine)

    first = render_markdown(load_leaderboard(engine, sid))
    assert len(reads) == 1
    again = render_markdown(load_leaderboard(engine, sid))
    assert len(reads) == 1  # nothing finished since: no score read again
    assert again == first

    for key in keys[-2:]:
        execute_run(engine, key, backend)
    reads.clear()  # (running a window reads its own row too)
    board = load_leaderboard(engine, sid)
    assert len(reads) == 1  # a run finished: the scores are read again
    assert render_markdown(board) != first
    assert all(row.complete for row in board.rows)  # the last candidate's eval steps are in
