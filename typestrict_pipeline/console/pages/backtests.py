"""The Backtests tab: run a backtest, its run card (HISTORICAL, cost), and the Studies section:
create a study with its estimate shown before anything runs, and "Re-run on a schedule" (the
page's place for it: tick the box, pick the finished study, set a cadence; each schedule with why
it skipped under its controls); a study's page: the leaderboard with its chart, cancel, its
schedules (linking to the Studies section) and the lineage panel.

Every action is the ``/v1`` route's: the same request schema (:mod:`typestrict_pipeline.api.schemas`)
and the same core calls (:mod:`typestrict_pipeline.api.backtests`, :mod:`typestrict_pipeline.api.studies`,
``reruns.service``): a backtest and a study are Dagster runs launched on the instance, seen in the
Dagster UI like the ones it launches.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from typestrict_pipeline.api import backtests as backtests_core
from typestrict_pipeline.api import studies as studies_core
from typestrict_pipeline.api.deps import get_ctx
from typestrict_pipeline.api.edge import PathId
from typestrict_pipeline.api.errors import status_for, validation_message
from typestrict_pipeline.api.schemas import BacktestIn, ScheduleIn, StudyFormIn
from typestrict_pipeline.backtest.engine import for_workspace
from typestrict_pipeline.backtest.workflows.datasets import CONSOLE_DATASETS, CONSOLE_STUDY_DATASETS
from typestrict_pipeline.console.board_pages import (
    TOP_K,
    board_page,
    chart_ranks,
    page_count,
    page_links,
    parse_page,
)
from typestrict_pipeline.console.charts import chart_text, leaderboard_spec
from typestrict_pipeline.console.once import once
from typestrict_pipeline.console.paging import PER_PAGE, Pager, hrefs, requested
from typestrict_pipeline.console.sessions import ConsoleSession
from typestrict_pipeline.console.web import (
    FORM_FIX,
    PREFIX,
    ConsoleRoute,
    form_box,
    read_form,
    redirect,
    refused_input,
    render,
    require_csrf,
    require_session,
)
from typestrict_pipeline.errors import InputError, TypeStrictError, for_customers
from typestrict_pipeline.reruns.service import count_schedules
from typestrict_pipeline.study.form import CONSOLE_SPACE
from typestrict_pipeline.study.limits import format_usd
from typestrict_pipeline.study.tables import StudyState

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

Session = Annotated[ConsoleSession, Depends(require_session)]
Posted = Annotated[ConsoleSession, Depends(require_csrf)]
BacktestId = PathId
StudyId = PathId
LIVE_STATES = frozenset({"queued", "running", "pending"})

BACKTEST_DEFAULTS = {"workflow": "seattle_rain", "dataset": "seattle_weather", "start": "", "end": "",
                     "step": "1d"}
STUDY_DEFAULTS = {"name": "", "workflow": "seattle_rain", "dataset": "seattle_weather", "start": "",
                  "end": "", "step": "1d", "folds": "3", "tune_steps": "90", "eval_steps": "60",
                  "holdout_steps": "120", "grid": "", "random": "", "random_draws": "0",
                  "max_candidates": "", "max_total_steps": "", "budget_usd": "", "min_unseen_steps": ""}
STUDY_INTS = ("folds", "tune_steps", "eval_steps", "holdout_steps", "random_draws", "max_candidates",
              "max_total_steps", "min_unseen_steps")


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _lines(text: str) -> list[str]:
    """One entry per line (blank lines skipped): the form's Grid and Random fields."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def study_body(values: dict[str, str]) -> dict[str, Any]:
    """The ``POST /v1/studies`` body the form describes (empty optional fields left out).

    >>> body = study_body({**STUDY_DEFAULTS, "start": "2013-01-02", "end": "2015-12-31",
    ...                    "grid": "threshold=0.4,0.5", "max_candidates": "2", "budget_usd": "0.05"})
    >>> body["grid"], body["max_candidates"], body["budget_usd"], "min_unseen_steps" in body
    (['threshold=0.4,0.5'], 2, '0.05', False)
    """
    body: dict[str, Any] = {}
    for key, value in values.items():
        if value == "":
            continue
        if key in ("grid", "random"):
            body[key] = _lines(value)
        elif key in STUDY_INTS:
            body[key] = _whole(value)
        else:
            body[key] = value
    return body


