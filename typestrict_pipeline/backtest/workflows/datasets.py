"""Registered point-in-time datasets: register one for a workflow, append rows, read it fresh.

A registered dataset is a folder ``<datasets dir>/<name>/`` (``TYPESTRICT_DATASETS_DIR``, else
``${TYPESTRICT_HOME}/datasets``) holding ``dataset.json`` (its name, workflow and tables) and
one CSV per table the workflow reads (``event_time``, ``known_time`` in ISO 8601 with ``Z``,
then the value columns). The code server, the daemon, the CLI and every run read the same
folder, so the folder must be shared by the processes of a deployment (it is, by default, on
one machine).

Adding data is :func:`append_rows`: the new rows are validated like every input (the time
columns present and typed, the same value columns with the same kinds of values, every row
known strictly after the table's last knowledge time and not in the future, so rows already
known are never rewritten; a correction is a new row about the same ``event_time`` with a later
``known_time``), then the table file is replaced atomically under a lock. Readers re-read a
table when its file changed (:func:`~typestrict_pipeline.backtest.pit.read_csv_fresh`), so a
long-running daemon sees the new rows at its next tick.

Beside each table is its summary (:mod:`~typestrict_pipeline.backtest.workflows.dataset_summary`:
columns, kinds, row count, first and last knowledge time), written under the same lock right
after the table and trusted only while the table file's size, ``mtime_ns`` and inode are those it
was written with: an append and :func:`dataset_info` then read none of the table's rows (a
dataset without one, or a table changed since, is read whole as before and the summary written
again at the next append).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from typestrict_pipeline.backtest.pit import (
    EVENT_TIME,
    KNOWN_TIME,
    PointInTimeTable,
    format_time,
    read_csv_fresh,
)
from typestrict_pipeline.backtest.workflow import Workflow, WorkflowRegistry
from typestrict_pipeline.backtest.workflows.dataset_rows import (
    Cells,
    Rows,
    csv_bytes,
    read_cells,
    typed_column,
    validated_rows,
)
from typestrict_pipeline.backtest.workflows.dataset_summary import (
    Summary,
    read_summary,
    summary_of_frame,
    summary_of_rows,
    write_summary,
)
from typestrict_pipeline.errors import (
    ConflictError,
    DatasetError,
    InputError,
    NotFoundError,
    listed,
)
from typestrict_pipeline.files import StagedFile, max_data_file_bytes, read_json_file, write_atomic
from typestrict_pipeline.lazy import LazyModule
from typestrict_pipeline.values import shown

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    import pandas as pd
    import pyarrow as pa
else:
    pd = LazyModule("pandas")

__all__ = [
    "API_DATASETS",
    "CLI_DATASETS",
    "CONSOLE_DATASETS",
    "CONSOLE_STUDY_DATASETS",
    "AppendResult",
    "DatasetInfo",
    "DatasetWords",
    "TableInfo",
    "append_rows",
    "dataset_info",
    "dataset_names",
    "datasets_dir",
    "is_registered",
    "list_datasets",
    "load_registered",
    "register_dataset",
]

MANIFEST = "dataset.json"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,63}$")


def datasets_dir() -> Path:
    """Where registered datasets live: ``TYPESTRICT_DATASETS_DIR``, else ``${TYPESTRICT_HOME}/datasets``."""
    from typestrict_pipeline.store import typestrict_home

    explicit = os.environ.get("TYPESTRICT_DATASETS_DIR")
    return Path(explicit).resolve() if explicit else typestrict_home() / "datasets"


@dataclass(frozen=True)
class TableInfo:
    """One table of a registered dataset, as it is now."""

    name: str
    file: Path
    rows: int
    columns: tuple[str, ...]
    """Every column of the table, ``event_time`` and ``known_time`` first: the same list a
    workflow's :func:`~typestrict_pipeline.backtest.workflow.columns_read` gives (one meaning of
    "columns" in the CLI, the API and the docs)."""
    first_known: dt.datetime
    last_known: dt.datetime


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset: its workflow and its tables."""

    name: str
    workflow: str
    registered_at: dt.datetime
    tables: tuple[TableInfo, ...]

    @property
    def last_known(self) -> dt.datetime:
        """The earliest of the tables' latest knowledge times (what a tick's data end uses)."""
        return min(t.last_known for t in self.tables)


