"""What an append and :func:`~typestrict_pipeline.backtest.workflows.datasets.dataset_info` need
of a stored table, kept beside it so that neither reads the table's rows.

A registered dataset's table ``<folder>/<table>.csv`` has a summary ``<folder>/.<table>.csv.json``:
its columns, how many rows it holds, its first and last knowledge time, and for each value column
which classes of cells it holds. It is written atomically, under the dataset's lock, right after
the table at register and at every append, with the table file's ``stat`` (size, ``mtime_ns``,
inode) as it was then. It is trusted only while the table's ``stat`` is that one: a crash between
the table and its summary, a table edited by hand, or a dataset registered before summaries
leaves a summary that does not match (or none), and the caller reads the table as before.

**The kinds.** An append types its rows by the kind each value column has when pandas reads the
stored table (``pd.read_csv(keep_default_na=False, na_values=[""])``: a number dtype is a number
column, ``bool`` a truth column, anything else text). That kind follows from which classes of
cells the column holds, as pandas parses a cell on its own:

* ``O``, a cell pandas reads as neither a number nor a truth value: the column is text (a chunk
  holding it is ``object``, and ``object`` wins over every other chunk's type);
* ``N``, a number or an empty cell (missing): numbers only, the column is a number column;
* ``B``, ``True``/``false``/...: truth values only, the column is ``bool``.

A column with ``B`` and ``N`` cells and no ``O`` one is read by pandas as text or as numbers
depending on which rows fall in which of its chunks (a chunk of ``True`` cells and one of whole
numbers join as integers; one chunk with both is text), so no summary of it can say: its kind
is ``None`` and an append reads the table, as before. The classes of the rows an append adds
are added to the table's, so the summary after the append is exact without a read.
"""

from __future__ import annotations

import io
import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from typestrict_pipeline.backtest.pit import EVENT_TIME, KNOWN_TIME
from typestrict_pipeline.lazy import LazyModule

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from typestrict_pipeline.backtest.workflows.dataset_rows import Rows
else:
    pd = LazyModule("pandas")
    pa = LazyModule("pyarrow")

__all__ = ["Summary", "cell_classes", "kind_of", "read_summary", "summary_of_frame", "summary_of_rows",
           "summary_path", "write_summary"]

VERSION = 1
_TRUTHS = ("true", "false")


@dataclass(frozen=True)
class Summary:
    """A stored table as an append and a listing need it, without its rows."""

    columns: tuple[str, ...]
    """Every column, in the file's order."""
    classes: Mapping[str, str]
    """For each value column, the classes of its cells (``"B"``, ``"N"``, ``"O"``, sorted)."""
    rows: int
    first_known_us: int
    last_known_us: int

    @property
    def kinds(self) -> dict[str, str] | None:
        """Each column's kind as pandas reads the stored table (the time columns ``text``), in
        the file's order; ``None`` when a column's kind depends on how pandas chunks the file."""
        out = {}
        for col in self.columns:
            kind = "text" if col in (EVENT_TIME, KNOWN_TIME) else kind_of(self.classes[col])
            if kind is None:
                return None
            out[col] = kind
        return out

    def plus(self, added: Summary) -> Summary:
        """This table with ``added``'s rows after it (all known later)."""
        classes = {c: "".join(sorted(set(self.classes[c]) | set(added.classes[c]))) for c in self.classes}
        return Summary(self.columns, classes, self.rows + added.rows, self.first_known_us, added.last_known_us)


def kind_of(classes: str) -> str | None:
    """The kind pandas reads a column of cells of ``classes`` as (``None``: it depends on its chunks).

    >>> kind_of("N"), kind_of("B"), kind_of("BO"), kind_of("BN")
    ('number', 'bool', 'text', None)
    """
    if "O" in classes:
        return "text"
    if classes == "B":
        return "bool"
    if classes == "N":
        return "number"
    return None


def _pandas_kind(texts: list[str]) -> str:
    """The kind pandas gives a column of these non-empty cells, written as the stored table
    writes them (the ``csv`` writer with ``to_csv``'s settings; a first column so no line is
    blank) and read in one chunk."""
    import csv

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(["i", "v"])
    writer.writerows(("0", t) for t in texts)
    read = pd.read_csv(io.BytesIO(out.getvalue().encode()), keep_default_na=False, na_values=[""],
                       low_memory=False)
    dtype = read["v"].dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    return "number" if pd.api.types.is_numeric_dtype(dtype) else "text"


def _text_classes(distinct: pa.Array) -> set[str]:
    """The classes of distinct non-empty text cells, as pandas parses each (asked of pandas:
    the cells that may be truth values apart from the others, so neither read mixes B and N)."""
    import pyarrow.compute as pc

    out: set[str] = set()
    if not len(distinct):
        return out
    word = pc.is_in(pc.utf8_lower(pc.utf8_trim_whitespace(distinct)), value_set=pa.array(_TRUTHS))
    for part in (pc.filter(distinct, pc.invert(word)), pc.filter(distinct, word)):
        if not len(part):
            continue
        kind = _pandas_kind([str(v) for v in part.to_pylist()])
        out.add({"text": "O", "bool": "B"}.get(kind, "N"))
    return out


def cell_classes(cells: pa.Array | pa.ChunkedArray) -> str:
    """The classes of a text column's cells as stored (an empty cell is missing: ``N``; beside
    an ``O`` cell, ``N`` may be left out: the column is text whatever else it holds).

    >>> cell_classes(pa.array(["1", "2.5", ""])), cell_classes(pa.array(["True", "false"]))
    ('N', 'B')
    >>> cell_classes(pa.array(["True", "rain", "7"])), cell_classes(pa.array(["True", "1"]))
    ('BO', 'BN')
    """
    import pyarrow.compute as pc

    distinct = pc.unique(cells)
    if isinstance(distinct, pa.ChunkedArray):
        distinct = distinct.combine_chunks()
    distinct = distinct.cast(pa.large_string()) if pa.types.is_string(distinct.type) else distinct
    distinct = pc.drop_null(distinct)
    empty = pc.equal(distinct, "")
    out = _text_classes(pc.filter(distinct, pc.invert(empty)))
    if pc.any(empty).as_py():
        out.add("N")
    return "".join(sorted(out))


