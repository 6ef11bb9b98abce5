#!/usr/bin/env python3
"""Verify a TypeStrict refund audit file with the Python standard library alone.

Usage::

    python3 verify_audit.py audit.json
    python3 verify_audit.py --expect-sha256 HEX audit.json   # and: it is the file that was settled

This one file works when copied anywhere (Python 3.10 or later, nothing to install; checked
with 3.10, 3.11, 3.12 and 3.13; an older interpreter gets a one-line message naming the version
it needs). It verifies audit format versions 1, 2 (test examples in groups and the group
bootstrap), 3 (the trained-on attestation and the binding digest) and 4 (the group check, a
small-sample correction for few or unequal groups). It rebuilds,
from the audit alone, each decision's bootstrap seed, every resample (SHAKE-256 stream), every
per-example value, the four metrics of both systems, the deltas and margins, the gain G, the
bootstrap's 5th percentile and its count of G <= 0, with groups (version 4) the gain without
each group and the jackknife t check, then the two-thirds rule, the settling
decision and the verdict, and the digest that binds the ids, the option, the decisions and the
verdict together, and compares every number in the audit with what it rebuilt, exactly.

Exit status, one per class of damage: 0 everything matches; 1 a value differs (each difference
is printed); 2 not an audit (not strict JSON, a field missing or unexpected, a wrong type, an
unknown version, a size or a value the product never writes: one line says what and where); 3
not the settled file (``--expect-sha256`` given and the file's SHA-256 differs, checked first); 4
nothing checked (a wrong command line, an unreadable file or one that is not a regular file, such
as a FIFO, an old interpreter). It reads JSON strictly (a duplicated key, a non-finite number, a
number a double cannot hold, text with a lone surrogate, an integer past the interpreter's digit
limit, a file above 64 MiB, nesting past the interpreter's limit are refused) and refuses, before
any computation, what the product never writes: a ``params`` value other than the rule's, two
decisions of one name, a resample count other than 2,000, more than 2,000 test examples in a
decision, more than 256 answers, more than 32 decisions, a field the format does not have,
or (unless ``--large`` is given) more than 4,000 test examples or 80,000 examples x answers in
all, which keeps a run within a few seconds whatever the file.

The method is documented in ``docs/method/refund.md`` and the format in ``docs/audit-format.md``
of the TypeStrict pipeline. Note: Python's ``sum()`` of floats is compensated since 3.12, so every
float sum here is an explicit left-to-right loop; squares are ``d * d``, never ``d ** 2``.

>>> try:
...     verify({"format": "nope"})
... except Malformed as exc:
...     print(exc)
format: expected "typestrict-refund-audit", got 'nope'
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import struct
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from itertools import chain, compress, islice, repeat
from typing import TYPE_CHECKING, Any

MIN_PYTHON = (3, 10)


def _old_python_message(version: tuple[int, ...]) -> str | None:
    """The message for an interpreter too old to run this file, or ``None`` when it is recent enough.

    >>> _old_python_message((3, 9, 18))
    'verify_audit: needs Python 3.10 or later, got Python 3.9.18: run it with python3.10 or newer'
    >>> _old_python_message((3, 12, 1)) is None
    True
    """
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    got = ".".join(str(v) for v in version)
    need = ".".join(str(v) for v in MIN_PYTHON)
    return (f"verify_audit: needs Python {need} or later, got Python {got}: "
            f"run it with python{need} or newer")


def python_problem() -> str | None:
    """This interpreter's problem, if it is too old (checked first, before reading any file)."""
    return _old_python_message(tuple(sys.version_info[:3]))


AUDIT_FORMAT = "typestrict-refund-audit"
AUDIT_VERSIONS = (1, 2, 3, 4)
MAX_FILE_BYTES = 64 * 2**20
MAX_DECISIONS = 32
MAX_TEST_EXAMPLES = 2000  # per decision: the product holds out at most 2,000
MAX_TOTAL_EXAMPLES = 4000  # over all decisions, unless --large
MAX_TOTAL_CELLS = 80_000  # test examples x answers over all decisions, unless --large
MAX_SPLIT_ENTRIES = 1000
MAX_ANSWERS = 256
MAX_TEXT = 1000  # characters in a name, an id, an answer, a failure reason
MAX_OBJECT_CHARS = 100_000
MAX_LIST_CHARS = 2 * MAX_TEST_EXAMPLES * MAX_DECISIONS + 100_000
SEED_DOMAIN = b"typestrict-refund-seed-v1\x00"
STREAM_DOMAIN = b"typestrict-refund-resample-v1\x00"
DATA_DOMAIN = b"typestrict-refund-data-v1\x00"
RESAMPLES = 2000
BRIER_UNIT = 2**40
WEIGHTS = (0.5, 0.3, 0.2)
METRICS = ("macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1")
MAX_DROP = {
    "macro_f1": Fraction(2, 100),
    "brier_skill": Fraction(2, 100),
    "selective_acc_80": Fraction(2, 100),
    "worst_class_f1": Fraction(5, 100),
}
WORST_MIN_SUPPORT = 5
PROB_SUM_TOLERANCE = Fraction(1, 100)
UNITS = ("example", "group")
MAX_SHOWN_PER_LIST = 5


def over_default_bounds(total: int, cells: int) -> bool:
    """Whether an audit of ``total`` test examples and ``cells`` examples x answers (in all its
    decisions) is verified only with ``--large``."""
    return total > MAX_TOTAL_EXAMPLES or cells > MAX_TOTAL_CELLS


def needs_large(audit: Any) -> bool:
    """Whether verifying the (parsed) ``audit`` needs ``--large``: the command a page or the CLI
    prints for it must say so, or it fails ("re-run with --large"). False when the audit is not
    of the format's shape (the verifier then says what is wrong).

    >>> rows = {"sha256": ["0" * 64] * 2000}
    >>> needs_large({"decisions": [{"answers": ["a", "b"], "rows": rows}] * 2})
    False
    >>> needs_large({"decisions": [{"answers": ["a", "b"], "rows": rows}] * 3})
    True
    >>> needs_large({"decisions": [{"answers": [str(k) for k in range(41)], "rows": rows}]})
    True
    """
    try:
        decisions = audit["decisions"]
        sizes = [(len(d["rows"]["sha256"]), len(d["answers"])) for d in decisions]
    except (KeyError, TypeError, IndexError):
        return False
    return over_default_bounds(sum(n for n, _ in sizes), sum(n * k for n, k in sizes))


KINDS = ("single", "multiple_choice")
VERDICTS = ("beats", "kept", "refund", "failed")
_HEX64 = re.compile(r"[0-9a-f]{64}")

PARAMS: dict[str, Any] = {
    "resamples": RESAMPLES,
    "weights": {"macro_f1": 0.5, "brier_skill": 0.3, "selective_acc_80": 0.2},
    "max_drop": {
        "macro_f1": "1/50",
        "brier_skill": "1/50",
        "selective_acc_80": "1/50",
        "worst_class_f1": "1/20",
    },
    "coverage": "4/5",
    "worst_min_support": WORST_MIN_SUPPORT,
    "brier_units_log2": 40,
    "percentile": {"q": "5/100", "method": "order_statistic_ceil"},
    "decisions_needed": "ceil(2n/3)",
    "stream": "shake256-u32le-mulshift-v1",
    "seed_domain": "typestrict-refund-seed-v1",
    "stream_domain": "typestrict-refund-resample-v1",
    "zero_division": 0,
    "tie_rule": "right_if_right_answer_among_tied_top;else_pred_first_tied_in_answer_order",
    "confidence_order": "confidence_desc,row_asc",
}
PARAMS_V2: dict[str, Any] = {**PARAMS, "group_domain": "typestrict-refund-group-v1"}
PARAMS_V3: dict[str, Any] = {
    **PARAMS_V2,
    "id_domain": "typestrict-refund-id-v1",
    "trained_on_domain": "typestrict-refund-trained-on-v1",
    "binding_domain": "typestrict-refund-binding-v1",
}
PARAMS_V4: dict[str, Any] = {**PARAMS_V3, "group_check": "group_jackknife_t95_v1"}
PARAMS_BY_VERSION = {1: PARAMS, 2: PARAMS_V2, 3: PARAMS_V3, 4: PARAMS_V4}
ID_DOMAIN = b"typestrict-refund-id-v1\x00"
TRAINED_ON_DOMAIN = b"typestrict-refund-trained-on-v1\x00"
BINDING_DOMAIN = b"typestrict-refund-binding-v1\x00"
ATTESTED, NOT_STATED = "attested", "not stated"

# One exit status per class of damage (docs/audit-format.md, "Exit status").
EXIT_OK = 0
EXIT_DIFFERS = 1
EXIT_MALFORMED = 2
EXIT_NOT_SETTLED = 3
EXIT_CANNOT_CHECK = 4
EXIT_CODES = {
    EXIT_OK: "every number matches (and, with --expect-sha256, the file is the one settled)",
    EXIT_DIFFERS: "a value differs: the file has the format's shape, but a number, digest or "
                  "verdict is not what the rest of the file rebuilds to",
    EXIT_MALFORMED: "not an audit: not strict JSON, or not the format (a field missing or "
                    "unexpected, a wrong type, an unknown version, a size or a value the product "
                    "never writes)",
    EXIT_NOT_SETTLED: "not the settled file: its SHA-256 is not the one given with "
                      "--expect-sha256 (checked before anything else)",
    EXIT_CANNOT_CHECK: "nothing checked: a wrong command line, a file that cannot be read or is "
                       "not a regular file, an interpreter too old, memory exhausted or an "
                       "interruption",
}

# ------------------------------------------------------------------ the format's fields and types
# A type is one of the words below, a dict (an object with exactly these fields), or a pair:
# ("null", t) "t or null", ("list", t) "list of t", ("enum", values) one of the strings.
INT, FLOAT, BOOL, TEXT, HEX, RATIONAL, COUNTS = (
    "int", "float", "bool", "string", "hex digest", "rational", "object of counts or null")
