"""Trainings: the list, the new-training form (data, decisions, the base model step with the
box "Keep the model even if it does not beat Jev"), the split shown before training, and the
predictions upload.

Every action calls what ``POST /v1/trainings`` and ``POST /v1/trainings/{id}/predictions`` call:
the request is validated by the API's own schema (:class:`~typestrict_pipeline.api.schemas.TrainingCreate`),
then :meth:`TrainingStore.create` / :meth:`TrainingStore.submit` check, charge and hand over.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from typestrict_pipeline.api.deps import get_ctx
from typestrict_pipeline.api.edge import PathId
from typestrict_pipeline.api.errors import validation_message
from typestrict_pipeline.api.routes.files import UPLOAD_PIECE_BYTES, stage_stream
from typestrict_pipeline.api.schemas import TrainingCreate
from typestrict_pipeline.api.trainings import (
    TrainingRequest,
    TrainingState,
    TrainingStore,
    check_name,
    disk_room,
)
from typestrict_pipeline.console.once import once
from typestrict_pipeline.console.paging import Pager, hrefs, requested
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
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.errors import InputError, TypeStrictError
from typestrict_pipeline.files import StagedFile
from typestrict_pipeline.lifecycle.trainings import TrainingWords
from typestrict_pipeline.progress import Progress, read_progress, training_key
from typestrict_pipeline.refund.grouping import resampling_line
from typestrict_pipeline.refund.trained_on import TrainedOnWords

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

TRAINED_ON_BOX = "My model was trained on these training rows only"
"""The predictions form's box that states the split's SHA-256 (``trained_on_sha256``)."""

_FORM_FIELDS = {
    "dataset": "step 1 (Data)", "dataset.path": "step 1 (Data), the dataset",
    "dataset.columns": "step 1 (Data), the columns", "dataset.columns.id": "step 1 (Data), Id column",
    "dataset.columns.text": "step 1 (Data), Text column",
    "dataset.columns.group": "step 1 (Data), Group column",
    "dataset.columns.review_label": "step 1 (Data), Review label column",
    "decisions": "step 2 (Decisions)", "options": "step 3 (Base model)",
    "options.keep_if_loses": 'step 3 (Base model), the box "Keep the model even if it does not beat Jev"',
}
_DECISION_FIELDS = {"name": "Name", "question": "Question", "answer_column": "Answer column",
                    "answers": "Answers", "options_column": "Options column (multiple choice)"}


def form_field(key: str) -> str:
    """A manifest key as the new-training form names the field that sets it (its step, its
    label): the console's words for a refusal of the training's fields.

    >>> form_field("decisions[1].answers"), form_field("dataset.columns.id")
    ('step 2 (Decisions), Decision 2, Answers', 'step 1 (Data), Id column')
    >>> form_field("decisions.0.name")  # the schema's JSON path of the same field
    'step 2 (Decisions), Decision 1, Name'
    """
    key = re.sub(r"\.([0-9]+)", r"[\1]", key)
    if key in _FORM_FIELDS:
        return _FORM_FIELDS[key]
    found = re.fullmatch(r"decisions\[([0-9]+)\](?:\.([a-z_]+))?(.*)", key)
    if found is None:
        return "the form"
    where = f"step 2 (Decisions), Decision {int(found.group(1)) + 1}"
    name = found.group(2)
    return where if name is None else f"{where}, {_DECISION_FIELDS.get(name, name.replace('_', ' '))}"


def form_inputs(decisions: int) -> dict[str, str]:
    """The new-training form's inputs by the names its refusals give them (:func:`form_field`'s
    words; ``web.refused_input``), with ``decisions`` decisions.

    >>> form_inputs(2)["step 2 (Decisions), Decision 2, Answers"], form_inputs(1)["step 1 (Data), Id column"]
    ('decision-1-answers', 'col_id')
    """
    out = {form_field("dataset"): "dataset_file", form_field("dataset.path"): "dataset_file",
           form_field("dataset.columns.id"): "col_id", form_field("dataset.columns.text"): "col_text",
           form_field("dataset.columns.group"): "col_group",
           form_field("dataset.columns.review_label"): "col_review_label",
           form_field("options.keep_if_loses"): "keep_if_loses"}
    for i in range(decisions):
        for name in _DECISION_FIELDS:
            out[form_field(f"decisions[{i}].{name}")] = f"decision-{i}-{name}"
    return out


CONSOLE_WORDS = TrainingWords(
    read="follow it on this training's page",
    verdict="read its verdict on its result page (the Trainings page links it)",
    find="Check the address: the Trainings page lists this workspace's trainings",
    trained_on=TrainedOnWords(
        digest=f'the box "{TRAINED_ON_BOX}"', ids=f'the box "{TRAINED_ON_BOX}"',
        id_sha256=f'the box "{TRAINED_ON_BOX}"',
        some="reload the page and send the form again, or clear the box if your model was "
             "trained on only some of the training rows",
        rows="the training rows of the split this page shows",
    ),
    files="Choose the dataset in step 1 (Data): upload it, or pick one of your files",
    resend="correct them and upload the file again with Upload and judge",
    test_rows="upload the predictions of the split's test examples only (the split on this page lists "
              "them, at most 2,000 per decision), not every row of the dataset",
    keys=form_field,
    credits="Ask the operator to add credits to this workspace (this page shows its balance)",
)
"""The console's words for a training's refusals: its pages, its form's steps and fields, its
buttons; never the API's routes or JSON fields. The rules are the lifecycle's and the
pipeline's, the same for every door."""


