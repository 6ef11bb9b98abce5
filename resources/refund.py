"""Resources of the refund area: where trainings are, and the model clients.

``RefundTrainingsResource`` finds a training's manifest by its id (the partition key) under one
folder, by convention ``${TYPESTRICT_HOME}/trainings/<training_id>/manifest.json``, and says where
its audit goes (``${TYPESTRICT_HOME}/audits/<training_id>.json``). The credits area's training
sensor watches the same folder and adds a ``trainings`` partition for each new manifest.

The model clients sit behind one interface, :class:`RefundModelClientResource`: given where the
manifest says the probabilities come from and the examples to answer, return probabilities.
Settings and environment variables are read only when a run uses the resource.
"""

import contextlib
import dataclasses
import hashlib
import re
import socket
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from typestrict_pipeline.clients.base import ModelClient, Usage
from typestrict_pipeline.clients.collect import client_for_source, predict_holdout
from typestrict_pipeline.clients.file import PredictionsFileClient
from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
from typestrict_pipeline.errors import ManifestError
from typestrict_pipeline.refund.dataset import Dataset
from typestrict_pipeline.refund.holdout import Holdout
from typestrict_pipeline.refund.manifest import (
    EndpointSource,
    PredictionsFileSource,
    PredictionSource,
    TrainingManifest,
    load_manifest,
)
from typestrict_pipeline.refund.predictions import Prediction, SystemPredictions
from typestrict_pipeline.store import typestrict_home

MANIFEST_NAME = "manifest.json"
_TRAINING_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def check_training_id(training_id: str) -> str:
    """Refuse an id that could not be a folder name under the trainings folder (``..``, ``/``)."""
    if not _TRAINING_ID.fullmatch(training_id) or set(training_id) == {"."}:
        raise ManifestError(
            "a training id of letters, digits, '_', '-' or '.' (at most 200 characters)",
            repr(training_id),
            "use the training's id as the partition key",
        )
    return training_id


class RefundTrainingsResource(dg.ConfigurableResource["RefundTrainingsResource"]):
    """Where the trainings' manifests and audits live.

    Attributes:
        folder: the trainings folder; default ``${TYPESTRICT_HOME}/trainings`` (read at run time).
            Training ``<id>`` has its manifest at ``<folder>/<id>/manifest.json``.
        audits_folder: where audits are written; default ``${TYPESTRICT_HOME}/audits``.
        data_root: the shared data folder a manifest's files may also be in (besides the
            training's own folder); default ``TYPESTRICT_DATA_ROOT``, else
            ``${TYPESTRICT_HOME}/data``. Paths leading anywhere else are refused.
    """

    folder: str | None = None
    audits_folder: str | None = None
    data_root: str | None = None

    def trainings_dir(self) -> Path:
        """The trainings folder (the setting, else ``${TYPESTRICT_HOME}/trainings``)."""
        return Path(self.folder) if self.folder else typestrict_home() / "trainings"

    def audits_dir(self) -> Path:
        """The audits folder (the setting, else ``${TYPESTRICT_HOME}/audits``)."""
        return Path(self.audits_folder) if self.audits_folder else typestrict_home() / "audits"

    def manifest_path(self, training_id: str) -> Path:
        """``<folder>/<training_id>/manifest.json``."""
        return self.trainings_dir() / check_training_id(training_id) / MANIFEST_NAME

    def audit_path(self, training_id: str) -> Path:
        """``<audits_folder>/<training_id>.json``."""
        return self.audits_dir() / f"{check_training_id(training_id)}.json"

    def load(self, training_id: str) -> TrainingManifest:
        """Read and validate the manifest of ``training_id``; its id must match the partition key.

        Raises:
            ManifestError: no manifest, an invalid one, or one for another training.
        """
        path = self.manifest_path(training_id)
        manifest = load_manifest(path, data_root=Path(self.data_root) if self.data_root else None)
        if manifest.training_id != training_id:
            raise ManifestError(
                f"training_id {training_id!r} (the partition key and the folder name)",
                repr(manifest.training_id),
                "fix training_id in the manifest or move it to the folder of its id",
                file=str(path),
            )
        return manifest

    def training_ids(self) -> list[str]:
        """Ids of every folder holding a manifest, sorted (what the training sensor adds)."""
        root = self.trainings_dir()
        if not root.is_dir():
            return []
        return sorted(
            p.name
            for p in root.iterdir()
            if p.is_dir() and _TRAINING_ID.fullmatch(p.name) and (p / MANIFEST_NAME).is_file()
        )


