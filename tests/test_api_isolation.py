"""Workspaces kept apart, keys, limits and the one error shape, on a real server.

The central test walks EVERY route of the published OpenAPI schema with workspace B's key
against workspace A's objects: each route that names an object answers 404 (exactly like an id
that does not exist), each list shows none of A's objects, and nothing of A changes.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from typestrict_pipeline.api.keys import create_api_key, revoke_api_key, workspace_for_key
from typestrict_pipeline.cli import main as cli_main
from typestrict_pipeline.store import open_store

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

STUDY_FORM: dict[str, Any] = {
    "workflow": "wx", "start": "2012-01-01", "end": "2012-07-01", "tune_steps": 10,
    "eval_steps": 10, "holdout_steps": 10, "folds": 2, "grid": ["skill=0.5,0.6"],
    "max_candidates": 2, "max_total_steps": 1000, "synthetic": True,
}

# Routes that name no object of a workspace: creating one's own, the form's estimate, the public
# verifier. A new route must be added here or be walked with a foreign key below.
NOT_OBJECT_ROUTES = {
    ("post", "/v1/trainings"), ("put", "/v1/files/{name}"), ("post", "/v1/studies/estimate"),
    ("post", "/v1/studies"), ("get", "/verify_audit.py"), ("post", "/v1/backtests"),
    ("get", "/v1/backtests/workflows"), ("post", "/v1/datasets"),
}
LIST_ROUTES = {("get", "/v1/trainings"), ("get", "/v1/models"), ("get", "/v1/files"), ("get", "/v1/studies"),
               ("get", "/v1/backtests"), ("get", "/v1/datasets"), ("get", "/v1/schedules"),
               ("get", "/v1/notifications")}
OWNER = "ana@example.com"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Workspace A with a settled model, a draft training, a file and a finished study; B's key."""
    tmp = tmp_path_factory.mktemp("iso")
    url = f"sqlite:///{tmp / 'store.db'}"
    home = tmp / "home"
    home.mkdir()
    csv, jev = support.make_dataset(tmp)
    key_a = support.new_key(url, "ws-a", credits=3)
    key_b = support.new_key(url, "ws-b", credits=3)
    # No rate limit: the walk below sends every route's request as fast as it can.
    with support.ApiServer(url, home, jev_source={"kind": "file", "path": str(jev)}, rate_limit=None) as server:
        with server.client(key_a) as a:
            a.put("/v1/files/reviews.csv", content=csv)
            settled = a.post("/v1/trainings", json=support.TRAINING_BODY).json()["id"]
            a.put(f"/v1/trainings/{settled}/model/weights.bin", content=b"w")
            a.post(f"/v1/trainings/{settled}/predictions",
                   json={"predictions": support.model_predictions(csv, skill=0.97)})
            assert support.run_verdicts(home, url) == [settled]
            draft = a.post("/v1/trainings", json=support.TRAINING_BODY).json()["id"]
            study = a.post("/v1/studies", json=STUDY_FORM).json()["id"]
            support.run_study_here(url, study)
            assert a.get(f"/v1/studies/{study}").json()["state"] == "FINISHED"
            objects = _more_objects(a, url, tmp)
        yield {"server": server, "url": url, "home": home, "key_a": key_a, "key_b": key_b,
               "settled": settled, "draft": draft, "study": str(study), "csv": csv, **objects}


