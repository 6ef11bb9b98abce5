"""``/v1/studies``: the form's estimate, create, cancel, leaderboard, schedule, lineage.

Refusals carry the page's messages ("Every study has a limit", "This version has no completed
backtest in your workspace to estimate from...", one study at a time per workflow).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import Depends, Query

from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.idempotency import idempotency_key
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.runs import RunInfo
from typestrict_pipeline.api.schemas import (
    ErrorBody,
    EstimateOut,
    LineageOut,
    PromoteIn,
    PromoteOut,
    ScheduleIn,
    ScheduleOut,
    SchedulesOut,
    StudyFormIn,
    StudyOut,
)
from typestrict_pipeline.api.studies import (
    cancel_study,
    check_study,
    count_studies,
    estimate_study,
    launch_study,
    list_studies,
    parse_study_id,
    promote_study,
    settle_unstarted,
    study_form_config,
    study_run,
)
from typestrict_pipeline.backtest.engine import for_workspace
from typestrict_pipeline.errors import for_customers
from typestrict_pipeline.progress import Progress
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study.leaderboard import header_lines, load_leaderboard
from typestrict_pipeline.study.runner import search_progress, searches_progress
from typestrict_pipeline.study.space import MAX_PLANNED_CANDIDATES
from typestrict_pipeline.study.tables import StudyRow, StudyState

router = api_router(tags=["studies"], responses={
    401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}})

StudyId = PathId
LEADERBOARD_LIMIT_MAX = 1000
"""The most rows one ``GET /v1/studies/{id}/leaderboard?limit=`` returns (a page of a study of
10,000 candidates is then at most a tenth of it; without ``limit`` every row comes, as before)."""
Limit = Annotated[int | None, Query(
    ge=1, le=LEADERBOARD_LIMIT_MAX,
    description=f"At most this many rows, from ``offset`` (1 to {LEADERBOARD_LIMIT_MAX:,}); "
                "without it, every row from ``offset``.")]
Offset = Annotated[int, Query(
    ge=0, le=MAX_PLANNED_CANDIDATES,
    description="Rows to skip first, in ranking order (0, the default, starts at rank 1); "
                "``page.next_offset`` of an answer is the next page's.")]


def _started_study_run(ctx: Ctx, row: StudyRow) -> RunInfo | None:
    """The study's run; None for a study that has started (any state but ``PENDING``) when the
    Dagster instance cannot be read now: its state and everything else in its answer are the
    store's, so it is answered without the run (``run_id`` and ``run_state`` null) rather than
    refused — an ended study stays readable while the instance is down. A ``PENDING`` study
    needs its run (still queued, or ended before it started?): the ``503 dagster_unavailable``
    stands."""
    try:
        return study_run(ctx.runs, row.workspace, row.id)
    except ApiError as exc:
        if exc.code != "dagster_unavailable" or row.state == StudyState.PENDING.value:
            raise
        return None


def _study_out(ctx: Ctx, row: StudyRow, searched: Progress | None = None) -> StudyOut:
    """The study's answer; ``searched``, its :func:`search_progress` when counted already."""
    row = settle_unstarted(ctx.engine, ctx.runs, row)
    run = _started_study_run(ctx, row)
    searched = searched if searched is not None else search_progress(ctx.engine, row.id)
    return StudyOut(id=row.id, workspace_id=row.workspace, workflow=row.workflow, state=row.state,
                    stop_limit=row.stop_limit,
                    spend_micro_usd=row.spend_micro if row.cost_tracked else None,
                    budget_micro_usd=row.budget_micro, estimate_micro_usd=row.estimate_micro,
                    error=None if row.error is None else for_workspace(row.error), run_id=None if run is None else run.run_id,
                    run_state=None if run is None else run.state,
                    window_runs_done=searched.done, window_runs_planned=searched.total or 0)


@router.post("/studies/estimate", response_model=EstimateOut)
def estimate(body: StudyFormIn, ctx: Ctx, workspace: Workspace) -> EstimateOut:
    """What the form shows as soon as a budget is entered (nothing is created)."""
    config = study_form_config(ctx.settings.home, workspace, body.model_dump())
    est = estimate_study(ctx.engine, config)
    return EstimateOut(candidates=est.candidates, planned=est.planned, folds=est.folds,
                       total_steps=est.total_steps, estimate_micro_usd=est.estimate_micro, text=est.text)


@router.post("/studies", status_code=201, response_model=StudyOut, responses={409: {"model": ErrorBody}},
             dependencies=[Depends(idempotency_key)])
def create_study(body: StudyFormIn, ctx: Ctx, workspace: Workspace) -> StudyOut:
    """Create a study and launch it as a ``study_job`` run on the Dagster instance (the run the
    Dagster UI launches, listed there; one study at a time per workflow)."""
    row = launch_study(ctx.engine, ctx.settings.home, ctx.runs, workspace, body.model_dump())
    return _study_out(ctx, row)


@router.get("/studies", response_model=list[StudyOut])
def get_studies(ctx: Ctx, workspace: Workspace, page: ListPage) -> list[StudyOut]:
    """The workspace's studies, newest first, a page at a time (``limit``, ``offset``;
    ``X-Total-Count`` and ``Link``)."""
    shown = page.of(count_studies(ctx.engine, workspace))
    rows = list_studies(ctx.engine, workspace, limit=max(0, shown.stop - shown.start), offset=shown.start)
    with session_scope(ctx.engine) as s:
        searched = searches_progress(s, rows)
    return [_study_out(ctx, r, searched[r.id]) for r in rows]


