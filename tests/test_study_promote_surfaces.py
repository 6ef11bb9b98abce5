""""Promote winner" through the API (``POST /v1/studies/{id}/promote``) and the console's study
page (the leaderboard's button), as the product page "Promoting a winner" describes: through the
evaluation gate, then the normal activation path; a parameters-only winner applies its
parameters to the configuration. A real store, the real app in process, finished studies of the
synthetic workflow built by the studies core's own runner; the gate reads their stored baseline
holdout runs, so no model is called (the study's runs and spend do not change)."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.clients.standin import StandinServer
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.promote import workflow_params
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.runner import run_study_local
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config, study_backend
from typestrict_pipeline.study.space import SearchSpace
from typestrict_pipeline.study.tables import RunRow, StudyRow

_PAGES = Path(__file__).with_name("test_console_pages.py")
_spec = importlib.util.spec_from_file_location("console_pages_support", _PAGES)
assert _spec is not None and _spec.loader is not None
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)

UTC = dt.UTC


def _config(workspace: str, workflow: str, skills: list[float], **kw: Any) -> StudyConfig:
    base: dict[str, Any] = dict(
        workspace=workspace, workflow=workflow, workflow_version="v1", space=SearchSpace(grid={"skill": skills}),
        start=dt.datetime(2012, 1, 1, tzinfo=UTC), end=dt.datetime(2012, 12, 1, tzinfo=UTC),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=20, eval_steps=30, holdout_steps=60,
        max_candidates=4, max_total_steps=10_000, backend={"backend": "synthetic", "noise": 0.05})
    base.update(kw)
    return StudyConfig(**base)


def _study(url: str, config: StudyConfig, *, run: bool = True) -> int:
    engine = open_store(url)
    try:
        sid = create_study_from_config(engine, config, last_backtest=LastBacktest(10, 1))
        if run:
            run_study_local(engine, sid, study_backend(engine, sid), max_workers=2)
        return sid
    finally:
        engine.dispose()


def _spent(url: str, sid: int) -> tuple[int, int]:
    """The study's window runs and spend: what a model call during promotion would change."""
    engine = open_store(url)
    try:
        with session_scope(engine) as s:
            runs = int(s.execute(select(func.count()).select_from(RunRow).where(RunRow.study_id == sid)).scalar_one())
            row = s.get(StudyRow, sid)
            assert row is not None
            return runs, int(row.spend_micro or 0)
    finally:
        engine.dispose()


def _params(url: str, workspace: str, workflow: str) -> dict[str, Any]:
    engine = open_store(url)
    try:
        return workflow_params(engine, workspace, workflow)
    finally:
        engine.dispose()


def _worse_unless_terse(request: Any) -> Any:
    """A model that answers 0.5 to the workflow's own prompt and the stand-in forecaster's rule
    to a prompt without "Today:" (the terse one): a prompt change that wins."""
    from typestrict_pipeline.backtest.workflows.weather import standin_probability
    from typestrict_pipeline.clients.standin import StandinReply

    prompt = " ".join(str(m.get("content", "")) for m in request.messages)
    return StandinReply(text="0.50" if "Today:" in prompt else f"{standin_probability(prompt):.2f}")


def _prompt_study(url: str, base_url: str) -> int:
    """A study of seattle_rain (the registry's workflow, its model at ``base_url``) whose only
    candidate changes the forecast prompt."""
    from typestrict_pipeline.backtest.workflows import default_registry
    from typestrict_pipeline.backtest.workflows.weather import DEMO_MODEL
    prompt = default_registry().active("seattle_rain").prompts["forecast"]
    terse = prompt.replace(" Today: {today_mm:.1f} mm,", "")
    backend = {"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow", "max_in_flight": 8,
               "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_weather", "base_url": base_url,
                              "model": DEMO_MODEL}}
    return _study(url, _config("acme", "seattle_rain", [], space=SearchSpace(prompts={"forecast": [terse]}),
                               start=dt.datetime(2013, 1, 2, tzinfo=UTC), end=dt.datetime(2014, 1, 1, tzinfo=UTC),
                               tune_steps=20, eval_steps=20, holdout_steps=200, backend=backend))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The app on a store with, in workspace acme: a study whose winner beats the baseline
    (``wins``), one whose winner does not (``loses``), one not run (``pending``), one whose budget
    stopped it before the holdout (``unscored``); and a winning study of workspace other."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    keys = {ws: create_api_key(engine, ws).key for ws in ("acme", "other")}
    engine.dispose()
    studies = {
        "wins": _study(url, _config("acme", "wx", [0.55, 0.62])),
        "loses": _study(url, _config("acme", "wy", [0.40, 0.42])),
        "pending": _study(url, _config("acme", "wz", [0.55, 0.62]), run=False),
        # 1,000 µ$ at 10 µ$ a step: the first candidate's search, not the holdout.
        "unscored": _study(url, _config("acme", "wv", [0.5, 0.6], budget_micro=1_000)),
        "theirs": _study(url, _config("other", "wx", [0.55, 0.62])),
    }
    model = StandinServer(_worse_unless_terse, model_name="standin-forecaster").start()
    studies["prompted"] = _prompt_study(url, model.base_url)
    app = create_app(url, tmp_path / "home", jev_source=pages.JEV)
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    browsers = {ws: pages.Browser(app, key) for ws, key in keys.items()}
    try:
        yield {"url": url, "b": browsers["acme"], "other": browsers["other"], "keys": keys, "model": model, **studies}
    finally:
        model.stop()
        for b in browsers.values():
            b.close()
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


