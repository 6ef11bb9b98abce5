"""Model clients: one interface, a predictions-file client, an OpenAI-compatible HTTP client,
and a stand-in OpenAI-compatible server for tests, demos and benchmarks.

No I/O happens at import time.
"""

from typestrict_pipeline.clients.base import (
    ClassifyItem,
    ClassifyResult,
    Completion,
    ModelClient,
    TokenLogprob,
    Usage,
)
from typestrict_pipeline.clients.collect import (
    CollectedPredictions,
    client_for_source,
    holdout_items,
    predict_holdout,
)
from typestrict_pipeline.clients.file import PredictionsFileClient
from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
from typestrict_pipeline.clients.prompt import (
    ClassificationPrompt,
    build_classification_messages,
    match_label,
    option_labels,
    parse_classification_prompt,
)
from typestrict_pipeline.clients.standin import (
    ChatRequest,
    Fault,
    StandinReply,
    StandinServer,
    classification_answer,
    distribution_reply,
    hashed_answer,
)

__all__ = [
    "ChatRequest",
    "ClassificationPrompt",
    "ClassifyItem",
    "ClassifyResult",
    "CollectedPredictions",
    "Completion",
    "Fault",
    "ModelClient",
    "OpenAICompatibleClient",
    "PredictionsFileClient",
    "StandinReply",
    "StandinServer",
    "TokenLogprob",
    "Usage",
    "build_classification_messages",
    "classification_answer",
    "client_for_source",
    "distribution_reply",
    "hashed_answer",
    "holdout_items",
    "match_label",
    "option_labels",
    "parse_classification_prompt",
    "predict_holdout",
]