@dataclass(frozen=True)
class AppendResult:
    """What :func:`append_rows` did."""

    dataset: str
    table: str
    added: int
    rows: int
    last_known_before: dt.datetime
    last_known_after: dt.datetime


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError("a dataset name of lowercase letters, digits and _ (at most 64, starting with a letter "
                         "or digit)", shown(name, 80), "rename it, e.g. seattle_live")
    return name


@dataclass(frozen=True)
class DatasetWords:
    """How a door says what to do in a refusal of a dataset (:func:`register_dataset`,
    :func:`append_rows`, a dataset a backtest or study names): the CLI its commands and flags,
    the API its routes and body fields, the console its form's field (it names registered
    datasets; registering one is the API's or the operator's). The rules are one; the words are
    the door's.

    >>> print(API_DATASETS.tables)
    send "tables" with one of your workspace's files per table, {"TABLE": "FILE.csv"}, for each of them and nothing else
    """

    register: str
    """How a dataset is registered at this door."""
    tables: str
    """How to give one file per table the workflow reads, and nothing else."""
    table: str
    """How to name the table rows are appended to, one of the dataset's."""
    named: str
    """The place a backtest or a study names its dataset (the API's ``field 'dataset'``)."""


CLI_DATASETS = DatasetWords(
    register="register it with: typestrict data register NAME --workflow WORKFLOW --table TABLE=FILE.csv",
    tables="pass --table TABLE=FILE.csv for each of them and nothing else",
    table="pass --table with one of them", named="--dataset")
"""``typestrict data register|append`` and ``--dataset``."""
API_DATASETS = DatasetWords(
    register="register it with POST /v1/datasets (its name, workflow and tables)",
    tables='send "tables" with one of your workspace\'s files per table, {"TABLE": "FILE.csv"}, for each of them '
           'and nothing else',
    table='send "table" as one of them', named="field 'dataset'")
"""``POST /v1/datasets``, ``POST /v1/datasets/{name}/append`` (``DatasetIn``, ``AppendIn``) and a
backtest's or study's ``dataset``."""
CONSOLE_DATASETS = DatasetWords(
    register="register it through the API first (POST /v1/datasets: the console names registered datasets, "
             "it does not register them)",
    tables=API_DATASETS.tables, table=API_DATASETS.table, named='"Historical data"')
"""The console's backtest form (its "Historical data" field, ``templates/backtests.html``);
registering and appending are the API's."""
CONSOLE_STUDY_DATASETS = dataclasses.replace(CONSOLE_DATASETS, named='"Historical data of the study"')
"""The console's study form: its field's label, "Historical data of the study"."""


def _folder(name: str, base: Path | None) -> Path:
    return (base or datasets_dir()) / _check_name(name)


def is_registered(name: str, *, base: Path | None = None) -> bool:
    """Whether ``name`` is a registered dataset (a folder with a ``dataset.json``)."""
    return isinstance(name, str) and bool(_NAME.match(name)) and (_folder(name, base) / MANIFEST).is_file()


def _manifest(name: str, base: Path | None) -> dict[str, Any]:
    path = _folder(name, base) / MANIFEST
    if not path.is_file():
        known = listed([d.name for d in list_datasets(base=base)], plain=True) or "none yet"
        raise NotFoundError(
            f"expected a registered dataset, got {name!r} (registered: {known}). "
            f"{CLI_DATASETS.register[:1].upper()}{CLI_DATASETS.register[1:]}"
        )  # the CLI's: the API and the console find a dataset by its workspace's name first
    data = read_json_file(path, error=DatasetError, what="a readable dataset.json")
    if not isinstance(data, dict) or not isinstance(data.get("tables"), dict) or not data.get("workflow"):
        raise DatasetError("a dataset.json with workflow and tables", repr(data)[:120],
                           "register the dataset again in a new name", file=str(path))
    return data


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One writer at a time per dataset (an exclusive ``flock`` on ``<folder>/.lock``)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read_stored(path: Path) -> tuple[pd.DataFrame, bytes]:
    """A stored table's rows (this module wrote them after validating them), read in bounded work
    (:func:`typestrict_pipeline.files.read_data_file`) with its numbers typed and an empty cell
    missing: what an append reads the table's columns, their kinds and its last knowledge time
    from. (A customer's file is read by :func:`~typestrict_pipeline.backtest.workflows.dataset_rows.read_cells`.)"""
    import io

    from typestrict_pipeline.files import read_data_file

    raw = read_data_file(path, error=DatasetError, what="a CSV file with a header row")
    try:
        frame = pd.read_csv(io.BytesIO(raw), keep_default_na=False, na_values=[""])
    except (ValueError, MemoryError, pd.errors.ParserError) as exc:
        raise DatasetError("a readable CSV file with a header row",
                           f"{exc.__class__.__name__}: {' '.join(str(exc).split())[:160]}",
                           "check the file", file=str(path)) from None
    if frame.empty:
        raise DatasetError("at least one row", "no rows", "give the file some rows", file=str(path))
    return frame, raw


