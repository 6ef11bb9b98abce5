"""Support for the API tests (no tests here): a real uvicorn server, seeded data, the verdict run.

* :class:`ApiServer`: ``create_app`` served by uvicorn on 127.0.0.1 with the options every API
  server gets (:func:`typestrict_pipeline.api.server.uvicorn_options`: the bounded protocol), on a
  socket bound to a free port before the server starts (no race for the port), in a thread;
  stopped on exit.
* :func:`make_dataset`: a seeded CSV (``random.Random(seed)``) with groups and two answers, and
  Jev's probabilities for every row, written as a predictions file (the server's Jev).
* :func:`model_predictions`: a seeded "trained model"'s probabilities for every row.
* :func:`settled_model`: a store where one model of workspace ``ws`` is settled with a real audit
  (and, when given, its weights file); returns the store URL, a key of ``ws`` and the audit's bytes.
* :func:`run_verdicts`: what production does after a training is handed over: one tick of
  ``training_sensor`` on a real (ephemeral) Dagster instance, then the requested ``verdict_job``
  runs, in process, with the project's own definitions.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from typestrict_pipeline.api import create_app
from typestrict_pipeline.api.keys import create_api_key
from typestrict_pipeline.api.server import RequestLimits, uvicorn_options
from typestrict_pipeline.credits import CreditLedger, SettlementRequest, settle_training
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.predictions import Prediction, write_predictions_jsonl
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.synthetic import synthetic_decision
from typestrict_pipeline.store import open_store

ANSWERS = ("yes", "no")
UNUSED_JEV: dict[str, Any] = {"kind": "file", "path": "jev-never-asked.jsonl"}
"""The Jev of a server whose test never judges a training (a server does not start without one)."""


class ApiServer:
    """``create_app(store_url, home, ...)`` on a real uvicorn server at ``self.url``."""

    def __init__(self, store_url: str, home: Path, *, app: Any = None, limits: RequestLimits | None = None,
                 **options: Any) -> None:
        options.setdefault("jev_source", UNUSED_JEV)
        self.app = app if app is not None else create_app(store_url, home, **options)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on",
                                **uvicorn_options(limits))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ApiServer:
        self.thread.start()
        deadline = time.monotonic() + 120  # generous: the machine is shared and busy
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)


def new_key(store_url: str, workspace: str, credits: int = 0) -> str:
    """A fresh API key of ``workspace`` (and ``credits`` granted to it)."""
    engine = open_store(store_url)
    try:
        key = create_api_key(engine, workspace, label="tests").key
        if credits:
            CreditLedger(engine).grant(workspace, credits, reference=f"tests-{workspace}-{key[4:20]}")
    finally:
        engine.dispose()
    return key


def settled_model(tmp: Path, model: str, *, seed: int, keep_if_loses: bool,
                  weights: bytes | None = None) -> tuple[str, str, bytes]:
    """A SQLite store in ``tmp`` where ``model`` of workspace "ws" is settled on a synthetic decision
    (``synthetic_decision(seed=seed)``, the model 0.8 skilled, Jev 0.6) with its audit written to
    ``tmp/audit.json`` and, when ``weights`` is given, ``tmp/model/weights.bin``; returns
    ``(store URL, a key of "ws", the audit's bytes)``."""
    url = f"sqlite:///{tmp / 'store.db'}"
    data = synthetic_decision(seed=seed, n=300, n_answers=2, model_skill=0.8, jev_skill=0.6)
    judgement = judge([data], keep_if_loses=keep_if_loses)
    audit = write_audit(tmp / "audit.json",
                        build_audit(judgement, training_id=model, model_id=model, jev_id="jev"))
    if weights is not None:
        (tmp / "model").mkdir()
        (tmp / "model" / "weights.bin").write_bytes(weights)
    engine = open_store(url)
    try:
        CreditLedger(engine).grant("ws", 1, reference="test")
        settle_training(engine, SettlementRequest(
            workspace_id="ws", training_id=model, verdict=judgement.verdict, reason="test",
            keep_if_loses=keep_if_loses, model_dir=tmp / "model", audit_json=audit.read_bytes()))
        key = create_api_key(engine, "ws").key
    finally:
        engine.dispose()
    return url, key, audit.read_bytes()


def _probs(rng: random.Random, right: int, skill: float) -> tuple[float, float]:
    top = right if rng.random() < skill else 1 - right
    hi = 0.55 + 0.4 * rng.random()
    return (hi, 1 - hi) if top == 0 else (1 - hi, hi)


def make_dataset(folder: Path, *, n: int = 200, seed: int = 0, jev_skill: float = 0.6) -> tuple[bytes, Path]:
    """``(csv bytes, jev predictions file)``: ``n`` rows in groups of 4, answers yes/no."""
    rng = random.Random(seed)
    rows = [(f"ex{i:04d}", f"review number {i} of seed {seed}", f"g{i // 4}", rng.choice(ANSWERS)) for i in range(n)]
    csv = "id,text,grp,label\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in rows)
    jev = [Prediction(r[0], "sentiment", tuple(zip(ANSWERS, _probs(rng, ANSWERS.index(r[3]), jev_skill), strict=True)))
           for r in rows]
    path = folder / f"jev-{seed}.jsonl"
    write_predictions_jsonl(path, jev)
    return csv.encode(), path


def labels(csv: bytes) -> dict[str, str]:
    """id -> label of a dataset made by :func:`make_dataset`."""
    lines = csv.decode().splitlines()[1:]
    return {line.split(",")[0]: line.split(",")[-1] for line in lines}


def model_predictions(csv: bytes, *, skill: float, seed: int = 1) -> list[dict[str, Any]]:
    """A seeded model's probabilities for every row (``skill``: how often its top answer is right)."""
    rng = random.Random(seed)
    out = []
    for id_, label in labels(csv).items():
        p = _probs(rng, ANSWERS.index(label), skill)
        out.append({"id": id_, "decision": "sentiment", "probabilities": dict(zip(ANSWERS, p, strict=True))})
    return out


TRAINING_BODY: dict[str, Any] = {
    "dataset": {"path": "reviews.csv", "columns": {"id": "id", "text": "text", "group": "grp"}},
    "decisions": [{"name": "sentiment", "question": "Is this review positive?",
                   "answer_column": "label", "answers": list(ANSWERS)}],
    "options": {"keep_if_loses": False},
}


def run_verdicts(home: Path, store_url: str, failures: dict[str, str] | None = None, *,
                 dagster_home: Path | None = None) -> list[str]:
    """One ``training_sensor`` tick and its ``verdict_job`` runs, in process; the ids judged.

    ``failures`` (if given) receives, per failed run, the first failed step's error message.
    On ``dagster_home``'s instance (default: an ephemeral one, which knows no training yet).
    """
    import os

    import dagster as dg

    from assets import area_definitions
    from resources import default_resources

    saved = {k: os.environ.get(k) for k in ("TYPESTRICT_HOME", "TYPESTRICT_STORE_URL")}
    os.environ["TYPESTRICT_HOME"] = str(home)
    os.environ["TYPESTRICT_STORE_URL"] = store_url
    try:
        resources = default_resources()
        defs = dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=resources))
        opened = (dg.DagsterInstance.from_config(str(dagster_home))
                  if dagster_home is not None else dg.DagsterInstance.ephemeral())
        with opened as instance:
            sensor = defs.resolve_sensor_def("training_sensor")
            tick = sensor(dg.build_sensor_context(instance=instance, resources=resources, definitions=defs))
            if not isinstance(tick, dg.SensorResult):
                return []
            for request in tick.dynamic_partitions_requests or []:
                assert isinstance(request, dg.AddDynamicPartitionsRequest)
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            job = defs.resolve_job_def("verdict_job")
            judged = []
            quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
            for run in tick.run_requests or []:
                assert run.partition_key is not None
                result = job.execute_in_process(partition_key=run.partition_key, instance=instance,
                                                run_config=quiet, raise_on_error=False)
                judged.append(run.partition_key)
                if not result.success:
                    refusal(instance, result.run_id, resources)
                if not result.success and failures is not None:
                    events = result.get_step_failure_events()
                    info = events[0].step_failure_data.error if events else None
                    messages = []
                    while info is not None:  # the product's error may be the cause of Dagster's
                        messages.append(info.message)
                        info = info.cause
                    failures[run.partition_key] = "\n".join(messages) or "failed"
            return judged
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def refusal(instance: Any, run_id: str, resources: dict[str, Any]) -> Any:
    """What production's ``verdict_refusal_sensor`` does for a failed verdict run, evaluated here."""
    import dagster as dg

    from assets.lifecycle import verdict_refusal_sensor

    run = instance.get_run_by_id(run_id)
    [record] = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    event = record.event_log_entry.dagster_event
    context = dg.build_run_status_sensor_context(
        sensor_name="verdict_refusal_sensor", dagster_event=event, dagster_instance=instance,
        dagster_run=run, resources=resources).for_run_failure()
    return verdict_refusal_sensor(context)


