"""Creating and running a study from one configuration (the entry point other areas use).

>>> cfg = StudyConfig(workspace="demo", workflow="wx", workflow_version="v1",
...     space=SearchSpace(grid={"skill": [0.5, 0.6]}), start=dt.datetime(2012, 1, 1, tzinfo=dt.UTC),
...     end=dt.datetime(2012, 7, 1, tzinfo=dt.UTC), step=dt.timedelta(days=1), n_folds=2,
...     tune_steps=20, eval_steps=20, holdout_steps=20, max_candidates=2, max_total_steps=1000)
>>> cfg.layout().holdout.steps, cfg.limits().budget_micro is None
(20, True)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.backends import backend_from_config
from typestrict_pipeline.study.folds import FoldLayout, plan_folds
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import StudyBackend, StudyOutcome, run_study_local
from typestrict_pipeline.study.space import Candidate, SearchSpace


@dataclass(frozen=True)
class StudyConfig:
    """Everything needed to create a study.

    ``earliest_holdout_start`` is the constraint a scheduled re-run sets: its holdout must be
    data that arrived after the previous study's holdout. ``min_unseen_steps`` is "Min unseen
    steps for a re-run": how many new steps a scheduled re-run of this study waits for (stored
    on the study; re-runs copy it; ``None`` when the study is not meant to be scheduled). ``backend`` is the JSON description
    of what runs the candidates (see :mod:`typestrict_pipeline.study.backends`).
    """

    workspace: str
    workflow: str
    workflow_version: str
    space: SearchSpace
    start: dt.datetime
    end: dt.datetime
    step: dt.timedelta
    n_folds: int
    tune_steps: int
    eval_steps: int
    holdout_steps: int
    max_candidates: int | None
    max_total_steps: int | None
    budget_micro: int | None = None
    horizon_steps: int = 1
    gap_steps: int | None = None
    embargo_steps: int | None = None
    earliest_holdout_start: dt.datetime | None = None
    backend: Mapping[str, Any] = field(default_factory=lambda: {"backend": "synthetic"})
    name: str | None = None
    min_unseen_steps: int | None = None

    def layout(self) -> FoldLayout:
        """The fold and holdout layout (raises when the data is too short)."""
        return plan_folds(start=self.start, end=self.end, step=self.step, n_folds=self.n_folds,
                          tune_steps=self.tune_steps, eval_steps=self.eval_steps,
                          holdout_steps=self.holdout_steps, horizon_steps=self.horizon_steps,
                          gap_steps=self.gap_steps, embargo_steps=self.embargo_steps,
                          earliest_holdout_start=self.earliest_holdout_start)

    def limits(self) -> StudyLimits:
        return StudyLimits(self.max_candidates, self.max_total_steps, self.budget_micro)


def lookup_last_backtest(engine: Engine, workspace: str, workflow: str,
                         version_id: str) -> repo.LastBacktest | None:
    """Cost and steps of the last completed backtest of this version in this workspace."""
    from typestrict_pipeline.backtest.store import last_completed_backtest

    last = last_completed_backtest(engine, workspace=workspace, workflow=workflow,
                                   version_id=version_id)
    if last is None or last.steps_run <= 0:
        return None
    return repo.LastBacktest(cost_micro=int(last.cost_micro_usd), steps=int(last.steps_run))


def create_study_from_config(engine: Engine, config: StudyConfig, *,
                             last_backtest: repo.LastBacktest | None = None) -> int:
    """Create a study (state ``PENDING``, workflow lock taken) from ``config``; returns its id.

    ``last_backtest`` defaults to the store's last completed backtest of the version.

    Raises:
        LimitError: missing limits, or a USD budget with no backtest to estimate from.
        ConflictError: a study is already in flight on the workflow.
        NotEnoughDataError: the layout does not fit (including "Not enough unseen data yet").
    """
    layout = config.layout()
    config.limits().validate()
    check_layout_data(config.backend, layout)
    last = last_backtest or lookup_last_backtest(engine, config.workspace, config.workflow,
                                                 config.workflow_version)
    return repo.create_study(
        engine, workspace=config.workspace, workflow=config.workflow,
        workflow_version=config.workflow_version, space=config.space, layout=layout,
        limits=config.limits(), config={"backend": dict(config.backend)},
        last_backtest=last, name=config.name, validate=candidate_validator(config.backend),
        min_unseen_steps=config.min_unseen_steps,
    )


def check_layout_data(backend: Mapping[str, Any], layout: FoldLayout) -> None:
    """For an engine backend: the study's windows, from its first tune window's first decision to
    its holdout's last, lie inside the data its workflow replays (the rule a backtest's range is
    held to, :func:`~typestrict_pipeline.backtest.engine.check_range_in_data`). A study whose
    ``end`` was past the data's was stored and launched, then failed at its first window, after
    the wait for its run.

    Raises:
        InputError: a window reaches outside the data; the message gives the range that is inside.
    """
    if backend.get("backend") != "engine":
        return
    from typestrict_pipeline.backtest.engine import check_range_in_data
    from typestrict_pipeline.study.backends import EngineBackend

    built = backend_from_config(backend)
    if not isinstance(built, EngineBackend):
        return
    first = min(f.tune.start for f in layout.folds) if layout.folds else layout.holdout.start
    check_range_in_data(built.setup.workflow, built.setup.data, start=first,
                        end=layout.holdout.end - layout.step)


def candidate_validator(backend: Mapping[str, Any]) -> Callable[[Candidate], str | None] | None:
    """For an engine backend: the workflow's own check of a candidate's parameters and prompts.
    For the synthetic workflow: its one parameter, ``skill``, is a finite number (a grid's
    ``nan`` is text and ``true`` a truth value: neither becomes a score).

    >>> from typestrict_pipeline.study.space import Candidate
    >>> one = lambda v: Candidate(0, {"skill": v}, {}, "grid")
    >>> check = candidate_validator({"backend": "synthetic"})
    >>> check(one(0.5)) is None, check(one("nan"))
    (True, "parameter 'skill' of the synthetic workflow: expected a number (like the default 0.5), got 'nan'. Pass a finite number.")
    """
    if backend.get("backend") == "synthetic":
        return _synthetic_check
    if backend.get("backend") != "engine":
        return None
    from typestrict_pipeline.errors import InputError
    from typestrict_pipeline.study.backends import EngineBackend

    built = backend_from_config(backend)
    if not isinstance(built, EngineBackend):
        return None
    workflow = built.setup.workflow

    def check(candidate: Candidate) -> str | None:
        try:
            workflow.resolve_params(dict(candidate.params))
            workflow.resolve_prompts(dict(candidate.prompts))
        except InputError as exc:
            return str(exc)
        return None

    return check


def _synthetic_check(candidate: Candidate) -> str | None:
    import math

    if "skill" not in candidate.params:
        return None
    v = candidate.params["skill"]
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return None
    return (f"parameter 'skill' of the synthetic workflow: expected a number (like the default 0.5), "
            f"got {v!r}. Pass a finite number.")


def study_backend(engine: Engine, study_id: int) -> StudyBackend:
    """The backend stored with a study."""
    from typestrict_pipeline.store import session_scope

    with session_scope(engine) as s:
        cfg = dict(repo.get_study(s, study_id).config_json.get("backend", {}))
    return backend_from_config(cfg)


def create_and_run_study(engine: Engine, config: StudyConfig, *, max_workers: int = 4,
                         last_backtest: repo.LastBacktest | None = None) -> StudyOutcome:
    """Create a study and run it to the end in this process (no Dagster): tests, re-runs, CLI."""
    sid = create_study_from_config(engine, config, last_backtest=last_backtest)
    return run_study_local(engine, sid, study_backend(engine, sid), max_workers=max_workers)
