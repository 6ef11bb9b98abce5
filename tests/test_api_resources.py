"""The API's resources beyond trainings, on a real server: datasets (register from the workspace's
files, append, scoped), the usage budget, schedules and Settings → Notifications (settings,
deliveries and failures, scoped to the workspace)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.notify import enqueue
from typestrict_pipeline.reruns.service import ScheduleView, enable_schedule
from typestrict_pipeline.reruns.tables import LineageRow
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store, session_scope

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

UTC = dt.UTC


def test_a_dataset_is_registered_from_the_workspace_files_appended_and_kept_apart(
    tmp_path: Path, sqlite_url: str
) -> None:
    write_seattle_csv(tmp_path / "first.csv", known_until=dt.datetime(2013, 1, 1, tzinfo=UTC))
    write_seattle_csv(tmp_path / "more.csv", known_after=dt.datetime(2013, 1, 1, tzinfo=UTC),
                      known_until=dt.datetime(2013, 2, 1, tzinfo=UTC))
    key, other = support.new_key(sqlite_url, "acme"), support.new_key(sqlite_url, "other")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        for name in ("first.csv", "more.csv"):
            assert c.put(f"/v1/files/{name}", content=(tmp_path / name).read_bytes()).status_code == 201
        made = c.post("/v1/datasets", json={"name": "weather_live", "workflow": "seattle_rain",
                                            "tables": {"weather": "first.csv"}})
        assert made.status_code == 201, made.text
        rows = made.json()["tables"][0]["rows"]
        assert made.json()["name"] == "weather_live" and made.json()["last_known"].startswith("2013-01-01")
        again = c.post("/v1/datasets", json={"name": "weather_live", "workflow": "seattle_rain",
                                             "tables": {"weather": "first.csv"}})
        assert again.status_code == 409
        added = c.post("/v1/datasets/weather_live/append", json={"file": "more.csv"})
        assert added.status_code == 200, added.text
        assert added.json()["added"] == 31 and added.json()["tables"][0]["rows"] == rows + 31
        assert added.json()["last_known"].startswith("2013-02-01")
        stale = c.post("/v1/datasets/weather_live/append", json={"file": "more.csv"})
        assert stale.status_code == 422  # rows already known are never rewritten
        assert [d["name"] for d in c.get("/v1/datasets").json()] == ["weather_live"]
        bad = c.post("/v1/datasets", json={"name": "Bad-Name", "workflow": "seattle_rain",
                                           "tables": {"weather": "first.csv"}})
        assert bad.status_code == 422 and "lowercase letters" in bad.json()["error"]["message"]
        # A backtest of this workspace may name it (checked against its data: it ends in February).
        run = c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2012-12-01",
                                            "end": "2013-01-15", "dataset": "weather_live"})
        assert run.status_code == 202, run.text
        with server.client(other) as o:
            assert o.get("/v1/datasets").json() == []
            assert o.get("/v1/datasets/weather_live").status_code == 404
            assert o.post("/v1/datasets/weather_live/append", json={"file": "more.csv"}).status_code == 404
            refused = o.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2012-12-01",
                                                    "end": "2013-01-15", "dataset": "weather_live"})
            assert refused.status_code == 422 and "none yet" in refused.json()["error"]["message"]
            # The same name is free for another workspace.
            assert o.put("/v1/files/first.csv", content=(tmp_path / "first.csv").read_bytes()).status_code == 201
            assert o.post("/v1/datasets", json={"name": "weather_live", "workflow": "seattle_rain",
                                                "tables": {"weather": "first.csv"}}).status_code == 201


def test_the_budget_is_read_and_set_only_for_a_workspace_that_has_a_subscription(
    tmp_path: Path, sqlite_url: str
) -> None:
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        read = c.get("/v1/workspaces/acme/budget").json()
        assert read["subscription"] == "NOT_SET_UP" and read["budget_micro_usd"] is None
        refused = c.put("/v1/workspaces/acme/budget", json={"budget_usd": 50})
        assert refused.status_code == 409
        assert "typestrict schedule workspace acme --subscription ACTIVE" in refused.json()["error"]["message"]
        engine = open_store(sqlite_url)
        try:
            set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=0)
        finally:
            engine.dispose()
        exhausted = c.get("/v1/workspaces/acme/budget").json()
        assert exhausted["exhausted"] is True and "scheduled work waits" in exhausted["text"]
        # "-0" is a typo, never $0 (which would stop the workspace's scheduled work): refused,
        # as a string and as a JSON number, and the budget stays as it was
        for body in (b'{"budget_usd": "-0"}', b'{"budget_usd": -0}', b'{"budget_usd": -0.00}'):
            typo = c.put("/v1/workspaces/acme/budget", content=body, headers={"Content-Type": "application/json"})
            assert typo.status_code == 422, (body, typo.text)
            message = typo.json()["error"]["message"]
            assert "expected a USD amount from 0 to 1,000,000" in message and "-0" in message, message
        assert c.get("/v1/workspaces/acme/budget").json()["budget_micro_usd"] == 0
        raised = c.put("/v1/workspaces/acme/budget", json={"budget_usd": "12.50"}).json()
        assert raised["budget_micro_usd"] == 12_500_000 and raised["exhausted"] is False
        assert raised["text"].startswith("$0") and "of $12.50 spent this month" in raised["text"]


def _notified_schedule(engine: Engine) -> ScheduleView:
    """Workspace ``acme``: a finished root study, its schedule owned by ana@example.com, and one
    "A scheduled study changes its winner" for her in the outbox; the schedule."""
    set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    root_end = dt.datetime(2015, 2, 1, tzinfo=UTC)
    root = scenario.create_root_study(engine, workspace="acme", root_end=root_end, budget_micro_usd=1_000_000,
                      min_unseen_steps=10,
                      workflow=scenario.backend(shift_at=root_end - dt.timedelta(days=10)))
    scenario.run(engine, root)
    schedule = enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1d", owner="ana@example.com")
    with session_scope(engine) as s:
        entry = s.execute(select(LineageRow.id).where(LineageRow.lineage_root_id == root)).scalars().first()
    enqueue(engine, dedupe_key=f"winner-changed:{entry}", kind="study_winner_changed",
            recipient="ana@example.com", subject="A scheduled study changes its winner", body="b")
    return schedule


def test_schedules_and_notifications_of_the_workspace(tmp_path: Path, sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    try:
        schedule = _notified_schedule(engine)
        enqueue(engine, dedupe_key="winner-changed:999999", kind="study_winner_changed",
                recipient="someone@else.example", subject="A scheduled study changes its winner", body="b")
    finally:
        engine.dispose()
    key, other = support.new_key(sqlite_url, "acme"), support.new_key(sqlite_url, "other")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        listed = c.get("/v1/schedules").json()["schedules"]
        assert [s["id"] for s in listed] == [schedule.id] and listed[0]["owner"] == "ana@example.com"
        notes = c.get("/v1/notifications").json()
        assert notes["settings"] == [{"person": "ana@example.com", "kind": "study_winner_changed",
                                      "title": "A scheduled study changes its winner", "enabled": True}]
        assert [d["recipient"] for d in notes["deliveries"]] == ["ana@example.com"]  # not another's
        assert notes["deliveries"][0]["state"] == "PENDING" and "waiting" in notes["deliveries"][0]["text"]
        off = c.put("/v1/notifications/ana@example.com", json={"enabled": False})
        assert off.status_code == 200 and off.json()["enabled"] is False
        assert c.get("/v1/notifications").json()["settings"][0]["enabled"] is False
        assert c.put("/v1/notifications/bob@example.com", json={"enabled": False}).status_code == 404
        with server.client(other) as o:
            assert o.get("/v1/schedules").json() == {"schedules": []}
            assert o.get("/v1/notifications").json() == {"settings": [], "deliveries": []}
            assert o.post(f"/v1/schedules/{schedule.id}/cancel", json={"by": "eve@example.com"}).status_code == 404
        cancelled = c.post(f"/v1/schedules/{schedule.id}/cancel", json={"by": "ana@example.com"})
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"


def _weather_lines(tmp_path: Path) -> list[str]:
    write_seattle_csv(tmp_path / "base.csv", known_until=dt.datetime(2013, 1, 1, tzinfo=UTC))
    return (tmp_path / "base.csv").read_text().splitlines()


def _stored_before(tmp_path: Path, lines: list[str]) -> Path:
    """A home holding workspace acme's dataset 'old' (table weather of ``lines``) as a server
    stored it before today's checks existed, written straight to its folder; the home."""
    import json

    from typestrict_pipeline.api.datasets import datasets_base, stored_name

    home = tmp_path / "home"
    folder = datasets_base(home) / stored_name("acme", "old")
    folder.mkdir(parents=True)
    (folder / "weather.csv").write_text("\n".join(lines) + "\n")
    (folder / "dataset.json").write_text(json.dumps({"name": stored_name("acme", "old"), "workflow": "seattle_rain",
                                                     "registered_at": "2013-01-01T00:00:00Z",
                                                     "tables": {"weather": "weather.csv"}}))
    return home


