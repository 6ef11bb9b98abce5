"""Every list of the API pages one way (``limit``, ``offset``, ``X-Total-Count``, ``Link``), and
a workspace's list costs its own items, never the other workspaces' (docs/api.md, "Lists, a
page at a time")."""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from typestrict_pipeline.api.paging import LIST_LIMIT, LIST_LIMIT_MAX
from typestrict_pipeline.api.trainings import TrainingStore
from typestrict_pipeline.backtest import PointInTimeTable, Workflow, run_backtest
from typestrict_pipeline.backtest.store import save_backtest
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.files import read_json_file
from typestrict_pipeline.lifecycle.trainings import start_training
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.form import StudyForm, study_config
from typestrict_pipeline.study.service import create_study_from_config

_spec = importlib.util.spec_from_file_location("test_api_support", Path(__file__).with_name("test_api_support.py"))
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

UTC = dt.UTC
DAY = dt.timedelta(days=1)
LIST_PATHS = ("/v1/trainings", "/v1/models", "/v1/studies", "/v1/backtests", "/v1/datasets", "/v1/files",
              "/v1/workspaces/acme/ledger")


def _pages(c: httpx.Client, path: str, limit: int) -> tuple[list[Any], list[int]]:
    """Every item of a list, followed page by page through ``Link: rel="next"``; and each
    answer's ``X-Total-Count``."""
    items: list[Any] = []
    totals: list[int] = []
    url: str | None = f"{path}?limit={limit}"
    while url is not None:
        r = c.get(url)
        assert r.status_code == 200, r.text
        assert len(r.json()) <= limit
        items += r.json()
        totals.append(int(r.headers["X-Total-Count"]))
        found = re.search(r'<([^>]+)>; rel="next"', r.headers.get("Link", ""))
        url = found.group(1) if found else None
        assert len(totals) < 50, "a list that never ends"
    return items, totals


