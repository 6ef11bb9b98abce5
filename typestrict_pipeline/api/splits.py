"""A training's split, computed once and stored with the training (``split.json.gz``).

The split is deterministic from the dataset's bytes and the training's settings
(``docs/method/refund.md``, "The test examples (split)"), and at 1,000,000 rows reading it again
took 10–16 s on every view of ``GET /v1/trainings/{id}/split`` and of the console's training
page. So the first view computes it (the code below is what the route ran on every view) and
writes it into the training's folder, beside its other derived file (``grouping.json``); every
later view, the API's and the console's, reads that file.

**The stored file** is gzip (the ids compress about 4×) of one header line of JSON, then the
split exactly as ``GET /v1/trainings/{id}/split`` answers it (:class:`SplitOut` as JSON). The
header holds the file's format, the **digest of its inputs** (:func:`inputs_sha256`: the
dataset file's SHA-256, the manifest's ``dataset`` and ``decisions`` objects, the training's id,
the split's fraction, cap and seed domain, and the split's own source code) and the SHA-256
of the body. A stored split is
served only when its format and inputs digest are the ones computed now and its body has its
SHA-256; otherwise (the dataset file replaced, a setting changed, the split's code changed, a
damaged or partial file) it is computed again and written again. It is written
atomically (a temporary file, fsync, rename), so a reader sees the old file or the new one.

Retention deletes it with the rest of the training's data (it lists ids: customer data).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from typestrict_pipeline.api.schemas import DecisionSplit, GroupingWarningOut, SplitOut
from typestrict_pipeline.files import write_atomic
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.grouping import resampling_line, scan_dataset
from typestrict_pipeline.refund.holdout import (
    SEED_DOMAIN,
    TEST_CAP,
    TEST_FRACTION,
    Holdout,
    split_decisions,
    training_mask,
)
from typestrict_pipeline.refund.manifest import TrainingManifest
from typestrict_pipeline.refund.runreads import reads_within
from typestrict_pipeline.refund.trained_on import trained_on_sha256
from typestrict_pipeline.refund.types import Role

__all__ = ["CANONICAL_FORM", "SPLIT_FORMAT", "SPLIT_NAME", "compute_split", "inputs_sha256",
           "read_stored", "split_json", "split_roles", "write_stored"]

SPLIT_NAME = "split.json.gz"
"""The stored split, in the training's folder."""
SPLIT_FORMAT = 1
"""The stored file's format (the split's code is in the inputs digest on its own)."""
CANONICAL_FORM = 'SHA-256 of UTF-8 "\\n".join(sorted(training_ids)), no final newline'


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a MiB at a time."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


_CODE = ("api/splits.py", "api/schemas.py", "refund/holdout.py", "refund/splitrows.py",
         "refund/rowdigest.py", "refund/rowseed.py", "refund/dataset.py", "refund/cells.py",
         "refund/table.py", "refund/sources.py", "refund/runreads.py", "refund/spill.py",
         "refund/grouping.py", "refund/manifest.py", "refund/types.py", "refund/trained_on.py")
"""The source files (under ``typestrict_pipeline/``) whose code computes the stored split."""


@functools.cache
def code_sha256() -> str:
    """The SHA-256 of the split's own code (:data:`_CODE`, read once per process): a server
    running changed code computes every stored split again on its next view, so a change of the
    algorithm cannot leave an old split served (no version number to remember to bump)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for name in _CODE:
        h.update(name.encode("utf-8") + b"\0" + (root / name).read_bytes() + b"\0")
    return h.hexdigest()


def inputs_sha256(training_id: str, doc: Mapping[str, Any], dataset_path: Path) -> str:
    """The digest of everything the stored split depends on: the dataset file's bytes, the
    manifest's ``dataset`` object (its ``path`` aside: the bytes are what counts) and
    ``decisions``, the training's id (the answer names it), the split's fraction, cap and seed
    domain, :data:`SPLIT_FORMAT` and the split's code (:func:`code_sha256`).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.csv"
    >>> _ = p.write_bytes(b"id,text\\n1,a\\n")
    >>> doc = {"dataset": {"path": "d.csv", "columns": {"id": "id"}}, "decisions": [{"name": "s"}]}
    >>> a = inputs_sha256("tr_1", doc, p)
    >>> a == inputs_sha256("tr_1", {**doc, "options": {"keep_if_loses": True}}, p)
    True
    >>> a == inputs_sha256("tr_1", {**doc, "decisions": [{"name": "t"}]}, p)
    False
    >>> _ = p.write_bytes(b"id,text\\n1,b\\n")
    >>> a == inputs_sha256("tr_1", doc, p)
    False
    """
    dataset = {k: v for k, v in dict(doc.get("dataset") or {}).items() if k != "path"}
    inputs = {
        "format": SPLIT_FORMAT, "seed_domain": SEED_DOMAIN.decode("utf-8", "replace"),
        "fraction": [TEST_FRACTION.numerator, TEST_FRACTION.denominator], "cap": TEST_CAP,
        "training_id": training_id, "dataset": dataset, "decisions": doc.get("decisions"),
        "dataset_sha256": file_sha256(dataset_path), "code_sha256": code_sha256(),
    }
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_roles(h: Holdout) -> dict[str, Any]:
    """One decision's split as plain data: counts, and the ids held out (test and excluded)."""
    s = h.summary
    return {
        "decision": h.decision, "source": s.source.value, "n_rows": s.n_rows,
        "n_labeled": s.n_labeled, "n_test": s.n_test, "n_train": s.n_train,
        "n_excluded": s.n_excluded, "grouped": s.grouped, "capped": s.capped,
        "test_ids": list(h.ids(Role.TEST)), "excluded_ids": list(h.ids(Role.EXCLUDED)),
    }


