"""One id per thing: a candidate is ``#N`` (its number in the study) on every surface, with its
rank where both matter; numbers are rounded for display only and exact in ``--json``.

Issue 3/7: the Dagster metadata said ``winner 27`` (the store's row id) while the table and the
CLI said ``#3 ★``, and ``pbo`` was shown as ``0.34662004662004664``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib.util
import io
import json
import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from assets.studies import leaderboard_materialization
from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.cli import main
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
from typestrict_pipeline.study.space import SearchSpace

_PAGES = Path(__file__).with_name("test_console_pages.py")
_spec = importlib.util.spec_from_file_location("test_console_pages_for_ids", _PAGES)
assert _spec is not None and _spec.loader is not None
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)


def _study(engine: Engine) -> int:
    """A finished study of three candidates after two other studies (so that the store's row
    ids of its candidates are not their numbers in the study)."""
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
    return sid


def _get(sqlite_url: str, home: Path, key: str, *paths: str) -> list[Any]:
    """The answers of the API and console application (the API's key or its console session)
    to ``paths``, in order, with the application started and stopped around them."""
    application = create_app(sqlite_url, home, jev_source=pages.JEV)
    loop = asyncio.new_event_loop()
    lifespan = application.router.lifespan_context(application)
    loop.run_until_complete(lifespan.__aenter__())
    browser = pages.Browser(application, key)
    try:
        return [browser.get(path) for path in paths]
    finally:
        browser.close()
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


def test_the_winner_and_the_numbers_read_the_same_everywhere(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _study(engine)
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


def test_the_api_and_the_console_show_each_candidates_rank_with_the_clis_id(
        tmp_path: Path, sqlite_url: str) -> None:
    """Issue 3/7, item 7: the API's leaderboard rows and the console's table name each candidate
    ``#N`` beside its rank, the pairs the CLI's table prints (not the store's row id)."""
    engine = open_store(sqlite_url)
    sid = _study(engine)
    board = load_leaderboard(engine, sid)
    key = create_api_key(engine, "demo").key
    engine.dispose()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["study", "leaderboard", str(sid), "--store-url", sqlite_url]) == 0
    cli = re.findall(r"^\| (\d+|—) \| (#\d+)( ★)? ", out.getvalue(), flags=re.M)
    assert len(cli) == 3 and [star for *_, star in cli].count(" ★") == 1
    pairs = [(rank, name) for rank, name, _ in cli]
    winner = next(name for _, name, star in cli if star)
    assert any(rank != name.lstrip("#") for rank, name in pairs)  # the rank is not the number
    assert all(r.candidate_id != r.index for r in board.rows)  # nor is the store's row id

    answer, page = _get(sqlite_url, tmp_path / "home", key,
                        f"/v1/studies/{sid}/leaderboard", f"/console/studies/{sid}")
    api = answer.json()
    assert [(str(r["rank"]) if r["rank"] is not None else "—", r["candidate"]) for r in api["rows"]] == pairs
    assert all(r["candidate"] == f"#{r['index']}" for r in api["rows"])
    assert api["winner"]["candidate"] == winner
    assert page.status_code == 200, page.text[:2000]
    shown = re.findall(r'<tr( class="winner")? data-candidate="\d+"><td>(\d+|—)</td>\s*'
                       r'<th scope="row"><span class="candidate">(#\d+)</span> ', page.text)
    assert [(rank, name) for _, rank, name in shown] == pairs
    assert [name for mark, _, name in shown if mark] == [winner]


_NAMED_LISTS = ("stepm", "tested", "unstable")


def _candidate_names(value: object, path: str = "") -> list[tuple[str, object]]:
    """Every (path, value) in a JSON document that names a candidate, and every key that would
    carry a store row id."""
    found: list[tuple[str, object]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{path}.{k}"
            if k in ("candidate_id", "winner_candidate_id"):
                found.append((here, v))
            elif k in _NAMED_LISTS and isinstance(v, list):
                found.extend((f"{here}[{i}]", x) for i, x in enumerate(v))
            elif k == "candidate" and not isinstance(v, dict | list):
                found.append((here, v))
            found.extend(_candidate_names(v, here) if isinstance(v, dict | list) else [])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_candidate_names(v, f"{path}[{i}]"))
    return found


def test_no_json_surface_names_a_candidate_by_its_store_row_id(
        tmp_path: Path, sqlite_url: str) -> None:
    """Issue 3/7, item 7: ``--json`` and the API's leaderboard name the winner, each row, the
    StepM set and the stability check's candidates ``"#N"``; no key carries the store's row id
    (which differs from N once other studies exist)."""
    engine = open_store(sqlite_url)
    sid = _study(engine)
    board = load_leaderboard(engine, sid)
    key = create_api_key(engine, "demo").key
    engine.dispose()
    assert board.joint is not None and board.joint.stability is not None
    assert board.joint.stepm and board.joint.stability.tested  # the lists are not empty
    numbers = {f"#{r.index}" for r in board.rows}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["study", "leaderboard", str(sid), "--json", "--store-url", sqlite_url]) == 0
    cli = json.loads(out.getvalue())
    api = _get(sqlite_url, tmp_path / "home", key, f"/v1/studies/{sid}/leaderboard")[0].json()
    for doc in (cli, api):
        named = _candidate_names(doc)
        assert len(named) >= len(board.rows) + 2  # rows, winner, StepM, stability
        wrong = [(where, v) for where, v in named if not (isinstance(v, str) and v in numbers)]
        assert wrong == []
        stepm = [f"#{r.index}" for c in board.joint.stepm for r in board.rows if r.candidate_id == int(c)]
        assert doc["joint_inference"]["stepm"] == stepm