def _more_objects(a: httpx.Client, url: str, tmp: Path) -> dict[str, Any]:
    """A's backtest (launched, waiting for its run), dataset and re-run schedule."""
    import datetime as dt

    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
    from typestrict_pipeline.reruns import scenario
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.service import enable_schedule
    from typestrict_pipeline.reruns.workspace import set_workspace

    backtest = a.post("/v1/backtests", json={"workflow": "seattle_rain", "start": "2014-01-01",
                                             "end": "2014-01-31"})
    assert backtest.status_code == 202, backtest.text
    write_seattle_csv(tmp / "weather.csv", known_until=dt.datetime(2013, 1, 1, tzinfo=dt.UTC))
    a.put("/v1/files/weather.csv", content=(tmp / "weather.csv").read_bytes())
    dataset = a.post("/v1/datasets", json={"name": "a_weather", "workflow": "seattle_rain",
                                           "tables": {"weather": "weather.csv"}})
    assert dataset.status_code == 201, dataset.text
    engine = open_store(url)
    try:
        set_workspace(engine, "ws-a", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
        root_end = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
        root = scenario.create_root_study(engine, workspace="ws-a", root_end=root_end, budget_micro_usd=1_000_000,
                                          min_unseen_steps=10,
                                          workflow=scenario.backend(shift_at=root_end - dt.timedelta(days=10)))
        scenario.run(engine, root)
        schedule = enable_schedule(engine, scenario.port(engine), study_id=root, cadence="1d", owner=OWNER)
    finally:
        engine.dispose()
    return {"backtest": backtest.json()["id"], "dataset": "a_weather", "schedule": str(schedule.id)}


def _bodies(world: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        ("post", "/v1/trainings/{training_id}/predictions"):
            {"json": {"predictions": support.model_predictions(world["csv"], skill=0.9)}},
        ("put", "/v1/trainings/{training_id}/model/{name}"): {"content": b"x"},
        ("post", "/v1/studies/{study_id}/schedule"): {"json": {"cadence": "1d", "owner": "b@example.com"}},
        ("post", "/v1/datasets/{name}/append"): {"json": {"file": "weather.csv"}},
        ("post", "/v1/schedules/{schedule_id}/cancel"): {"json": {"by": "b@example.com"}},
        ("put", "/v1/notifications/{person}"): {"json": {"enabled": False}},
        ("put", "/v1/workspaces/{workspace_id}/budget"): {"json": {"budget_usd": "5"}},
    }


def _fill(path: str, world: dict[str, Any], training: str) -> str:
    values = {"training_id": training, "model_id": world["settled"], "study_id": world["study"],
              "workspace_id": "ws-a", "backtest_id": world["backtest"], "schedule_id": world["schedule"],
              "person": OWNER, "name": world["dataset"] if path.startswith("/v1/datasets") else "weights.bin"}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def _snapshot(home: Path) -> dict[str, bytes]:
    """Every file of the home but B's own and the Dagster instance's storage (its runs are
    compared apart)."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()
            and "/ws-b/" not in f"/{p.relative_to(home)}" and not str(p.relative_to(home)).startswith("dagster_home")}


def _runs(home: Path) -> list[tuple[str, str]]:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        return [(r.run_id, r.status.value) for r in instance.get_runs()]


def test_a_foreign_key_gets_404_on_every_route_of_the_schema(world: dict[str, Any]) -> None:
    server = world["server"]
    before, runs_before = _snapshot(world["home"]), _runs(world["home"])
    with server.client(world["key_b"]) as b:
        schema = b.get("/v1/openapi.json").json()
        bodies = _bodies(world)
        walked = 0
        for path, item in schema["paths"].items():
            for method in item:
                route = (method, path)
                if route in NOT_OBJECT_ROUTES:
                    continue
                if route in LIST_ROUTES:
                    r = b.request(method, path)
                    assert r.status_code == 200, (route, r.text)
                    for own in (world["settled"], world["draft"], "reviews.csv", "weights.bin",
                                world["backtest"], world["dataset"], OWNER):
                        assert own not in r.text, (route, own)
                    assert all(s["id"] != int(world["study"]) for s in r.json()) if path == "/v1/studies" else True
                    walked += 1
                    continue
                trainings = [world["settled"], world["draft"]] if "{training_id}" in path else [None]
                for tid in trainings:
                    url = _fill(path, world, tid or world["settled"])
                    r = b.request(method, url, **bodies.get(route, {}))
                    assert r.status_code == 404, (method, url, r.status_code, r.text)
                    assert set(r.json()) == {"error"} and r.json()["error"]["code"] in ("not_found",)
                    assert "ws-a" not in r.json()["error"]["message"] or path.startswith("/v1/workspaces")
                    walked += 1
        assert walked >= 20
        # A's own file is not reachable by name as B's dataset either.
        r = b.post("/v1/trainings", json=support.TRAINING_BODY)
        assert r.status_code == 404
    assert _snapshot(world["home"]) == before  # nothing of A changed
    assert _runs(world["home"]) == runs_before  # no run launched, cancelled or changed
    # ... and A still sees all of it.
    with server.client(world["key_a"]) as a:
        assert a.get(f"/v1/models/{world['settled']}").status_code == 200
        assert a.get(f"/v1/studies/{world['study']}/leaderboard").status_code == 200
        assert a.get(f"/v1/backtests/{world['backtest']}").json()["state"] == "queued"
        assert a.get(f"/v1/datasets/{world['dataset']}").json()["tables"][0]["rows"] > 300
        assert a.get(f"/v1/schedules/{world['schedule']}").json()["state"] == "ENABLED"
        assert [p["person"] for p in a.get("/v1/notifications").json()["settings"]] == [OWNER]


def test_a_foreign_object_looks_exactly_like_a_missing_one(world: dict[str, Any]) -> None:
    with world["server"].client(world["key_b"]) as b:
        foreign = b.get(f"/v1/models/{world['settled']}").json()["error"]
        missing = b.get("/v1/models/tr_0000000000000000").json()["error"]
        assert foreign["code"] == missing["code"]
        assert foreign["message"].replace(world["settled"], "X") == missing["message"].replace(
            "tr_0000000000000000", "X")


def test_predictions_for_a_training_the_workspace_does_not_have_are_refused_before_the_body_is_checked(
        world: dict[str, Any]) -> None:
    # The training is looked up before FastAPI checks the body (up to 200,000 rows: about 1.8 s of
    # CPU for 15 MiB), so a body that would be refused as well is answered 404, not 422: before,
    # B's invalid predictions for A's training were checked row by row and refused as invalid.
    bad = {"predictions": [{"id": f"r{i}", "decision": "sentiment", "probabilities": {"fresh": 0.5}}
                           for i in range(5000)] + [{"id": "", "decision": "sentiment"}]}  # two faults at its end
    with world["server"].client(world["key_b"]) as b:
        for training in (world["settled"], "tr_0000000000000000"):
            r = b.post(f"/v1/trainings/{training}/predictions", json=bad)
            assert r.status_code == 404, r.text
            assert r.json()["error"]["code"] == "not_found"
    with world["server"].client(world["key_a"]) as a:  # the owner's invalid body is still checked
        r = a.post(f"/v1/trainings/{world['draft']}/predictions", json=bad)
        assert r.status_code == 422, r.text


def test_requests_without_a_valid_key_are_refused_in_one_shape(world: dict[str, Any]) -> None:
    server = world["server"]
    revoked = support.new_key(world["url"], "ws-a")
    engine = open_store(world["url"])
    try:
        revoke_api_key(engine, revoked[4:20])
    finally:
        engine.dispose()
    forged = world["key_a"][:-4] + ("AAAA" if not world["key_a"].endswith("AAAA") else "BBBB")
    for key in (None, "nonsense", forged, revoked, world["key_a"].replace("tsk_", "tsk_x")):
        with server.client(key) as c:
            r = c.get(f"/v1/models/{world['settled']}")
            assert r.status_code == 401, key
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
            if key:
                assert key not in r.text
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/verify_audit.py").status_code == 200  # the verifier is public
        assert c.get("/v1/openapi.json").status_code == 200


def test_keys_are_stored_hashed_and_shown_once(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    url = world["url"]
    assert cli_main(["api-key", "create", "ws-c", "--label", "ci", "--store", url]) == 0
    out = capsys.readouterr().out
    key = out.strip().splitlines()[-1]
    assert key.startswith("tsk_") and len(key) == 4 + 16 + 1 + 43
    engine = open_store(url)
    try:
        with engine.connect() as conn:
            stored = " ".join(str(v) for row in conn.execute(text("SELECT * FROM api_keys")) for v in row)
        assert key[21:] not in stored  # the secret is never stored
        assert workspace_for_key(engine, key) == "ws-c"
        assert cli_main(["api-key", "list", "ws-c", "--store", url]) == 0
        listed = capsys.readouterr().out
        assert key[4:20] in listed and key[21:] not in listed
        assert cli_main(["api-key", "revoke", key[4:20], "--store", url]) == 0
        assert workspace_for_key(engine, key) is None
        assert cli_main(["api-key", "revoke", "ffffffffffffffff", "--store", url]) == 2
        assert "expected an API key with id" in capsys.readouterr().err
        two = create_api_key(engine, "ws-c")
        assert workspace_for_key(engine, two.key) == "ws-c" and two.key != key
    finally:
        engine.dispose()


def test_bodies_and_uploads_are_bounded(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    key = support.new_key(sqlite_url, "ws-a")
    with support.ApiServer(sqlite_url, home, max_body_bytes=2_000, max_upload_bytes=10_000) as server, \
            server.client(key) as c:
        assert c.put("/v1/files/small.csv", content=b"x" * 10_000).status_code == 201
        big = c.put("/v1/files/big.csv", content=b"x" * 10_001)
        assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while reading
            for _ in range(20):
                yield b"y" * 1_000

        chunked = c.put("/v1/files/chunked.csv", content=chunks())
        assert chunked.status_code == 413
        r = c.post("/v1/studies/estimate", content=json.dumps({"x": "y" * 3_000}),
                   headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert sorted(p.name for p in (home / "workspaces" / "ws-a" / "files").iterdir()) == ["small.csv"]


def test_a_link_out_of_the_workspace_area_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    csv, jev = support.make_dataset(tmp_path)
    secret = tmp_path / "outside.csv"
    secret.write_bytes(csv)
    key = support.new_key(sqlite_url, "ws-a", credits=1)
    with support.ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as c:
        c.put("/v1/files/placeholder.csv", content=b"a")
        os.symlink(secret, home / "workspaces" / "ws-a" / "files" / "link.csv")
        body = json.loads(json.dumps(support.TRAINING_BODY))
        body["dataset"]["path"] = "link.csv"
        r = c.post("/v1/trainings", json=body)
        assert r.status_code == 422 and "inside the workspace's files" in r.json()["error"]["message"]
        for name in ("..", ".", "a%2Fb", "x" * 201):
            assert c.put(f"/v1/files/{name}", content=b"a").status_code in (404, 405, 422)


def test_errors_have_one_shape(world: dict[str, Any]) -> None:
    with world["server"].client(world["key_a"]) as c:
        for r, status in ((c.get("/v1/nope"), 404), (c.delete("/v1/models"), 405),
                          (c.post("/v1/trainings", json={"dataset": 1}), 422),
                          (c.post("/v1/trainings", content=b"{not json", headers={"content-type": "application/json"}), 422),
                          (c.get("/v1/studies/abc"), 404), (c.get("/v1/studies/99999999"), 404)):
            assert r.status_code == status, r.text
            body = r.json()
            assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
            assert "expected" in body["error"]["message"] and "Traceback" not in r.text


def test_study_routes_give_the_page_s_messages(world: dict[str, Any]) -> None:
    with world["server"].client(world["key_a"]) as c:
        form = dict(STUDY_FORM)
        form.pop("max_candidates")
        r = c.post("/v1/studies/estimate", json=form)
        assert r.status_code == 422 and "Every study has a limit" in r.json()["error"]["message"]
        r = c.post("/v1/studies/estimate", json={**STUDY_FORM, "budget_usd": "1"})
        assert r.status_code == 422
        assert ("This version has no completed backtest in your workspace to estimate from. Run one, then "
                "try again, or leave the USD budget empty.") in r.json()["error"]["message"]
        est = c.post("/v1/studies/estimate", json=STUDY_FORM).json()
        assert est["candidates"] == 2 and est["estimate_micro_usd"] is None
        board = c.get(f"/v1/studies/{world['study']}/leaderboard").json()
        assert board["state"] == "FINISHED" and board["header"] and len(board["rows"]) == 2
        r = c.post(f"/v1/studies/{world['study']}/schedule", json={"cadence": "1d", "owner": "a@example.com"})
        assert r.status_code == 422 and "USD budget" in r.json()["error"]["message"]
        assert c.get(f"/v1/studies/{world['study']}/schedule").json() == {"schedules": []}
        lineage = c.get(f"/v1/studies/{world['study']}/lineage").json()
        assert lineage["entries"] == [] and "no lineage yet" in lineage["text"]
        usage = c.get("/v1/workspaces/ws-a/usage").json()
        assert int(world["study"]) in [s["study_id"] for s in usage["studies"]]


def test_the_result_page_shows_the_verdict(world: dict[str, Any]) -> None:
    with world["server"].client(world["key_a"]) as c:
        page = c.get(f"/v1/models/{world['settled']}/page")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert '<span id="verdict">beats</span>' in page.text
        sha = c.get(f"/v1/models/{world['settled']}").json()["audit_sha256"]
        assert f"python3 verify_audit.py --expect-sha256 {sha} audit.json" in page.text
        assert f'<code id="audit-sha256">{sha}</code>' in page.text
        assert io.StringIO(page.text).read().count('data-metric="') == 4
        # the refund page's G and its 2,000 resamples, in its words (the console's result page too)
        assert "G = 0.5 × Δmacro_f1 + 0.3 × Δbrier_skill + 0.2 × Δselective_acc_80 = " in page.text
        assert "5th percentile over 2,000 paired resamples" in page.text


def test_the_result_page_in_headless_chromium(world: dict[str, Any]) -> None:
    """The page as a browser renders it: verdict, settling decision, metrics beside Jev's,
    pictures that load, a working audit link and the verifier command."""
    from playwright.sync_api import sync_playwright

    server = world["server"]
    with server.client(world["key_a"]) as c:
        verdict = c.get(f"/v1/models/{world['settled']}").json()
        audit = c.get(f"/v1/models/{world['settled']}/audit").content
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {world['key_a']}"})
            page = context.new_page()
            page.set_default_timeout(120_000)
            response = page.goto(f"{server.url}/v1/models/{world['settled']}/page")
            assert response is not None and response.status == 200
            assert page.locator("#verdict").inner_text() == verdict["verdict"] == "beats"
            assert page.locator("#settling").inner_text() == verdict["settling_decision"]
            rows = page.locator("section.decision tbody tr")
            assert rows.count() == 4
            for i, m in enumerate(verdict["decisions"][0]["metrics"]):
                row = rows.nth(i)
                assert row.get_attribute("data-metric") == m["metric"]
                if m["model"] is not None:
                    assert row.locator("td.model").inner_text() == f"{m['model']:.4f}"
                    assert row.locator("td.jev").inner_text() == f"{m['jev']:.4f}"
            images = page.locator("#pictures img")
            assert images.count() == 2
            widths = page.eval_on_selector_all("#pictures img", "els => els.map(e => e.naturalWidth)")
            assert all(w > 100 for w in widths)
            href = page.locator("#audit").get_attribute("href")
            assert href is not None
            fetched = page.evaluate(
                "async (u) => { const r = await fetch(u); const b = new Uint8Array(await r.arrayBuffer());"
                " return [r.status, Array.from(b).length]; }", href)
            assert fetched == [200, len(audit)]
            command = f"python3 verify_audit.py --expect-sha256 {verdict['audit_sha256']} audit.json"
            assert command in page.locator("#verify").inner_text()
            assert page.locator("#audit-sha256").inner_text() == verdict["audit_sha256"]
        finally:
            browser.close()


@pytest.mark.slow
def test_typestrict_api_serves_and_refuses_a_bad_jev_source(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket
    import subprocess
    import sys
    import time

    fifo = tmp_path / "jev.fifo"
    os.mkfifo(fifo)  # read_text() waited on it for ever: the server neither started nor said why
    for bad in ("{not json", "[1]", "@/no/such/file.json", f"@{fifo}", "@/dev/zero"):
        assert cli_main(["api", "--store", sqlite_url, "--jev-source", bad]) == 2
        err = capsys.readouterr().err
        assert "--jev-source" in err or "readable JSON file" in err, err
    # Recorded predictions that are not there: every training would have failed (a 503 that said
    # "expected room to store the training's files"), so the server does not start.
    assert cli_main(["api", "--store", sqlite_url, "--jev-source", json.dumps(support.UNUSED_JEV)]) == 2
    assert ("expected --jev-source's recorded Jev predictions as a file on this server, got "
            "'jev-never-asked.jsonl', which is not a file. Check the path") in capsys.readouterr().err
    recorded = tmp_path / "jev.jsonl"
    recorded.write_text("")
    assert cli_main(["api", "--store", sqlite_url, "--port", "70000"]) == 2
    assert "TCP port" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "typestrict_pipeline.cli", "api", "--store", sqlite_url,
                             "--home", str(tmp_path / "home"), "--port", str(port), "--log-level", "warning",
                             "--jev-source", json.dumps({"kind": "file", "path": str(recorded)}), "--new-store"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/openapi.json", timeout=10)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "typestrict api did not start"
                time.sleep(0.3)
        assert r.status_code == 200 and r.json()["info"]["title"] == "TypeStrict API"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert "serving http://127.0.0.1" in out and "Traceback" not in err


def test_the_app_factory_reads_the_environment(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``typestrict api --workers N`` runs in each worker process."""
    from typestrict_pipeline.api.app import app_from_env

    key = support.new_key(sqlite_url, "ws-env", credits=2)
    monkeypatch.setenv("TYPESTRICT_STORE_URL", sqlite_url)
    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path / "home"))
    (tmp_path / "jev.jsonl").write_text("")
    monkeypatch.setenv("TYPESTRICT_API_JEV_SOURCE", json.dumps({"kind": "file", "path": str(tmp_path / "jev.jsonl")}))
    with support.ApiServer(sqlite_url, tmp_path, app=app_from_env()) as server, server.client(key) as c:
        r = c.get("/v1/workspaces/ws-env")
        assert r.status_code == 200 and r.json()["balance"] == 2
        ctx = server.app.state.ctx
        assert ctx.trainings.jev_source == {"kind": "file", "path": str((tmp_path / "jev.jsonl").resolve())}
        assert ctx.settings.home == (tmp_path / "home").resolve()
    assert cli_main(["api", "--store", sqlite_url, "--workers", "0"]) == 2
    assert "worker processes" in capsys.readouterr().err