def _whole(value: str) -> int | str:
    """A form's whole number as the API's JSON would hold it, else the text as typed (refused
    by the schema with its message). ASCII digits only: ``int("²")`` raises, ``int("٣")`` is 3.

    >>> _whole("90"), _whole("-1"), _whole("²"), _whole("٣"), _whole("1.5")
    (90, -1, '²', '٣', '1.5')
    """
    digits = value.removeprefix("-")
    return int(value) if digits.isascii() and digits.isdigit() else value


def _study_values(form: FormData) -> dict[str, str]:
    return {k: _text(form, k) for k in STUDY_DEFAULTS}


SCHEDULE_DEFAULTS = {"study": "", "cadence": "1d", "owner": "", "min_unseen_steps": "", "rerun": ""}
"""The "Re-run on a schedule" form of the Studies section, as it first shows."""
BACKTEST_INPUTS = {"workflow": "b-workflow", "dataset": "b-dataset", "start": "b-start", "end": "b-end",
                   "step": "b-step"}
""""Run a backtest"'s inputs by the names its refusals give them (``web.refused_input``)."""
STUDY_INPUTS = {"name": "s-name", "workflow": "s-workflow", "dataset": "s-dataset", "start": "s-start",
                "end": "s-end", "step": "s-step", "folds": "s-folds", "tune_steps": "s-tune",
                "eval_steps": "s-eval", "holdout_steps": "s-holdout", "grid": "s-grid", "random": "s-random",
                "random_draws": "s-draws", "max_candidates": "s-maxc", "max_total_steps": "s-maxs",
                "budget_usd": "s-budget", "min_unseen_steps": "s-unseen", "Grid": "s-grid",
                "Random ranges": "s-random"}
"""The new study form's inputs by the names (and labels, ``CONSOLE_SPACE``) its refusals give them."""
SCHEDULE_INPUTS = {"study": "schedule-study", "Study to re-run from": "schedule-study",
                   "Re-run on a schedule": "rerun", "cadence": "cadence", "owner": "owner",
                   "min_unseen_steps": "min_unseen_steps", "Min unseen steps for a re-run": "min_unseen_steps"}
"""The "Re-run on a schedule" form's inputs by the names (and labels) its refusals give them."""
FINISHED_STATES = (StudyState.FINISHED.value, StudyState.BUDGET_REACHED.value)
"""The studies a schedule may re-run from (the page's "the finished study to re-run from")."""


def _finished_studies(request: Request, ws: str, picked: str = "") -> tuple[list[Any], int, bool]:
    """The form's "Study to re-run from": the workspace's newest :data:`PER_PAGE` finished
    studies, the one ``picked`` (``?study=N``: a study page's link, or its number typed in the
    form) added when older; how many finished studies there are; whether ``picked`` names none
    of them."""
    from sqlalchemy import func, select

    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study.tables import StudyRow

    finished = (StudyRow.workspace == ws, StudyRow.state.in_(FINISHED_STATES))
    with session_scope(get_ctx(request).engine) as s:
        rows = list(s.execute(select(StudyRow).where(*finished)
                              .order_by(StudyRow.id.desc()).limit(PER_PAGE)).scalars().all())
        total = int(s.scalar(select(func.count()).select_from(StudyRow).where(*finished)) or 0)
        unknown = False
        # an id spelled as the API prints it ('01' is no study: it crashed the page, study 1 listed twice)
        number = int(picked) if picked.isascii() and picked.isdigit() and len(picked) <= 18 else None
        if number is not None and str(number) != picked:
            number, unknown = None, True
        if number is not None and all(r.id != number for r in rows):
            older = s.execute(select(StudyRow).where(*finished, StudyRow.id == number)).scalar_one_or_none()
            if older is None:
                unknown = True
            else:
                rows.insert(0, older)
        for r in rows:
            s.expunge(r)
        return rows, total, unknown


