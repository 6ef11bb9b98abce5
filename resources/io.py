"""The IO manager (key ``io_manager``): pickled values under the instance's storage, written atomically.

Dagster's default filesystem IO manager opens the stored file with ``"wb"`` and writes into it:
a second run of the same training reading that value meanwhile can see a truncated file
(``EOFError: Ran out of input``). Here each value is pickled in memory first and then written
with :func:`typestrict_pipeline.files.write_atomic` (a temporary file in the same folder, fsync,
``os.replace``), so a reader sees the old value or the new one, never half of one.
"""

import pickle
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.fs_io_manager import PickledObjectFilesystemIOManager
from upath import UPath

from typestrict_pipeline.files import write_atomic


class AtomicPickleIOManager(PickledObjectFilesystemIOManager):
    """``PickledObjectFilesystemIOManager`` with atomic writes (same layout, same files)."""

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: UPath) -> None:
        data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        write_atomic(Path(str(path)), data)


class AtomicFilesystemIOManager(dg.ConfigurableIOManagerFactory["AtomicPickleIOManager"]):
    """Stores each asset value as a pickle under ``base_dir``, replacing files atomically.

    Attributes:
        base_dir: the folder; default the instance's storage folder
            (``$DAGSTER_HOME/storage``), as Dagster's default IO manager.
    """

    base_dir: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> AtomicPickleIOManager:
        base = self.base_dir
        if base is None:
            assert context.instance is not None
            base = context.instance.storage_directory()
        return AtomicPickleIOManager(base_dir=base)  # type: ignore[no-untyped-call]


def default_resources() -> dict[str, Any]:
    """``{"io_manager": AtomicFilesystemIOManager()}``."""
    return {"io_manager": AtomicFilesystemIOManager()}
