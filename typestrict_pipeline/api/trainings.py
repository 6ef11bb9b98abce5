"""Trainings created through the API: the workspace's own area, drafts, splits, submissions.

Plain typed Python over files and the store (no FastAPI): the routes in ``api/routes`` only call
it. Where things are, under ``TYPESTRICT_HOME`` (``home``):

* ``workspaces/<workspace>/files/<name>``: the workspace's own area. Uploads land here, and a
  training's dataset may be referenced from here (a relative path, confined to the area).
* ``trainings/<training_id>/``: one folder per training, the same folder the refund pipeline and
  ``training_sensor`` read. A training created through the API starts as a **draft**
  (``api-draft.json``: the full manifest, its dataset copied beside it as ``dataset.<ext>``).
  The split can be read at once. When the model's predictions are posted they are checked
  against the split in full, then written to ``predictions/model.jsonl`` and the manifest to
  ``manifest.json`` (atomically, last): from then on ``training_sensor`` sees it like any other
  training and requests its ``verdict_job``.

Where a training is comes from its lifecycle row (:mod:`typestrict_pipeline.lifecycle.trainings`):
``awaiting_predictions``, ``judging``, ``failed`` (refused by its verdict run; corrected
predictions are accepted), ``settled``, ``expired`` or ``cancelled``. Money moves last and comes
back always: the credit is charged in the transaction that puts the prepared folder in place (a
failed write rolls the charge back), and a deadline returns it when nothing else ends the
training.

Every object is scoped to its workspace: a training of another workspace is "not found", the same
answer as one that does not exist.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline.api.quota import (
    StorageQuota,
    StorageUsage,
    check_storage,
    stored_files,
    usage_of,
    usage_of_files,
)
from typestrict_pipeline.credits import get_model
from typestrict_pipeline.credits.ledger import InsufficientCreditsError, run_transaction
from typestrict_pipeline.credits.models import ModelInfo, models_of, never_committed
from typestrict_pipeline.errors import (
    ConflictError,
    DatasetError,
    InputError,
    ManifestError,
    NotFoundError,
    PredictionsError,
    StoreError,
    TypeStrictError,
    shown_as,
)
from typestrict_pipeline.files import StagedFile, read_json_file, write_atomic
from typestrict_pipeline.lifecycle.leases import LeaseKind, acquire
from typestrict_pipeline.lifecycle.trainings import (
    API_WORDS,
    Deadlines,
    Expired,
    TrainingState,
    TrainingStatus,
    TrainingWords,
    begin_judging_in,
    cancel_training,
    check_accepts_submission,
    expire_due,
    start_training,
    statuses_of,
    training_status,
)
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.grouping import scan_dataset
from typestrict_pipeline.refund.holdout import check_something_to_train_on, split_decisions
from typestrict_pipeline.refund.manifest import TrainingManifest, parse_manifest
from typestrict_pipeline.refund.predictions import bounded_rows, read_predictions
from typestrict_pipeline.refund.preflight import check_file_predictions
from typestrict_pipeline.refund.runreads import reads_within
from typestrict_pipeline.refund.trained_on import (
    attest,
    stated_value_kind,
    stated_value_ok,
)
from typestrict_pipeline.store import utcnow

DRAFT_NAME = "api-draft.json"
STORAGE_LOCK_NAME = ".storage.lock"
"""The file whose ``flock`` is a workspace's storage lock (:meth:`TrainingStore.storage_lock`)."""
UPLOAD_STAGING = ".uploads"
STALE_UPLOAD_S = 86_400.0
"""A staged upload older than this (a day) was left by a server killed mid-upload."""
STALE_SWEEP_S = 3_600.0
"""How often a running API server removes, from every workspace, the staged uploads older than
:data:`STALE_UPLOAD_S` (:func:`sweep_stale_uploads`; also once as it starts)."""
GROUPING_NAME = "grouping.json"
"""The look for undeclared groups made when the training was created (``refund.grouping``)."""
MANIFEST_NAME = "manifest.json"
MODEL_PREDICTIONS = "predictions/model.jsonl"
TRAINED_ON_FILE = "trained_on.txt"
MODEL_FOLDER = "model"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_DATASET_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".parquet", ".pq", ".jsonl", ".ndjson")
MAX_DATASET_BYTES = 256 * 1024 * 1024
"""The most a training's dataset may hold once decompressed, by default (the server passes its
upload limit, ``ApiSettings.max_upload_bytes``: a dataset holds no more than one upload may)."""


def expanded_bytes(path: Path, bound: int) -> int:
    """How many bytes the dataset at ``path`` holds once decompressed (a ``.gz``/``.bz2`` CSV)
    or decoded (Parquet: its values as read, a dictionary-encoded value counted once per row),
    counted only up to ``bound + 1``: the count costs at most ``bound`` bytes of work, however
    small the file. A file that cannot be read is counted as read so far (the dataset reader
    then says what is wrong with it)."""
    import bz2
    import gzip
    import lzma
    import zlib

    name = path.name.lower()
    if name.endswith((".gz", ".bz2")):
        total = 0
        try:
            with (gzip.open(path, "rb") if name.endswith(".gz") else bz2.open(path, "rb")) as handle:
                while total <= bound and (chunk := handle.read(1 << 20)):
                    total += len(chunk)
        except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
            pass
        return total
    if name.endswith((".parquet", ".pq")):
        return _parquet_bytes(path, bound)
    return path.stat().st_size


