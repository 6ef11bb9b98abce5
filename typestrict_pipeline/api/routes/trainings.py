"""``/v1/trainings``: create a training, read its split before training, post its predictions."""

from __future__ import annotations

import contextlib
import json
import math
from decimal import Decimal
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from typestrict_pipeline.api.deps import Ctx, Workspace
from typestrict_pipeline.api.edge import PathId, api_router
from typestrict_pipeline.api.errors import ApiError
from typestrict_pipeline.api.idempotency import idempotency_key
from typestrict_pipeline.api.paging import ListPage
from typestrict_pipeline.api.routes.files import FileName, receive_upload, staging_for
from typestrict_pipeline.api.schemas import (
    ErrorBody,
    FileOut,
    GroupingWarningOut,
    PredictionsIn,
    SplitOut,
    TrainingCreate,
    TrainingOut,
)
from typestrict_pipeline.api.trainings import TrainingRequest, TrainingView
from typestrict_pipeline.credits import ModelState
from typestrict_pipeline.credits.models import models_of
from typestrict_pipeline.errors import NotFoundError

router = api_router(tags=["trainings"], responses={
    401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}})

TrainingId = PathId


def _out(ctx: Ctx, workspace: str, training_id: str, view: TrainingView | None = None) -> TrainingOut:
    manifest = ctx.trainings.manifest(workspace, training_id)
    view = view if view is not None else ctx.trainings.view(workspace, training_id)
    model = view.model
    deadline = view.deadline_at
    return TrainingOut(
        id=training_id, workspace_id=workspace, state=view.state.value,
        keep_if_loses=manifest.options.keep_if_loses,
        decisions=[d.name for d in manifest.decisions],
        verdict=model.verdict.value if model is not None else None,
        model_url=f"/v1/models/{training_id}" if model is not None else None,
        reason=view.reason,
        deadline_at=None if deadline is None else deadline.isoformat().replace("+00:00", "Z"),
        submissions=0 if view.status is None else view.status.submissions,
        group=manifest.dataset.columns.group,
        grouping_warnings=_warnings(ctx.trainings.grouping(workspace, training_id)),
    )


def _warnings(scan: dict[str, Any] | None) -> list[GroupingWarningOut] | None:
    if scan is None:
        return None
    return [GroupingWarningOut(**w) for w in scan.get("warnings") or []]


@router.post("/trainings", status_code=201, response_model=TrainingOut,
             responses={402: {"model": ErrorBody}, 409: {"model": ErrorBody}},
             dependencies=[Depends(idempotency_key)])
def create_training(body: TrainingCreate, ctx: Ctx, workspace: Workspace) -> TrainingOut:
    """Start a training: the dataset (a file of the workspace's area) and its decisions are
    validated, one credit is charged, and the split can be read at once."""
    req = TrainingRequest(
        dataset=body.dataset.model_dump(exclude_none=True),
        decisions=[d.model_dump(exclude_none=True) for d in body.decisions],
        options=body.options.model_dump(),
    )
    training_id = ctx.trainings.create(workspace, req)
    return _out(ctx, workspace, training_id)


@router.get("/trainings", response_model=list[TrainingOut])
def list_trainings(ctx: Ctx, workspace: Workspace, page: ListPage) -> list[TrainingOut]:
    """The workspace's trainings, by id, a page at a time (``limit``, ``offset``;
    ``X-Total-Count`` and ``Link``: docs/api.md, "Lists, a page at a time")."""
    ids = ctx.trainings.list_ids(workspace)
    views = ctx.trainings.views(workspace, ids[page.of(len(ids))])
    out = []
    for training_id, view in views.items():
        with contextlib.suppress(NotFoundError):  # removed since it was listed: not shown
            out.append(_out(ctx, workspace, training_id, view))
    return out


@router.get("/trainings/{training_id}", response_model=TrainingOut)
def get_training(training_id: TrainingId, ctx: Ctx, workspace: Workspace) -> TrainingOut:
    """A training's state (docs/lifecycle.md): awaiting_predictions, judging, failed (with the
    reason; corrected predictions are accepted), settled (with its verdict), expired or
    cancelled (the credit came back); ``deadline_at`` while it is open."""
    return _out(ctx, workspace, training_id)


@router.post("/trainings/{training_id}/cancel", response_model=TrainingOut,
             responses={409: {"model": ErrorBody}})
def cancel_training(training_id: TrainingId, ctx: Ctx, workspace: Workspace) -> TrainingOut:
    """Cancel a training that awaits its predictions (or corrected ones): ``cancelled``, and its
    credit comes back. A training being judged settles on its own; 409."""
    ctx.trainings.cancel(workspace, training_id)
    return _out(ctx, workspace, training_id)