def _trainings(request: Request) -> TrainingStore:
    """The trainings, their refusals said in the console's words."""
    return get_ctx(request).trainings.speaking(CONSOLE_WORDS)

Session = Annotated[ConsoleSession, Depends(require_session)]
Posted = Annotated[ConsoleSession, Depends(require_csrf)]
TrainingId = PathId
MAX_DECISIONS = 20

CREDIT_TEXT = {
    "awaiting_predictions": "spent (comes back if the model does not beat Jev)",
    "judging": "spent (comes back if the model does not beat Jev)",
    "expired": "came back (a deadline passed)",
    "cancelled": "came back (cancelled)",
    "beats": "stays spent",
    "kept": "stays spent (kept)",
    "refund": "came back",
    "failed": "came back",
}
KEPT_CREDIT_TEXT = "spent (no refund if the model does not beat Jev: it is kept; comes back if the training fails)"
"""The credit of a training not judged yet whose box "Keep the model even if it does not beat Jev"
is ticked: the box gives up the guarantee (the list said "comes back if the model does not beat
Jev" of it too)."""
def state_text(state: str) -> str:
    """A training's state in words.

    >>> state_text("awaiting_predictions"), state_text("judging")
    ('awaiting predictions', 'judging')
    """
    return state.replace("_", " ")


@dataclass(frozen=True)
class TrainingLine:
    """One row of the trainings list."""

    id: str
    state: str
    verdict: str | None
    settling_decision: str | None
    credit: str
    keep_if_loses: bool
    href: str


def training_line(request: Request, workspace: str, training_id: str) -> TrainingLine:
    """A training as the list shows it: state, verdict, settling decision, credit."""
    from typestrict_pipeline.api.routes.models import _verdict

    ctx = get_ctx(request)
    manifest = ctx.trainings.manifest(workspace, training_id)
    state, model = ctx.trainings.state(workspace, training_id)
    if model is None:
        credit = CREDIT_TEXT.get(state.value, "spent")
        if manifest.options.keep_if_loses and state.value in ("awaiting_predictions", "judging"):
            credit = KEPT_CREDIT_TEXT
        return TrainingLine(training_id, state.value, None, None, credit,
                            manifest.options.keep_if_loses, f"{PREFIX}/trainings/{training_id}")
    out = _verdict(ctx, model)
    return TrainingLine(training_id, state.value, out.verdict, out.settling_decision,
                        CREDIT_TEXT.get(out.verdict, "?"), out.keep_if_loses,
                        f"{PREFIX}/models/{training_id}")


def _newest_first(request: Request, ids: list[str]) -> list[str]:
    ctx = get_ctx(request)

    def when(tid: str) -> float:
        try:
            return ctx.trainings.folder(tid).stat().st_mtime
        except OSError:
            return 0.0

    return sorted(ids, key=lambda t: (-when(t), t))