def _parquet_bytes(path: Path, bound: int) -> int:
    """The decoded size of a Parquet file's values (see :func:`expanded_bytes`): string and
    binary columns read as dictionaries (never expanded: a value repeated on a million rows is
    counted a million times without being copied), 4,096 rows at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        texts = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                 or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
        handle = pq.ParquetFile(path, read_dictionary=texts)
        total = 0
        for batch in handle.iter_batches(batch_size=4096):
            for column in batch.columns:
                if isinstance(column, pa.DictionaryArray):
                    lengths = pc.binary_length(column.dictionary)
                    total += 4 * len(column) + int(pc.sum(pc.take(lengths, column.indices)).as_py() or 0)
                else:
                    total += column.nbytes
            if total > bound:
                break
        return total
    except Exception:  # not Parquet, or damaged: the dataset reader says what is wrong
        return 0


def check_dataset_size(path: Path, bound: int) -> None:
    """Refuse a dataset that holds more than ``bound`` bytes once decompressed or decoded: a 13 kB
    ``.csv.bz2`` held 100 MB of rows, and every one of them was read (seconds of work and a
    gigabyte of memory per request; a 1 MB archive, a terabyte).

    Raises:
        DatasetError: more than ``bound`` bytes, naming the file.
    """
    expanded = expanded_bytes(path, bound)
    if expanded > bound:
        raise DatasetError(
            f"a dataset of at most {bound:,} bytes once decompressed (the server's upload limit)",
            f"more from a file of {path.stat().st_size:,} bytes",
            "send a smaller dataset, or split it into trainings of their own", file=str(path))


__all__ = ["TrainingRequest", "TrainingState", "TrainingStore", "TrainingView", "WorkspaceArea", "disk_room",
           "sweep_stale_uploads"]

SUBMISSION_SOURCE = "the request's predictions"
"""How messages name a posted body's predictions (row N is ``predictions[N-1]``)."""
READ_CHUNK = 1 << 20
"""The bytes a submitted predictions file is read (and its rows counted) at a time."""


def check_row_bound(data: bytes, *, source: str, fix: str) -> None:
    """Refuse predictions of more rows than :data:`~typestrict_pipeline.refund.manifest.MAX_PREDICTION_ROWS`
    (:func:`~typestrict_pipeline.refund.predictions.bounded_rows`, counted no further than the row
    past it), naming ``source``; before the storage lock is waited for or anything is written."""
    chunks = (data[i:i + READ_CHUNK] for i in range(0, len(data), READ_CHUNK))
    for _ in bounded_rows(chunks, source=source, fix=fix):
        pass


def _nothing_stored(words: TrainingWords, training_id: str) -> str:
    """What a refused submission leaves, and what to do, in the door's ``words``."""
    return ("nothing was stored or charged and the training still accepts its predictions: "
            + words.say(words.resend, training_id))


@contextlib.contextmanager
def disk_room(what: str) -> Iterator[None]:
    """A full (or failing) disk is the server's problem, said as such (503), never a 500."""
    try:
        yield
    except OSError as exc:
        raise StoreError(
            f"expected room to {what} on the server, got {exc.strerror or type(exc).__name__} "
            f"({type(exc).__name__}). Nothing was charged; retry later, and tell the operator if "
            "it persists"
        ) from None


def _already_submitted(training_id: str, words: TrainingWords = API_WORDS) -> ConflictError:
    return ConflictError(
        f"expected training {training_id!r} to await its predictions, got them already "
        f"submitted. Its verdict follows; {words.say(words.read, training_id)}"
    )


def _not_found(what: str, ident: str) -> NotFoundError:
    return NotFoundError.in_workspace(
        what, ident, "Check the id (list them with the API) and that you use this workspace's key", cut=200)


DATASET_FIELD = "field 'dataset.path'"
"""How messages name the request's ``dataset.path`` (a JSON field, not a column of the dataset)."""


def check_name(name: str, what: str = "file name") -> str:
    """A plain file or id name: letters, digits, ``_``, ``-``, ``.``; 1–200; not starting with ``.``.

    >>> check_name("data.csv")
    'data.csv'
    """
    if not name or len(name) > 200 or not set(name) <= _NAME_CHARS or name.startswith("."):
        raise InputError(
            f"a {what} of letters, digits, '_', '-' or '.' (1 to 200 characters, not starting with '.')",
            repr(name[:80]), f"rename the {what}",
        )
    return name


def sweep_stale_uploads(home: Path) -> int:
    """Remove the staged uploads of every workspace under ``home`` that are older than
    :data:`STALE_UPLOAD_S` (files a server killed mid-upload left in
    ``<home>/workspaces/<workspace>/.uploads``); the number removed. An upload in progress
    writes its file at least once a mebibyte, so it is never a day old. The API server
    (:func:`~typestrict_pipeline.api.app.create_app`) runs this as it starts and every
    :data:`STALE_SWEEP_S`, so a workspace that never uploads again keeps no such file for longer
    than a day and an hour.

    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp())
    >>> staged = home / "workspaces" / "acme" / UPLOAD_STAGING
    >>> staged.mkdir(parents=True)
    >>> (staged / "old").write_bytes(b"x") and os.utime(staged / "old", (0, 0))
    >>> (staged / "new").write_bytes(b"x") and None
    >>> sweep_stale_uploads(home), sorted(p.name for p in staged.iterdir())
    (1, ['new'])
    """
    at = time.time()
    removed = 0
    with contextlib.suppress(OSError):
        for workspace in os.scandir(Path(home) / "workspaces"):
            with contextlib.suppress(OSError):
                if workspace.is_dir(follow_symlinks=False):
                    removed += _sweep_staged(Path(workspace.path) / UPLOAD_STAGING, at)
    return removed


