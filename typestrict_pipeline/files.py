"""Files in and out: atomic writes and JSON Lines reading with located errors.

Every file this project writes goes through :func:`write_atomic`, so a reader never sees a half
written file and a crash leaves the previous version in place. Every JSON Lines file it reads goes
through :func:`iter_jsonl_objects`, so a bad line is reported with its file and row in one shape.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from typestrict_pipeline.errors import InputError


def nul_refusal(head: bytes, nul: int) -> tuple[str, str]:
    """What a text file whose first bytes ``head`` hold a NUL byte at ``nul`` got, and what to
    do: a UTF-16 file (a spreadsheet's "Unicode text": its byte order mark, or every other byte
    NUL) is said to be one, to be saved as UTF-8; anything else may be a binary or sparse file.

    >>> nul_refusal("id,text".encode("utf-16"), 3)[0]
    'a UTF-16 file (NUL bytes between its letters)'
    >>> nul_refusal(b"ab" + bytes(1), 2)
    ('a NUL byte on line 1 of the file (a binary or sparse file?)', 'check that this is the right file')
    >>> nul_refusal(bytes(4096), 0)[0]  # zeros: a sparse file, not UTF-16
    'a NUL byte on line 1 of the file (a binary or sparse file?)'
    """
    bom = head[:2] in (b"\xff\xfe", b"\xfe\xff")
    pairs = head[:64]
    odd, even = pairs[1::2], pairs[0::2]
    # UTF-16 text of Latin letters: every other byte NUL and none of the others (a file of zeros is not)
    halves = len(pairs) >= 4 and ((not odd.strip(b"\x00") and 0 not in even)
                                  or (not even.strip(b"\x00") and 0 not in odd))
    if bom or halves:
        return "a UTF-16 file (NUL bytes between its letters)", "save the file as UTF-8"
    line = head.count(b"\n", 0, nul) + 1
    return f"a NUL byte on line {line} of the file (a binary or sparse file?)", "check that this is the right file"


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists but is not a regular file (followed through symlinks).

    ``None`` for a regular file or a missing path; otherwise words for the message ("a
    directory", "a FIFO (named pipe)", "a character device", a symlink loop...). Readers ask this
    before they open a path: opening a FIFO blocks forever, a device reads without end.

    >>> special_kind("/dev/null"), special_kind("/no/such/file"), special_kind("/")
    ('a character device', None, 'a directory')
    """
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink loop, a path through a file, no permission
        return f"a path that cannot be followed ({exc.strerror or type(exc).__name__})"
    except ValueError:  # a NUL byte
        return "a path with a NUL byte"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


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


class StagedFile:
    """A file written a piece at a time under a temporary name in ``folder``, then moved to its
    place atomically (:meth:`commit`: fsync, mode, rename) or removed (:meth:`discard`, also when
    the ``with`` block ends without a commit). An upload is written so: the server holds one
    piece at a time, never the file (``write_atomic`` needs the whole file as bytes). ``folder``
    and the final place must be on one file system (one ``os.replace``).

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with StagedFile(root / ".staging") as staged:
    ...     staged.write(b"hel"); staged.write(b"lo")
    ...     staged.commit(root / "a.txt").read_bytes(), staged.size
    (b'hello', 5)
    >>> list((root / ".staging").iterdir())
    []
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".staged.", suffix=".tmp", dir=folder)
        self.path = Path(name)
        self.size = 0
        self._handle: IO[bytes] | None = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        if self._handle is None:
            raise ValueError("the staged file was committed or discarded")
        self._handle.write(data)
        self.size += len(data)

    def flushed(self) -> Path:
        """The staged file's path, every byte written so far flushed to it: to read or copy it
        before the :meth:`commit`."""
        if self._handle is None:
            raise ValueError("the staged file was committed or discarded")
        self._handle.flush()
        return self.path

    def commit(self, target: Path, *, mode: int = 0o644) -> Path:
        """Move the written bytes to ``target`` (replacing a file of that name), durably."""
        if self._handle is None:
            raise ValueError("the staged file was committed or discarded")
        handle, self._handle = self._handle, None
        with handle:
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(self.path, mode)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path, target)
        return target

    def discard(self) -> None:
        """Remove what was written (nothing after a commit)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.discard()