def _schedules(request: Request, ws: str, pager: Pager | None = None) -> list[dict[str, Any]]:
    """The workspace's schedules (the ``pager``'s page of them), each with its status: why it
    skipped, what would make it fire (``typestrict schedule status``'s text)."""
    from typestrict_pipeline.reruns.service import CONSOLE_STATUS, list_schedules, status_text

    engine = get_ctx(request).engine
    views = list_schedules(engine, workspace_id=ws,
                           limit=None if pager is None else pager.per_page,
                           offset=0 if pager is None else pager.offset)
    return [{"view": v, "status": for_customers(status_text(engine, v, words=CONSOLE_STATUS)),
             "enabled": v.state.value == "ENABLED"} for v in views]


def schedule_href(request: Request, ws: str, schedule_id: int) -> str:
    """Where a schedule is on the Backtests tab: its card, on the page of ``?schedules=`` that
    lists it (newest first, :data:`PER_PAGE` a page)."""
    before = count_schedules(get_ctx(request).engine, workspace_id=ws, newer_than=schedule_id)
    page = before // PER_PAGE + 1
    return f"{PREFIX}/backtests{'' if page == 1 else f'?schedules={page}'}#schedule-{schedule_id}"


def _page(request: Request, session: ConsoleSession, *, backtest: dict[str, str] | None = None,
          study: dict[str, str] | None = None, backtest_error: str | None = None,
          study_error: str | None = None, estimate: str | None = None,
          schedule: dict[str, str] | None = None, schedule_error: str | None = None,
          status: int = 200) -> Response:
    from typestrict_pipeline.backtest.workflow import columns_text

    ctx = get_ctx(request)
    ws = session.workspace_id
    query, pages = request.query_params, ("backtests", "studies", "schedules")
    cards = requested(query.get("backtests"), "backtests")
    backtests, n_backtests, backtests_note = backtests_core.backtest_page(
        ctx.engine, ctx.runs, ws, limit=PER_PAGE, offset=(cards - 1) * PER_PAGE)
    backtest_pager = Pager.at(cards, total=n_backtests, param="backtests",
                              href=hrefs(f"{PREFIX}/backtests", query, "backtests", pages))
    study_pager = Pager.at(requested(query.get("studies"), "studies"), param="studies",
                           total=studies_core.count_studies(ctx.engine, ws),
                           href=hrefs(f"{PREFIX}/backtests", query, "studies", pages))
    schedules_href = hrefs(f"{PREFIX}/backtests", query, "schedules", pages)
    schedule_pager = Pager.at(requested(query.get("schedules"), "schedules"), param="schedules",
                              total=count_schedules(ctx.engine, workspace_id=ws),
                              href=lambda n: f"{schedules_href(n)}#schedule")
    sch = schedule or {**SCHEDULE_DEFAULTS, "study": query.get("study") or ""}
    finished, n_finished, unknown = _finished_studies(request, ws, sch.get("study", ""))
    studies = [studies_core.settle_unstarted(ctx.engine, ctx.runs, r)
               for r in studies_core.list_studies(ctx.engine, ws, limit=PER_PAGE, offset=study_pager.offset)]
    return render(request, "backtests.html", {
        "workflows": backtests_core.workflows(), "backtests": backtests, "studies": studies,
        "backtest_pager": backtest_pager, "study_pager": study_pager, "backtests_note": backtests_note,
        "b": backtest or BACKTEST_DEFAULTS, "s": study or STUDY_DEFAULTS,
        "backtest_error": backtest_error, "study_error": study_error, "estimate": estimate,
        "backtest_refused": refused_input(backtest_error, BACKTEST_INPUTS),
        "study_refused": refused_input(study_error, STUDY_INPUTS),
        "schedule_refused": refused_input(schedule_error, SCHEDULE_INPUTS),
        "schedules": _schedules(request, ws, pager=schedule_pager), "schedule_pager": schedule_pager,
        "finished_studies": finished, "finished_total": n_finished, "picked_unknown": unknown,
        "per_page": PER_PAGE,
        "sch": sch,
        "schedule_error": schedule_error,
        "usd": format_usd, "live": LIVE_STATES, "columns_text": columns_text}, status=status)


