"""What the model was trained on: a statement the product checks against the split, and records.

A training may state the ids its model was trained on, in the manifest's ``training.trained_on``
(the API's ``POST /v1/trainings/{id}/predictions`` writes it there from ``trained_on_ids`` or
``trained_on_id_sha256``): the ids themselves, or each id's SHA-256 under the audit's id domain,

    id_sha256 = SHA-256( b"typestrict-refund-id-v1\\0" + UTF-8(id) )

as a list or as a file of one value per line. :func:`attest` checks, before anything is
measured, that every stated id is one the model may be trained on (``train`` in every decision's
split: :func:`~typestrict_pipeline.refund.holdout.training_ids`), so none is a test row or an
excluded row of any decision; any subset of the training rows is fine. It refuses otherwise, with
the count and the first offending ids. The audit (format 3) records the result: ``"attested"``
with the number of distinct ids and the digest of the stated set,

    ids_sha256 = SHA-256( b"typestrict-refund-trained-on-v1\\0" + sorted 32-byte id_sha256, each once )

or ``"not stated"``. The customer can recompute that digest from their own list of ids.

The first form, ``training.trained_on_sha256``, still works: the SHA-256 of *all* the split's
training ids in the canonical form below; it attests the whole training set.

    SHA-256( UTF-8( "\\n".join(sorted(ids)) ) )

>>> trained_on_sha256(["b", "a"]) == trained_on_sha256(["a", "b"])
True
>>> trained_on_sha256(["a", "b"])[:16]
'7e18f737311b2dc3'
>>> id_sha256("row-1")[:16]
'a6ba621b9c047139'
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from typestrict_pipeline.refund.holdout import Holdout, training_ids
from typestrict_pipeline.refund.manifest import (
    MAX_STATED_IDS,
    ManifestKeyError,
    TrainedOnStatement,
)
from typestrict_pipeline.refund.types import Role

__all__ = [
    "API_TRAINED_ON",
    "CLI_TRAINED_ON",
    "ID_DOMAIN",
    "MANIFEST_TRAINED_ON",
    "TRAINED_ON_DOMAIN",
    "Attestation",
    "AttestationStatus",
    "TrainedOnError",
    "TrainedOnWords",
    "attest",
    "check_trained_on",
    "id_sha256",
    "ids_set_sha256",
    "read_statement",
    "trained_on_sha256",
]

ID_DOMAIN = b"typestrict-refund-id-v1\x00"
TRAINED_ON_DOMAIN = b"typestrict-refund-trained-on-v1\x00"
MAX_STATEMENT_BYTES = 1024 * 1024 * 1024
SHOWN = 5


class TrainedOnError(ManifestKeyError):
    """The ids a training says it was trained on are not all training rows of its split.

    ``file`` and ``key`` say where the manifest holds the statement; ``shown``, when given, is
    where the customer wrote it, as the message names it (a request's field, a command's
    option: :attr:`TrainedOnWords`) instead of ``file, key '...'``.
    """


@dataclass(frozen=True)
class TrainedOnWords:
    """How a door names a statement of what the model was trained on: the rule (:func:`attest`,
    :func:`check_trained_on`) is one, for every door; only where the statement was written and
    how to state it right are spelled per door (the manifest's keys, the API's JSON fields and
    routes, the CLI's options and commands). ``{training}`` is replaced by the training's id.

    Attributes:
        digest: where the SHA-256 of all training rows was written (None: the manifest's key,
            after its file).
        ids: where the ids were written (None: the manifest's key).
        id_sha256: where the ids' SHA-256 were written (None: the manifest's key).
        some: what to do instead of the digest when the model was trained on only some rows.
        rows: the split's training rows, as this door lists them.
    """

    digest: str | None
    ids: str | None
    id_sha256: str | None
    some: str
    rows: str

    def place(self, hashed: bool | None) -> str | None:
        """Where a statement was written: ``hashed`` None for the digest of all rows."""
        return self.digest if hashed is None else self.id_sha256 if hashed else self.ids


MANIFEST_TRAINED_ON = TrainedOnWords(
    digest=None, ids=None, id_sha256=None,
    some="a model trained on only some of the training rows states those ids instead "
         "(training.trained_on)",
    rows="the rows GET /v1/trainings/{training}/split lists as training_ids",
)
"""A manifest's words: its file and keys (``docs/manifest.md``)."""

API_TRAINED_ON = TrainedOnWords(
    digest="field 'trained_on_sha256'", ids="field 'trained_on_ids'",
    id_sha256="field 'trained_on_id_sha256'",
    some="a model trained on only some of the training rows states those ids instead "
         "(trained_on_ids, or their SHA-256 in trained_on_id_sha256)",
    rows="the rows GET /v1/trainings/{training}/split lists as training_ids",
)
"""The API's words: the request's JSON fields and its routes (``POST
/v1/trainings/{id}/predictions``)."""

CLI_TRAINED_ON = TrainedOnWords(
    digest="--trained-on-sha256", ids="--trained-on-sha256", id_sha256="--trained-on-sha256",
    some="state the SHA-256 of exactly the training rows of the split, or leave "
         "--trained-on-sha256 out if the model was trained on only some of them",
    rows="the training rows of the split",
)
"""``typestrict training submit``'s words: its options (the CLI states only the digest)."""


class AttestationStatus(enum.StrEnum):
    """Whether the training stated what its model was trained on (and it was checked)."""

    ATTESTED = "attested"
    NOT_STATED = "not stated"


@dataclass(frozen=True)
class Attestation:
    """What the audit records about the training set.

    Attributes:
        status: attested (stated and checked) or not stated.
        n_ids: distinct ids stated (None when not stated).
        ids_sha256: :func:`ids_set_sha256` of the stated ids (None when not stated).
    """

    status: AttestationStatus
    n_ids: int | None = None
    ids_sha256: str | None = None

    def as_audit(self) -> dict[str, Any]:
        """The audit's ``trained_on`` object."""
        return {"status": self.status.value, "n_ids": self.n_ids, "ids_sha256": self.ids_sha256}

    def describe(self) -> str:
        """In words, as the verdict's metadata shows it.

        >>> Attestation(AttestationStatus.NOT_STATED).describe()
        'not stated: the training did not say which ids the model was trained on'
        """
        if self.status is AttestationStatus.NOT_STATED:
            return "not stated: the training did not say which ids the model was trained on"
        return (f"attested: {self.n_ids} id(s), all training rows of the split "
                f"(set SHA-256 {self.ids_sha256})")


NOT_STATED = Attestation(AttestationStatus.NOT_STATED)


def trained_on_sha256(ids: Iterable[str]) -> str:
    """SHA-256 (hex) of ``ids`` in the canonical form: unique, sorted, joined by ``"\\n"``, UTF-8."""
    text = "\n".join(sorted(set(ids)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def id_sha256(ident: str) -> str:
    """One id's SHA-256 under the audit's id domain (lowercase hex)."""
    return hashlib.sha256(ID_DOMAIN + ident.encode("utf-8")).hexdigest()


def ids_set_sha256(id_digests: Iterable[str]) -> str:
    """The digest of a set of ids from their :func:`id_sha256`: each once, sorted as bytes.

    >>> ids_set_sha256([id_sha256("b"), id_sha256("a"), id_sha256("a")]) == ids_set_sha256(
    ...     [id_sha256("a"), id_sha256("b")])
    True
    """
    h = hashlib.sha256(TRAINED_ON_DOMAIN)
    for d in sorted({bytes.fromhex(x) for x in id_digests}):
        h.update(d)
    return h.hexdigest()


def stated_value_ok(value: str, *, hashed: bool) -> bool:
    """Whether one stated value is an id (printable, 1 to 1000 characters) or, ``hashed``, an
    id's SHA-256 (64 lowercase hex): the one rule for a file's lines and the API's lists.

    >>> stated_value_ok("r17", hashed=False), stated_value_ok("\u202er17", hashed=False)
    (True, False)
    """
    ok = bool(value) and len(value) <= 1000 and value.isprintable()
    return ok and (not hashed or (len(value) == 64 and all(c in "0123456789abcdef" for c in value)))


def stated_value_kind(*, hashed: bool) -> str:
    """What :func:`stated_value_ok` expects, in words."""
    return ("an id's SHA-256 (64 lowercase hex)" if hashed
            else "an id (printable text of 1 to 1000 characters)")


def read_statement(statement: TrainedOnStatement, *, source: str) -> tuple[str, ...]:
    """The stated values: the manifest's list, or the file's lines (UTF-8, one per line).

    Raises:
        TrainedOnError: the file cannot be read, is not UTF-8, holds an empty line, a value that
            is not an id (or a SHA-256, when hashed), or too many values; the file and line
            are named.
    """
    if statement.values is not None:
        return statement.values
    assert statement.path is not None
    path = statement.path
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_STATEMENT_BYTES + 1)
    except OSError as exc:
        raise TrainedOnError("a readable file of ids, one per line", f"{path} ({exc.strerror})",
                             "write the file next to the manifest", file=source,
                             key=statement.key) from None
    if len(raw) > MAX_STATEMENT_BYTES:
        raise TrainedOnError(f"a file of at most {MAX_STATEMENT_BYTES} bytes", f"{path} is larger",
                             "state fewer ids (only the rows the model was trained on)",
                             file=source, key=statement.key)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrainedOnError("UTF-8 text", f"undecodable bytes at byte {exc.start} of {path}",
                             "save the file as UTF-8", file=source, key=statement.key) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if not lines or len(lines) > MAX_STATED_IDS:
        raise TrainedOnError(f"1 to {MAX_STATED_IDS:,} ids, one per line", f"{len(lines)} in {path}",
                             "list the ids the model was trained on", file=source,
                             key=statement.key)
    for i, line in enumerate(lines):
        value = line[:-1] if line.endswith("\r") else line
        if not stated_value_ok(value, hashed=statement.hashed):
            what = stated_value_kind(hashed=statement.hashed)
            raise TrainedOnError(f"{what} on every line", f"{value[:80]!r} on line {i + 1} of {path}",
                                 "write one value per line, nothing else", file=source,
                                 key=statement.key)
        lines[i] = value
    return tuple(lines)


def _roles(holdouts: Sequence[Holdout]) -> dict[str, str]:
    """Each id that must not be trained on, with why: a test row, or excluded, and why excluded
    (its group is tested, or it has no answer for that decision), for the first decision that
    says so; a test row first.

    >>> from typestrict_pipeline.refund.holdout import HoldoutRecord, draw_holdout
    >>> h = draw_holdout([HoldoutRecord(f"{g}-{i}", f"t{g}-{i}", None if i == 2 else "ab"[g % 2],
    ...                                 f"G{g}") for g in range(10) for i in range(3)], decision="d")
    >>> sorted(set(_roles([h]).values()))
    ["a test row of 'd'", "excluded from 'd' (it has no answer)", "excluded from 'd' (its group is tested)"]
    """
    out: dict[str, str] = {}
    for h in holdouts:
        rows = h.rows
        tested = {r.unit for r in rows if r.role is Role.TEST}
        for r in rows:
            if r.role is Role.TEST:
                out.setdefault(r.id, f"a test row of {h.decision!r}")
        for r in rows:
            if r.role is Role.EXCLUDED:
                why = "its group is tested" if r.unit in tested else "it has no answer"
                out.setdefault(r.id, f"excluded from {h.decision!r} ({why})")
    return out


def attest(
    statement: TrainedOnStatement | None,
    legacy_sha256: str | None,
    holdouts: Sequence[Holdout],
    *,
    training_id: str,
    source: str | None = None,
    words: TrainedOnWords = MANIFEST_TRAINED_ON,
) -> Attestation:
    """Check what a training states it was trained on; the attestation the audit records.

    Args:
        statement: the stated ids or id digests (``training.trained_on``), or None.
        legacy_sha256: the SHA-256 of all training ids (``training.trained_on_sha256``), or None.
        holdouts: every decision's split.
        training_id: for messages.
        source: the manifest's file, for messages.
        words: the door's words for where the statement was written and what to do
            (:class:`TrainedOnWords`; default: the manifest's keys).

    Returns:
        ``attested`` with the stated set's size and digest, or ``not stated``.

    Raises:
        TrainedOnError: a stated id is not a training row (a test or excluded row of any
            decision, or not in the dataset): the count and the first offending ids are given;
            or the digest of all training ids does not match.

    >>> from typestrict_pipeline.refund.holdout import HoldoutRecord, draw_holdout
    >>> h = draw_holdout([HoldoutRecord(str(i), f"t{i}", "ab"[i % 2], None) for i in range(10)],
    ...                  decision="d")
    >>> train = sorted(training_ids([h]))
    >>> stated = TrainedOnStatement("training.trained_on.ids", False, tuple(train[:3]))
    >>> attest(stated, None, [h], training_id="t1").n_ids
    3
    >>> bad = TrainedOnStatement("training.trained_on.ids", False, (train[0], *h.test_ids, "x"))
    >>> attest(bad, None, [h], training_id="t1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    typestrict_pipeline.refund.trained_on.TrainedOnError: ... got 3 of the 4 stated ids that are not: ...
    """
    where = source or "manifest"
    if legacy_sha256 is None and statement is None:
        return NOT_STATED  # nothing to check: the training rows' ids are not read
    allowed = training_ids(holdouts)
    if legacy_sha256 is not None:
        check_trained_on(legacy_sha256, holdouts, training_id=training_id, source=source,
                         words=words)
        return Attestation(AttestationStatus.ATTESTED, len(allowed),
                           ids_set_sha256(id_sha256(i) for i in allowed))
    assert statement is not None
    values = read_statement(statement, source=where)
    roles = _roles(holdouts)
    if statement.hashed:
        known = {id_sha256(r.id): r.id for h in holdouts for r in h.rows}
        digests = list(dict.fromkeys(values))
        offending = [(known.get(d), d) for d in digests if known.get(d) not in allowed]
    else:
        unique = list(dict.fromkeys(values))
        digests = [id_sha256(i) for i in unique]
        offending = [(i, i) for i in unique if i not in allowed]
    if offending:
        shown = []
        for ident, value in offending[:SHOWN]:
            if ident is None:
                shown.append(f"{value[:16]}… (no id of the dataset has this SHA-256)")
            else:
                shown.append(f"{ident!r} ({roles.get(ident, 'not in the dataset')})")
        more = f", and {len(offending) - SHOWN} more" if len(offending) > SHOWN else ""
        raise TrainedOnError(
            f"ids from the {len(allowed)} training rows of the split of training {training_id!r}",
            f"{len(offending)} of the {len(digests)} stated ids that are not: "
            + "; ".join(shown) + more,
            f"train only on {words.rows.replace('{training}', training_id)}, then state those "
            "ids; the verdict is not computed for a model that may have seen test rows",
            file=where,
            key=statement.key,
            shown=words.place(statement.hashed),
        )
    return Attestation(AttestationStatus.ATTESTED, len(digests), ids_set_sha256(digests))


def check_trained_on(
    claimed: str | None, holdouts: Sequence[Holdout], *, training_id: str, source: str | None = None,
    words: TrainedOnWords = MANIFEST_TRAINED_ON,
) -> None:
    """Refuse a training whose stated ``trained_on_sha256`` is not that of all its training rows.

    ``claimed`` None (not stated) passes. The message names the statement and what to do in
    ``words`` (the door's: the manifest's key by default).

    Raises:
        TrainedOnError: the digests differ; the message gives both and how to fix it.

    >>> from typestrict_pipeline.refund.holdout import HoldoutRecord, draw_holdout
    >>> h = draw_holdout([HoldoutRecord(str(i), f"t{i}", "ab"[i % 2], None) for i in range(10)],
    ...                  decision="d")
    >>> check_trained_on(trained_on_sha256(training_ids([h])), [h], training_id="t1")
    >>> check_trained_on("0" * 64, [h], training_id="t1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    typestrict_pipeline.refund.trained_on.TrainedOnError: manifest, key 'training.trained_on_sha256': expected the SHA-256 of the 8 training rows of training 't1' (4fdd9c97...), got 0000...0000. ...
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
        f"{words.some}; this digest is for exactly {words.rows.replace('{training}', training_id)} "
        "(their ids sorted, joined by a line feed, UTF-8); the verdict is not computed for a "
        "model that may have seen test rows",
        file=source or "manifest",
        key="training.trained_on_sha256",
        shown=words.place(None),
    )
