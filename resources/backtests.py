"""Resources of the backtests area: the model clients a backtest or a live run uses (key ``backtest_models``).

Two implementations of one interface:

* :class:`StandinBacktestModels` (the embedded default and the tests): a local stand-in
  OpenAI-compatible server started for the run, with the workflow's stand-in answer function
  and its per-token prices, reached over real HTTP through the project's client;
* :class:`EndpointBacktestModels` (production): an OpenAI-compatible endpoint, its model name,
  the environment variable holding its key, and its prices (integer micro-USD per 1M tokens).

``BacktestModelsResource`` (the default under ``backtest_models``) picks between them when a run
uses it: ``TYPESTRICT_BACKTEST_MODEL_URL`` set means the endpoint, else the stand-in. The store is
the shared ``store`` resource (``resources/store.py``).
"""

import abc
import contextlib
import os
from collections.abc import Iterator
from typing import Any

import dagster as dg

from resources.failures import failure
from typestrict_pipeline.backtest.service import (
    RUN_ENDPOINT_ADVICE,
    ModelSetup,
    endpoint_models,
    standin_models,
)
from typestrict_pipeline.backtest.workflow import Workflow


class BacktestModels(dg.ConfigurableResource["BacktestModels"], abc.ABC):
    """Where a workflow's model clients come from, and their prices."""

    @abc.abstractmethod
    def open(self, workflow: Workflow) -> contextlib.AbstractContextManager[ModelSetup]:
        """``with models.open(workflow) as setup:`` clients by name and the price table."""


class StandinBacktestModels(BacktestModels):
    """A local stand-in server per run (not a real model; deterministic, offline).

    Attributes:
        latency_s: seconds each stand-in answer waits (a model's latency).
    """

    latency_s: float = 0.02

    def open(self, workflow: Workflow) -> contextlib.AbstractContextManager[ModelSetup]:
        return standin_models(workflow, latency_s=self.latency_s)


class EndpointBacktestModels(BacktestModels):
    """An OpenAI-compatible endpoint.

    Attributes:
        base_url: e.g. ``https://api.example.com/v1``.
        model: the model name (and its price-table entry).
        api_key_env: the environment variable holding the API key (read when a run calls).
        input_micro_usd_per_mtok: price of 1M prompt tokens, micro-USD.
        output_micro_usd_per_mtok: price of 1M completion tokens, micro-USD.
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    input_micro_usd_per_mtok: int
    output_micro_usd_per_mtok: int

    def open(self, workflow: Workflow) -> contextlib.AbstractContextManager[ModelSetup]:
        return endpoint_models(
            workflow, base_url=self.base_url, model=self.model, api_key_env=self.api_key_env,
            input_micro_usd_per_mtok=self.input_micro_usd_per_mtok,
            output_micro_usd_per_mtok=self.output_micro_usd_per_mtok,
        )


class BacktestModelsResource(BacktestModels):
    """The environment's choice, made when a run uses it.

    ``TYPESTRICT_BACKTEST_MODEL_URL`` set: an endpoint with ``TYPESTRICT_BACKTEST_MODEL``
    (model name), ``TYPESTRICT_BACKTEST_MODEL_KEY_ENV`` (name of the key variable) and
    ``TYPESTRICT_BACKTEST_PRICE_IN`` / ``_OUT`` (micro-USD per 1M tokens, required: an unpriced
    model is refused). Unset: the stand-in with ``standin_latency_s``.

    Attributes:
        standin_latency_s: the stand-in's latency when no endpoint is configured.
    """

    standin_latency_s: float = 0.02

    @contextlib.contextmanager
    def _open(self, workflow: Workflow) -> Iterator[ModelSetup]:
        url = os.environ.get("TYPESTRICT_BACKTEST_MODEL_URL")
        if not url:
            with standin_models(workflow, latency_s=self.standin_latency_s,
                                endpoint_advice=RUN_ENDPOINT_ADVICE) as setup:
                yield setup
            return
        missing = [v for v in ("TYPESTRICT_BACKTEST_MODEL", "TYPESTRICT_BACKTEST_PRICE_IN",
                               "TYPESTRICT_BACKTEST_PRICE_OUT") if not os.environ.get(v)]
        if missing:
            raise failure(
                f"expected {', '.join(missing)} with TYPESTRICT_BACKTEST_MODEL_URL, got them unset. "
                "Set the model name and its prices (micro-USD per 1M tokens): every call is costed."
            )
        price_in, price_out = (_price(v) for v in ("TYPESTRICT_BACKTEST_PRICE_IN",
                                                    "TYPESTRICT_BACKTEST_PRICE_OUT"))
        with endpoint_models(
            workflow, base_url=url, model=os.environ["TYPESTRICT_BACKTEST_MODEL"],
            api_key_env=os.environ.get("TYPESTRICT_BACKTEST_MODEL_KEY_ENV"),
            input_micro_usd_per_mtok=price_in, output_micro_usd_per_mtok=price_out,
        ) as setup:
            yield setup

    def open(self, workflow: Workflow) -> contextlib.AbstractContextManager[ModelSetup]:
        return self._open(workflow)


def _price(variable: str) -> int:
    """A price variable by the CLI's rule for ``--price-in`` (a whole number of micro-USD per 1M
    tokens, 0 to 10¹²), refused naming the variable: ``0.15`` (dollars) was a bare ``ValueError``
    from ``int()``, and ``1_000`` or 10³⁰ a price."""
    from typestrict_pipeline.errors import InputError
    from typestrict_pipeline.values import integer

    try:
        return integer(os.environ[variable], f"{variable} (a price in micro-USD per 1M tokens)",
                       lo=0, hi=10**12, fix="write micro-USD per 1M tokens, e.g. 150000 for $0.15")
    except InputError as exc:
        raise failure(str(exc)) from exc


def default_resources() -> dict[str, Any]:
    """``{"backtest_models": BacktestModelsResource()}`` (nothing is read until a run uses it)."""
    return {"backtest_models": BacktestModelsResource()}
