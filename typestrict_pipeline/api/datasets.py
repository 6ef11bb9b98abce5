"""Datasets through the API: register a point-in-time dataset from the workspace's files, append
rows, read it; and which dataset a backtest or a study of a workspace may name.

The rules are those of :mod:`typestrict_pipeline.backtest.workflows.datasets` (``typestrict data
register|append|show``); this module adds the workspace. A dataset registered through the API
belongs to its workspace: it is stored under a name of its own (:func:`stored_name`, the
customer's name plus a digest of the workspace), so two workspaces may both call a dataset
``sales``, and another workspace's dataset is "not found", like one that does not exist. The
tables come from the workspace's own files (``PUT /v1/files/{name}``), confined to them. The
built-in datasets (``seattle_weather``) can be named by every workspace.

>>> stored_name("acme", "sales")
'sales__822b33ad87c1'
>>> customer_name("acme", stored_name("acme", "sales"))
'sales'
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typestrict_pipeline.api.trainings import (
    MAX_DATASET_BYTES,
    WorkspaceArea,
    check_dataset_size,
    expanded_bytes,
)
from typestrict_pipeline.backtest.pit import PointInTimeTable
from typestrict_pipeline.backtest.workflows.datasets import API_DATASETS, DatasetWords
from typestrict_pipeline.errors import ConflictError, InputError, NotFoundError, listed, shown_as

StorageCheck = Callable[[int, int], None]
"""``(files, bytes)`` a request would store -> None, or raises ``StorageQuotaError``
(:meth:`~typestrict_pipeline.api.trainings.TrainingStore.check_storage` of the workspace)."""
_CUSTOMER_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,47}")
_SEPARATOR = "__"


def datasets_base(home: Path) -> Path:
    """Where datasets live for the server on ``home``: ``TYPESTRICT_DATASETS_DIR``, else
    ``<home>/datasets`` (the folder the Dagster runs read: same home, same datasets)."""
    explicit = os.environ.get("TYPESTRICT_DATASETS_DIR")
    return Path(explicit).resolve() if explicit else home / "datasets"


def _digest(workspace: str) -> str:
    return hashlib.sha256(workspace.encode("utf-8")).hexdigest()[:12]


def check_customer_name(name: str) -> str:
    """A dataset name a customer may give: lowercase letters, digits, ``_``, at most 48.

    >>> check_customer_name("sales_2026")
    'sales_2026'
    """
    if not isinstance(name, str) or not _CUSTOMER_NAME.fullmatch(name) or _SEPARATOR in name:
        raise InputError(
            "a dataset name of lowercase letters, digits and single '_' (1 to 48, starting with a "
            "letter or digit)", repr(str(name)[:80]), "rename it, e.g. sales_live", file="field 'name'")
    return name


def stored_name(workspace: str, name: str) -> str:
    """The name a workspace's dataset is stored under (unique to the workspace)."""
    return f"{check_customer_name(name)}{_SEPARATOR}{_digest(workspace)}"


def customer_name(workspace: str, stored: str) -> str | None:
    """The customer's name of a stored dataset of ``workspace``, else None (not its own)."""
    head, sep, tail = stored.rpartition(_SEPARATOR)
    return head if sep and tail == _digest(workspace) else None


def _not_found(name: str) -> NotFoundError:
    return NotFoundError(
        f"expected a dataset named {name[:80]!r} in this workspace, got none. List them with "
        "GET /v1/datasets, or register it with POST /v1/datasets")


@dataclass(frozen=True)
class TableView:
    """One table of a dataset as the API shows it (no file path of the server)."""

    name: str
    rows: int
    columns: tuple[str, ...]
    first_known: str
    last_known: str


@dataclass(frozen=True)
class DatasetView:
    """A workspace's dataset: its name, workflow, tables and up to when its data are known."""

    name: str
    workflow: str
    registered_at: str
    last_known: str
    tables: tuple[TableView, ...]


