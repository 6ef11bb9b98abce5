"""``GET /verify_audit.py``: the verifier itself, the file customers run on their audits."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

import typestrict_pipeline.verify_audit as verify_audit

router = APIRouter(tags=["verifier"])


@router.get("/verify_audit.py", response_class=Response,
            responses={200: {"content": {"text/x-python": {}}}})
def get_verifier() -> Response:
    """The standalone verifier (Python standard library only): `python3 verify_audit.py audit.json`."""
    data = Path(verify_audit.__file__).read_bytes()
    return Response(data, media_type="text/x-python; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="verify_audit.py"'})
