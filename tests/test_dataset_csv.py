"""The fast paths of a registered dataset's CSV (``dataset_csv``) read the cells, parse the times
and write the bytes that the general ways do, and change no refusal.

* the writer: ``dataset_rows.csv_bytes`` against pandas' ``to_csv`` of the data frame of the
  rows (the previous writer, kept below verbatim) on seeded random rows of hostile values:
  quotes, commas, line ends, unicode, empty cells, floats of every magnitude and ``-0.0``, NaN
  (missing), truth values, times to the second and to the microsecond;
* the reader: ``dataset_rows.read_cells`` against the same function with Arrow's reader turned
  off (the C ``csv`` reader, then the product's reader for its refusals) on seeded random CSV
  texts built from hostile pieces (quotes where the ``csv`` reader reads them and where it does
  not, ``""`` lines, blank lines, BOMs, ``\\r``, ``\\r\\n``, ragged rows);
* the whole: ``register_dataset`` and ``append_rows`` against the reference code
  (``tests/dataset_reference.py``) on seeded random ``seattle_rain`` files with hostile cells:
  the same stored bytes, or the same refusal (class, message, file, row and column).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests import dataset_reference as ref
from typestrict_pipeline.backtest.workflows import dataset_csv, dataset_rows, default_registry
from typestrict_pipeline.backtest.workflows.dataset_rows import Rows, csv_bytes
from typestrict_pipeline.backtest.workflows.datasets import append_rows, register_dataset
from typestrict_pipeline.errors import InputError

NOW = dt.datetime(2026, 1, 1, 12, 30, 15, tzinfo=dt.UTC)


def _pandas_csv(rows: Rows, *, header: bool) -> bytes:
    """The previous writer: pandas' ``to_csv`` of the data frame of the kept rows, a chunk at a time."""
    kept = np.flatnonzero(rows.keep)
    out = []
    for start in range(0, len(kept), dataset_rows.CHUNK_ROWS):
        part = kept[start:start + dataset_rows.CHUNK_ROWS]
        frame: dict[str, Any] = {}
        for c in rows.names:
            if c in ("event_time", "known_time"):
                frame[c] = dataset_rows._time_texts((rows.event_us if c == "event_time" else rows.known_us)[part])
            elif isinstance(rows.values[c], np.ndarray):
                frame[c] = rows.values[c][part]
            else:
                texts = pd.Series(rows.values[c].take(pa.array(part)).to_pylist(), dtype=str)
                frame[c] = texts.where(texts != "", np.nan)
        out.append(pd.DataFrame(frame).to_csv(index=False, header=header and start == 0).encode())
    return b"".join(out)


TEXTS = ["", " ", "  a  ", "rain", ",", '"', '""', 'say "hi"', "a,b", "two\nlines", "cr\r\nlf", "\n", "café ☔ 日本",
         "NA", "nan", "None", "True", "-3.5", "1e5", "x\u2028y", "\x85", "\ufeffbom", "\t", "'quoted'", "a;b|c"]
FLOATS = [0.0, -0.0, 7.0, 0.1, 0.30000000000000004, 1e16, 1e15, 123456789012345678.0, 1e-05, 0.0001, 5e-324,
          2.2250738585072014e-308, 1.7976931348623157e308, -1e300, 1 / 3, 2.5, -123.456, float("nan")]


def _float(rng: random.Random) -> float:
    if rng.random() < 0.6:
        return rng.choice(FLOATS)
    bits = rng.getrandbits(64)
    value = float(np.array([bits], dtype=np.uint64).view(np.float64)[0])
    return value if np.isfinite(value) else rng.uniform(-1e6, 1e6)


def _random_rows(rng: random.Random, n: int) -> Rows:
    lo, hi = -2208988800 * 10**6, 7258118399 * 10**6  # 1900 to 2199, in microseconds
    def times() -> np.ndarray:
        us = np.array([rng.randrange(lo, hi) for _ in range(n)], dtype=np.int64)
        whole = np.array([rng.random() < 0.8 for _ in range(n)])
        return np.where(whole, us - us % 1_000_000, us)
    values: dict[str, Any] = {
        "x": np.array([_float(rng) for _ in range(n)]),
        "flag": np.array([rng.random() < 0.5 for _ in range(n)]),
        "w": pa.chunked_array([pa.array([rng.choice(TEXTS) for _ in range(n)], type=pa.string())]),
        "y": np.array([rng.choice(FLOATS) for _ in range(n)]),
    }
    names = ["event_time", "known_time", *rng.sample(list(values), len(values))]
    keep = np.array([rng.random() < 0.85 for _ in range(n)])
    keep[rng.randrange(n)] = True
    return Rows(tuple(names), values, times(), times(), keep)


@pytest.mark.parametrize("chunk", [3, 64, dataset_rows.CHUNK_ROWS])
def test_the_writer_writes_the_bytes_of_to_csv(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataset_rows, "CHUNK_ROWS", chunk)
    rng = random.Random(chunk)
    for _ in range(15 if chunk == 3 else 50):  # pandas writes a chunk of 3 rows in 1 ms
        rows = _random_rows(rng, rng.randrange(1, 40 if chunk == 3 else 200))
        for header in (True, False):
            assert b"".join(csv_bytes(rows, header=header)) == _pandas_csv(rows, header=header)