# ------------------------------------------------------------------------------------------------
# Model clients: one interface, three implementations
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemAnswers:
    """One system's answers on every decision's test examples (a prediction asset's value).

    Attributes:
        system: ``"jev"`` or ``"model"``.
        label: how outputs name it (``"Jev"``, ``"Jev (demo stand-in)"``, ``"model"``).
        system_id: what answered, for the audit: an endpoint's model name, or
            ``file-sha256:<hex>`` of a predictions file (never a path, never a key).
        predictions: the predictions, keyed by (decision, id).
        usage: tokens and HTTP calls (zero for a file).
        seconds: wall time spent asking.
    """

    system: str
    label: str
    system_id: str
    predictions: SystemPredictions
    usage: Usage
    seconds: float

    @classmethod
    def none(cls, system: str, label: str | None = None) -> "SystemAnswers":
        """No answers (a failed training needs none)."""
        return cls(
            system=system,
            label=label or _default_label(system),
            system_id="none",
            predictions=SystemPredictions(system=system, source="(none)", predictions={}),
            usage=Usage.zero(),
            seconds=0.0,
        )


def _default_label(system: str) -> str:
    return "Jev" if system == "jev" else "model"


def file_system_id(path: Path) -> str:
    """``file-sha256:<hex>`` of a predictions file's bytes (an id that holds no path)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"file-sha256:{digest.hexdigest()}"


class RefundModelClientResource(dg.ConfigurableResource["RefundModelClientResource"], ABC):
    """Answers a training's test examples: the same question and examples for Jev and the model.

    Subclasses say which client answers; :meth:`predict` asks it for every decision's test
    examples (``max_workers`` concurrent calls) and collects the probabilities.

    Attributes:
        label: how outputs name this system (default "Jev" / "model").
        max_workers: concurrent calls to an endpoint.
    """

    label: str | None = None
    max_workers: int = 4

    @abstractmethod
    def client(self, source: PredictionSource | None, *, system: str) -> ModelClient:
        """The client that answers (``source`` is what the manifest says)."""

    @abstractmethod
    def system_id(self, source: PredictionSource | None, *, system: str) -> str:
        """What answers, for the audit (no path, no key)."""

    def predict(
        self,
        *,
        system: str,
        source: PredictionSource | None,
        dataset: Dataset,
        holdouts: Sequence[Holdout],
        log: Any = None,
    ) -> SystemAnswers:
        """Ask for every decision's test examples; returns them with their cost."""
        started = time.perf_counter()
        client = self.client(source, system=system)
        usage = Usage.zero()
        merged: list[Prediction] = []
        origin = "(none)"
        for h in holdouts:
            got = predict_holdout(client, dataset, h, system=system, max_workers=self.max_workers)
            usage = usage + got.usage
            origin = got.predictions.source
            merged.extend(got.predictions.predictions.values())
            if log is not None:
                log.info("%s answered %d test examples of %s", self.label or system, len(got.predictions.predictions), h.decision)
        return SystemAnswers(
            system=system,
            label=self.label or _default_label(system),
            system_id=self.system_id(source, system=system),
            predictions=SystemPredictions.from_iterable(system, origin, merged),
            usage=usage,
            seconds=time.perf_counter() - started,
        )


def _missing_source(system: str) -> ManifestError:
    return ManifestError(
        f"a predictions source for {system} (predictions.{system} in the manifest)",
        "none",
        f"say where {system}'s probabilities come from, or configure the refund_{system}_client resource",
    )