def test_a_dataset_is_checked_against_its_workflow_before_anything_is_stored(
    tmp_path: Path, sqlite_url: str
) -> None:
    lines = _weather_lines(tmp_path)
    head, rows = lines[0], lines[1:]
    cut = ",".join(head.split(",")[:3])  # event_time,known_time,precipitation only
    bad = {
        "short.csv": ([head, *rows[:4], rows[4].rsplit(",", 2)[0], *rows[5:]],
                      ["short.csv, row 5", "7 cells, like the header"]),
        "lots.csv": ([head, *rows[:2], ",".join([*rows[2].split(",")[:2], "lots", *rows[2].split(",")[3:]]),
                      *rows[3:]], ["lots.csv, row 3, column 'precipitation'", "expected a number", "'lots'"]),
        "narrow.csv": ([cut, *(",".join(r.split(",")[:3]) for r in rows)],
                       ["narrow.csv", "missing: temp_max, temp_min, wind, weather", "seattle_rain"]),
        "naive.csv": ([head, rows[0], rows[1].replace("T00:00:00Z", "T00:00:00", 1), *rows[2:]],
                      ["naive.csv, row 2, column 'event_time'", "timezone-aware"]),
    }
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        for name, (content, words) in bad.items():
            assert c.put(f"/v1/files/{name}", content="\n".join(content).encode() + b"\n").status_code == 201
            r = c.post("/v1/datasets", json={"name": "wx", "workflow": "seattle_rain", "tables": {"weather": name}})
            message = r.json()["error"]["message"]
            assert r.status_code == 422, (name, r.text)
            assert all(w in message for w in words), (name, message)
            assert str(tmp_path) not in message  # the customer's file name, not the server's path
        assert c.get("/v1/datasets").json() == []  # nothing stored
        # Offsets may differ from row to row (each converted to UTC): the same instants as Z.
        shifted = [head, *rows]
        ev, kn, rest = rows[5].split(",", 2)
        shifted[6] = f"{ev[:10]}T14:00:00+14:00,{kn[:10]}T00:00:00-00:00,{rest}"
        assert c.put("/v1/files/offsets.csv", content="\n".join(shifted).encode() + b"\n").status_code == 201
        made = c.post("/v1/datasets", json={"name": "wx", "workflow": "seattle_rain",
                                            "tables": {"weather": "offsets.csv"}})
        assert made.status_code == 201, made.text
        assert made.json()["tables"][0]["rows"] == len(rows)
        again = c.post("/v1/datasets", json={"name": "wx", "workflow": "seattle_rain",
                                             "tables": {"weather": "offsets.csv"}})
        message = again.json()["error"]["message"]
        assert again.status_code == 409 and "got 'wx'" in message
        assert "POST /v1/datasets/wx/append" in message and "typestrict" not in message and "__" not in message



