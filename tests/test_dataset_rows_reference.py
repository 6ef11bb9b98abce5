"""Registering and appending a point-in-time dataset a column at a time stores the same bytes and
refuses the same files with the same errors as the code that typed every cell in Python.

The reference is that code, kept verbatim in ``tests/dataset_reference.py``. Each file below is
registered (and appended) by both; the stored bytes must be equal bit for bit, and a refusal the
same class with the same message (expected, got, what to do, file, row, column). Every case runs
with the production chunk of rows and with a chunk of 3 rows, so a check or a write that spans
chunks is held to the same first bad row and the same bytes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import dataset_reference as ref
from typestrict_pipeline.backtest.workflows import dataset_rows, default_registry
from typestrict_pipeline.backtest.workflows.datasets import (
    append_rows,
    dataset_info,
    register_dataset,
)
from typestrict_pipeline.errors import InputError

NOW = dt.datetime(2026, 1, 1, 12, 30, 15, tzinfo=dt.UTC)
HEAD = "event_time,known_time,precipitation,temp_max,temp_min,wind,weather"


def _day(i: int, known: int = 1) -> str:
    t = dt.datetime(2012, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=i)
    return f"{t:%Y-%m-%dT%H:%M:%SZ},{t + dt.timedelta(days=known):%Y-%m-%dT%H:%M:%SZ}"


def _file(*rows: str, head: str = HEAD) -> bytes:
    return ("\n".join([head, *rows]) + "\n").encode()


GOOD = [_day(i) + f",{i / 4},{10 + i},-{i},{i % 3}.5,rain" for i in range(8)]

REGISTER: dict[str, bytes] = {
    "plain": _file(*GOOD),
    "numbers": _file(*(_day(i) + f",{v},7,7.0,{w},sun" for i, (v, w) in enumerate([
        ("7", "0.1"), ("7.0", "1e16"), ("-0", "1e-05"), (" 3 ", "123456789012345678"), ("", "+.5"),
        ("2.5", "1E3"), ("0.30000000000000004", "5e-324"), ("1e300", "-1e300")]))),
    "text": _file(*(_day(i) + f",1,2,3,4,{w}" for i, w in enumerate([
        '"a, b"', '"say ""hi"""', '"two\nlines"', "", "  ", "café ☔ 日本", "NA", "-3.5", "née"]))),
    "text lone carriage return": _file(GOOD[0], _day(1) + ',1,2,3,4,"cr\rin"'),
    "extra columns": _file(*(g + f",{i},{'true' if i % 2 else ' FALSE '},x{i}" for i, g in enumerate(GOOD)),
                           head=HEAD + ",count,flag,label"),
    "empty text column": _file(*(g + "," for g in GOOD), head=HEAD + ",note"),
    "mistake words": _file(*(g + f",{w}" for g, w in zip(GOOD, ["1", "NA", "2", "", "3", "4", "5", "6"],
                                                            strict=True)), head=HEAD + ",n"),
    "times with offsets": _file(*(f"{e},{k},1,2,3,4,sun" for e, k in [
        ("2012-01-01T00:00:00+14:00", "2012-01-01T00:00:00+14:00"), ("2012-01-01T10:00:00-05:30", "2012-01-02Z"),
        ("2012-01-02 10:00Z", "2012-01-03T00:00:00.250000Z"), (" 2012-01-03T00:00Z ", "2012-01-04T00:00:00.0000005Z"),
        ("2012-01-04t00:00z", "2012-01-05T01:00:00+0100")])),
    "duplicate rows": _file(GOOD[0], GOOD[1], GOOD[0], GOOD[2], GOOD[1], GOOD[0], GOOD[3]),
    "same times, one missing each": _file(_day(0) + ",,1,2,3,", _day(0) + ",,1,2,3,", _day(1) + ",1,,2,3,"),
    "times last": _file(*("1,2,3,4,rain," + _day(i) for i in range(5)),
                        head="precipitation,temp_max,temp_min,wind,weather,event_time,known_time"),
    "bom crlf blanks": b"\xef\xbb\xbf" + _file(GOOD[0], "", GOOD[1], '""', GOOD[2]).replace(b"\n", b"\r\n"),
    "unicode names": _file(*(g + ",1" for g in GOOD[:3]), head=HEAD + ",Tempé ☔"),
    # refused
    "empty file": b"",
    "header only": _file(),
    "bom only": b"\xef\xbb\xbf",
    "ragged short": _file(GOOD[0], GOOD[1], _day(2) + ",1,2"),
    "ragged long": _file(GOOD[0], GOOD[1] + ",extra"),
    "open quote": _file(GOOD[0], _day(1) + ',1,2,3,4,"rain'),
    "not utf-8": _file(GOOD[0]) + b"\xff\xfe\n",
    "duplicate header": _file(GOOD[0] + ",1", head=HEAD + ",wind"),
    "blank header": _file(GOOD[0] + ",1", head=HEAD + ", "),
    "trailing comma header": _file(GOOD[0] + ",", head=HEAD + ","),
    "bad time": _file(GOOD[0], "2012-13-01T00:00:00Z,2012-01-02T00:00:00Z,1,2,3,4,sun"),
    "no offset": _file(*GOOD[:3], _day(3).replace("Z,", ",", 1) + ",1,2,3,4,sun"),
    "date only": _file(GOOD[0], "2012-01-05,2012-01-06T00:00:00Z,1,2,3,4,sun"),
    "empty time": _file(GOOD[0], ",2012-01-06T00:00:00Z,1,2,3,4,sun"),
    "out of range then bad": _file("1899-12-31T00:00:00Z,1900-01-02T00:00:00Z,1,2,3,4,sun", *GOOD[:2],
                                   "2012-01-05T00:00:00Z,nonsense,1,2,3,4,sun"),
    "out of range": _file(GOOD[0], "2200-01-01T00:00:00Z,2012-01-02T00:00:00Z,1,2,3,4,sun"),
    "bad known time": _file(GOOD[0], "2012-01-05T00:00:00Z,tomorrow,1,2,3,4,sun"),
    "future": _file(*GOOD[:4], "2027-01-01T00:00:00Z,2027-01-02T00:00:00Z,1,2,3,4,sun"),
    "future by a second": _file(GOOD[0], "2026-01-01T00:00:00Z,2026-01-01T12:30:16Z,1,2,3,4,sun"),
    "conflicting duplicates": _file(*GOOD[:3], _day(1) + ",9,9,9,9,rain", _day(0) + ",0.0,10,-0,0.5,snow"),
    "conflicting text": _file(_day(0) + ",1,2,3,4,rain", _day(0) + ",1,2,3,4,"),
    "text in a number column": _file(*GOOD[:3], _day(3) + ",lots,2,3,4,sun"),
    "inf in a number column": _file(GOOD[0], _day(1) + ",1,inf,3,4,sun"),
    "a comma in a number": _file(GOOD[0], _day(1) + ',"1,5",2,3,4,sun'),
    "formula": _file(*GOOD[:2], _day(2) + ",1,2,3,4,=HYPERLINK(1)"),
    "control character": _file(GOOD[0], _day(1) + ",1,2,3,4,ra\x01in"),
    "tab first": _file(GOOD[0], _day(1) + ',1,2,3,4,"\tx"'),
    "yes in a truth column": _file(*(g + f",{f}" for g, f in zip(GOOD[:3], ["true", "false", "yes"], strict=True)),
                                   head=HEAD + ",flag"),
    "missing workflow column": _file(*(g.rsplit(",", 1)[0] for g in GOOD), head=HEAD.rsplit(",", 1)[0]),
    "missing known_time": _file("2012-01-01T00:00:00Z,1,2,3,4,sun",
                                head="event_time,precipitation,temp_max,temp_min,wind,weather"),
    "missing event_time": _file("2012-01-01T00:00:00Z,1,2,3,4,sun",
                                head="known_time,precipitation,temp_max,temp_min,wind,weather"),
    "bad cell before missing time": _file("2012-01-01T00:00:00Z,x,2,3,4,sun",
                                          head="event_time,precipitation,temp_max,temp_min,wind,weather"),
}