def summary_of_rows(rows: Rows) -> Summary:
    """The summary of the kept ``rows`` as :func:`dataset_rows.csv_bytes` writes them: numbers
    as ``to_csv`` writes a ``float64`` (or empty), truth values ``True``/``False``, text as is."""
    kept = np.flatnonzero(rows.keep)
    classes = {}
    for col, v in rows.values.items():
        if isinstance(v, np.ndarray):
            classes[col] = "B" if v.dtype == np.bool_ else "N"
        else:
            classes[col] = cell_classes(v.take(pa.array(kept)))
    known = rows.known_us[kept]
    return Summary(tuple(rows.names), classes, len(kept), int(known.min()), int(known.max()))


def summary_of_frame(frame: pd.DataFrame, raw: bytes) -> Summary:
    """The summary of a stored table read whole by pandas (``frame``, from the file's ``raw``
    bytes). A column pandas typed ``bool`` holds truth values only and one typed ``float`` none
    (pandas joins a ``bool`` chunk with a ``float`` one as ``object``); an ``object`` column's
    values are each what its chunk made of them; an integer column may hide a chunk of truth
    values (pandas joins them as integers), so its cells are read again as text."""
    classes = {}
    ints = []
    for col in frame.columns:
        name = str(col)
        if name in (EVENT_TIME, KNOWN_TIME):
            continue
        dtype = frame[col].dtype
        if pd.api.types.is_bool_dtype(dtype):
            classes[name] = "B"
        elif pd.api.types.is_float_dtype(dtype):
            classes[name] = "N"
        elif pd.api.types.is_numeric_dtype(dtype):
            ints.append(name)
        else:
            classes[name] = _object_classes(frame[col])
    if ints:
        texts = pd.read_csv(io.BytesIO(raw), usecols=ints, dtype=str, keep_default_na=False, na_values=[""])
        for name in ints:
            classes[name] = cell_classes(pa.array(texts[name].fillna(""), type=pa.large_string()))
    known = pd.to_datetime(frame[KNOWN_TIME], utc=True, format="ISO8601")
    return Summary(tuple(str(c) for c in frame.columns), classes, len(frame),
                   known.min().value // 1000, known.max().value // 1000)


def _object_classes(column: pd.Series) -> str:
    out = set()
    values = column.to_numpy(dtype=object)
    texts = [v for v in values if isinstance(v, str)]
    if len(texts) < len(values):
        others = [v for v in values if not isinstance(v, str)]
        if any(isinstance(v, (bool, np.bool_)) for v in others):
            out.add("B")
        if any(not isinstance(v, (bool, np.bool_)) for v in others):  # a number, or missing
            out.add("N")
    out |= set(cell_classes(pa.array(texts, type=pa.large_string())))
    return "".join(sorted(out))


def summary_path(table: Path) -> Path:
    """Where ``table``'s summary is kept: ``.<file name>.json`` beside it."""
    return table.with_name(f".{table.name}.json")


def _stamp(table: Path) -> list[int] | None:
    try:
        st = table.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def write_summary(table: Path, summary: Summary | None) -> None:
    """Keep ``summary`` beside ``table`` with the table's ``stat`` as it is now (call it right
    after writing the table, under the dataset's lock); ``None`` removes any summary."""
    from typestrict_pipeline.files import write_atomic

    path = summary_path(table)
    stamp = _stamp(table)
    if summary is None or stamp is None:
        path.unlink(missing_ok=True)
        return
    data = {"version": VERSION, "stat": stamp, "columns": list(summary.columns),
            "classes": [[c, summary.classes[c]] for c in summary.columns if c in summary.classes],
            "rows": summary.rows, "first_known_us": summary.first_known_us,
            "last_known_us": summary.last_known_us}
    write_atomic(path, (json.dumps(data) + "\n").encode())


def read_summary(table: Path) -> Summary | None:
    """The summary of ``table`` when it describes the file as it is now (the same size,
    ``mtime_ns`` and inode as when it was written, and within the data files' size bound, past
    which every read refuses the table); else ``None``: read the table."""
    from typestrict_pipeline.files import max_data_file_bytes

    try:
        data = json.loads(summary_path(table).read_bytes())
    except (OSError, ValueError):
        return None
    stamp = _stamp(table)
    if stamp is None or not isinstance(data, dict) or data.get("version") != VERSION or data.get("stat") != stamp:
        return None
    if stamp[0] > max_data_file_bytes():
        return None
    try:
        return _parsed(data)
    except (KeyError, TypeError, ValueError):
        return None


def _parsed(data: Mapping[str, Any]) -> Summary:
    columns = tuple(str(c) for c in data["columns"])
    classes = {str(c): str(k) for c, k in data["classes"]}
    values = [c for c in columns if c not in (EVENT_TIME, KNOWN_TIME)]
    if sorted(classes) != sorted(values) or EVENT_TIME not in columns or KNOWN_TIME not in columns:
        raise ValueError("columns")
    if any(not set(k) <= set("BNO") for k in classes.values()):
        raise ValueError("classes")
    rows, first, last = (int(data[k]) for k in ("rows", "first_known_us", "last_known_us"))
    if rows < 1 or first > last:
        raise ValueError("rows")
    return Summary(columns, classes, rows, first, last)