def _sweep_staged(folder: Path, now: float) -> int:
    """Remove the files of ``folder`` last written more than :data:`STALE_UPLOAD_S` before
    ``now``; the number removed (a missing folder, or a file another sweep took first, is
    nothing to do)."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > STALE_UPLOAD_S:
                    os.unlink(entry.path)
                    removed += 1
    return removed


@dataclass(frozen=True)
class WorkspaceArea:
    """A workspace's own folder of files (``<home>/workspaces/<workspace>/files``)."""

    home: Path
    workspace_id: str
    words: TrainingWords = API_WORDS
    """How a refusal names the dataset's field and what to do (the door's words)."""

    @property
    def root(self) -> Path:
        return self.home / "workspaces" / self.workspace_id / "files"

    def resolve(self, written: str) -> Path:
        """The file ``written`` (relative, ``/``-separated) inside the area, confined to it.

        Raises:
            InputError: an absolute path, ``..``, a backslash, or a link leading outside.
            NotFoundError: no such file.
        """
        field = DATASET_FIELD if self.words.keys is None else self.words.keys("dataset.path")
        pure = PurePosixPath(written)
        if (not written or "\\" in written or "\x00" in written or pure.is_absolute()
                or any(p in ("..", ".", "") for p in written.split("/"))):
            raise InputError(
                "a path relative to the workspace's files (e.g. 'data/reviews.csv'), without '..'",
                repr(written[:200]), self.words.files, file=field,
            )
        for part in pure.parts:
            check_name(part)
        root = self.root.resolve()
        target = (root / Path(*pure.parts)).resolve()
        if not target.is_relative_to(root):
            raise InputError("a file inside the workspace's files", repr(written[:200]),
                             "do not link outside the workspace's area", file=field)
        if not target.is_file():
            raise NotFoundError(f"expected a file named {written[:200]!r} in the workspace's files, got "
                                f"none. {self.words.files}")
        return target

    def save(self, name: str, data: bytes) -> Path:
        """Store an upload as ``name`` (one plain name) atomically; replaces a file of that name."""
        check_name(name)
        return write_atomic(self.root / name, data)

    def delete(self, name: str) -> int:
        """Delete the file ``name`` of the area; its size. A training or a dataset made from it
        keeps its own copy, so nothing made before changes.

        Raises:
            NotFoundError: no such file (or not a plain file of the area).
        """
        try:
            path = self.root / check_name(name)
        except InputError:
            raise _not_found("file", name) from None
        if path.is_symlink() or not path.is_file():
            raise _not_found("file", name)
        size = path.stat().st_size
        path.unlink()
        return size

    def listing(self) -> list[tuple[str, int]]:
        """``(name, size)`` of every file in the area, sorted."""
        return stored_files(self.root)


def _suffix(name: str, where: str | None = DATASET_FIELD) -> str:
    """The dataset's format suffix; refused naming ``where`` (the request's field, or nothing
    for a file the person chose: the message shows its name)."""
    lower = name.lower()
    for suffix in _DATASET_SUFFIXES:
        if lower.endswith(suffix):
            return suffix
    raise InputError(
        f"a dataset file ending in one of {list(_DATASET_SUFFIXES)}", repr(name[:200]),
        "rename the file to say its format", file=where,
    )


@dataclass(frozen=True)
class TrainingRequest:
    """What a customer sends to create a training (the manifest's fields, ``docs/manifest.md``).

    ``dataset`` is the manifest's ``dataset`` object, its ``path`` relative to the workspace's
    files; ``decisions`` and ``options`` are as in a manifest.
    """

    dataset: Mapping[str, Any]
    decisions: Sequence[Mapping[str, Any]]
    options: Mapping[str, Any]


@dataclass(frozen=True)
class TrainingView:
    """A training as the API and the CLI show it.

    Attributes:
        state: where it is.
        model: its model record once settled (or expired/cancelled: settled as ``failed``).
        status: its lifecycle row (None for a training registered by its manifest only).
    """

    state: TrainingState
    model: ModelInfo | None
    status: TrainingStatus | None

    @property
    def reason(self) -> str | None:
        return None if self.status is None else self.status.reason

    @property
    def deadline_at(self) -> dt.datetime | None:
        return None if self.status is None else self.status.deadline_at


@dataclass(frozen=True)
class SplitView:
    """A training's split, before training: what may be trained on and what is held out."""

    training_id: str
    training_ids: tuple[str, ...]
    training_ids_sha256: str
    not_for_training: tuple[str, ...]
    decisions: tuple[dict[str, Any], ...]
    """Each decision's counts and held-out ids (:func:`~typestrict_pipeline.api.splits.split_roles`)."""