def _promote(world: dict[str, Any], sid: int, workspace: str = "acme", **kw: Any) -> Any:
    """``POST /v1/studies/{sid}/promote`` with the workspace's key."""
    return world["b"].post(f"/v1/studies/{sid}/promote",
                           headers={"Authorization": f"Bearer {world['keys'][workspace]}"}, **kw)


def test_the_api_promotes_a_winner_that_passes_the_gate_and_applies_its_parameters(world: dict[str, Any]) -> None:
    url, sid = world["url"], world["wins"]
    before = _spent(url, sid)
    r = _promote(world, sid)
    assert r.status_code == 200, r.text
    out = r.json()
    assert set(out) == {"study_id", "promoted", "version_id", "params", "message"}
    assert (out["study_id"], out["promoted"], out["version_id"], out["params"]) == (sid, "parameters", None, {"skill": 0.62})
    assert out["message"].startswith("Gate passed: the winner beats the active version on the same holdout window")
    assert "nothing to activate; applied {'skill': 0.62} to the configuration of wx" in out["message"]
    assert _params(url, "acme", "wx") == {"skill": 0.62}
    assert _spent(url, sid) == before  # the stored baseline run: no model was called, nothing spent
    # No body or {}: the same; any field is refused as in every request body.
    assert _promote(world, sid, json={}).json() == out
    r = _promote(world, sid, json={"force": True})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_input"), r.text
    assert "force" in r.json()["error"]["message"]


def test_the_api_refuses_with_the_gates_words_and_what_cannot_be_promoted(world: dict[str, Any]) -> None:
    url = world["url"]
    for name, words in (("loses", "expected the winner to beat the active version on the same window by a "
                                  "one-sided 95% lower bound above 0, got lower bound"),
                        ("pending", "expected a winner in study"),
                        ("unscored", "expected a holdout score for the winner of study")):
        r = _promote(world, world[name])
        assert r.status_code == 409, (name, r.text)
        assert r.json()["error"]["code"] == "conflict" and words in r.json()["error"]["message"], (name, r.text)
    assert _params(url, "acme", "wy") == {} and _params(url, "acme", "wv") == {}


def test_another_workspaces_study_is_not_found_and_not_promoted(world: dict[str, Any]) -> None:
    b, other, url = world["b"], world["other"], world["url"]
    r = _promote(world, world["theirs"])
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found"), r.text
    assert r.json()["error"]["message"].startswith(f"expected a study with id '{world['theirs']}' in this workspace")
    assert _promote(world, world["wins"], "other").status_code == 404
    assert _params(url, "other", "wx") == {} and _params(url, "acme", "wx") == {}
    assert b.form(f"/console/studies/{world['theirs']}/promote", {}).status_code == 404
    assert other.form(f"/console/studies/{world['wins']}/promote", {}).status_code == 404
    assert _params(url, "other", "wx") == {} and _params(url, "acme", "wx") == {}


def _button(page: str, sid: int) -> bool:
    return f'action="/console/studies/{sid}/promote"' in page and ">Promote winner</button>" in page


def test_the_study_page_offers_promote_winner_once_the_winner_has_a_holdout_score(world: dict[str, Any]) -> None:
    b = world["b"]
    for name, shown in (("wins", True), ("loses", True), ("pending", False), ("unscored", False)):
        r = b.get(f"/console/studies/{world[name]}")
        assert r.status_code == 200 and _button(r.text, world[name]) is shown, name
    page = b.get(f"/console/studies/{world['wins']}").text
    form = re.search(r'<form method="post" action="/console/studies/\d+/promote" id="promote">(.*?)</form>', page, re.S)
    assert form is not None and f'name="csrf_token" value="{b.csrf}"' in form.group(1)
    assert '<button type="submit" aria-describedby="promote-help">Promote winner</button>' in form.group(1)


