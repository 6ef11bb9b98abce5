"""Promote a study's winner: through the evaluation gate, then the normal activation path.

* **The evaluation gate.** A winner may replace the active version only if it beats the active
  version on the same holdout window (same steps, same data, same scorer) by a one-sided 95%
  lower confidence bound: ``mean(w_t − a_t) − z₀.₉₅·SE > 0`` with the Newey–West SE of the
  per-step difference (the leaderboard's estimator), on the holdout steps after the measured
  decorrelation span (``inference.holdout_test``), with the persistence measured over the
  study's candidates carried into the SE. Point estimates alone never promote; neither does a
  winner whose search period was unstable (a leader's edge changed: ``study.stability``) or
  whose difference from the active version changed during the holdout. The active version's
  holdout scores are the study's own **baseline holdout run** (``runner._score_baseline``: the
  studied version's default parameters and prompts on the same holdout, already run, costed and
  charged to the study), read from the store: promoting calls no model. Only a study without a
  complete baseline run (made before the baseline existed, or whose baseline run was cut) runs
  the active version once on the holdout for the comparison (a metered backtest outside the
  study's budget), and only where a backend is given (the operator's CLI); the API and the
  console refuse such a study with how to promote it. No holdout score (budget reached,
  cancelled) means no promotion.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from typestrict_pipeline.errors import ConflictError, NotEnoughDataError
from typestrict_pipeline.store import session_scope, utcnow
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.dependence import Dependence
from typestrict_pipeline.study.folds import FoldLayout
from typestrict_pipeline.study.inference import holdout_skip, holdout_test
from typestrict_pipeline.study.leaderboard import load_leaderboard, steps_text
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


def stored_baseline_scores(engine: Engine, study_id: int) -> dict[str, float] | None:
    """The per-step holdout scores of the study's baseline run (the studied version's default
    parameters and prompts, ``runner.BASELINE``), or None when the study has no complete one
    (a study from before the baseline was scored on the holdout, or a baseline run cut short)."""
    from typestrict_pipeline.study.tables import RunState

    with session_scope(engine) as s:
        run = s.execute(select(RunRow).where(
            RunRow.study_id == study_id, RunRow.candidate_id == repo.BASELINE_CANDIDATE_ID,
            RunRow.fold == repo.HOLDOUT_FOLD, RunRow.window == WindowKind.HOLDOUT.value,
        )).scalar_one_or_none()
        if run is None or run.state != RunState.DONE.value:
            return None
        return {str(t): float(v) for t, v in (run.scores_json or [])}


def no_stored_baseline(study_id: int) -> ConflictError:
    """Why a study without a stored baseline run cannot be promoted where no model may be called
    (the API, the console)."""
    return ConflictError(
        f"expected the baseline's holdout run of study {study_id} (the active version on the same "
        "holdout window, scored with the study) to compare its winner with, got none: the study "
        "was made before the baseline was scored, or its baseline run was cut short. Run the study "
        f"again, or ask the operator to promote it (typestrict study promote {study_id} runs the "
        "active version on the holdout first)")


def evaluation_gate(engine: Engine, study_id: int, backend: StudyBackend | None = None,
                    active: CandidateSpec | None = None) -> GateResult:
    """Compare the winner's holdout scores with the active version's on the same holdout.

    The active version's scores are the study's stored baseline holdout run
    (:func:`stored_baseline_scores`) when it is complete and ``active`` is None (the default
    version: the baseline's spec). Otherwise ``active`` (default: the studied version's default
    parameters and prompts) is run on the holdout with ``backend``.

    Raises:
        ConflictError: the study is not finished or has no holdout score; or it has no stored
            baseline run and no ``backend`` is given (:func:`no_stored_baseline`).
    """
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
    stored = stored_baseline_scores(engine, study_id) if active is None else None
    if stored is not None:
        act = stored
    else:
        if backend is None:
            raise no_stored_baseline(study_id)
        out = backend.run_window(active or CandidateSpec(0, 0, {}, {}), layout.holdout,
                                 WindowKind.HOLDOUT, seal_at=None,
                                 should_stop=lambda cost, steps: False)
        act = {str(t): float(v) for t, v in out.scores}
    board = load_leaderboard(engine, study_id)
    skip = holdout_skip(board.decorrelation_span, layout.horizon_steps, layout.embargo_steps)
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
              f"{steps_text(skip + embargo)}), one-sided 95% lower bound "
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
    backend: StudyBackend | None = None,
    *,
    active: CandidateSpec | None = None,
    activate: Any = None,
    build_backend: Callable[[], StudyBackend] | None = None,
) -> PromotionResult:
    """Promote the winner of ``study_id`` (see the module docstring): the one implementation the
    CLI, the API and the console call.

    Args:
        engine: the store.
        study_id: a finished study with a holdout score.
        backend: the study's backend, if the caller has one. Without a complete stored baseline
            run (or with ``active``), the gate runs the active version on the holdout with it.
        active: the active version as a candidate (default: the studied version's defaults,
            whose holdout scores the study stored with its baseline run).
        activate: ``activate(params, prompts)`` for prompt changes; default: the backtest area's
            ``activate_version`` on the studied workflow's variant.
        build_backend: builds the backend only if it is needed (the CLI:
            ``lambda: study_backend(engine, study_id)``). With neither ``backend`` nor
            ``build_backend`` (the API, the console) no model is ever called: a study without
            a stored baseline run is refused (:func:`no_stored_baseline`), and a prompt change
            is activated on the registered workflow the study names.

    Raises:
        ConflictError: the study is not finished, has no holdout score, the gate refused, or
            (without a backend) the active version's holdout scores or the studied workflow
            cannot be had without building the study's backend.
    """
    made: list[StudyBackend] = [] if backend is None else [backend]

    def the_backend() -> StudyBackend | None:
        if not made and build_backend is not None:
            made.append(build_backend())
        return made[0] if made else None

    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        if study.winner_candidate_id is None:
            raise ConflictError(f"expected a winner in study {study_id}, got none. "
                                "Run the study to the end first.")
        cand = s.get(CandidateRow, study.winner_candidate_id)
        assert cand is not None
        params, prompts = dict(cand.params_json), dict(cand.prompts_json)
        workspace, workflow = study.workspace, study.workflow
        config = dict(study.config_json.get("backend", {}))
    needs_run = active is not None or stored_baseline_scores(engine, study_id) is None
    gate = evaluation_gate(engine, study_id, the_backend() if needs_run else None, active)
    if not gate.passed:
        raise ConflictError(gate.message)
    studied = _studied_workflow(study_id, config, the_backend) if prompts else None
    prompts = _changed_prompts(studied, prompts)
    if prompts:
        variant = _activate_prompts(engine, studied, (workspace, workflow), params, prompts, activate)
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


def promoted_kind(result: PromotionResult) -> Literal["version", "parameters"]:
    """What promoting did, as the CLI's ``--json`` and the API's answer say it: ``"version"``
    (a version was activated) or ``"parameters"`` (parameters applied to the configuration)."""
    return "version" if result.kind is PromotionKind.ACTIVATED_VERSION else "parameters"


REGISTERED_SETUP = "typestrict_pipeline.study.setups:registered_workflow"
"""The setup of a study on a workflow of the code location's registry (the CLI's and the API's
studies): its workflow is read from the registry, with no data loaded and no model server."""


def _studied_workflow(study_id: int, config: Mapping[str, Any],
                      the_backend: Callable[[], StudyBackend | None]) -> Any:
    """The workflow version a study ran (``backtest.workflow.Workflow``), or None for a synthetic
    study: from the registry for a registered workflow, else from the study's backend (built only
    where the caller allows it)."""
    from typestrict_pipeline.study.backends import EngineBackend

    if config.get("backend", "synthetic") == "synthetic":
        return None
    args = config.get("setup_args")
    if config.get("setup") == REGISTERED_SETUP and isinstance(args, Mapping):
        from typestrict_pipeline.backtest.workflows import default_registry
        from typestrict_pipeline.errors import NotFoundError

        try:
            return default_registry().get(str(args["workflow"]), args.get("version_id"))
        except NotFoundError as exc:  # the study exists: its version's code is what is missing
            raise ConflictError(str(exc)) from None
    backend = the_backend()
    if backend is None:
        raise ConflictError(
            f"expected study {study_id} on a workflow of this deployment's registry to activate "
            "its winner's prompts, got a study on the operator's own setup. Ask the operator to "
            f"promote it (typestrict study promote {study_id})")
    return backend.setup.workflow if isinstance(backend, EngineBackend) else None


def _changed_prompts(studied: Any, prompts: Mapping[str, str]) -> dict[str, str]:
    """The winner's prompts that differ from the studied version's (all of them for a synthetic
    study, ``studied`` None): what makes the winner a new version to activate.

    >>> _changed_prompts(None, {"forecast": "p"})
    {'forecast': 'p'}
    """
    base = dict(studied.prompts) if studied is not None else {}
    return {k: v for k, v in prompts.items() if base.get(k) != v}


def _activate_prompts(engine: Engine, studied: Any, where: tuple[str, str],
                      params: Mapping[str, Any], prompts: Mapping[str, str], activate: Any) -> str:
    """Activate the winner's version of the studied workflow in ``where`` (workspace, workflow)
    and, in the same transaction, clear the parameters a promotion applied there before (the
    activated version carries the winner's own): both land or neither does."""
    workspace, workflow = where

    def clear_params(s: Session) -> None:
        old = s.get(WorkflowParamsRow, (workspace, workflow))
        if old is not None:
            s.delete(old)

    if activate is not None:  # the caller's own activation: the parameters cleared after it
        variant_id = str(activate(params, prompts))
        with session_scope(engine) as s:
            clear_params(s)
        return variant_id
    if studied is None:
        raise ConflictError("expected a study on a real workflow to activate a prompt change, got "
                            "a synthetic one. Promote winners of workflow studies only.")
    from typestrict_pipeline.backtest.store import activate_version

    variant = studied.variant(params=params or None, prompts=prompts)
    activate_version(engine, workspace=workspace, workflow=variant, within=clear_params)
    return str(variant.version_id)


def promotion_shown(engine: Engine, study_id: int) -> str | None:
    """What promoting this study's winner did, read back from the store for the page shown after
    it (the console's POST-redirect-GET): the gate's sentence (from the stored runs: no model is
    called) and what is in force now: the winner's parameters applied to the workflow's
    configuration by this study, or the winner's version active in the workspace. None when the
    gate does not pass on the stored runs or what the winner would have done is not in force
    (a later promotion replaced it)."""
    from typestrict_pipeline.backtest.store import active_version_id

    try:
        gate = evaluation_gate(engine, study_id)
    except ConflictError:
        return None
    if not gate.passed:
        return None
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        cand = s.get(CandidateRow, study.winner_candidate_id)
        if cand is None:
            return None
        params, prompts = dict(cand.params_json), dict(cand.prompts_json)
        workspace, workflow = study.workspace, study.workflow
        config = dict(study.config_json.get("backend", {}))
        applied = s.get(WorkflowParamsRow, (workspace, workflow))
        if applied is not None and applied.study_id == study_id and dict(applied.params_json) == params:
            return (f"{gate.message} The winner changed only parameters: nothing to activate; "
                    f"{params} apply to the configuration of {workflow} in this workspace.")
    if not prompts:
        return None
    try:
        studied = _studied_workflow(study_id, config, lambda: None)
    except ConflictError:
        return None
    if studied is None:
        return None
    changed = _changed_prompts(studied, prompts)
    if not changed:
        return None
    vid = str(studied.variant(params=params or None, prompts=changed).version_id)
    if active_version_id(engine, workspace=workspace, workflow=workflow) != vid:
        return None
    return f"{gate.message} Version {vid} of {workflow} is the active one in this workspace."


def workflow_params(engine: Engine, workspace: str, workflow: str) -> dict[str, Any]:
    """Parameters a promoted parameters-only winner applied to ``workflow`` in ``workspace``."""
    with session_scope(engine) as s:
        row = s.get(WorkflowParamsRow, (workspace, workflow))
        return {} if row is None else dict(row.params_json)
