"""A model client that answers from a recorded predictions file (no model is called)."""

from __future__ import annotations

from pathlib import Path

from typestrict_pipeline.clients.base import ClassifyItem, ClassifyResult, ModelClient, Usage
from typestrict_pipeline.errors import PredictionsError
from typestrict_pipeline.refund.predictions import SystemPredictions, read_predictions

__all__ = ["PredictionsFileClient"]


class PredictionsFileClient(ModelClient):
    """Answers with the probabilities recorded in a predictions file (format: ``docs/manifest.md``).

    The file is read and validated once, when the client is made. Usage is zero: no call is made.

    Args:
        path: the JSONL or Parquet predictions file.
        system: ``"jev"`` or ``"model"``, named in messages.
    """

    def __init__(self, path: str | Path, *, system: str = "model") -> None:
        self.path = Path(path)
        self.system = system
        self.predictions: SystemPredictions = read_predictions(self.path, system)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={str(self.path)!r}, system={self.system!r})"

    def classify(self, question: str, item: ClassifyItem, *, decision: str) -> ClassifyResult:
        """The recorded probabilities of ``item``, aligned with ``item.options``.

        Raises:
            PredictionsError: no recorded prediction for the example, or its answers are not
                exactly ``item.options``.
        """
        p = self.predictions.predictions.get((decision, item.id))
        if p is None:
            raise PredictionsError(
                f"a prediction for example {item.id!r} of decision {decision!r}",
                "none",
                f"record {self.system}'s probabilities for it",
                file=str(self.path),
                column="id",
            )
        given = p.as_dict()
        if set(given) != set(item.options) or len(given) != len(item.options):
            raise PredictionsError(
                f"probabilities over {list(item.options)}",
                f"{sorted(given)}",
                "record probabilities over exactly the example's answers",
                file=str(self.path),
                row=p.row,
                column="probabilities",
            )
        return ClassifyResult(
            id=item.id,
            options=item.options,
            probabilities=tuple(given[o] for o in item.options),
            usage=Usage.zero(),
        )