NUMBER_MISTAKES = frozenset({"nan", "na", "n/a", "null", "none", "nil", "-", "?", "missing", "inf", "-inf",
                             "+inf", "infinity", "-infinity", "+infinity", "true", "false", "yes", "no"})
"""Words a number column may hold by mistake: read as a number column, then refused by row."""


def _column_kind(cells: pd.Series | pa.ChunkedArray) -> str:
    """``"number"`` when the column's cells are numbers (or words a number column may hold by
    mistake, :data:`NUMBER_MISTAKES`, refused later with their row), ``"bool"`` when they are all
    ``true``/``false``, else ``"text"``. A cell is empty when only white space (Arrow's
    ``utf8_trim_whitespace``) is left; a number is :func:`~typestrict_pipeline.values.looks_numeric`.

    Over the whole column with Arrow: the cells written plainly as numbers are matched at once,
    and only the others are looked at one by one, stopping at the first that makes the column
    text (a column of 200 cells: about 0.1 ms, against 1.6 ms with pandas' string methods).

    >>> _column_kind(pd.Series(["1.5", " ", "NA", "-2"])), _column_kind(pd.Series(["true", "FALSE"]))
    ('number', 'bool')
    >>> _column_kind(pd.Series(["1", "rain"])), _column_kind(pd.Series(["", " "]))
    ('text', 'number')
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from typestrict_pipeline.values import looks_numeric, plain_numbers

    arr = cells if isinstance(cells, pa.ChunkedArray) else pa.array(cells, type=pa.large_string())
    if len(arr) and pc.all(plain_numbers(arr)).as_py():  # every cell a number written plainly: at once
        return "number"
    stripped = pc.utf8_trim_whitespace(arr)
    filled = pc.not_equal(stripped, "").fill_null(False)
    if not pc.any(filled).as_py():
        return "number"
    lowered = pc.utf8_lower(pc.filter(stripped, filled))
    if pc.all(pc.is_in(lowered, value_set=pa.array(["true", "false"], type=pa.large_string()))).as_py():
        return "bool"
    kept = pc.filter(arr, filled)
    plain = plain_numbers(kept)
    numeric = bool(pc.any(plain).as_py())
    rest = pa.array(np.flatnonzero(~np.array(plain, dtype=bool)), type=pa.int64())
    for cell, word in zip(pc.take(kept, rest).to_pylist(), pc.take(lowered, rest).to_pylist(), strict=True):
        if looks_numeric(cell):
            numeric = True
        elif word not in NUMBER_MISTAKES:
            return "text"
    return "number" if numeric else "text"


def _kinds_of(old: pd.DataFrame) -> dict[str, str]:
    """The kind of each value column of a stored table."""
    kinds = {}
    for col in old.columns:
        if pd.api.types.is_bool_dtype(old[col].dtype):
            kinds[str(col)] = "bool"
        elif pd.api.types.is_numeric_dtype(old[col].dtype):
            kinds[str(col)] = "number"
        else:
            kinds[str(col)] = "text"
    return kinds


def _typed_rows(cells: Cells, kinds: Mapping[str, str], names: Sequence[str], table: str, file: Path,
                now: dt.datetime, workflow: Workflow | None = None) -> Rows:
    """The file's rows with their value columns typed by ``kinds`` (each column checked in the
    order of ``kinds``, its first bad cell refused with its row), then validated as a
    point-in-time table in the column order ``names`` (:func:`dataset_rows.validated_rows`)."""
    values = {col: typed_column(cells.columns[col], kind, col, file) for col, kind in kinds.items()
              if col not in (EVENT_TIME, KNOWN_TIME) and col in cells.columns}
    return validated_rows(cells, values, names, table, file, now, workflow)


def register_dataset(
    name: str,
    workflow: str,
    tables: Mapping[str, str | os.PathLike[str]],
    *,
    registry: WorkflowRegistry | None = None,
    base: Path | None = None,
    now: dt.datetime | None = None,
    words: DatasetWords = CLI_DATASETS,
) -> DatasetInfo:
    """Register a point-in-time dataset for a workflow: one CSV per table the workflow reads.

    Args:
        name: the dataset's name (what a backtest's or a study's ``dataset`` names).
        workflow: a workflow of ``registry`` (default: the code location's).
        tables: table name -> CSV file with ``event_time`` and ``known_time`` (ISO 8601 with a
            UTC offset) and the value columns the workflow reads.
        registry: the workflows (default :func:`default_registry`).
        base: the datasets folder (default :func:`datasets_dir`).
        now: the current time (no row may be known after it).
        words: the door's words for what to do (:class:`DatasetWords`; the CLI's by default).

    Raises:
        InputError: a bad name, a name of a built-in dataset, a table the workflow does not
            read or one it reads that is missing; DatasetError (with file, row, column) for a
            bad file; ConflictError: the name is already registered; NotFoundError: no such workflow.

    >>> import tempfile, pathlib
    >>> from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> _ = write_seattle_csv(tmp / "w.csv", known_until=dt.datetime(2012, 3, 1, tzinfo=dt.UTC))
    >>> info = register_dataset("seattle_live", "seattle_rain", {"weather": tmp / "w.csv"}, base=tmp / "ds")
    >>> info.tables[0].rows, info.last_known.date().isoformat()
    (60, '2012-03-01')
    """
    from typestrict_pipeline.backtest.workflows import DATASETS, default_registry

    if _check_name(name) in DATASETS:
        raise InputError("a name that is not a built-in dataset", shown(name, 80), "pick another name")
    wf = (registry or default_registry()).get(workflow)
    missing = [t for t in wf.tables if t not in tables]
    extra = [t for t in tables if t not in wf.tables]
    if missing or extra:
        raise InputError(
            f"one file per table workflow {workflow!r} reads ({', '.join(wf.tables)})",
            f"tables {shown(sorted(tables), 200)}",
            words.tables,
        )
    at = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    folder = _folder(name, base)
    rows = {}
    for t, f in tables.items():
        cells = read_cells(Path(f))
        declared = wf.columns.get(t, {})  # a column the workflow reads has the kind it reads
        kinds = {c: declared.get(c) or _column_kind(cells.columns[c]) for c in cells.names
                 if c not in (EVENT_TIME, KNOWN_TIME)}  # the times' kind is no value's
        rows[t] = _typed_rows(cells, kinds, cells.names, t, Path(f), at, wf)
        del cells  # the typed rows hold what is stored
    with _locked(folder):
        if (folder / MANIFEST).exists():
            raise ConflictError(f"expected a new dataset name, got {name!r}, which is registered. "
                                f"Append rows with: typestrict data append {name} --table TABLE FILE.csv")
        for t, typed in rows.items():
            with StagedFile(folder) as staged:
                for piece in csv_bytes(typed, header=True):
                    staged.write(piece)
                staged.commit(folder / f"{t}.csv")
            write_summary(folder / f"{t}.csv", summary_of_rows(typed))
        manifest = {"name": name, "workflow": workflow, "registered_at": format_time(at),
                    "tables": {t: f"{t}.csv" for t in rows}}
        write_atomic(folder / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    if not all(_reads_back(folder / f"{t}.csv", typed) for t, typed in rows.items()):
        return dataset_info(name, base=base)  # the read that answers refuses it, as it did
    return DatasetInfo(name=name, workflow=workflow, registered_at=_parsed_time(format_time(at)),
                       tables=tuple(_table_info(t, folder / f"{t}.csv", typed) for t, typed in rows.items()))


def _reads_back(path: Path, rows: Rows) -> bool:
    """Whether the answer may be made from the rows just written instead of a read of the stored
    table (:func:`dataset_info`): the table is within the size bound of every read, and no text
    cell holds a carriage return. (A lone one is refused before anything is stored,
    ``dataset_rows._check_texts``; for one in a quoted ``\\r\\n`` the answer is what a read gives.)"""
    import pyarrow.compute as pc

    if path.stat().st_size > max_data_file_bytes():
        return False
    return not any(pc.any(pc.match_substring(v, "\r")).as_py() for v in rows.values.values()
                   if not isinstance(v, np.ndarray))


def _table_info(table: str, path: Path, rows: Rows) -> TableInfo:
    """What :func:`dataset_info` reads of a stored table, from the rows just written to it."""
    from typestrict_pipeline.backtest.pit import to_utc_datetime

    known = rows.known_us[rows.keep]
    values = tuple(c for c in rows.names if c not in (EVENT_TIME, KNOWN_TIME))
    return TableInfo(table, path, rows.kept, (EVENT_TIME, KNOWN_TIME, *values),
                     to_utc_datetime(np.datetime64(int(known.min()), "us")),
                     to_utc_datetime(np.datetime64(int(known.max()), "us")))


def _summary_info(table: str, path: Path, summary: Summary) -> TableInfo:
    """What :func:`dataset_info` reads of a stored table, from its summary."""
    from typestrict_pipeline.backtest.pit import to_utc_datetime

    values = tuple(c for c in summary.columns if c not in (EVENT_TIME, KNOWN_TIME))
    return TableInfo(table, path, summary.rows, (EVENT_TIME, KNOWN_TIME, *values),
                     to_utc_datetime(np.datetime64(summary.first_known_us, "us")),
                     to_utc_datetime(np.datetime64(summary.last_known_us, "us")))


def _parsed_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def append_rows(
    name: str,
    table: str,
    source: str | os.PathLike[str],
    *,
    base: Path | None = None,
    now: dt.datetime | None = None,
    words: DatasetWords = CLI_DATASETS,
) -> AppendResult:
    """Append the rows of a CSV file to one table of a registered dataset.

    The rows must have the table's columns (no more, no fewer), valid times, values of the kind
    the table holds, and every ``known_time`` strictly after the table's last knowledge time and
    not after now: rows already known are never rewritten, so every earlier backtest still sees
    exactly what it saw. The table file is replaced atomically; readers see the new rows at their
    next read. An append that would take the table past the data files' size bound
    (:func:`~typestrict_pipeline.files.max_data_file_bytes`) is refused: no read could load it.

    Raises:
        NotFoundError: no such dataset; InputError: no such table; DatasetError naming the file,
            row and column of the first bad value.

    >>> import tempfile, pathlib
    >>> from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> cut = dt.datetime(2012, 3, 1, tzinfo=dt.UTC)
    >>> _ = write_seattle_csv(tmp / "w.csv", known_until=cut)
    >>> _ = register_dataset("live", "seattle_rain", {"weather": tmp / "w.csv"}, base=tmp / "ds")
    >>> _ = write_seattle_csv(tmp / "new.csv", known_after=cut, known_until=cut + dt.timedelta(days=15))
    >>> r = append_rows("live", "weather", tmp / "new.csv", base=tmp / "ds")
    >>> r.added, r.rows, r.last_known_after.date().isoformat()
    (15, 75, '2012-03-16')
    """
    manifest = _manifest(name, base)
    folder = _folder(name, base)
    if table not in manifest["tables"]:
        raise InputError(f"a table of dataset {name!r} ({', '.join(manifest['tables'])})", shown(table, 80),
                         words.table)
    src = Path(source)
    at = now or dt.datetime.now(dt.UTC)
    new = read_cells(src)
    target = folder / str(manifest["tables"][table])
    with _locked(folder):
        summary = read_summary(target)
        kinds = summary.kinds if summary is not None else None
        if summary is None or kinds is None:  # no summary of the table as it is: read it whole
            old, raw = _read_stored(target)
            summary, kinds = summary_of_frame(old, raw), _kinds_of(old)
            if summary.kinds not in (None, kinds):  # pragma: no cover - the classes say what pandas read
                summary = dataclasses.replace(summary, classes={c: "BN" for c in summary.classes})
            del old, raw
        columns = list(summary.columns)
        _same_columns(columns, new.names, src)
        rows = _typed_rows(new, kinds, columns, table, src, at)
        last = pd.Timestamp(summary.last_known_us, unit="us", tz="UTC")
        _after_last(rows, last, src)
        # The new rows only are written as CSV, after the stored table's bytes as they are: the
        # work is the request's, not the table's (re-writing the whole table took 2.5 s of the
        # 3.0 s of a 10-row append to 500,000 rows, and held it twice more as text).
        added = b"".join(csv_bytes(rows, header=False))
        stored = target.stat().st_size
        bound = max_data_file_bytes()
        if stored + len(added) > bound:  # every later read of the table would refuse it
            raise DatasetError(
                f"a table of at most {bound:,} bytes once the rows are appended (the bound every read of "
                "a data file keeps)", f"{stored + len(added):,} bytes ({rows.kept:,} row{'' if rows.kept == 1 else 's'} added to {summary.rows:,})",
                "register a new dataset with the newer rows, or set TYPESTRICT_MAX_DATA_FILE_BYTES",
                file=str(src))
        _replace_appended(folder, target, added)
        write_summary(target, summary.plus(summary_of_rows(rows)))
    kept = rows.known_us[rows.keep]
    return AppendResult(
        dataset=name, table=table, added=rows.kept, rows=summary.rows + rows.kept,
        last_known_before=last.to_pydatetime(),
        last_known_after=pd.Timestamp(int(kept.max()), unit="us", tz="UTC").to_pydatetime(),
    )


def _after_last(rows: Rows, last: pd.Timestamp, src: Path) -> None:
    """Refuse the first stored row (counted among the rows kept) known at or before ``last``, the
    table's last knowledge time: rows already known are never rewritten."""
    from typestrict_pipeline.backtest.workflows.dataset_rows import _time_texts

    kept = rows.known_us[rows.keep]
    early = np.flatnonzero(kept * 1000 <= last.as_unit("ns").value)  # the stored times: to the µs
    if early.size:
        i = int(early[0])
        raise DatasetError(
            f"rows known after the table's last knowledge time {format_time(last.to_pydatetime())} "
            "(rows already known are never rewritten)",
            f"known_time {_time_texts(kept[i:i + 1])[0]}",
            "append only rows that became known later; a correction is a new row about the same "
            "event_time with a later known_time",
            file=str(src), row=i + 1, column=KNOWN_TIME,
        )


