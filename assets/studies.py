"""Dagster wiring for studies: ``study_job`` fans a study's window runs out as work-sized steps.

Graph: ``study_plan`` (marks the study running, deals the candidates' windows into chunks
balanced by estimated steps; or one step per candidate, or per (candidate, fold, window), with
``fanout``) → ``study_backtests`` mapped over them (each window run reserves its estimated
cost in the database, runs the backtest, settles the real cost) → ``study_finalize`` (ranks,
picks the winner, scores it once on the holdout, closes the study) which records a
materialization of the ``study_leaderboard`` asset (partition = the study id) whose metadata is
the leaderboard and its header as Markdown tables.

A launched run gets ``STUDY_JOB_EXECUTION`` (multiprocess, each step forked from the run process,
two at once) unless its run config names another executor; tests run in process. Runs are tagged
``mode=HISTORICAL`` like plain backtests. Re-executing a failed or killed run re-runs only
unfinished windows: each window run is idempotent on its (study, candidate, fold, window) key
in the store, so finished work is neither re-run nor charged twice, whatever the chunking.
"""

import os
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg
from sqlalchemy import Engine

from resources.executor import warm_multiprocess_executor
from resources.failures import failure
from resources.store import StoreResource
from resources.studies import StudyRunnerResource
from typestrict_pipeline import plots
from typestrict_pipeline.heap import frozen_heap
from typestrict_pipeline.processes import ProcessIdentity, ancestor_identity, this_process
from typestrict_pipeline.progress import Progress, ProgressFn, every
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.leaderboard import (
    Leaderboard,
    candidate_name,
    load_leaderboard,
    render_markdown,
    winner_text,
)
from typestrict_pipeline.study.limits import format_usd
from typestrict_pipeline.study.runner import (
    RunKey,
    deal_chunks,
    default_chunk_count,
    execute_chunk,
    finalize_study,
    plan_runs,
    search_in_plan_order,
)
from typestrict_pipeline.study.tables import WindowKind

STUDY_PARTITIONS = dg.DynamicPartitionsDefinition(name="study_ids")
LEADERBOARD_KEY = dg.AssetKey(["study_leaderboard"])



class NewStudyConfig(dg.Config):
    """A new study, described on the launchpad (the fields of ``typestrict study run``).

    ``grid``: ``["NAME=V1,V2", ...]``; ``random``: ``["NAME=LOW:HIGH", ...]`` with
    ``random_draws`` draws (seed ``seed``); ``prompt_files``: ``["STEP=PATH", ...]``. Both limits
    are required and the USD budget needs a completed backtest of the version in the workspace:
    otherwise the run fails with the product's message and creates nothing.
    """

    workflow: str
    start: str
    end: str
    tune_steps: int
    eval_steps: int
    holdout_steps: int
    workspace: str = "demo"
    dataset: str = "seattle_weather"
    step: str = "1d"
    folds: int = 3
    horizon_steps: int = 1
    grid: list[str] | None = None
    random: list[str] | None = None
    random_draws: int = 0
    seed: int = 0
    prompt_files: list[str] | None = None
    max_candidates: int | None = None
    max_total_steps: int | None = None
    budget_usd: str | None = None
    min_unseen_steps: int | None = None
    name: str | None = None
    synthetic: bool = False
    max_in_flight: int = 8


class StudyJobConfig(dg.Config):
    """Which study to run: ``study_id`` of a created study (``typestrict study run`` or the
    Python API), or ``new_study`` to create one from the launchpad (exactly one of the two).

    ``fanout``: ``"chunk"`` (default) deals the candidates' windows into ``chunks`` work-sized
    steps balanced by estimated steps (``0``: one per executor worker, i.e. per
    ``max_concurrent`` of the multiprocess executor, per core otherwise); ``"candidate"`` makes
    one step per candidate; ``"window"`` one step per (candidate, fold, window). Every shape
    runs each step's windows in order and is idempotent per window in the store; fewer steps
    cost far less orchestration (see docs/benchmarks.md).
    """

    study_id: int | None = None
    new_study: NewStudyConfig | None = None
    fanout: str = "chunk"
    chunks: int = 0