_PLURAL = {INT: "ints", FLOAT: "floats", BOOL: "bools", TEXT: "strings", HEX: "hex digests",
           RATIONAL: "rationals", "object": "objects"}
_RATIONAL = re.compile(r"-?[0-9]{1,400}/[0-9]{1,400}")


def _null(t: Any) -> tuple[str, Any]:
    return ("null", t)


def _list_of(t: Any) -> tuple[str, Any]:
    return ("list", t)


def _enum(*values: str) -> tuple[str, Any]:
    return ("enum", values)


def describe(t: Any) -> str:
    """A type in the words of the format's tables (docs/audit-format.md).

    >>> describe(("list", ("list", "float"))), describe(("null", "rational"))
    ('list of lists of floats', 'rational or null')
    >>> describe(("enum", ("example", "group")))
    '"example" or "group"'
    """
    if isinstance(t, dict):
        return "object"
    if isinstance(t, str):
        return t
    tag, inner = t
    if tag == "null":
        return f"{describe(inner)} or null"
    if tag == "enum":
        return " or ".join(f'"{v}"' for v in inner)
    words = describe(inner)
    return "list of " + (_PLURAL.get(words) or words.replace("list of", "lists of", 1))


def _per_metric(t: Any, worst: Any) -> dict[str, Any]:
    return {"macro_f1": t, "brier_skill": t, "selective_acc_80": t, "worst_class_f1": worst}


def _spec_of(value: Any) -> Any:
    """The type of a fixed value (the ``params``)."""
    if isinstance(value, dict):
        return {k: _spec_of(v) for k, v in value.items()}
    return {bool: BOOL, int: INT, float: FLOAT, str: TEXT}[type(value)]


MARGIN_STATES = ("held", "broken", "not_applicable")


def report_schema(version: int) -> dict[str, Any]:
    """The fields of ``decisions[].report`` and their types."""
    metric_values = {
        "macro_f1": FLOAT, "brier_skill": FLOAT, "selective_acc_80": FLOAT,
        "worst_class_f1": _null(FLOAT), "worst_class": _null(TEXT),
        "exact": _per_metric(RATIONAL, _null(RATIONAL)),
    }
    counts = {"tp": _list_of(INT), "true": _list_of(INT), "pred": _list_of(INT),
              "brier_units": INT, "selective_correct": INT}
    boot: dict[str, Any] = {"resamples": INT}
    if version >= 2:
        boot.update(unit=_enum(*UNITS), n_units=INT)
    boot.update(seed=HEX, q05_index=INT, q05=FLOAT, n_gain_le_0=INT, gains_sha256=HEX,
                gains=_list_of(FLOAT))
    return {
        "data_sha256": HEX, "n": INT, "f1_answers": _list_of(INT),
        "worst_eligible": _list_of(INT), "coverage": INT,
        "metrics": {"model": metric_values, "jev": metric_values},
        "counts": {"model": counts, "jev": counts},
        "deltas": _per_metric(FLOAT, _null(FLOAT)),
        "exact_deltas": _per_metric(RATIONAL, _null(RATIONAL)),
        "margins": _per_metric(_enum(*MARGIN_STATES), _enum(*MARGIN_STATES)),
        "gain": FLOAT, "bootstrap": boot,
        **({"group_check": _null({
            "n_groups": INT, "effective_groups": INT, "df": INT, "t": _null(FLOAT), "leave_one_out": _list_of(FLOAT),
            "se": _null(FLOAT), "lower": _null(FLOAT), "passed": BOOL,
        })} if version >= 4 else {}),
        "gain_is_real": BOOL, "nothing_collapses": BOOL, "beats": BOOL,
    }


def rows_schema(version: int, kind: str = "multiple_choice", unit: str = "group") -> dict[str, Any]:
    """The fields of ``decisions[].rows``: ``n_options`` for multiple choice only,
    ``group_sha256`` (version 2 on) for the group bootstrap only."""
    rows: dict[str, Any] = {"sha256": _list_of(HEX), "y": _list_of(INT)}
    if kind == "multiple_choice":
        rows["n_options"] = _list_of(INT)
    if version >= 2 and unit == "group":
        rows["group_sha256"] = _list_of(HEX)
    rows.update(p_model=_list_of(_list_of(FLOAT)), p_jev=_list_of(_list_of(FLOAT)))
    return rows


def decision_schema(version: int, kind: str = "multiple_choice",
                    unit: str = "group") -> dict[str, Any]:
    """The fields of one entry of ``decisions``."""
    return {"name": TEXT, "kind": _enum(*KINDS), "answers": _list_of(TEXT),
            "rows": rows_schema(version, kind, unit), "report": report_schema(version)}


def audit_schema(version: int) -> dict[str, Any]:
    """Every field of an audit of ``version`` and its type (a decision with every optional
    field: multiple choice, with groups)."""
    top: dict[str, Any] = {
        "format": _enum(AUDIT_FORMAT), "audit_version": INT, "training_id": TEXT,
        "model_id": TEXT, "jev_id": TEXT, "params": _spec_of(PARAMS_BY_VERSION[version]),
    }
    if version >= 3:
        top["trained_on"] = {"status": _enum(ATTESTED, NOT_STATED), "n_ids": _null(INT),
                             "ids_sha256": _null(HEX)}
    top.update(
        split=COUNTS,
        decisions=_list_of(decision_schema(version)),
        overall={
            "n_decisions": INT, "needed": INT, "won": INT, "beats": BOOL,
            "settling_decision": _null(TEXT), "keep_if_loses": BOOL,
            "verdict": _enum(*VERDICTS), "refunds_credit": BOOL, "failure_reason": _null(TEXT),
        },
    )
    if version >= 3:
        top["binding_sha256"] = HEX
    return top


def field_list(version: int) -> dict[str, str]:
    """Every field's path (``decisions[].report.n``) and type in words, in the format's order.

    >>> fields = field_list(3)
    >>> fields["decisions[].report.bootstrap.unit"], fields["binding_sha256"]
    ('"example" or "group"', 'hex digest')
    """
    out: dict[str, str] = {}

    def walk(spec: dict[str, Any], prefix: str) -> None:
        for key, t in spec.items():
            path = f"{prefix}{key}"
            out[path] = describe(t)
            if isinstance(t, dict):
                walk(t, path + ".")
            elif isinstance(t, tuple) and t[0] == "list" and isinstance(t[1], dict):
                walk(t[1], path + "[].")
            elif isinstance(t, tuple) and t[0] == "null" and isinstance(t[1], dict):
                walk(t[1], path + ".")

    walk(audit_schema(version), "")
    return out


def _shape(value: Any, t: Any, where: str) -> None:
    """Refuse (:class:`Malformed`) a value that is not of type ``t``: a field missing or
    unexpected, a wrong JSON type, a string that is not the form its type says."""
    if isinstance(t, dict):
        if not isinstance(value, dict):
            raise Malformed(f"{where}: expected a JSON object, got {_kind(value)}")
        for key in t:
            if key not in value:
                raise Malformed(f"{where}: missing field {key!r}")
        for key in value:
            if key not in t:
                raise Malformed(f"{where}: unexpected field {_name(key)} (the product never "
                                "writes it)")
        for key, inner in t.items():
            _shape(value[key], inner, f"{where}.{key}")
        return
    if isinstance(t, tuple):
        tag, inner = t
        if tag == "null":
            if value is not None:
                _shape(value, inner, where)
        elif tag == "enum":
            if value not in inner or not isinstance(value, str):
                raise Malformed(f"{where}: expected {describe(t)}, got {_short(value)}")
        else:
            if not isinstance(value, list):
                raise Malformed(f"{where}: expected a {describe(t)}, got {_kind(value)}")
            if isinstance(inner, str):  # a list of leaves: one check per entry, no recursion
                for i, item in enumerate(value):
                    if not _is(item, inner):
                        raise Malformed(f"{where}[{i}]: expected {_article(inner)}, got "
                                        f"{_short(item)}")
            else:
                for i, item in enumerate(value):
                    _shape(item, inner, f"{where}[{i}]")
        return
    if t == COUNTS:
        if value is not None:
            _counts_shape(value, where)
        return
    if not _is(value, t):
        raise Malformed(f"{where}: expected {_article(t)}, got {_short(value)}")


def _article(t: str) -> str:
    return {INT: "an int", HEX: "a hex digest (64 lowercase hex digits)",
            RATIONAL: 'a rational ("numerator/denominator")',
            TEXT: f"a string of 1 to {MAX_TEXT} characters"}.get(t, f"a {t}")


def _kind(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string",
                                         bool: "a bool", int: "an int", float: "a float"}.get(
        type(value), type(value).__name__)


def _is(value: Any, t: str) -> bool:
    if t == INT:
        return type(value) is int and 0 <= value <= 10**18
    if t == FLOAT:
        return type(value) is float
    if t == BOOL:
        return type(value) is bool
    if t == TEXT:
        return type(value) is str and 0 < len(value) <= MAX_TEXT
    if t == HEX:
        return type(value) is str and _HEX64.fullmatch(value) is not None
    if t == RATIONAL:
        return type(value) is str and _RATIONAL.fullmatch(value) is not None
    raise AssertionError(t)


def _counts_shape(split: Any, where: str) -> None:
    """Counts only: integers >= 0, at most one nested level of objects (e.g. per decision)."""
    if not isinstance(split, dict):
        raise Malformed(f"{where}: expected an object of counts or null, got {_kind(split)}")
    _bounded_size(split, MAX_SPLIT_ENTRIES, where)
    for key, value in split.items():
        inner = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, count in inner:
            if type(count) is not int or not 0 <= count <= 10**15:
                at = f"{where}.{_name(key)}" + ("" if sub is None else f".{_name(sub)}")
                what = "a count" if sub is not None else "a count or an object of counts"
                raise Malformed(f"{at}: expected {what} (an integer >= 0), got {_short(count)}")


