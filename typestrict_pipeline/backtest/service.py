"""What the Dagster assets and the CLI share: pick the models, run, store, summarise.

Model clients for a registered workflow come from one of two setups:

* the **stand-in** (default, offline): a local stand-in OpenAI-compatible server started for the
  run with the workflow's stand-in answer function, reached through the project's
  OpenAI-compatible client (so the HTTP path, token usage and metering are the real ones);
* an **endpoint**: any OpenAI-compatible ``base_url`` with a model name and its prices.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline.backtest.engine import (
    BacktestResult,
    LiveDecision,
    OnStepError,
    StepRecord,
    plan_steps,
    run_backtest,
    run_live,
)
from typestrict_pipeline.backtest.metering import ModelPrice, PriceTable
from typestrict_pipeline.backtest.pit import PointInTimeTable
from typestrict_pipeline.backtest.store import (
    BacktestRecorder,
    active_version_id,
    record_live_decision,
    stored_version,
)
from typestrict_pipeline.backtest.workflow import Workflow, WorkflowRegistry
from typestrict_pipeline.backtest.workflows import default_registry
from typestrict_pipeline.errors import InputError, NotFoundError

__all__ = [
    "CLI_ENDPOINT_ADVICE",
    "CLI_VERSION",
    "CUSTOMER_VERSION",
    "RUN_ENDPOINT_ADVICE",
    "STUDY_ENDPOINT_ADVICE",
    "ModelSetup",
    "VersionWords",
    "active_workflow",
    "endpoint_client_settings",
    "endpoint_models",
    "parse_time",
    "run_and_store_backtest",
    "run_and_store_live",
    "standin_models",
]


@dataclass(frozen=True)
class ModelSetup:
    """Model clients by name and the price table that covers them."""

    clients: Mapping[str, Any]
    prices: PriceTable


def parse_time(text: str, what: str = "time") -> dt.datetime:
    """An ISO 8601 time or date, taken as UTC when it has no offset (a date is its 00:00 UTC),
    from 1900 to 2199 (:func:`typestrict_pipeline.values.timestamp`).

    Raises:
        InputError: not a time, or one outside those years (``0001-01-01T00:00:00+14:00``).

    >>> parse_time("2015-01-01")
    datetime.datetime(2015, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)
    """
    from typestrict_pipeline.values import timestamp

    return timestamp(text, f"the {what}")


def _standin_answers() -> dict[str, tuple[Callable[[Any], Any], str, PriceTable]]:
    from typestrict_pipeline.backtest.workflows import weather

    return {weather.WEATHER.name: (weather.standin_answer, weather.DEMO_MODEL, weather.DEMO_PRICES)}


CLI_ENDPOINT_ADVICE = "pass --model-url for a real OpenAI-compatible endpoint"
"""What to do about a workflow with no stand-in, where the CLI chooses the models."""
RUN_ENDPOINT_ADVICE = ("the operator sets TYPESTRICT_BACKTEST_MODEL_URL (with TYPESTRICT_BACKTEST_MODEL, "
                       "TYPESTRICT_BACKTEST_PRICE_IN and TYPESTRICT_BACKTEST_PRICE_OUT) in the code "
                       "location's environment for a real OpenAI-compatible endpoint")
"""The same, for a run Dagster starts (its models come from the code location's environment:
``resources.backtests.BacktestModelsResource``)."""
STUDY_ENDPOINT_ADVICE = ("a study runs its workflow on the workflow's stand-in model: choose a workflow "
                         "that has one, or backtest this one on a real endpoint "
                         "(typestrict backtest run --model-url)")
"""The same, for a study (its candidates run on the stand-in: no door of a study takes an endpoint)."""


@contextlib.contextmanager
def standin_models(workflow: Workflow, *, latency_s: float = 0.02,
                   endpoint_advice: str = CLI_ENDPOINT_ADVICE) -> Iterator[ModelSetup]:
    """A stand-in server for ``workflow``'s models for the duration of the block.

    ``endpoint_advice`` is what the refusal tells the reader to do instead, in the words of
    where the models are chosen: the CLI's flag (:data:`CLI_ENDPOINT_ADVICE`), the code
    location's environment for a backtest Dagster starts (the UI's launchpad, the API:
    :data:`RUN_ENDPOINT_ADVICE`), or a workflow with a stand-in for a study
    (:data:`STUDY_ENDPOINT_ADVICE`).

    Raises:
        InputError: the workflow has no stand-in answer function.
    """
    from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
    from typestrict_pipeline.clients.standin import StandinServer

    if not workflow.models and not workflow.judges:
        yield ModelSetup({}, PriceTable())
        return
    answers = _standin_answers()
    if workflow.name not in answers:
        raise InputError(f"a stand-in answer function for workflow {workflow.name!r}",
                         f"none (stand-ins exist for {', '.join(sorted(answers))})",
                         endpoint_advice)
    answer, model, prices = answers[workflow.name]
    with StandinServer(answer, latency_s=latency_s, model_name=model) as server:
        client = OpenAICompatibleClient(server.base_url, model, max_attempts=3, backoff_base_s=0.05)
        yield ModelSetup({n: client for n in (*workflow.models, *workflow.judges)}, prices)


MODEL_TIMEOUT_ENV = "TYPESTRICT_MODEL_TIMEOUT_S"
MODEL_ATTEMPTS_ENV = "TYPESTRICT_MODEL_ATTEMPTS"


def endpoint_client_settings(environ: Mapping[str, str] | None = None) -> tuple[float, int]:
    """``(timeout_s, max_attempts)`` of a backtest's model endpoint client: the client's defaults
    (30 s, 4 attempts), or ``TYPESTRICT_MODEL_TIMEOUT_S`` (0.1 to 600 seconds, for connecting
    and for each read of one attempt) and ``TYPESTRICT_MODEL_ATTEMPTS`` (1 to 10, retries
    included). Read by every door that calls an endpoint (``backtest run``, ``run``, the Dagster
    runs the API launches, a study's endpoint setup).

    >>> endpoint_client_settings({}), endpoint_client_settings({"TYPESTRICT_MODEL_ATTEMPTS": "1"})
    ((30.0, 4), (30.0, 1))
    >>> endpoint_client_settings({"TYPESTRICT_MODEL_TIMEOUT_S": "0"})
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected TYPESTRICT_MODEL_TIMEOUT_S (seconds per attempt) from 0.1 to 600, got '0'. Set it to e.g. 30, or unset it for the default (30 s).
    """
    import os

    from typestrict_pipeline.values import integer, number

    env = os.environ if environ is None else environ
    timeout, attempts = 30.0, 4
    raw = env.get(MODEL_TIMEOUT_ENV)
    if raw:
        timeout = number(raw, f"{MODEL_TIMEOUT_ENV} (seconds per attempt)", lo=0.1, hi=600.0,
                         fix="set it to e.g. 30, or unset it for the default (30 s)")
    raw = env.get(MODEL_ATTEMPTS_ENV)
    if raw:
        attempts = integer(raw, f"{MODEL_ATTEMPTS_ENV} (attempts per call, retries included)", lo=1, hi=10,
                           fix="set it to e.g. 4, or unset it for the default (4)")
    return timeout, attempts


@contextlib.contextmanager
def endpoint_models(
    workflow: Workflow,
    *,
    base_url: str,
    model: str,
    input_micro_usd_per_mtok: int,
    output_micro_usd_per_mtok: int,
    api_key_env: str | None = None,
) -> Iterator[ModelSetup]:
    """An OpenAI-compatible endpoint for every model of ``workflow``, priced as given.

    The client's timeout and attempts are :func:`endpoint_client_settings`'s.

    Raises:
        InputError: a model name the store cannot keep with each call
            (:func:`~typestrict_pipeline.values.model_name`), a key variable that is not set
            (:func:`~typestrict_pipeline.values.api_key_env`), or a bad timeout or attempts
            setting, before any call.
    """
    from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
    from typestrict_pipeline.values import api_key_env as key_variable
    from typestrict_pipeline.values import model_name

    model_name(model, "the model name")
    if api_key_env is not None:
        key_variable(api_key_env, "api_key_env")
    timeout_s, max_attempts = endpoint_client_settings()
    client = OpenAICompatibleClient(base_url, model, api_key_env=api_key_env, timeout_s=timeout_s,
                                    max_attempts=max_attempts)
    prices = PriceTable(models={model: ModelPrice(input_micro_usd_per_mtok, output_micro_usd_per_mtok)})
    yield ModelSetup({n: client for n in (*workflow.models, *workflow.judges)}, prices)


def run_and_store_backtest(
    engine: Engine,
    workflow: Workflow,
    *,
    workspace: str,
    data: Mapping[str, PointInTimeTable],
    dataset: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta,
    models: ModelSetup,
    params: Mapping[str, Any] | None = None,
    prompts: Mapping[str, str] | None = None,
    max_in_flight: int = 8,
    retries: int = 0,
    on_step_error: OnStepError | str = OnStepError.CONTINUE,
    dagster_run_id: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    backtest_id: str | None = None,
) -> tuple[str, BacktestResult]:
    """Check the configuration, run the backtest, store it as it runs; returns (id, result).

    Nothing is stored for a configuration that is refused (bad range, step, data, parameters):
    the error says what to fix. Once it starts, every finished step is stored even if the run
    fails later. ``on_progress(done, planned)`` is called after each finished step (the CLI's
    progress bar). ``backtest_id``: the id it is stored under (default a new one).
    """
    run_wf = workflow.variant(params=params, prompts=prompts) if (params or prompts) else workflow
    times = plan_steps(run_wf, data, start=start, end=end, step=step)
    with BacktestRecorder(engine, workspace=workspace, workflow=run_wf, start=times[0],
                          end=times[-1], step=step, steps_planned=len(times), dataset=dataset,
                          prices=models.prices, dagster_run_id=dagster_run_id,
                          backtest_id=backtest_id) as rec:
        result = run_backtest(run_wf, data=data, start=start, end=end, step=step,
                              clients=models.clients, prices=models.prices,
                              max_in_flight=max_in_flight, retries=retries,
                              on_step_error=on_step_error, should_stop=rec.should_stop,
                              on_step=_counting(rec.on_step, len(times), on_progress))
        result.card = rec.finish(result.card)  # as stored: cancelled meanwhile says so
    return rec.id, result


def _counting(on_step: Callable[[StepRecord], None], planned: int,
              on_progress: Callable[[int, int], None] | None) -> Callable[[StepRecord], None]:
    """``on_step`` that also reports ``(steps done, planned)`` to ``on_progress``."""
    if on_progress is None:
        return on_step
    done = itertools.count(1)  # next() is atomic: steps may finish on several threads

    def step(record: StepRecord) -> None:
        on_step(record)
        on_progress(next(done), planned)

    return step


def run_and_store_live(
    engine: Engine,
    workflow: Workflow,
    *,
    workspace: str,
    data: Mapping[str, PointInTimeTable],
    models: ModelSetup,
    as_of: dt.datetime | None = None,
    params: Mapping[str, Any] | None = None,
    dagster_run_id: str | None = None,
) -> tuple[str, LiveDecision]:
    """One LIVE decision, stored in the live table; returns (id, decision)."""
    live = run_live(workflow, data=data, as_of=as_of, params=params, clients=models.clients,
                    prices=models.prices)
    return record_live_decision(engine, live, workspace=workspace, dagster_run_id=dagster_run_id), live


@dataclass(frozen=True)
class VersionWords:
    """How a door says what to do when the active version of a workflow in a workspace has no
    deployed code (:func:`active_workflow`): the CLI's operator runs ``typestrict backtest
    activate``; a customer of the API or the console cannot activate a version, so asks the
    operator (as ``api/budgets.py`` does for a subscription).

    >>> CUSTOMER_VERSION.activate.format(workflow="wx")
    "ask the operator to activate a current version of workflow 'wx' for this workspace"
    """

    activate: str
    """How a current version of ``{workflow}`` is activated, from this door."""


CLI_VERSION = VersionWords(activate="activate a current version (typestrict backtest activate)")
"""``typestrict backtest ...`` and the Dagster runs (read by the operator)."""
CUSTOMER_VERSION = VersionWords(
    activate="ask the operator to activate a current version of workflow {workflow!r} for this workspace")
"""``POST /v1/backtests`` and the console's backtest form: activating a version is the operator's."""


def active_workflow(
    engine: Engine, name: str, *, workspace: str, registry: WorkflowRegistry | None = None,
    words: VersionWords = CLI_VERSION,
) -> Workflow:
    """The active (live) version of ``name`` in ``workspace``, with promoted parameters.

    The store's activation (``activate_version``, the studies' "Promote winner") wins over the
    code's; a stored version that only changed parameters or prompts is rebuilt from the code's
    version with them, and must reproduce the stored id. Then the parameters a study's "Promote
    winner" applied to this workflow in this workspace (a parameters-only winner, table
    ``study_workflow_params``) are merged over that version's defaults
    (:meth:`Workflow.variant`), so live runs and later backtests use them.

    Raises:
        NotFoundError: unknown workflow, or the active version's code is no longer deployed
            (what to do in the door's ``words``).
        InputError: a promoted parameter the active version no longer accepts.
    """
    from typestrict_pipeline.study.promote import workflow_params

    reg = registry or default_registry()
    vid = active_version_id(engine, workspace=workspace, workflow=name)
    workflow: Workflow | None = None
    if vid is None:
        workflow = reg.active(name)
    else:
        with contextlib.suppress(NotFoundError):
            workflow = reg.get(name, vid)
        stored = None if workflow is not None else stored_version(engine, workflow=name, version_id=vid)
        if stored is not None:
            for base in reg.versions(name):
                with contextlib.suppress(InputError):
                    candidate = base.variant(params=stored[0], prompts=stored[1])
                    if candidate.version_id == vid:
                        workflow = candidate
                        break
    if workflow is None:
        fix = words.activate.format(workflow=name)
        raise NotFoundError(
            f"expected the active version {vid} of workflow {name!r} in workspace {workspace!r} to be "
            "deployed, got no deployed code that reproduces it. "
            + fix[:1].upper() + fix[1:] + "."
        )
    promoted = workflow_params(engine, workspace, name)
    if not promoted:
        return workflow
    try:
        return workflow.variant(params=promoted)
    except InputError as exc:
        raise InputError(
            f"parameters promoted to workflow {name!r} in workspace {workspace!r} that its active "
            f"version {workflow.version_id} accepts",
            f"{promoted} ({exc})",
            "run a study on the current version and promote its winner",
        ) from None
