"""The adapter between re-runs and the studies area (``typestrict_pipeline.study``).

Re-runs only need a few facts about a study (:class:`StudyFacts`) and three actions: create a
re-run from a parent, run it, and tell whether a workflow is busy. :class:`StudiesPort` is that
contract; :class:`StoreStudies` implements it on the studies area's store and runner. Nothing in
the studies area is changed from here: a re-run is an ordinary study whose search space is the
parent's plus the previous winner (an ``extra`` candidate, tried first), whose holdout is the
new window, and whose USD budget is the schedule's copy of the root's.

Data arrival, from the data itself where possible: when the lineage's root study replays a
registered workflow on a named point-in-time dataset (an ``engine`` backend with the
``registered_workflow`` setup), each tick reads the dataset's tables and takes the end of the
decision steps whose outcome is known from their latest knowledge time
(:func:`data_end_from_tables`). For sources that cannot be read that way (the synthetic
workflows, a setup of your own), :func:`record_data_end` stores, per workspace and workflow, the
end (exclusive) of the decision steps whose outcome is known; whoever appends data (an
ingestion job, the demo, ``typestrict schedule data-arrived``) calls it. A readable dataset wins
over the signal (the data is the truth; a stale or early signal is ignored for it).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine, select

from typestrict_pipeline.errors import InputError, NotFoundError
from typestrict_pipeline.reruns.decide import PreviousOutcome
from typestrict_pipeline.reruns.tables import DataEndRow
from typestrict_pipeline.store import session_scope, utcnow
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import FoldLayout, plan_folds
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import StudyBackend, run_study_local
from typestrict_pipeline.study.space import SearchSpace, candidate_key
from typestrict_pipeline.study.tables import CandidateRow, StudyRow, StudyState


@dataclass(frozen=True)
class StudyFacts:
    """What re-runs need to know about a study.

    Attributes:
        study_id: the study's id (as text).
        workspace_id, workflow_id: where it runs.
        state: the studies area's state (``FINISHED``, ``BUDGET_REACHED``, ``RUNNING``, ...).
        budget_micro_usd: its USD budget (None: created without one).
        winner_key: the winning candidate's identity (hash of its parameters and prompts).
        winner_label: a short label of the winner.
        winner_params, winner_prompts: the winner's configuration (to add it to a re-run).
        holdout_start, holdout_end: its holdout (aware UTC).
        holdout_score: the winner's holdout score.
        holdout_se: with a baseline, the SE of the per-step difference winner − baseline
            (Newey–West); without one, the SE of the winner's holdout mean.
        baseline_score: the baseline's score on the same holdout steps (None when not scored).
        origin: first step of the study's data (the first fold's tune window start).
        step: the step size.
        embargo_steps: the embargo before the holdout.
        horizon_steps: the outcome horizon.
        min_unseen_steps: the study's "Min unseen steps for a re-run", set when it was created
            (column ``study_studies.min_unseen_steps``; for studies created before that column,
            a positive ``config_json["min_unseen_steps"]`` is read), else None.
    """

    study_id: str
    workspace_id: str
    workflow_id: str
    state: str
    budget_micro_usd: int | None
    winner_key: str | None
    winner_label: str | None
    winner_params: dict[str, Any]
    winner_prompts: dict[str, str]
    holdout_start: dt.datetime
    holdout_end: dt.datetime
    holdout_score: float | None
    holdout_se: float | None
    baseline_score: float | None
    origin: dt.datetime
    step: dt.timedelta
    embargo_steps: int
    horizon_steps: int
    min_unseen_steps: int | None = None

    @property
    def outcome(self) -> PreviousOutcome:
        """FINISHED with a winner; IN_PROGRESS while pending or running; else NOT_FINISHED."""
        if self.state in (StudyState.PENDING.value, StudyState.RUNNING.value):
            return PreviousOutcome.IN_PROGRESS
        if self.state in (StudyState.FINISHED.value, StudyState.BUDGET_REACHED.value) and self.winner_key:
            return PreviousOutcome.FINISHED
        return PreviousOutcome.NOT_FINISHED

    def index(self, t: dt.datetime) -> int:
        """The step index of time ``t`` on this study's grid (floor)."""
        return int((t - self.origin) // self.step)

    def time(self, index: int) -> dt.datetime:
        """The time of step ``index`` on this study's grid."""
        return self.origin + index * self.step


@dataclass(frozen=True)
class RerunSpec:
    """What a re-run study is created with."""

    parent: StudyFacts
    root: StudyFacts
    holdout_start: dt.datetime
    holdout_end: dt.datetime
    holdout_steps: int
    budget_micro_usd: int
    name: str


class DataKind(enum.StrEnum):
    """Where a lineage's new data comes from, and so whether it can grow.

    Attributes:
        REGISTERED: a registered point-in-time dataset (``typestrict data register``); rows are
            added with ``typestrict data append`` and the next tick reads them.
        BUILT_IN: a dataset that ships with the code (``seattle_weather``): it never grows.
        SIGNAL: a source a tick cannot read (a synthetic workflow, a setup of your own): arrivals
            are recorded with ``typestrict schedule data-arrived`` (or :func:`record_data_end`).
    """

    REGISTERED = "registered"
    BUILT_IN = "built-in"
    SIGNAL = "signal"


@dataclass(frozen=True)
class AddDataWords:
    """How a door says what brings a schedule new steps (:meth:`DataSource.how_to_add`): the CLI
    its commands, the API its routes; a message stored for every door (a tick's reason, read by
    the CLI, the API and Dagster alike) names no door's. Templates: ``{name}`` the dataset's
    stored name, ``{own}`` its name in its workspace (a dataset the API registered is stored as
    ``NAME__<digest of the workspace>``), ``{workspace}``, ``{workflow}``.

    >>> DataSource(DataKind.REGISTERED, "live__822b33ad87c1").how_to_add("acme", "seattle_rain", API_ADD_DATA)
    'add rows: POST /v1/datasets/live/append'
    """

    append: str
    """How rows are added to a registered dataset."""
    arrivals: str
    """How data arrivals are recorded (a workflow that reads no dataset)."""
    register: str
    """How a dataset of one's own is registered (a built-in one never grows)."""
    restored: str
    """Where a workspace whose scheduled work is refused reads its subscription and usage."""


CLI_ADD_DATA = AddDataWords(
    append="add rows: typestrict data append {name} FILE.csv",
    arrivals="record arrivals: typestrict schedule data-arrived {workspace} {workflow} END",
    register="register your own (typestrict data register NAME --workflow {workflow} --table TABLE=FILE.csv)",
    restored="typestrict schedule workspace {workspace} shows its subscription and usage")
"""``typestrict schedule status``'s words (and the Dagster sensor's timelines: the operator's)."""
API_ADD_DATA = AddDataWords(
    append="add rows: POST /v1/datasets/{own}/append",
    arrivals="the operator records the data's arrivals for workflow {workflow}",
    register="register your own (POST /v1/datasets)",
    restored="GET /v1/workspaces/{workspace}/budget shows its subscription and usage")
"""A schedule's ``status_text`` through the API."""
CONSOLE_ADD_DATA = AddDataWords(
    append="add rows through the API (POST /v1/datasets/{own}/append)",
    arrivals=API_ADD_DATA.arrivals,
    register="register your own through the API (POST /v1/datasets)",
    restored="Settings → Usage shows its subscription and usage")
"""A schedule's status on the console's study page (the console names datasets; adding rows to
one, or registering one, is the API's)."""
STORED_ADD_DATA = AddDataWords(
    append="add rows to dataset {own}",
    arrivals="the operator records the data's arrivals for workflow {workflow}",
    register="register a dataset of your own",
    restored="its subscription and usage budget are its settings")
"""A tick's reason, stored once and shown by every door: no door's command or route."""


@dataclass(frozen=True)
class DataSource:
    """A lineage's data: its kind and, for a dataset, its name.

    >>> DataSource(DataKind.BUILT_IN, "seattle_weather").can_grow
    False
    >>> DataSource(DataKind.REGISTERED, "live").how_to_add("demo", "seattle_rain")
    'add rows: typestrict data append live FILE.csv'
    """

    kind: DataKind
    name: str | None = None

    @property
    def can_grow(self) -> bool:
        """Whether new steps can ever arrive (a built-in dataset is fixed)."""
        return self.kind is not DataKind.BUILT_IN

    def label(self) -> str:
        """How the data is named to a reader."""
        if self.kind is DataKind.REGISTERED:
            return f"registered dataset {self.name}"
        if self.kind is DataKind.BUILT_IN:
            return f"built-in dataset {self.name}"
        return "recorded data arrivals"

    def how_to_add(self, workspace_id: str, workflow_id: str, words: AddDataWords = CLI_ADD_DATA) -> str:
        """What brings new steps (or, for a built-in dataset, what to do instead), in the door's
        ``words`` (the CLI's commands by default)."""
        name = str(self.name)
        own = name.rpartition("__")[0] or name
        fill = {"name": name, "own": own, "workspace": workspace_id, "workflow": workflow_id}
        if self.kind is DataKind.REGISTERED:
            return words.append.format(**fill)
        if self.kind is DataKind.SIGNAL:
            return words.arrivals.format(**fill)
        return (f"a built-in dataset never grows: {words.register.format(**fill)}, run a study on it with a "
                "USD budget and schedule that one")


class StudiesPort(Protocol):
    """What re-runs need from the studies area."""

    def get(self, study_id: str) -> StudyFacts | None:
        """The study's facts, or None when it does not exist (deleted)."""

    def workflow_in_flight(self, workspace_id: str, workflow_id: str) -> bool:
        """Whether a study or backtest of the workflow is running."""

    def data_end(self, facts: StudyFacts) -> dt.datetime | None:
        """End (exclusive) of the decision steps with a known outcome, for the study's workflow
        (from its dataset when readable, else from the recorded arrival signal)."""

    def data_source(self, facts: StudyFacts) -> DataSource:
        """Where the study's new data comes from (a registered dataset, a built-in one, a signal)."""

    def create_rerun(self, spec: RerunSpec) -> str:
        """Create the re-run study (taking the workflow's lock); its id."""

    def run(self, study_id: str) -> None:
        """Run a created study to its end (idempotent: finished work is not re-run)."""

    def mark_failed(self, study_id: str, error: str) -> None:
        """Record that a study's run failed."""

    def cancel(self, study_id: str) -> None:
        """Cancel a study that did not finish (releases its workflow); no-op when it ended."""

    def set_min_unseen_steps(self, study_id: str, steps: int) -> int:
        """Set the study's "Min unseen steps for a re-run" if it has none; the stored value."""


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


REGISTERED_SETUP = "typestrict_pipeline.study.setups:registered_workflow"
"""The setup whose dataset a tick can read (a registered workflow on a named dataset)."""


def data_end_from_tables(
    tables: Mapping[str, Any], *, horizon: dt.timedelta, step: dt.timedelta
) -> dt.datetime | None:
    """End (exclusive) of the decision steps whose outcome is known, from point-in-time tables.

    A decision at ``t`` is scored by what happened by ``t + horizon``, which is known once a row
    known at or after ``t + horizon`` exists, and is told by a row about ``t`` or later (a row
    about an earlier time says nothing of what happened after ``t``). Per table, the last such
    ``t`` is the earlier of ``K − horizon`` (``K`` its latest knowledge time) and ``E`` (the
    latest time a row is about); over the tables, the earliest, and the end is one step after it.
    None for no table or an empty one. Without ``E``, one late correction about an old day, known
    a month after the last row, counted as a month of new steps: a schedule fired a re-run whose
    holdout had no outcome to score, and the failed re-run stopped the schedule for good ("The
    previous study in the lineage did not finish").

    >>> from typestrict_pipeline.backtest.workflows.weather import load_seattle_weather
    >>> day = dt.timedelta(days=1)
    >>> data_end_from_tables({"weather": load_seattle_weather()}, horizon=day, step=day).date()
    datetime.date(2016, 1, 1)
    """
    lasts: list[dt.datetime] = [min(t.last_known - horizon, t.last_event) for t in tables.values() if len(t)]
    if not lasts or len(lasts) != len(tables):
        return None
    return min(lasts) + step


def dataset_data_end(config: Mapping[str, Any], step: dt.timedelta) -> dt.datetime | None:
    """The data end of a study's backend configuration when its data can be read, else None.

    Readable: ``{"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow",
    "setup_args": {"workflow": W, "dataset": D, ...}}``, the workflow's own tables of dataset
    ``D``, re-read when its files changed (so rows appended since the last tick count; a tick
    where nothing changed costs one ``stat`` per table file).
    """
    if readable_dataset(config) is None:
        return None
    args = config["setup_args"]
    from typestrict_pipeline.backtest.workflows import default_registry, load_dataset

    wf = default_registry().get(str(args["workflow"]), args.get("version_id"))
    data = load_dataset(str(args["dataset"]))
    tables = {name: data[name] for name in wf.tables if name in data}
    if len(tables) != len(wf.tables):
        return None
    return data_end_from_tables(tables, horizon=wf.horizon, step=step)


def readable_dataset(config: Mapping[str, Any]) -> str | None:
    """The named dataset a study's backend configuration replays, when a tick can read it.

    >>> readable_dataset({"backend": "engine", "setup": REGISTERED_SETUP,
    ...                   "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_live"}})
    'seattle_live'
    >>> readable_dataset({"backend": "regime-shift"}) is None
    True
    """
    if config.get("backend") != "engine" or config.get("setup") != REGISTERED_SETUP:
        return None
    args = config.get("setup_args") or {}
    if not isinstance(args, Mapping) or "workflow" not in args or "dataset" not in args:
        return None
    return str(args["dataset"])


def data_source_of(config: Mapping[str, Any]) -> DataSource:
    """The data source a study's backend configuration replays.

    >>> data_source_of({"backend": "engine", "setup": REGISTERED_SETUP,
    ...                 "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_weather"}}).kind
    <DataKind.BUILT_IN: 'built-in'>
    >>> data_source_of({"backend": "regime-shift"}).kind
    <DataKind.SIGNAL: 'signal'>
    """
    name = readable_dataset(config)
    if name is None:
        return DataSource(DataKind.SIGNAL)
    from typestrict_pipeline.backtest.workflows import DATASETS

    return DataSource(DataKind.BUILT_IN if name in DATASETS else DataKind.REGISTERED, name)


def datasets_read_by(engine: Engine, workspace_id: str, workflow_id: str) -> list[str]:
    """The datasets the studies of a workflow read themselves (sorted; empty when none does)."""
    with session_scope(engine) as session:
        configs = session.execute(
            select(StudyRow.config_json).where(StudyRow.workspace == workspace_id, StudyRow.workflow == workflow_id)
        ).scalars().all()
    found = {readable_dataset(dict((c or {}).get("backend", {}))) for c in configs}
    return sorted(d for d in found if d is not None)


def record_data_end(engine: Engine, workspace_id: str, workflow_id: str, data_end: dt.datetime, *,
                    now: dt.datetime | None = None) -> dt.datetime:
    """Record that outcomes are known for every decision step before ``data_end`` (never moves
    back); the data end recorded now (``data_end``, or the later one recorded before).

    Raises:
        InputError: a naive time; a time after ``now`` (an outcome is not known before it happens,
            and the recorded end never moves back: a typo such as 2199 was kept for good, and every
            tick counted steps up to it as unseen); or the workflow's studies read a dataset
            themselves (then the signal cannot apply: the data is the truth), naming the command
            that adds rows.
    """
    if data_end.tzinfo is None:
        raise InputError("an aware UTC time", repr(data_end), "pass e.g. datetime(2015, 6, 1, tzinfo=UTC)")
    at = now or utcnow()
    if data_end > at:
        raise InputError(
            f"a data end at or before now ({at.astimezone(dt.UTC).isoformat()})",
            data_end.astimezone(dt.UTC).isoformat(),
            "record it once the outcomes are known: a recorded data end never moves back, and a later "
            "one would let a re-run score steps whose outcome is not known yet",
        )
    readable = datasets_read_by(engine, workspace_id, workflow_id)
    if readable:
        from typestrict_pipeline.backtest.workflows import DATASETS

        own = [d for d in readable if d not in DATASETS]
        todo = (f"add the rows to the dataset instead: typestrict data append {own[0]} --table TABLE FILE.csv; "
                "the next tick reads them" if own else
                "a built-in dataset never grows: register your own (typestrict data register NAME --workflow "
                f"{workflow_id} --table TABLE=FILE.csv), create the study on it, and append rows to it")
        raise InputError(
            "a workflow whose data a tick cannot read (a synthetic workflow, a setup of your own)",
            f"workflow {workflow_id!r} of workspace {workspace_id!r}, whose studies read dataset "
            f"{', '.join(repr(d) for d in readable)} themselves (a recorded signal would be ignored)",
            todo,
        )
    with session_scope(engine) as session:
        row = session.get(DataEndRow, (workspace_id, workflow_id), with_for_update=True)
        if row is None:
            session.add(DataEndRow(workspace_id=workspace_id, workflow_id=workflow_id,
                                   data_end=data_end, updated_at=utcnow()))
            return data_end
        if data_end > row.data_end:
            row.data_end = data_end
            row.updated_at = utcnow()
        recorded: dt.datetime = row.data_end
        return recorded if recorded.tzinfo is not None else recorded.replace(tzinfo=dt.UTC)


def recorded_data_end(engine: Engine, workspace_id: str, workflow_id: str) -> dt.datetime | None:
    """The recorded data end of a workflow, or None when no arrival was ever recorded."""
    with session_scope(engine) as session:
        row = session.get(DataEndRow, (workspace_id, workflow_id))
        return None if row is None else row.data_end


BackendFor = Callable[[StudyRow], StudyBackend]
BusyCheck = Callable[[str, str], bool]


def default_backend_for(row: StudyRow) -> StudyBackend:
    """The backend a study's stored configuration describes.

    ``{"backend": "regime-shift", ...}`` is this area's synthetic workflow
    (:mod:`typestrict_pipeline.reruns.synthetic`); everything else is the studies area's
    (``synthetic``, or ``engine`` on a real workflow setup such as the Seattle weather one).
    """
    from typestrict_pipeline.reruns.synthetic import regime_from_config
    from typestrict_pipeline.study.backends import backend_from_config

    config = dict(row.config_json.get("backend", {}))
    if config.get("backend") == "regime-shift":
        return regime_from_config(config)
    return backend_from_config(config)


def backtest_running(engine: Engine) -> BusyCheck:
    """``(workspace, workflow) -> bool``: a study or a plain backtest of the workflow is running
    in a live process (the dead ones are ended first:
    :func:`typestrict_pipeline.lifecycle.reaper.workflow_busy`)."""
    from typestrict_pipeline.lifecycle.reaper import workflow_busy

    def busy(workspace_id: str, workflow_id: str) -> bool:
        return workflow_busy(engine, workspace_id, workflow_id) is not None

    return busy


class StoreStudies:
    """:class:`StudiesPort` on the studies area's store and its local runner.

    Args:
        engine: the store (the same database as the studies area).
        backend_for: the backend that runs a study's windows (the backtest engine for a real
            workflow; :class:`~typestrict_pipeline.study.runner.SyntheticBackend` in tests).
        backtest_in_flight: another check for work in flight on a workflow
            ``(workspace, workflow) -> bool``; studies and backtests of the store in a live
            process are always checked (:func:`~typestrict_pipeline.lifecycle.reaper.workflow_busy`).
        max_workers: threads of the local runner.
    """

    def __init__(
        self,
        engine: Engine,
        backend_for: BackendFor = default_backend_for,
        *,
        backtest_in_flight: BusyCheck | None = None,
        max_workers: int = 2,
    ) -> None:
        self.engine = engine
        self.backend_for = backend_for
        self.backtest_in_flight = backtest_in_flight or (lambda workspace_id, workflow_id: False)
        self.max_workers = max_workers

    def get(self, study_id: str) -> StudyFacts | None:
        try:
            key = int(study_id)
        except ValueError:
            return None
        with session_scope(self.engine) as session:
            row = session.get(StudyRow, key)
            if row is None:
                return None
            layout = FoldLayout.from_json(row.layout_json)
            winner = None if row.winner_candidate_id is None else session.get(CandidateRow, row.winner_candidate_id)
            return StudyFacts(
                study_id=str(row.id),
                workspace_id=row.workspace,
                workflow_id=row.workflow,
                state=row.state,
                budget_micro_usd=row.budget_micro,
                winner_key=None if winner is None else candidate_key(winner.params_json, winner.prompts_json),
                winner_label=None if winner is None else winner.label,
                winner_params={} if winner is None else dict(winner.params_json),
                winner_prompts={} if winner is None else dict(winner.prompts_json),
                holdout_start=row.holdout_start,
                holdout_end=row.holdout_end,
                holdout_score=row.holdout_score,
                # With a baseline scored on the same holdout steps, the SE the lineage uses is the
                # Newey–West SE of the per-step difference winner − baseline; without one (older
                # studies, baseline not affordable) the SE of the winner's holdout mean.
                holdout_se=(row.holdout_diff_se if row.holdout_baseline is not None
                            else row.holdout_se),
                baseline_score=row.holdout_baseline,
                origin=layout.folds[0].tune.start if layout.folds else layout.holdout.start,
                step=layout.step,
                embargo_steps=layout.embargo_steps,
                horizon_steps=layout.horizon_steps,
                min_unseen_steps=(row.min_unseen_steps if row.min_unseen_steps is not None
                                  else _positive_int(row.config_json.get("min_unseen_steps"))),
            )

    def workflow_in_flight(self, workspace_id: str, workflow_id: str) -> bool:
        from typestrict_pipeline.lifecycle.reaper import workflow_busy

        # Liveness, not hope: a study or backtest whose process died is ended first and never
        # counts as in flight.
        if workflow_busy(self.engine, workspace_id, workflow_id) is not None:
            return True
        return bool(self.backtest_in_flight(workspace_id, workflow_id))

    def data_end(self, facts: StudyFacts) -> dt.datetime | None:
        """From the root study's dataset when it can be read, else the recorded signal."""
        with session_scope(self.engine) as session:
            row = session.get(StudyRow, int(facts.study_id))
            config = {} if row is None else dict(row.config_json.get("backend", {}))
        from_data = dataset_data_end(config, facts.step)
        if from_data is not None:
            return from_data
        return recorded_data_end(self.engine, facts.workspace_id, facts.workflow_id)

    def data_source(self, facts: StudyFacts) -> DataSource:
        with session_scope(self.engine) as session:
            row = session.get(StudyRow, int(facts.study_id))
            config = {} if row is None else dict(row.config_json.get("backend", {}))
        return data_source_of(config)

    def create_rerun(self, spec: RerunSpec) -> str:
        with session_scope(self.engine) as session:
            parent = session.get(StudyRow, int(spec.parent.study_id))
            root = session.get(StudyRow, int(spec.root.study_id))
            if parent is None or root is None:
                raise InputError("an existing parent and root study", f"{spec.parent.study_id}, {spec.root.study_id}",
                                 "enable the schedule again from a finished study")
            root_layout = FoldLayout.from_json(root.layout_json)
            root_space = SearchSpace.from_json(root.space_json)
            workflow, version = parent.workflow, parent.workflow_version
            workspace = parent.workspace
            config = dict(parent.config_json)
            max_candidates = root.max_candidates
            # The re-run copies the lineage's "Min unseen steps for a re-run".
            min_unseen = (root.min_unseen_steps if root.min_unseen_steps is not None
                          else _positive_int(root.config_json.get("min_unseen_steps")))
            max_total_steps = root.max_total_steps
            last = None
            if root.cost_per_step_num is not None and root.cost_per_step_den:
                last = repo.LastBacktest(cost_micro=int(root.cost_per_step_num), steps=int(root.cost_per_step_den))
        fold = root_layout.folds[0]
        layout = plan_folds(
            start=fold.tune.start,
            end=spec.holdout_end,
            step=root_layout.step,
            n_folds=len(root_layout.folds),
            tune_steps=fold.tune.steps,
            eval_steps=fold.eval.steps,
            holdout_steps=spec.holdout_steps,
            horizon_steps=root_layout.horizon_steps,
            gap_steps=root_layout.gap_steps,
            embargo_steps=root_layout.embargo_steps,
            earliest_holdout_start=spec.holdout_start,
        )
        previous_winner = {
            "params": dict(spec.parent.winner_params),
            "prompts": dict(spec.parent.winner_prompts),
            "origin": "previous winner",
        }
        space = SearchSpace(
            grid=root_space.grid,
            random=root_space.random,
            random_draws=root_space.random_draws,
            seed=root_space.seed,
            prompts=root_space.prompts,
            base_params=root_space.base_params,
            extra=(previous_winner, *root_space.extra),
        )
        per_candidate = layout.search_steps_per_candidate
        limits = StudyLimits(
            max_candidates=None if max_candidates is None else max_candidates + 1,
            max_total_steps=None if max_total_steps is None else max_total_steps + per_candidate,
            budget_micro=spec.budget_micro_usd,
        )
        config["rerun_of"] = spec.parent.study_id
        config["lineage_root"] = spec.root.study_id
        study_id = repo.create_study(
            self.engine,
            workspace=workspace,
            workflow=workflow,
            workflow_version=version,
            space=space,
            layout=layout,
            limits=limits,
            config=config,
            last_backtest=last,
            name=spec.name,
            min_unseen_steps=min_unseen,
        )
        return str(study_id)

    def run(self, study_id: str) -> None:
        with session_scope(self.engine) as session:
            row = repo.get_study(session, int(study_id))
            session.expunge(row)
        run_study_local(self.engine, int(study_id), self.backend_for(row), max_workers=self.max_workers)

    def mark_failed(self, study_id: str, error: str) -> None:
        repo.mark_failed(self.engine, int(study_id), error)

    def cancel(self, study_id: str) -> None:
        try:
            repo.cancel_study(self.engine, int(study_id))
        except NotFoundError:
            return

    def set_min_unseen_steps(self, study_id: str, steps: int) -> int:
        return repo.set_min_unseen_steps(self.engine, int(study_id), steps)


def study_ids(engine: Engine, workspace_id: str) -> list[str]:
    """Ids of the studies of a workspace (newest first), for listings."""
    with session_scope(engine) as session:
        ids = session.execute(
            select(StudyRow.id).where(StudyRow.workspace == workspace_id).order_by(StudyRow.id.desc())
        ).scalars().all()
    return [str(i) for i in ids]
