"""A training whose split would hold out every row, registered by its manifest: refused before
any run by ``training_sensor`` (its skip reason, its log and its refused cursor, like any
manifest that does not fit its split) and by ``typestrict training check`` (exit 1), with the
message of a creation through the API or the console
(``refund.holdout.check_something_to_train_on``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


assets_support = _load("test_refund_assets_support")

ONE_GROUP = ("column 'grp': expected at least 2 groups so some examples remain to train on, got 1 ('g0'): "
             "the test takes whole groups, so all 120 rows would be held out. Add examples of other groups, "
             "or declare no group column if the rows do not depend on each other.")


def _one_group(trainings: Path, training_id: str) -> Path:
    """A training whose every row is of group ``g0`` (its predictions cover every row: they fit)."""
    assets_support.make_training(trainings, training_id, n=120, seed=3)
    data = trainings / training_id / "data.csv"
    header, *rows = data.read_text(encoding="utf-8").splitlines()
    assert header.split(",")[2] == "grp"
    data.write_text("\n".join([header, *(",".join([*r.split(",")[:2], "g0", *r.split(",")[3:]]) for r in rows)])
                    + "\n", encoding="utf-8")
    return data


def test_the_sensor_refuses_a_manifest_whose_split_holds_out_every_row_before_any_run(
        tmp_path: Path, sqlite_url: str) -> None:
    from assets.credits import training_sensor
    from resources.refund import RefundTrainingsResource
    from resources.store import StoreResource

    trainings = tmp_path / "trainings"
    _one_group(trainings, "tr_one")
    assets_support.make_training(trainings, "tr_ok", n=120, seed=4)  # beside it: requested as before
    res = {"refund_trainings": RefundTrainingsResource(folder=str(trainings)),
           "store": StoreResource(url=sqlite_url)}
    with dg.DagsterInstance.ephemeral() as instance:
        first = training_sensor(dg.build_sensor_context(instance=instance, resources=res))
        assert isinstance(first, dg.SensorResult)
        assert [r.run_key for r in first.run_requests or []] == ["verdict:tr_ok"]
        assert list((first.dynamic_partitions_requests or [])[0].partition_keys or []) == ["tr_ok"]
        cursor = first.cursor
        assert cursor is not None and json.loads(cursor)["refused"].keys() == {"tr_one"}
        instance.add_dynamic_partitions("trainings", ["tr_ok"])
        again = training_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=res,
                                                                       cursor=cursor))
        assert again.run_requests == [] and "1 refused until their files change" in (again.skip_message or "")
        # Alone (a fresh cursor), the refusal is the tick's skip reason, in a creation's words.
        (trainings / "tr_ok").rename(tmp_path / "tr_ok")
        alone = training_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, resources=res))
        assert alone.run_requests == []
        said = alone.skip_message or ""
        assert "Refused now: tr_one: " in said and f"data.csv, {ONE_GROUP}" in said, said


def test_the_clis_check_refuses_it_with_exit_1_and_the_same_message(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    _one_group(home / "trainings", "tr_one")
    env = {**os.environ, "TYPESTRICT_HOME": str(home), "TYPESTRICT_STORE_URL": sqlite_url,
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "training", "check", "tr_one"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.startswith("training tr_one: refused before any run: "), proc.stdout
    assert f"data.csv, {ONE_GROUP}" in proc.stdout, proc.stdout
    as_json = subprocess.run([sys.executable, "-m", "typestrict_pipeline.cli", "training", "check", "tr_one",
                              "--json"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert as_json.returncode == 1, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["fits"] is False and ONE_GROUP in out["problem"], out
