"""The leaderboard of a study of many candidates, as a person gets it: the console's study page,
the API's leaderboard JSON (whole, and its first page) and the leaderboard picture.

A finished study of the synthetic workflow (the studies core's own runner, 2 folds of 10 steps)
with 2,000 candidates, or 10,000 with ``TYPESTRICT_BENCH_FULL=1`` (about 75 s to build on two
cores); ``--store PATH`` reuses a store that holds such a study (its first one). Each figure is
the median wall time of 5 requests after a warm-up (the first one computes the ranking, which
the process keeps), the body's size, and the machine's load average beside it. The picture is
``assets.studies.leaderboard_picture`` (what the finalize step draws), its peak traced memory
measured on its own. Where Debian's chromium and Playwright are installed, the study page's
HTML is also parsed and laid out by Chromium (scripts and styles not fetched).

Run: ``.venv/bin/python -m bench.bench_console_leaderboard [--store PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import httpx

from bench.summary import row

CHROMIUM = "/usr/bin/chromium"
JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here
REPEAT = 5


def build_study(store_url: str, n: int, workspace: str = "demo") -> int:
    """A finished study of ``n`` synthetic candidates (also the console tests' study)."""
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.repository import LastBacktest
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import create_study_from_config, study_backend

    engine = open_store(store_url)
    try:
        form = StudyForm(workflow=f"board_{n}", start="2012-01-01", end="2012-12-01", tune_steps=10,
                         eval_steps=10, holdout_steps=10, random=["skill=0.3:0.7"], random_draws=n,
                         synthetic=True, max_candidates=n, max_total_steps=10**8, folds=2,
                         workspace=workspace, name=f"{n} candidates")
        sid = create_study_from_config(engine, study_config(form), last_backtest=LastBacktest(30, 10))
        run_study_local(engine, sid, study_backend(engine, sid), max_workers=2)
    finally:
        engine.dispose()
    return sid


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


async def _measure(client: httpx.AsyncClient, url: str) -> tuple[float, int]:
    """Median wall seconds of :data:`REPEAT` GETs of ``url`` after a warm-up, and its size."""
    first = await client.get(url)
    assert first.status_code == 200, (url, first.status_code, first.text[:300])
    walls = []
    size = 0
    for _ in range(REPEAT):
        started = time.perf_counter()
        got = await client.get(url)
        walls.append(time.perf_counter() - started)
        size = len(got.content)
    return statistics.median(walls), size


def _read(store_url: str, sid: int) -> tuple[float, str]:
    """Median wall seconds of the leaderboard's read from the store (its ranking cached), which
    every page and every API answer starts with."""
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.leaderboard import load_leaderboard

    engine = open_store(store_url)
    try:
        load_leaderboard(engine, sid)
        walls = []
        for _ in range(REPEAT):
            started = time.perf_counter()
            load_leaderboard(engine, sid)
            walls.append(time.perf_counter() - started)
    finally:
        engine.dispose()
    return statistics.median(walls), _load()


def _layout(page_html: str) -> tuple[float, str] | None:
    """Median wall seconds for Chromium to parse and lay out the study page's HTML (its scripts
    and styles not fetched), or ``None`` without Playwright and ``/usr/bin/chromium``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).is_file():
        return None
    walls = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            for i in range(REPEAT + 1):
                page = browser.new_page()
                page.route("**/*", lambda route: route.abort())  # no script, no stylesheet
                started = time.perf_counter()
                page.set_content(page_html, wait_until="load")
                page.evaluate("() => document.body.getBoundingClientRect().height")  # forces layout
                if i:  # the first is a warm-up
                    walls.append(time.perf_counter() - started)
                page.close()
        finally:
            browser.close()
    return statistics.median(walls), _load()


async def _pages(store_url: str, home: Path,
                 sid: int) -> tuple[dict[str, tuple[float, int, str]], str]:
    from typestrict_pipeline.api import create_app
    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.store import open_store

    engine = open_store(store_url)
    key = create_api_key(engine, "demo").key
    engine.dispose()
    app = create_app(store_url, home, jev_source=JEV)
    out: dict[str, tuple[float, int, str]] = {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console.test",
                                     timeout=600) as client:
            page = (await client.get("/console/sign-in")).text
            token = re.search(r'name="csrf_token" value="([^"]+)"', page)
            assert token is not None
            signed = await client.post("/console/sign-in", data={"csrf_token": token.group(1), "key": key})
            assert signed.status_code == 303, signed.text[:300]
            for name, url in (("study page", f"/console/studies/{sid}"),
                              ("API leaderboard, every row", f"/v1/studies/{sid}/leaderboard"),
                              ("API leaderboard, limit=100", f"/v1/studies/{sid}/leaderboard?limit=100")):
                wall, size = await _measure(client, url)
                out[name] = (wall, size, _load())
            html = (await client.get(f"/console/studies/{sid}")).text
    return out, html


def _picture(store_url: str, sid: int) -> tuple[float, int, int, str]:
    """Median wall seconds, PNG bytes and peak traced bytes of the study's leaderboard picture."""
    from assets.studies import leaderboard_picture
    from typestrict_pipeline.store import open_store
    from typestrict_pipeline.study.leaderboard import load_leaderboard

    engine = open_store(store_url)
    try:
        board = load_leaderboard(engine, sid)
    finally:
        engine.dispose()
    png = leaderboard_picture(board).png  # warm-up (fonts, the first canvas)
    walls = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        png = leaderboard_picture(board).png
        walls.append(time.perf_counter() - started)
    tracemalloc.start()
    leaderboard_picture(board)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(walls), len(png), peak, _load()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, help="a SQLite store whose first study to measure")
    args = parser.parse_args(argv)
    n = 10_000 if os.environ.get("TYPESTRICT_BENCH_FULL") else 2_000
    with tempfile.TemporaryDirectory() as tmp:
        if args.store is not None:
            store_url, sid = f"sqlite:///{args.store.resolve()}", 1
        else:
            store_url = f"sqlite:///{Path(tmp) / 'store.db'}"
            started = time.perf_counter()
            sid = build_study(store_url, n)
            print(f"built a study of {n:,} candidates in {time.perf_counter() - started:.0f} s")
        read, read_load = _read(store_url, sid)
        figures, page_html = asyncio.run(_pages(store_url, Path(tmp) / "home", sid))
        laid = _layout(page_html)
        wall, size, peak, load = _picture(store_url, sid)
    row("bench_console_leaderboard", "leaderboard read from the store (ranking cached)",
        f"{read:.3f} s ({read_load})")
    for name, (w, b, at) in figures.items():
        row("bench_console_leaderboard", name, f"{w:.3f} s, {b:,} bytes ({at})")
    if laid is not None:
        row("bench_console_leaderboard", "study page parsed and laid out by Chromium",
            f"{laid[0]:.3f} s ({laid[1]})")
    row("bench_console_leaderboard", "leaderboard picture (PNG)",
        f"{wall:.3f} s, {size:,} bytes, peak traced {peak / 2**20:.1f} MiB ({load})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