@router.get("/trainings")
def trainings_page(request: Request, session: Session, page: str | None = None) -> Response:
    """The workspace's trainings, newest first, :data:`~typestrict_pipeline.console.paging.PER_PAGE`
    a page (``?page=N``): state, verdict, the decision that settled it, credit. Only the page's
    trainings are read."""
    ctx = get_ctx(request)
    ws = session.workspace_id
    ids = _newest_first(request, ctx.trainings.list_ids(ws))
    pager = Pager.at(requested(page), total=len(ids),
                     href=hrefs(request.url.path, request.query_params, "page", ("page",)))
    lines = []
    for tid in ids[pager.offset:pager.last]:
        try:
            lines.append(training_line(request, ws, tid))
        except TypeStrictError:  # removed or unreadable since it was listed: not shown
            continue
    return render(request, "trainings.html", {
        "lines": lines, "balance": CreditLedger(ctx.engine).balance(ws), "state_text": state_text,
        "pager": pager})


# --- the new-training form ---------------------------------------------------------------------


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _answers(text: str) -> list[str]:
    """Answers as typed: one per line or comma-separated.

    >>> _answers("yes, no"), _answers("fresh\\nrotten\\n")
    (['yes', 'no'], ['fresh', 'rotten'])
    """
    parts = text.splitlines() if "\n" in text else text.split(",")
    return [p.strip() for p in parts if p.strip()]


def form_values(form: FormData) -> dict[str, Any]:
    """The form's fields as the template shows them again after a refusal."""
    decisions = []
    for i in range(MAX_DECISIONS):
        if f"decision-{i}-name" not in form:
            continue
        decisions.append({k: _text(form, f"decision-{i}-{k}")
                          for k in ("name", "question", "answer_column", "answers", "options_column")})
    return {
        "dataset_name": _text(form, "dataset_name"),
        "col_id": _text(form, "col_id"), "col_text": _text(form, "col_text"),
        "col_group": _text(form, "col_group"), "col_review_label": _text(form, "col_review_label"),
        "decisions": decisions or [blank_decision()],
        "keep_if_loses": _text(form, "keep_if_loses") == KEEP_BOX_ON,
        "uploaded": "",
    }


KEEP_BOX_ON = "on"
"""What the form's box "Keep the model even if it does not beat Jev" sends when ticked (a
checkbox without a ``value`` sends ``on``; unticked, it sends nothing)."""


def keep_box(form: FormData) -> bool:
    """The keep box as the form sends it: ticked (``on``) or absent; anything else is refused,
    never read as unticked.

    >>> keep_box(FormData([("keep_if_loses", "on")])), keep_box(FormData())
    (True, False)
    >>> keep_box(FormData([("keep_if_loses", "yes")]))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: field 'keep_if_loses': expected the box "Keep the model even if it does not beat Jev" ticked ('on') or not sent, got 'yes'. Tick or clear the box on the form and submit it again.
    """
    return form_box(form, "keep_if_loses", lambda v: v == KEEP_BOX_ON,
                    f'the box "Keep the model even if it does not beat Jev" ticked ({KEEP_BOX_ON!r}) '
                    "or not sent", "tick or clear the box on the form and submit it again") is not None


def blank_decision() -> dict[str, str]:
    return {"name": "", "question": "", "answer_column": "", "answers": "", "options_column": ""}


def training_body(values: dict[str, Any], dataset: str) -> dict[str, Any]:
    """The ``POST /v1/trainings`` body the form describes (empty fields left out)."""
    columns = {"id": values["col_id"], "text": values["col_text"]}
    for key, field in (("group", "col_group"), ("review_label", "col_review_label")):
        if values[field]:
            columns[key] = values[field]
    decisions = []
    for d in values["decisions"]:
        item: dict[str, Any] = {"name": d["name"], "question": d["question"]}
        if d["answer_column"]:
            item["answer_column"] = d["answer_column"]
        if d["options_column"]:
            item["options_column"] = d["options_column"]
        if d["answers"]:
            item["answers"] = _answers(d["answers"])
        decisions.append(item)
    return {"dataset": {"path": dataset, "columns": columns}, "decisions": decisions,
            "options": {"keep_if_loses": bool(values["keep_if_loses"])}}


