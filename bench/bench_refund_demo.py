"""What the refund demo's slow steps cost, each against the straightforward alternative.

1. Training the demo's TF-IDF + logistic regression on the 11,777 training rows: one BLAS thread
   (what the demo does) against the default thread pool.
2. Asking Jev (demo stand-in) over HTTP for the 2,000 test examples: 4 concurrent calls (the
   demo's ``max_workers``) against one at a time; then the same with 5 ms of simulated network
   latency per call (the stand-in's ``latency_s``), closer to a remote endpoint.
3. One training's verdict chain in process on a SQLite instance (what the demo does), against an
   ephemeral in-memory instance (what the tests do); best of 2 each after a warm-up run.

Run: ``.venv/bin/python -m bench.bench_refund_demo`` (or ``make bench``).
"""

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
from threadpoolctl import threadpool_limits

from assets import area_definitions
from resources import default_resources
from typestrict_pipeline.clients.collect import predict_holdout
from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
from typestrict_pipeline.demo_data.build import (
    DATASET_FILE,
    DEMO_TRAININGS,
    demo_frame,
    prepare_training,
    write_csv,
)
from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_MODEL, jev_standin_server
from typestrict_pipeline.demo_data.training import train_text_classifier
from typestrict_pipeline.instance import sqlite_instance_config, write_instance_yaml
from typestrict_pipeline.refund.dataset import load_dataset
from typestrict_pipeline.refund.holdout import split_decisions, training_ids
from typestrict_pipeline.refund.manifest import load_manifest


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    """Print the three comparisons (environment restored afterwards: `make bench` runs all benches in one process)."""
    saved = {k: os.environ.get(k) for k in ("TYPESTRICT_HOME", "DAGSTER_HOME")}
    root = Path(tempfile.mkdtemp(prefix="bench-refund-demo-"))
    try:
        _main(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _main(root: Path) -> None:
    os.environ["TYPESTRICT_HOME"] = str(root)
    dataset_path = write_csv(demo_frame(), root / "data" / DATASET_FILE)
    tfidf = DEMO_TRAININGS[0]
    with jev_standin_server() as server:
        jev = {"kind": "openai", "base_url": server.base_url, "model": JEV_STANDIN_MODEL}
        prepare_training(tfidf, trainings_dir=root / "trainings", dataset_path=dataset_path, jev_source=jev)
        manifest = load_manifest(root / "trainings" / tfidf.training_id / "manifest.json")
        dataset = load_dataset(manifest)
        holdouts = split_decisions(dataset)
        allowed = sorted(training_ids(holdouts))
        by_id = {ex.id: ex for ex in dataset.examples}
        labels = dataset.decision("sentiment")
        pos = {ex.id: i for i, ex in enumerate(dataset.examples)}
        texts = [by_id[i].text for i in allowed]
        y = [labels.label_at(pos[i]) or "" for i in allowed]
        answers = labels.spec.answers

        one = _best(lambda: train_text_classifier(texts, y, answers), repeat=2)

        def default_threads() -> None:
            with threadpool_limits(limits=None):
                from sklearn.feature_extraction.text import TfidfVectorizer
                from sklearn.linear_model import LogisticRegression

                m = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit_transform(texts)
                LogisticRegression(max_iter=2000, C=4.0).fit(m, y)

        default = _best(default_threads, repeat=2)
        print(f"train TF-IDF+LR on {len(texts):,} rows: 1 BLAS thread {one:.2f} s, "
              f"default threads {default:.2f} s (ratio {default / one:.1f}x)")

        client = OpenAICompatibleClient(server.base_url, JEV_STANDIN_MODEL)
        h = holdouts[0]
        serial = _best(lambda: predict_holdout(client, dataset, h, system="jev", max_workers=1), repeat=1)
        pooled = _best(lambda: predict_holdout(client, dataset, h, system="jev", max_workers=4), repeat=1)
        print(f"Jev (demo stand-in) over HTTP, {len(h.test_ids):,} test examples: 4 workers {pooled:.2f} s, "
              f"1 worker {serial:.2f} s (ratio {serial / pooled:.1f}x)")
        with jev_standin_server(latency_s=0.005) as slow:
            remote = OpenAICompatibleClient(slow.base_url, JEV_STANDIN_MODEL)
            serial5 = _best(lambda: predict_holdout(remote, dataset, h, system="jev", max_workers=1), repeat=1)
            pooled5 = _best(lambda: predict_holdout(remote, dataset, h, system="jev", max_workers=4), repeat=1)
        print(f"  same with 5 ms of simulated network latency per call: 4 workers {pooled5:.2f} s, "
              f"1 worker {serial5:.2f} s (ratio {serial5 / pooled5:.1f}x)")

        failed = DEMO_TRAININGS[3]
        prepare_training(failed, trainings_dir=root / "trainings", dataset_path=dataset_path, jev_source=jev)
        defs = dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=default_resources()))
        job = defs.resolve_job_def("verdict_job")
        quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

        def chain(instance: dg.DagsterInstance, key: str) -> float:
            instance.add_dynamic_partitions("trainings", [key])
            t0 = time.perf_counter()
            job.execute_in_process(partition_key=key, instance=instance, run_config=quiet)
            return time.perf_counter() - t0

        home = root / "dagster_home"
        write_instance_yaml(home, sqlite_instance_config(home))
        os.environ["DAGSTER_HOME"] = str(home)
        from typestrict_pipeline.credits import CreditLedger
        from typestrict_pipeline.store import default_store_url, open_store

        engine = open_store(default_store_url())
        CreditLedger(engine).grant("demo", 10, reference="bench")
        engine.dispose()
        chain(dg.DagsterInstance.ephemeral(), tfidf.training_id)  # warm-up: imports, first HTTP
        sqlite_instance = dg.DagsterInstance.get()
        eph_t = min(chain(dg.DagsterInstance.ephemeral(), tfidf.training_id) for _ in range(2))
        sqlite_t = min(chain(sqlite_instance, tfidf.training_id) for _ in range(2))
        print(f"verdict_job for {tfidf.training_id} (2,000 test examples, Jev over HTTP): SQLite instance "
              f"{sqlite_t:.2f} s, ephemeral instance {eph_t:.2f} s (ratio {sqlite_t / eph_t:.2f}x)")


if __name__ == "__main__":
    main()