def test_rows_with_the_same_times_that_differ_and_a_column_without_a_name_are_refused(
    tmp_path: Path, sqlite_url: str
) -> None:
    """POST /v1/datasets shares the rules of typestrict data register: two rows with the same
    event_time and known_time that differ are refused with both rows and the column (a backtest's
    score depended on their order), a header column without a name at the header (it was a 500)."""
    lines = _weather_lines(tmp_path)
    head, rows = lines[0], lines[1:]
    cells = rows[9].split(",")
    other = ",".join([*cells[:2], "41.5", *cells[3:]])
    bad = {
        "conflict.csv": ([head, *rows[:10], other, *rows[10:]],
                         ["conflict.csv, row 11, column 'precipitation': expected one row per event_time and "
                          "known_time", f"got rows 10 and 11 both about event_time {cells[0]} known at {cells[1]}",
                          "a correction is a new row about the same event_time with a later known_time"]),
        "unnamed.csv": ([head + ",", *(r + ",1" for r in rows)],
                        ["unnamed.csv: expected a name for every column of the header, got an empty name for "
                         "column 8 (after 'weather')"]),
    }
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        for name, (content, words) in bad.items():
            assert c.put(f"/v1/files/{name}", content="\n".join(content).encode() + b"\n").status_code == 201
            r = c.post("/v1/datasets", json={"name": "wx", "workflow": "seattle_rain", "tables": {"weather": name}})
            assert r.status_code == 422, (name, r.text)
            message = r.json()["error"]["message"]
            assert all(w in message for w in words), (name, message)
            assert str(tmp_path) not in message  # the customer's file name, not the server's path
        assert c.get("/v1/datasets").json() == []  # nothing stored
        # Rows identical in every cell are one row; the append of conflicting rows is refused too.
        assert c.put("/v1/files/twice.csv", content="\n".join([head, *rows, *rows[:5]]).encode()).status_code == 201
        made = c.post("/v1/datasets", json={"name": "wx", "workflow": "seattle_rain", "tables": {"weather": "twice.csv"}})
        assert made.status_code == 201 and made.json()["tables"][0]["rows"] == len(rows), made.text
        more = [f"2013-01-0{d}T00:00:00Z,2013-01-0{d + 1}T00:00:00Z,1.0,10,5,3,rain" for d in (1, 2)]
        assert c.put("/v1/files/more.csv", content="\n".join([head, *more, more[0].replace("rain", "sun")]).encode()
                     ).status_code == 201
        r = c.post("/v1/datasets/wx/append", json={"file": "more.csv"})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"].startswith(
            "more.csv, row 3, column 'weather': expected one row per event_time and known_time"), r.text