@router.get("/studies/{study_id}", response_model=StudyOut)
def get_study(study_id: StudyId, ctx: Ctx, workspace: Workspace) -> StudyOut:
    """A study's state, spend and budget, and its Dagster run."""
    return _study_out(ctx, check_study(ctx.engine, workspace, parse_study_id(study_id)))


@router.post("/studies/{study_id}/cancel", response_model=StudyOut)
def cancel(study_id: StudyId, ctx: Ctx, workspace: Workspace) -> StudyOut:
    """Cancel a study; what ran is kept and ranked."""
    return _study_out(ctx, cancel_study(ctx.engine, ctx.runs, workspace, parse_study_id(study_id)))


@router.post("/studies/{study_id}/promote", response_model=PromoteOut, responses={409: {"model": ErrorBody}})
def promote(study_id: StudyId, ctx: Ctx, workspace: Workspace, body: PromoteIn | None = None) -> PromoteOut:
    """"Promote winner": the winner of a finished study (Finished or Budget reached, with a
    holdout score) through the evaluation gate, then the normal activation path: a winner that
    changed prompts becomes the workflow's active version in this workspace; one that changed
    only parameters applies them to the workflow's configuration. The gate compares it with the
    baseline holdout run the study stored (no model is called). A refusal of the gate, a study
    that has not finished or has no holdout score is a 409 with why. No body, or ``{}``."""
    return promote_study(ctx.engine, workspace, parse_study_id(study_id))


@router.get("/studies/{study_id}/leaderboard")
def leaderboard(study_id: StudyId, ctx: Ctx, workspace: Workspace, limit: Limit = None,
                offset: Offset = 0) -> dict[str, Any]:
    """The leaderboard with its header (planned, run, discarded, the luck line, spend).

    ``rows`` are in ranking order (by Adjusted, then the candidates with no Adjusted score);
    ``limit`` and ``offset`` return a page of them, and ``page`` says which: ``offset``,
    ``limit``, ``returned``, ``total`` (every row) and ``next_offset`` (``null`` on the last
    page). Everything else (the header, the winner, the tests) is the whole study's on every page.
    """
    row = check_study(ctx.engine, workspace, parse_study_id(study_id))
    board = load_leaderboard(ctx.engine, row.id)
    out = board.to_json()
    out["header"] = [{"label": k, "value": v} for k, v in header_lines(board)]
    every = out["rows"]
    end = len(every) if limit is None else min(len(every), offset + limit)
    out["rows"] = every[offset:end]
    out["page"] = {"offset": offset, "limit": limit, "returned": len(out["rows"]),
                   "total": len(every), "next_offset": end if end < len(every) else None}
    return out


def schedule_out(ctx: Ctx, view: Any) -> ScheduleOut:
    from typestrict_pipeline.reruns.service import API_STATUS, status_text

    return ScheduleOut(id=view.id, study_id=view.root_study_id, cadence=view.cadence,
                       state=str(getattr(view.state, "value", view.state)), owner=view.owner,
                       min_unseen_steps=view.min_unseen_steps,
                       last_outcome=None if view.last_outcome is None else str(
                           getattr(view.last_outcome, "value", view.last_outcome)),
                       last_message=None if view.last_message is None else for_customers(
                           API_STATUS.stored(view.last_message, view)),
                       status_text=for_customers(status_text(ctx.engine, view, words=API_STATUS)))


@router.post("/studies/{study_id}/schedule", status_code=201, response_model=ScheduleOut,
             responses={409: {"model": ErrorBody}})
def enable_schedule(study_id: StudyId, body: ScheduleIn, ctx: Ctx, workspace: Workspace) -> ScheduleOut:
    """Re-run a finished study (with a USD budget) on a cadence."""
    from typestrict_pipeline.reruns.service import API_MIN_UNSEEN
    from typestrict_pipeline.reruns.service import enable_schedule as core_enable
    from typestrict_pipeline.reruns.studies import StoreStudies

    row = check_study(ctx.engine, workspace, parse_study_id(study_id))
    view = core_enable(ctx.engine, StoreStudies(ctx.engine), study_id=str(row.id), cadence=body.cadence,
                       owner=body.owner, min_unseen_steps=body.min_unseen_steps, words=API_MIN_UNSEEN)
    return schedule_out(ctx, view)


@router.get("/studies/{study_id}/schedule", response_model=SchedulesOut)
def read_schedule(study_id: StudyId, ctx: Ctx, workspace: Workspace) -> SchedulesOut:
    """The study's schedules, each with the reason of its last skip."""
    from typestrict_pipeline.reruns.service import list_schedules

    row = check_study(ctx.engine, workspace, parse_study_id(study_id))
    views = list_schedules(ctx.engine, workspace_id=workspace, study_id=str(row.id))
    return SchedulesOut(schedules=[schedule_out(ctx, v) for v in views])


@router.get("/studies/{study_id}/lineage", response_model=LineageOut)
def lineage(study_id: StudyId, ctx: Ctx, workspace: Workspace) -> LineageOut:
    """The lineage panel: every re-run, its window, winner, holdout score, the luck line."""
    from typestrict_pipeline.reruns.lineage import summarize
    from typestrict_pipeline.reruns.service import lineage_entries, lineage_text

    row = check_study(ctx.engine, workspace, parse_study_id(study_id))
    entries = lineage_entries(ctx.engine, str(row.id))
    return LineageOut(
        study_id=row.id,
        entries=[{**dataclasses.asdict(e), "edge": e.edge} for e in entries],
        summary=dataclasses.asdict(summarize(entries)) if entries else None,
        text=lineage_text(ctx.engine, str(row.id)),
    )
