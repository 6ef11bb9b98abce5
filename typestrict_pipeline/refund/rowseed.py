"""The labeled rows' seed digests, hashed in a second process while the dataset is read.

The holdout seed hashes every row's ``SHA-256`` of its ``[id, text, answer, group]`` JSON text,
sorted (``refund.splitrows.seed_of_parts``). ``hashlib`` takes the GIL for a message this short,
so in the reading process those million Python calls per million rows ran beside, not in
parallel with, the Arrow work of the next batch. :class:`SeedHasher` sends each batch's JSON
texts (Arrow's buffer as it is, each text ended by a newline: a JSON text never holds a raw
control character, so the newline cannot occur inside one) to a worker process, which hashes
them, keeps the digests (``refund.spill.Buckets``: on disk past a bound) and, at the end, gives
the seeds. :class:`LocalSeeds` does the same in the process, for small data. Both hash with
:func:`digests_of`, so they give the same digests.

The worker needs NumPy and this module only (it is started as ``python -c`` with the package's
folder first on its path, so it runs the same code as its parent).

>>> local = LocalSeeds(1)
>>> local.add(0, b'["a","x","yes",null]\\n["b","y","no",null]\\n', 2)
>>> import hashlib
>>> rows = sorted(hashlib.sha256(m).digest() for m in (b'["a","x","yes",null]', b'["b","y","no",null]'))
>>> local.seeds([b"p"]) == [hashlib.sha256(b"p" + b"".join(rows)).digest()]
True
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Protocol

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.refund import spill
from typestrict_pipeline.refund.spill import Buckets, order_by_digest

__all__ = ["LocalSeeds", "SeedHasher", "Seeds", "digests_of", "update_sorted"]

_DIGEST = type(hashlib.sha256()).digest
_SORT_CHUNK = 1 << 20
_HEAD = struct.Struct("<cIQQ")  # tag, stream, rows, payload bytes
_ROWS, _DIGESTS, _SEED = b"R", b"D", b"S"
AHEAD = 2
"""Batches the worker may be behind before :meth:`SeedHasher.add` hashes one in this process."""


def digests_of(data: bytes, n: int) -> npt.NDArray[np.uint8]:
    """``SHA-256`` of each of the ``n`` newline-ended messages in ``data``, as ``(n, 32)`` bytes.

    >>> digests_of(b"a\\nb\\n", 2)[1].tobytes() == hashlib.sha256(b"b").digest()
    True
    """
    messages = data.split(b"\n")
    if len(messages) != n + 1 or messages[-1]:
        raise ValueError(f"expected {n} newline-ended messages, got {len(messages) - 1}")
    messages.pop()
    joined = b"".join(map(_DIGEST, map(hashlib.sha256, messages)))
    return np.frombuffer(joined, dtype=np.uint8).reshape(n, 32)


def update_sorted(h: hashlib._Hash, parts: Iterable[npt.NDArray[np.uint8]]) -> None:
    """Feed ``h`` every digest of ``parts`` (``(k, 32)`` arrays ordered between them, as
    ``Buckets.parts`` gives them), in ascending order: each part sorted here."""
    for digests in parts:
        order = order_by_digest(digests)
        for start in range(0, len(order), _SORT_CHUNK):  # a million at a time: no second copy
            h.update(np.ascontiguousarray(digests[order[start:start + _SORT_CHUNK]]).data)


class Seeds(Protocol):
    """Where a load's row messages go, one stream per decision, and its seeds come from."""

    def add(self, stream: int, data: bytes | memoryview, n: int) -> None:
        """``n`` newline-ended messages of ``stream``."""

    def seeds(self, prefixes: list[bytes]) -> list[bytes]:
        """Each stream's ``SHA-256(prefix + its sorted digests)``."""

    def close(self) -> None:
        """Let everything go."""


class LocalSeeds:
    """:class:`Seeds` in this process."""

    def __init__(self, streams: int) -> None:
        self.buckets = [Buckets(32) for _ in range(streams)]

    def add(self, stream: int, data: bytes | memoryview, n: int) -> None:
        self.buckets[stream].add(digests_of(bytes(data), n))

    def seeds(self, prefixes: list[bytes]) -> list[bytes]:
        out = []
        for prefix, buckets in zip(prefixes, self.buckets, strict=True):
            h = hashlib.sha256(prefix)
            update_sorted(h, buckets.parts())
            buckets.close()
            out.append(h.digest())
        return out

    def close(self) -> None:
        for buckets in self.buckets:
            buckets.close()