MAX_JSONL_LINE_BYTES = 64 * 1024 * 1024
"""Longest line of a JSON Lines file read, in bytes (64 MiB), its line end not counted: far above
any real row (a predictions row with 10,000 answers' probabilities is about 300 kB; a JSON Lines
dataset's row may hold a 20 MB text, as a CSV cell may, and lines of a CSV file are bounded alike,
at 64 Mi characters). A longer line is refused once its first 64 MiB and one byte are read, never
held whole: ``TYPESTRICT_MAX_JSONL_LINE_BYTES`` overrides it."""


MAX_ENV_BOUND = 2**50 - 1
"""The largest value a ``TYPESTRICT_MAX_*`` (or quota) setting may hold."""


def bound_from_env(name: str, default: int) -> int:
    """A positive bound from the environment variable ``name`` (ASCII digits, 1 to
    :data:`MAX_ENV_BOUND`), else ``default`` when it is unset or empty. A value set to anything
    else (``2G``, ``-1``, ``0``, ``1e6``) is refused, never read as the default: an operator who
    raised a limit must not get the old one without a word. A server reads every such setting
    when it starts (``api.app.create_app``), so a wrong one stops it there, not a customer's
    request; a command exits 2 with the message.

    >>> bound_from_env("TYPESTRICT_NO_SUCH_BOUND", 7)
    7
    >>> os.environ["TYPESTRICT_DOCTEST_BOUND"] = "2G"
    >>> bound_from_env("TYPESTRICT_DOCTEST_BOUND", 7)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected TYPESTRICT_DOCTEST_BOUND a whole number from 1 to 1,125,899,906,842,623 in ASCII digits, got '2G'. Set it to a whole number such as 7 (the default), or unset it for the default.
    >>> del os.environ["TYPESTRICT_DOCTEST_BOUND"]
    """
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    if raw.isascii() and raw.isdigit() and 0 < int(raw) <= MAX_ENV_BOUND:
        return int(raw)
    raise InputError(f"{name} a whole number from 1 to {MAX_ENV_BOUND:,} in ASCII digits", repr(raw[:40]),
                     f"set it to a whole number such as {default} (the default), or unset it for the default")


def max_jsonl_line_bytes() -> int:
    """The bound on a JSON Lines line (:data:`MAX_JSONL_LINE_BYTES`, or the environment's)."""
    return bound_from_env("TYPESTRICT_MAX_JSONL_LINE_BYTES", MAX_JSONL_LINE_BYTES)


_LINE_CHUNK = 1024 * 1024
"""Bytes a JSON Lines line is read in at a time (a real row is read in one)."""