class TrainingStore:
    """Trainings of every workspace under ``home`` (the same folder ``training_sensor`` watches).

    Args:
        home: ``TYPESTRICT_HOME``.
        engine: the domain store (credits and model records).
        jev_source: the manifest ``predictions.jev`` value for trainings made here (the server's
            Jev; customers never choose it, and a server does not start without one).
        max_dataset_bytes: the most a new training's dataset may hold once decompressed
            (:func:`check_dataset_size`).
    """

    def __init__(self, home: Path, engine: Engine, jev_source: Mapping[str, Any] | None, *,
                 deadlines: Deadlines | None = None, max_dataset_bytes: int = MAX_DATASET_BYTES,
                 quota: StorageQuota | None = None,
                 words: TrainingWords = API_WORDS) -> None:
        self.home = home
        self.quota = quota
        """Each workspace's storage quota (:mod:`typestrict_pipeline.api.quota`); None: none
        (the CLI's commands, which store nothing a customer sends)."""
        # What a refusal tells to do, in the words of the door that asked (the CLI's commands,
        # the API's routes); the rules are the lifecycle's, the same for both.
        self.words = words
        self.max_dataset_bytes = max_dataset_bytes
        self.engine = engine
        # None only for the CLI's `typestrict training` commands, which read, submit and cancel
        # trainings but never create one (the server does not start without a Jev source).
        self.jev_source = dict(jev_source) if jev_source is not None else None
        self.deadlines = deadlines or Deadlines.from_env()
        self._owners: dict[tuple[str, int, int], tuple[str, bool]] = {}
        """(folder name, inode, change time) -> the workspace its manifest names: read once per
        folder, so a list costs one directory listing plus the new folders, not every
        workspace's manifests. Replaced whole by each list, never changed in place (a list
        running beside another reads one map or the other, both right)."""

    @property
    def trainings_dir(self) -> Path:
        return self.home / "trainings"

    def area(self, workspace_id: str) -> WorkspaceArea:
        return WorkspaceArea(self.home, workspace_id, self.words)

    def speaking(self, words: TrainingWords) -> TrainingStore:
        """This store (same home, store, quota and settings), its refusals said in ``words``
        (another door's: the console's pages and fields instead of the API's routes and JSON
        fields). The rules are the same object's."""
        other = copy.copy(self)
        other.words = words
        return other

    def folder(self, training_id: str) -> Path:
        return self.trainings_dir / check_name(training_id, "training id")

    def storage_roots(self, workspace_id: str) -> list[Path]:
        """The folders whose files count against the workspace's storage quota: its files area,
        its registered datasets, and the folder of each of its trainings (the dataset's copy,
        predictions, stated ids, model files, manifest) until its model's files expire, when
        retention deletes all of it but the manifest (:mod:`typestrict_pipeline.api.quota`)."""
        from typestrict_pipeline.api.datasets import datasets_base, own_names
        from typestrict_pipeline.credits.tables import ModelState

        base = datasets_base(self.home)
        ids = self.list_ids(workspace_id)
        expired = {m for m, info in models_of(self.engine, ids).items() if info.state is ModelState.EXPIRED}
        return [self.area(workspace_id).root, *(base / name for name in own_names(self.home, workspace_id)),
                *(self.trainings_dir / t for t in ids if t not in expired)]

    def storage_usage(self, workspace_id: str) -> StorageUsage:
        """What the workspace keeps now, as its quota counts it."""
        return usage_of(self.storage_roots(workspace_id))

    @contextlib.contextmanager
    def storage_lock(self, workspace_id: str) -> Iterator[None]:
        """Hold the workspace's storage lock: a request that checks the quota
        (:meth:`check_storage`) and then stores files does both under it, so two requests of
        one workspace (threads of one server, or servers sharing the home) cannot each pass the
        check and together store beyond the quota. An exclusive ``flock`` on
        ``<home>/workspaces/<workspace>/.storage.lock`` (outside the folders the quota counts),
        released when the block ends or its process dies; other workspaces never wait. Not
        re-entrant: take it once per request. Without a quota, nothing is locked."""
        if self.quota is None:
            yield
            return
        folder = self.area(workspace_id).root.parent
        with disk_room("check the workspace's storage"):
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(folder / STORAGE_LOCK_NAME, "ab")  # noqa: SIM115 - closed below
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            yield
        finally:
            handle.close()  # closing the file releases its lock

    def check_storage(self, workspace_id: str, *, files: int, size: int, replaces: Sequence[Path] = ()) -> None:
        """Refuse, before anything is stored or charged, a request that would store ``files``
        more files of ``size`` bytes (replacing ``replaces``) beyond the workspace's quota.

        Call it under :meth:`storage_lock`, held until what it admitted is stored.

        Raises:
            StorageQuotaError: over the quota (409 ``storage_quota``), saying the quota, the
                usage and what to do.
        """
        if self.quota is not None:
            check_storage(self.quota, self.storage_usage(workspace_id), files=files, size=size,
                          replaces=replaces)

    # --- create ------------------------------------------------------------------------------

    def _manifest_doc(self, workspace_id: str, training_id: str, req: TrainingRequest,
                      dataset_name: str) -> dict[str, Any]:
        if self.jev_source is None:
            raise InputError("a server configured with Jev's source", "none",
                             "create trainings through `typestrict api` (docs/api.md)")
        dataset = dict(req.dataset)
        dataset["path"] = dataset_name
        columns = dataset.get("columns")
        if isinstance(columns, Mapping):  # the manifest says "group": null on purpose, never omits it
            dataset["columns"] = {**columns, "group": columns.get("group")}
        return {
            "manifest_version": 1, "training_id": training_id, "workspace_id": workspace_id,
            "dataset": dataset, "decisions": [dict(d) for d in req.decisions],
            "predictions": {"jev": self.jev_source,
                            "model": {"kind": "file", "path": MODEL_PREDICTIONS}},
            "training": {"status": "succeeded"}, "options": dict(req.options),
        }

    def create(self, workspace_id: str, req: TrainingRequest, upload: StagedFile | None = None) -> str:
        """:meth:`_create` under the workspace's :meth:`storage_lock`, from the quota's check of
        the staged training (and the ``upload``, stored in the workspace's files too) to the
        folder's rename."""
        with self.storage_lock(workspace_id):
            return self._create(workspace_id, req, upload)

    def _create(self, workspace_id: str, req: TrainingRequest, upload: StagedFile | None = None) -> str:
        """Validate the manifest and the dataset, prepare the training, then charge its credit.

        Charge last, release always: every file is written to a staging folder first; the charge
        and the training's lifecycle row (``awaiting_predictions``, with its deadline) are one
        transaction whose last step moves that folder into place, so a failed write (a full
        disk) rolls the charge back, and a failed commit removes the folder. ``upload``: the
        dataset sent with the request (the console's form), named ``dataset.path``, staged in the
        workspace's upload folder (:meth:`staging`; copied and moved from there, never held in
        memory); it is checked like a workspace's file and moved into the workspace's files in
        that last step only, so a refused training leaves the files as they were (the caller
        discards the staged file). Messages name the dataset as the customer does
        (``dataset.path``), never the server's copy.

        Raises:
            ManifestError, DatasetError, NotEnoughDataError: the request is not a valid training.
            InsufficientCreditsError: the workspace has no credit left.
            StoreError: the server's disk or store failed (nothing charged).
        """
        written = req.dataset.get("path") if isinstance(req.dataset, Mapping) else None
        if not isinstance(written, str):
            raise InputError("a file of the workspace's files", repr(written), self.words.files,
                             file=DATASET_FIELD if self.words.keys is None else self.words.keys("dataset.path"))
        area = self.area(workspace_id)
        source = area.resolve(written) if upload is None else upload.flushed()
        dataset_name = "dataset" + (_suffix(check_name(written, "dataset file name"), None)
                                    if upload is not None else _suffix(source.name))
        if upload is not None:  # kept in the workspace's files too: counted before anything
            self.check_storage(workspace_id, files=1, size=upload.size, replaces=[area.root / written])
        training_id = "tr_" + secrets.token_hex(8)
        folder = self.folder(training_id)
        staging = self.trainings_dir / f".staging-{training_id}"
        try:
            with disk_room("store the training's files"):
                staging.mkdir(parents=True)
                shutil.copyfile(source, staging / dataset_name)
            try:
                self._stage(workspace_id, training_id, req, staging, dataset_name)
            except TypeStrictError as exc:
                raise shown_as(exc, {str(staging / dataset_name): written}) from None
            # the training's folder counts against the quota: what it adds, before the charge
            staged = usage_of([staging])
            self.check_storage(workspace_id, files=staged.files + (upload is not None),
                               size=staged.size + (upload.size if upload is not None else 0),
                               replaces=[area.root / written] if upload is not None else [])

            def move_in() -> None:  # the last step of the charging transaction
                with disk_room("store the training's files"):
                    os.replace(staging, folder)
                    if upload is not None:
                        upload.commit(area.root / check_name(written))  # moved, never read

            try:
                start_training(self.engine, workspace_id, training_id, deadlines=self.deadlines,
                               before_commit=move_in)
            except InsufficientCreditsError as exc:  # nothing charged; what to do in the door's words
                if folder.exists() and not self._charged(training_id):
                    shutil.rmtree(folder, ignore_errors=True)
                raise InsufficientCreditsError(
                    exc.missing, fix=self.words.credits.replace("{workspace}", workspace_id)) from None
            except BaseException:
                if folder.exists() and not self._charged(training_id):
                    shutil.rmtree(folder, ignore_errors=True)  # the charge was rolled back
                raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return training_id

    def _stage(self, workspace_id: str, training_id: str, req: TrainingRequest, staging: Path,
               dataset_name: str) -> None:
        """Check the training staged in ``staging`` (its dataset there) and write its files."""
        doc = self._manifest_doc(workspace_id, training_id, req, dataset_name)
        jev = doc["predictions"]["jev"]
        if isinstance(jev, dict) and jev.get("kind") == "file":  # a recorded Jev: copied in,
            recorded = Path(str(jev.get("path")))  # paths stay inside
            if not recorded.is_file():  # the server's set-up, not the customer's request
                raise StoreError(
                    f"expected the server's recorded Jev predictions at {recorded.name!r}, got no such "
                    "file. Nothing was charged; retry later, and tell the operator (the server's "
                    "--jev-source names a file that is gone)")
            with disk_room("store the training's files"):
                shutil.copyfile(recorded, staging / "jev.jsonl")
            doc["predictions"]["jev"] = {**jev, "path": "jev.jsonl"}
        manifest = parse_manifest(doc, source="request", base_dir=staging, keys=self.words.keys)
        check_dataset_size(staging / dataset_name, self.max_dataset_bytes)  # before it is read
        # every dataset check, and that its split leaves something to train on, before
        # anything is charged (refund/holdout.py, check_something_to_train_on)
        check_something_to_train_on(load_dataset(manifest))
        # Signs of undeclared groups, looked for once, before anything is judged (warnings only).
        scan = scan_dataset(manifest)
        with disk_room("store the training's files"):
            write_atomic(staging / GROUPING_NAME,
                         json.dumps(scan.as_dict(), indent=2).encode("utf-8"))
            write_atomic(staging / DRAFT_NAME, json.dumps(doc, indent=2).encode("utf-8"))

    def _charged(self, training_id: str) -> bool:
        """Whether the training's charge committed (True when the store cannot tell: keep it)."""
        try:
            return training_status(self.engine, training_id) is not None
        except Exception:
            return True

    # --- read --------------------------------------------------------------------------------

    def _doc(self, workspace_id: str, training_id: str, *, committed: bool = True
             ) -> tuple[dict[str, Any], Path, bool]:
        """The training's manifest (or draft), its folder and whether it is a draft. A draft whose
        charge never committed (:func:`~typestrict_pipeline.credits.models.never_committed`: its
        server died inside the charging transaction, or is committing it now) is no training:
        not found (``committed=False``: the caller checks that itself, for many at once)."""
        found = self._read(training_id)
        if found is None or found[0].get("workspace_id") != workspace_id:
            raise self._no_training(training_id)
        if committed and found[2] and never_committed(self.engine, [training_id]):
            raise self._no_training(training_id)
        return found

    def _no_training(self, training_id: str) -> NotFoundError:
        return NotFoundError(f"expected a training with id {training_id[:200]!r} in this workspace, got "
                             f"none. {self.words.find}")

    def _read(self, training_id: str) -> tuple[dict[str, Any], Path, bool] | None:
        """A training folder's manifest (or draft: the bool), whichever workspace it names; None
        when there is none, or it cannot be read (never shown, never a 500)."""
        try:
            folder = self.folder(training_id)
        except InputError:
            return None
        # The manifest is looked for again after the draft: a submission writes the manifest
        # before it removes the draft, so a reader that missed the manifest and then the draft
        # finds the manifest the second time (never "not found" in between).
        for name, draft in ((MANIFEST_NAME, False), (DRAFT_NAME, True), (MANIFEST_NAME, False)):
            path = folder / name
            if path.is_file():
                try:
                    doc = read_json_file(path, error=ManifestError, what="a manifest")
                except InputError:
                    if not path.exists():  # a draft removed since: its manifest is looked for next
                        continue
                    return None
                return (doc, folder, draft) if isinstance(doc, dict) else None
        return None

    def manifest(self, workspace_id: str, training_id: str) -> TrainingManifest:
        """The training's manifest (draft or final), if it belongs to ``workspace_id``."""
        doc, folder, _ = self._doc(workspace_id, training_id)
        # A manifest written outside the API (the demo's) may name a file of the data folder,
        # as the pipeline allows (docs/manifest.md, "Where files may be").
        data_root = os.environ.get("TYPESTRICT_DATA_ROOT") or str(self.home / "data")
        return parse_manifest(doc, source=str(folder / MANIFEST_NAME), base_dir=folder,
                              data_roots=(Path(data_root),))

    def grouping(self, workspace_id: str, training_id: str) -> dict[str, Any] | None:
        """The look for undeclared groups made at creation (``GroupingScan.as_dict()``), or
        None when there was none (a training registered by its manifest, not through the API)."""
        _, folder, _ = self._doc(workspace_id, training_id)
        try:
            doc = read_json_file(folder / GROUPING_NAME, error=ManifestError, what="a grouping look")
        except (InputError, OSError):
            return None
        return doc if isinstance(doc, dict) else None

    def model(self, workspace_id: str, model_id: str) -> ModelInfo:
        """The model record of ``model_id`` if it belongs to ``workspace_id`` (else not found)."""
        try:
            info = get_model(self.engine, model_id)
        except NotFoundError:
            raise _not_found("model", model_id) from None
        if info.workspace_id != workspace_id:
            raise _not_found("model", model_id)
        return info

    def view(self, workspace_id: str, training_id: str, *, now: dt.datetime | None = None
             ) -> TrainingView:
        """Where the training is, its lifecycle row and its model record.

        A deadline that has passed is applied first (the training expires and its credit comes
        back now, not at the next sweep): what the customer reads is always current.
        """
        found = self.views(workspace_id, [training_id], now=now)
        if training_id not in found:
            raise self._no_training(training_id)
        return found[training_id]

    def views(self, workspace_id: str, training_ids: Sequence[str], *, now: dt.datetime | None = None
              ) -> dict[str, TrainingView]:
        """:meth:`view` of each of ``training_ids`` (a list's page, or one training) with one
        expiry sweep and one query for their lifecycle rows and one for their model records, not
        three per training. A training not found (another workspace's, or removed since it was
        listed) is left out."""
        drafts: dict[str, bool] = {}
        for tid in training_ids:
            with contextlib.suppress(NotFoundError):
                drafts[tid] = self._doc(workspace_id, tid, committed=False)[2]
        uncommitted = never_committed(self.engine, [t for t, draft in drafts.items() if draft])
        ids = [t for t in drafts if t not in uncommitted]
        expire_due(self.engine, now=now, training_ids=ids, trainings_dir=self.trainings_dir)
        statuses = statuses_of(self.engine, ids)
        models = {m: info for m, info in models_of(self.engine, ids).items() if info.workspace_id == workspace_id}
        out = {}
        for tid in ids:
            model, status = models.get(tid), statuses.get(tid)
            if status is not None:
                out[tid] = TrainingView(status.state, model, status)
            elif drafts[tid]:
                out[tid] = TrainingView(TrainingState.AWAITING_PREDICTIONS, None, None)
            else:
                out[tid] = TrainingView(TrainingState.SETTLED if model is not None else TrainingState.JUDGING,
                                        model, None)
        return out

    def state(self, workspace_id: str, training_id: str) -> tuple[TrainingState, ModelInfo | None]:
        """Where the training is, and its model record once settled."""
        found = self.view(workspace_id, training_id)
        return found.state, found.model

    def cancel(self, workspace_id: str, training_id: str) -> Expired:
        """Cancel a training that awaits its predictions (or corrected ones): its credit comes back.

        Raises:
            NotFoundError: no such training in this workspace.
            ConflictError: it is being judged or has ended.
        """
        self._doc(workspace_id, training_id)  # not found: another workspace's, or none
        return cancel_training(self.engine, workspace_id, training_id,
                               trainings_dir=self.trainings_dir, words=self.words)

    def list_ids(self, workspace_id: str) -> list[str]:
        """The workspace's trainings (drafts included, not one whose charge never committed), sorted by id.

        The folder of every workspace's trainings is one directory; which workspace a folder
        belongs to is read from its manifest once and kept by the folder's name, inode and
        change time (a manifest never changes its workspace; a folder removed and made again,
        or whose files changed, is read again).
        A list then costs one listing of the directory, not a manifest read per training of
        every workspace: beside 20,000 trainings of other workspaces a workspace's list took
        1.8 s, now 0.09 s (docs/benchmarks.md, "Listing a workspace's trainings"). A folder whose
        manifest cannot be read (being written, or broken) is not kept, and is read again next time.
        """
        root = self.trainings_dir
        try:
            entries = list(os.scandir(root))
        except FileNotFoundError:
            return []
        known = self._owners
        owners: dict[tuple[str, int, int], tuple[str, bool]] = {}
        out: list[str] = []
        drafts: list[str] = []
        for entry in entries:
            try:
                if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                key = (entry.name, entry.inode(), entry.stat(follow_symlinks=False).st_ctime_ns)
            except OSError:  # removed since the listing
                continue
            owner = known.get(key) or self._owner(entry.name)
            if owner is None:
                continue
            owners[key] = owner
            if owner[0] == workspace_id:
                (drafts if owner[1] else out).append(entry.name)
        self._owners = owners  # only folders there now: a removed or changed one is dropped
        uncommitted = never_committed(self.engine, drafts)  # a creation whose charge never committed
        return sorted(out + [t for t in drafts if t not in uncommitted])

    def _owner(self, training_id: str) -> tuple[str, bool] | None:
        """The workspace a training folder's manifest (or draft) names, and whether it is a
        draft; None when unreadable."""
        found = self._read(training_id)
        owner = None if found is None else found[0].get("workspace_id")
        return (owner, found[2]) if isinstance(owner, str) and found is not None else None

    def split_json(self, workspace_id: str, training_id: str) -> bytes:
        """The training's split as ``GET /v1/trainings/{id}/split`` answers it (JSON): computed
        once and stored in its folder (``split.json.gz``, :mod:`typestrict_pipeline.api.splits`),
        read from there while its inputs (the dataset's bytes, the training's settings) are
        unchanged."""
        from typestrict_pipeline.api.splits import split_json

        doc, folder, _ = self._doc(workspace_id, training_id)
        return split_json(training_id, self.manifest(workspace_id, training_id), doc, folder)

    def split(self, workspace_id: str, training_id: str) -> SplitView:
        """The split of every decision, and the ids the model may be trained on (the stored
        split, :meth:`split_json`)."""
        got = json.loads(self.split_json(workspace_id, training_id))
        return SplitView(
            training_id=training_id, training_ids=tuple(got["training_ids"]),
            training_ids_sha256=got["training_ids_sha256"],
            not_for_training=tuple(got["not_for_training"]), decisions=tuple(got["decisions"]),
        )

    # --- submit ------------------------------------------------------------------------------

    def model_file_target(self, workspace_id: str, training_id: str, name: str) -> Path:
        """Where the trained model's file ``name`` is stored: checked before its upload is read
        (and again before it is stored), so an upload to a training that does not exist or
        takes no more files is refused before one byte of it is read.

        Raises:
            NotFoundError: no such training in the workspace.
            ConflictError: its predictions were submitted already.
        """
        _, folder, draft = self._doc(workspace_id, training_id)
        status = training_status(self.engine, training_id)
        if (status is not None and not status.state.accepts_submission) or (status is None and not draft):
            raise ConflictError(
                f"expected training {training_id!r} to await its predictions, got one already "
                "submitted. Model files are uploaded before the predictions"
            )
        return folder / MODEL_FOLDER / check_name(name)

    def put_model_file(self, workspace_id: str, training_id: str, name: str, staged: StagedFile) -> Path:
        """Store one file of the trained model (only before its predictions are accepted), from
        its staged upload (:meth:`staging`)."""
        target = self.model_file_target(workspace_id, training_id, name)
        with self.storage_lock(workspace_id):
            self.check_storage(workspace_id, files=1, size=staged.size, replaces=[target])
            with disk_room("store the model's file"):
                return staged.commit(target)

    def staging(self, workspace_id: str) -> Path:
        """The folder an upload of the workspace is written to before it is checked and moved in
        place (``<home>/workspaces/<workspace>/.uploads``: on the home's file system, outside the
        folders its storage quota counts). A file left there by a server killed mid-upload is
        removed once it is a day old: by the workspace's next upload, or by the running server's
        hourly :func:`sweep_stale_uploads`, whichever comes first."""
        folder = self.area(workspace_id).root.parent / UPLOAD_STAGING
        _sweep_staged(folder, time.time())
        return folder

    def submit(self, workspace_id: str, training_id: str, predictions_jsonl: bytes,
               trained_on: str | None, stated_ids: tuple[bool, Sequence[str]] | None = None, *,
               source: str = SUBMISSION_SOURCE,
               model_files: Sequence[tuple[str, bytes]] = ()) -> TrainingManifest:
        """:meth:`_submit` under the workspace's :meth:`storage_lock`, from the quota's check of
        the staged files (predictions, stated ids, model files) to their rename."""
        check_row_bound(predictions_jsonl, source=source, fix=self.past_row_bound(training_id))
        with self.storage_lock(workspace_id):
            return self._submit(workspace_id, training_id, predictions_jsonl, trained_on, stated_ids,
                                source=source, model_files=model_files)

    def past_row_bound(self, training_id: str) -> str:
        """What to do about predictions past :data:`~typestrict_pipeline.refund.manifest.MAX_PREDICTION_ROWS`,
        in the door's words (what to send instead; nothing was stored)."""
        return (f"{self.words.say(self.words.test_rows, training_id)}; "
                f"{_nothing_stored(self.words, training_id)}")

    def _submit(self, workspace_id: str, training_id: str, predictions_jsonl: bytes,
                trained_on: str | None, stated_ids: tuple[bool, Sequence[str]] | None = None, *,
                source: str = SUBMISSION_SOURCE,
                model_files: Sequence[tuple[str, bytes]] = ()) -> TrainingManifest:
        """Check the model's predictions against the split, then hand the training to its verdict.

        Refused before anything is stored or any claim is taken: predictions that are not valid
        probabilities, that miss a test example of a decision, that name ids or decisions the
        training does not have (the message counts each kind and names the first ids), or a
        statement of what the model was trained on that the split refuses: ``trained_on_sha256``
        that is not the split's, or ``stated_ids`` ((hashed, values): the ids or their SHA-256,
        any subset of the training rows) naming a test, excluded or unknown id (counted, the
        first named). Accepted: under the training's claim (a lease that expires with its
        process), the state moves to ``judging`` and the predictions, the stated ids
        (``trained_on.txt``, named by the manifest's ``training.trained_on``), the
        ``model_files`` sent with them (name, bytes: the console's form) and the manifest are
        written in that transaction, the manifest last; ``training_sensor`` picks it up. A
        training in ``failed`` accepts corrected predictions the same way. Messages name the
        predictions as ``source`` (the request's body; the CLI's file) and the stated ids as the
        request's field, never a file of the server.

        Raises:
            ConflictError: the training accepts no predictions now (judging or ended), or
                another submission of it is in progress.
            PredictionsError, TrainedOnError, ManifestError, InputError: refused; nothing is
                stored (a model file's name included).
            StoreError: the server's disk or store failed.
        """
        doc, folder, draft = self._doc(workspace_id, training_id)
        status = training_status(self.engine, training_id)
        if status is not None:
            check_accepts_submission(self.engine, training_id, self.words)
        elif not draft:
            raise _already_submitted(training_id, self.words)
        names = _model_names(model_files)
        if model_files:
            self.check_storage(workspace_id, files=len(names), size=sum(len(data) for _, data in model_files),
                               replaces=[folder / MODEL_FOLDER / n for n in names])
        if stated_ids is not None:
            _check_stated(*stated_ids)
        if trained_on is not None:
            doc["training"] = {**doc["training"], "trained_on_sha256": trained_on}
        token = secrets.token_hex(4)
        staged = _Staged(folder, token)
        if stated_ids is not None:  # checked from the staged file; the manifest names the final one
            key = "id_sha256_file" if stated_ids[0] else "ids_file"
            checked = {**doc, "training": {**doc["training"], "trained_on": {key: staged.ids.name}}}
            doc["training"] = {**doc["training"], "trained_on": {key: TRAINED_ON_FILE}}
            manifest = parse_manifest(checked, source="request", base_dir=folder)
        else:
            manifest = parse_manifest(doc, source="request", base_dir=folder)
        try:
            staged.write(predictions_jsonl, None if stated_ids is None else stated_ids[1],
                         list(zip(names, (data for _, data in model_files), strict=True)))
            self._check(manifest, staged.predictions, training_id, source)
            added = usage_of_files(staged.paths())  # the training's folder counts: what it adds
            self.check_storage(workspace_id, files=added.files, size=added.size,
                               replaces=[folder / MODEL_PREDICTIONS, folder / TRAINED_ON_FILE,
                                         *(folder / MODEL_FOLDER / n for n in names)])
            lease = acquire(self.engine, LeaseKind.SUBMISSION, training_id, heartbeat_every=None)
            if lease is None:
                raise ConflictError(
                    f"expected no other submission in progress for training {training_id!r}, got "
                    f"one. Wait for it and {self.words.say(self.words.read, training_id)}")
            try:
                self._hand_over(workspace_id, training_id, folder, doc, staged)
            finally:
                lease.release()
        finally:
            staged.remove()  # moved on hand-over; refused: nothing left behind
        return manifest

    def _check(self, manifest: TrainingManifest, staged: Path, training_id: str, source: str) -> None:
        """Every check of a submission, with ``source`` named in the messages."""
        nothing_stored = _nothing_stored(self.words, training_id)
        try:
            predictions = read_predictions(staged, "model")
            predictions = type(predictions)(predictions.system, source, predictions.predictions)
            with reads_within():  # one pass over the dataset: its ids kept for the checks
                dataset = load_dataset(manifest)
                holdouts = split_decisions(dataset)
                attest(manifest.trained_on, manifest.trained_on_sha256, holdouts,
                       training_id=training_id, source="request", words=self.words.trained_on)
                check_file_predictions(predictions, dataset, holdouts, fix=nothing_stored)
        except PredictionsError as exc:
            if exc.file == source:
                raise
            raise PredictionsError(exc.expected, exc.got, f"{exc.fix.rstrip('.')}; {nothing_stored}",
                                   file=source, row=exc.row, column=exc.column) from None

    def _hand_over(self, workspace_id: str, training_id: str, folder: Path, doc: dict[str, Any],
                   staged: _Staged) -> None:
        """Under the claim: read the training again, write its files (the manifest last), then
        move it to ``judging``. No store transaction is held while files are written (a stuck
        disk must not hold the store's lock); if the move is refused (the training expired or
        was cancelled meanwhile), a first submission's manifest is taken back."""
        fresh, _, draft = self._doc(workspace_id, training_id)
        check_accepts_submission(self.engine, training_id, self.words)
        status = training_status(self.engine, training_id)
        if status is None and not draft:
            raise _already_submitted(training_id, self.words)  # another submission handed it over meanwhile
        doc = {**fresh, "training": doc["training"]}
        with disk_room("store the predictions"):
            staged.move_in()
            write_atomic(folder / MANIFEST_NAME, json.dumps(doc, indent=2).encode("utf-8"))
        try:
            run_transaction(self.engine, lambda session: begin_judging_in(
                session, training_id, now=utcnow(), deadlines=self.deadlines, words=self.words))
        except BaseException:
            if draft:
                (folder / MANIFEST_NAME).unlink(missing_ok=True)
            raise
        (folder / DRAFT_NAME).unlink(missing_ok=True)