class SeedHasher:
    """:class:`Seeds` in a worker process, started at once.

    :meth:`add` writes a batch to the worker's pipe while the worker is less than
    :data:`AHEAD` batches behind (it answers one byte per batch hashed); past that, this process
    hashes the batch itself (:class:`LocalSeeds`) and sends the worker the digests at the end, so
    neither process waits for the other while both have work. :meth:`request` asks for the seeds
    and returns at once, :meth:`seeds` waits for them: the worker sorts the digests while this
    process does other work.
    """

    def __init__(self, streams: int) -> None:
        self.streams = streams
        self._proc: subprocess.Popen[bytes] | None = None
        self._asked: list[bytes] | None = None
        self._local = LocalSeeds(streams)
        self._sent = 0  # batches handed to the writer
        self._done = 0  # batches the worker said it hashed
        self._frames: queue.SimpleQueue[list[bytes | memoryview] | None] = queue.SimpleQueue()
        self._broken = False
        self._start()
        # the pipe is written by a thread: a batch (megabytes) does not fit in the pipe, and this
        # thread hashes the next batch itself while the worker is behind
        self._writer = threading.Thread(target=self._write_all, name="rowseed-writer", daemon=True)
        self._writer.start()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            root = str(Path(__file__).resolve().parents[2])
            code = (f"import sys; sys.path.insert(0, {root!r}); "
                    "from typestrict_pipeline.refund.rowseed import serve; serve()")
            # the worker spills as this process would: same bound, same temporary folder
            args = [str(self.streams), str(spill.MEMORY_BYTES), tempfile.gettempdir()]
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code, *args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            _widen(self._proc.stdin)
            assert self._proc.stdout is not None
            os.set_blocking(self._proc.stdout.fileno(), False)
        return self._proc

    def _write_all(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            while (frame := self._frames.get()) is not None:
                for part in frame:
                    proc.stdin.write(part)
            proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):  # the worker died (or was killed)
            self._broken = True
            _close(proc.stdin)

    def _answers(self) -> None:
        """Count the worker's answers so far (without waiting)."""
        proc = self._start()
        assert proc.stdout is not None
        with contextlib.suppress(BlockingIOError):
            self._done += len(os.read(proc.stdout.fileno(), 1 << 16))

    def add(self, stream: int, data: bytes | memoryview, n: int) -> None:
        self._answers()
        if self._sent - self._done >= AHEAD:
            self._local.add(stream, data, n)
            return
        self._frames.put([_HEAD.pack(_ROWS, stream, n, len(data)), data])
        self._sent += 1

    def request(self, prefixes: list[bytes]) -> None:
        """Ask for the seeds (see :meth:`seeds`) without waiting."""
        frames: list[bytes | memoryview] = []
        for stream, buckets in enumerate(self._local.buckets):
            for part in buckets.parts():
                frames += [_HEAD.pack(_DIGESTS, stream, len(part), part.nbytes), part.data]
            buckets.close()
        for stream, prefix in enumerate(prefixes):
            frames += [_HEAD.pack(_SEED, stream, 0, len(prefix)), prefix]
        self._frames.put(frames)
        self._frames.put(None)  # the writer closes the pipe: the worker gives the seeds
        self._asked = prefixes

    def seeds(self, prefixes: list[bytes]) -> list[bytes]:
        if self._asked != prefixes:
            self.request(prefixes)
        self._writer.join()
        proc = self._start()
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, True)
        want = self._sent - self._done + 32 * len(prefixes)
        got = bytearray()
        while len(got) < want:
            chunk = os.read(fd, want - len(got))
            if not chunk:
                break
            got += chunk
        if len(got) != want or proc.wait() != 0:
            self._failed()
        self._proc = None
        _close(proc.stdout)
        _close(proc.stderr)
        seeds = bytes(got[want - 32 * len(prefixes):])
        return [seeds[32 * k:32 * k + 32] for k in range(len(prefixes))]

    def _failed(self) -> None:
        proc = self._proc
        self._proc = None
        error = b""
        if proc is not None:
            _close(proc.stdin)  # the worker reads the end of its input and exits
            error = proc.stderr.read() if proc.stderr is not None else b""
            proc.wait()
            _close(proc.stdout)
            _close(proc.stderr)
        raise RuntimeError("the seed's hashing process failed: "
                           + error.decode("utf-8", "replace")[-2000:])

    def close(self) -> None:
        self._local.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            self._frames.put(None)
            self._writer.join()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                _close(pipe)


def _close(pipe: IO[bytes] | None) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError):  # BrokenPipeError flushing what the worker won't read
            pipe.close()


def _widen(pipe: IO[bytes] | None) -> None:
    """A 1 MB pipe (Linux; 64 kB by default): fewer switches between the two processes."""
    import fcntl

    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or setsize is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), setsize, 1 << 20)


def serve() -> None:
    """The worker: read frames from stdin, write the seeds to stdout (``SeedHasher``)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    spill.MEMORY_BYTES = int(sys.argv[2])
    tempfile.tempdir = sys.argv[3]
    local = LocalSeeds(int(sys.argv[1]))
    prefixes: list[bytes] = []
    try:
        while True:
            head = inp.read(_HEAD.size)
            if not head:
                break
            tag, stream, n, size = _HEAD.unpack(head)
            payload = inp.read(size)
            if len(payload) != size:
                raise EOFError("a frame cut short")
            if tag == _ROWS:
                local.add(stream, payload, n)
                out.write(b".")  # one batch done
                out.flush()
            elif tag == _DIGESTS:  # hashed by the parent
                local.buckets[stream].add(np.frombuffer(payload, dtype=np.uint8).reshape(n, 32))
            elif tag == _SEED:
                prefixes.append(payload)
            else:
                raise ValueError(f"unknown frame {tag!r}")
        out.write(b"".join(local.seeds(prefixes)))
        out.flush()
    except BaseException:
        import traceback

        traceback.print_exc()
        local.close()
        os._exit(1)
    local.close()
    os._exit(0)  # nothing left to clean: skip the interpreter's teardown