def _view(workspace: str, info: Any) -> DatasetView:
    from typestrict_pipeline.backtest.pit import format_time

    return DatasetView(
        name=customer_name(workspace, info.name) or info.name, workflow=info.workflow,
        registered_at=format_time(info.registered_at), last_known=format_time(info.last_known),
        tables=tuple(TableView(t.name, t.rows, tuple(t.columns), format_time(t.first_known),
                               format_time(t.last_known)) for t in info.tables))


def register(home: Path, workspace: str, name: str, workflow: str,
             tables: Mapping[str, str], *, max_bytes: int = MAX_DATASET_BYTES,
             storage: StorageCheck | None = None) -> DatasetView:
    """Register ``name`` for ``workflow`` from files of the workspace's area (table -> file),
    each holding at most ``max_bytes`` once decompressed (the server's upload limit:
    :func:`~typestrict_pipeline.api.trainings.check_dataset_size`, counted before it is read).

    Raises:
        InputError, DatasetError: a bad name, table or file (naming the file as the workspace's
            files name it, the row and the column), or a file without the columns the workflow
            reads, or with a cell not of the kind it reads (text in a number column);
        NotFoundError: a file not in the workspace's files, or an unknown workflow;
        ConflictError: the workspace already has a dataset of that name (the message says how
            to append to it through the API), or it is a built-in dataset's name.
        StorageQuotaError: ``storage(files, bytes)`` refused what the dataset would store (a
            table as its rows decompressed, plus its ``dataset.json``), before anything is.
    """
    from typestrict_pipeline.backtest.workflows import DATASETS
    from typestrict_pipeline.backtest.workflows.datasets import is_registered, register_dataset

    if name in DATASETS:  # resolve() reads the built-in first: the workspace's would never be used
        raise ConflictError(
            f"expected a new dataset name, got {name!r}, which is a built-in dataset (backtests and "
            f"studies that name it read the built-in data). Register the file under another name, "
            f"e.g. {name + '_own'!r}")
    stored = stored_name(workspace, name)
    area = WorkspaceArea(home, workspace)
    paths = {table: area.resolve(file) for table, file in tables.items()}
    try:
        for path in paths.values():
            check_dataset_size(path, max_bytes)
        if storage is not None and not is_registered(stored, base=datasets_base(home)):
            storage(len(paths) + 1, sum(expanded_bytes(p, max_bytes) for p in paths.values()))
        info = register_dataset(stored, workflow, paths, base=datasets_base(home), words=API_DATASETS)
    except ConflictError:
        raise ConflictError(
            f"expected a new dataset name, got {name!r}, which this workspace has registered. Append "
            f"rows to it with POST /v1/datasets/{name}/append, or register the file under another name"
        ) from None
    except InputError as exc:
        raise _customer_file(exc, {str(paths[t]): f for t, f in tables.items()}) from None
    return _view(workspace, info)


def _customer_file(exc: InputError, files: Mapping[str, str]) -> InputError:
    """``exc`` naming the customer's file (as it is named in the workspace's files) where it
    named the server's path of it.

    >>> err = InputError("a number", "'lots'", "fix it", file="/srv/ws/files/w.csv", row=3, column="x")
    >>> str(_customer_file(err, {"/srv/ws/files/w.csv": "w.csv"}))
    "w.csv, row 3, column 'x': expected a number, got 'lots'. Fix it."
    """
    if exc.file is None or exc.file not in files:
        return exc
    return type(exc)(exc.expected, exc.got, exc.fix, file=files[exc.file], row=exc.row, column=exc.column)


def append(home: Path, workspace: str, name: str, file: str, table: str | None, *,
           max_bytes: int = MAX_DATASET_BYTES, storage: StorageCheck | None = None) -> tuple[DatasetView, int]:
    """Append the rows of a workspace file (at most ``max_bytes`` once decompressed, as
    :func:`register`) to one table (the only one when ``table`` is None); the dataset after it
    and how many rows were added. ``storage(0, bytes)`` checks the rows' bytes (at most the
    file's, decompressed) against the workspace's quota first."""
    from typestrict_pipeline.backtest.workflows.datasets import append_rows, dataset_info

    stored = _own(home, workspace, name)
    base = datasets_base(home)
    if table is None:
        names = [t.name for t in dataset_info(stored, base=base).tables]
        if len(names) != 1:
            raise InputError("a table, for a dataset of several tables", f"tables {names}",
                             'send "table" as one of them', file="field 'table'")
        table = names[0]
    source = WorkspaceArea(home, workspace).resolve(file)
    try:
        check_dataset_size(source, max_bytes)
        if storage is not None:
            storage(0, expanded_bytes(source, max_bytes))
        result = append_rows(stored, table, source, base=base, words=API_DATASETS)
    except InputError as exc:  # the dataset as the workspace names it, never its stored name
        raise shown_as(_customer_file(exc, {str(source): file}), {repr(stored): repr(name)}) from None
    return _view(workspace, dataset_info(stored, base=base)), result.added


