"""A server killed inside a training's charging transaction leaves no training anyone can use.

The API stages a new training's folder, then charges its credit in one transaction whose last
step moves the folder into place (``TrainingStore._create``): a server killed after that move,
before the commit, leaves a draft folder (``api-draft.json``) that no lifecycle row, ledger line
or model record knows: nothing was charged, and the retention sweep removes it a day later.
Before, the API showed it meanwhile as a training ``awaiting_predictions`` with no deadline,
listed it, and accepted predictions for it: judged without a charge, and with no lifecycle row
nothing ever ended it (no deadline; a workspace without credit left it ``judging`` for good).
Now it is no training: not listed, not found, no submission. A real process, killed with SIGKILL
at that point.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.credits.models import sweep_retention
from typestrict_pipeline.errors import NotFoundError
from typestrict_pipeline.lifecycle.trainings import ledger_balance, training_status
from typestrict_pipeline.store import open_store

_spec = importlib.util.spec_from_file_location("api_support", Path(__file__).with_name("test_api_support.py"))
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

ROOT = Path(__file__).resolve().parents[1]

_CREATE_CHILD = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import typestrict_pipeline.api.trainings as trainings
    from typestrict_pipeline.store import open_store
    real = os.replace
    def replace(src, dst, *a, **kw):  # the server dies right after it moved the folder in
        real(src, dst, *a, **kw)
        if Path(src).name.startswith(".staging-"):
            print("moved", flush=True)
            time.sleep(600)
    trainings.os.replace = replace
    home, url, jev, body = sys.argv[1:5]
    body = json.loads(body)
    store = trainings.TrainingStore(Path(home), open_store(url), json.loads(jev))
    store.create("acme", trainings.TrainingRequest(body["dataset"], body["decisions"], body["options"]))
""")


def test_a_server_killed_inside_the_charge_leaves_no_training_to_see_or_submit_to(
        tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    csv, jev_file = support.make_dataset(tmp_path, seed=3)
    jev = {"kind": "file", "path": str(jev_file)}
    engine = open_store(sqlite_url)
    CreditLedger(engine).grant("acme", 1, reference="orphan")
    store = TrainingStore(home, engine, jev)
    store.area("acme").save("reviews.csv", csv)
    proc = subprocess.Popen([sys.executable, "-c", _CREATE_CHILD, str(home), sqlite_url, json.dumps(jev),
                             json.dumps(support.TRAINING_BODY)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.strip() == "moved", line + proc.stdout.read().decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)  # inside the charging transaction, before its commit
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    (orphan,) = [p.name for p in (home / "trainings").iterdir()]
    assert (home / "trainings" / orphan / "api-draft.json").is_file()
    assert training_status(engine, orphan) is None and CreditLedger(engine).balance("acme") == 1  # not charged

    store = TrainingStore(home, engine, jev)  # the server, restarted
    assert store.list_ids("acme") == []
    with pytest.raises(NotFoundError, match="expected a training with id"):
        store.view("acme", orphan)
    predictions = "".join(json.dumps(p) + "\n" for p in support.model_predictions(csv, skill=0.9)).encode()
    with pytest.raises(NotFoundError, match="expected a training with id"):
        store.submit("acme", orphan, predictions, None)
    assert not (home / "trainings" / orphan / "manifest.json").exists()
    assert ledger_balance(engine).balanced and CreditLedger(engine).balance("acme") == 1
    # The next creation is charged as any; the leftover goes with the sweep a day later.
    tid = store.create("acme", TrainingRequest(**support.TRAINING_BODY))
    assert store.list_ids("acme") == [tid] and CreditLedger(engine).balance("acme") == 0
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    swept = sweep_retention(engine, now=later, trainings_dir=home / "trainings")
    assert not (home / "trainings" / orphan).exists(), swept
    assert (home / "trainings" / tid).is_dir()
    engine.dispose()
