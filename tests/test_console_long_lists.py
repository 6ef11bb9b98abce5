"""The console's last unbounded lists, a page at a time as the Trainings list and the Backtests
page's lists are (:mod:`typestrict_pipeline.console.paging`, 50 a page, Newer and Older links).

Before, a workspace with 10,000 studies and 10,000 notifications got: Settings → Notifications
its newest 100 deliveries and no way to the others; Settings → Usage every study in its Studies
table (2.67 MB, 1.9 s); the Backtests tab's "Study to re-run from" 500 options (98 kB) and no way
to an older study but a study page's link."""

from __future__ import annotations

import datetime as dt
import html
import re
from typing import cast

import httpx
from sqlalchemy import Table, insert, select

from tests.test_console_pages import Browser, _finished_study, app  # noqa: F401  (the fixture)
from typestrict_pipeline.store import open_store


def _copies(url: str, sid: int, n: int, *, workspace: str = "acme", deliveries: bool = True) -> list[int]:
    """``n`` copies of study ``sid`` in ``workspace`` (its row as stored), each with a lineage
    root and, when ``deliveries``, one notification: the study ids, oldest first."""
    from typestrict_pipeline.reruns.tables import (
        LineageRow,
        LineageState,
        OutboxMessage,
        OutboxState,
    )
    from typestrict_pipeline.study.tables import StudyRow

    t = cast(Table, StudyRow.__table__)
    cols = [c.name for c in t.columns if c.name != "id"]
    engine = open_store(url)
    try:
        with engine.begin() as c:
            row = c.execute(select(t).where(t.c.id == sid)).mappings().one()
            before = {i for (i,) in c.execute(select(t.c.id))}
            c.execute(insert(t), [{**{k: row[k] for k in cols}, "workspace": workspace} for _ in range(n)])
            ids = sorted({i for (i,) in c.execute(select(t.c.id))} - before)
            if deliveries:
                now = dt.datetime.now(dt.UTC)
                for i in ids:
                    lid = c.execute(insert(LineageRow).values(
                        lineage_root_id=str(i), seq=0, state=LineageState.FINISHED, superseded=False,
                        holdout_start=0, holdout_end=1, window_label="w", created_at=now).returning(LineageRow.id)).scalar_one()
                    c.execute(insert(OutboxMessage).values(
                        dedupe_key=f"winner-changed:{lid}", kind="winner_changed", recipient="ana@example.com",
                        subject=f"study {i}", body="b", state=OutboxState.PENDING, attempts=0,
                        next_attempt_at=now, created_at=now))
    finally:
        engine.dispose()
    return ids


def test_each_notification_is_on_a_page_of_fifty_newest_first(store_url: str) -> None:
    """The core reads a page of a workspace's notifications and counts them, on both stores,
    never another workspace's."""
    from typestrict_pipeline.api.notifications import count_deliveries, deliveries

    sid = _finished_study(store_url, budget_usd="1")
    ours = _copies(store_url, sid, 60)
    _copies(store_url, sid, 3, workspace="other")
    engine = open_store(store_url)
    try:
        assert count_deliveries(engine, "acme") == 60 and count_deliveries(engine, "nobody") == 0
        pages = [deliveries(engine, "acme", limit=50, offset=o) for o in (0, 50)]
        assert [len(p) for p in pages] == [50, 10]
        assert [d.subject for d in pages[0] + pages[1]] == [f"study {i}" for i in reversed(ours)]
        assert deliveries(engine, "nobody") == []
    finally:
        engine.dispose()


def test_the_notifications_and_usage_pages_list_fifty_a_page(
        app: tuple[object, str, str], sqlite_url: str) -> None:  # noqa: F811
    sid = _finished_study(sqlite_url, budget_usd="1")
    ids = [sid, *_copies(sqlite_url, sid, 119)]
    b = Browser(app[0], app[1])
    one = b.get("/console/settings/notifications").text
    assert len(re.findall(r"<tr><td>\d+</td>", one)) == 50
    assert "Every notification of your workspace, newest first (1 to 50 of 119)" in one
    assert 'href="/console/settings/notifications?deliveries=2" rel="next">Older 50<' in one
    three = b.get("/console/settings/notifications?deliveries=3&saved=1").text
    assert len(re.findall(r"<tr><td>\d+</td>", three)) == 19 and "(101 to 119 of 119)" in three
    assert 'href="/console/settings/notifications?deliveries=2" rel="prev">Newer 50<' in three
    assert b.get("/console/settings/notifications?deliveries=4").status_code == 422

    usage = b.get("/console/settings/usage").text
    listed = [int(i) for i in re.findall(r'<tr data-study="(\d+)">', usage)]
    assert listed == sorted(ids, reverse=True)[:50]
    assert "newest first (1 to 50 of 120)" in html.unescape(usage)
    assert 'href="/console/settings/usage?studies=2#studies-title" rel="next">Older 50<' in usage
    last = b.get("/console/settings/usage?studies=3").text
    assert [int(i) for i in re.findall(r'<tr data-study="(\d+)">', last)] == sorted(ids, reverse=True)[100:]
    assert b.get("/console/settings/usage?studies=0").status_code == 422
    b.close()


