"""The result page of a model, in the console: the verdict first, in one plain sentence that
says why the credit came back or stayed spent, then the decision that settled it, every
decision's metrics beside Jev's, the pictures, the audit and the verifier, and the files.

Every number comes from the stored audit (the bytes ``GET /v1/models/{id}/audit`` serves), read
with the API's own code; the sentence is :func:`~typestrict_pipeline.refund.explain.verdict_sentence_from_audit`,
the one the CLI and the Dagster UI show. The download links are the API's own routes, which
accept the session cookie for reads.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from typestrict_pipeline.api.deps import get_ctx
from typestrict_pipeline.api.edge import PathId
from typestrict_pipeline.api.page import decision_rows
from typestrict_pipeline.api.pictures import result_pictures
from typestrict_pipeline.console.sessions import ConsoleSession
from typestrict_pipeline.console.web import PREFIX, ConsoleRoute, render, require_session
from typestrict_pipeline.credits import ModelState
from typestrict_pipeline.credits.models import ModelInfo
from typestrict_pipeline.errors import TypeStrictError
from typestrict_pipeline.lifecycle.trainings import TrainingState
from typestrict_pipeline.refund.explain import (
    decision_reason,
    facts_from_audit,
    unjudged_sentence,
    verdict_sentence_from_audit,
)
from typestrict_pipeline.refund.grouping import resampling_lines_from_audit
from typestrict_pipeline.verify_audit import needs_large

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

Session = Annotated[ConsoleSession, Depends(require_session)]
ModelId = PathId


def _files(info: ModelInfo) -> list[tuple[str, int]]:
    """The model's files while retained (what ``GET /v1/models/{id}/files`` lists)."""
    from typestrict_pipeline.api.routes.models import _retained

    root = _retained(info)
    if not root.is_dir():
        return []
    return sorted((p.relative_to(root).as_posix(), p.stat().st_size)
                  for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _decisions(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for d in doc.get("decisions", []):
        report = d.get("report", {})
        out.append({
            "name": str(d.get("name")), "beats": bool(report.get("beats")), "n": report.get("n"),
            "reason": decision_reason(facts_from_audit(d)), "rows": decision_rows(d),
            "gain": report.get("gain"), "q05": report.get("bootstrap", {}).get("q05"),
            "resamples": report.get("bootstrap", {}).get("resamples"),
            "n_gain_le_0": report.get("bootstrap", {}).get("n_gain_le_0"),
        })
    return out


@router.get("/models/{model_id}")
def result_page(model_id: ModelId, request: Request, session: Session) -> Response:
    """The result page of a settled training."""
    from typestrict_pipeline.api.routes.models import _audit, _files_note, training_grouping

    ctx = get_ctx(request)
    info = ctx.trainings.model(session.workspace_id, model_id)
    audit = _audit(ctx, info)
    sentence = None
    if audit is None:  # never judged (cancelled, expired) or failed before an audit: the training says why
        try:
            view = ctx.trainings.view(session.workspace_id, model_id)
            state, reason = view.state, view.reason
        except TypeStrictError:  # a model with no training record left: no reason to give
            state, reason = None, None
        unjudged = state in (TrainingState.CANCELLED, TrainingState.EXPIRED)
        if unjudged:
            sentence = unjudged_sentence(reason)
        audit = {"decisions": [], "overall": {"verdict": info.verdict.value,
                                              "failure_reason": None if unjudged else reason}}
    doc = audit
    overall = doc.get("overall", {})
    group, scan = training_grouping(ctx, info)
    decisions = _decisions(doc)
    settling = overall.get("settling_decision")
    retained = info.delivered and info.state is not ModelState.EXPIRED
    pictures = [{"title": p.title, "src": "data:image/png;base64," + base64.b64encode(p.png).decode("ascii")}
                for p in result_pictures(doc)]
    return render(request, "result.html", {
        "id": info.model_id, "verdict": info.verdict.value, "refunds": info.verdict.refunds_credit,
        "sentence": sentence or verdict_sentence_from_audit(doc),
        "resampling": resampling_lines_from_audit(doc, group),
        "grouping_warnings": [str(w.get("message")) for w in (scan or {}).get("warnings") or []],
        "overall": overall, "settling": settling,
        "settling_decision": next((d for d in decisions if d["name"] == settling), None),
        "decisions": decisions, "pictures": pictures,
        "files_note": _files_note(info), "files": _files(info) if retained else [],
        "retained": retained, "expired": info.state is ModelState.EXPIRED,
        "expires_at": info.expires_at, "delivered": info.delivered, "audit_sha256": info.audit_sha256,
        "verify_large": needs_large(doc),
    })