def test_the_result_page_never_takes_its_commands_host_from_the_host_header(world: dict[str, Any]) -> None:
    """Before, the page's link and ``curl`` commands were built from the request's ``Host``: a
    request saying ``Host: evil.example`` got ``curl -O http://evil.example/verify_audit.py``.
    Now they name the configured public URL, else the request's address only when it is the one
    the server listens on, else ``$TYPESTRICT_API_URL`` with a line saying to set it."""
    server, settled = world["server"], world["settled"]
    with server.client(world["key_a"]) as c:
        own = c.get(f"/v1/models/{settled}/page").text  # the address the server listens on
        assert f"curl -O {server.url}/verify_audit.py" in own
        forged = c.get(f"/v1/models/{settled}/page", headers={"Host": "evil.example"})
        assert forged.status_code == 200 and "evil.example" not in forged.text
        assert "curl -O $TYPESTRICT_API_URL/verify_audit.py" in forged.text
        assert f"-o audit.json $TYPESTRICT_API_URL/v1/models/{settled}/audit" in forged.text
        assert f'href="/v1/models/{settled}/audit"' in forged.text  # the link: relative to the page
        assert "Set <code>TYPESTRICT_API_URL</code> to this server's address first" in forged.text


def test_the_result_pages_address_is_the_configured_public_url() -> None:
    from starlette.requests import Request

    from typestrict_pipeline.api.routes.models import page_base_url

    def request(host: str, server: tuple[str, int]) -> Request:
        return Request({"type": "http", "method": "GET", "scheme": "http", "path": "/v1/models/m/page",
                        "query_string": b"", "server": server, "headers": [(b"host", host.encode())]})

    assert page_base_url(request("evil.example", ("10.0.0.5", 8000)), "https://api.example.com") == \
        "https://api.example.com"
    assert page_base_url(request("evil.example", ("10.0.0.5", 8000)), None) is None
    assert page_base_url(request("10.0.0.5:8000", ("10.0.0.5", 8000)), None) == "http://10.0.0.5:8000"
    assert page_base_url(request("[::1]:8000", ("::1", 8000)), None) == "http://[::1]:8000"
    assert page_base_url(request("10.0.0.5:8001", ("10.0.0.5", 8000)), None) is None