def _from_kinds(kinds: dict[str, str], rows: int) -> str:
    """A CSV built only from what ``GET /v1/backtests/workflows`` says: one cell of each kind per row."""
    cell: dict[str, Callable[[int], str]] = {
        "number": lambda i: f"{i}.5", "text": lambda i: f"t{i}", "bool": lambda i: "true" if i % 2 else "false"}
    lines = [",".join(kinds)]
    for i in range(rows):
        day = dt.datetime(2012, 1, 1, tzinfo=UTC) + dt.timedelta(days=i)
        times = {"event_time": day, "known_time": day + dt.timedelta(days=1)}
        lines.append(",".join(times[c].strftime("%Y-%m-%dT%H:%M:%SZ") if kind == "time" else cell[kind](i)
                              for c, kind in kinds.items()))
    return "\n".join(lines) + "\n"


def test_a_client_reads_the_columns_a_workflow_needs_and_a_dataset_of_them_is_accepted(
    tmp_path: Path, sqlite_url: str
) -> None:
    import json
    import re

    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        listed = c.get("/v1/backtests/workflows")
        assert listed.status_code == 200, listed.text
        [wf] = [w for w in listed.json() if w["workflow"] == "seattle_rain"]
        assert list(wf["columns"]) == wf["tables"] == ["weather"]
        kinds = wf["columns"]["weather"]
        assert list(kinds)[:2] == ["event_time", "known_time"] and set(kinds.values()) <= {"time", "number", "text", "bool"}
        # docs/api.md's example is what the API answers
        doc = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
        said = re.search(r"/v1/backtests/workflows\" \| jq -c '\.\[\] \| \{workflow, columns\}'\n# (.*)\n", doc)
        assert said is not None and json.loads(said.group(1)) == {"workflow": "seattle_rain", "columns": wf["columns"]}
        # A file of exactly those columns, built from nothing else, is registered
        assert c.put("/v1/files/exact.csv", content=_from_kinds(kinds, 30).encode()).status_code == 201
        made = c.post("/v1/datasets", json={"name": "exact", "workflow": "seattle_rain", "tables": {"weather": "exact.csv"}})
        assert made.status_code == 201, made.text
        table = made.json()["tables"][0]  # "columns" means one list: the workflow's, in its order
        assert table["columns"] == list(kinds) and table["rows"] == 30
        # ... and one without one of them is refused, listing them in the same order
        last = list(kinds)[-1]
        fewer = {c: k for c, k in kinds.items() if c != last}
        assert c.put("/v1/files/fewer.csv", content=_from_kinds(fewer, 30).encode()).status_code == 201
        refused = c.post("/v1/datasets", json={"name": "fewer", "workflow": "seattle_rain", "tables": {"weather": "fewer.csv"}})
        message = refused.json()["error"]["message"]
        assert refused.status_code == 422 and f"({', '.join(kinds)})" in message and f"(missing: {last})" in message