def _new_form(request: Request, session: ConsoleSession, values: dict[str, Any] | None = None,
              error: str | None = None, status: int = 200, *, focus_last: bool = False) -> Response:
    ctx = get_ctx(request)
    ws = session.workspace_id
    return render(request, "training_new.html", {
        "v": values or {"dataset_name": "", "col_id": "id", "col_text": "text", "col_group": "",
                        "col_review_label": "", "decisions": [blank_decision()],
                        "keep_if_loses": False, "uploaded": ""},
        "files": ctx.trainings.area(ws).listing(), "error": error,
        "refused": refused_input(error, form_inputs(len((values or {}).get("decisions") or [None]))),
        "balance": CreditLedger(ctx.engine).balance(ws), "max_decisions": MAX_DECISIONS,
        "focus_last": focus_last}, status=status)


@router.get("/trainings/new")
def new_training_page(request: Request, session: Session) -> Response:
    """The form: 1 Data, 2 Decisions, 3 Base model (with the keep box), then start."""
    return _new_form(request, session)


@router.get("/trainings/new/decision")
def decision_fieldset(request: Request, session: Session, i: int = 1) -> Response:
    """One more decision's fields (HTMX: "Add a decision"), its Name focused: the button that
    asked for them is replaced by them, and the focus would be lost with it."""
    i = max(1, min(i, MAX_DECISIONS - 1))
    return render(request, "_decision.html", {"i": i, "d": blank_decision(), "max_decisions": MAX_DECISIONS,
                                              "last": True, "focus": True})


def _base_name(upload: UploadFile) -> str:
    """The name of an uploaded file without the folders a browser may send."""
    return _base_name_of(upload.filename or "")


def _base_name_of(name: str) -> str:
    """A file name as a browser sent it, without its folders.

    >>> _base_name_of("C:\\\\data\\\\p.jsonl"), _base_name_of("a/b.jsonl")
    ('p.jsonl', 'b.jsonl')
    """
    return name.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]


def _one_file(form: FormData, field: str, what: str, fix: str, where: str) -> UploadFile | None:
    """The one file the form sent as ``field`` (a part with a file name: a browser sends an
    unnamed empty part for a file input left empty), if any.

    Raises:
        InputError: two files or more: which one was meant is ambiguous (the first was used and
            the others dropped unsaid, as a repeated text field was read as its last value).
    """
    files = [item for item in form.getlist(field) if isinstance(item, UploadFile) and item.filename]
    if len(files) > 1:
        names = ", ".join(repr(_base_name(item)[:60]) for item in files[:3])
        raise InputError(f"one {what}", f"{len(files)} files ({names}{', ...' if len(files) > 3 else ''})",
                         fix, file=where)
    return files[0] if files else None


def _dataset_file(form: FormData) -> UploadFile | None:
    """The dataset file the form sent (``dataset_file``), if any; two are refused."""
    return _one_file(form, "dataset_file", "dataset file", "choose one file in step 1", form_field("dataset"))


def _upload(form: FormData, staged: StagedFile | None) -> tuple[str, StagedFile] | None:
    """The uploaded dataset (its name, and its bytes ``staged`` from the form), not stored: the
    training moves it into the workspace's files (as ``PUT /v1/files/{name}`` does) only once it
    is made."""
    upload = _dataset_file(form)
    if upload is None or staged is None:
        return None
    return check_name(_base_name(upload), "dataset file name"), staged


async def _pieces(upload: UploadFile) -> AsyncIterator[bytes]:
    """The bytes of a form's file (Starlette's spooled copy), a piece at a time."""
    await upload.seek(0)
    while piece := await upload.read(UPLOAD_PIECE_BYTES):
        yield piece


async def _stage_dataset(request: Request, session: ConsoleSession, form: FormData) -> StagedFile | None:
    """The form's dataset file copied, a piece at a time, from Starlette's spooled file into the
    workspace's upload folder (:meth:`TrainingStore.staging`), as ``PUT /v1/files/{name}`` writes
    its body (:func:`stage_stream`): the server never holds the file whole (it read it into
    memory: a 200 MB CSV raised its peak RSS to 897 MB). Not in the workspace's files: the
    training moves it there once it is made; the caller discards it otherwise."""
    upload = _dataset_file(form)
    if upload is None:
        return None
    staging = await run_in_threadpool(_trainings(request).staging, session.workspace_id)
    with disk_room("store the training's files"):  # a full disk: 503, said on the form
        return await stage_stream(_pieces(upload), staging)


