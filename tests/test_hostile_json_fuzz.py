"""Property-based fuzz of the one strict JSON reader and the readers built on it.

Whatever the bytes, each reader returns a value or raises the project's own error (an
``InputError`` subclass naming the file): never ``RecursionError``, ``ValueError`` from Python's
integer-length limit, ``OverflowError``, ``UnicodeError`` or ``MemoryError``. Hypothesis draws are
derandomized (``derandomize=True``), so every run tries the same inputs.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typestrict_pipeline.errors import InputError, ManifestError, PredictionsError
from typestrict_pipeline.files import (
    MAX_JSON_DEPTH,
    iter_jsonl_objects,
    loads_strict,
    read_json_file,
)
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.predictions import read_predictions

FUZZ = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=30,
)

# Fragments a hostile file is made of: every JSON token, numbers of extreme sizes, deep
# openings, escapes and lone surrogates, duplicate keys, raw bytes rendered as text.
fragments = st.sampled_from(
    ["{", "}", "[", "]", ",", ":", '"a"', '"a":1', '"a":2', "1", "-0", "1e400", "-1e400", "1" * 5001,
     "0." + "0" * 400 + "1", "NaN", "Infinity", "-Infinity", "true", "null", '"\\ud800"', '"\\u0000"',
     '"\\x"', "[" * 50, "]" * 50, " ", "\n", "\ufeff", "\x00", "é", "9" * 41]
)
hostile_text = st.lists(fragments, max_size=40).map("".join) | st.text(max_size=200)


def _only_ours_or_a_value(text: str) -> Any:
    try:
        return loads_strict(text, file="fuzz.json")
    except InputError as exc:
        message = str(exc)
        assert message.startswith("fuzz.json") and "expected " in message and ", got " in message
        return exc


@FUZZ
@given(hostile_text)
def test_the_strict_reader_returns_a_value_or_our_error(text: str) -> None:
    _only_ours_or_a_value(text)


@FUZZ
@given(json_values)
def test_the_strict_reader_reads_back_what_json_writes(value: Any) -> None:
    """Round trip: every value within the bounds is read back equal (integers up to 40 digits)."""
    text = json.dumps(value)
    got = _only_ours_or_a_value(text)
    if isinstance(got, InputError):
        # refused only for a documented bound
        assert any(b in str(got) for b in ("digits", "magnitude", "nested", "characters", "Unicode")), got
    else:
        assert got == value


@FUZZ
@given(st.integers(min_value=1, max_value=3 * MAX_JSON_DEPTH))
def test_depth_is_bounded_exactly(depth: int) -> None:
    text = "[" * depth + "]" * depth
    got = _only_ours_or_a_value(text)
    assert isinstance(got, InputError) == (depth > MAX_JSON_DEPTH)


@FUZZ
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_every_float_literal_is_finite_or_refused(x: float) -> None:
    got = _only_ours_or_a_value(json.dumps([x]))
    if not isinstance(got, InputError):
        assert math.isfinite(got[0])


@pytest.fixture(scope="module")
def folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="fuzz-"))


@FUZZ
@given(st.binary(max_size=300) | hostile_text.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_the_file_readers_return_a_value_or_our_error(folder: Path, data: bytes) -> None:
    manifest = folder / "manifest.json"
    manifest.write_bytes(data)
    with pytest.raises(ManifestError):
        load_manifest(manifest)  # no byte string of this size is a whole valid manifest
    with contextlib.suppress(InputError):
        read_json_file(manifest)
    rows = folder / "p.jsonl"
    rows.write_bytes(data)
    with contextlib.suppress(InputError):
        list(iter_jsonl_objects(rows))
    with contextlib.suppress(PredictionsError):
        read_predictions(rows, "model")


def test_a_long_jsonl_line_is_refused_after_the_bound_not_held_whole(tmp_path: Path) -> None:
    import tracemalloc

    rows = tmp_path / "p.jsonl"
    with rows.open("wb") as handle:  # 8 MB on one line, then a good row
        handle.write(b'{"id": "e1", "pad": "' + b"x" * (8 << 20) + b'"}\n{"id": "e2"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(PredictionsError, match=r"p\.jsonl, row 1: expected a JSON Lines row of at most 65,536 bytes"):
            list(iter_jsonl_objects(rows, PredictionsError, max_line_bytes=65_536))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the bound's worth of bytes, not the 8 MB line