def test_a_backtest_is_checked_against_its_data_and_params_before_it_is_launched(
    tmp_path: Path, sqlite_url: str
) -> None:
    lines = _weather_lines(tmp_path)
    cells = lines[40].split(",")
    lines[40] = ",".join([*cells[:2], "lots", *cells[3:]])
    # A dataset stored before registering checked its columns (text in a number column).
    home = _stored_before(tmp_path, lines)
    key = support.new_key(sqlite_url, "acme")
    run = {"workflow": "seattle_rain", "start": "2012-06-01", "end": "2012-06-30"}
    with support.ApiServer(sqlite_url, home) as server, server.client(key) as c:
        refused = c.post("/v1/backtests", json={**run, "dataset": "old"})
        message = refused.json()["error"]["message"]
        assert refused.status_code == 422, refused.text
        assert "row 40, column 'precipitation'" in message and "expected a number" in message
        assert "'lots'" in message and str(tmp_path) not in message
        # A JSON number with a fraction is the number the CLI's --param threshold=0.5 gives.
        ok = c.post("/v1/backtests", json={**run, "params": {"threshold": 0.5}})
        assert ok.status_code == 202, ok.text
        out = c.post("/v1/backtests", json={**run, "params": {"threshold": 1.5}})
        message = out.json()["error"]["message"]
        assert out.status_code == 422 and "expected a value in [0.0, 1.0], got 1.5" in message
        assert "Decimal" not in message
        assert [b["id"] for b in c.get("/v1/backtests").json()] == [ok.json()["id"]]  # the refused: nothing


def test_a_stored_table_with_a_short_row_is_refused_naming_the_dataset_not_the_servers_path(
    tmp_path: Path, sqlite_url: str
) -> None:
    lines = _weather_lines(tmp_path)
    lines[40] = lines[40].rsplit(",", 1)[0]  # one cell short: was padded with NaN and launched
    home = _stored_before(tmp_path, lines)
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, home) as server, server.client(key) as c:
        refused = c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2012-06-01",
                                                "end": "2012-06-30", "dataset": "old"})
        message = refused.json()["error"]["message"]
        assert refused.status_code == 422, refused.text
        assert message.startswith("dataset 'old', stored table weather.csv, row 40: expected 7 cells, like the "
                                  "header, got 6 cells."), message
        assert str(tmp_path) not in message and "__" not in message
        assert c.get("/v1/backtests").json() == []


def test_the_estimate_screens_the_grid_as_creating_the_study_does(tmp_path: Path, sqlite_url: str) -> None:
    form = {"workflow": "seattle_rain", "start": "2013-01-02", "end": "2015-12-31", "tune_steps": 60,
            "eval_steps": 30, "holdout_steps": 60, "folds": 2, "max_candidates": 5, "max_total_steps": 100_000}
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server, server.client(key) as c:
        for grid, words in ((["threshold=abc"], "expected a number (like the default 0.5), got 'abc'"),
                            (["nope=1,2"], "a parameter of workflow 'seattle_rain'"),
                            (["threshold=5"], "expected a value in [0.0, 1.0], got 5"),
                            (["threshold=0.4", "threshold=0.9"], "expected each parameter once in field 'grid', "
                                                                 "got threshold twice")):
            estimate = c.post("/v1/studies/estimate", json={**form, "grid": grid})
            created = c.post("/v1/studies", json={**form, "grid": grid})
            assert estimate.status_code == created.status_code == 422, (grid, estimate.text, created.text)
            assert estimate.json()["error"]["message"] == created.json()["error"]["message"]
            assert words in estimate.json()["error"]["message"], estimate.text
        assert c.get("/v1/studies").json() == []
        # A value the workflow rejects is not priced: the estimate counts what the study would run.
        est = c.post("/v1/studies/estimate", json={**form, "grid": ["threshold=0.4,0.6,5"]})
        assert est.status_code == 200 and est.json()["candidates"] == 2 and est.json()["planned"] == 3
        created = c.post("/v1/studies", json={**form, "grid": ["threshold=0.4,0.6,5"]})
        assert created.status_code == 201, created.text