@router.get("/trainings/{training_id}/split", response_model=SplitOut)
def get_split(training_id: TrainingId, ctx: Ctx, workspace: Workspace) -> Response:
    """Before training: the ids to train on (and their SHA-256), and what is held out. Computed
    once and stored with the training (``api/splits.py``); the stored JSON is answered as it is,
    the bytes FastAPI's own serialisation of :class:`SplitOut` gives (``model_dump_json``), without
    reading a million ids into objects again. Once retention deleted the training's data (its
    dataset copy), **410 Gone** with the date."""
    ctx.trainings.manifest(workspace, training_id)  # not found: another workspace's, or none
    _check_data_kept(ctx, training_id)
    return Response(ctx.trainings.split_json(workspace, training_id), media_type="application/json")


def _check_data_kept(ctx: Ctx, training_id: str) -> None:
    """410 once the training's model files expired: retention deleted its dataset copy with them
    (``docs/credits.md``, "Retention"), so there is no split to read any more."""
    info = models_of(ctx.engine, [training_id]).get(training_id)
    if info is not None and info.state is ModelState.EXPIRED:
        when = (info.expired_at or info.expires_at).isoformat()
        raise ApiError(410, "gone",
                       f"expected the dataset of training {training_id!r} to read its split, got none: "
                       f"retention deleted the training's data on {when} "
                       f"({(info.expires_at - info.settled_at).days} days after it ended). Its verdict "
                       f"and audit stay at /v1/models/{training_id} and /v1/models/{training_id}/audit",
                       headers={"X-Expired-At": info.expires_at.isoformat()})


@router.put("/trainings/{training_id}/model/{name}", status_code=201, response_model=FileOut,
            responses={409: {"model": ErrorBody}},
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def put_model_file(training_id: TrainingId, name: FileName, request: Request, ctx: Ctx,
                         workspace: Workspace) -> FileOut:
    """Upload one file of the trained model (downloadable while retained, if delivered). The
    training and the quota (on the ``Content-Length``) are checked before the body is read."""
    target = await run_in_threadpool(ctx.trainings.model_file_target, workspace, training_id, name)
    staging = await staging_for(request, ctx, workspace, target)
    with await receive_upload(request, staging) as staged:
        # checked again and stored under the workspace's storage lock, off the event loop
        await run_in_threadpool(ctx.trainings.put_model_file, workspace, training_id, name, staged)
    return FileOut(name=name, size=staged.size)


def _json_number(value: object) -> object:
    """A probability the edge decoded as ``Decimal``, written back as a JSON number (its text if
    no float holds it, which the reader then refuses as not a number).

    >>> _json_number(Decimal("0.25")), _json_number(Decimal("1E+400"))
    (0.25, '1E+400')
    """
    if isinstance(value, Decimal):
        number = float(value)
        return number if math.isfinite(number) else str(value)
    raise TypeError(type(value).__name__)


def _own_training(training_id: TrainingId, ctx: Ctx, workspace: Workspace) -> str:
    """The training, looked up before a body is checked: a dependency runs before FastAPI
    validates the body, so predictions sent to a training the workspace does not have are a
    ``404`` without checking up to 200,000 rows first (about 1.8 s of CPU for a 15 MiB body)."""
    ctx.trainings.state(workspace, training_id)  # NotFoundError: 404
    return training_id


OwnTraining = Annotated[str, Depends(_own_training)]


@router.post("/trainings/{training_id}/predictions", status_code=202, response_model=TrainingOut,
             responses={409: {"model": ErrorBody}})
def post_predictions(training_id: OwnTraining, body: PredictionsIn, ctx: Ctx,
                     workspace: Workspace) -> TrainingOut:
    """The trained model's probabilities, checked against the split before anything is stored: a
    prediction for every test example of every decision, each over the decision's answers, no id
    or decision the training does not have (a refusal counts each and names the first ids, 422).
    The training may state what its model was trained on: ``trained_on_ids`` (the ids) or
    ``trained_on_id_sha256`` (each id's SHA-256 under the audit's id domain), any subset of the
    split's training rows, or ``trained_on_sha256`` (the digest of all of them); a stated test or
    excluded row is refused with the count and the first ids, and the audit records the
    attestation. Accepted in ``awaiting_predictions`` and ``failed``; the verdict follows."""
    lines = [json.dumps(row.model_dump(), ensure_ascii=False, allow_nan=False, default=_json_number)
             for row in body.predictions]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    stated = [v for v in (body.trained_on_sha256, body.trained_on_ids, body.trained_on_id_sha256)
              if v is not None]
    if len(stated) > 1:
        raise ApiError(422, "invalid_input",
                       "expected one statement of what the model was trained on, got "
                       f"{len(stated)} (trained_on_sha256, trained_on_ids, trained_on_id_sha256). "
                       "Send the ids (or their SHA-256) once")
    ids: tuple[bool, list[str]] | None = None
    if body.trained_on_ids is not None:
        ids = (False, body.trained_on_ids)
    elif body.trained_on_id_sha256 is not None:
        ids = (True, body.trained_on_id_sha256)
    ctx.trainings.submit(workspace, training_id, data, body.trained_on_sha256, stated_ids=ids)
    return _out(ctx, workspace, training_id)