def _outcome(run: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("stored", run())
    except InputError as exc:  # every refusal: DatasetError, InputError
        return (type(exc).__name__, str(exc))


@pytest.fixture(params=[3, dataset_rows.CHUNK_ROWS], ids=["chunks-of-3", "chunks"])
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(dataset_rows, "CHUNK_ROWS", request.param)
    return int(request.param)


@pytest.mark.parametrize("case", list(REGISTER))
def test_register_stores_the_same_bytes_and_refuses_alike(case: str, chunk: int, tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_bytes(REGISTER[case])
    wf = default_registry().get("seattle_rain")
    before = _outcome(lambda: ref.register_bytes(path, wf, "weather", NOW))

    stored = tmp_path / "ds" / "d" / "weather.csv"

    def new() -> bytes:
        info = register_dataset("d", "seattle_rain", {"weather": path}, base=tmp_path / "ds", now=NOW)
        # the answer, made from the rows written, is what a read of the stored table gives
        assert info == dataset_info("d", base=tmp_path / "ds")
        return stored.read_bytes()

    if case in CHANGED:
        kind, message = CHANGED[case]
        assert _outcome(new) == (kind, f"{path}{message}") and not stored.parent.exists()
        return
    assert _outcome(new) == before


CHANGED = {  # refused now where the previous code stored a table no read could load
    "text lone carriage return": (
        "DatasetError", ", row 2, column 'weather': expected line breaks inside a text cell "
        "written \\n or \\r\\n, got 'cr\\rin'. Replace the lone carriage return (\\r) in the cell "
        "with \\n, or remove it, and send the file again."),
}
"""The previous code wrote a lone carriage return in a text cell unquoted (as pandas' ``to_csv``
does), then refused its own stored table when it read it for the answer, naming the server's
path; the dataset stayed registered and unreadable."""


APPEND: dict[str, bytes] = {
    "more days": _file(*(_day(i) + f",{i},7,7.0,,rain" for i in range(20, 25))),
    "columns reordered": _file(*("1,2,3,4,sun," + _day(i) for i in range(20, 23)),
                               head="precipitation,temp_max,temp_min,wind,weather,event_time,known_time"),
    "duplicates then early": _file(_day(20), _day(20), _day(2)),
    "early": _file(_day(20) + ",1,2,3,4,sun", _day(7, known=1) + ",1,2,3,4,sun"),
    "missing column": _file(*(_day(i) + ",1,2,3,4" for i in range(20, 22)), head=HEAD.rsplit(",", 1)[0]),
    "extra column": _file(*(_day(i) + ",1,2,3,4,sun,9" for i in range(20, 22)), head=HEAD + ",more"),
    "text in a number column": _file(_day(20) + ",1,2,3,4,sun", _day(21) + ",1,two,3,4,sun"),
    "future": _file(_day(20) + ",1,2,3,4,sun", "2026-02-01T00:00:00Z,2026-02-01T00:00:00Z,1,2,3,4,sun"),
    "header only": _file(),
    "ragged": _file(_day(20) + ",1,2,3,4"),
}


@pytest.mark.parametrize("case", list(APPEND))
def test_append_adds_the_same_bytes_and_refuses_alike(case: str, chunk: int, tmp_path: Path) -> None:
    (tmp_path / "w.csv").write_bytes(REGISTER["numbers"])
    register_dataset("d", "seattle_rain", {"weather": tmp_path / "w.csv"}, base=tmp_path / "ds", now=NOW)
    target = tmp_path / "ds" / "d" / "weather.csv"
    stored = target.read_bytes()
    src = tmp_path / "more.csv"
    if case == "duplicates then early":
        APPEND[case] = _file(*(r + ",1,2,3,4,sun" for r in (_day(20), _day(20), _day(21), _day(2))))
    src.write_bytes(APPEND[case])
    before = _outcome(lambda: ref.append_bytes(target, src, "weather", NOW))

    def new() -> tuple[Any, ...]:
        r = append_rows("d", "weather", src, base=tmp_path / "ds", now=NOW)
        after = target.read_bytes()
        assert after.startswith(stored)
        return (after[len(stored):], r.added, r.rows, r.last_known_before, r.last_known_after)

    assert _outcome(new) == before


def test_an_append_with_a_lone_carriage_return_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    (tmp_path / "w.csv").write_bytes(REGISTER["numbers"])
    register_dataset("d", "seattle_rain", {"weather": tmp_path / "w.csv"}, base=tmp_path / "ds", now=NOW)
    target = tmp_path / "ds" / "d" / "weather.csv"
    stored = target.read_bytes()
    src = tmp_path / "more.csv"
    src.write_bytes(_file(_day(20) + ",1,2,3,4,sun", _day(21) + ',1,2,3,4,"a\rb"'))
    with pytest.raises(InputError, match=r"row 2, column 'weather': expected line breaks inside a text"):
        append_rows("d", "weather", src, base=tmp_path / "ds", now=NOW)
    assert target.read_bytes() == stored
    assert dataset_info("d", base=tmp_path / "ds").tables[0].rows == stored.count(b"\n") - 1