def test_a_point_in_time_file_that_expands_past_the_upload_limit_is_refused_before_it_is_read(
    tmp_path: Path, sqlite_url: str
) -> None:
    """A registered or appended ``.csv.bz2`` was read up to 1 GiB once decompressed, whatever the
    server's upload limit: a few kilobytes sent, a gigabyte read. Now each file holds at most the
    upload limit once decompressed (the trainings' rule), counted before it is read."""
    import bz2
    import gzip

    limit = 1024 * 1024
    write_seattle_csv(tmp_path / "first.csv", known_until=dt.datetime(2013, 1, 1, tzinfo=UTC))
    write_seattle_csv(tmp_path / "more.csv", known_after=dt.datetime(2013, 1, 1, tzinfo=UTC),
                      known_until=dt.datetime(2013, 2, 1, tzinfo=UTC))
    first, more = ((tmp_path / name).read_bytes() for name in ("first.csv", "more.csv"))
    big = bz2.compress(first.rstrip(b"\n") + b"x" * (2 * limit) + b"\n")  # a long last cell: 2 MiB more
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home", max_upload_bytes=limit) as server, server.client(key) as c:
        for name, data in (("big.csv.bz2", big), ("first.csv.gz", gzip.compress(first)),
                           ("more.csv.bz2", bz2.compress(more))):
            assert c.put(f"/v1/files/{name}", content=data).status_code == 201, name
        said = (f"big.csv.bz2: expected a dataset of at most {limit:,} bytes once decompressed (the server's "
                f"upload limit), got more from a file of {len(big):,} bytes. Send a smaller dataset, or split "
                "it into trainings of their own.")
        refused = c.post("/v1/datasets", json={"name": "w", "workflow": "seattle_rain", "tables": {"weather": "big.csv.bz2"}})
        assert refused.status_code == 422 and refused.json()["error"]["message"] == said, refused.text
        assert c.get("/v1/datasets").json() == []
        made = c.post("/v1/datasets", json={"name": "w", "workflow": "seattle_rain", "tables": {"weather": "first.csv.gz"}})
        assert made.status_code == 201, made.text
        refused = c.post("/v1/datasets/w/append", json={"file": "big.csv.bz2"})
        assert refused.status_code == 422 and refused.json()["error"]["message"] == said, refused.text
        added = c.post("/v1/datasets/w/append", json={"file": "more.csv.bz2"})
        assert added.status_code == 200 and added.json()["added"] == 31, added.text