def _model_names(files: Sequence[tuple[str, bytes]]) -> list[str]:
    """The model files' names, each a plain file name, each once (checked before any is stored)."""
    names = [check_name(name, "model file name") for name, _ in files]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError("each model file once", f"{twice[0]!r} twice",
                         "send each file once (or rename one)")
    return names


def _check_stated(hashed: bool, values: Sequence[str]) -> None:
    """The request's stated ids (``trained_on_ids`` / ``trained_on_id_sha256``), each checked by
    the rule a ``trained_on.txt`` line is, the field and the item named.

    >>> _check_stated(False, ["r1", "\u202er2"])
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: field 'trained_on_ids.1': expected an id (printable text of 1 to 1000 characters), got '\u202er2'. State the ids of the split's training rows, as written there.
    """
    field = "trained_on_id_sha256" if hashed else "trained_on_ids"
    for i, value in enumerate(values):
        if not stated_value_ok(value, hashed=hashed):
            raise InputError(stated_value_kind(hashed=hashed), repr(value[:80]),
                             "state the ids of the split's training rows, as written there",
                             file=f"field '{field}.{i}'")


class _Staged:
    """A submission's files, written beside their places under names no reader takes, moved
    into place on hand-over, removed otherwise."""

    def __init__(self, folder: Path, token: str) -> None:
        self.folder = folder
        self.predictions = folder / "predictions" / f".incoming-{token}.jsonl"
        self.ids = folder / f".incoming-{token}-{TRAINED_ON_FILE}"
        self.model = folder / f".incoming-{token}-{MODEL_FOLDER}"
        self.model_names: list[str] = []
        self.has_ids = False

    def write(self, predictions: bytes, ids: Sequence[str] | None,
              model_files: Sequence[tuple[str, bytes]]) -> None:
        if ids is not None:
            with disk_room("store the ids the model was trained on"):
                write_atomic(self.ids, ("\n".join(ids) + "\n").encode("utf-8"))
            self.has_ids = True
        with disk_room("store the predictions"):
            write_atomic(self.predictions, predictions)
        with disk_room("store the model's file"):
            for name, data in model_files:
                write_atomic(self.model / name, data)
                self.model_names.append(name)

    def paths(self) -> list[Path]:
        """The files staged so far."""
        return [self.predictions, *([self.ids] if self.has_ids else []),
                *(self.model / name for name in self.model_names)]

    def move_in(self) -> None:
        os.replace(self.predictions, self.folder / MODEL_PREDICTIONS)
        if self.has_ids:
            os.replace(self.ids, self.folder / TRAINED_ON_FILE)
        for name in self.model_names:
            (self.folder / MODEL_FOLDER).mkdir(exist_ok=True)
            os.replace(self.model / name, self.folder / MODEL_FOLDER / name)

    def remove(self) -> None:
        self.predictions.unlink(missing_ok=True)
        self.ids.unlink(missing_ok=True)
        shutil.rmtree(self.model, ignore_errors=True)