async def _read_files(form: FormData, field: str) -> list[tuple[str, bytes]]:
    """The files the form sent as ``field`` (name as the browser sent it, bytes), read on the
    event loop (an upload's bytes come from the request; a large one is read in the threadpool
    by Starlette); what is done with them is not."""
    return [(item.filename, await item.read()) for item in form.getlist(field)
            if isinstance(item, UploadFile) and item.filename]


@router.post("/trainings")
async def create_training(request: Request, session: Posted) -> Response:
    """Start a training: the same checks and charge as ``POST /v1/trainings``. The form is read
    here and its dataset file staged (:func:`_stage_dataset`, a piece at a time, each written in
    a worker thread); the work (the dataset read, checked and copied, the workspace's storage
    lock waited for, the charge) runs in the threadpool, so the server answers other requests
    meanwhile. The staged file is discarded unless the training moved it into the workspace's
    files."""
    form = await read_form(request)
    if ADD_DECISION in form:  # without script: the form comes back with one more decision, nothing made
        return await run_in_threadpool(_one_more_decision, request, session, form)
    return await once(request, session.workspace_id, form, lambda: _start_training(request, session, form))


ADD_DECISION = "add_decision"
"""The field of the new-training form's "Add a decision" button of a page without script (in a
``<noscript>``; with script, HTMX's button fetches one more decision's fields instead)."""


def _one_more_decision(request: Request, session: ConsoleSession, form: FormData) -> Response:
    """The new-training form sent back with what was typed and one more decision's fields, its
    Name focused: "Add a decision" on a page without script. Nothing is read, stored or charged;
    a chosen dataset file is named, to be chosen again."""
    values = form_values(form)
    if len(values["decisions"]) < MAX_DECISIONS:
        values["decisions"].append(blank_decision())
    upload = _dataset_file(form) if len(form.getlist("dataset_file")) == 1 else None
    if upload is not None:
        values["uploaded"] = _base_name(upload)
        values["again_why"] = "a page sent back to add a decision cannot keep the file you chose"
    return _new_form(request, session, values, focus_last=True)


async def _start_training(request: Request, session: ConsoleSession, form: FormData) -> Response:
    """:func:`create_training` for the form's first sending (:func:`~typestrict_pipeline.console.once.once`:
    a second sending of the same page's form goes to the training the first one started)."""
    try:
        staged = await _stage_dataset(request, session, form)
    except TypeStrictError as exc:
        return await run_in_threadpool(_refused, request, session, form_values(form), exc)
    try:
        return await run_in_threadpool(_create_training, request, session, form, staged)
    finally:
        if staged is not None:  # refused: nothing stored (made: moved already)
            await run_in_threadpool(staged.discard)


def _refused(request: Request, session: ConsoleSession, values: dict[str, Any], exc: TypeStrictError) -> Response:
    """The form again, with what was refused and its status."""
    from typestrict_pipeline.api.errors import status_for

    return _new_form(request, session, values, str(exc), status_for(exc)[0])


def _create_training(request: Request, session: ConsoleSession, form: FormData,
                     staged: StagedFile | None) -> Response:
    """:func:`create_training`'s blocking part (files, hashing, the storage lock, the store)."""
    values = form_values(form)
    try:
        keep_box(form)
        upload = _upload(form, staged)
        dataset = upload[0] if upload is not None else values["dataset_name"]
        if not dataset:
            raise InputError("a dataset: a file to upload, or one of the workspace's files",
                             "neither", "choose the dataset file in step 1", file=form_field("dataset"))
        if upload is not None:  # shown again on a refusal: a browser cannot keep a chosen file
            values["uploaded"] = upload[0]
        body = TrainingCreate.model_validate(training_body(values, dataset))
        req = TrainingRequest(
            dataset=body.dataset.model_dump(exclude_none=True),
            decisions=[d.model_dump(exclude_none=True) for d in body.decisions],
            options=body.options.model_dump(),
        )
        training_id = _trainings(request).create(session.workspace_id, req,
                                                 upload=None if upload is None else upload[1])
    except ValidationError as exc:
        return _new_form(request, session, values,
                         validation_message(exc.errors(), fix=FORM_FIX, field=form_field), 422)
    except TypeStrictError as exc:
        return _refused(request, session, values, exc)
    return redirect(f"{PREFIX}/trainings/{training_id}", request)