def _trainings(tmp_path: Path, url: str, key: str, n: int) -> list[str]:
    csv, jev = support.make_dataset(tmp_path, n=40)
    (tmp_path / "home").mkdir(exist_ok=True)
    ids = []
    with support.ApiServer(url, tmp_path / "home", jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as c:
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        for _ in range(n):
            made = c.post("/v1/trainings", json=support.TRAINING_BODY)
            assert made.status_code == 201, made.text
            ids.append(made.json()["id"])
    return ids


def test_a_list_is_read_a_page_at_a_time_and_every_item_comes_once(tmp_path: Path, sqlite_url: str) -> None:
    key = support.new_key(sqlite_url, "acme", credits=5)
    made = _trainings(tmp_path, sqlite_url, key, 5)
    # No rate limit: 40 requests in a row (the limit has its own tests, tests/test_api_ratelimit.py)
    with support.ApiServer(sqlite_url, tmp_path / "home", rate_limit=None) as server, server.client(key) as c:
        whole = c.get("/v1/trainings")
        assert whole.status_code == 200 and whole.headers["X-Total-Count"] == "5"
        assert "Link" not in whole.headers  # it fits on its first page
        assert [t["id"] for t in whole.json()] == sorted(made)
        items, totals = _pages(c, "/v1/trainings", 2)
        assert [t["id"] for t in items] == sorted(made) and totals == [5, 5, 5]
        second = c.get("/v1/trainings?limit=2&offset=2")
        assert second.headers["Link"] == ('</v1/trainings?limit=2&offset=4>; rel="next", '
                                          '</v1/trainings?limit=2&offset=0>; rel="prev"')
        past = c.get("/v1/trainings?offset=99")
        assert past.status_code == 200 and past.json() == [] and past.headers["X-Total-Count"] == "5"
        # the ledger: a grant, then a credit spent per training, oldest first
        lines, totals = _pages(c, "/v1/workspaces/acme/ledger", 4)
        assert [ln["kind"] for ln in lines] == ["grant"] + ["spend"] * 5 and totals == [6, 6]
        assert [ln["id"] for ln in lines] == sorted(ln["id"] for ln in lines)
        # the same two parameters, refused the same way, on every list
        for path in LIST_PATHS:
            assert c.get(f"{path}?limit=1&offset=0").status_code == 200, path
            for bad in ("limit=0", f"limit={LIST_LIMIT_MAX + 1}", "limit=1.0", "offset=-1", "limit=1&limit=2",
                        "limt=1", "limit=1&page=2"):
                r = c.get(f"{path}?{bad}")
                assert r.status_code == 422, (path, bad, r.text)
                assert set(r.json()) == {"error"} and "Traceback" not in r.text
        # a parameter the route does not take is refused, not ignored: ?limt=1 answered the default page
        r = c.get("/v1/trainings?limt=1")
        assert r.json()["error"]["message"] == (
            "limt (in the query): expected one of the route's query parameters (limit, offset), got '1'. "
            "Fix the request (the schema is at /v1/openapi.json)"), r.text
        r = c.get("/v1/workspaces/acme?verbose=1")
        assert r.status_code == 422 and "expected no query parameter (the route takes none)" in r.text, r.text
        r = c.get(f"/v1/files?limit={LIST_LIMIT_MAX + 1}")
        assert f"limit (in the query): expected a number of at most {LIST_LIMIT_MAX}" in r.json()["error"]["message"], r.text


def test_studies_and_backtests_past_the_200_newest_are_reachable(tmp_path: Path, sqlite_url: str) -> None:
    """``GET /v1/studies`` and ``/v1/backtests`` answered their 200 newest and nothing older."""
    key = support.new_key(sqlite_url, "acme")
    engine = open_store(sqlite_url)
    wf = Workflow("sign", lambda c: 1, lambda c: 1, lambda d, o, c: 1.0, ("t",), DAY, "the value on the next day")
    t0 = dt.datetime(2021, 1, 1, tzinfo=UTC)
    data = PointInTimeTable("t", event_time=[t0 + i * DAY for i in range(5)],
                            known_time=[t0 + (i + 1) * DAY for i in range(5)], columns={"v": [1.0] * 5})
    try:
        result = run_backtest(wf, data=data, start=t0 + DAY, end=t0 + 3 * DAY, step=DAY)
        backtests = [save_backtest(engine, result, workspace="acme") for _ in range(LIST_LIMIT + 3)]
        form: dict[str, Any] = {"start": "2012-01-01", "end": "2012-12-01", "tune_steps": 20, "eval_steps": 20,
                "holdout_steps": 20, "grid": ["skill=0.5,0.6"], "max_candidates": 2, "max_total_steps": 1000,
                "synthetic": True}
        studies = [create_study_from_config(engine, study_config(StudyForm(**form, workflow=f"wx-{i}", workspace="acme")))
                   for i in range(3)]
    finally:
        engine.dispose()
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        first = c.get("/v1/backtests")
        assert len(first.json()) == LIST_LIMIT and first.headers["X-Total-Count"] == str(LIST_LIMIT + 3)
        items, _ = _pages(c, "/v1/backtests", LIST_LIMIT)
        assert sorted(b["id"] for b in items) == sorted(backtests)
        items, totals = _pages(c, "/v1/studies", 2)
        assert [s["id"] for s in items] == sorted(studies, reverse=True) and totals == [3, 3]


def test_another_workspaces_data_is_never_read_to_list_this_ones(tmp_path: Path, sqlite_url: str) -> None:
    """A workspace's datasets were listed by reading every workspace's tables (a broken table of
    another workspace failed this one's list), and its trainings by reading every workspace's
    manifests on every list."""
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    write_seattle_csv(tmp_path / "w.csv", known_until=dt.datetime(2013, 1, 1, tzinfo=UTC))
    mine, theirs = support.new_key(sqlite_url, "acme", credits=1), support.new_key(sqlite_url, "other", credits=1)
    made = _trainings(tmp_path, sqlite_url, mine, 1)
    with support.ApiServer(sqlite_url, tmp_path / "home") as server:
        for key, name in ((mine, "weather_a"), (theirs, "weather_b")):
            with server.client(key) as c:
                assert c.put("/v1/files/w.csv", content=(tmp_path / "w.csv").read_bytes()).status_code == 201
                r = c.post("/v1/datasets", json={"name": name, "workflow": "seattle_rain", "tables": {"weather": "w.csv"}})
                assert r.status_code == 201, r.text
        broken = [p for p in (tmp_path / "home" / "datasets").rglob("*.csv") if "weather_b" in str(p)]
        assert broken
        for p in broken:
            p.write_text("event_time,known_time\nnot a time,")
        with server.client(theirs) as c:
            assert c.get("/v1/datasets/weather_b").status_code == 422  # theirs is broken, and says so
        with server.client(mine) as c:
            listed = c.get("/v1/datasets")
            assert listed.status_code == 200, listed.text
            assert [d["name"] for d in listed.json()] == ["weather_a"]
            named = c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2012-02-01",
                                                  "end": "2012-03-01", "dataset": "weather_b"})
            assert named.status_code == 422, named.text  # theirs is not ours to name; ours is listed
            assert "or one this workspace registered (weather_a)" in named.json()["error"]["message"], named.text
    # Trainings: which workspace a folder belongs to is read once, then kept.
    store = TrainingStore(tmp_path / "home", open_store(sqlite_url), None)
    for i in range(30):
        shutil.copytree(store.folder(made[0]), store.trainings_dir / f"tr_other{i:08d}")
        manifest = next(p for p in (store.trainings_dir / f"tr_other{i:08d}").iterdir() if p.suffix == ".json"
                        and "draft" in p.name)
        manifest.write_text(manifest.read_text().replace('"workspace_id": "acme"', '"workspace_id": "other"'))
    CreditLedger(store.engine).grant("other", 30, reference="copies")
    for i in range(30):  # each copy a training: charged, its lifecycle row written (a draft no
        start_training(store.engine, "other", f"tr_other{i:08d}")  # row knows is no training)
    reads: list[Path] = []
    real = read_json_file

    def counted(path: Path, **kw: Any) -> Any:
        reads.append(path)
        return real(path, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("typestrict_pipeline.api.trainings.read_json_file", counted)
        assert store.list_ids("acme") == made and len(store.list_ids("other")) == 30
        first = len(reads)
        assert store.list_ids("acme") == made and store.list_ids("solo") == []
        assert len(reads) == first  # no manifest read again
    assert first <= 3 * 31  # each folder once (the manifest looked for, then its draft)
    # A folder removed and made again (here for acme: its inode may be the old one's) is read again.
    again = store.trainings_dir / "tr_other00000007"
    shutil.rmtree(again)
    shutil.copytree(store.folder(made[0]), again)
    assert store.list_ids("acme") == sorted([*made, again.name]) and len(store.list_ids("other")) == 29


def test_a_server_whose_recorded_jev_is_gone_says_so_and_charges_nothing(tmp_path: Path, sqlite_url: str) -> None:
    """It said "expected room to store the training's files on the server, got No such file or
    directory", as if the disk were full."""
    key = support.new_key(sqlite_url, "acme", credits=1)
    csv, _ = support.make_dataset(tmp_path, n=40)
    (tmp_path / "home").mkdir()
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:  # a file never made
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        r = c.post("/v1/trainings", json=support.TRAINING_BODY)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["message"] == (
            "expected the server's recorded Jev predictions at 'jev-never-asked.jsonl', got no such file. "
            "Nothing was charged; retry later, and tell the operator (the server's --jev-source names a "
            "file that is gone)")
        assert c.get("/v1/workspaces/acme").json()["balance"] == 1
        assert c.get("/v1/trainings").json() == []


def test_a_pages_views_are_each_trainings_view(tmp_path: Path, sqlite_url: str) -> None:
    """``TrainingStore.views`` (a list's page: one sweep, two queries) says what ``view`` says of
    each training: open, cancelled, expired by the sweep it makes, another workspace's left out."""
    key = support.new_key(sqlite_url, "acme", credits=4)
    made = _trainings(tmp_path, sqlite_url, key, 3)
    theirs = _trainings(tmp_path, sqlite_url, support.new_key(sqlite_url, "other", credits=1), 1)
    engine = open_store(sqlite_url)
    try:
        store = TrainingStore(tmp_path / "home", engine, None)
        store.cancel("acme", made[0])
        later = dt.datetime.now(UTC) + dt.timedelta(days=400)  # past every deadline: the sweep expires them
        asked = [*made, *theirs, "tr_0000000000000000"]
        batch = store.views("acme", asked)
        assert list(batch) == made
        assert [v.state.value for v in batch.values()] == ["cancelled", "awaiting_predictions", "awaiting_predictions"]
        expired = store.views("acme", made, now=later)
        assert [v.state.value for v in expired.values()] == ["cancelled", "expired", "expired"]
        for tid in made:  # one by one
            one = store.view("acme", tid, now=later)
            assert (one.state, one.model, one.status) == (expired[tid].state, expired[tid].model, expired[tid].status)
    finally:
        engine.dispose()
