"""A study or a backtest whose Dagster run cannot be launched (the server's instance is
unreachable) is the server's problem, said without the server's details.

Before, ``POST /v1/studies`` answered a 500 and stored the raw exception (``NotADirectoryError:
[Errno 20] Not a directory: '/srv/…/dagster_home/dagster.yaml'``) as the study's ``error``, which
the customer reads; the study was left ``CANCELLED`` as if a person had cancelled it. Now the
answer is a 503 ``dagster_unavailable`` with ``Retry-After``, the study ends ``FAILED`` with a
message saying what happened and what to do, its workflow is free again, nothing is reserved,
spent or charged, and the raw failure is in the server's log only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests import test_api_support as support
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.tables import StudyRow

STUDY_FORM: dict[str, Any] = {
    "workflow": "wx", "start": "2012-01-01", "end": "2012-07-01", "tune_steps": 10,
    "eval_steps": 10, "holdout_steps": 10, "folds": 2, "grid": ["skill=0.5,0.6"],
    "max_candidates": 2, "max_total_steps": 1000, "synthetic": True,
}


def _refused(r: Any, tmp_path: Path) -> str:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "30"
    assert set(r.json()) == {"error"} and r.json()["error"]["code"] == "dagster_unavailable", r.text
    message = str(r.json()["error"]["message"])
    assert str(tmp_path) not in r.text and "Errno" not in r.text and "NotADirectoryError" not in r.text
    return message


def test_a_launch_the_instance_cannot_take_ends_the_study_failed_and_answers_503(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store = f"sqlite:///{home / 'store.db'}"
    key = support.new_key(store, "ws-a", credits=3)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the instance's folder should be")
    caplog.set_level(logging.ERROR, logger="typestrict.api")
    with support.ApiServer(store, home, rate_limit=None, dagster_home=blocker / "dagster_home") as server, \
            server.client(key) as c:
        said = _refused(c.post("/v1/studies", json=STUDY_FORM), tmp_path)
        assert said.startswith("expected study 1's Dagster run to be queued, got the server's Dagster "
                               "instance unavailable"), said
        assert "ended FAILED and nothing was spent; retry later (Retry-After)" in said
        # an ended study is the store's: read without its run while the instance is down (before:
        # the same 503 as the launch, so a customer could not see why their study ended)
        r = c.get("/v1/studies/1")
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["state"], got["run_id"], got["run_state"]) == ("FAILED", None, None), got
        assert got["error"].startswith("its Dagster run could not be queued"), got
        assert "create the study again later (POST /v1/studies)" in got["error"], got  # a route stays
        assert str(tmp_path) not in r.text
        # the workflow is free: a second study is not refused as "one at a time" (409)
        _refused(c.post("/v1/studies", json=STUDY_FORM), tmp_path)
        # a backtest's launch is the same 503, nothing listed
        said = _refused(c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2014-01-01",
                                                       "end": "2014-01-31"}), tmp_path)
        assert said.startswith("expected the backtest's Dagster run to be queued"), said
        listed = c.get("/v1/backtests")  # the store's (none), saying the queued ones are unknown
        assert (listed.status_code, listed.json(), listed.headers["x-total-count"]) == (200, [], "0"), listed.text
        assert listed.headers["x-queued-backtests"] == "unknown"
    engine = open_store(store)
    with session_scope(engine) as s:
        rows = s.scalars(select(StudyRow).order_by(StudyRow.id)).all()
        assert [(r.state, r.reserved_micro, r.steps_reserved, r.spend_micro) for r in rows] == \
            [("FAILED", 0, 0, 0), ("FAILED", 0, 0, 0)]
        error = rows[0].error or ""
        assert error.startswith("its Dagster run could not be queued"), error
        assert str(tmp_path) not in error and "Error" not in error
    assert CreditLedger(engine).balance("ws-a") == 3
    logged = "\n".join(r.getMessage() + str(r.exc_info) for r in caplog.records)
    assert "expected study 1's Dagster run to be queued" in logged and "NotADirectoryError" in logged


def test_the_backtest_list_is_the_stores_while_the_instance_is_down(tmp_path: Path) -> None:
    """Before, ``GET /v1/backtests`` was a 503 for the whole list while the instance was down,
    because the queued backtests are known only to it: a customer could not see the backtests
    that ran, nor why one failed. Now the store's backtests are listed as ``GET
    /v1/backtests/{id}`` shows them, and two headers say the queued ones are missing."""
    from tests.test_backtest_failed_steps import ANSWERS, _endpoint, model_server
    from typestrict_pipeline.api.backtests import QUEUED_UNKNOWN
    from typestrict_pipeline.cli import main

    home = tmp_path / "home"
    home.mkdir()
    store = f"sqlite:///{home / 'store.db'}"
    key = support.new_key(store, "ws-a", credits=3)
    with model_server(ANSWERS["HTTP 500 to every call"]) as base:  # one that failed, with why
        assert main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-03",
                     "--workspace", "ws-a", *_endpoint(base), "--store", store]) == 1
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the instance's folder should be")
    with support.ApiServer(store, home, rate_limit=None, dagster_home=blocker / "dagster_home") as server, \
            server.client(key) as c:
        listed = c.get("/v1/backtests")
        assert listed.status_code == 200, listed.text
        [row] = listed.json()
        assert (row["state"], row["steps_run"], row["run_id"]) == ("failed", 3, None), row
        assert row["error"].startswith("expected at least one step of the backtest to run without failing")
        assert c.get(f"/v1/backtests/{row['id']}").json() == row  # the same as the backtest's own answer
        assert listed.headers["x-total-count"] == "1"
        assert listed.headers["x-queued-backtests"] == "unknown"
        assert listed.headers["x-queued-backtests-reason"] == QUEUED_UNKNOWN
        assert str(tmp_path) not in listed.text and str(tmp_path) not in str(listed.headers)
        with server.client() as browser:  # the console's Backtests page: the card, and the same note
            import html
            import re

            token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/console/sign-in").text)
            assert token is not None
            assert browser.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key}).status_code == 303
            page = browser.get("/console/backtests")
        assert page.status_code == 200, page.text
        assert row["id"][:12] in page.text
        assert html.escape(QUEUED_UNKNOWN, quote=False) in page.text.replace("&#39;", "'")


def test_a_run_that_failed_before_its_study_or_backtest_started_says_what_the_workspace_can_do(
        tmp_path: Path) -> None:
    """Queued, then its run failed before it started (a code server that could not start, a run
    worker killed in the queue): the study ends FAILED and the backtest reads ``failed``, each
    saying that nothing ran or was charged and what the workspace can do. Before, both told the
    customer to "see the run in the Dagster UI", which only the platform's operator opens."""
    import dagster as dg

    from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml

    home, dagster_home = tmp_path / "home", tmp_path / "home" / "dagster_home"
    dagster_home.mkdir(parents=True)
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    store = f"sqlite:///{home / 'store.db'}"
    key = support.new_key(store, "ws-a", credits=3)
    with support.ApiServer(store, home, rate_limit=None, dagster_home=dagster_home) as server, \
            server.client(key) as c:
        study = c.post("/v1/studies", json=STUDY_FORM)
        backtest = c.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2014-01-01",
                                                 "end": "2014-01-31"})
        assert (study.status_code, backtest.status_code) == (201, 202), (study.text, backtest.text)
        assert backtest.json()["state"] == "queued"
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:  # no daemon: both wait queued
            for run in instance.get_runs():
                instance.report_run_failed(run)  # as run monitoring would
        got = c.get(f"/v1/studies/{study.json()['id']}").json()
        failed = c.get(f"/v1/backtests/{backtest.json()['id']}").json()
    assert got["state"] == "FAILED", got
    assert got["error"].startswith(f"expected the study's run {got['run_id']} to start it, got the run ended "
                                   "(failed) before the study started, so no window ran and nothing was "
                                   "charged. Create the study again"), got
    assert failed["state"] == "failed", failed
    assert failed["error"] == (f"expected the backtest's run {failed['run_id']} to start it, got the run ended "
                               "(failed) before the backtest started, so no step ran and nothing was charged. "
                               "Run the backtest again; if its run keeps failing before it starts, send the "
                               "platform's operator this message (the run's id is what they look up)"), failed
    for said in (got["error"], failed["error"]):
        assert "Dagster UI" not in said and "platform's operator" in said
    assert got["spend_micro_usd"] in (0, None)
