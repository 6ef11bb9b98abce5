"""A creating form sent twice does its work once.

A person double-clicks **Start the training (1 credit)**, or clicks it again because the page
seems stuck: the browser sends the form two or three times. Each sending started a training and
took a credit (three clicks 300 ms apart on a slow connection: three trainings, three credits);
each sending of **Run the backtest** launched a backtest that spends like any run.

So every form that creates or hands over something (**New training**, **Upload and judge**,
**Run the backtest**, **Create the study**, **Save the schedule**) carries a one-time id
(``form_id``, a hidden field, new on every page shown). The id is the form's idempotency key,
claimed by the API's one rule (:mod:`typestrict_pipeline.api.idempotency`, table
``api_idempotency``: one row per workspace and key, the form's address as its request): the first
sending claims it, does its work, and keeps where it led (the new training's page, the
backtest's run card...) as its answer. Another sending of the same id does nothing and goes
where the first one led; while the first is still working, it waits for it (at most
:data:`WAIT_S`). A refused sending gives the id back, so sending the corrected form (or the same
form again) checks it again. A claim whose process died is taken over after the rule's
``CLAIM_TIMEOUT``, and ids are forgotten after its ``KEEP_FOR``.

A form sent without an id (an older page, a script) is worked as before: the id is the page's
protection of its person; the API's clients send ``Idempotency-Key`` when they retry.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Awaitable, Callable

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

FORM_ID = "form_id"
"""The hidden field of a creating form that holds its one-time id."""
WAIT_S = 120.0
"""How long a second sending waits for the first one's work (a large dataset is copied and
hashed) before it is told to look for the result."""
POLL_S = 0.25
_ID = re.compile(r"[A-Za-z0-9_-]{20,64}")


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
    from typestrict_pipeline.api import idempotency
    from typestrict_pipeline.api.errors import ApiError
    from typestrict_pipeline.console.web import redirect

    form_id = form.get(FORM_ID)
    if not is_form_id(form_id):
        return await work()
    assert isinstance(form_id, str)
    engine = request.app.state.ctx.engine
    path = request.url.path[:200]
    digest = idempotency.fingerprint("POST", path, None)  # the page's form: its id is the request
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            found = await run_in_threadpool(idempotency.claim, engine, workspace, form_id, "POST", path, digest)
            break
        except ApiError as exc:
            if exc.code != "idempotency_key_in_use":
                raise
            if time.monotonic() >= deadline:
                raise ApiError(409, "conflict",
                               "expected this form sent once, got it sent again while the first sending is "
                               "still being worked on. Wait a minute, then look for what it made on the "
                               "Trainings or Backtests page before sending it again") from None
            await asyncio.sleep(POLL_S)
    if isinstance(found, idempotency.Stored):
        return redirect(found.headers.get("location", request.url.path), request)
    location: str | None = None
    try:
        response = await work()
        location = led_to(response)
    finally:
        with anyio.CancelScope(shield=True):  # a refusal gives the id back; a success keeps where it led
            if location is None:
                await idempotency.settle(idempotency.release, engine, found)
            else:
                await idempotency.settle(idempotency.complete, engine, found, 303, b"", {"location": location})
    return response


__all__ = ["FORM_ID", "WAIT_S", "is_form_id", "led_to", "new_form_id", "once"]
