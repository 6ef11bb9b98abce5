"""Trained on the training rows only: the SHA-256 a training states, checked against the split.

A training may state ``training.trained_on_sha256`` in its manifest (the API's
``POST /v1/trainings/{id}/predictions`` writes it there): the SHA-256 of the ids the model was
trained on, in one canonical form,

    SHA-256( UTF-8( "\\n".join(sorted(ids)) ) )

ids sorted by Unicode code point (Python's ``sorted`` on ``str``), each once, joined by a single
line feed, no final newline. The ids that may be trained on are
:func:`~typestrict_pipeline.refund.holdout.training_ids`: ``train`` in every decision's split.
:func:`check_trained_on` compares the two before anything is measured; a mismatch stops the
verdict (a model that saw test rows must not be judged).

>>> trained_on_sha256(["b", "a"]) == trained_on_sha256(["a", "b"])
True
>>> trained_on_sha256(["a", "b"])[:16]
'7e18f737311b2dc3'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from typestrict_pipeline.refund.holdout import Holdout, training_ids
from typestrict_pipeline.refund.manifest import ManifestKeyError

__all__ = ["TrainedOnError", "check_trained_on", "trained_on_sha256"]


class TrainedOnError(ManifestKeyError):
    """The ids a training says it was trained on are not the training rows of its split."""


def trained_on_sha256(ids: Iterable[str]) -> str:
    """SHA-256 (hex) of ``ids`` in the canonical form: unique, sorted, joined by ``"\\n"``, UTF-8."""
    text = "\n".join(sorted(set(ids)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_trained_on(
    claimed: str | None, holdouts: Sequence[Holdout], *, training_id: str, source: str | None = None
) -> None:
    """Refuse a training whose stated ``trained_on_sha256`` is not that of its training rows.

    ``claimed`` None (not stated) passes: the check is opt-in per training.

    Raises:
        TrainedOnError: the digests differ; the message gives both and how to fix it.

    >>> from typestrict_pipeline.refund.holdout import HoldoutRecord, draw_holdout
    >>> h = draw_holdout([HoldoutRecord(str(i), f"t{i}", "ab"[i % 2], None) for i in range(10)],
    ...                  decision="d")
    >>> check_trained_on(trained_on_sha256(training_ids([h])), [h], training_id="t1")
    >>> check_trained_on("0" * 64, [h], training_id="t1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    typestrict_pipeline.refund.trained_on.TrainedOnError: manifest, key 'training.trained_on_sha256': expected the SHA-256 of the 8 training rows of training 't1' (4fdd9c97...), got 0000...0000. Train on exactly the ids listed as training rows by GET /v1/trainings/t1/split ...
    """
    if claimed is None:
        return
    ids = training_ids(holdouts)
    expected = trained_on_sha256(ids)
    if claimed.lower() == expected:
        return
    raise TrainedOnError(
        f"the SHA-256 of the {len(ids)} training rows of training {training_id!r} ({expected})",
        claimed,
        f"train on exactly the ids listed as training rows by GET /v1/trainings/{training_id}/split "
        "(or `training_ids` of the split; canonical form: sorted ids joined by a line feed, "
        "UTF-8), then state that digest; the verdict is not computed for a model that may have "
        "seen test rows",
        file=source or "manifest",
        key="training.trained_on_sha256",
    )