def _create_from_launchpad(engine: Engine, new: NewStudyConfig) -> int:
    """Create the study the launchpad describes; the product's refusals become a step failure."""
    from typestrict_pipeline.errors import TypeStrictError
    from typestrict_pipeline.study.form import LAUNCHPAD_SPACE, StudyForm, study_config
    from typestrict_pipeline.study.service import create_study_from_config

    try:
        fields = new.model_dump()
        for name in ("grid", "random", "prompt_files"):
            fields[name] = list(fields[name] or [])
        return create_study_from_config(engine, study_config(StudyForm(**fields), words=LAUNCHPAD_SPACE))
    except TypeStrictError as exc:
        raise failure(str(exc), error=type(exc).__name__) from None


def partitions_name(partitions: dg.DynamicPartitionsDefinition) -> str:
    """The name of a named dynamic partitions definition (always set here)."""
    if partitions.name is None:
        raise dg.DagsterInvariantViolationError("expected a named dynamic partitions definition, got none")
    return partitions.name


def leaderboard_picture(board: Leaderboard) -> plots.Picture:
    """Out-of-sample vs in-sample scores of the candidates, with the luck line, and its geometry."""
    # in ranking order, best first: a picture of many candidates labels the winner and the best
    ran = sorted((r for r in board.rows if r.ran), key=lambda r: (r.rank is None, r.rank or 0, r.index))
    winner = next((r.label for r in ran if r.candidate_id == board.winner_candidate_id), None)
    return plots.leaderboard_picture(
        [r.label for r in ran], [r.oos for r in ran], [r.in_sample for r in ran],
        board.stats.luck_line, luck_line_95=board.joint.line_95 if board.joint else None,
        winner=winner,
    )


def leaderboard_picture_markdown(board: Leaderboard) -> str:
    """The leaderboard picture (:func:`leaderboard_picture`) as a Markdown image."""
    return plots.png_markdown(leaderboard_picture(board).png, f"study {board.study_id}: out-of-sample vs in-sample")


RANKING_ROWS = 20


def ranking_table(board: Leaderboard) -> dg.TableMetadataValue:
    """The best ranked candidates (up to :data:`RANKING_ROWS`) as a native table, with the
    leaderboard's own columns, shown as it is (the whole ranking is the Markdown below it)."""
    def num(v: float | None) -> float | None:
        return None if v is None else plots.for_reading(v)

    ran = sorted((r for r in board.rows if r.ran), key=lambda r: (r.rank is None, r.rank or 0, r.index))
    schema = dg.TableSchema(columns=[
        dg.TableColumn("Rank", "int"), dg.TableColumn("Candidate", "string"),
        dg.TableColumn("Adjusted", "float"), dg.TableColumn("Out-of-sample", "float"),
        dg.TableColumn("In-sample", "float"), dg.TableColumn("Overfit gap", "float"),
        dg.TableColumn("Cost", "string"),
    ])
    records = [dg.TableRecord({
        "Rank": r.rank, "Candidate": r.label + (" (winner)" if r.candidate_id == board.winner_candidate_id else ""),
        "Adjusted": num(r.adjusted), "Out-of-sample": num(r.oos), "In-sample": num(r.in_sample),
        "Overfit gap": num(r.gap), "Cost": "—" if r.cost_micro is None else format_usd(r.cost_micro),
    }) for r in ran[:RANKING_ROWS]]
    return dg.MetadataValue.table(records=records, schema=schema)