def _replace_appended(folder: Path, target: Path, added: bytes) -> None:
    """Replace ``target`` atomically by its bytes as they are (a line end added when its last
    line has none) followed by ``added``."""
    with StagedFile(folder) as staged, target.open("rb") as table_file:
        last_byte = b"\n"
        while piece := table_file.read(1 << 20):
            staged.write(piece)
            last_byte = piece[-1:]
        if last_byte != b"\n":
            staged.write(b"\n")
        staged.write(added)
        staged.commit(target)


def _same_columns(want: Sequence[str], got: Sequence[str], src: Path) -> None:
    for col in want:
        if col not in got:
            raise DatasetError(f"the table's columns {listed(want)}",
                               f"columns {listed(got)}, without {col!r}",
                               "add the column (leave a value empty when it is missing)", file=str(src), column=col)
    for col in got:
        if col not in want:
            raise DatasetError(f"the table's columns {listed(want)}", f"an extra column {col!r}",
                               "remove it: a dataset's columns are fixed when it is registered",
                               file=str(src), column=col)


def load_registered(name: str, *, base: Path | None = None) -> dict[str, PointInTimeTable]:
    """The tables of a registered dataset, each re-read only when its file changed."""
    manifest = _manifest(name, base)
    folder = _folder(name, base)
    return {t: read_csv_fresh(folder / str(f), t) for t, f in manifest["tables"].items()}


