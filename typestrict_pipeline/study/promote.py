"""Promote a study's winner: through the evaluation gate, then the normal activation path.

* **The evaluation gate.** A winner may replace the active version only if it beats the active
  version on the same holdout window (same steps, same data, same scorer) by a one-sided 95%
  lower confidence bound: ``mean(w_t − a_t) − z₀.₉₅·SE > 0`` with the Newey–West SE of the
  per-step difference (the leaderboard's estimator), on the holdout steps after the measured
  decorrelation span (``inference.holdout_test``), with the persistence measured over the
  study's candidates carried into the SE. Point estimates alone never promote; neither does a
  winner whose search period was unstable (a leader's edge changed: ``study.stability``) or
  whose difference from the active version changed during the holdout. The
  active version is run once on the holdout for this comparison (a metered backtest, not part
  of the study's budget). No holdout score (budget reached, cancelled) means no promotion.
* **A winner that changed prompts** is a new workflow version: it is activated with the backtest
  area's ``activate_version`` (the normal activation path; the active version of the workflow in
  the workspace becomes the winner's).
* **A winner that changed only parameters** has nothing to activate: its parameters are written
  to the workflow's configuration in this workspace (``study_workflow_params``), read with
  :func:`workflow_params`; ``typestrict_pipeline.backtest.service.active_workflow`` merges them
  over the active version's defaults, so live runs and later backtests use them. A later
  promotion that activates a version (its prompts changed) carries its own parameters and
  clears this row.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine, select

from typestrict_pipeline.errors import ConflictError, NotEnoughDataError
from typestrict_pipeline.store import session_scope, utcnow
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.dependence import Dependence
from typestrict_pipeline.study.folds import FoldLayout
from typestrict_pipeline.study.inference import holdout_skip, holdout_test
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.runner import CandidateSpec, StudyBackend
from typestrict_pipeline.study.stability import Stability
from typestrict_pipeline.study.tables import (
    CandidateRow,
    RunRow,
    StudyState,
    WindowKind,
    WorkflowParamsRow,
)


class PromotionKind(enum.StrEnum):
    """What promoting did."""

    ACTIVATED_VERSION = "ACTIVATED_VERSION"
    APPLIED_PARAMETERS = "APPLIED_PARAMETERS"


@dataclass(frozen=True)
class GateResult:
    """The evaluation gate: the winner's holdout score against the active version's.

    ``lower_bound`` is the one-sided 95% lower confidence bound of winner − active per step
    (None when it could not be computed; then the gate refuses).
    """

    passed: bool
    winner_score: float
    active_score: float | None
    message: str
    lower_bound: float | None = None


@dataclass(frozen=True)
class PromotionResult:
    """What promoting a winner did."""

    kind: PromotionKind
    gate: GateResult
    params: Mapping[str, Any]
    prompts: Mapping[str, str]
    version_id: str | None
    message: str


def evaluation_gate(engine: Engine, study_id: int, backend: StudyBackend,
                    active: CandidateSpec) -> GateResult:
    """Score ``active`` (the active version) on the study's holdout; compare with the winner's."""
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        state = StudyState(study.state)
        if state not in (StudyState.FINISHED, StudyState.BUDGET_REACHED):
            raise ConflictError(f"expected a finished study to promote from, got study {study_id} "
                                f"in state {state.label}. Wait for it to finish.")
        if study.holdout_score is None:
            why = study.holdout_missing_reason or "the holdout was not scored"
            raise ConflictError(f"expected a holdout score for the winner of study {study_id}, got "
                                f"none ({why}). Raise the budget and run the study again.")
        winner_score = float(study.holdout_score)
        layout = FoldLayout.from_json(study.layout_json)
        winner_id = study.winner_candidate_id
        run = s.execute(select(RunRow).where(
            RunRow.study_id == study_id, RunRow.candidate_id == winner_id,
            RunRow.fold == repo.HOLDOUT_FOLD, RunRow.window == WindowKind.HOLDOUT.value,
        )).scalar_one_or_none()
        won = {str(t): float(v) for t, v in ((run.scores_json or []) if run else [])}
    board = load_leaderboard(engine, study_id)
    skip = holdout_skip(board.decorrelation_span, layout.horizon_steps, layout.embargo_steps)
    h = layout.holdout
    out = backend.run_window(active, h, WindowKind.HOLDOUT, seal_at=None,
                             should_stop=lambda cost, steps: False)
    act = {str(t): float(v) for t, v in out.scores}
    if not act:
        return GateResult(False, winner_score, None,
                          "The active version has no score on the holdout window; not promoted.")
    joint = board.joint
    labels = {str(r.candidate_id): f"#{r.index}" for r in board.rows}
    return gate_decision(won, act, skip=skip, horizon=layout.horizon_steps,
                         embargo=layout.embargo_steps,
                         dependence=joint.dependence if joint is not None else None,
                         stability=joint.stability if joint is not None else None,
                         labels=labels, winner_score=winner_score)


def gate_decision(winner: Mapping[str, float], active: Mapping[str, float], *, skip: int,
                  horizon: int = 1, embargo: int = 1, dependence: Dependence | None = None,
                  stability: Stability | None = None, labels: Mapping[str, str] | None = None,
                  winner_score: float | None = None) -> GateResult:
    """The gate's rule on the two holdout series (pure: the product and the calibration battery
    call it alike).

    Refuses when the search's leaders were unstable (``stability``), when fewer than 2 holdout
    steps remain after ``skip``, when the difference's mean changed during the holdout, and
    when the one-sided 95% lower bound of winner − active (``holdout_test`` with the carried
    ``dependence``) is at or below 0.

    >>> w = {f"{t:03d}": 0.6 + 0.01 * (t % 3) for t in range(40)}
    >>> a = {f"{t:03d}": 0.5 for t in range(40)}
    >>> gate_decision(w, a, skip=2).passed
    True
    """
    won_score = winner_score if winner_score is not None else float(np.mean(list(winner.values())))
    active_score = float(np.mean(list(active.values()))) if active else None
    if stability is not None and not stability.stable:
        return GateResult(False, won_score, active_score, (
            "Not promoted: " + stability.text(dict(labels or {})) + ". A winner picked over a "
            "period whose edges came and went has not shown that it wins in the next one: the "
            "active version stays. Re-run the study on new data (a schedule does it) and "
            "promote a winner that stays ahead."))
    try:
        test = holdout_test(winner, active, skip=skip, horizon=horizon, dependence=dependence)
    except NotEnoughDataError as exc:
        return GateResult(False, won_score, active_score, f"Not promoted: {exc}")
    detail = (f"winner − active {test.diff:+.4f} ± {test.se:.4f} (Newey–West SE) on {test.steps} "
              f"holdout steps (first {test.skipped} left out: scores stay correlated for "
              f"{skip + embargo} steps), one-sided 95% lower bound "
              f"{test.lower_bound:+.4f}")
    scores = f"holdout scores {won_score:.4f} vs {active_score:.4f}"
    if not test.stable:
        return GateResult(False, won_score, active_score, (
            f"Not promoted: the winner's difference from the active version changed during the "
            f"holdout (self-normalised change-point statistic {test.change_statistic:.1f} above "
            f"its 5% critical value 40.1; {detail}): a lead that came and went is not a win. The "
            "active version stays; keep collecting data."), test.lower_bound)
    if test.confirmed:
        return GateResult(True, won_score, active_score,
                          f"Gate passed: the winner beats the active version on the same holdout "
                          f"window ({detail}; {scores}).", test.lower_bound)
    return GateResult(False, won_score, active_score,
                      f"expected the winner to beat the active version on the same window by a "
                      f"one-sided 95% lower bound above 0, got lower bound {test.lower_bound:+.4f} "
                      f"({detail}; {scores}). The "
                      "active version stays; keep collecting data (a longer holdout) or widen "
                      "the search.", test.lower_bound)


def promote_winner(
    engine: Engine,
    study_id: int,
    backend: StudyBackend,
    *,
    active: CandidateSpec | None = None,
    activate: Any = None,
) -> PromotionResult:
    """Promote the winner of ``study_id`` (see the module docstring).

    Args:
        engine: the store.
        study_id: a finished study with a holdout score.
        backend: the study's backend (runs the active version on the holdout for the gate).
        active: the active version as a candidate (default: the studied version's defaults).
        activate: ``activate(workflow_variant)`` for prompt changes; default: the backtest area's
            ``activate_version`` on the engine backend's workflow.

    Raises:
        ConflictError: the study is not finished, has no holdout score, or the gate refused.
    """
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        if study.winner_candidate_id is None:
            raise ConflictError(f"expected a winner in study {study_id}, got none. "
                                "Run the study to the end first.")
        cand = s.get(CandidateRow, study.winner_candidate_id)
        assert cand is not None
        params, prompts = dict(cand.params_json), dict(cand.prompts_json)
        workspace, workflow = study.workspace, study.workflow
    gate = evaluation_gate(engine, study_id, backend,
                           active or CandidateSpec(0, 0, {}, {}))
    if not gate.passed:
        raise ConflictError(gate.message)
    prompts = {k: v for k, v in prompts.items() if _base_prompts(backend).get(k) != v}
    if prompts:
        variant = _activate_prompts(engine, backend, workspace, params, prompts, activate)
        with session_scope(engine) as s:  # the activated version carries the winner's parameters
            old = s.get(WorkflowParamsRow, (workspace, workflow))
            if old is not None:
                s.delete(old)
        return PromotionResult(PromotionKind.ACTIVATED_VERSION, gate, params, prompts, variant,
                               f"{gate.message} Activated version {variant} of {workflow}.")
    with session_scope(engine) as s:
        row = s.get(WorkflowParamsRow, (workspace, workflow))
        if row is None:
            row = WorkflowParamsRow(workspace=workspace, workflow=workflow)
            s.add(row)
        row.params_json = params
        row.study_id = study_id
        row.applied_at = utcnow()
    return PromotionResult(PromotionKind.APPLIED_PARAMETERS, gate, params, prompts, None,
                           f"{gate.message} The winner changed only parameters: nothing to "
                           f"activate; applied {params} to the configuration of {workflow}.")


def _base_prompts(backend: StudyBackend) -> dict[str, str]:
    from typestrict_pipeline.study.backends import EngineBackend

    if isinstance(backend, EngineBackend):
        return dict(backend.setup.workflow.prompts)
    return {}


def _activate_prompts(engine: Engine, backend: StudyBackend, workspace: str,
                      params: Mapping[str, Any], prompts: Mapping[str, str], activate: Any) -> str:
    from typestrict_pipeline.study.backends import EngineBackend

    if activate is not None:
        return str(activate(params, prompts))
    if not isinstance(backend, EngineBackend):
        raise ConflictError("expected a study on a real workflow to activate a prompt change, got "
                            "a synthetic one. Promote winners of workflow studies only.")
    from typestrict_pipeline.backtest.store import activate_version

    variant = backend.setup.workflow.variant(params=params or None, prompts=prompts)
    activate_version(engine, workspace=workspace, workflow=variant)
    return str(variant.version_id)


def workflow_params(engine: Engine, workspace: str, workflow: str) -> dict[str, Any]:
    """Parameters a promoted parameters-only winner applied to ``workflow`` in ``workspace``."""
    with session_scope(engine) as s:
        row = s.get(WorkflowParamsRow, (workspace, workflow))
        return {} if row is None else dict(row.params_json)