def test_the_study_to_rerun_from_lists_the_newest_fifty_and_takes_a_typed_number(
        app: tuple[object, str, str], sqlite_url: str) -> None:  # noqa: F811
    sid = _finished_study(sqlite_url, budget_usd="1")
    ids = [sid, *_copies(sqlite_url, sid, 59, deliveries=False)]
    b = Browser(app[0], app[1])
    page = b.get("/console/backtests").text
    options = [int(i) for i in re.findall(r'<option value="(\d+)"', page)]
    assert options == sorted(ids, reverse=True)[:50]
    assert "The list holds your newest 50 of 60 finished studies; for another, type its number:" in page
    assert '<form id="pick-study" method="get" action="/console/backtests#schedule">' in page
    assert re.search(r'<input id="pick-study-id" form="pick-study" name="study"', page)
    picked = b.get(f"/console/backtests?study={sid}").text  # the oldest: added to the list, picked
    assert re.findall(r'<option value="(\d+)"( selected)?', picked)[0] == (str(sid), " selected")
    assert len(re.findall(r"<option value=\"\d+\"", picked)) == 51
    assert f"The list holds your newest 50 of 60 finished studies and #{sid};" in picked
    unknown = b.get("/console/backtests?study=99999").text
    assert "Study #99999 is not one of your finished studies." in unknown
    padded = b.get(f"/console/backtests?study=0{ids[-1]}")  # the newest, spelled another way: no study
    assert padded.status_code == 200 and f"Study #0{ids[-1]} is not one of your finished studies." in padded.text
    assert " selected" not in re.search(r'<select id="schedule-study".*?</select>', unknown, re.S).group(0)  # type: ignore[union-attr]
    made = b.form("/console/schedules", {"rerun": "on", "study": str(sid), "cadence": "1d",
                                             "owner": "ana@example.com", "min_unseen_steps": "5"})
    assert made.status_code == 303, re.findall(r'id="schedule-error"[^>]*>([^<]*)', made.text)
    b.close()


def test_the_apis_notifications_are_a_page_at_a_time(app: tuple[object, str, str], sqlite_url: str) -> None:  # noqa: F811
    """``GET /v1/notifications`` answered the newest 100 deliveries and no older one; now its
    deliveries are a page as every list of the API (``limit``, ``offset``, ``X-Total-Count``,
    ``Link``), newest first."""
    from typestrict_pipeline.api.paging import LIST_LIMIT

    sid = _finished_study(sqlite_url, budget_usd="1")
    ours = [sid, *_copies(sqlite_url, sid, 249)]
    b = Browser(app[0], app[1])

    def api(url: str) -> httpx.Response:
        return b.loop.run_until_complete(b.client.get(url, headers={"Authorization": f"Bearer {app[1]}"}))

    first = api("/v1/notifications")
    assert first.status_code == 200, first.text[:500]
    assert len(first.json()["deliveries"]) == LIST_LIMIT and first.headers["x-total-count"] == "249"
    assert first.headers["link"] == '</v1/notifications?limit=200&offset=200>; rel="next"'
    rest = api("/v1/notifications?limit=200&offset=200").json()["deliveries"]
    subjects = [d["subject"] for d in first.json()["deliveries"] + rest]
    assert subjects == [f"study {i}" for i in reversed(ours[1:])]
    past = api("/v1/notifications?offset=400")
    assert past.status_code == 200 and past.json()["deliveries"] == [] and past.json()["settings"] == first.json()["settings"]
    assert api("/v1/notifications?limit=0").status_code == 422
    b.close()