def leaderboard_materialization(engine: Engine, study_id: int,
                                extra: dict[str, Any] | None = None) -> dg.AssetMaterialization:
    """The ``study_leaderboard`` materialization of a study: header, table, holdout, baseline,
    and the lineage panel when the study belongs to a lineage of scheduled re-runs."""
    from typestrict_pipeline.reruns.lineage import render_markdown as lineage_markdown
    from typestrict_pipeline.reruns.lineage import summarize
    from typestrict_pipeline.reruns.service import lineage_entries

    board = load_leaderboard(engine, study_id)
    header, _, table = render_markdown(board).partition("\n\n")
    metadata: dict[str, Any] = {
        "ranking": ranking_table(board),
        "header": dg.MetadataValue.md(header),
        "leaderboard": dg.MetadataValue.md(table),
        "picture": dg.MetadataValue.md(leaderboard_picture_markdown(board)),
        "state": board.state.label,
        # the candidate as every surface names it (#N, its number in the study), with its rank
        "winner": dg.MetadataValue.text(winner_text(board)),
        "holdout_score": dg.MetadataValue.float(plots.for_reading(board.holdout_score))
        if board.holdout_score is not None else dg.MetadataValue.text(
            board.holdout_missing_reason or "not scored yet"),
        "holdout_baseline": dg.MetadataValue.float(plots.for_reading(board.holdout_baseline))
        if board.holdout_baseline is not None else dg.MetadataValue.text(
            f"missing: {board.holdout_baseline_missing_reason or 'not scored'}"),
        "found_nothing": dg.MetadataValue.bool(bool(board.stats.found_nothing)),
        "verdict": dg.MetadataValue.text(board.verdict),
        "spa_pvalue": dg.MetadataValue.float(plots.for_reading(board.joint.spa_pvalue))
        if board.joint is not None
        else dg.MetadataValue.text(f"not tested: {board.joint_missing_reason}"),
        "stepm_set": dg.MetadataValue.text(
            ", ".join(candidate_name(board, int(c)) for c in board.joint.stepm) or "none")
        if board.joint is not None else dg.MetadataValue.text("not tested"),
        "pbo": dg.MetadataValue.float(plots.for_reading(board.pbo.pbo)) if board.pbo is not None
        else dg.MetadataValue.text("not computed: fewer than 2 complete candidates or 40 steps"),
    }
    entries = lineage_entries(engine, str(study_id))
    if entries:
        summary = summarize(entries)
        metadata["lineage"] = dg.MetadataValue.md(lineage_markdown(entries))
        metadata["best_expected_of_k_under_noise"] = (
            dg.MetadataValue.float(plots.for_reading(summary.noise_line))
            if summary.noise_line is not None
            else dg.MetadataValue.text(f"n/a: {summary.missing_reason}"))
        if summary.cs_lower is not None:
            metadata["lineage_pooled_edge_lower_bound"] = dg.MetadataValue.float(
                plots.for_reading(summary.cs_lower))
        metadata["lineage_statements"] = dg.MetadataValue.md("\n\n".join(summary.statements))
    metadata.update(extra or {})
    return dg.AssetMaterialization(asset_key=LEADERBOARD_KEY, partition=str(study_id),
                                   metadata=metadata)