def dataset_info(name: str, *, base: Path | None = None) -> DatasetInfo:
    """A registered dataset's workflow and tables (rows, columns, first and last knowledge time)."""
    manifest = _manifest(name, base)
    folder = _folder(name, base)
    tables = []
    for t, f in manifest["tables"].items():
        summary = read_summary(folder / str(f))
        if summary is not None:  # the table as it is now, without reading its rows
            tables.append(_summary_info(t, folder / str(f), summary))
            continue
        pit = read_csv_fresh(folder / str(f), t)
        tables.append(TableInfo(t, folder / str(f), pit.n_rows, (EVENT_TIME, KNOWN_TIME, *pit.columns),
                                pit.first_known, pit.last_known))
    registered = _parsed_time(str(manifest.get("registered_at", "1970-01-01T00:00:00+00:00")))
    return DatasetInfo(name=name, workflow=str(manifest["workflow"]), registered_at=registered, tables=tuple(tables))


def dataset_names(*, base: Path | None = None) -> list[str]:
    """The name of every registered dataset, sorted (its tables are not read)."""
    root = base or datasets_dir()
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{MANIFEST}") if _NAME.match(p.parent.name))


def list_datasets(*, base: Path | None = None) -> list[DatasetInfo]:
    """Every registered dataset, by name."""
    return [dataset_info(n, base=base) for n in dataset_names(base=base)]