@router.get("/backtests")
def backtests_page(request: Request, session: Session, backtests: str | None = None,
                   studies: str | None = None, schedules: str | None = None, study: int | None = None) -> Response:
    """The Backtests tab: run a backtest, the run cards, the Studies section (its studies, the
    new study form, and "Re-run on a schedule": the schedules, why each skipped, the form).
    ``?backtests=N``, ``?studies=N`` and ``?schedules=N`` are the pages of its three lists
    (every turn on of a schedule is a new one, kept turned off: the list grows without end, and
    each schedule's status is a read of the store); ``?study=N`` picks the
    study to re-run from (a study page's link); declared here so the console's one rule of the
    query holds for them: each once."""
    return _page(request, session)


@router.post("/backtests")
async def run_backtest(request: Request, session: Posted) -> Response:
    """Run a backtest: ``POST /v1/backtests``'s checks, then its Dagster run. The form is read on
    the event loop, the store's work (and the page) in the threadpool."""
    form = await read_form(request)
    return await once(request, session.workspace_id, form,
                      lambda: run_in_threadpool(_run_backtest, request, session, form))


def _run_backtest(request: Request, session: ConsoleSession, form: FormData) -> Response:
    ctx = get_ctx(request)
    values = {k: _text(form, k) for k in BACKTEST_DEFAULTS}
    try:
        body = BacktestIn.model_validate({k: v for k, v in values.items() if v})
        req = backtests_core.BacktestRequest(workflow=body.workflow, start=body.start, end=body.end,
                                             step=body.step, dataset=body.dataset, params=body.params)
        view = backtests_core.launch_backtest(ctx.engine, ctx.settings.home, ctx.runs, session.workspace_id, req,
                                              dataset_words=CONSOLE_DATASETS)
    except ValidationError as exc:
        return _page(request, session, backtest=values, backtest_error=validation_message(exc.errors(), fix=FORM_FIX), status=422)
    except TypeStrictError as exc:
        return _page(request, session, backtest=values, backtest_error=str(exc), status=status_for(exc)[0])
    return redirect(f"{PREFIX}/backtests/{view.id}", request)


def _backtest_context(request: Request, session: ConsoleSession, backtest_id: str) -> dict[str, Any]:
    ctx = get_ctx(request)
    view = backtests_core.get_backtest(ctx.engine, ctx.runs, session.workspace_id, backtest_id)
    return {"v": view, "usd": format_usd, "live": view.state in LIVE_STATES}


@router.get("/backtests/{backtest_id}")
def backtest_page(backtest_id: BacktestId, request: Request, session: Session) -> Response:
    """A backtest's run card: HISTORICAL, its state, steps, score and cost."""
    return render(request, "backtest.html", _backtest_context(request, session, backtest_id))


@router.get("/backtests/{backtest_id}/card")
def backtest_card(backtest_id: BacktestId, request: Request, session: Session) -> Response:
    """The run card alone (HTMX polls it while the backtest is queued or running); once it has
    ended, the page reloads, as a study's does: its "Cancel the backtest" goes with the run."""
    context = _backtest_context(request, session, backtest_id)
    if not context["live"] and request.headers.get("hx-request") == "true":
        return redirect(f"{PREFIX}/backtests/{backtest_id}", request)
    return render(request, "_backtest_card.html", context)


@router.post("/backtests/{backtest_id}/cancel")
def cancel_backtest(backtest_id: BacktestId, request: Request, session: Posted) -> Response:
    """Cancel a queued or running backtest (``POST /v1/backtests/{id}/cancel``)."""
    ctx = get_ctx(request)
    backtests_core.cancel_backtest(ctx.engine, ctx.runs, session.workspace_id, backtest_id)
    return redirect(f"{PREFIX}/backtests/{backtest_id}", request)


# --- studies ------------------------------------------------------------------------------------


def _study_request(request: Request, session: ConsoleSession, values: dict[str, str]) -> dict[str, Any]:
    return StudyFormIn.model_validate(study_body(values)).model_dump()


