"""Trainings created through the API: the workspace's own area, drafts, splits, submissions.

Plain typed Python over files and the store (no FastAPI): the routes in ``api/routes`` only call
it. Where things are, under ``TYPESTRICT_HOME`` (``home``):

* ``workspaces/<workspace>/files/<name>``: the workspace's own area. Uploads land here, and a
  training's dataset may be referenced from here (a relative path, confined to the area).
* ``trainings/<training_id>/``: one folder per training, the same folder the refund pipeline and
  ``training_sensor`` read. A training created through the API starts as a **draft**
  (``api-draft.json``: the full manifest, its dataset copied beside it as ``dataset.<ext>``).
  The split can be read at once. When the model's predictions are posted they are written to
  ``predictions/model.jsonl`` and the manifest to ``manifest.json`` (atomically, last): from
  then on ``training_sensor`` sees it like any other training and requests its ``verdict_job``.

Every object is scoped to its workspace: a training of another workspace is "not found", the same
answer as one that does not exist.
"""

from __future__ import annotations

import enum
import json
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline.credits import CreditLedger, get_model
from typestrict_pipeline.credits.models import ModelInfo
from typestrict_pipeline.errors import ConflictError, InputError, ManifestError, NotFoundError
from typestrict_pipeline.files import read_json_file, write_atomic
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import Holdout, split_decisions, training_ids
from typestrict_pipeline.refund.manifest import TrainingManifest, parse_manifest
from typestrict_pipeline.refund.predictions import read_predictions
from typestrict_pipeline.refund.trained_on import attest, trained_on_sha256
from typestrict_pipeline.refund.types import Role

DRAFT_NAME = "api-draft.json"
MANIFEST_NAME = "manifest.json"
MODEL_PREDICTIONS = "predictions/model.jsonl"
TRAINED_ON_FILE = "trained_on.txt"
MODEL_FOLDER = "model"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_DATASET_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".parquet", ".pq", ".jsonl", ".ndjson")


class TrainingState(enum.StrEnum):
    """Where a training is, as the API shows it.

    Attributes:
        AWAITING_PREDICTIONS: created; its split can be read; the model's predictions are due.
        JUDGING: predictions received, manifest written; waiting for its verdict run.
        SETTLED: its verdict is settled on the ledger; the model record exists.
    """

    AWAITING_PREDICTIONS = "awaiting_predictions"
    JUDGING = "judging"
    SETTLED = "settled"


def _already_submitted(training_id: str) -> ConflictError:
    return ConflictError(
        f"expected training {training_id!r} to await its predictions, got them already "
        "submitted. Its verdict follows; read GET /v1/trainings/{id}"
    )


def _not_found(what: str, ident: str) -> NotFoundError:
    return NotFoundError(
        f"expected a {what} with id {ident[:200]!r} in this workspace, got none. Check the id "
        f"(list them with the API) and that you use this workspace's key"
    )


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


