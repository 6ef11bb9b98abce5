"""Study throughput against the local model server at 200 ms per call, 32 calls in flight.

Run: ``.venv/bin/python -m bench.bench_study_throughput``

The Seattle rain workflow (one model call per step) replays the real NOAA data; its model is the
stand-in OpenAI-compatible server in its own process (``ThreadingHTTPServer``, 200 ms per answer),
reached over real HTTP through the project's client and metered. The study: 4 candidates ×
2 folds × (64 tune + 64 eval days) + a 64-day holdout = 1,088 steps in 17 window runs, on
Dagster (in process, one step per candidate), 32 model calls in flight per window run.

Ideal time at 32 in flight = Σ_windows ⌈steps / 32⌉ × 0.2 s; efficiency = ideal / actual. The
straightforward alternative, measured in the same run: one window of 32 steps with 1 call in
flight (sequential calls), per-step time compared with the study's.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LATENCY_S = 0.2
IN_FLIGHT = 32
UTC = dt.UTC
SERVER = (
    "import sys\n"
    "from typestrict_pipeline.clients.standin import StandinServer\n"
    "from typestrict_pipeline.backtest.workflows.weather import standin_answer, DEMO_MODEL\n"
    f"s = StandinServer(standin_answer, latency_s={LATENCY_S}, model_name=DEMO_MODEL).start()\n"
    "print(s.port, flush=True)\n"
    "sys.stdin.read()\n"
)


def main() -> None:
    import dagster as dg

    from assets.studies import study_run_config
    from typestrict_pipeline.backtest.workflows import default_registry
    from typestrict_pipeline.backtest.workflows.weather import DEMO_MODEL
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.folds import Window
    from typestrict_pipeline.study.repository import get_study
    from typestrict_pipeline.study.runner import CandidateSpec
    from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
    from typestrict_pipeline.study.space import SearchSpace
    from typestrict_pipeline.study.tables import WindowKind

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_study_tp_"))
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        base_url = f"http://127.0.0.1:{port}/v1"
        os.environ["DAGSTER_HOME"] = str(tmp / "dagster_home")
        (tmp / "dagster_home").mkdir()
        (tmp / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        url = f"sqlite:///{tmp / 'store.db'}"
        os.environ["TYPESTRICT_STORE_URL"] = url
        engine = open_store(url)
        wf = default_registry().active("seattle_rain")
        backend: dict[str, Any] = {"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow",
                   "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_weather",
                                  "base_url": base_url, "model": DEMO_MODEL,
                                  "input_micro_usd_per_mtok": 150_000,
                                  "output_micro_usd_per_mtok": 600_000},
                   "max_in_flight": IN_FLIGHT}
        cfg = StudyConfig(workspace="bench", workflow="seattle_rain", workflow_version=wf.version_id,
                          space=SearchSpace(grid={"threshold": [0.4, 0.5], "lookback_days": [3, 7]}),
                          start=dt.datetime(2014, 6, 1, tzinfo=UTC),
                          end=dt.datetime(2015, 12, 31, tzinfo=UTC), step=dt.timedelta(days=1),
                          n_folds=2, tune_steps=64, eval_steps=64, holdout_steps=64,
                          max_candidates=4, max_total_steps=10_000, backend=backend)
        sid = create_study_from_config(engine, cfg)
        layout = cfg.layout()
        windows = [w for f in layout.folds for w in (f.tune, f.eval)] * 4 + [layout.holdout]
        ideal = sum(math.ceil(w.steps / IN_FLIGHT) for w in windows) * LATENCY_S
        from typestrict_pipeline.definitions import defs

        quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
        started = time.perf_counter()
        with dg.DagsterInstance.get() as instance:
            ok = defs.resolve_job_def("study_job").execute_in_process(
                run_config={**study_run_config(sid), **quiet}, instance=instance).success
        wall = time.perf_counter() - started
        assert ok
        with session_scope(engine) as s:
            study = get_study(s, sid)
            steps, spend = study.steps_used, study.spend_micro
        print(f"study on Dagster: {steps} steps in {wall:.1f} s = {steps / wall:.1f} steps/s "
              f"({IN_FLIGHT} calls in flight, {LATENCY_S * 1000:.0f} ms per call); ideal "
              f"{ideal:.1f} s, efficiency {ideal / wall:.0%}; spend ${(spend or 0) / 1e6:.4f}")
        from typestrict_pipeline.study.backends import EngineBackend, load_setup

        seq = EngineBackend(load_setup(str(backend["setup"]), backend["setup_args"]),
                            max_in_flight=1)
        w = layout.holdout
        win = Window(w.start, w.start + 32 * layout.step, 32)
        t0 = time.perf_counter()
        out = seq.run_window(CandidateSpec(0, 0, {}, {}), win, WindowKind.EVAL, seal_at=None,
                             should_stop=lambda c, s: False)
        seq_s = time.perf_counter() - t0
        per_seq = seq_s / out.steps_done
        per_study = wall / steps
        print(f"straightforward alternative (1 call in flight): {out.steps_done} steps in "
              f"{seq_s:.1f} s = {1 / per_seq:.1f} steps/s; the study is {per_seq / per_study:.1f}× "
              "faster per step")
        engine.dispose()
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