@router.post("/studies/estimate")
async def study_estimate(request: Request, session: Posted) -> Response:
    """The form's estimate before anything runs (``POST /v1/studies/estimate``); nothing is created.

    HTMX swaps the answer into the form; without script the whole tab comes back with it. The
    form is read on the event loop, the store's work (and the page) in the threadpool."""
    form = await read_form(request)
    return await run_in_threadpool(_study_estimate, request, session, form)


def _study_estimate(request: Request, session: ConsoleSession, form: FormData) -> Response:
    ctx = get_ctx(request)
    values = _study_values(form)
    htmx = request.headers.get("hx-request") == "true"
    try:
        fields = _study_request(request, session, values)
        config = studies_core.study_form_config(ctx.settings.home, session.workspace_id, fields,
                                                 words=CONSOLE_SPACE, dataset_words=CONSOLE_STUDY_DATASETS)
        est = studies_core.estimate_study(ctx.engine, config)
        error = None
        text = est.form_text
    except ValidationError as exc:
        text, error = None, validation_message(exc.errors(), fix=FORM_FIX)
    except TypeStrictError as exc:
        text, error = None, str(exc)
    if htmx:
        return render(request, "_estimate.html", {"estimate": text, "error": error})
    return _page(request, session, study=values, estimate=text, study_error=error,
                 status=200 if error is None else 422)


@router.post("/studies")
async def create_study(request: Request, session: Posted) -> Response:
    """Create a study and launch its Dagster run (``POST /v1/studies``). The form is read on the
    event loop, the store's work (and the page) in the threadpool."""
    form = await read_form(request)
    return await once(request, session.workspace_id, form,
                      lambda: run_in_threadpool(_create_study, request, session, form))


def _create_study(request: Request, session: ConsoleSession, form: FormData) -> Response:
    ctx = get_ctx(request)
    values = _study_values(form)
    try:
        fields = _study_request(request, session, values)
        row = studies_core.launch_study(ctx.engine, ctx.settings.home, ctx.runs, session.workspace_id, fields,
                                        words=CONSOLE_SPACE, dataset_words=CONSOLE_STUDY_DATASETS)
    except ValidationError as exc:
        return _page(request, session, study=values, study_error=validation_message(exc.errors(), fix=FORM_FIX), status=422)
    except TypeStrictError as exc:
        return _page(request, session, study=values, study_error=str(exc), status=status_for(exc)[0])
    return redirect(f"{PREFIX}/studies/{row.id}", request)


def _study_context(request: Request, session: ConsoleSession, study_id: str,
                   page: str | None = None) -> dict[str, Any]:
    """What the study page shows; ``page`` is ``?page=`` (the leaderboard's, :data:`TOP_K` a page)."""
    from typestrict_pipeline.reruns.lineage import LINEAGE_COLUMNS, lineage_cells, summarize
    from typestrict_pipeline.reruns.service import lineage_entries, lineage_text
    from typestrict_pipeline.study.leaderboard import header_lines, load_leaderboard, row_cells
    from typestrict_pipeline.study.runner import search_progress

    ctx = get_ctx(request)
    ws = session.workspace_id
    row = studies_core.check_study(ctx.engine, ws, studies_core.parse_study_id(study_id))
    row = studies_core.settle_unstarted(ctx.engine, ctx.runs, row)
    run = studies_core.study_run(ctx.runs, ws, row.id)
    board = load_leaderboard(ctx.engine, row.id)
    listed = board_page(board.rows, winner=board.winner_candidate_id,
                        page=parse_page(page, page_count(len(board.rows))))
    n_ranked = sum(1 for r in board.rows if r.rank is not None)
    drawn = chart_ranks(board.rows, winner=board.winner_candidate_id)
    winner_rank = next((r.rank for r in board.rows if r.candidate_id == board.winner_candidate_id), None)
    from typestrict_pipeline.reruns.service import list_schedules

    schedules = [{"view": v, "href": schedule_href(request, ws, v.id)}
                 for v in list_schedules(ctx.engine, workspace_id=ws, study_id=str(row.id), limit=PER_PAGE)]
    entries = lineage_entries(ctx.engine, str(row.id))
    spec = leaderboard_spec(row.id, n_candidates=n_ranked, luck_line=board.stats.luck_line, shown=drawn)
    return {
        "row": row, "error": None if row.error is None else for_workspace(row.error),
        "run": run, "board": board, "header": header_lines(board), "rows": listed.rows, "cells": row_cells,
        "listed": listed, "winner": board.winner_candidate_id, "live": row.state.lower() in LIVE_STATES,
        "searched": search_progress(ctx.engine, row.id),
        "spec": json.dumps(spec).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"),
        "n_ranked": n_ranked, "drawn": drawn, "per_page": TOP_K, "links": page_links(listed),
        "chart_text": chart_text(n_ranked, drawn),
        "winner_outside_chart": winner_rank is not None and winner_rank > drawn,
        "schedules": schedules,
        "schedules_total": count_schedules(ctx.engine, workspace_id=ws, study_id=str(row.id)),
        "lineage": entries, "lineage_columns": LINEAGE_COLUMNS, "lineage_cells": lineage_cells,
        "lineage_summary": summarize(entries) if entries else None,
        "lineage_text": lineage_text(ctx.engine, str(row.id)) if entries else None,
        "usd": format_usd, "finished": row.state in (StudyState.FINISHED, StudyState.BUDGET_REACHED),
        "promotable": (row.state in (StudyState.FINISHED, StudyState.BUDGET_REACHED)
                       and row.winner_candidate_id is not None and row.holdout_score is not None),
    }