# --- one training: the split, the predictions ---------------------------------------------------


def _training_page(request: Request, session: ConsoleSession, training_id: str,
                   error: str | None = None, status: int = 200) -> Response:
    ctx = get_ctx(request)
    trainings = _trainings(request)
    ws = session.workspace_id
    view = trainings.view(ws, training_id)
    if view.model is not None:  # settled (or ended and settled as failed): the result page
        return redirect(f"{PREFIX}/models/{training_id}", request)
    manifest = trainings.manifest(ws, training_id)
    open_for_predictions = view.state.accepts_submission
    split = trainings.split(ws, training_id) if open_for_predictions else None
    life = view.status
    return render(request, "training.html", {
        "id": training_id, "state": view.state.value, "state_text": state_text(view.state.value),
        "progress": _judging_progress(request, training_id, view.state),
        "deadline": life.deadline_at if life is not None and not view.state.is_terminal else None,
        "reason": life.reason if life is not None else None, "can_cancel": open_for_predictions,
        "keep_if_loses": manifest.options.keep_if_loses,
        "decisions": [d.name for d in manifest.decisions],
        "split": split, "roles": list(split.decisions) if split else [],
        "example": _example_row(manifest), "error": error,
        "group": manifest.dataset.columns.group,
        "resampling": resampling_line(
            [(d.name, "example" if manifest.dataset.columns.group is None else "group", None)
             for d in manifest.decisions], manifest.dataset.columns.group),
        "grouping_warnings": [str(w.get("message"))
                              for w in (ctx.trainings.grouping(ws, training_id) or {}).get("warnings") or []],
    }, status=status)


def _example_row(manifest: Any) -> str:
    """One line of a predictions file for the training's first decision (the form's example)."""
    d = manifest.decisions[0]
    answers = list(d.answers) or ["option A", "option B"]
    share = round(1 / len(answers), 2)
    probs = {a: share for a in answers[:-1]}
    probs[answers[-1]] = round(1 - share * (len(answers) - 1), 2)
    return json.dumps({"id": "r17", "decision": d.name, "probabilities": probs}, ensure_ascii=False)


@router.get("/trainings/{training_id}")
def training_page(training_id: TrainingId, request: Request, session: Session) -> Response:
    """Before training: the split (what to train on, what is held out) and the upload form;
    then "judging" until the verdict, then the result page."""
    return _training_page(request, session, training_id)


@router.get("/trainings/{training_id}/state")
def training_state(training_id: TrainingId, request: Request, session: Session) -> Response:
    """The state line (HTMX polls it while judging; settled: go to the result page)."""
    view = _trainings(request).view(session.workspace_id, training_id)
    if view.model is not None or view.state is not TrainingState.JUDGING:
        return redirect(f"{PREFIX}/trainings/{training_id}", request)
    return render(request, "_training_state.html", {
        "id": training_id, "state": view.state.value, "state_text": state_text(view.state.value),
        "progress": _judging_progress(request, training_id, view.state)})


def _judging_progress(request: Request, training_id: str, state: TrainingState) -> Progress | None:
    """How far the verdict run of a judging training is (its latest report), else None."""
    if state is not TrainingState.JUDGING:
        return None
    return read_progress(get_ctx(request).settings.home, training_key(training_id))


@router.post("/trainings/{training_id}/cancel")
def cancel_training(training_id: TrainingId, request: Request, session: Posted) -> Response:
    """Cancel a training that awaits its predictions: its credit comes back
    (``POST /v1/trainings/{id}/cancel``)."""
    _trainings(request).cancel(session.workspace_id, training_id)
    return redirect(f"{PREFIX}/trainings/{training_id}", request)


