"""Ask a client for one decision's test examples and collect them as ``SystemPredictions``."""

from __future__ import annotations

from dataclasses import dataclass

from typestrict_pipeline.clients.base import ClassifyItem, ModelClient, Usage
from typestrict_pipeline.clients.file import PredictionsFileClient
from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
from typestrict_pipeline.refund.dataset import Dataset
from typestrict_pipeline.refund.holdout import Holdout
from typestrict_pipeline.refund.manifest import (
    EndpointSource,
    PredictionsFileSource,
    PredictionSource,
)
from typestrict_pipeline.refund.predictions import (
    Prediction,
    SystemPredictions,
    validate_probabilities,
)
from typestrict_pipeline.refund.types import DecisionKind

__all__ = ["CollectedPredictions", "client_for_source", "holdout_items", "predict_holdout"]


@dataclass(frozen=True)
class CollectedPredictions:
    """One system's predictions on one decision's test examples, and what they cost.

    Attributes:
        predictions: the predictions, ready for ``build_decision_data``.
        usage: tokens and HTTP calls summed over the examples.
    """

    predictions: SystemPredictions
    usage: Usage


def client_for_source(source: PredictionSource, *, system: str) -> ModelClient:
    """The client a manifest's predictions source describes.

    Args:
        source: a predictions file or an OpenAI-compatible endpoint.
        system: ``"jev"`` or ``"model"``.

    Returns:
        A :class:`PredictionsFileClient` or an :class:`OpenAICompatibleClient`.
    """
    if isinstance(source, PredictionsFileSource):
        return PredictionsFileClient(source.path, system=system)
    assert isinstance(source, EndpointSource)
    return OpenAICompatibleClient(
        source.base_url,
        source.model,
        api_key_env=source.api_key_env,
        timeout_s=source.timeout_s,
        max_attempts=source.max_attempts,
        top_logprobs=source.top_logprobs,
    )


def holdout_items(dataset: Dataset, holdout: Holdout) -> list[ClassifyItem]:
    """The decision's test examples as classify items (sorted by id), each with its options."""
    labels = dataset.decision(holdout.decision)
    test_ids = holdout.test_ids
    position = dataset.positions(test_ids)
    examples = dataset.examples_at([position[i] for i in test_ids])
    items: list[ClassifyItem] = []
    for ident, example in zip(test_ids, examples, strict=True):
        i = position[ident]
        if labels.spec.kind is DecisionKind.MULTIPLE_CHOICE:
            options = labels.options_at(i)
        else:
            options = labels.spec.answers
        items.append(ClassifyItem(id=ident, text=example.text, options=options))
    return items


def predict_holdout(
    client: ModelClient,
    dataset: Dataset,
    holdout: Holdout,
    *,
    system: str,
    max_workers: int = 1,
) -> CollectedPredictions:
    """Ask ``client`` for every test example of ``holdout``'s decision (same question for both systems).

    Args:
        client: the system's client.
        dataset: the validated dataset.
        holdout: the decision's split.
        system: ``"jev"`` or ``"model"``.
        max_workers: concurrent calls.

    Returns:
        The predictions and their summed usage.

    Raises:
        ModelClientError: a call failed after its retries.
        PredictionsError: a recorded prediction is missing or malformed.
    """
    labels = dataset.decision(holdout.decision)
    items = holdout_items(dataset, holdout)
    results = client.classify_many(
        labels.spec.question, items, decision=holdout.decision, max_workers=max_workers
    )
    source = repr(client)
    if isinstance(client, OpenAICompatibleClient):
        source = client.url
    elif isinstance(client, PredictionsFileClient):
        source = str(client.path)
    usage = Usage.zero()
    preds: list[Prediction] = []
    for r in results:
        usage = usage + r.usage
        pairs = validate_probabilities(
            list(zip(r.options, r.probabilities, strict=True)), file=source, row=None
        )
        preds.append(Prediction(id=r.id, decision=holdout.decision, probabilities=pairs))
    return CollectedPredictions(SystemPredictions.from_iterable(system, source, preds), usage)