@router.get("/studies/{study_id}")
def study_page(study_id: StudyId, request: Request, session: Session, page: str | None = None,
               promoted: str | None = None) -> Response:
    """A study: its leaderboard (header, chart, table, "Promote winner"), cancel, the schedule,
    the lineage.

    The table lists :data:`TOP_K` candidates a page (``?page=N``, 1 by default: the top ranks),
    the winner on every page, and sums up the others in its last row. ``?promoted=1`` (where
    "Promote winner" leads) adds what the promotion did, read back from the store."""
    context = _study_context(request, session, study_id, page)
    if promoted is not None:
        from typestrict_pipeline.study.promote import promotion_shown

        context["promoted_note"] = promotion_shown(get_ctx(request).engine, context["row"].id)
    return render(request, "study.html", context)


@router.get("/studies/{study_id}/state")
def study_state(study_id: StudyId, request: Request, session: Session) -> Response:
    """The state line (HTMX polls it while the study runs; once it ends, the page reloads)."""
    context = _study_context(request, session, study_id)
    if not context["live"]:
        return redirect(f"{PREFIX}/studies/{study_id}", request)
    return render(request, "_study_state.html", context)


@router.post("/studies/{study_id}/cancel")
def cancel_study(study_id: StudyId, request: Request, session: Posted) -> Response:
    """Cancel the study (``POST /v1/studies/{id}/cancel``): what ran is kept and ranked."""
    ctx = get_ctx(request)
    studies_core.cancel_study(ctx.engine, ctx.runs, session.workspace_id, studies_core.parse_study_id(study_id))
    return redirect(f"{PREFIX}/studies/{study_id}", request)


@router.post("/studies/{study_id}/promote")
def promote_study(study_id: StudyId, request: Request, session: Posted) -> Response:
    """The leaderboard's "Promote winner" (``POST /v1/studies/{id}/promote``): through the
    evaluation gate, then the normal activation path. Done: back to the study page, which says
    what was done (a reload does not promote again); refused (the gate, or a study that cannot be
    promoted): the page with why, focused."""
    ctx = get_ctx(request)
    try:
        studies_core.promote_study(ctx.engine, session.workspace_id, studies_core.parse_study_id(study_id))
    except TypeStrictError as exc:
        status = status_for(exc)[0]
        if status == 404:
            raise
        context = _study_context(request, session, study_id)
        context.update(promote_error=for_customers(str(exc)))
        return render(request, "study.html", context, status=status)
    return redirect(f"{PREFIX}/studies/{study_id}?promoted=1#promote-result", request)