def dumps(value: Any) -> str:
    return json.dumps(value)


REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServedCommand:
    """A server command (``make api``, ``typestrict api ...``) in its own process group, its
    output collected line by line, answering at ``url`` once ``/v1/openapi.json`` does; stopped
    with its whole process group on exit."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, *, cwd: Path = REPO) -> None:
        import subprocess

        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def wait_ready(self, timeout_s: float = 180.0) -> ServedCommand:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/v1/openapi.json", timeout=10).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start:\n" + "\n".join(self.lines))
            time.sleep(0.3)

    def stop(self) -> int:
        from typestrict_pipeline.processes import stop_process_group

        stop_process_group(self.proc)
        self._reader.join(timeout=30)
        return int(self.proc.returncode)

    def __enter__(self) -> ServedCommand:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def demo_like_home(home: Path) -> Path:
    """A home ``make api`` takes for the demo's: its store and the marker ``make demo`` leaves
    when it finishes (``demo.json``); the demo's data are not needed to serve the API."""
    home.mkdir(parents=True, exist_ok=True)
    open_store(f"sqlite:///{home / 'store.db'}").dispose()  # the demo's home has its store
    (home / "demo.json").write_text(json.dumps({"finished_at": "2026-01-01T00:00:00+00:00", "made": [],
                                                "fingerprint": {}}) + "\n", encoding="utf-8")
    return home


def make_api(home: Path, port: int, **extra_env: str) -> ServedCommand:
    """``make api`` as the README runs it, on ``home`` (``TYPESTRICT_HOME``) and ``port``."""
    import os

    env = {**os.environ, "TYPESTRICT_HOME": str(home), "API_PORT": str(port), **extra_env}
    for name in ("TYPESTRICT_STORE_URL", "TYPESTRICT_API_JEV_SOURCE", "MAKEFLAGS", "MAKELEVEL"):
        if name not in extra_env:
            env.pop(name, None)
    return ServedCommand(["make", "--no-print-directory", "api"], env, port)


def run_study_here(store_url: str, study_id: int) -> None:
    """Run a created study in this process with the studies core's local runner (for tests about
    what the API shows of a finished study, not about how it runs: the API launched its Dagster
    run, which no daemon picks up here)."""
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import study_backend

    engine = open_store(store_url)
    try:
        run_study_local(engine, study_id, study_backend(engine, study_id), max_workers=2)
    finally:
        engine.dispose()
