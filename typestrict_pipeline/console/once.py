"""A creating form sent twice does its work once.

A person double-clicks **Start the training (1 credit)**, or clicks it again because the page
seems stuck: the browser sends the form two or three times. Each sending started a training and
took a credit (three clicks 300 ms apart on a slow connection: three trainings, three credits);
each sending of **Run the backtest** launched a backtest that spends like any run.

So every form that creates or hands over something (**New training**, **Upload and judge**,
**Run the backtest**, **Create the study**, **Save the schedule**) carries a one-time id
(``form_id``, a hidden field, new on every page shown). The first sending claims it in the
store (table ``console_submissions``, one row per workspace and id), does its work, and keeps
where it led (the new training's page, the backtest's run card...). Another sending of the same
id does nothing and goes where the first one led; while the first is still working, it waits for
it (at most :data:`WAIT_S`). A refused sending leaves its id free, so sending the corrected form
(or the same form again) checks it again. The rows are forgotten after :data:`KEEP`.

A form sent without an id (an older page, a script) is worked as before: the id is the page's
protection of its person, not a rule of the API (whose clients retry as they decide).

Schema: Alembic branch ``console`` (``console_0002_submissions``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from enum import Enum

from sqlalchemy import Engine, Index, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from typestrict_pipeline.store import Base, UTCDateTime, session_scope, utcnow

FORM_ID = "form_id"
"""The hidden field of a creating form that holds its one-time id."""
KEEP = dt.timedelta(days=1)
"""How long a sending's id is remembered (a page left open longer sends as new)."""
WAIT_S = 120.0
"""How long a second sending waits for the first one's work (a large dataset is copied and
hashed) before it is told to look for the result."""
POLL_S = 0.25
_ID = re.compile(r"[A-Za-z0-9_-]{20,64}")


class ConsoleSubmissionRow(Base):
    """One sending of a creating form: where it led (None while it works)."""

    __tablename__ = "console_submissions"
    __table_args__ = (Index("ix_console_submissions_created_at", "created_at"),)

    workspace_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    form_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    location: Mapped[str | None] = mapped_column(String(1000), nullable=True)


class Claim(Enum):
    """What :func:`claim` found."""

    MINE = "mine"  # this sending does the work
    WORKING = "working"  # another sending of the same form is doing it


def new_form_id() -> str:
    """A new one-time id for a form as a page shows it (32 URL-safe characters, 192 bits).

    >>> a, b = new_form_id(), new_form_id()
    >>> len(a), a == b, is_form_id(a)
    (32, False, True)
    """
    return secrets.token_urlsafe(24)


def is_form_id(value: object) -> bool:
    """Whether ``value`` is a form id as :func:`new_form_id` makes them.

    >>> is_form_id("x" * 32), is_form_id("short"), is_form_id("a b" * 10), is_form_id(None)
    (True, False, False, False)
    """
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def claim(engine: Engine, workspace: str, form_id: str, *, now: dt.datetime | None = None) -> Claim | str:
    """Claim ``form_id`` for this sending: :attr:`Claim.MINE`, else where the first sending led
    (its page), else :attr:`Claim.WORKING`. Ids older than :data:`KEEP` are forgotten on the way."""
    at = now or utcnow()
    with session_scope(engine) as s:
        s.execute(delete(ConsoleSubmissionRow).where(ConsoleSubmissionRow.created_at <= at - KEEP))
    try:
        with session_scope(engine) as s:
            s.add(ConsoleSubmissionRow(workspace_id=workspace, form_id=form_id, created_at=at, location=None))
        return Claim.MINE
    except IntegrityError:
        pass
    with session_scope(engine) as s:
        location = s.execute(select(ConsoleSubmissionRow.location).where(
            ConsoleSubmissionRow.workspace_id == workspace, ConsoleSubmissionRow.form_id == form_id)).first()
    if location is None:  # released meanwhile (the first sending was refused): claim it again
        return claim(engine, workspace, form_id, now=at)
    return Claim.WORKING if location[0] is None else location[0]


def settle(engine: Engine, workspace: str, form_id: str, location: str | None) -> None:
    """The claimed sending ended: it led to ``location`` (kept), or was refused (None: the id is
    free again)."""
    where = (ConsoleSubmissionRow.workspace_id == workspace, ConsoleSubmissionRow.form_id == form_id)
    with session_scope(engine) as s:
        if location is None:
            s.execute(delete(ConsoleSubmissionRow).where(*where))
        else:
            row = s.execute(select(ConsoleSubmissionRow).where(*where)).scalar_one_or_none()
            if row is not None:
                row.location = location[:1000]


def led_to(response: Response) -> str | None:
    """Where a form's answer leads when its work was done (a 303, or HTMX's ``HX-Redirect``);
    None for a refusal (the form again, with why)."""
    if response.status_code == 303:
        return response.headers.get("location")
    if response.status_code == 204:
        return response.headers.get("hx-redirect")
    return None


async def once(request: Request, workspace: str, form: FormData,
               work: Callable[[], Awaitable[Response]]) -> Response:
    """``work()`` for the first sending of the form's :data:`FORM_ID`; for another, the way to
    where the first led (waiting for it while it works). A form without an id is worked."""
    from typestrict_pipeline.api.errors import ApiError
    from typestrict_pipeline.console.web import redirect

    form_id = form.get(FORM_ID)
    if not is_form_id(form_id):
        return await work()
    assert isinstance(form_id, str)
    engine = request.app.state.ctx.engine
    deadline = time.monotonic() + WAIT_S
    while (found := await run_in_threadpool(claim, engine, workspace, form_id)) is Claim.WORKING:
        if time.monotonic() >= deadline:
            raise ApiError(409, "conflict",
                           "expected this form sent once, got it sent again while the first sending is "
                           "still being worked on. Wait a minute, then look for what it made on the "
                           "Trainings or Backtests page before sending it again")
        await asyncio.sleep(POLL_S)
    if isinstance(found, str):
        return redirect(found, request)
    location: str | None = None
    try:
        response = await work()
        location = led_to(response)
    finally:
        await run_in_threadpool(settle, engine, workspace, form_id, location)
    return response


__all__ = ["FORM_ID", "KEEP", "Claim", "ConsoleSubmissionRow", "claim", "is_form_id", "led_to",
           "new_form_id", "once", "settle"]
