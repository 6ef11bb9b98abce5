"""Files in and out: atomic writes and JSON Lines reading with located errors.

Every file this project writes goes through :func:`write_atomic`, so a reader never sees a half
written file and a crash leaves the previous version in place. Every JSON Lines file it reads goes
through :func:`iter_jsonl_objects`, so a bad line is reported with its file and row in one shape.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typestrict_pipeline.errors import InputError


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, fsync, rename.

    Missing parent folders are created. The file gets ``mode`` (readable by default, not
    ``mkstemp``'s 0600).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "sub" / "a.txt"
    >>> write_atomic(p, b"hello").read_bytes()
    b'hello'
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def iter_jsonl_objects(
    path: str | os.PathLike[str], error: type[InputError] = InputError
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row, object)`` for each non-blank line of a JSON Lines file (rows count from 1).

    Raises ``error`` (an :class:`InputError` subclass) naming the file and row for an unreadable
    file, a line that is not JSON, a line that is not a JSON object, or bytes that are not UTF-8.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
    >>> _ = p.write_text('{"a": 1}\\n\\n[2]\\n')
    >>> it = iter_jsonl_objects(p)
    >>> next(it)
    (1, {'a': 1})
    >>> next(it)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: ...x.jsonl, row 2: expected a JSON object, got list. Write each row as {...}.
    """
    file = str(path)
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise error("a readable file", type(exc).__name__, "check the file", file=file) from exc
    with handle:
        row = 0
        try:
            for line in handle:
                if not line.strip():
                    continue
                row += 1
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise error(
                        "one JSON object per line",
                        f"invalid JSON ({exc.msg})",
                        "fix that line",
                        file=file,
                        row=row,
                    ) from exc
                if not isinstance(value, dict):
                    raise error(
                        "a JSON object",
                        type(value).__name__,
                        "write each row as {...}",
                        file=file,
                        row=row,
                    )
                yield row, value
        except UnicodeDecodeError as exc:
            raise error(
                "a UTF-8 encoded file",
                f"undecodable bytes after row {row}",
                "save the file as UTF-8",
                file=file,
            ) from exc