def _own(home: Path, workspace: str, name: str) -> str:
    from typestrict_pipeline.backtest.workflows.datasets import is_registered

    try:
        stored = stored_name(workspace, name)
    except InputError:
        raise _not_found(name) from None
    if not is_registered(stored, base=datasets_base(home)):
        raise _not_found(name)
    return stored


def get(home: Path, workspace: str, name: str) -> DatasetView:
    """One of the workspace's datasets."""
    from typestrict_pipeline.backtest.workflows.datasets import dataset_info

    return _view(workspace, dataset_info(_own(home, workspace, name), base=datasets_base(home)))


def own_names(home: Path, workspace: str) -> list[str]:
    """The stored names of the workspace's datasets, by name (no table is read: other
    workspaces' datasets are never opened to list this one's)."""
    from typestrict_pipeline.backtest.workflows.datasets import dataset_names

    return [n for n in dataset_names(base=datasets_base(home)) if customer_name(workspace, n) is not None]


def list_for(home: Path, workspace: str, names: Sequence[str]) -> list[DatasetView]:
    """The workspace's datasets ``names`` (stored names, of :func:`own_names`), with their tables."""
    from typestrict_pipeline.backtest.workflows.datasets import dataset_info

    base = datasets_base(home)
    return [_view(workspace, dataset_info(n, base=base)) for n in names]


def resolve(home: Path, workspace: str, name: str, *, words: DatasetWords = API_DATASETS) -> str:
    """The stored name a backtest or study of ``workspace`` uses for ``name``: a built-in dataset,
    or one the workspace registered.

    Raises:
        InputError: neither (the message lists what may be named, and says how to register one
            in the door's ``words``: the API's route, the console's).
    """
    from typestrict_pipeline.backtest.workflows import DATASETS

    if name in DATASETS:
        return name
    try:
        return _own(home, workspace, name)
    except NotFoundError:
        own = [customer_name(workspace, n) or n for n in own_names(home, workspace)]  # no table read
        raise InputError(
            f"a dataset name: a built-in one ({', '.join(sorted(DATASETS))}) or one this workspace "
            f"registered ({listed(own, plain=True) if own else 'none yet'})", repr(str(name)[:80]),
            f"{words.register}, or name one of those", file=words.named,
        ) from None


def load(home: Path, stored: str) -> dict[str, PointInTimeTable]:
    """The tables of a resolved dataset (built-in or registered under ``home``).

    Raises:
        InputError: a stored table the server cannot read (changed by hand, or grown past the
            bound on a data file), named as the customer names the dataset, never by the
            server's path.
    """
    from typestrict_pipeline.backtest.workflows import DATASETS
    from typestrict_pipeline.backtest.workflows.datasets import load_registered

    loader = DATASETS.get(stored)
    if loader is not None:
        return dict(loader())
    base = datasets_base(home)
    try:
        return load_registered(stored, base=base)
    except InputError as exc:
        shown = f"dataset {stored.rpartition(_SEPARATOR)[0] or stored!r}, stored table "
        folders = (str((base / stored).resolve()), str(base / stored))  # the path read first: it may be longer
        raise shown_as(exc, {folder + os.sep: shown for folder in folders}) from None


__all__ = ["DatasetView", "TableView", "append", "check_customer_name", "customer_name", "datasets_base",
           "get", "list_for", "load", "own_names", "register", "resolve", "stored_name"]
