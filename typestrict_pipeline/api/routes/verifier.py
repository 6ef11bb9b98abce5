"""``GET /verify_audit.py``: the verifier itself, the file customers run on their audits."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.api.conditional import PUBLIC, if_none_match, serve_file

router = APIRouter(tags=["verifier"])


@router.head("/verify_audit.py", include_in_schema=False)
@router.get("/verify_audit.py", response_class=Response,
            responses={200: {"content": {"text/x-python": {}}},
                       304: {"description": "Not modified: the verifier named by If-None-Match"}})
def get_verifier(request: Request) -> Response:
    """The standalone verifier (Python standard library only): `python3 verify_audit.py audit.json`.
    Streamed from disk; its ETag is the quoted SHA-256 of its bytes (304 when unchanged);
    `HEAD` answers the same headers with no body."""
    return serve_file(Path(verify_audit.__file__), if_none_match=if_none_match(request.headers),
                      media_type="text/x-python; charset=utf-8", cache_control=PUBLIC,
                      filename="verify_audit.py")
