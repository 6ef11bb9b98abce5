"""One id per thing: a candidate is ``#N`` (its number in the study) on every surface, with its
rank where both matter; numbers are rounded for display only and exact in ``--json``.

Issue 3/7: the Dagster metadata said ``winner 27`` (the store's row id) while the table and the
CLI said ``#3 ★``, and ``pbo`` was shown as ``0.34662004662004664``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import re

from assets.studies import leaderboard_materialization
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
from typestrict_pipeline.study.space import SearchSpace


def test_the_winner_and_the_numbers_read_the_same_everywhere(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    utc = dt.UTC
    layout = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=utc), end=dt.datetime(2012, 12, 1, tzinfo=utc),
                        step=dt.timedelta(days=1), n_folds=3, tune_steps=20, eval_steps=20,
                        holdout_steps=20)
    for workflow in ("other-a", "other-b"):  # other studies first: row ids and numbers differ
        sid = repo.create_study(engine, workspace="demo", workflow=workflow, workflow_version="v1",
                                space=SearchSpace(grid={"skill": [0.5, 0.6]}), layout=layout,
                                limits=StudyLimits(2, 10_000))
        run_study_local(engine, sid, SyntheticBackend(seed=3), max_workers=2)
    sid = repo.create_study(engine, workspace="demo", workflow="wx", workflow_version="v1",
                            space=SearchSpace(grid={"skill": [0.5, 0.7, 0.6]}), layout=layout,
                            limits=StudyLimits(3, 10_000))
    run_study_local(engine, sid, SyntheticBackend(seed=3, noise=0.05), max_workers=2)
    board = load_leaderboard(engine, sid)
    winner = next(r for r in board.rows if r.candidate_id == board.winner_candidate_id)
    assert winner.candidate_id != winner.index  # the store's id is not the candidate's number
    meta = leaderboard_materialization(engine, sid).metadata
    assert meta["winner"].value == f"#{winner.index} (rank {winner.rank})"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["study", "leaderboard", str(sid), "--store-url", sqlite_url]) == 0
    starred = re.findall(r"\| (\d+) \| #(\d+) ★", out.getvalue())
    assert starred == [(str(winner.rank), str(winner.index))]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["study", "leaderboard", str(sid), "--json", "--store-url", sqlite_url]) == 0
    data = json.loads(out.getvalue())
    assert data["winner"] == {"candidate": f"#{winner.index}", "index": winner.index,
                              "rank": winner.rank}
    assert board.pbo is not None and board.joint is not None
    if board.pbo is not None:  # rounded for the eye in the UI, exact in --json
        assert meta["pbo"].value == round(board.pbo.pbo, 4)
        assert data["pbo"]["pbo"] == board.pbo.pbo
    if board.joint is not None:
        assert meta["stepm_set"].value == ", ".join(
            f"#{r.index}" for c in board.joint.stepm for r in board.rows if r.candidate_id == int(c)
        ) or "none"
        assert meta["spa_pvalue"].value == round(board.joint.spa_pvalue, 4)
    engine.dispose()