def _split_ids(holdouts: Sequence[Holdout]) -> tuple[list[str], list[str]]:
    """The ids that may be trained on (train in every decision) and the others, each sorted: the
    id column read once, a batch at a time, each id to one of the two lists (no list of every
    id, no set of them: the ids are unique, validated with the dataset)."""
    if not holdouts:
        return [], []
    mask = training_mask(holdouts)
    train: list[str] = []
    held: list[str] = []
    start = 0
    for batch in holdouts[0].data.id_source.batches():
        keep = pa.array(mask[start:start + len(batch)])
        train += batch.filter(keep).to_pylist()
        held += batch.filter(pc.invert(keep)).to_pylist()
        start += len(batch)
    train.sort()
    held.sort()
    return train, held


def compute_split(training_id: str, manifest: TrainingManifest) -> SplitOut:
    """The split of every decision as ``GET /v1/trainings/{id}/split`` answers it, computed
    from the dataset (the whole file read, every decision split, the look for groups).

    The ids and texts read while the file is validated are kept for the rest of the
    computation (``refund.runreads.reads_within``, 64 MiB at most): the draw's texts, the test
    rows' ids and every id sorted read memory, not the file again (at 1,000,000 rows of short
    texts: two passes over the file instead of five)."""
    with reads_within():
        holdouts = split_decisions(load_dataset(manifest))
        train, held = _split_ids(holdouts)
        roles = [DecisionSplit(**split_roles(h)) for h in holdouts]
    group = manifest.dataset.columns.group
    scan = scan_dataset(manifest)
    return SplitOut(
        training_id=training_id, training_ids=train,
        training_ids_sha256=trained_on_sha256(train), canonical_form=CANONICAL_FORM,
        not_for_training=held,
        decisions=roles,
        group=group,
        resampling_unit=resampling_line(
            [(h.decision, "example" if group is None else "group", None) for h in holdouts], group),
        grouping_warnings=[GroupingWarningOut(**w.as_dict()) for w in scan.warnings],
    )


def read_stored(path: Path, digest: str) -> bytes | None:
    """The stored split's body (:class:`SplitOut` as JSON) when ``path`` holds one of this
    format, computed from inputs of ``digest``, whole (its body's SHA-256 checked); else None
    (no file, another format or inputs, damaged, cut short)."""
    try:
        data = gzip.decompress(path.read_bytes())
        head, _, body = data.partition(b"\n")
        header = json.loads(head)
    except (OSError, EOFError, zlib.error, ValueError):
        return None
    if (not isinstance(header, dict) or header.get("format") != SPLIT_FORMAT
            or header.get("inputs_sha256") != digest
            or header.get("body_sha256") != hashlib.sha256(body).hexdigest()):
        return None
    return body


def write_stored(path: Path, digest: str, body: bytes) -> None:
    """Store ``body`` as the split computed from inputs of ``digest``, atomically."""
    header = {"format": SPLIT_FORMAT, "inputs_sha256": digest,
              "body_sha256": hashlib.sha256(body).hexdigest()}
    data = json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n" + body
    write_atomic(path, gzip.compress(data, compresslevel=1, mtime=0))  # 3x faster than 6, 5% larger


def split_json(training_id: str, manifest: TrainingManifest, doc: Mapping[str, Any],
               folder: Path) -> bytes:
    """The training's split (:class:`SplitOut` as JSON): the stored one when its inputs are
    unchanged, else computed and stored (a failure to store it is not the reader's problem:
    the split is still answered, and computed again next time)."""
    path = folder / SPLIT_NAME
    try:
        digest = inputs_sha256(training_id, doc, manifest.dataset.path)
    except OSError:  # no dataset to read: the split's own reading says so, as it always did
        return compute_split(training_id, manifest).model_dump_json().encode("utf-8")
    body = read_stored(path, digest)
    if body is not None:
        return body
    body = compute_split(training_id, manifest).model_dump_json().encode("utf-8")
    with contextlib.suppress(OSError):
        write_stored(path, digest, body)
    return body