def _trained_on_box(form: FormData) -> str | None:
    """The box "My model was trained on these training rows only": ticked, it sends the split's
    SHA-256 shown on the page (stated as ``trained_on_sha256``, which the submission checks
    against the split); unticked, nothing. Anything else is refused, naming the box.

    >>> _trained_on_box(FormData([("trained_on", "ab")]))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: field 'trained_on': expected the box "My model was trained on these training rows only" ticked (the split's SHA-256, 64 hexadecimal characters) or not sent, got 'ab'. Reload the page, tick or clear the box and send the form again.
    """
    return form_box(form, "trained_on", lambda v: re.fullmatch(r"[0-9a-f]{64}", v) is not None,
                    f'the box "{TRAINED_ON_BOX}" ticked (the split\'s SHA-256, 64 hexadecimal '
                    "characters) or not sent",
                    "reload the page, tick or clear the box and send the form again")


PREDICTIONS_FIELD = 'Upload the predictions, "Predictions file (JSON Lines)"'
"""The predictions form's file field, as its refusals name it."""


@router.post("/trainings/{training_id}/predictions")
async def post_predictions(training_id: TrainingId, request: Request, session: Posted) -> Response:
    """The model's files (optional) and its predictions file: the same reader and checks as
    ``POST /v1/trainings/{id}/predictions``; the verdict follows. The form is read here; the
    work (the predictions checked against the split, the files written, the workspace's storage
    lock waited for) runs in the threadpool, so the server answers other requests meanwhile."""
    form = await read_form(request)
    return await once(request, session.workspace_id, form,
                      lambda: _send_predictions(training_id, request, session, form))


async def _send_predictions(training_id: str, request: Request, session: ConsoleSession,
                            form: FormData) -> Response:
    """:func:`post_predictions` for the form's first sending (a second one goes to the training's
    page, where the first one's predictions are being judged)."""
    try:
        predictions = _one_file(form, "predictions", "predictions file", "choose the one file your model wrote",
                                PREDICTIONS_FIELD)
    except InputError as exc:
        return await run_in_threadpool(_refused_predictions, training_id, request, session, exc)
    model_files = await _read_files(form, "model_files")
    return await run_in_threadpool(_post_predictions, training_id, request, session, form,
                                   predictions, model_files)


def _refused_predictions(training_id: str, request: Request, session: ConsoleSession,
                         exc: TypeStrictError) -> Response:
    """The training's page with the predictions form's refusal (nothing was read or stored)."""
    from typestrict_pipeline.api.errors import status_for

    return _training_page(request, session, training_id, str(exc), status_for(exc)[0])


def _read_predictions(upload: UploadFile, source: str, fix: str) -> bytes:
    """The predictions file's bytes, read a chunk at a time and no further than the row past
    :data:`~typestrict_pipeline.refund.manifest.MAX_PREDICTION_ROWS` (the API's bound on its JSON
    body's rows, the same number): a file of every row of a large dataset is refused having read
    200,001 rows of it, not the whole file."""
    from typestrict_pipeline.api.trainings import READ_CHUNK
    from typestrict_pipeline.refund.predictions import bounded_rows

    upload.file.seek(0)
    return b"".join(bounded_rows(iter(lambda: upload.file.read(READ_CHUNK), b""), source=source, fix=fix))


def _post_predictions(training_id: str, request: Request, session: ConsoleSession, form: FormData,
                      predictions: UploadFile | None, model_files: list[tuple[str, bytes]]) -> Response:
    """:func:`post_predictions`'s blocking part (the file read up to the row bound, the split
    read, files written, the storage lock)."""
    ws = session.workspace_id
    try:
        if predictions is None:
            raise InputError("a predictions file (JSON Lines, one row per example and decision)",
                             "no file", "choose the file your model wrote", file=PREDICTIONS_FIELD)
        name = predictions.filename or ""
        data = _read_predictions(predictions, f"your file {_base_name_of(name)!r}",
                                 _trainings(request).past_row_bound(training_id))
        trained_on = _trained_on_box(form)
        _trainings(request).submit(ws, training_id, data, trained_on,
                                   model_files=[(_base_name_of(n), d) for n, d in model_files],
                                   source=f"your file {_base_name_of(name)!r}")
    except TypeStrictError as exc:
        from typestrict_pipeline.api.errors import status_for

        status = status_for(exc)[0]
        if status == 404:
            raise
        return _training_page(request, session, training_id, str(exc), status)
    return redirect(f"{PREFIX}/trainings/{training_id}", request)