def _answers_at(base_url: str) -> bool:
    """Whether something accepts connections at ``base_url``'s host and port (1 s at most)."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.hostname is None or parts.port is None:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=1.0):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def standin_on_demand(source: PredictionSource | None, log: Any = None) -> Iterator[PredictionSource | None]:
    """Yield ``source``, or, for the demo's Jev stand-in when its server is gone, a local one.

    The demo's manifests name Jev (demo stand-in) as an endpoint on 127.0.0.1 at a port that
    lives only while ``make demo`` runs. Re-materializing one of those partitions later (from
    the UI) starts the same stand-in (the lexicon: deterministic answers, no key) for the
    duration of the step, so the verdict comes out the same. Any other source is left alone.
    """
    from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_MODEL, jev_standin_server

    if not (isinstance(source, EndpointSource) and source.model == JEV_STANDIN_MODEL
            and urllib.parse.urlsplit(source.base_url).hostname in ("127.0.0.1", "localhost")
            and not _answers_at(source.base_url)):
        yield source
        return
    with jev_standin_server() as server:
        if log is not None:
            log.info("the demo's Jev stand-in at %s is gone: started it again at %s for this step",
                     source.base_url, server.base_url)
        yield dataclasses.replace(source, base_url=server.base_url, api_key_env=None)


class ManifestSourceClientResource(RefundModelClientResource):
    """The default: ask whatever the manifest names (a predictions file or an endpoint).

    The demo's Jev stand-in is started on demand when its server is gone (:func:`standin_on_demand`).
    """

    def predict(
        self,
        *,
        system: str,
        source: PredictionSource | None,
        dataset: Dataset,
        holdouts: Sequence[Holdout],
        log: Any = None,
    ) -> SystemAnswers:
        from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_LABEL, JEV_STANDIN_MODEL

        with standin_on_demand(source, log) as live:
            answers = super().predict(system=system, source=live, dataset=dataset, holdouts=holdouts, log=log)
        if self.label is None and isinstance(source, EndpointSource) and source.model == JEV_STANDIN_MODEL:
            answers = dataclasses.replace(answers, label=JEV_STANDIN_LABEL)  # the demo's name for it
        return answers

    def client(self, source: PredictionSource | None, *, system: str) -> ModelClient:
        if source is None:
            raise _missing_source(system)
        return client_for_source(source, system=system)

    def system_id(self, source: PredictionSource | None, *, system: str) -> str:
        if isinstance(source, PredictionsFileSource):
            return file_system_id(source.path)
        if isinstance(source, EndpointSource):
            return source.model
        raise _missing_source(system)


class PredictionsFileClientResource(RefundModelClientResource):
    """Recorded probabilities from one predictions file, whatever the manifest says.

    Attributes:
        path: the JSONL or Parquet predictions file (format: ``docs/manifest.md``).
    """

    path: str

    def client(self, source: PredictionSource | None, *, system: str) -> ModelClient:
        return PredictionsFileClient(self.path, system=system)

    def system_id(self, source: PredictionSource | None, *, system: str) -> str:
        return file_system_id(Path(self.path))


class OpenAICompatibleClientResource(RefundModelClientResource):
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint, whatever the manifest says.

    The API key is read from the environment variable ``api_key_env`` at call time; only the
    variable's name is configuration, the key is never stored or logged.

    Attributes:
        base_url: e.g. ``https://api.example.com/v1``.
        model: the model name sent with each request.
        api_key_env: the environment variable holding the key (None: no key).
        timeout_s: seconds per attempt.
        max_attempts: attempts per example (retries on 429, 5xx and network errors).
        top_logprobs: alternatives asked for the answer token (1..20).
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_attempts: int = 4
    top_logprobs: int = 20

    def client(self, source: PredictionSource | None, *, system: str) -> ModelClient:
        return OpenAICompatibleClient(
            self.base_url,
            self.model,
            api_key_env=self.api_key_env,
            timeout_s=self.timeout_s,
            max_attempts=self.max_attempts,
            top_logprobs=self.top_logprobs,
        )

    def system_id(self, source: PredictionSource | None, *, system: str) -> str:
        return self.model


def default_resources() -> dict[str, Any]:
    """The refund area's resources: trainings under ``$TYPESTRICT_HOME``, clients as manifests say."""
    return {
        "refund_trainings": RefundTrainingsResource(),
        "refund_jev_client": ManifestSourceClientResource(),
        "refund_model_client": ManifestSourceClientResource(),
    }
