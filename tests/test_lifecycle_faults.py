"""Faults injected at each transition that moves money, and what must hold after each: the object
reaches its state by itself, and the ledger balances (spends = settlements + open trainings, each
open training with a deadline). Real mechanisms only: a small tmpfs in a private mount namespace
for a full disk, ``pg_terminate_backend`` for a dropped store connection, ``kill -9`` of a real
process at each asset of ``verdict_job``.

Before: on a full disk ``POST /v1/trainings`` answered 500 after charging a credit for a training
that does not exist (the draft was written after the charge).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError

from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.lifecycle.trainings import (
    TrainingState,
    expire_due,
    ledger_balance,
    training_status,
)
from typestrict_pipeline.store import open_store

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


support = _load("test_api_support")
assets_support = _load("test_refund_assets_support")


# ------------------------------------------------------------------------------------------------
# A full disk (a 1 MiB tmpfs in a private mount namespace: a real ENOSPC, no mock)
# ------------------------------------------------------------------------------------------------


def _on_a_full_disk(tmp_path: Path, where: str) -> dict[str, Any]:
    disk, outside = tmp_path / "disk", tmp_path / "outside"
    disk.mkdir()
    outside.mkdir()
    helper = Path(__file__).with_name("lifecycle_disk_full_helper.py")
    script = (f"mount -t tmpfs -o size=1m tmpfs {disk} && exec {sys.executable} {helper} {disk} "
              f"{where} {outside}")
    done = subprocess.run(["unshare", "--mount", "--map-root-user", "--propagation", "private",
                           "sh", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"the helper did not finish ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[0][len("RESULT "):])
    return result


def test_a_full_disk_for_the_trainings_files_charges_nothing_and_says_so(tmp_path: Path) -> None:
    # Room for the dataset's and Jev's copies, none for the training's draft: the last write
    # before the charge (it used to come after it: 500, and the credit gone).
    out = _on_a_full_disk(tmp_path, "home")
    assert out["full"]["status"] == 503, out
    message = out["full"]["body"]["error"]["message"]
    assert message.startswith("expected room to store the training's files on the server, got No "
                              "space left on device") and "Nothing was charged" in message
    assert out["trainings_left"] == [] and out["balance_after_full"] == 2 and out["balanced_after_full"]
    assert out["after"] == {"status": 201, "state": "awaiting_predictions"}  # room again: it works
    assert out["balance_after"] == 1 and out["balanced_after"]


def test_a_full_disk_for_the_store_charges_nothing_and_leaves_no_training(tmp_path: Path) -> None:
    out = _on_a_full_disk(tmp_path, "store")
    assert out["full"]["status"] == 503, out  # the store's own refusal, never a 500
    assert out["trainings_left"] == [] and out["balance_after_full"] == 2 and out["balanced_after_full"]
    assert out["after"] == {"status": 201, "state": "awaiting_predictions"}
    assert out["balance_after"] == 1 and out["balanced_after"]


# ------------------------------------------------------------------------------------------------
# The store's connection dropped in the middle of a transaction that moves money (PostgreSQL)
# ------------------------------------------------------------------------------------------------


def _drop_connections_on_commit(engine: Any, admin: Any, times: int = 1) -> Callable[[], int]:
    """Terminate the committing connection's server process just before its next ``times``
    commits: the commit then fails as a dropped connection does."""
    dropped = [0]

    def on_commit(conn: Any) -> None:
        if dropped[0] >= times:
            return
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with admin.connect() as a:
            a.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        dropped[0] += 1

    event.listen(engine, "commit", on_commit)
    return lambda: dropped[0]


@pytest.fixture
def pg(pg_url: str, tmp_path: Path) -> Iterator[tuple[Any, Any, TrainingStore, Path]]:
    engine = open_store(pg_url)
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    home = tmp_path / "home"
    csv, jev = support.make_dataset(tmp_path, seed=6)
    CreditLedger(engine).grant("acme", 2, reference="faults")
    store = TrainingStore(home, engine, {"kind": "file", "path": str(jev)})
    store.area("acme").save("reviews.csv", csv)
    yield engine, admin, store, home
    admin.dispose()
    engine.dispose()


def _request() -> TrainingRequest:
    body = support.TRAINING_BODY
    return TrainingRequest(body["dataset"], body["decisions"], body["options"])


@pytest.mark.postgres
def test_a_connection_dropped_at_the_charge_leaves_no_charge_and_no_training(pg: Any) -> None:
    engine, admin, store, home = pg
    dropped = _drop_connections_on_commit(engine, admin)
    with pytest.raises(OperationalError):
        store.create("acme", _request())
    assert dropped() == 1
    assert CreditLedger(engine).balance("acme") == 2
    assert [p.name for p in (home / "trainings").iterdir()] == []  # the moved folder was taken back
    assert ledger_balance(engine).balanced
    tid = store.create("acme", _request())  # the store answers again: it works
    assert training_status(engine, tid).state is TrainingState.AWAITING_PREDICTIONS  # type: ignore[union-attr]
    assert CreditLedger(engine).balance("acme") == 1 and ledger_balance(engine).balanced


@pytest.mark.postgres
def test_a_connection_dropped_during_an_expiry_settles_once_at_the_next_sweep(pg: Any) -> None:
    engine, admin, store, home = pg
    tid = store.create("acme", _request())
    status = training_status(engine, tid)
    assert status is not None and status.deadline_at is not None
    dropped = _drop_connections_on_commit(engine, admin)
    with pytest.raises(OperationalError):
        expire_due(engine, now=status.deadline_at, trainings_dir=home / "trainings")
    assert dropped() == 1
    assert training_status(engine, tid).state is TrainingState.AWAITING_PREDICTIONS  # type: ignore[union-attr]
    assert CreditLedger(engine).balance("acme") == 1 and ledger_balance(engine).balanced
    [ended] = expire_due(engine, now=status.deadline_at, trainings_dir=home / "trainings")
    assert ended.training_id == tid and ended.refunded
    assert expire_due(engine, now=status.deadline_at + dt.timedelta(days=1),
                      trainings_dir=home / "trainings") == []
    assert CreditLedger(engine).balance("acme") == 2 and ledger_balance(engine).balanced


# ------------------------------------------------------------------------------------------------
# kill -9 at each asset of verdict_job; the retry settles exactly once
# ------------------------------------------------------------------------------------------------

# Where each asset is stopped: a name its body calls, looked up in its module when it runs.
KILL_AT = {
    "dataset": ("assets.refund", "check_training", False),
    "holdout": ("assets.refund", "split_decisions", False),
    "jev_predictions": ("assets.refund", "_ask", False),
    "metrics": ("assets.refund", "build_decision_data", False),
    "verdict": ("assets.refund", "judge_training", False),
    "audit": ("assets.refund", "write_atomic", False),  # after the settled-digest check
    "credit_settlement": ("assets.credits", "settle_training", True),  # after its commit
}


def _defs(home: Path, store_url: str) -> tuple[dg.Definitions, dict[str, Any]]:
    from assets.credits import build_defs as credits_defs
    from assets.refund import build_defs as refund_defs
    from resources.credits import CreditsResource
    from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
    from resources.store import StoreResource

    resources = {
        "refund_trainings": RefundTrainingsResource(folder=str(home / "trainings"),
                                                    audits_folder=str(home / "audits")),
        "refund_jev_client": ManifestSourceClientResource(),
        "refund_model_client": ManifestSourceClientResource(),
        "store": StoreResource(url=store_url),
        "credits": CreditsResource(),
    }
    return dg.Definitions.merge(refund_defs(), credits_defs(), dg.Definitions(resources=resources)), resources


def _killed_child(defs: dg.Definitions, tid: str, asset: str, marker: Path) -> int:
    """Fork a process that runs verdict_job and stops for good inside ``asset``; its pid."""
    module_name, name, after = KILL_AT[asset]
    # The name must still be one the asset's module calls (a renamed call would only show as a
    # child that ends at once).
    assert callable(getattr(importlib.import_module(module_name), name, None)), (
        f"expected {module_name}.{name} (where {asset} is stopped), got no such name: update KILL_AT")
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never returns
        module = importlib.import_module(module_name)
        real = getattr(module, name)

        def stuck(*args: Any, **kwargs: Any) -> Any:
            if asset == "jev_predictions" and kwargs.get("system") != "jev":
                return real(*args, **kwargs)
            result = real(*args, **kwargs) if after else None
            marker.write_text(asset)
            time.sleep(600)
            return result

        setattr(module, name, stuck)
        with dg.DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("trainings", [tid])
            defs.resolve_job_def("verdict_job").execute_in_process(
                partition_key=tid, instance=instance, raise_on_error=False)
    except BaseException:
        traceback.print_exc()  # the parent's assertion then says why the child ended
        sys.stderr.flush()
    finally:
        os._exit(1)


@pytest.mark.slow
def test_a_verdict_run_killed_at_each_asset_is_retried_and_settles_exactly_once(
        tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("tests", len(KILL_AT), reference="kills")
    defs, _ = _defs(home, sqlite_url)
    for i, asset in enumerate(KILL_AT):
        tid = f"tr_kill_{asset}"
        assets_support.make_training(home / "trainings", tid, n=80, seed=i)
        marker = tmp_path / f"at-{asset}"
        pid = _killed_child(defs, tid, asset, marker)
        deadline = time.monotonic() + 240
        while not marker.exists() and time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                raise AssertionError(f"the run ended before reaching {asset}")
            time.sleep(0.05)
        assert marker.exists(), f"the run never reached {asset}"
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        settled_by_kill = [ln for ln in CreditLedger(engine).training_lines(tid) if ln.kind.value == "settlement"]
        assert len(settled_by_kill) == (1 if asset == "credit_settlement" else 0), asset
        # What run monitoring's retry does: run it again; it settles exactly once.
        with dg.DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("trainings", [tid])
            retry = defs.resolve_job_def("verdict_job").execute_in_process(
                partition_key=tid, instance=instance, raise_on_error=False)
        assert retry.success, asset
        lines = CreditLedger(engine).training_lines(tid)
        assert [ln.kind.value for ln in lines] == ["spend", "settlement"], (asset, lines)
        balance = ledger_balance(engine)
        assert balance.balanced and balance.open_trainings == (), (asset, balance.describe())
    engine.dispose()