def test_a_workspace_sees_why_a_notification_failed_without_the_servers_paths_or_secrets(
        tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed delivery's error names the server's file, and a webhook's URL holds its secret:
    the workspace's API and console show the file's name and the webhook's host, the operator's
    outbox the whole error."""
    import html
    import re

    import httpx

    from typestrict_pipeline.reruns.notify import FileTransport, deliver_pending, outbox

    engine = open_store(sqlite_url)
    try:
        _notified_schedule(engine)
        server_folder = tmp_path / "srv" / "operators-private-folder"
        server_folder.parent.mkdir()
        server_folder.write_text("a file where the transport wants a folder", encoding="utf-8")
        report = deliver_pending(engine, FileTransport(server_folder / "notifications.log"))
        assert len(report.failed) == 1
        operators = outbox(engine)[0].last_error
        assert operators is not None and str(server_folder) in operators  # the operator sees it whole
    finally:
        engine.dispose()
    secret = "T0/B0/s3cret-token"
    monkeypatch.setenv("TYPESTRICT_NOTIFY_TRANSPORT", "webhook")
    monkeypatch.setenv("TYPESTRICT_NOTIFY_WEBHOOK", f"https://hooks.example.com/services/{secret}?sig=abc")
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server:
        with server.client(key) as c:
            delivery = c.get("/v1/notifications").json()["deliveries"][0]
        with httpx.Client(base_url=server.url, timeout=120) as console:
            token = re.search(r'name="csrf_token" value="([^"]+)"', console.get("/console/sign-in").text)
            assert token is not None
            signed = console.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key})
            assert signed.status_code == 303, signed.text[:500]
            page = console.get("/console/settings/notifications")
    assert page.status_code == 200
    shown = html.unescape(page.text)
    assert 'Where it goes: <b class="wrap">a webhook (hooks.example.com)</b>' in shown, shown[:3000]
    assert delivery["last_error"] == "FileExistsError: [Errno 17] File exists: '…/operators-private-folder'", delivery
    assert delivery["last_error"] in delivery["text"] and delivery["last_error"] in shown
    for seen in (json.dumps(delivery), shown):
        assert secret not in seen and "sig=abc" not in seen and str(tmp_path) not in seen, seen[:3000]


def _failed_study_and_backtest(tmp_path: Path, sqlite_url: str,
                               exc: Exception) -> tuple[dict[str, object], dict[str, object], list[str]]:
    """A study and a backtest of workspace ``acme`` that failed with ``exc``, stored as the study
    job and the backtest's recorder store them (the exception's words, whole), then read as the
    workspace reads them on a real server: ``GET /v1/studies/{id}``, ``GET /v1/backtests/{id}``
    and the console's study and backtest pages (unescaped)."""
    import html
    import re

    import httpx

    from typestrict_pipeline.backtest.store import BacktestRecorder, load_backtest
    from typestrict_pipeline.backtest.workflows.weather import DEMO_PRICES, WEATHER
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.repository import LastBacktest
    from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
    from typestrict_pipeline.study.space import SearchSpace

    said = f"{type(exc).__name__}: {exc}"
    engine = open_store(sqlite_url)
    try:
        sid = create_study_from_config(engine, StudyConfig(
            workspace="acme", workflow="wx", workflow_version="v1",
            space=SearchSpace(grid={"skill": [0.5]}), start=dt.datetime(2012, 1, 1, tzinfo=UTC),
            end=dt.datetime(2012, 12, 1, tzinfo=UTC), step=dt.timedelta(days=1), n_folds=2,
            tune_steps=20, eval_steps=30, holdout_steps=60, max_candidates=1,
            max_total_steps=10_000, backend={"backend": "synthetic"}),
            last_backtest=LastBacktest(10, 1))
        repo.mark_failed(engine, sid, said)  # as the study job records its failure
        start = dt.datetime(2013, 1, 2, tzinfo=UTC)
        with pytest.raises(type(exc)), BacktestRecorder(
                engine, workspace="acme", workflow=WEATHER, start=start,
                end=start + dt.timedelta(days=3), step=dt.timedelta(days=1), steps_planned=4,
                dataset="seattle_weather", prices=DEMO_PRICES) as rec:
            raise exc
        stored = load_backtest(engine, rec.id)
        assert stored.error == said  # kept whole for the operator
    finally:
        engine.dispose()
    key = support.new_key(sqlite_url, "acme")
    with support.ApiServer(sqlite_url, tmp_path / "home") as server:
        with server.client(key) as c:
            study = c.get(f"/v1/studies/{sid}").json()
            backtest = c.get(f"/v1/backtests/{rec.id}").json()
        with httpx.Client(base_url=server.url, timeout=120) as console:
            token = re.search(r'name="csrf_token" value="([^"]+)"', console.get("/console/sign-in").text)
            assert token is not None
            signed = console.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key})
            assert signed.status_code == 303, signed.text[:500]
            pages = [console.get(f"/console/studies/{sid}"), console.get(f"/console/backtests/{rec.id}")]
    for page in pages:
        assert page.status_code == 200, page.text[:3000]
    return study, backtest, [html.unescape(p.text) for p in pages]