class Malformed(Exception):
    """The file is not a readable audit; the message says what was expected and where."""


# --------------------------------------------------------------------------- reading


def _field(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise Malformed(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise Malformed(f"{where}: missing field {key!r}")
    return obj[key]


def _int(value: Any, where: str, low: int = 0, high: int = 10**18) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Malformed(f"{where}: expected an integer from {low} to {high}, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    """``repr`` cut to 80 characters (a hostile value never floods the message)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'list'}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return "an integer of more than 30 digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _name(key: Any) -> str:
    """A key as shown in a field path: itself when short and printable, else cut ``repr``."""
    if isinstance(key, str) and len(key) <= 80 and key.isprintable():
        return key
    return _short(key)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise Malformed(
            f"{where}: expected a string of 1 to {MAX_TEXT} characters, got {_short(value)}"
        )
    return value


def _list(value: Any, where: str, length: int | None = None, most: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise Malformed(f"{where}: expected a list, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise Malformed(f"{where}: expected {length} entries, got {len(value)}")
    if most is not None and len(value) > most:
        raise Malformed(f"{where}: expected at most {most} entries (the product never writes "
                        f"more), got {len(value)}")
    return value


def _reject_constant(name: str) -> Any:
    raise Malformed(f"expected finite JSON numbers, got {name}")


def _bounded_size(node: Any, budget: int, where: str) -> None:
    """Refuse ``node`` if it holds more than ``budget`` values (containers and leaves)."""
    stack = [node]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            raise Malformed(f"{where}: expected at most {budget} values (the product never writes "
                            "more), got more")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            if len(item) > budget:
                raise Malformed(f"{where}: expected at most {budget} values (the product never "
                                f"writes more), got a list of {len(item)}")
            stack.extend(item)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise Malformed(f"expected each key once in an object, got {_short(key)} twice")
            seen.add(key)
    return obj


class _OutOfRange:
    """A number literal a double cannot hold, as parsed (found and named after parsing)."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _out_of_range(literal: str) -> str:
    """What is wrong with a number literal a double cannot hold.

    >>> _out_of_range("1e400")
    'expected a number a double can hold (at most about 1.8e308 in size), got 1e400'
    >>> _out_of_range("-1E-400")
    'expected a number a double can hold (0, or at least about 5e-324 in size), got -1E-400, which would read as 0'
    """
    shown = literal if len(literal) <= 80 else f"{literal[:77]}..."
    if math.isinf(float(literal)):
        return f"expected a number a double can hold (at most about 1.8e308 in size), got {shown}"
    return (f"expected a number a double can hold (0, or at least about 5e-324 in size), got "
            f"{shown}, which would read as 0")


def _float_reader() -> tuple[Callable[[str], Any], list[_OutOfRange]]:
    """A ``parse_float`` for :func:`json.loads` and the literals it found out of range.

    Every literal is read by ``float`` itself, as the default reader does; one that overflows to
    infinity, or underflows to 0 without being 0 (``1e-400``; ``0.0``, ``-0.0`` and ``0e5`` are
    0), becomes an :class:`_OutOfRange` placeholder, whose path is found after parsing.

    >>> read, found = _float_reader()
    >>> read("0.1"), read("-0.0"), read("0e5"), read("5e-324"), found
    (0.1, -0.0, 0.0, 5e-324, [])
    >>> read("1e-400") is found[0], [f.literal for f in found]
    (True, ['1e-400'])
    """
    found: list[_OutOfRange] = []

    def read(literal: str) -> Any:
        value = float(literal)
        # 0.0 from a literal whose digits are not all 0 is an underflow (rare: only then is
        # the literal looked at)
        if math.isinf(value) or (value == 0.0 and literal.lower().partition("e")[0].strip("-+.0")):
            found.append(_OutOfRange(literal))
            return found[-1]
        return value

    return read, found


# Every literal out of a double's range (finite: at most about 1.8e308; not 0: at least about
# 2.5e-324) has an exponent of 3 digits or more, or else 200 digits and points or more in a row
# (with an exponent of at most 2 digits, leaving the range takes over 200 digits). Both are looked
# for at C speed in a copy of the bytes where each digit and point is "0", "E" is "e", "+" is "-"
# and each character that can end a number is ",": an exponent of 3 digits or more is then
# "e-000" (signed) or "e000" and more 0s before a "," (unsigned; the hex digests hold "e000"
# too, never before a ","). Only then are the literals read one by one (:func:`_float_reader`).
_NUMBER_SHAPES = bytes.maketrans(b"0123456789.+E,]} \t\r\n", b"0" * 11 + b"-e" + b"," * 7)
_UNSIGNED_EXPONENT = re.compile(rb"e000+,")
_LONG_RUN = b"0" * 200


def _may_be_out_of_range(raw: bytes) -> bool:
    """Whether a number literal in ``raw`` may be out of a double's range: never ``False`` when
    one is; ``True`` for a few that are not (``5e-324``), which are then read one by one.

    >>> _may_be_out_of_range(b'{"p":[0.5,1e-07,3.14e+20,1e99],"h":"3e4567","s":"e-3"}')
    False
    >>> _may_be_out_of_range(b'{"p":[5e-324]}')
    True
    >>> [_may_be_out_of_range(b) for b in (b'[1e400]', b'[1E+400]', b'[-1e-0400]', b'{"a":1e999}')]
    [True, True, True, True]
    >>> _may_be_out_of_range(b"[0." + b"0" * 330 + b"1]"), _may_be_out_of_range(b"[1" + b"0" * 330 + b".0]")
    (True, True)
    """
    shapes = raw.translate(_NUMBER_SHAPES)
    return (b"e-000" in shapes or _LONG_RUN in shapes
            or (b"e000" in shapes and _UNSIGNED_EXPONENT.search(shapes) is not None))


# a \u escape of a surrogate (D800-DFFF): the only way a string in UTF-8 JSON gets a lone one
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (which UTF-8 cannot encode), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


if TYPE_CHECKING:  # a type only: this file must import on an old interpreter to say it is too old
    _Path = tuple[Any, ...] | None  # (parent path, key or index) links, joined only for a message
_CONTAINERS = (dict, list)


def _containers(tree: Any) -> Iterator[tuple[_Path, Any]]:
    """Every object and list in ``tree`` with its path, parents first; the entries of a list are
    sorted at C speed (a refused file may hold millions of numbers), and the stack holds at most
    the containers the file has."""
    stack: list[tuple[_Path, Any]] = [(None, tree)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if isinstance(node, dict):
            inner = [(k, v) for k, v in node.items() if isinstance(v, _CONTAINERS)]
        else:
            at = compress(range(len(node)), map(isinstance, node, repeat(_CONTAINERS)))
            inner = [(i, node[i]) for i in at]
        stack.extend(((path, key), value) for key, value in reversed(inner))


def _path_text(path: _Path) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{_name(key)}")
    return "".join(reversed(parts)).lstrip(".") or "the top"


def _unreadable(tree: Any, number: _OutOfRange | None, strings: bool) -> tuple[str, str] | None:
    """The JSON path of a value that is not a readable audit value, and what is wrong with it:
    ``number`` (a number out of a double's range, found by identity), else (with ``strings``)
    text, a key or a value, holding a lone surrogate. ``None`` when there is none.

    >>> _unreadable({"a": [1.0, {"b": "ok", "c": _OutOfRange("1e400")}]}, None, False)
    >>> big = _OutOfRange("1e400")
    >>> _unreadable({"a": [1.0, {"b": "ok", "c": big}]}, big, False)
    ('a[1].c', 'expected a number a double can hold (at most about 1.8e308 in size), got 1e400')
    >>> _unreadable({"a": ["x", "y\\ud800"]}, None, True)[0]
    'a[1]'
    """
    if number is not None:
        for path, node in _containers(tree):
            if isinstance(node, dict):
                key = next((k for k, v in node.items() if v is number), None)
                if key is not None:
                    return _path_text((path, key)), _out_of_range(number.literal)
            elif number in node:  # no other value equals it: found by identity, at C speed
                return _path_text((path, node.index(number))), _out_of_range(number.literal)
    if strings:
        for path, node in _containers(tree):
            texts: Iterator[tuple[Any, Any, bool]]
            if isinstance(node, dict):
                texts = chain.from_iterable(
                    [((k, k, True), (k, v, False)) if isinstance(v, str) else ((k, k, True),)
                     for k, v in node.items()])
            else:
                at = compress(range(len(node)), map(isinstance, node, repeat(str)))
                texts = ((i, node[i], False) for i in at)
            for key, text, is_key in texts:
                where = _lone_surrogate(text)
                if where is not None:
                    return _path_text((path, key)), (
                        f"expected text that is valid Unicode, got {_short(text)}, which holds a "
                        f"lone surrogate (character {where + 1}) that UTF-8 cannot encode"
                        + (" (in a key)" if is_key else ""))
    return None


def parse(raw: bytes, where: str = "audit", *, size: int | None = None) -> Any:
    """Parse audit bytes strictly; :class:`Malformed` with a clear message on anything else.

    >>> try:
    ...     parse(b'{"a": 1, "a": 2}')
    ... except Malformed as exc:
    ...     print(exc)
    audit: expected each key once in an object, got 'a' twice
    """
    if len(raw) > MAX_FILE_BYTES:
        # ``raw`` stops one byte past the bound: the file's size (``size``, from stat) says more
        got = f"{size} bytes" if size is not None and size > MAX_FILE_BYTES else (
            f"more than {MAX_FILE_BYTES} bytes")
        raise Malformed(f"{where}: expected at most {MAX_FILE_BYTES} bytes (64 MiB), got {got}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"{where}: expected UTF-8 JSON, got undecodable bytes at {exc.start}") from None
    if not text.lstrip(" \t\r\n").startswith("{"):
        raise Malformed(f"{where}: expected JSON with a JSON object at the top, got "
                        f"{_short(text.strip()[:20]) if text.strip() else 'an empty file'}")
    # an audit has a few dozen objects and about two lists per test example: refuse files built
    # of millions of tiny containers before parsing them (a string may hold such characters
    # too, hence the generous bounds)
    for char, most in (("{", MAX_OBJECT_CHARS), ("[", MAX_LIST_CHARS)):
        if text.count(char) > most:
            raise Malformed(f"{where}: expected at most {most} {char!r} characters in an audit, "
                            f"got {text.count(char)}")
    read_float, out_of_range = _float_reader()
    if not _may_be_out_of_range(raw):
        read_float = float  # the default reader, at full speed: every literal is in range
    try:
        tree = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant,
                          parse_float=read_float)
    except Malformed as exc:
        raise Malformed(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise Malformed(
            f"{where}: expected JSON, got an error at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise Malformed(f"{where}: expected JSON nested at most a few levels, got deeper "
                        "nesting than the interpreter allows") from None
    except ValueError as exc:  # e.g. an integer past the interpreter's digit limit
        raise Malformed(f"{where}: expected JSON numbers within bounds, got {_short(str(exc))}") from None
    # a number out of a double's range, a lone surrogate (only from a \u escape: the text is
    # valid UTF-8): refused here with its path, never read as inf, 0.0 or text nothing can encode
    strings = _SURROGATE_ESCAPE.search(text) is not None
    if out_of_range or strings:
        bad = _unreadable(tree, out_of_range[0] if out_of_range else None, strings)
        if bad is not None:
            raise Malformed(f"{where}: {bad[0]}: {bad[1]}: the product never writes it")
    return tree


class Unreadable(Exception):
    """The audit file cannot be read (nothing checked, exit 4); the message says why."""


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _not_regular(path: str, mode: int) -> str | None:
    """Why ``path`` (of ``mode``) is not read, or ``None`` for a regular file.

    >>> _not_regular("f.json", stat.S_IFIFO | 0o644)
    'cannot read f.json: expected a regular file, got a FIFO (named pipe): save the audit to a file and pass that file'
    >>> _not_regular("f.json", stat.S_IFREG | 0o644) is None
    True
    """
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "another kind of file")
    return (f"cannot read {path}: expected a regular file, got {kind}: save the audit to a file "
            "and pass that file")


def read_bytes(path: str) -> tuple[bytes, int]:
    """An audit file's bytes (at most ``MAX_FILE_BYTES + 1`` of them) and its size on disk.

    Only a regular file is read: anything else (a FIFO, a device, a directory) is refused before
    it is opened, and the file is opened without blocking and checked again once open, so a FIFO
    put in its place meanwhile is refused too; nothing here ever waits for a writer.

    Raises:
        Unreadable: the file cannot be read (its message says why).
    """
    try:
        why = _not_regular(path, os.stat(path).st_mode)
        if why is not None:
            raise Unreadable(why)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags)
        with open(fd, "rb", closefd=True) as fh:
            info = os.fstat(fh.fileno())
            why = _not_regular(path, info.st_mode)
            if why is not None:
                raise Unreadable(why)
            return fh.read(MAX_FILE_BYTES + 1), info.st_size
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: expected an audit file that can be read, got {exc.strerror or exc}: "
                         "check the path you gave, and that the audit file is there") from None


def load(path: str) -> Any:
    """Read and parse an audit file: :class:`Unreadable` when it cannot be read (nothing checked,
    exit 4), :class:`Malformed` when it is not an audit (exit 2), each with a clear message."""
    raw, size = read_bytes(path)
    return parse(raw, path, size=size)


# --------------------------------------------------------------------------- the method


def seed_of(name: str, hashes: Sequence[str]) -> bytes:
    """SHA-256(seed domain + name + NUL + sorted text digests)."""
    h = hashlib.sha256()
    h.update(SEED_DOMAIN)
    h.update(name.encode("utf-8"))
    h.update(b"\x00")
    for d in sorted(bytes.fromhex(x) for x in hashes):
        h.update(d)
    return h.digest()


def data_digest(
    kind: str, answers: Sequence[str], hashes: Sequence[str], ys: Sequence[int],
    offered: Sequence[int], pm: Sequence[Sequence[float]], pj: Sequence[Sequence[float]],
    groups: Sequence[str] | None = None,
) -> str:
    """SHA-256 of the decision's kind, answers and rows (and groups), as the producer binds them."""
    h = hashlib.sha256(DATA_DOMAIN)
    h.update(kind.encode("utf-8") + b"\x00")
    for a in answers:
        h.update(a.encode("utf-8") + b"\x00")
    k = len(answers)
    pack = struct.Struct(f">II{k}d{k}d").pack
    for i, sha in enumerate(hashes):
        h.update(bytes.fromhex(sha))
        h.update(pack(ys[i], offered[i], *pm[i], *pj[i]))
        if groups is not None:
            h.update(bytes.fromhex(groups[i]))
    return h.hexdigest()


def _frac(f: Fraction) -> str:
    return f"{f.numerator}/{f.denominator}"


class SystemValues:
    """Per-example values of one system, computed once."""

    def __init__(self, y: Sequence[int], probs: Sequence[Sequence[float]]) -> None:
        n = len(y)
        self.conf: list[float] = []
        self.correct: list[int] = []
        self.pred: list[int] = []
        self.units: list[int] = []
        for yi, p in zip(y, probs, strict=True):
            top = max(p)
            right = p[yi] == top
            self.conf.append(top)
            self.correct.append(1 if right else 0)
            self.pred.append(yi if right else list(p).index(top))
            b = 0.0
            for k, pk in enumerate(p):
                d = pk - 1.0 if k == yi else pk
                b += d * d
            self.units.append(round(b * BRIER_UNIT))
        conf = self.conf
        self.order = sorted(range(n), key=lambda i: (-conf[i], i))
        self.rank = [0] * n
        for pos, i in enumerate(self.order):
            self.rank[i] = pos
        self.correct_by_rank = [self.correct[i] for i in self.order]


def _f1(tp: int, true: int, pred: int) -> float:
    den = true + pred
    return 2 * tp / den if den else 0.0


def _f1_exact(tp: int, true: int, pred: int) -> Fraction:
    den = true + pred
    return Fraction(2 * tp, den) if den else Fraction(0)


def _counts(y: Sequence[int], s: SystemValues, k: int, m: int) -> dict[str, Any]:
    tp, true, pred = [0] * k, [0] * k, [0] * k
    for yi, ok, pi in zip(y, s.correct, s.pred, strict=True):
        true[yi] += 1
        pred[pi] += 1
        tp[yi] += ok
    return {
        "tp": tp,
        "true": true,
        "pred": pred,
        "brier_units": sum(s.units),
        "selective_correct": sum(s.correct_by_rank[:m]),
    }


def _metrics(
    counts: dict[str, Any], n: int, labels: list[int], eligible: list[int], m: int,
    answers: list[str],
) -> tuple[dict[str, Any], dict[str, Fraction]]:
    tp, true, pred = counts["tp"], counts["true"], counts["pred"]
    macro = 0.0
    for k in labels:
        macro += _f1(tp[k], true[k], pred[k])
    macro = macro / len(labels)
    two_d = 2 * n * BRIER_UNIT
    exact = {
        "macro_f1": sum((_f1_exact(tp[k], true[k], pred[k]) for k in labels), Fraction(0))
        / len(labels),
        "brier_skill": Fraction(two_d - counts["brier_units"], two_d),
        "selective_acc_80": Fraction(counts["selective_correct"], m),
    }
    worst: float | None = None
    worst_class: str | None = None
    if eligible:
        w = min(eligible, key=lambda k: (_f1_exact(tp[k], true[k], pred[k]), k))
        worst = _f1(tp[w], true[w], pred[w])
        worst_class = answers[w]
        exact["worst_class_f1"] = _f1_exact(tp[w], true[w], pred[w])
    values = {
        "macro_f1": macro,
        "brier_skill": (two_d - counts["brier_units"]) / two_d,
        "selective_acc_80": counts["selective_correct"] / m,
        "worst_class_f1": worst,
        "worst_class": worst_class,
        "exact": {name: (_frac(exact[name]) if name in exact else None) for name in METRICS},
    }
    return values, exact


MAX_ROWS = 2**22  # the packed Brier slots below hold sums below 2**64 (n * 2**42)


def _dropped_correct(
    draws: list[int], tail_rank: list[int], correct_by_rank1: list[int], drop: int
) -> int:
    """Right answers among the ``drop`` least confident draws (largest ranks).

    ``tail_rank[i]`` is ``rank[i] + 1`` for the rows in the tail window of the largest ranks and
    0 elsewhere, so ``filter(None, ...)`` keeps the window's draws without a Python-level call
    per draw; ``correct_by_rank1`` is ``correct_by_rank`` shifted by one to match.
    """
    if drop == 0:
        return 0
    ranks = sorted(filter(None, map(tail_rank.__getitem__, draws)))
    if len(ranks) < drop:  # rare: too few draws in the tail window, sort them all
        return -1
    return sum(map(correct_by_rank1.__getitem__, islice(ranks, len(ranks) - drop, None)))


def _dropped_correct_all(draws: list[int], rank: list[int], correct_by_rank: list[int],
                         drop: int) -> int:
    """:func:`_dropped_correct` by sorting every draw's rank (the rare fallback)."""
    ranks = sorted(map(rank.__getitem__, draws))
    return sum(map(correct_by_rank.__getitem__, islice(ranks, len(ranks) - drop, None)))


def _dropped(draws: list[int], rank: list[int], correct_by_rank: list[int],
             window: tuple[list[int], list[int]], drop: int) -> int:
    """Right answers among the ``drop`` largest ranks of ``draws``, through the tail ``window``
    of :func:`_tail_window` (or, when too few draws fall in it, by sorting every rank)."""
    found = _dropped_correct(draws, window[0], window[1], drop)
    return found if found >= 0 else _dropped_correct_all(draws, rank, correct_by_rank, drop)


def _group_dropped(
    drawn: list[int], tails: Callable[[int], list[int]], ranks: Callable[[int], list[int]],
    correct: Callable[[int], int], drop: int,
) -> int:
    """Right answers among the ``drop`` largest ranks of the drawn groups' rows.

    ``tails(g)`` holds group ``g``'s ranks in the tail window (precomputed), so only those are
    sorted; when fewer than ``drop`` drawn rows fall in the window, every rank is sorted.
    """
    if drop == 0:
        return 0
    found = sorted(chain.from_iterable(map(tails, drawn)))
    if len(found) < drop:
        found = sorted(chain.from_iterable(map(ranks, drawn)))
    return sum(map(correct, islice(found, len(found) - drop, None)))


def _tail_window(rank: list[int], correct_by_rank: list[int],
                 tail: int) -> tuple[list[int], list[int]]:
    """The tables of :func:`_dropped_correct` for the window of the ``tail`` largest ranks."""
    n = len(rank)
    return [r + 1 if r >= n - tail else 0 for r in rank], [0, *correct_by_rank]


def _draw_blocks(data: bytes, n: int, resamples: int) -> Iterator[list[int]]:
    """Each resample's draws ``(u * n) >> 32`` (``u`` the stream's little-endian 32-bit words).

    Computed for a block of resamples at once without a Python-level operation per draw: the
    words are spread into 64-bit slots of one integer, multiplied by ``n`` in one step (no carry
    crosses a slot since ``u * n < 2**64``), and each slot's high half is the draw. Same numbers
    as the one-by-one formula, which big-endian machines use.
    """
    if sys.byteorder != "little":  # pragma: no cover - the spread below assumes little-endian
        words = struct.Struct(f"<{n}I").unpack_from
        for r in range(resamples):
            yield [(u * n) >> 32 for u in words(data, 4 * n * r)]
        return
    block = max(1, (1 << 20) // n)
    for start in range(0, resamples, block):
        count = min(block, resamples - start)
        chunk = data[4 * n * start:4 * n * (start + count)]
        wide = bytearray(2 * len(chunk))
        for j in range(4):
            wide[j::8] = chunk[j::4]
        high = memoryview((int.from_bytes(wide, "little") * n).to_bytes(len(wide), "little"))
        halves = high.cast("I")
        for r in range(count):
            yield halves[2 * n * r + 1:2 * n * (r + 1):2].tolist()


def _packed_rows(y: Sequence[int], a: SystemValues, b: SystemValues, k: int, w: int) -> list[int]:
    """One integer per row whose ``w``-bit slots hold the row's contribution to every count.

    Slots (from the lowest): right answer is ``j`` (k slots), model predicts ``j`` (k), Jev
    predicts ``j`` (k), model right with answer ``j`` (k), Jev right with answer ``j`` (k), model
    right, Jev right; then two 64-bit slots with the model's and Jev's Brier units.
    """
    slots = 5 * k + 2
    packed: list[int] = []
    for i in range(len(y)):
        yi = y[i]
        v = (1 << (w * yi)) + (1 << (w * (k + a.pred[i]))) + (1 << (w * (2 * k + b.pred[i])))
        if a.correct[i]:
            v += (1 << (w * (3 * k + yi))) + (1 << (w * (5 * k)))
        if b.correct[i]:
            v += (1 << (w * (4 * k + yi))) + (1 << (w * (5 * k + 1)))
        v += (a.units[i] << (w * slots)) + (b.units[i] << (w * slots + 64))
        packed.append(v)
    return packed


def _macro_pair(c: Sequence[int], k: int, labels: Sequence[int]) -> tuple[float, float]:
    """Both systems' macro F1 from one resample's unpacked counts (left to right, then / |L|)."""
    mf_a = 0.0
    mf_b = 0.0
    for j in labels:
        den = c[j] + c[k + j]
        mf_a += 2 * c[3 * k + j] / den if den else 0.0
        den = c[j] + c[2 * k + j]
        mf_b += 2 * c[4 * k + j] / den if den else 0.0
    return mf_a / len(labels), mf_b / len(labels)


def gains(
    y: Sequence[int], a: SystemValues, b: SystemValues, k: int, seed: bytes, resamples: int
) -> list[float]:
    """G of every resample, rebuilt from the SHAKE-256 stream (integer counts, fixed order).

    Speed (all exact integer arithmetic): every row gets one packed integer whose 16-bit slots
    (32-bit from 65,536 rows) count, for each answer, "right answer is it", "model right",
    "model predicts it", "Jev right", "Jev predicts it", plus both systems' right totals and
    (64-bit slots) Brier units; one C-level ``sum`` over a resample's draws then yields every
    count at once. Selective accuracy removes the ``n - m`` least confident draws, found by
    sorting only a window of the largest ranks.
    """
    n = len(y)
    if n >= MAX_ROWS:
        raise Malformed(f"expected fewer than {MAX_ROWS} rows in a decision, got {n}")
    present = set(y)
    labels = [c for c in range(k) if c in present]
    m = (4 * n + 4) // 5
    drop = n - m
    tail = min(n, drop + 4 * math.isqrt(n) + 16)  # ~10 sd above the draws needed; else all
    two_d = 2 * n * BRIER_UNIT
    slots = 5 * k + 2
    w, fmt = (16, "H") if n < 2**16 else (32, "I")  # a count slot holds any count up to n
    packed_at = _packed_rows(y, a, b, k, w).__getitem__
    layout = struct.Struct(f"<{slots}{fmt}QQ")
    size = layout.size
    data = hashlib.shake_256(STREAM_DOMAIN + seed).digest(4 * n * resamples)
    w0, w1, w2 = WEIGHTS
    win_a = _tail_window(a.rank, a.correct_by_rank, tail)
    win_b = _tail_window(b.rank, b.correct_by_rank, tail)
    out: list[float] = []
    for draws in _draw_blocks(data, n, resamples):
        c = layout.unpack(sum(map(packed_at, draws)).to_bytes(size, "little"))
        mf_a, mf_b = _macro_pair(c, k, labels)
        bs_a = (two_d - c[slots]) / two_d
        bs_b = (two_d - c[slots + 1]) / two_d
        sa_a = (c[5 * k] - _dropped(draws, a.rank, a.correct_by_rank, win_a, drop)) / m
        sa_b = (c[5 * k + 1] - _dropped(draws, b.rank, b.correct_by_rank, win_b, drop)) / m
        out.append(w0 * (mf_a - mf_b) + w1 * (bs_a - bs_b) + w2 * (sa_a - sa_b))
    return out


def group_gains(
    y: Sequence[int], a: SystemValues, b: SystemValues, k: int, seed: bytes, resamples: int,
    groups: Sequence[int],
) -> list[float]:
    """G of every resample of the group bootstrap: ``G`` whole groups drawn per resample.

    ``groups[i]`` is row ``i``'s group index (groups in ascending order of their SHA-256). The
    stream is the same, read with the number of groups in place of ``n``; a resample's rows are
    those of its drawn groups, a group drawn twice counting twice, so its size ``n_b`` varies:
    ``brier_skill`` divides by ``2·n_b·2**40`` and selective accuracy keeps ``ceil(4·n_b/5)``.
    """
    n_groups = max(groups) + 1
    members: list[list[int]] = [[] for _ in range(n_groups)]
    for i, g in enumerate(groups):
        members[g].append(i)
    largest = max(len(rows) for rows in members)
    if n_groups * largest >= MAX_ROWS:
        raise Malformed(f"expected groups x largest group below {MAX_ROWS} rows, got "
                        f"{n_groups} x {largest}")
    present = set(y)
    labels = [c for c in range(k) if c in present]
    slots = 5 * k + 2
    w, fmt = (16, "H") if n_groups * largest < 2**16 else (32, "I")
    packed = _packed_rows(y, a, b, k, w)
    group_packed = [sum(packed[i] for i in rows) for rows in members].__getitem__
    ranks_a = [[a.rank[i] for i in rows] for rows in members].__getitem__
    ranks_b = [[b.rank[i] for i in rows] for rows in members].__getitem__
    layout = struct.Struct(f"<{slots}{fmt}QQ")
    size = layout.size
    data = hashlib.shake_256(STREAM_DOMAIN + seed).digest(4 * n_groups * resamples)
    w0, w1, w2 = WEIGHTS
    cba, cbb = a.correct_by_rank.__getitem__, b.correct_by_rank.__getitem__
    n = len(y)
    tail = min(n, (n + 4) // 5 + 16 * math.isqrt(n) + 16 * largest)
    tails_a = [[r for r in [a.rank[j] for j in rows] if r >= n - tail]
               for rows in members].__getitem__
    tails_b = [[r for r in [b.rank[j] for j in rows] if r >= n - tail]
               for rows in members].__getitem__
    out: list[float] = []
    for drawn in _draw_blocks(data, n_groups, resamples):
        c = layout.unpack(sum(map(group_packed, drawn)).to_bytes(size, "little"))
        n_b = sum(c[:k])
        m_b = (4 * n_b + 4) // 5
        two_d = 2 * n_b * BRIER_UNIT
        mf_a, mf_b = _macro_pair(c, k, labels)
        bs_a = (two_d - c[slots]) / two_d
        bs_b = (two_d - c[slots + 1]) / two_d
        sa_a = (c[5 * k] - _group_dropped(drawn, tails_a, ranks_a, cba, n_b - m_b)) / m_b
        sa_b = (c[5 * k + 1] - _group_dropped(drawn, tails_b, ranks_b, cbb, n_b - m_b)) / m_b
        out.append(w0 * (mf_a - mf_b) + w1 * (bs_a - bs_b) + w2 * (sa_a - sa_b))
    return out


# --------------------------------------------------------------------------- checking


# The group check (format version 4): the group jackknife t check of a grouped decision. The
# t quantiles: Student's t, one-sided 95%, rounded up at 4 decimals; for other degrees of freedom
# the entry of the largest listed df at or below it (docs/audit-format.md, "The group check").
T95 = {
    1: "6.3138", 2: "2.9200", 3: "2.3534", 4: "2.1319", 5: "2.0151", 6: "1.9432", 7: "1.8946",
    8: "1.8596", 9: "1.8332", 10: "1.8125", 11: "1.7959", 12: "1.7823", 13: "1.7710",
    14: "1.7614", 15: "1.7531", 16: "1.7459", 17: "1.7397", 18: "1.7341", 19: "1.7292",
    20: "1.7248", 21: "1.7208", 22: "1.7172", 23: "1.7139", 24: "1.7109", 25: "1.7082",
    26: "1.7057", 27: "1.7033", 28: "1.7012", 29: "1.6992", 30: "1.6973", 40: "1.6839",
    50: "1.6760", 60: "1.6707", 80: "1.6642", 100: "1.6603", 120: "1.6577",
}


def _without_group(y: Sequence[int], s: SystemValues, counts: dict[str, Any], rows: list[int],
                   labels: Sequence[int]) -> tuple[float, float, float]:
    """One system's (macro F1, brier_skill, selective_acc_80) on every row but ``rows``."""
    tp, true, pred = list(counts["tp"]), list(counts["true"]), list(counts["pred"])
    units = counts["brier_units"]
    for i in rows:
        true[y[i]] -= 1
        pred[s.pred[i]] -= 1
        tp[y[i]] -= s.correct[i]
        units -= s.units[i]
    macro = 0.0
    for j in labels:
        macro += _f1(tp[j], true[j], pred[j])
    macro = macro / len(labels)
    n_left = len(y) - len(rows)
    two_d = 2 * n_left * BRIER_UNIT
    m = (4 * n_left + 4) // 5
    # the m-th most confident row outside the group is at position m - 1 + (group rows before it)
    ranks = sorted(s.rank[i] for i in rows)
    before = 0
    while before < len(ranks) and ranks[before] <= m - 1 + before:
        before += 1
    kept = sum(s.correct_by_rank[:m + before]) - sum(s.correct_by_rank[r] for r in ranks[:before])
    return macro, (two_d - units) / two_d, kept / m


def group_check(y: Sequence[int], a: SystemValues, b: SystemValues, k: int,
                groups: Sequence[int], gain: float) -> dict[str, Any]:
    """The group jackknife t check: G without each group, its jackknife standard error, and
    whether ``gain - t(df) * se > 0`` with ``df = max(1, G_eff - 1)``, ``G_eff = n*n // sum of
    squared group sizes`` (never with a single group)."""
    n_groups = max(groups) + 1
    members: list[list[int]] = [[] for _ in range(n_groups)]
    for i, g in enumerate(groups):
        members[g].append(i)
    effective = len(y) * len(y) // sum(len(rows) * len(rows) for rows in members)
    if n_groups < 2:
        return {"n_groups": n_groups, "effective_groups": effective, "df": 0, "t": None,
                "leave_one_out": [], "se": None, "lower": None, "passed": False}
    df = max(1, effective - 1)
    present = set(y)
    labels = [c for c in range(k) if c in present]
    m = (4 * len(y) + 4) // 5
    ca, cb = _counts(y, a, k, m), _counts(y, b, k, m)
    w0, w1, w2 = WEIGHTS
    loo: list[float] = []
    for rows in members:
        mf_a, bs_a, sa_a = _without_group(y, a, ca, rows, labels)
        mf_b, bs_b, sa_b = _without_group(y, b, cb, rows, labels)
        loo.append(w0 * (mf_a - mf_b) + w1 * (bs_a - bs_b) + w2 * (sa_a - sa_b))
    total = 0.0
    for v in loo:
        total += v
    mean = total / n_groups
    ss = 0.0
    for v in loo:
        d = v - mean
        ss += d * d
    se = math.sqrt(ss * (n_groups - 1) / n_groups)
    t = float(T95[max(d for d in T95 if d <= df)])
    lower = gain - t * se
    return {"n_groups": n_groups, "effective_groups": effective, "df": df, "t": t, "leave_one_out": loo, "se": se,
            "lower": lower, "passed": lower > 0.0}


class _Diffs:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    return bool(a == b)


def _compare(expected: Any, got: Any, where: str, diffs: _Diffs) -> None:
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            diffs.add(f"{where}: expected an object, got {_short(got)}")
            return
        for key, value in expected.items():
            if key not in got:
                diffs.add(f"{where}.{key}: missing (rebuilt {value!r})"[:300])
            else:
                _compare(value, got[key], f"{where}.{key}", diffs)
        for key in got:
            if key not in expected:
                diffs.add(f"{where}.{_name(key)}: unexpected field")
        return
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            size = len(got) if isinstance(got, list) else type(got).__name__
            diffs.add(f"{where}: expected a list of {len(expected)}, got {size}")
            return
        bad = [i for i, (e, g) in enumerate(zip(expected, got, strict=True)) if not _deep_same(e, g)]
        for i in bad[:MAX_SHOWN_PER_LIST]:
            _compare(expected[i], got[i], f"{where}[{i}]", diffs)
        if len(bad) > MAX_SHOWN_PER_LIST:
            diffs.add(f"{where}: and {len(bad) - MAX_SHOWN_PER_LIST} more entries differ")
        return
    if not _same(expected, got):
        diffs.add(f"{where}: audit says {_short(got)}, rebuilt {expected!r}")


def _deep_same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(_deep_same(a[k], b[k]) for k in a)
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_deep_same(x, z) for x, z in zip(a, b, strict=True))
        )
    return _same(a, b)


def _probs(value: Any, where: str, k: int, offered: int, diffs: _Diffs) -> list[float]:
    p = _list(value, where, k)
    for j, v in enumerate(p):
        if not isinstance(v, float) or not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise Malformed(f"{where}[{j}]: expected a float probability in [0, 1], got {_short(v)}")
        if j >= offered and v != 0.0:
            diffs.add(f"{where}[{j}]: option {j + 1} is not offered (n_options {offered}), "
                      f"expected 0.0, got {v!r}")
    if not sums_to_one(p):
        diffs.add(f"{where}: probabilities sum to {math.fsum(p)!r}, expected 1 (±0.01)")
    return p


def sums_to_one(values: Sequence[float]) -> bool:
    """``|Σ p − 1| <= 1/100``, the sum of the given doubles taken exactly (as the producer)."""
    total = math.fsum(values)
    if abs(total - 1.0) < 0.0099:
        return True
    if abs(total - 1.0) > 0.0101 or not math.isfinite(total):
        return False
    return abs(sum((Fraction(v) for v in values), Fraction(0)) - 1) <= PROB_SUM_TOLERANCE


class _Decision:
    """One decision's rows, read and checked for shape (no computation yet)."""

    def __init__(self, dec: Any, where: str, version: int, diffs: _Diffs) -> None:
        self.name = _str(_field(dec, "name", where), f"{where}.name")
        self.where = where = f"{where} ({self.name!r})"
        self.dec = dec
        kind = _field(dec, "kind", where)
        if kind not in KINDS:
            raise Malformed(f"{where}.kind: expected one of {KINDS}, got {_short(kind)}")
        self.kind: str = kind
        answers = _list(_field(dec, "answers", where), f"{where}.answers", most=MAX_ANSWERS)
        if (len(answers) < 2 or not all(isinstance(a, str) and len(a) <= MAX_TEXT for a in answers)
                or len(set(answers)) != len(answers)):
            raise Malformed(f"{where}.answers: expected at least 2 distinct strings, got "
                            f"{_short(answers[:3])}")
        self.answers: list[str] = answers
        report = _field(dec, "report", where)
        # a report holds about 2,000 gains and a few numbers per answer: refuse a bigger one
        # before reading it (its contents are compared after)
        _bounded_size(report, 3 * RESAMPLES + 40 * len(answers) + 200, f"{where}.report")
        boot = _field(report, "bootstrap", f"{where}.report")
        resamples = _field(boot, "resamples", f"{where}.report.bootstrap")
        if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples != RESAMPLES:
            raise Malformed(f"{where}.report.bootstrap.resamples: expected {RESAMPLES} (the product "
                            f"always draws {RESAMPLES}), got {_short(resamples)}")
        self.unit = "example"
        if version >= 2:
            unit = _field(boot, "unit", f"{where}.report.bootstrap")
            if unit not in UNITS:
                raise Malformed(f"{where}.report.bootstrap.unit: expected one of {UNITS}, "
                                f"got {_short(unit)}")
            self.unit = unit
        extra = set(dec) - {"name", "kind", "answers", "rows", "report"}
        if extra:
            raise Malformed(f"{where}: unexpected field {_name(sorted(extra)[0])} (the product "
                            "never writes it)")
        self._read_rows(_field(dec, "rows", where), diffs)
        # every field of the report present, none extra, each of its type: what is left to
        # compare are values (a missing or mistyped field is exit 2, a wrong value exit 1)
        _shape(report, report_schema(version), f"{where}.report")

    def _read_rows(self, rows: Any, diffs: _Diffs) -> None:
        where, k = self.where, len(self.answers)
        expected_keys = {"sha256", "y", "p_model", "p_jev"}
        if self.kind == "multiple_choice":
            expected_keys.add("n_options")
        if self.unit == "group":
            expected_keys.add("group_sha256")
        if not isinstance(rows, dict) or set(rows) != expected_keys:
            got = sorted(rows)[:8] if isinstance(rows, dict) else type(rows).__name__
            raise Malformed(f"{where}.rows: expected fields {sorted(expected_keys)}, got {got}")
        hashes = _list(rows["sha256"], f"{where}.rows.sha256", most=MAX_TEST_EXAMPLES)
        n = len(hashes)
        if n < 1:
            raise Malformed(f"{where}.rows: expected at least 1 test example, got 0")
        for i, h in enumerate(hashes):
            if not isinstance(h, str) or not _HEX64.fullmatch(h):
                raise Malformed(f"{where}.rows.sha256[{i}]: expected 64 lowercase hex digits, "
                                f"got {_short(h)}")
        ys = _list(rows["y"], f"{where}.rows.y", n)
        offered = [k] * n
        if self.kind == "multiple_choice":
            offered = _list(rows["n_options"], f"{where}.rows.n_options", n)
            for i, o in enumerate(offered):
                if isinstance(o, bool) or not isinstance(o, int) or not 1 <= o <= k:
                    raise Malformed(f"{where}.rows.n_options[{i}]: expected 1 to {k}, got {_short(o)}")
        for i, yi in enumerate(ys):
            if isinstance(yi, bool) or not isinstance(yi, int) or not 0 <= yi < k:
                raise Malformed(f"{where}.rows.y[{i}]: expected an answer index 0 to {k - 1}, "
                                f"got {_short(yi)}")
            if yi >= offered[i]:
                diffs.add(f"{where}.rows.y[{i}]: right answer {yi + 1} is not among the "
                          f"{offered[i]} options offered")
        self.group_hashes: list[str] | None = None
        if self.unit == "group":
            self.group_hashes = _list(rows["group_sha256"], f"{where}.rows.group_sha256", n)
            for i, h in enumerate(self.group_hashes):
                if not isinstance(h, str) or not _HEX64.fullmatch(h):
                    raise Malformed(f"{where}.rows.group_sha256[{i}]: expected 64 lowercase hex "
                                    f"digits, got {_short(h)}")
        pm_raw = _list(rows["p_model"], f"{where}.rows.p_model", n)
        pj_raw = _list(rows["p_jev"], f"{where}.rows.p_jev", n)
        self.pm = [_probs(v, f"{where}.rows.p_model[{i}]", k, offered[i], diffs)
                   for i, v in enumerate(pm_raw)]
        self.pj = [_probs(v, f"{where}.rows.p_jev[{i}]", k, offered[i], diffs)
                   for i, v in enumerate(pj_raw)]
        self.hashes, self.ys, self.offered = hashes, ys, offered
        gh = self.group_hashes
        keys = [(hashes[i], ys[i], tuple(self.pm[i]), tuple(self.pj[i]), offered[i],
                 gh[i] if gh is not None else "") for i in range(n)]
        for i in range(1, n):
            if keys[i] < keys[i - 1]:
                diffs.add(f"{where}.rows: row {i} is out of canonical order (rows must be sorted "
                          "by sha256, then y, p_model, p_jev)")
                break

    @property
    def n(self) -> int:
        return len(self.ys)

    def check(self, version: int, diffs: _Diffs) -> bool:
        """Rebuild every number of the report and compare; return whether the decision beats."""
        where, k, n, ys = self.where, len(self.answers), self.n, self.ys
        sa, sb = SystemValues(ys, self.pm), SystemValues(ys, self.pj)
        labels = [c for c in range(k) if c in set(ys)]
        support = Counter(ys)
        eligible = [c for c in range(k) if support[c] >= WORST_MIN_SUPPORT]
        m = (4 * n + 4) // 5
        ca, cb = _counts(ys, sa, k, m), _counts(ys, sb, k, m)
        ma, ea = _metrics(ca, n, labels, eligible, m, self.answers)
        mb, eb = _metrics(cb, n, labels, eligible, m, self.answers)
        deltas: dict[str, float | None] = {}
        exact_deltas: dict[str, str | None] = {}
        margins: dict[str, str] = {}
        for metric in METRICS:
            if metric not in ea or metric not in eb:
                deltas[metric] = None
                exact_deltas[metric] = None
                margins[metric] = "not_applicable"
                continue
            deltas[metric] = ma[metric] - mb[metric]
            d = ea[metric] - eb[metric]
            exact_deltas[metric] = _frac(d)
            margins[metric] = "held" if d >= -MAX_DROP[metric] else "broken"
        w0, w1, w2 = WEIGHTS
        g_point = (w0 * (ma["macro_f1"] - mb["macro_f1"])
                   + w1 * (ma["brier_skill"] - mb["brier_skill"])
                   + w2 * (ma["selective_acc_80"] - mb["selective_acc_80"]))
        seed = seed_of(self.name, self.hashes)
        boot: dict[str, Any] = {"resamples": RESAMPLES}
        if self.group_hashes is not None:
            index = {h: i for i, h in enumerate(sorted(set(self.group_hashes)))}
            groups = [index[h] for h in self.group_hashes]
            g = group_gains(ys, sa, sb, k, seed, RESAMPLES, groups)
            boot.update(unit="group", n_units=len(index))
        else:
            g = gains(ys, sa, sb, k, seed, RESAMPLES)
            if version >= 2:
                boot.update(unit="example", n_units=n)
        ordered = sorted(g)
        qi = -((-5 * RESAMPLES) // 100) - 1
        q05 = ordered[qi]
        gain_is_real = q05 > 0.0
        check: dict[str, Any] | None = None
        if version >= 4 and self.group_hashes is not None:
            check = group_check(ys, sa, sb, k, groups, g_point)
            gain_is_real = gain_is_real and check["passed"]
        nothing_collapses = all(v != "broken" for v in margins.values())
        beats = gain_is_real and nothing_collapses
        boot.update(
            seed=seed.hex(),
            q05_index=qi,
            q05=q05,
            n_gain_le_0=sum(1 for v in g if v <= 0.0),
            gains_sha256=hashlib.sha256(struct.pack(f">{len(g)}d", *g)).hexdigest(),
            gains=g,
        )
        expected = {
            "data_sha256": data_digest(self.kind, self.answers, self.hashes, ys, self.offered,
                                       self.pm, self.pj, self.group_hashes),
            "n": n,
            "f1_answers": labels,
            "worst_eligible": eligible,
            "coverage": m,
            "metrics": {"model": ma, "jev": mb},
            "counts": {"model": ca, "jev": cb},
            "deltas": deltas,
            "exact_deltas": exact_deltas,
            "margins": margins,
            "gain": g_point,
            "bootstrap": boot,
            **({"group_check": check} if version >= 4 else {}),
            "gain_is_real": gain_is_real,
            "nothing_collapses": nothing_collapses,
            "beats": beats,
        }
        _compare(expected, self.dec["report"], f"{where}.report", diffs)
        return beats


def _fixed_params(expected: dict[str, Any], got: dict[str, Any], where: str) -> None:
    """Refuse (:class:`Malformed`) ``params`` (of the right shape) whose values are not the rule's:
    the product always writes these values, so another one is not an audit it wrote.

    >>> try:
    ...     _fixed_params(PARAMS, {**PARAMS, "resamples": 1000}, "params")
    ... except Malformed as exc:
    ...     print(exc)
    params.resamples: expected 2000 (a fixed parameter of the rule: the product always writes it), got 1000
    """
    for key, value in expected.items():
        if isinstance(value, dict):
            _fixed_params(value, got[key], f"{where}.{key}")
        elif not _same(value, got[key]):
            raise Malformed(f"{where}.{key}: expected {value!r} (a fixed parameter of the rule: the "
                            f"product always writes it), got {_short(got[key])}")


def _unique_names(read: Sequence[_Decision]) -> None:
    """Refuse (:class:`Malformed`) two decisions of one name (a training's names are unique)."""
    first: dict[str, int] = {}
    for i, decision in enumerate(read):
        if decision.name in first:
            raise Malformed(f"decisions[{i}].name: expected each decision's name once (a "
                            "training's decision names are unique; each is part of its "
                            f"decision's seed), got {_short(decision.name)} again (first at "
                            f"decisions[{first[decision.name]}])")
        first[decision.name] = i


def verify(audit: Any, *, large: bool = False) -> list[str]:
    """Rebuild everything in ``audit`` (a parsed audit) and return the differences (empty if none).

    Every field's presence and type, and every decision's sizes, are checked before any
    computation starts.

    Args:
        audit: the parsed audit.
        large: allow more than ``MAX_TOTAL_EXAMPLES`` test examples (or ``MAX_TOTAL_CELLS``
            examples x answers) in all (slower).

    Raises:
        Malformed: not an audit (wrong format or version, a field missing or unexpected, a
            wrong type, sizes the product never writes).
    """
    diffs = _Diffs()
    if not isinstance(audit, dict):
        raise Malformed(f"expected a JSON object at the top, got {type(audit).__name__}")
    fmt = audit.get("format")
    if fmt != AUDIT_FORMAT:
        raise Malformed(f'format: expected "{AUDIT_FORMAT}", got {_short(fmt)}')
    version = _field(audit, "audit_version", "audit")
    if isinstance(version, bool) or not isinstance(version, int) or version not in AUDIT_VERSIONS:
        raise Malformed(f"audit_version: expected one of {AUDIT_VERSIONS} (an integer), got "
                        f"{_short(version)}: use the verifier that matches this audit's version")
    schema = audit_schema(version)
    extra = set(audit) - set(schema)
    if extra:
        raise Malformed(f"unexpected field {_name(sorted(extra)[0])} at the top (the product never "
                        "writes it)")
    for key in schema:
        _field(audit, key, "audit")
    for key in ("training_id", "model_id", "jev_id"):
        _str(audit[key], key)
    for key in ("params", "overall") + (("trained_on",) if version >= 3 else ()):
        _bounded_size(audit[key], 200, key)
    top = {k: t for k, t in schema.items() if k != "decisions"}
    for key, t in top.items():
        _shape(audit[key], t, key)
    _fixed_params(PARAMS_BY_VERSION[version], audit["params"], "params")
    decisions = _list(audit["decisions"], "decisions", most=MAX_DECISIONS)
    overall = audit["overall"]
    keep, verdict = overall["keep_if_loses"], overall["verdict"]
    expected: dict[str, Any]
    if verdict == "failed":
        reason = overall["failure_reason"]
        if not isinstance(reason, str) or not reason.strip():
            diffs.add(f"overall.failure_reason: a failed training needs its reason, got "
                      f"{_short(reason)}")
        # read for shape, though a failed training has none
        _unique_names([_Decision(d, f"decisions[{i}]", version, _Diffs())
                       for i, d in enumerate(decisions)])
        if decisions:
            diffs.add(f"decisions: a failed training has no decisions, got {len(decisions)}")
        expected = {
            "n_decisions": 0, "needed": 0, "won": 0, "beats": False, "settling_decision": None,
            "keep_if_loses": keep, "verdict": "failed", "refunds_credit": True,
            "failure_reason": reason,
        }
    else:
        if not decisions:
            raise Malformed("decisions: expected at least one decision for a judged training, got 0")
        read = [_Decision(d, f"decisions[{i}]", version, diffs) for i, d in enumerate(decisions)]
        _unique_names(read)
        total = sum(d.n for d in read)
        cells = sum(d.n * len(d.answers) for d in read)
        if over_default_bounds(total, cells) and not large:
            raise Malformed(f"expected at most {MAX_TOTAL_EXAMPLES} test examples and "
                            f"{MAX_TOTAL_CELLS} examples x answers in all, got {total} and "
                            f"{cells}: such an audit takes long to verify; re-run with --large "
                            "to verify it anyway")
        results = [(d.name, d.check(version, diffs)) for d in read]
        won = sum(1 for _, b in results if b)
        needed = (2 * len(results) + 2) // 3
        beats = won >= needed
        settling = next(nm for nm, b in results if b == beats)
        rebuilt = "beats" if beats else ("kept" if keep else "refund")
        expected = {
            "n_decisions": len(results), "needed": needed, "won": won, "beats": beats,
            "settling_decision": settling, "keep_if_loses": keep, "verdict": rebuilt,
            "refunds_credit": rebuilt in ("refund", "failed"), "failure_reason": None,
        }
    _compare(expected, overall, "overall", diffs)
    if version >= 3:
        _check_trained_on(audit["trained_on"], diffs)
        _compare(binding_sha256(audit), audit["binding_sha256"], "binding_sha256", diffs)
    return diffs.lines


def _text(value: str) -> bytes:
    """A string as the digests take it: its UTF-8 length (4 bytes, big-endian), then its bytes."""
    raw = value.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


def binding_sha256(audit: dict[str, Any]) -> str:
    """The digest that binds an audit's fields that are not rebuilt from its rows (format 3).

    It covers the ids, the trained-on attestation, the split, the decisions (each one's name and
    row digest, in order), the option ``keep_if_loses``, the verdict, whether the credit comes
    back and the failure reason; the reports are rebuilt from the rows, so the row digests bind
    them too. The formula is in docs/audit-format.md.
    """
    trained, overall = audit["trained_on"], audit["overall"]
    h = hashlib.sha256(BINDING_DOMAIN)
    for value in (audit["training_id"], audit["model_id"], audit["jev_id"],
                  trained["status"], trained["ids_sha256"] or ""):
        h.update(_text(value))
    h.update(struct.pack(">Q", trained["n_ids"] or 0))
    h.update(_text(json.dumps(audit["split"], sort_keys=True, separators=(",", ":"))))
    h.update(struct.pack(">I", len(audit["decisions"])))
    for decision in audit["decisions"]:
        h.update(_text(decision["name"]))
        h.update(bytes.fromhex(decision["report"]["data_sha256"]))
    for value in ("true" if overall["keep_if_loses"] else "false", overall["verdict"],
                  "true" if overall["refunds_credit"] else "false",
                  overall["failure_reason"] or ""):
        h.update(_text(value))
    return h.hexdigest()


def id_sha256(ident: str) -> str:
    """The SHA-256 of one example id under the audit's id domain (hex).

    >>> id_sha256("row-1")[:16]
    'a6ba621b9c047139'
    """
    return hashlib.sha256(ID_DOMAIN + ident.encode("utf-8")).hexdigest()


def trained_on_sha256(id_digests: Sequence[str]) -> str:
    """The digest of a set of ids, from their :func:`id_sha256` (each once, sorted)."""
    h = hashlib.sha256(TRAINED_ON_DOMAIN)
    for d in sorted({bytes.fromhex(x) for x in id_digests}):
        h.update(d)
    return h.hexdigest()


def _check_trained_on(trained: dict[str, Any], diffs: _Diffs) -> None:
    stated = trained["ids_sha256"] is not None, trained["n_ids"] is not None
    if trained["status"] == ATTESTED and not (all(stated) and trained["n_ids"] >= 1):
        diffs.add("trained_on: status 'attested' needs the stated set's ids_sha256 and n_ids "
                  f"(at least 1), got {_short(trained['ids_sha256'])} and "
                  f"{_short(trained['n_ids'])}")
    if trained["status"] == NOT_STATED and any(stated):
        diffs.add("trained_on: status 'not stated' has no ids_sha256 and no n_ids, got "
                  f"{_short(trained['ids_sha256'])} and {_short(trained['n_ids'])}")


USAGE = "usage: python3 verify_audit.py [--large] [--expect-sha256 HEX] AUDIT.json"


class _Usage(Exception):
    """The command line is not one the verifier takes."""


def _options(args: list[str]) -> tuple[str, bool, str | None]:
    """(path, --large, --expect-sha256 digest) from the command line."""
    large, expect, rest = False, None, []
    items = iter(args)
    for arg in items:
        if arg == "--large":
            large = True
        elif arg == "--expect-sha256" or arg.startswith("--expect-sha256="):
            value = arg.partition("=")[2] if "=" in arg else next(items, None)
            if value is None or not _HEX64.fullmatch(value.lower()) or expect is not None:
                raise _Usage(f"--expect-sha256: expected one SHA-256 (64 hex digits), got "
                             f"{_short(value)}: copy the digest the ledger or the result page "
                             "shows")
            expect = value.lower()
        elif arg.startswith("--") and arg != "--":
            raise _Usage(f"unknown option {_short(arg)}")
        else:
            rest.append(arg)
    if len(rest) != 1:
        raise _Usage(f"expected one audit file, got {len(rest)}")
    return rest[0], large, expect


def _print(text: str, err: bool = False) -> None:
    """Print, ignoring a reader that went away (``| head``): the exit status still tells."""
    stream = sys.stderr if err else sys.stdout
    try:
        print(text, file=stream)
        stream.flush()
    except (BrokenPipeError, OSError):
        # the reader is gone: send the rest (and the interpreter's final flush) to /dev/null
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass


def _run(args: list[str]) -> int:
    if args and args[0] in ("-h", "--help"):
        _print(USAGE)
        _print("exit status: " + "; ".join(f"{code} {what}" for code, what in EXIT_CODES.items()))
        return EXIT_OK
    try:
        path, large, expect = _options(args)
    except _Usage as exc:
        _print(f"verify_audit: {exc}\n{USAGE}", err=True)
        return EXIT_CANNOT_CHECK
    try:
        raw, size = read_bytes(path)
    except Unreadable as exc:
        _print(f"verify_audit: {exc}", err=True)
        return EXIT_CANNOT_CHECK
    if expect is not None:
        # Past the bound only its first bytes were read: no audit is that large, and its digest
        # is not shown (a digest of part of the file would be a false statement about it).
        got = hashlib.sha256(raw).hexdigest() if len(raw) <= MAX_FILE_BYTES else None
        if got != expect:
            has = (f"has SHA-256 {got}, expected {expect}" if got is not None else
                   f"is {size:,} bytes, larger than any audit ({MAX_FILE_BYTES:,} bytes at most), so "
                   f"not the file of SHA-256 {expect}")
            _print(f"verify_audit: NOT THE SETTLED FILE: {path} {has} "
                   f"(the digest recorded when the verdict was settled). Download the "
                   "audit again (GET /v1/models/{id}/audit or `typestrict audit ID`) and check "
                   "it before anything else.", err=True)
            return EXIT_NOT_SETTLED
    try:
        audit = parse(raw, path, size=size)
        diffs = verify(audit, large=large)
    except Malformed as exc:
        _print(f"verify_audit: not a valid audit: {exc}", err=True)
        return EXIT_MALFORMED
    except RecursionError:
        _print("verify_audit: not a valid audit: nested too deeply", err=True)
        return EXIT_MALFORMED
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        _print(f"verify_audit: not a valid audit: unexpected structure "
               f"({type(exc).__name__}: {_short(str(exc))})", err=True)
        return EXIT_MALFORMED
    if diffs:
        for line in diffs:
            _print(f"DIFFERS {line}")
        _print(f"verify_audit: FAILED: {len(diffs)} difference(s) in {path}; "
               "the audit does not match what its rows give.")
        return EXIT_DIFFERS
    overall = audit["overall"]
    n_dec = overall["n_decisions"]
    settling = overall["settling_decision"]
    tail = f", settled by {settling!r}" if settling is not None else ""
    trained = audit.get("trained_on")
    attested = "" if trained is None else (
        f"; trained on {trained['n_ids']} attested id(s)" if trained["status"] == ATTESTED
        else "; training set not stated")
    settled = "; it is the settled file (SHA-256 matches)" if expect is not None else ""
    _print(f"verify_audit: OK: {path}: every number matches; {n_dec} decision(s), "
           f"verdict {overall['verdict']}{tail}{attested}{settled}.")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: verify one audit file; print every difference; return the exit status.

    The interpreter's version is checked first; no traceback is ever printed (exit 2 with one
    line instead).
    """
    problem = python_problem()
    if problem is not None:
        _print(problem, err=True)
        return EXIT_CANNOT_CHECK
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except MemoryError:
        _print("verify_audit: not checked: it needs more memory than this machine has",
               err=True)
        return EXIT_CANNOT_CHECK
    except KeyboardInterrupt:
        _print("verify_audit: interrupted", err=True)
        return EXIT_CANNOT_CHECK
    except Exception as exc:  # the last guard: never a traceback
        _print(f"verify_audit: not checked: the verifier stopped on this file "
               f"({type(exc).__name__}); report it with the file", err=True)
        return EXIT_CANNOT_CHECK


if __name__ == "__main__":
    sys.exit(main())
