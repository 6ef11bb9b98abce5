"""Which Jev the API server's trainings are measured against, settled once when the server starts.

Customers never choose Jev: the operator does, once, for the whole server. In order:

1. ``--jev-source`` (a manifest ``predictions.jev`` object, as JSON or ``@FILE``);
2. ``TYPESTRICT_API_JEV_SOURCE`` (the same, from the environment);
3. on the demo's home (``make demo`` left ``demo.json`` there), the demo's Jev stand-in: the
   hand-written lexicon behind the stand-in OpenAI-compatible server, started with the API
   server and stopped with it, and named on the server's first line;
4. otherwise the server does not start: the message names ``--jev-source``.

So a training can never be refused for want of a Jev once the server runs.

>>> parse_jev_source('{"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}', what="--jev-source")
{'kind': 'openai', 'base_url': 'http://127.0.0.1:9/v1', 'model': 'jev'}
>>> parse_jev_source('{"kind": "file", "path": "/x/jev.jsonl"}', what="--jev-source")
Traceback (most recent call last):
...
typestrict_pipeline.errors.InputError: expected --jev-source's recorded Jev predictions as a file on this server, got '/x/jev.jsonl', which is not a file. Check the path (it is read when each training is created).
>>> is_demo_home(Path("/nonexistent"))
False
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.files import loads_strict, read_json_file

DEMO_MARKER = "demo.json"
"""The file ``make demo`` writes into its home when it finishes (``demo/home.py``)."""
JEV_SOURCE_ENV = "TYPESTRICT_API_JEV_SOURCE"
JEV_SOURCE_EXAMPLE = ('\'{"kind": "openai", "base_url": "https://jev.example.com/v1", '
                      '"model": "jev-2026-10", "api_key_env": "TYPESTRICT_JEV_API_KEY"}\'')


@dataclass(frozen=True)
class JevChoice:
    """The server's Jev: the manifest ``predictions.jev`` object and the line that says which.

    Attributes:
        source: the object written into every training's manifest.
        line: the server's first line when this choice deserves one (the demo's stand-in), else
            None.
    """

    source: Mapping[str, Any]
    line: str | None = None


def parse_jev_source(text: str, *, what: str) -> dict[str, Any]:
    """A ``predictions.jev`` object from JSON text or ``@FILE``; refused with the product's message.

    Raises:
        InputError: not readable, not strict JSON, or not a JSON object.
    """
    raw = text
    if raw.startswith("@"):  # read by the rule of every JSON file: a FIFO, a device or a huge file is refused
        value = read_json_file(raw[1:], what=f"a readable JSON file after '@' ({what})")
    else:
        try:
            value = loads_strict(raw, file=what)
        except InputError:
            value = None
    if not isinstance(value, dict):
        raise InputError(
            f"{what} as a JSON object (a manifest predictions.jev, see docs/manifest.md)",
            repr(raw[:80]), f"pass e.g. {JEV_SOURCE_EXAMPLE}",
        )
    if value.get("kind") == "file":  # recorded predictions: there now, or every training would fail
        path = Path(str(value.get("path") or ""))
        if not path.is_file():
            raise InputError(f"{what}'s recorded Jev predictions as a file on this server",
                             f"{str(path)[:200]!r}, which is not a file",
                             "check the path (it is read when each training is created)")
        value = {**value, "path": str(path.resolve())}
    return value


def is_demo_home(home: Path) -> bool:
    """Whether ``home`` is a home ``make demo`` finished writing (its ``demo.json`` is there)."""
    return (home / DEMO_MARKER).is_file()


def missing_jev_error(home: Path) -> InputError:
    """The refusal of a server with no Jev: names the flag, the variable and the demo's way."""
    return InputError(
        "Jev's source for the trainings this server measures (--jev-source, or "
        f"{JEV_SOURCE_ENV} in the environment)",
        f"none, and {home} is not the demo's home (no {DEMO_MARKER})",
        f"start it with --jev-source {JEV_SOURCE_EXAMPLE} (a manifest predictions.jev object, "
        "docs/api.md), or run `make demo` first and serve its home, which has a Jev stand-in",
    )


@contextlib.contextmanager
def choose_jev(home: Path, given: str | None, environ: Mapping[str, str]) -> Iterator[JevChoice]:
    """The server's Jev for as long as the block runs (see the module's docstring for the order).

    On the demo's home without a source, the demo's stand-in server runs until the block ends.

    Raises:
        InputError: a source that is not a JSON object, or none at all off the demo's home.
    """
    if given is not None:
        yield JevChoice(parse_jev_source(given, what="--jev-source"))
        return
    if environ.get(JEV_SOURCE_ENV):
        yield JevChoice(parse_jev_source(environ[JEV_SOURCE_ENV], what=JEV_SOURCE_ENV))
        return
    if not is_demo_home(home):
        raise missing_jev_error(home)
    from typestrict_pipeline.demo_data.lexicon import (
        JEV_STANDIN_LABEL,
        JEV_STANDIN_MODEL,
        jev_standin_server,
    )

    with jev_standin_server() as server:
        line = (f"typestrict api: Jev is the demo's stand-in ({JEV_STANDIN_LABEL}: a hand-written "
                f"sentiment lexicon, not a real model) at {server.base_url}, because {home} is the "
                "demo's home and no --jev-source was given; it answers the demo's answers (fresh, "
                "rotten, plot, review) while this server runs")
        yield JevChoice({"kind": "openai", "base_url": server.base_url, "model": JEV_STANDIN_MODEL,
                         "max_attempts": 2}, line)


__all__ = ["DEMO_MARKER", "JEV_SOURCE_ENV", "JevChoice", "choose_jev", "is_demo_home",
           "missing_jev_error", "parse_jev_source"]