def test_a_failed_study_and_backtest_show_the_workspace_why_without_the_servers_paths_or_urls(
        tmp_path: Path, sqlite_url: str) -> None:
    """What a study's or a backtest's exception said is stored whole (the operator's CLI and
    logs read it); the workspace's API and console show it with each URL cut to its scheme and
    host and each server path to its last name (errors.for_customers), old rows included."""
    private = tmp_path / "srv" / "operators-private-folder" / "table.parquet"
    said = f"cannot read {private} from http://10.0.0.5:8080/v1/tables?key=s3cret-token: gone"
    study, backtest, pages = _failed_study_and_backtest(tmp_path, sqlite_url, OSError(said))
    shown = "cannot read …/table.parquet from http://10.0.0.5: gone"
    assert study["error"] == f"OSError: {shown}", study
    assert backtest["error"] == f"OSError: {shown}", backtest
    for page in pages:
        assert f"OSError: {shown}" in page, page[:3000]
    for seen in (json.dumps(study), json.dumps(backtest), *pages):
        assert str(tmp_path) not in seen and "s3cret" not in seen and ":8080" not in seen, seen[:3000]


#: What a study or backtest whose model endpoint did not answer stored before this version (and
#: still stores: the operator's CLI reads it whole).
ENDPOINT_GONE = (
    "expected the model endpoint http://10.0.0.5:8000/v1/chat/completions to answer, got connection failed "
    "([Errno 111] Connection refused) on every attempt of 3 steps in a row (it has not answered once in this "
    "backtest), so the backtest stopped after 3 of 20 planned steps instead of calling it for each. Check the "
    "model URL (--model-url; TYPESTRICT_BACKTEST_MODEL_URL for runs launched from the API or Dagster) and that "
    "the model server runs and is reachable from here, then run the backtest again; nothing was charged for "
    "calls that never reached it, and what ran is kept")


def test_a_study_and_backtest_whose_model_endpoint_did_not_answer_tell_the_workspace_what_it_can_do(
        tmp_path: Path, sqlite_url: str) -> None:
    """A workspace cannot set ``--model-url`` or the server's environment: the model endpoint is
    the platform's. Its API and console read the same expected and got, and in place of the
    operator's advice the workspace's (``engine.for_workspace``), applied when read, so a row
    stored by an earlier version reads so too."""
    from typestrict_pipeline.backtest.engine import (
        ENDPOINT_GONE_ADVICE,
        WORKSPACE_ADVICE,
        for_workspace,
    )
    from typestrict_pipeline.errors import EndpointUnreachableError

    assert ENDPOINT_GONE_ADVICE in ENDPOINT_GONE  # the operator's advice is the one stored before
    gone = EndpointUnreachableError(ENDPOINT_GONE, endpoint="http://10.0.0.5:8000/v1/chat/completions",
                                    transport="connection failed ([Errno 111] Connection refused)")
    study, backtest, pages = _failed_study_and_backtest(tmp_path, sqlite_url, gone)
    shown = for_workspace(f"EndpointUnreachableError: {ENDPOINT_GONE}")
    assert shown == (
        "EndpointUnreachableError: expected the model endpoint http://10.0.0.5 to answer, got connection failed "
        "([Errno 111] Connection refused) on every attempt of 3 steps in a row (it has not answered once in this "
        "backtest), so the backtest stopped after 3 of 20 planned steps instead of calling it for each. "
        f"{WORKSPACE_ADVICE}; nothing was charged for calls that never reached it, and what ran is kept")
    assert study["error"] == shown and backtest["error"] == shown, (study, backtest)
    assert backtest["card"] is None  # (none written here; a run card's: tests/test_backtest_endpoint_gone.py)
    for page in pages:
        assert shown in page, page[:3000]
    for seen in (json.dumps(study), json.dumps(backtest), *pages):
        assert "--model-url" not in seen and "TYPESTRICT_BACKTEST_MODEL_URL" not in seen, seen[:3000]
        assert "Check the model URL" not in seen and ":8000" not in seen, seen[:3000]