def test_promote_winner_on_the_study_page_says_what_it_did_or_why_not(world: dict[str, Any]) -> None:
    b, url, sid = world["b"], world["url"], world["wins"]
    before = _spent(url, sid)
    assert b.post(f"/console/studies/{sid}/promote", data={}).status_code == 403  # no CSRF token
    assert _params(url, "acme", "wx") == {}
    r = b.form(f"/console/studies/{sid}/promote", {})
    assert r.status_code == 303 and r.headers["location"] == f"/console/studies/{sid}?promoted=1#promote-result"
    page = html.unescape(b.get(r.headers["location"].partition("#")[0]).text)
    said = re.search(r'<p class="notice" role="status" id="promote-result" tabindex="-1">(.*?)</p>', page, re.S)
    assert said is not None, page[:3000]
    assert said.group(1).startswith("Gate passed: the winner beats the active version on the same holdout window")
    assert "nothing to activate; {'skill': 0.62} apply to the configuration of wx in this workspace." in said.group(1)
    assert _params(url, "acme", "wx") == {"skill": 0.62} and _spent(url, sid) == before
    assert 'id="promote-result"' not in b.get(f"/console/studies/{sid}").text  # only where the button leads
    # Refused: the page again, the gate's words in its focused alert, nothing applied.
    r = b.form(f"/console/studies/{world['loses']}/promote", {})
    assert r.status_code == 409
    refused = re.search(r'<p class="error" role="alert" id="promote-error" tabindex="-1" autofocus>(.*?)</p>',
                        html.unescape(r.text), re.S)
    assert refused is not None and "expected the winner to beat the active version on the same window" in refused.group(1)
    for word in pages.CONSOLE_NOT_API_WORDS:
        assert word not in refused.group(1), word
    assert _params(url, "acme", "wy") == {}


def test_a_winner_that_changed_prompts_becomes_the_active_version_and_no_model_is_asked(
        world: dict[str, Any]) -> None:
    """The normal activation path, from the API and the console alike, on the registry's
    seattle_rain: the winner's version becomes the workspace's active one. The model server the
    study ran on gets no request: the gate reads the stored baseline run."""
    from typestrict_pipeline.backtest.store import active_version_id

    url, sid, model = world["url"], world["prompted"], world["model"]
    asked, before = len(model.requests), _spent(url, sid)
    r = _promote(world, sid)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["promoted"] == "version" and out["version_id"] and out["params"] == {}
    assert out["message"].startswith("Gate passed") and out["message"].endswith(
        f"Activated version {out['version_id']} of seattle_rain.")
    engine = open_store(url)
    try:
        assert active_version_id(engine, workspace="acme", workflow="seattle_rain") == out["version_id"]
        assert active_version_id(engine, workspace="other", workflow="seattle_rain") is None
    finally:
        engine.dispose()
    assert len(model.requests) == asked and _spent(url, sid) == before
    r = world["b"].form(f"/console/studies/{sid}/promote", {})
    assert r.status_code == 303, r.text
    page = html.unescape(world["b"].get(r.headers["location"].partition("#")[0]).text)
    said = re.search(r'id="promote-result" tabindex="-1">(.*?)</p>', page, re.S)
    assert said is not None and said.group(1).endswith(
        f"Version {out['version_id']} of seattle_rain is the active one in this workspace.")
    assert len(model.requests) == asked


def test_activating_a_prompt_winner_and_clearing_older_parameters_land_together(tmp_path: Path) -> None:
    """A prompt winner's promotion makes its version the active one and clears the parameters an
    earlier promotion applied to the workflow (the version carries the winner's own). One
    transaction: when the store refuses the second write, the first is not in force either (a
    SQLite trigger refuses the delete, as a full disk or a lost connection would), and promoting
    again once the store accepts it does both."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from typestrict_pipeline.backtest.store import active_version_id
    from typestrict_pipeline.errors import StoreError
    from typestrict_pipeline.study.promote import PromotionKind, promote_winner
    from typestrict_pipeline.study.tables import WorkflowParamsRow

    url = f"sqlite:///{tmp_path / 'store.db'}"
    model = StandinServer(_worse_unless_terse, model_name="standin-forecaster").start()
    try:
        sid = _prompt_study(url, model.base_url)
    finally:
        model.stop()
    engine = open_store(url)
    try:
        with session_scope(engine) as s:  # an earlier study's parameters, in force
            s.add(WorkflowParamsRow(workspace="acme", workflow="seattle_rain", params_json={"threshold": 0.4},
                                    study_id=sid, applied_at=dt.datetime(2026, 1, 1, tzinfo=UTC)))
        with engine.begin() as c:
            c.execute(text("CREATE TRIGGER refuse_clear BEFORE DELETE ON study_workflow_params "
                           "BEGIN SELECT RAISE(ABORT, 'the store refused the write'); END"))
        with pytest.raises((StoreError, IntegrityError)):  # SQLite reports a trigger's refusal as a
            promote_winner(engine, sid)  # constraint: tried as a concurrent activation, then given up
        assert active_version_id(engine, workspace="acme", workflow="seattle_rain") is None
        assert workflow_params(engine, "acme", "seattle_rain") == {"threshold": 0.4}
        with engine.begin() as c:
            c.execute(text("DROP TRIGGER refuse_clear"))
        done = promote_winner(engine, sid)
        assert done.kind == PromotionKind.ACTIVATED_VERSION
        assert active_version_id(engine, workspace="acme", workflow="seattle_rain") == done.version_id
        assert workflow_params(engine, "acme", "seattle_rain") == {}
    finally:
        engine.dispose()