def test_the_times_and_numbers_are_written_as_before_over_their_whole_range() -> None:
    rng = np.random.default_rng(7)
    us = rng.integers(-2208988800 * 10**6, 7258118399 * 10**6, 100_000) // 10**6 * 10**6
    texts = dataset_csv.iso_texts(us)
    assert texts is not None and texts.to_pylist() == dataset_rows._time_texts(us)
    assert dataset_csv.iso_texts(us + 1) is None  # a fraction of a second: the general way
    numbers = rng.integers(0, 2**64, 50_000, dtype=np.uint64).view(np.float64)
    numbers = np.concatenate([numbers[np.isfinite(numbers)], np.round(rng.normal(size=1000) * 10, 1), [-0.0, 0.0]])
    assert dataset_csv.float_texts(numbers).to_pylist() == numbers.astype(str).tolist()


def test_z_times_are_the_times_pandas_reads() -> None:
    rng = np.random.default_rng(3)
    seconds = rng.integers(-2208988800, 7258118399, 100_000)
    texts = [t + "Z" for t in np.datetime_as_string(seconds.view("datetime64[s]"), unit="s").tolist()]
    low, high = -2208988800 * 10**9, 7258118400 * 10**9
    fast = dataset_csv.z_times(pa.array(texts), low, high)
    expected = pd.to_datetime(pd.Series(texts), utc=True, format="ISO8601").dt.tz_localize(None)
    assert fast is not None and fast.tolist() == expected.dt.as_unit("ns").to_numpy().view(np.int64).tolist()
    for bad in ["2011-02-29T00:00:00Z", "2012-13-01T00:00:00Z", "2012-01-01T24:00:00Z", "2012-01-01T00:60:00Z",
                "2012-01-01T00:00:60Z", "1899-12-31T23:59:59Z", "2200-01-01T00:00:00Z", "2012-01-01t00:00:00Z",
                "2012-01-01T00:00:00z", " 2012-01-01T00:00:00Z", "2012-01-01T00:00:00+00:00", "2012-01-0１T00:00:00Z"]:
        assert dataset_csv.z_times(pa.array([texts[0], bad]), low, high) is None, bad


# The reader: random CSV texts of hostile pieces.
PIECES = ['a', '1', '', ' ', '"q"', '"a,b"', '"x""y"', '""', '"two\nlines"', '"cr\r\nlf"', '"lone\rcr"', 'x"y',
          '"q"x', ' "q"', '"open', 'é☔', '\x0b', '\x1c', '\x85', '\u2028', '\ufeff', '"""', '""""', "'s'"]


def _csv_text(rng: random.Random) -> bytes:
    width = rng.randrange(1, 4)
    line_end = rng.choice(["\n", "\r\n", "\r"])
    hostile = rng.random() < 0.5
    lines = []
    for _ in range(rng.randrange(1, 8)):
        cells = rng.randrange(width - 1 if hostile else width, width + (2 if hostile else 1))
        pieces = PIECES if hostile else PIECES[:10]
        lines.append(",".join(rng.choice(pieces) for _ in range(max(cells, 1))))
        if hostile and rng.random() < 0.1:
            lines.append(rng.choice(["", '""', " "]))
    text = line_end.join(lines) + (line_end if rng.random() < 0.7 else "")
    bom = "\ufeff" * rng.choice([0, 0, 1, 2])
    return (bom + text).encode()


def _read(path: Path) -> tuple[Any, ...]:
    try:
        cells = dataset_rows.read_cells(path)
    except InputError as exc:
        return (type(exc).__name__, str(exc))
    return ("read", cells.names, cells.rows, {c: v.to_pylist() for c, v in cells.columns.items()})


def test_arrow_reads_the_cells_the_csv_reader_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    fast = 0
    for i in range(600):
        path = tmp_path / f"{i}.csv"
        path.write_bytes(_csv_text(rng))
        new = _read(path)
        fast += dataset_csv.arrow_columns(path.read_bytes(), 10**6) is not None
        with monkeypatch.context() as m:
            m.setattr(dataset_csv, "arrow_columns", lambda raw, cell: None)
            assert new == _read(path), path.read_bytes()
    assert fast > 200  # most files are read by Arrow, and many the general way


# The whole: register and append against the reference code.
HEAD = ["event_time", "known_time", "precipitation", "temp_max", "temp_min", "wind", "weather"]
BAD_TIMES = ["2011-02-29T00:00:00Z", "2012-13-01T00:00:00Z", "2012-01-01T24:00:00Z", "2012-01-01T00:00:60Z",
             "1899-12-31T00:00:00Z", "2200-01-01T00:00:00Z", "2012-01-05", "", "tomorrow", "2027-01-01T00:00:00Z"]
ODD_TIMES = ["2012-01-03T00:00:00+14:00", "2012-01-03t01:00z", " 2012-01-04T00:00Z ", "2012-01-05T00:00:00.250000Z",
             "2012-01-06 10:00Z", "2012-01-07T00:00:00-0530"]