@router.post("/schedules")
async def enable_schedule(request: Request, session: Posted) -> Response:
    """The Studies section's "Re-run on a schedule": tick the box, pick the finished study to
    re-run from, set a cadence (the page's steps); the same call as ``POST /v1/studies/{id}/schedule``.
    The form is read on the event loop, the store's work (and the page) in the threadpool."""
    form = await read_form(request)
    return await once(request, session.workspace_id, form,
                      lambda: run_in_threadpool(_enable_schedule, request, session, form))


def _chosen_study(request: Request, session: ConsoleSession, text: str) -> Any:
    """The study picked under "Study to re-run from": one of the workspace's (another's, or an id
    spelled otherwise, is refused on the form, naming the list)."""
    fix = "pick the finished study to re-run from in the list \"Study to re-run from\""
    if not text:
        raise InputError("a study to re-run from", "none", fix)
    try:
        return studies_core.check_study(get_ctx(request).engine, session.workspace_id,
                                        studies_core.parse_study_id(text))
    except TypeStrictError:
        from typestrict_pipeline.values import shown

        raise InputError("one of this workspace's studies", shown(text), fix) from None


def _enable_schedule(request: Request, session: ConsoleSession, form: FormData) -> Response:
    from typestrict_pipeline.reruns.service import CONSOLE_MIN_UNSEEN
    from typestrict_pipeline.reruns.service import enable_schedule as core_enable
    from typestrict_pipeline.reruns.studies import StoreStudies

    ctx = get_ctx(request)
    error = None
    try:
        ticked = form_box(form, "rerun", lambda v: v == "on", "the box 'Re-run on a schedule' ticked ('on')",
                          "tick it to re-run the study you pick at the cadence below")
    except InputError as exc:
        ticked, error = None, str(exc)
    if ticked is None:
        error = error or ("expected the box 'Re-run on a schedule' ticked, got it empty. Tick it to re-run "
                          "the study you pick at the cadence below")
    else:
        try:
            raw: dict[str, Any] = {"cadence": _text(form, "cadence") or "1d", "owner": _text(form, "owner")}
            if _text(form, "min_unseen_steps"):
                raw["min_unseen_steps"] = _whole(_text(form, "min_unseen_steps"))
            body = ScheduleIn.model_validate(raw)
            row = _chosen_study(request, session, _text(form, "study"))
            core_enable(ctx.engine, StoreStudies(ctx.engine), study_id=str(row.id), cadence=body.cadence,
                        owner=body.owner, min_unseen_steps=body.min_unseen_steps, words=CONSOLE_MIN_UNSEEN)
        except ValidationError as exc:
            error = validation_message(exc.errors(), fix=FORM_FIX)
        except TypeStrictError as exc:
            error = str(exc)
    if error is None:
        return redirect(f"{PREFIX}/backtests#schedule", request)
    sent = {**{k: _text(form, k) for k in ("study", "cadence", "owner", "min_unseen_steps")},
            "rerun": "on" if ticked is not None else ""}
    return _page(request, session, schedule=sent, schedule_error=error, status=422)


@router.post("/schedules/{schedule_id}/cancel")
async def cancel_schedule(schedule_id: PathId, request: Request, session: Posted) -> Response:
    """"Turn this schedule off" (``POST /v1/schedules/{id}/cancel``), with who turns it off (an
    e-mail address, kept with the schedule, as the API's ``by``). The form is read on the event
    loop, the store's work (and the page) in the threadpool."""
    form = await read_form(request)
    return await run_in_threadpool(_cancel_schedule, schedule_id, request, session, form)


def _cancel_schedule(schedule_id: str, request: Request, session: ConsoleSession, form: FormData) -> Response:
    from typestrict_pipeline.api import schedules as schedules_core

    ctx = get_ctx(request)
    sid = schedules_core.parse_schedule_id(schedule_id)
    schedules_core.schedule_of(ctx.engine, session.workspace_id, sid)  # another workspace's: not found
    try:
        schedules_core.cancel(ctx.engine, session.workspace_id, sid, by=_text(form, "by"))
    except TypeStrictError as exc:
        if status_for(exc)[0] == 404:
            raise
        return _page(request, session, schedule_error=f"Schedule {sid}: {exc}", status=422)
    return redirect(schedule_href(request, session.workspace_id, sid), request)