@dg.asset(
    key=LEADERBOARD_KEY,
    group_name="studies",
    partitions_def=STUDY_PARTITIONS,
    kinds={"python"},
    description="A study's leaderboard: candidates ranked by the luck-adjusted out-of-sample "
    "score, with the luck line, spend and the holdout score (one partition per study id). "
    "study_job records it when a study finishes; materializing a partition here re-reads the "
    "study from the store and redraws its leaderboard (it runs no backtest).",
)
def study_leaderboard(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult[None]:
    from typestrict_pipeline.errors import TypeStrictError

    key: str = context.partition_key
    if not key.isdigit():
        raise failure(f"expected a study id (digits) as the partition, got {key!r}. "
                         "Pick a partition that study_job added.")
    try:
        with store.engine() as engine:
            recorded = leaderboard_materialization(engine, int(key))
    except TypeStrictError as exc:
        raise failure(str(exc), error=type(exc).__name__) from None
    return dg.MaterializeResult(metadata=dict(recorded.metadata))


FANOUTS = ("chunk", "candidate", "window")


def executor_workers(run_config: Mapping[str, Any]) -> int:
    """How many steps the run's executor runs at once, read from its run config: 1 in process,
    ``max_concurrent`` for the multiprocess executor (0 or unset: the cores), the cores for
    any other executor (celery's workers are elsewhere: set ``chunks`` for those)."""
    execution = run_config.get("execution") or {}
    cfg = (execution.get("config") or {}) if isinstance(execution, Mapping) else {}
    cores = os.cpu_count() or 1
    if "in_process" in cfg:
        return 1
    multi = cfg.get("multiprocess")
    if isinstance(multi, Mapping):
        return int(multi.get("max_concurrent") or cores)
    return cores


def _key_to_json(key: RunKey) -> dict[str, Any]:
    return {"study_id": key.study_id, "candidate_id": key.candidate_id, "fold": key.fold,
            "window": key.window.value, "start": key.start.isoformat(),
            "end": key.end.isoformat(), "steps": key.steps}


def _key_from_json(d: dict[str, Any]) -> RunKey:
    import datetime as dt

    return RunKey(int(d["study_id"]), int(d["candidate_id"]), int(d["fold"]),
                  WindowKind(d["window"]), dt.datetime.fromisoformat(d["start"]),
                  dt.datetime.fromisoformat(d["end"]), int(d["steps"]))


def _run_process(context: dg.OpExecutionContext) -> ProcessIdentity:
    """The process of this Dagster run (its start event's pid) when it is this process or an
    ancestor of it; else this process (a step on another host: its run's end is found by the
    lifecycle sensor from the run's status)."""
    records = context.instance.get_records_for_run(
        context.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    event = records[0].event_log_entry.dagster_event if records else None
    found = ancestor_identity(event.pid) if event is not None and event.pid else None
    return found or this_process()


@dg.op(out=dg.DynamicOut(list), tags={"area": "studies"})
def study_plan(context: dg.OpExecutionContext, config: StudyJobConfig,
               store: StoreResource) -> Iterator[dg.DynamicOutput[list[dict[str, Any]]]]:
    """Mark the study running and fan out one step per candidate (or per window run)."""
    if config.fanout not in FANOUTS:
        raise failure(f"expected fanout 'chunk', 'candidate' or 'window', got "
                         f"{config.fanout!r}. Fix the run config.")
    if config.chunks < 0:
        raise failure(f"expected chunks ≥ 0 (0 = one per executor worker), got "
                         f"{config.chunks}. Fix the run config.")
    if (config.study_id is None) == (config.new_study is None):
        raise failure("expected either study_id (a created study) or new_study (a study to "
                         "create), got " + ("both" if config.study_id is not None else "neither")
                         + ". Fix the run config.")
    with store.engine() as engine:
        if config.new_study is not None:
            study_id = _create_from_launchpad(engine, config.new_study)
            context.log.info(f"study {study_id} created from the launchpad")
        else:
            assert config.study_id is not None
            study_id = config.study_id
        # The study's lease names the run's own process (this one, or the run worker when this
        # step runs in a subprocess of it), so its death, not this step's end, interrupts it.
        repo.start_study(engine, study_id, dagster_run_id=context.run_id, owner=_run_process(context))
        keys = plan_runs(engine, study_id)
        in_order = search_in_plan_order(engine, study_id, keys)
    # the leaderboard's partition exists from the start: the steps record their progress on it
    context.instance.add_dynamic_partitions(partitions_name(STUDY_PARTITIONS), [str(study_id)])
    context.log.info(f"study {study_id}: {len(keys)} window runs planned")
    if in_order:
        # Its budget or step limit will stop the search: the windows run in plan order, in one
        # step, so the study stops where one process would (runner.search_chunks).
        context.log.info(f"study {study_id}: its limits stop the search before its end, so its "
                         "window runs run one at a time in plan order (one step)")
        yield dg.DynamicOutput([_key_to_json(k) for k in keys], mapping_key="chunk0")
        return
    if config.fanout == "window":
        for key in keys:
            yield dg.DynamicOutput([_key_to_json(key)], mapping_key=key.name)
        return
    if config.fanout == "chunk":
        wanted = config.chunks or default_chunk_count(executor_workers(context.run_config))
        chunks = deal_chunks(keys, wanted)
        context.log.info(f"study {study_id}: {len(chunks)} chunks of "
                         + ", ".join(str(sum(k.steps for k in c)) for c in chunks) + " steps")
        for i, chunk in enumerate(chunks):
            yield dg.DynamicOutput([_key_to_json(k) for k in chunk], mapping_key=f"chunk{i}")
        return
    groups: dict[int, list[RunKey]] = {}
    for key in keys:
        groups.setdefault(key.candidate_id, []).append(key)
    for cid, group in groups.items():
        yield dg.DynamicOutput([_key_to_json(k) for k in group], mapping_key=f"c{cid}")


def search_progress_report(context: dg.OpExecutionContext, study_id: int, *,
                           percent: int = 10) -> ProgressFn:
    """The study's search progress as this step sees it (after each of its slices): a log line
    and an observation of the study's ``study_leaderboard`` partition every ``percent`` %.
    Each step reports the whole study's figures, so with several steps a line can repeat."""

    def report(p: Progress) -> None:
        line = f"study {study_id}: {p.line()}"
        context.log.info(line)
        metadata: dict[str, Any] = {"progress": line, "window runs done": p.done}
        if p.percent is not None:
            metadata["percent"] = dg.MetadataValue.float(round(p.percent, 1))
        context.log_event(dg.AssetObservation(asset_key=LEADERBOARD_KEY, partition=str(study_id),
                                              metadata=metadata))

    return every(percent, report)


@dg.op(tags={"area": "studies"})
def study_backtests(context: dg.OpExecutionContext, keys: list[dict[str, Any]], store: StoreResource,
                    study_runner: StudyRunnerResource) -> dict[str, Any]:
    """Reserve, run and settle this step's window backtests in order; idempotent per window."""
    run_keys = [_key_from_json(k) for k in keys]
    statuses: dict[str, int] = {}
    cost = 0
    study_id = run_keys[0].study_id
    with store.engine() as engine, frozen_heap():
        backend = study_runner.backend(engine, study_id)
        try:
            # Reserved and settled a slice at a time; stops at the first refused window (a
            # limit stopped the study: this step's later windows do not start).
            results = execute_chunk(engine, run_keys, backend, attempt=context.run_id,
                                    progress=search_progress_report(context, study_id))
        except Exception as exc:
            repo.mark_failed(engine, study_id, f"{type(exc).__name__}: {exc}")
            raise
        for result in results:
            statuses[result.status] = statuses.get(result.status, 0) + 1
            cost += result.cost_micro
    return {"study_id": study_id, "statuses": statuses, "cost_micro": cost}


@dg.op(tags={"area": "studies"})
def study_finalize(context: dg.OpExecutionContext, results: list[dict[str, Any]], store: StoreResource,
                   study_runner: StudyRunnerResource) -> dict[str, Any]:
    """Rank, pick the winner, score the holdout, close the study; record the leaderboard."""
    if not results:
        raise failure("expected at least one planned window run, got none. Check the study.")
    study_id = int(results[0]["study_id"])
    with store.engine() as engine, frozen_heap():
        backend = study_runner.backend(engine, study_id)
        outcome = finalize_study(engine, study_id, backend)
    statuses: dict[str, int] = {}
    for r in results:
        for k, n in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + n
    context.instance.add_dynamic_partitions(partitions_name(STUDY_PARTITIONS), [str(study_id)])
    with store.engine() as engine, frozen_heap():
        context.log_event(leaderboard_materialization(engine, study_id, {
            "window_runs": dg.MetadataValue.json(statuses)}))
        winner = repo.candidate_number(engine, outcome.winner_candidate_id)
    return {"study_id": study_id, "state": outcome.state.value, "winner": winner,
            "holdout_score": outcome.holdout_score}


@dg.graph(description="Run one study: its window runs fan out as independent steps; "
          "re-execute from failure to resume.")
def study_graph() -> None:
    runs = study_plan().map(study_backtests)
    study_finalize(runs.collect())


STUDY_JOB_PRELOAD = ["typestrict_pipeline.definitions", "scipy.stats", "scipy.integrate",
                     "matplotlib.figure", "matplotlib.backends.backend_agg"]
"""What a forkserver imports once if the run process cannot fork its steps (it has another
thread): the code location, and what ``study_finalize`` needs that the code location imports only
on first use (SciPy for the statistics, matplotlib for the leaderboard picture;
typestrict_pipeline/lazy.py)."""

STUDY_JOB_EXECUTION: dict[str, Any] = {
    "multiprocess": {"max_concurrent": 2, "start_method": {"fork": {
        "fallback_preload_modules": STUDY_JOB_PRELOAD}}}}
"""The executor a launched ``study_job`` gets unless its run config says otherwise (the
launchpad shows it and can override it): the warm multiprocess executor
(``resources/executor.py``), two step processes at once, each forked from the run process, which
has already imported the code location (spawn's fresh interpreter re-imports Dagster and the
project, ~3 s a step; a forkserver imports them once more before the first step, ~2 s); with the
default ``chunks``, the study runs as 2 chunk steps. ``execute_in_process`` ignores it."""

STUDY_JOB_TAGS = {"area": "studies", "mode": "HISTORICAL"}

study_job = study_graph.to_job(
    name="study_job", tags=STUDY_JOB_TAGS,
    config={"execution": {"config": STUDY_JOB_EXECUTION}},
    # Its own executor: a code location whose default is another executor (celery) keeps this
    # job loadable (the execution block above is this executor's config); see study_job_on.
    executor_def=warm_multiprocess_executor,
)


CELERY_POLL_S = 0.1
"""How often the run process asks Celery whether a submitted step finished. dagster-celery looks
once a second (``core_execution_loop.TICK_SECONDS``), so each phase of a study (plan, chunks,
finalize) waited up to a second after its step ended: 1.5-2 s of a 64 x 4 study's 6 s. A look
is one result lookup per step in flight on the backend (Redis)."""


def study_job_on(executor_def: dg.ExecutorDefinition) -> dg.JobDefinition:
    """``study_job`` on another executor (e.g. ``dagster_celery.celery_executor``), with no
    default execution block: its run config names the executor's settings (broker, backend).
    Replace ``study_job`` by it in the deployment's ``Definitions``. On Celery, the run process
    polls its steps every :data:`CELERY_POLL_S` seconds instead of every second."""
    if executor_def.name == "celery":
        import dagster_celery.core_execution_loop as celery_loop

        celery_loop.TICK_SECONDS = CELERY_POLL_S  # type: ignore[assignment]
    return study_graph.to_job(name="study_job", tags=STUDY_JOB_TAGS, executor_def=executor_def)


def study_run_config(study_id: int, fanout: str = "chunk", chunks: int = 0) -> dict[str, Any]:
    """The run config of ``study_job`` for one study."""
    return {"ops": {"study_plan": {"config": {"study_id": study_id, "fanout": fanout,
                                              "chunks": chunks}}}}


def new_study_run_config(new_study: dict[str, Any], fanout: str = "chunk",
                         chunks: int = 0) -> dict[str, Any]:
    """The run config of ``study_job`` that creates a study from ``new_study``'s fields."""
    return {"ops": {"study_plan": {"config": {"new_study": new_study, "fanout": fanout,
                                              "chunks": chunks}}}}


def build_defs() -> dg.Definitions:
    return dg.Definitions(assets=[study_leaderboard], jobs=[study_job])
