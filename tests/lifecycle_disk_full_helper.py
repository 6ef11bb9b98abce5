"""Run inside a private mount namespace whose ``sys.argv[1]`` folder is a small tmpfs (see
tests/test_lifecycle_faults.py): fill the disk, create a training through the API, print what
happened as JSON. Not a test module (no ``test_`` prefix).

``sys.argv[2]`` says what lives on the full disk: ``home`` (the trainings' files; the store is
elsewhere) or ``store`` (the SQLite store; the home is elsewhere). With ``home``, the disk is
left with room for the dataset's and Jev's copies but not for the training's draft: the last
write before the charge, the one that used to fail after it.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.lifecycle.trainings import ledger_balance
from typestrict_pipeline.store import open_store

PAGE = 4096


def _support() -> Any:
    spec = importlib.util.spec_from_file_location("api_support", Path(__file__).with_name("test_api_support.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fill(disk: Path, leave_pages: int) -> list[Path]:
    """Fill ``disk`` to the last page, then free ``leave_pages`` pages; returns the page files."""
    big = disk / "filler.bin"
    st = os.statvfs(disk)
    with open(big, "wb") as out:  # all but 64 pages in one file (written, not sparse)
        out.write(b"\0" * (max(0, st.f_bavail - 64) * st.f_bsize))
    pages = []
    for i in range(100_000):
        page = disk / f"page-{i}"
        try:
            page.write_bytes(b"\0" * PAGE)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            page.unlink(missing_ok=True)
            break
        pages.append(page)
    for page in pages[:leave_pages]:
        page.unlink()
    return [big, *pages[leave_pages:]]


def main() -> None:
    disk, where, outside = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    extra = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    support = _support()
    home = (disk if where == "home" else outside) / "home"
    store_url = f"sqlite:///{(disk if where == 'store' else outside) / 'store.db'}"
    home.mkdir(parents=True, exist_ok=True)
    csv, jev = support.make_dataset(outside, seed=4)
    key = support.new_key(store_url, "acme", credits=2)
    out: dict[str, object] = {}
    with support.ApiServer(store_url, home, jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as client:
        assert client.put("/v1/files/reviews.csv", content=csv).status_code == 201
        pages = (len(csv) + PAGE - 1) // PAGE + (jev.stat().st_size + PAGE - 1) // PAGE
        (home / "trainings").mkdir(exist_ok=True)
        fillers = fill(disk, pages + extra if where == "home" else 0)
        r = client.post("/v1/trainings", json=support.TRAINING_BODY)
        out["full"] = {"status": r.status_code, "body": r.json()}
        out["trainings_left"] = sorted(p.name for p in (home / "trainings").iterdir()) \
            if (home / "trainings").is_dir() else []
        for f in fillers:
            f.unlink()
        engine = open_store(store_url)
        out["balance_after_full"] = CreditLedger(engine).balance("acme")
        out["balanced_after_full"] = ledger_balance(engine).balanced
        r = client.post("/v1/trainings", json=support.TRAINING_BODY)  # room again
        out["after"] = {"status": r.status_code, "state": r.json().get("state")}
        out["balance_after"] = CreditLedger(engine).balance("acme")
        out["balanced_after"] = ledger_balance(engine).balanced
        engine.dispose()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
