"""A workspace's storage quota: the files it keeps on the server through the API and the console.

What counts is everything the server keeps on disk for the workspace, for as long as it keeps
it for the workspace: the uploads in its files area (``PUT /v1/files/{name}``, the console's
training form), its registered datasets (``POST /v1/datasets``, ``.../append``: the stored
tables and their ``dataset.json``), and each of its trainings' folder (its copy of the dataset,
the Jev predictions copied for it, its predictions, the ids it stated, its model files, its
manifest), until the model's files expire (retention, ``docs/credits.md``, deletes all of it then
but the manifest, the product's record of the training: not counted either). Not counted: the
audits and the audit cache (``<home>/audits``, ``<home>/cache/audits``): the product's record,
kept after the files expire as the product page promises, and a cache the server rebuilds; they
are the operator's to keep, not the customer's to pay for. The rule is one: the files stored now, plus what the request adds,
minus what it replaces, must stay within both bounds (:class:`StorageQuota`); else the request
is refused before anything is stored or charged (409 ``storage_quota``: a request that succeeds
once something is deleted conflicts with the workspace's state; it is not too large in itself,
which is the upload limit's 413). Deleting a file (``DELETE /v1/files/{name}``) and the expiry
of a model's files lower the usage at once: it is counted from the disk at each check.

The bounds are the server's settings ``TYPESTRICT_WORKSPACE_MAX_BYTES`` (default 10 GiB) and
``TYPESTRICT_WORKSPACE_MAX_FILES`` (default 10,000), read when the server starts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from typestrict_pipeline.errors import TypeStrictError
from typestrict_pipeline.files import bound_from_env

DEFAULT_MAX_BYTES = 10 * 1024**3
DEFAULT_MAX_FILES = 10_000
MAX_BYTES_ENV = "TYPESTRICT_WORKSPACE_MAX_BYTES"
MAX_FILES_ENV = "TYPESTRICT_WORKSPACE_MAX_FILES"


class StorageQuotaError(TypeStrictError):
    """A request that would store more than the workspace's quota (409 ``storage_quota``). Not
    a ``ConflictError``: the handlers of a name taken (a dataset's) must not reword it."""


@dataclass(frozen=True)
class StorageQuota:
    """The most a workspace may keep: ``max_bytes`` in all, in at most ``max_files`` files."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_files: int = DEFAULT_MAX_FILES

    @classmethod
    def from_env(cls) -> StorageQuota:
        """The bounds of :data:`MAX_BYTES_ENV` and :data:`MAX_FILES_ENV` (positive whole numbers
        in ASCII digits), else the defaults (:func:`~typestrict_pipeline.files.bound_from_env`,
        the rule of every ``TYPESTRICT_MAX_*`` bound)."""
        return cls(bound_from_env(MAX_BYTES_ENV, DEFAULT_MAX_BYTES), bound_from_env(MAX_FILES_ENV, DEFAULT_MAX_FILES))


@dataclass(frozen=True)
class StorageUsage:
    """What a workspace keeps now: ``files`` files of ``size`` bytes in all."""

    files: int
    size: int


def stored_files(root: Path) -> list[tuple[str, int]]:
    """``(name, size)`` of every plain file under ``root`` (names relative to it, with ``/``),
    sorted; symbolic links are neither listed nor followed. One ``lstat`` per entry: a file (or
    a folder) removed while listed, or one the server cannot read, is left out, never an error
    (a listing races with deletions and expiries in other requests and processes). A file or
    folder whose name starts with ``.`` is the server's, in flight (a write's temporary file, a
    staged submission), never one the workspace keeps (a stored name never starts with ``.``):
    left out too, so the request that staged it counts it once, as what it adds.

    >>> stored_files(Path("/nonexistent-folder"))
    []
    """
    found: list[tuple[str, int]] = []
    for folder, folders, names in os.walk(root):  # a folder that vanished or cannot be read: skipped
        folders[:] = [f for f in folders if not f.startswith(".")]
        for name in names:
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            size = _plain_file_size(path)
            if size is not None:
                found.append((Path(path).relative_to(root).as_posix(), size))
    return sorted(found)


def _plain_file_size(path: str | Path) -> int | None:
    """The size of ``path`` if it is a plain file (one ``lstat``: a symbolic link is not one),
    else None — also when it was removed meanwhile or the system refuses its name."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def usage_of(roots: Iterable[Path]) -> StorageUsage:
    """The files under ``roots`` (the workspace's folders) and their bytes; a file removed while
    counted is not counted."""
    files = size = 0
    for root in roots:
        for _, bytes_ in stored_files(root):
            size += bytes_
            files += 1
    return StorageUsage(files, size)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def check_storage(quota: StorageQuota, now: StorageUsage, *, files: int, size: int,
                  replaces: Iterable[Path] = ()) -> None:
    """Refuse a request that adds ``files`` files of ``size`` bytes (replacing the files
    ``replaces``, those of the same names that exist) beyond ``quota``, given ``now``.

    >>> check_storage(StorageQuota(100, 2), StorageUsage(1, 50), files=1, size=50)
    >>> check_storage(StorageQuota(100, 2), StorageUsage(1, 50), files=1, size=51)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.api.quota.StorageQuotaError: expected the workspace's stored files to stay within its storage quota of 100 bytes in at most 2 files, got 50 bytes in 1 file stored and 51 bytes in 1 file more in this request. Nothing was stored or charged: delete files the workspace no longer needs (DELETE /v1/files/{name}), or ask the operator to raise TYPESTRICT_WORKSPACE_MAX_BYTES
    """
    freed = usage_of_files(replaces)
    after_files = now.files - freed.files + files
    after_size = now.size - freed.size + size
    over = [env for env, out in ((MAX_BYTES_ENV, after_size > quota.max_bytes),
                                 (MAX_FILES_ENV, after_files > quota.max_files)) if out]
    if not over:
        return
    raise StorageQuotaError(
        f"expected the workspace's stored files to stay within its storage quota of "
        f"{_plural(quota.max_bytes, 'byte')} in at most {_plural(quota.max_files, 'file')}, got "
        f"{_plural(now.size, 'byte')} in {_plural(now.files, 'file')} stored and "
        f"{_plural(size, 'byte')} in {_plural(files, 'file')} more in this request"
        + (f" (replacing {_plural(freed.size, 'byte')} in {_plural(freed.files, 'file')})" if freed.files else "")
        + ". Nothing was stored or charged: delete files the workspace no longer needs "
        "(DELETE /v1/files/{name}), or ask the operator to raise " + " and ".join(over))


def usage_of_files(paths: Iterable[Path]) -> StorageUsage:
    """The plain files among ``paths`` (a name not stored yet is none) and their bytes."""
    sizes = [n for n in map(_plain_file_size, paths) if n is not None]
    return StorageUsage(len(sizes), sum(sizes))


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_FILES", "MAX_BYTES_ENV", "MAX_FILES_ENV", "StorageQuota",
           "StorageQuotaError", "StorageUsage", "check_storage", "stored_files", "usage_of", "usage_of_files"]
