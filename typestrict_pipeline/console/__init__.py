"""The customer web console: server-rendered pages on the API's own FastAPI application.

``/console``: sign in with a workspace key (exchanged for a session cookie), trainings (list,
new-training form, the split before training, predictions upload), the result page, the
Backtests tab with its Studies section, Settings → Usage and Settings → Notifications. Pages are
Jinja2 templates (``console/templates``); the few interactive parts use HTMX and, for the
leaderboard chart, Vega-Lite, vendored under ``console/static/vendor`` (no JavaScript build).

Every action calls the same core function as the matching ``/v1`` route; see ``docs/console.md``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from typestrict_pipeline.console.web import HERE, PREFIX


def install(app: FastAPI) -> None:
    """Add the console's pages and static files to ``app`` (``create_app`` calls it)."""
    from typestrict_pipeline.console.pages import auth, backtests, results, settings, trainings

    for module in (auth, trainings, results, backtests, settings):
        app.include_router(module.router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console_static")

    @app.get("/", include_in_schema=False)
    def front_door() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/", status_code=303)


__all__ = ["install"]