def _read_line(handle: IO[bytes], bound: int) -> bytes | None:
    """The next line with its end (``b""`` at the end of the file), or None for a line longer
    than ``bound`` bytes (its end not counted), known after its first ``bound + 1`` bytes. Read in
    chunks of :data:`_LINE_CHUNK` bytes, joined only for a line within the bound: a refused line
    costs the bound once, whatever its length."""
    parts: list[bytes] = []
    size = 0
    while size <= bound:
        part = handle.readline(min(_LINE_CHUNK, bound + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
        if part.endswith(b"\n"):
            break
    if size - (1 if parts and parts[-1].endswith(b"\n") else 0) > bound:
        return None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def iter_jsonl_objects(
    path: str | os.PathLike[str],
    error: type[InputError] = InputError,
    *,
    max_line_bytes: int | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row, object)`` for each non-blank line of a JSON Lines file (rows count from 1).

    Raises ``error`` (an :class:`InputError` subclass) naming the file and row for an unreadable
    file, a line that is not JSON, a line that is not a JSON object, bytes that are not UTF-8, or
    a line longer than ``max_line_bytes`` (default :func:`max_jsonl_line_bytes`): a line is read
    at most that many bytes (and one) at a time, so a 1 GB line costs the bound, not 1 GB.

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
    >>> _ = p.write_text('{"a": 1}\\n{"pad": "' + "x" * 100 + '"}\\n')
    >>> list(iter_jsonl_objects(p, max_line_bytes=64))
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: ...x.jsonl, row 2: expected a JSON Lines row of at most 64 bytes, got a longer line (no line end in its first 65 bytes). Write one object per line, or raise TYPESTRICT_MAX_JSONL_LINE_BYTES if a row is really that long.
    """
    file = str(path)
    bound = max_jsonl_line_bytes() if max_line_bytes is None else max_line_bytes
    kind = special_kind(path)
    if kind is not None:
        raise error("a JSON Lines file", kind, "point at a regular file", file=file)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise error(
            "a readable file", exc.strerror or type(exc).__name__, "check the file", file=file
        ) from None
    with handle:
        row = 0
        while (raw := _read_line(handle, bound)) != b"":
            if raw is None:
                raise error(
                    f"a JSON Lines row of at most {bound:,} bytes",
                    f"a longer line (no line end in its first {bound + 1:,} bytes)",
                    "write one object per line, or raise TYPESTRICT_MAX_JSONL_LINE_BYTES if a "
                    "row is really that long",
                    file=file,
                    row=row + 1,
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise error(
                    "a UTF-8 encoded file",
                    "bytes that are not UTF-8",
                    "save the file as UTF-8",
                    file=file,
                    row=row + 1,
                ) from None
            if not line.strip():
                continue
            row += 1
            if row == 1:
                line = line.removeprefix("\ufeff")
            value = loads_strict(line, file=file, error=error, row=row)
            if not isinstance(value, dict):
                raise error(
                    "a JSON object",
                    type(value).__name__,
                    "write each row as {...}",
                    file=file,
                    row=row,
                )
            yield row, value


# --------------------------------------------------------------------------------------------
# The one strict JSON reader
# --------------------------------------------------------------------------------------------

MAX_JSON_DEPTH = 32
"""Deepest nesting of objects and arrays accepted (a manifest needs 5, a predictions row 2)."""

MAX_INT_DIGITS = 40
"""Longest integer literal accepted, in digits (an int64 has 19; a 128-bit id 39)."""

MAX_FLOAT_ABS = 1e100
"""Largest magnitude of a number with a fraction or exponent (probabilities are in [0, 1])."""

MAX_NUMBER_CHARS = 100
"""Longest number literal accepted, in characters (``0.000…1`` with a million zeros is refused)."""

MAX_JSON_FILE_BYTES = 50 * 1024 * 1024
"""Largest JSON document :func:`read_json_file` reads (a manifest is a few kB)."""


@dataclass(frozen=True)
class JSONLimits:
    """Bounds of the strict JSON reader (defaults: the module constants).

    Attributes:
        max_depth: deepest nesting of objects and arrays.
        max_int_digits: longest integer literal, in digits.
        max_float_abs: largest magnitude of a non-integer number.
        max_number_chars: longest number literal.
        exact_numbers: decode non-integer numbers as :class:`decimal.Decimal` (exactly as
            written, never through a binary float; the API reads money this way), and the
            integer ``-0`` too (an ``int`` has no sign for zero).
    """

    max_depth: int = MAX_JSON_DEPTH
    max_int_digits: int = MAX_INT_DIGITS
    max_float_abs: float = MAX_FLOAT_ABS
    max_number_chars: int = MAX_NUMBER_CHARS
    exact_numbers: bool = False


class _Refused(Exception):
    """Raised inside the decoder's hooks; turned into the caller's error with a position."""

    def __init__(self, expected: str, got: str, fix: str, needle: str | None = None) -> None:
        super().__init__(got)
        self.expected = expected
        self.got = got
        self.fix = fix
        self.needle = needle


def _shorten(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _decoder(limits: JSONLimits) -> json.JSONDecoder:
    def parse_int(literal: str) -> int | Decimal:
        digits = len(literal.lstrip("-"))
        if digits > limits.max_int_digits:
            raise _Refused(
                f"an integer of at most {limits.max_int_digits} digits",
                f"an integer of {digits} digits",
                "write a smaller number, or write an identifier as a string",
                literal,
            )
        if limits.exact_numbers and literal == "-0":
            return Decimal(literal)  # as written: an int would lose the sign ("-0" is refused as money)
        return int(literal)

    def parse_float(literal: str) -> Any:
        if len(literal) > limits.max_number_chars:
            raise _Refused(
                f"a number of at most {limits.max_number_chars} characters",
                f"a number of {len(literal)} characters",
                "round the number",
                literal,
            )
        value = float(literal)
        if not math.isfinite(value) or abs(value) > limits.max_float_abs:
            raise _Refused(
                f"a finite number of magnitude at most {limits.max_float_abs:g}",
                _shorten(literal),
                "write a number in range",
                literal,
            )
        return Decimal(literal) if limits.exact_numbers else value

    def parse_constant(name: str) -> Any:
        raise _Refused(
            "finite JSON numbers", name, "write a number (JSON has no NaN or Infinity)", name
        )

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _Refused(
                    "each key once in an object",
                    f"the key {_shorten(key)!r} twice",
                    "remove one of them (a repeated key is ambiguous)",
                    json.dumps(key, ensure_ascii=False),
                )
            out[key] = value
        return out

    return json.JSONDecoder(
        object_pairs_hook=pairs,
        parse_int=parse_int,
        parse_float=parse_float,
        parse_constant=parse_constant,
    )


_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\]{}]|[^\s"\[\]{},:]+|[,:]|\s+', re.S)


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _too_deep(text: str, max_depth: int) -> int | None:
    """The offset where nesting first exceeds ``max_depth`` (strings skipped), or None."""
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return match.start()
        elif token in ("]", "}"):
            depth -= 1
    return None


def _find_offset(text: str, problem: _Refused) -> int | None:
    """Where the refused token is: the first matching literal (for a duplicate key, the second)."""
    if problem.needle is None:
        return None
    wanted = _json_str(problem.needle)
    seen: set[int] = set()
    depth_stack: list[int] = [0]
    counter = 0
    previous = ""
    last_start = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token.isspace():
            continue
        if token in ("{", "["):
            counter += 1
            depth_stack.append(counter)
        elif token in ("}", "]"):
            if len(depth_stack) > 1:
                depth_stack.pop()
        elif token == ":" and previous.startswith('"'):
            name = _json_str(previous)
            if name is not None and name == wanted:
                if depth_stack[-1] in seen:
                    return last_start
                seen.add(depth_stack[-1])
        elif token == problem.needle and not token.startswith('"'):
            return match.start()
        previous, last_start = token, match.start()
    return None


def _json_str(token: str) -> str | None:
    try:
        value = json.loads(token)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _depth_exceeded(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests objects/arrays deeper than ``max_depth`` (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(value: Any) -> str | None:
    """The first string (key or value) in ``value`` that is not encodable as UTF-8, or None."""
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return node
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _raise_located(
    error: type[InputError],
    expected: str,
    got: str,
    fix: str,
    *,
    file: str,
    text: str,
    offset: int | None,
    row: int | None,
) -> InputError:
    where = file
    if row is not None:
        where += f", row {row}"
    if offset is not None:
        line, column = _position(text, offset)
        where += f", character {column}" if row is not None else f", line {line}, column {column}"
    err = error(expected, got, fix, file=where)
    err.file = file
    err.row = row
    return err


def loads_strict(
    text: str,
    *,
    file: str = "<memory>",
    error: type[InputError] = InputError,
    row: int | None = None,
    limits: JSONLimits | None = None,
) -> Any:
    """Decode JSON text the one strict way every file this product reads is decoded.

    Refused, each with an ``error`` (an :class:`InputError` subclass) naming the file, the
    line (or the JSON Lines ``row``) and the column: invalid JSON; a key twice in one object;
    ``NaN``/``Infinity``; an integer longer than ``limits.max_int_digits`` digits; a non-integer
    number that is not finite or beyond ``limits.max_float_abs``; nesting deeper than
    ``limits.max_depth``. Nothing else is ever raised (no ``RecursionError``, no
    ``ValueError`` from Python's integer-length limit, no ``OverflowError``).

    Args:
        text: the JSON text.
        file: the name used in messages.
        error: the error class raised.
        row: the JSON Lines row this text is (messages then say "row R, column C").
        limits: the bounds (default :class:`JSONLimits`).

    Returns:
        The decoded value (objects as ``dict``, arrays as ``list``).

    >>> loads_strict('{"a": [1, 2.5, "x"]}')
    {'a': [1, 2.5, 'x']}
    >>> loads_strict('{"options": {},\\n "options": {"keep_if_loses": true}}', file="m.json")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: m.json, line 2, column 2: expected each key once in an object, got the key 'options' twice. Remove one of them (a repeated key is ambiguous).
    >>> loads_strict('[1e400]', file="p.json")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: p.json, line 1, column 2: expected a finite number of magnitude at most 1e+100, got 1e400. Write a number in range.
    """
    bounds = limits or JSONLimits()
    try:
        value = _decoder(bounds).decode(text)
    except _Refused as problem:
        raise _raise_located(
            error, problem.expected, problem.got, problem.fix,
            file=file, text=text, offset=_find_offset(text, problem), row=row,
        ) from None
    except json.JSONDecodeError as exc:
        raise _raise_located(
            error, "valid JSON", f"invalid JSON ({exc.msg})", "fix the JSON syntax",
            file=file, text=text, offset=exc.pos, row=row,
        ) from None
    except RecursionError:
        value = None
        deep = True
    else:
        deep = isinstance(value, dict | list) and _depth_exceeded(value, bounds.max_depth)
    escape = None if deep else _SURROGATE_ESCAPE.search(text)
    if escape is not None and _lone_surrogate(value) is not None:
        raise _raise_located(
            error,
            "text that is valid Unicode",
            "a lone surrogate escape (\\ud800-\\udfff)",
            "write the character itself, or a proper surrogate pair",
            file=file, text=text, offset=escape.start(), row=row,
        )
    if deep:
        raise _raise_located(
            error,
            f"JSON nested at most {bounds.max_depth} levels deep",
            "deeper nesting",
            "remove the extra levels (see the file's documented format)",
            file=file, text=text, offset=_too_deep(text, bounds.max_depth), row=row,
        )
    return value


def loads_or_text(text: str, *, what: str = "<argument>") -> Any:
    """A command-line value: its JSON value when it is JSON, else the text itself.

    JSON that is valid but refused by :func:`loads_strict` (``1e400``, a key twice, nesting
    past the bound, a 5,001-digit integer) raises :class:`InputError` naming ``what``; only text
    that is not JSON at all is kept as text.

    >>> loads_or_text("0.5"), loads_or_text("[1, 2]"), loads_or_text("hello")
    (0.5, [1, 2], 'hello')
    >>> loads_or_text("1e400", what="--grid threshold")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: --grid threshold, line 1, column 1: expected a finite number of magnitude at most 1e+100, got 1e400. Write a number in range.
    """
    try:
        return loads_strict(text, file=what)
    except InputError as exc:
        if exc.expected == "valid JSON":
            return text
        raise


def read_json_file(
    path: str | os.PathLike[str],
    *,
    error: type[InputError] = InputError,
    what: str = "a JSON file",
    max_bytes: int = MAX_JSON_FILE_BYTES,
    limits: JSONLimits | None = None,
) -> Any:
    """Read a UTF-8 JSON file with :func:`loads_strict`, refusing files above ``max_bytes``.

    Raises ``error`` naming the file for a missing or unreadable file, a file that is too
    large, bytes that are not UTF-8 (with the line), and everything :func:`loads_strict` refuses.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.json"
    >>> _ = p.write_text('{"manifest_version": 1}')
    >>> read_json_file(p)
    {'manifest_version': 1}
    """
    file = str(path)
    kind = special_kind(path)
    if kind is not None:
        raise error(what, kind, "point at a regular file", file=file)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise error(what, "no such file", "check the path", file=file) from None
    except OSError as exc:
        raise error(
            "a readable file", exc.strerror or type(exc).__name__, "check the file", file=file
        ) from None
    if len(raw) > max_bytes:
        raise error(
            f"{what} of at most {max_bytes} bytes",
            "a larger file",
            "check that this is the right file",
            file=file,
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(
            "a UTF-8 encoded file",
            f"bytes that are not UTF-8 at line {line}",
            "save the file as UTF-8",
            file=file,
        ) from None
    return loads_strict(text, file=file, error=error, limits=limits)


# --------------------------------------------------------------------------------------------
# Data files: bounded, named, never a special file
# --------------------------------------------------------------------------------------------

MAX_DATA_FILE_BYTES = 1024 * 1024 * 1024
"""Largest data file (a point-in-time table's CSV) read, before and after decompression:
``TYPESTRICT_MAX_DATA_FILE_BYTES`` overrides it."""

_DECOMPRESSORS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def max_data_file_bytes() -> int:
    """The bound on a data file's size (:data:`MAX_DATA_FILE_BYTES`, or the environment's)."""
    return bound_from_env("TYPESTRICT_MAX_DATA_FILE_BYTES", MAX_DATA_FILE_BYTES)


def read_data_file(
    path: str | os.PathLike[str],
    *,
    error: type[InputError] = InputError,
    what: str = "a CSV file",
    max_bytes: int | None = None,
    text: bool = True,
) -> bytes:
    """The bytes of a data file, decompressed by its suffix (``.gz``, ``.bz2``, ``.xz``), read
    only when it can be read in bounded work.

    Refused with ``error`` naming the file: a path that is not a regular file (a FIFO is never
    opened, so nothing hangs; a device is never read); a file above ``max_bytes`` (before
    decompressing, from its size alone, so a 2 GiB sparse file costs nothing; and after, so a
    small archive cannot expand without end); a corrupt or truncated archive (``zlib``, ``lzma``,
    ``bz2`` errors, said in words); with ``text``, a NUL byte (no text file holds one), with
    its line.

    >>> import tempfile, pathlib, gzip
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv.gz"
    >>> _ = p.write_bytes(gzip.compress(b"a,b\\n1,2\\n")[:-12])
    >>> read_data_file(p)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: ...t.csv.gz: expected a readable CSV file (.gz compressed), got a truncated or corrupt archive (EOFError: Compressed file ended before the end-of-stream marker was reached). Check the file, or compress it again.
    """
    import importlib
    import lzma
    import zlib

    file = str(path)
    bound = max_data_file_bytes() if max_bytes is None else max_bytes
    kind = special_kind(path)
    if kind is not None:
        raise error(what, kind, "point at a regular file", file=file)
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise error(what, "no such file", "check the path", file=file) from None
    except OSError as exc:
        raise error("a readable file", exc.strerror or type(exc).__name__, "check the file", file=file) from None
    if size > bound:
        raise error(f"{what} of at most {bound:,} bytes", f"{size:,} bytes",
                    "split the file, or set TYPESTRICT_MAX_DATA_FILE_BYTES", file=file)
    suffix = Path(path).suffix.lower()
    module = _DECOMPRESSORS.get(suffix)
    def nul_at(chunk: bytes, start: bytes = b"") -> None:
        nul = chunk.find(b"\x00")
        if text and nul >= 0:
            line = start.count(b"\n") + chunk.count(b"\n", 0, nul) + 1
            got, fix = nul_refusal(start + chunk, len(start) + nul)
            raise error(f"{what} of text", got, fix, file=file, row=line - 1 if line > 1 else None)

    try:
        opener: Any = open if module is None else importlib.import_module(module).open
        with opener(path, "rb") as handle:
            head: bytes = handle.read(65536)  # a binary or sparse file is refused by its start
            nul_at(head)
            data: bytes = head + handle.read(bound + 1 - len(head))
    except InputError:
        raise
    except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
        if module is None:
            raise error("a readable file", detail, "check the file", file=file) from None
        raise error(f"a readable {what.removeprefix('a ')} ({suffix} compressed)",
                    f"a truncated or corrupt archive ({detail})", "check the file, or compress it again",
                    file=file) from None
    if len(data) > bound:
        raise error(f"{what} of at most {bound:,} bytes once decompressed", "more",
                    "split the file, or set TYPESTRICT_MAX_DATA_FILE_BYTES", file=file)
    nul_at(data[len(head):], head)
    return data
