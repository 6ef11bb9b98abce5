"""``verdict_job`` in process, launched as before (multiprocess, forkserver), and under the daemon.

Run: ``.venv/bin/python -m bench.bench_verdict_daemon`` (``make bench`` runs every benchmark).

One SQLite Dagster instance written by ``sqlite_instance_config`` (the shipped run queue:
dequeue every second, one run per training), a SQLite store with credits, and seeded synthetic
trainings of 2,400 rows (the refund tests' generator, ``tests/test_refund_assets_support.py``).
Three ways to get a verdict, in rounds (each round: one of each, on fresh trainings, so the
shared machine's load drifts equally over them; ratios are within a round):

* **in process**: ``verdict_job.execute_in_process`` for the partition (what the demo does);
* **before**: ``execute_job`` with the executor verdict_job launched with before this change
  (multiprocess, forkserver preloading the code location, two steps at once);
* **daemon**: a ``dagster-daemon`` (started once, like a service) whose ``training_sensor`` sees
  the new manifest and requests the run; the queue launches it with the product's run launcher
  (``resources/launcher.py``: a fork of the warm run server, which imported the code location
  once), where the job's executor (in process) runs the chain. Timed from the run's entry into
  the queue (the sensor's request) to its end, split into the time in the queue, the run
  process's start and the chain itself; the sensor's own interval (30 s) comes before that and
  is reported apart. The daemon's first verdict (launched the default way, a new interpreter,
  while the warm server loads) is run and reported before the rounds, not in them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 5


def _support() -> Any:
    path = ROOT / "tests" / "test_refund_assets_support.py"
    spec = importlib.util.spec_from_file_location("test_refund_assets_support", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verdict_job_def() -> Any:
    from typestrict_pipeline.definitions import defs

    return defs.resolve_job_def("verdict_job")


BEFORE = {"execution": {"config": {"multiprocess": {"max_concurrent": 2, "start_method": {
    "forkserver": {"preload_modules": ["typestrict_pipeline.definitions"]}}}}}}


def _in_process(instance: Any, tid: str) -> float:
    instance.add_dynamic_partitions("trainings", [tid])
    started = time.perf_counter()
    result = verdict_job_def().execute_in_process(partition_key=tid, instance=instance)
    assert result.success
    return time.perf_counter() - started


def _before(instance: Any, tid: str) -> float:
    import dagster as dg

    instance.add_dynamic_partitions("trainings", [tid])
    started = time.perf_counter()
    result = dg.execute_job(dg.reconstructable(verdict_job_def), instance=instance, run_config=BEFORE,
                            tags={"dagster/partition": tid})
    assert result.success
    return time.perf_counter() - started


def _daemon(instance: Any, support: Any, trainings: Path, tid: str, seed: int) -> dict[str, float]:
    """Seconds: ``total`` (run enqueued → end), ``queue`` (enqueued → dequeued), ``start`` (dequeued →
    the run process's RUN_START: a fork, or a process start and code location load), ``chain``
    (RUN_START → end) and ``sensor`` (manifest written → run enqueued); ``warm`` is 1.0 when the
    run was forked from the warm run server."""
    import dagster as dg

    written = time.time()
    support.make_training(trainings, tid, n=2400, model_skill=0.95, jev_skill=0.55, seed=seed)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": tid}))
        if runs and runs[0].status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
            run = runs[0]
            assert run.status == dg.DagsterRunStatus.SUCCESS
            logs = instance.all_logs(run.run_id)
            at = {e.dagster_event.event_type_value: e.timestamp for e in logs
                  if e.dagster_event is not None and not e.step_key}
            # The run's creation time in a SQLite run storage is whole seconds (CURRENT_TIMESTAMP):
            # up to 1 s early. The sensor submits the run to the queue as it creates it, so the
            # enqueue event (a float timestamp, milliseconds after the insert) stands for it.
            created = at["PIPELINE_ENQUEUED"]
            # The queue's dequeue is recorded as RUN_DEQUEUED or, by the launcher, RUN_STARTING.
            dequeued = at.get("PIPELINE_DEQUEUED", at.get("PIPELINE_STARTING", created))
            end, started = at["PIPELINE_SUCCESS"], at["PIPELINE_START"]
            warm = any("forked from the warm run server" in (e.message or "") for e in logs)
            return {"warm": float(warm), "total": end - created, "queue": dequeued - created, "start": started - dequeued,
                    "chain": end - started, "sensor": created - written}
        time.sleep(0.25)
    raise RuntimeError(f"no finished verdict run for {tid} within 600 s")


def main() -> None:
    import dagster as dg

    from bench.summary import row
    from typestrict_pipeline.credits import CreditLedger
    from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
    from typestrict_pipeline.processes import stop_process_group
    from typestrict_pipeline.store import open_store

    support = _support()
    tmp = Path(tempfile.mkdtemp(prefix="bench_verdict_"))
    home, dagster_home = tmp / "home", tmp / "dagster_home"
    dagster_home.mkdir(parents=True)
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))
    store_url = f"sqlite:///{home / 'store.db'}"
    trainings = home / "trainings"
    trainings.mkdir(parents=True)
    engine = open_store(store_url)
    CreditLedger(engine).grant("tests", 100, reference="bench")
    engine.dispose()
    settings = {"DAGSTER_HOME": str(dagster_home), "TYPESTRICT_HOME": str(home), "TYPESTRICT_STORE_URL": store_url}
    os.environ.update(settings)
    dg.DagsterInstance.get().dispose()  # create the instance's storage before the daemon races us to it
    log = tmp / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores); trainings of 2,400 rows; SQLite instance")
        verdict_job_def()  # import the code location here once, outside the timed in-process runs
        rounds: list[tuple[float, float, float]] = []
        with dg.DagsterInstance.get() as instance:
            first = _daemon(instance, support, trainings, "dm_first", 99)
            print(f"  the first verdict after the daemon started: {first['total']:.1f} s (launched the "
                  f"default way while the warm run server imports the code location: in the queue "
                  f"{first['queue']:.1f} s, run process start {first['start']:.1f} s, chain "
                  f"{first['chain']:.1f} s); not in the rounds")
            for i in range(ROUNDS):
                for tid in (f"ip{i}", f"mp{i}"):  # partitions first: the sensor leaves them alone
                    instance.add_dynamic_partitions("trainings", [tid])
                    support.make_training(trainings, tid, n=2400, model_skill=0.95, jev_skill=0.55, seed=i)
                ip = _in_process(instance, f"ip{i}")
                mp = _before(instance, f"mp{i}")
                d = _daemon(instance, support, trainings, f"dm{i}", i)
                assert d["warm"], "a timed round's run was not started by the warm run server"
                print(f"  round {i + 1}: in process {ip:5.1f} s | before (multiprocess forkserver ×2) {mp:5.1f} s "
                      f"= {mp / ip:.2f}× | daemon {d['total']:5.1f} s = {d['total'] / ip:.2f}× (in the queue "
                      f"{d['queue']:.1f} s, run process start {d['start']:.1f} s, chain {d['chain']:.1f} s; the "
                      f"sensor requested it {d['sensor']:.1f} s after the manifest) (load {os.getloadavg()[0]:.1f})")
                rounds.append((ip, mp, d["total"]))
            ratios = sorted(d / ip for ip, _, d in rounds)
            med = statistics.median(ratios)
            ip_med = statistics.median(ip for ip, _, _ in rounds)
            row("bench_verdict_daemon", f"verdict_job launched by training_sensor under dagster-daemon ({ROUNDS} rounds)",
                f"{statistics.median(d for _, _, d in rounds):.1f} s (median; ratios "
                + ", ".join(f"{r:.2f}" for r in ratios) + ")",
                alternative=f"in process {ip_med:.1f} s", ratio=f"{med:.2f}x in process (median)",
                target="<= 1.5x in process", ok=med <= 1.5,
                numbers={"ratios": med, "in_process_median": ip_med})
            row("bench_verdict_daemon", f"verdict_job, the UI's old default (multiprocess forkserver x2) ({ROUNDS} rounds)",
                f"{statistics.median(mp for _, mp, _ in rounds):.1f} s (median)",
                alternative=f"in process {ip_med:.1f} s",
                ratio=f"{statistics.median(mp / ip for ip, mp, _ in rounds):.2f}x in process (median)")
    finally:
        stop_process_group(daemon)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