@dataclass(frozen=True)
class WorkspaceArea:
    """A workspace's own folder of files (``<home>/workspaces/<workspace>/files``)."""

    home: Path
    workspace_id: str

    @property
    def root(self) -> Path:
        return self.home / "workspaces" / self.workspace_id / "files"

    def resolve(self, written: str) -> Path:
        """The file ``written`` (relative, ``/``-separated) inside the area, confined to it.

        Raises:
            InputError: an absolute path, ``..``, a backslash, or a link leading outside.
            NotFoundError: no such file.
        """
        pure = PurePosixPath(written)
        if (not written or "\\" in written or "\x00" in written or pure.is_absolute()
                or any(p in ("..", ".", "") for p in written.split("/"))):
            raise InputError(
                "a path relative to the workspace's files (e.g. 'data/reviews.csv'), without '..'",
                repr(written[:200]), "upload the file with PUT /v1/files/{name} and use its name",
                column="dataset.path",
            )
        for part in pure.parts:
            check_name(part)
        root = self.root.resolve()
        target = (root / Path(*pure.parts)).resolve()
        if not target.is_relative_to(root):
            raise InputError("a file inside the workspace's files", repr(written[:200]),
                             "do not link outside the workspace's area", column="dataset.path")
        if not target.is_file():
            raise _not_found("file", written)
        return target

    def save(self, name: str, data: bytes) -> Path:
        """Store an upload as ``name`` (one plain name) atomically; replaces a file of that name."""
        check_name(name)
        return write_atomic(self.root / name, data)

    def listing(self) -> list[tuple[str, int]]:
        """``(name, size)`` of every file in the area, sorted."""
        root = self.root
        if not root.is_dir():
            return []
        return sorted((p.relative_to(root).as_posix(), p.stat().st_size)
                      for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _suffix(name: str) -> str:
    lower = name.lower()
    for suffix in _DATASET_SUFFIXES:
        if lower.endswith(suffix):
            return suffix
    raise InputError(
        f"a dataset file ending in one of {list(_DATASET_SUFFIXES)}", repr(name[:200]),
        "rename the file to say its format", column="dataset.path",
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
class SplitView:
    """A training's split, before training: what may be trained on and what is held out."""

    training_id: str
    training_ids: tuple[str, ...]
    training_ids_sha256: str
    not_for_training: tuple[str, ...]
    decisions: tuple[Holdout, ...]


class TrainingStore:
    """Trainings of every workspace under ``home`` (the same folder ``training_sensor`` watches).

    Args:
        home: ``TYPESTRICT_HOME``.
        engine: the domain store (credits and model records).
        jev_source: the manifest ``predictions.jev`` value for trainings made here (the server's
            Jev; customers never choose it). None: creating a training is refused.
    """

    def __init__(self, home: Path, engine: Engine, jev_source: Mapping[str, Any] | None) -> None:
        self.home = home
        self.engine = engine
        self.jev_source = dict(jev_source) if jev_source is not None else None

    @property
    def trainings_dir(self) -> Path:
        return self.home / "trainings"

    def area(self, workspace_id: str) -> WorkspaceArea:
        return WorkspaceArea(self.home, workspace_id)

    def folder(self, training_id: str) -> Path:
        return self.trainings_dir / check_name(training_id, "training id")

    # --- create ------------------------------------------------------------------------------

    def _manifest_doc(self, workspace_id: str, training_id: str, req: TrainingRequest,
                      dataset_name: str) -> dict[str, Any]:
        if self.jev_source is None:
            raise ConflictError(
                "expected this server to be configured with Jev's source, got none. The operator "
                "starts `typestrict api` with --jev-source (a manifest predictions.jev object)"
            )
        dataset = dict(req.dataset)
        dataset["path"] = dataset_name
        return {
            "manifest_version": 1, "training_id": training_id, "workspace_id": workspace_id,
            "dataset": dataset, "decisions": [dict(d) for d in req.decisions],
            "predictions": {"jev": self.jev_source,
                            "model": {"kind": "file", "path": MODEL_PREDICTIONS}},
            "training": {"status": "succeeded"}, "options": dict(req.options),
        }

    def create(self, workspace_id: str, req: TrainingRequest) -> str:
        """Validate the manifest and the dataset, charge the training's credit, write the draft.

        Nothing is charged or written unless the manifest and the dataset are valid.

        Raises:
            ManifestError, DatasetError, NotEnoughDataError: the request is not a valid training.
            InsufficientCreditsError: the workspace has no credit left.
        """
        written = req.dataset.get("path") if isinstance(req.dataset, Mapping) else None
        if not isinstance(written, str):
            raise InputError("dataset.path: a file in the workspace's files", repr(written),
                             "upload the dataset with PUT /v1/files/{name} and name it here")
        source = self.area(workspace_id).resolve(written)
        training_id = "tr_" + secrets.token_hex(8)
        folder = self.folder(training_id)
        staging = self.trainings_dir / f".staging-{training_id}"
        staging.mkdir(parents=True)
        try:
            dataset_name = "dataset" + _suffix(source.name)
            shutil.copyfile(source, staging / dataset_name)
            doc = self._manifest_doc(workspace_id, training_id, req, dataset_name)
            jev = doc["predictions"]["jev"]
            if isinstance(jev, dict) and jev.get("kind") == "file":  # a recorded Jev: copied in,
                shutil.copyfile(Path(str(jev.get("path"))), staging / "jev.jsonl")  # paths stay inside
                doc["predictions"]["jev"] = {**jev, "path": "jev.jsonl"}
            manifest = parse_manifest(doc, source="request", base_dir=staging)
            load_dataset(manifest)  # every dataset check, before anything is charged
            CreditLedger(self.engine).spend(workspace_id, training_id)
            write_atomic(staging / DRAFT_NAME, json.dumps(doc, indent=2).encode("utf-8"))
            os.replace(staging, folder)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return training_id

    # --- read --------------------------------------------------------------------------------

    def _doc(self, workspace_id: str, training_id: str) -> tuple[dict[str, Any], Path, bool]:
        try:
            folder = self.folder(training_id)
        except InputError:
            raise _not_found("training", training_id) from None
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
                    break  # not readable: never shown, never a 500
                if not isinstance(doc, dict) or doc.get("workspace_id") != workspace_id:
                    break
                return doc, folder, draft
        raise _not_found("training", training_id)

    def manifest(self, workspace_id: str, training_id: str) -> TrainingManifest:
        """The training's manifest (draft or final), if it belongs to ``workspace_id``."""
        doc, folder, _ = self._doc(workspace_id, training_id)
        return parse_manifest(doc, source=str(folder / MANIFEST_NAME), base_dir=folder)

    def model(self, workspace_id: str, model_id: str) -> ModelInfo:
        """The model record of ``model_id`` if it belongs to ``workspace_id`` (else not found)."""
        try:
            info = get_model(self.engine, model_id)
        except NotFoundError:
            raise _not_found("model", model_id) from None
        if info.workspace_id != workspace_id:
            raise _not_found("model", model_id)
        return info

    def state(self, workspace_id: str, training_id: str) -> tuple[TrainingState, ModelInfo | None]:
        """Where the training is, and its model record once settled."""
        _, _, draft = self._doc(workspace_id, training_id)
        if draft:
            return TrainingState.AWAITING_PREDICTIONS, None
        try:
            return TrainingState.SETTLED, self.model(workspace_id, training_id)
        except NotFoundError:
            return TrainingState.JUDGING, None

    def list_ids(self, workspace_id: str) -> list[str]:
        """The workspace's trainings (drafts included), sorted by id."""
        root = self.trainings_dir
        if not root.is_dir():
            return []
        out = []
        for p in sorted(root.iterdir()):
            if p.name.startswith(".") or not p.is_dir():
                continue
            try:
                self._doc(workspace_id, p.name)
            except (NotFoundError, ValueError, OSError):
                continue
            out.append(p.name)
        return out

    def split(self, workspace_id: str, training_id: str) -> SplitView:
        """The split of every decision, and the ids the model may be trained on."""
        manifest = self.manifest(workspace_id, training_id)
        holdouts = split_decisions(load_dataset(manifest))
        train = tuple(sorted(training_ids(holdouts)))
        everything = {r.id for h in holdouts for r in h.rows}
        return SplitView(
            training_id=training_id, training_ids=train,
            training_ids_sha256=trained_on_sha256(train),
            not_for_training=tuple(sorted(everything - set(train))), decisions=holdouts,
        )

    # --- submit ------------------------------------------------------------------------------

    def put_model_file(self, workspace_id: str, training_id: str, name: str, data: bytes) -> Path:
        """Store one file of the trained model (only before its predictions are posted)."""
        _, folder, draft = self._doc(workspace_id, training_id)
        if not draft:
            raise ConflictError(
                f"expected training {training_id!r} to await its predictions, got one already "
                "submitted. Model files are uploaded before the predictions"
            )
        return write_atomic(folder / MODEL_FOLDER / check_name(name), data)

    def submit(self, workspace_id: str, training_id: str, predictions_jsonl: bytes,
               trained_on: str | None,
               stated_ids: tuple[bool, Sequence[str]] | None = None) -> TrainingManifest:
        """Record the model's predictions and hand the training to the verdict pipeline.

        The predictions are read with the pipeline's own reader, what the training states it
        was trained on (``trained_on_sha256``, or ``stated_ids``: (hashed, values) written to
        ``trained_on.txt`` and named in the manifest) is checked against the split (an id that
        is not a training row is refused), then the manifest is written last, atomically:
        ``training_sensor`` picks it up.

        Raises:
            ConflictError: predictions were already submitted.
            PredictionsError, TrainedOnError, ManifestError: refused, nothing is handed over.
        """
        doc, folder, draft = self._doc(workspace_id, training_id)
        if not draft:
            raise _already_submitted(training_id)
        claim = folder / ".submitting"
        try:  # one submission at a time: a concurrent one is a conflict, not a mix of two
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            raise ConflictError(
                f"expected no other submission in progress for training {training_id!r}, got one. "
                "Wait for it and read GET /v1/trainings/{id}"
            ) from None
        staged = folder / "predictions" / f".incoming-{secrets.token_hex(4)}.jsonl"
        staged_ids = folder / TRAINED_ON_FILE
        try:
            # Read again under the claim: a submission that held it since the read above may
            # have handed the training over already (the claim is gone once it has).
            doc, folder, draft = self._doc(workspace_id, training_id)
            if not draft:
                raise _already_submitted(training_id)
            if trained_on is not None:
                doc["training"] = {**doc["training"], "trained_on_sha256": trained_on}
            if stated_ids is not None:
                hashed, values = stated_ids
                write_atomic(staged_ids, ("\n".join(values) + "\n").encode("utf-8"))
                key = "id_sha256_file" if hashed else "ids_file"
                doc["training"] = {**doc["training"], "trained_on": {key: TRAINED_ON_FILE}}
            manifest = parse_manifest(doc, source="request", base_dir=folder)
            write_atomic(staged, predictions_jsonl)
            read_predictions(staged, "model")
            holdouts = split_decisions(load_dataset(manifest))
            attest(manifest.trained_on, manifest.trained_on_sha256, holdouts,
                   training_id=training_id, source="request")
            os.replace(staged, folder / MODEL_PREDICTIONS)
            write_atomic(folder / MANIFEST_NAME, json.dumps(doc, indent=2).encode("utf-8"))
            (folder / DRAFT_NAME).unlink(missing_ok=True)
        except BaseException:
            staged_ids.unlink(missing_ok=True)  # refused: no statement left behind
            raise
        finally:
            staged.unlink(missing_ok=True)
            claim.unlink(missing_ok=True)
        return manifest


def split_roles(h: Holdout) -> dict[str, Any]:
    """One decision's split as plain data: counts, and the ids held out (test and excluded)."""
    s = h.summary
    return {
        "decision": h.decision, "source": s.source.value, "n_rows": s.n_rows,
        "n_labeled": s.n_labeled, "n_test": s.n_test, "n_train": s.n_train,
        "n_excluded": s.n_excluded, "grouped": s.grouped, "capped": s.capped,
        "test_ids": list(h.ids(Role.TEST)), "excluded_ids": list(h.ids(Role.EXCLUDED)),
    }