NUMBERS = ["7", "7.0", "-0", " 3 ", "", "1e16", "0.30000000000000004", "5e-324", "+.5", "1E3", "123456789012345678"]
BAD_NUMBERS = ["NA", "inf", "lots", "1,5", "0x10", "1e999", "--1"]
BAD_TEXTS = ["=1+1", "-x", "+y", "@z", "\tx", "ra\x01in", "cr\rin", "x\u2028y", "\x85"]
GOOD_TEXTS = [t for t in TEXTS if t not in ("\t", "x\u2028y", "\x85")]


def _quote(cell: str, everything: bool) -> str:
    if everything or any(c in cell for c in ',"\n\r') or cell.strip() != cell:
        return '"' + cell.replace('"', '""') + '"'
    return cell


def _time(rng: random.Random, day: int, hostile: bool) -> str:
    if hostile and rng.random() < 0.5:
        return rng.choice(BAD_TIMES + ODD_TIMES)
    t = dt.datetime(2012, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=day, seconds=rng.randrange(86_400))
    return f"{t:%Y-%m-%dT%H:%M:%SZ}"


def _dataset_file(rng: random.Random, first_day: int = 0) -> bytes:
    hostile = rng.random() < 0.5
    rate = 0.04 if hostile else 0.0
    extra = rng.choice([None, "number", "text", "bool"])
    rows = []
    for i in range(rng.randrange(1, 25)):
        day = first_day + (i if rng.random() < 0.9 else rng.randrange(i + 1))  # some repeated days
        ev = _time(rng, day, rng.random() < rate * 5)
        kn = _time(rng, day + 1, rng.random() < rate * 5)
        cells = [ev, kn] + [rng.choice(BAD_NUMBERS if rng.random() < rate / 3 else NUMBERS) for _ in range(4)]
        cells.append(rng.choice(BAD_TEXTS if rng.random() < rate else GOOD_TEXTS))
        if extra:
            cells.append({"number": rng.choice(NUMBERS), "text": rng.choice(GOOD_TEXTS),
                          "bool": rng.choice(["true", "False", " TRUE ", "yes" if rng.random() < rate else "false"])}[extra])
        rows.append(cells)
        if rng.random() < 0.05:
            rows.append(list(rows[rng.randrange(len(rows))]))  # a duplicate row, stored once
        if rng.random() < rate:
            row = rows[rng.randrange(len(rows))]
            rows.append([*row[:6], "a conflict", *row[7:]])  # the same times, another value
    everything = rng.random() < 0.5
    end = rng.choice(["\n", "\r\n"])
    head = HEAD + ([f"extra {extra}"] if extra else [])
    lines = [",".join(head)] + [",".join(_quote(c, everything) for c in r) for r in rows]
    return ("\ufeff" * rng.choice([0, 1]) + end.join(lines) + end).encode()


def _outcome(run: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("stored", run())
    except InputError as exc:
        return (type(exc).__name__, str(exc))


def _lone_cr(outcome: tuple[Any, ...]) -> bool:
    """A refusal of a lone carriage return in a text cell: refused now, stored unreadable before
    (``tests/test_dataset_rows_reference.py``, ``CHANGED``)."""
    return "cr\\rin" in str(outcome[-1])


def _registered(src: Path, base: Path) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """What ``register_dataset`` stored (or its refusal), and what the reference stored."""
    def new() -> bytes:
        register_dataset("d", "seattle_rain", {"weather": src}, base=base, now=NOW)
        return (base / "d" / "weather.csv").read_bytes()

    wf = default_registry().get("seattle_rain")
    return _outcome(new), _outcome(lambda: ref.register_bytes(src, wf, "weather", NOW))


def _appended(base: Path, more: Path) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """What ``append_rows`` added (or its refusal), and what the reference added."""
    target = base / "d" / "weather.csv"
    before = target.read_bytes()
    expected = _outcome(lambda: ref.append_bytes(target, more, "weather", NOW))

    def new() -> tuple[Any, ...]:
        r = append_rows("d", "weather", more, base=base, now=NOW)
        return (target.read_bytes()[len(before):], r.added, r.rows, r.last_known_before, r.last_known_after)

    return _outcome(new), expected


@pytest.mark.parametrize("batch", range(6))
def test_register_and_append_store_and_refuse_as_the_reference(batch: int, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(batch)
    monkeypatch.setattr(dataset_rows, "CHUNK_ROWS", rng.choice([3, 7, dataset_rows.CHUNK_ROWS]))
    stored = 0
    for i in range(30):
        src, more, base = tmp_path / f"w{i}.csv", tmp_path / f"m{i}.csv", tmp_path / f"ds{i}"
        src.write_bytes(_dataset_file(rng))
        new, expected = _registered(src, base)
        if _lone_cr(new):
            continue
        assert new == expected, src.read_bytes()
        if new[0] != "stored":
            continue
        stored += 1
        more.write_bytes(_dataset_file(rng, first_day=40))
        new, expected = _appended(base, more)
        assert _lone_cr(new) or new == expected, more.read_bytes()
    assert stored >= 5
