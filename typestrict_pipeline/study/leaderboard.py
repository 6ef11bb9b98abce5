"""The leaderboard of a study: rows ranked by Adjusted, and its header (counts, luck, spend, holdout).

Shown in Dagster (the study's materialization metadata, as Markdown) and by
``typestrict study leaderboard STUDY_ID``; both render :func:`render_markdown`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from typestrict_pipeline.errors import NotEnoughDataError
from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.dependence import Dependence
from typestrict_pipeline.study.folds import FoldLayout, window_label
from typestrict_pipeline.study.inference import (
    HoldoutTest,
    JointInference,
    Pbo,
    decorrelation_span,
    holdout_skip,
    holdout_test,
    joint_inference,
    pbo_cscv,
)
from typestrict_pipeline.study.limits import estimate_text, format_usd
from typestrict_pipeline.study.stats import ScoreTable, SearchStats, search_stats
from typestrict_pipeline.study.tables import (
    CandidateRow,
    CandidateState,
    RunRow,
    RunState,
    StudyState,
    WindowKind,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LeaderboardRow:
    """One candidate on the leaderboard. ``cost_micro`` is ``None`` when cost is not tracked."""

    rank: int | None
    candidate_id: int
    index: int
    label: str
    adjusted: float | None
    oos: float | None
    in_sample: float | None
    gap: float | None
    se: float | None
    cost_micro: int | None
    oos_steps: int
    ran: bool
    complete: bool


@dataclass(frozen=True)
class Leaderboard:
    """Everything the leaderboard shows, computed from the store."""

    study_id: int
    workspace: str
    workflow: str
    workflow_version: str
    state: StudyState
    stop_limit: str | None
    planned: int
    admitted: int
    run: int
    discarded: int
    discard_reasons: dict[str, int]
    discarded_candidates: tuple[tuple[int, str, str], ...]
    stats: SearchStats
    rows: tuple[LeaderboardRow, ...]
    winner_candidate_id: int | None
    cost_tracked: bool
    spend_micro: int | None
    budget_micro: int | None
    estimate_micro: int | None
    n_folds: int
    holdout_start: str
    holdout_end: str
    holdout_steps: int
    holdout_score: float | None
    holdout_se: float | None
    holdout_missing_reason: str | None
    min_unseen_steps: int | None = None
    holdout_baseline: float | None = None
    holdout_diff_se: float | None = None
    holdout_baseline_missing_reason: str | None = None
    baseline_cost_micro: int | None = None
    joint: JointInference | None = None
    joint_missing_reason: str | None = None
    pbo: Pbo | None = None
    decorrelation_span: int | None = None
    holdout_label: str = ""
    embargo_steps: int = 1
    holdout_test: HoldoutTest | None = None
    holdout_test_missing_reason: str | None = None

    @property
    def verdict(self) -> str:
        """One of ``found nothing``, ``beats luck``, ``indistinguishable from luck``,
        ``not judged: unstable`` (a leader's edge changed during the search period), or why
        there is no verdict (one candidate, no scores, no joint test)."""
        st = self.stats
        if st.found_nothing is True:
            return "found nothing"
        if st.found_nothing is None:
            return "no search to judge" if st.n_trials == 1 else "no out-of-sample scores yet"
        if self.joint is None:
            return "not tested"
        if self.joint.unstable:
            return "not judged: unstable"
        return "beats luck" if self.joint.beats_luck else "indistinguishable from luck"

    def _winner_json(self) -> dict[str, Any] | None:
        """The winner as people see it: its number ``#N`` (``index``) and its rank."""
        row = next((r for r in self.rows if r.candidate_id == self.winner_candidate_id), None)
        if row is None:
            return None
        return {"candidate": f"#{row.index}", "index": row.index, "rank": row.rank}

    def _name(self, candidate_id: str | int) -> str:
        """``#N`` for a store row id as the joint test keeps it (a string of digits)."""
        return _index_of(self, int(candidate_id))

    @functools.cached_property
    def numbers(self) -> dict[int, int]:
        """Each candidate's number ``N`` (of ``#N``) by its store row id (one lookup each: the
        StepM set of a 10,000-candidate study can name thousands)."""
        return {r.candidate_id: r.index for r in self.rows}

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON form (``--json``, the API's leaderboard, the lineage).

        Every candidate is named as every surface names it, ``"#N"`` (its number in the study):
        each row's ``candidate`` (``index`` is N) next to its ``rank``, the ``winner``, the StepM
        set and the stability check's candidates. The store's row ids stay inside the store.
        """
        return {
            "study_id": self.study_id,
            "state": self.state.value,
            "stop_limit": self.stop_limit,
            "planned": self.planned,
            "run": self.run,
            "discarded": self.discarded,
            "discard_reasons": self.discard_reasons,
            "discarded_candidates": [{"index": i, "label": label, "reason": why}
                                     for i, label, why in self.discarded_candidates],
            "luck_line": self.stats.luck_line,
            "found_nothing": self.stats.found_nothing,
            "verdict": self.verdict,
            "beats_luck": None if self.joint is None else self.joint.beats_luck,
            "joint_inference": None if self.joint is None else {
                "benchmark": self.joint.benchmark,
                "spa_pvalue": self.joint.spa_pvalue,
                "pvalue_type": self.joint.pvalue_type,
                "spa_pvalue_lower": self.joint.spa_pvalue_lower,
                "spa_pvalue_upper": self.joint.spa_pvalue_upper,
                "stepm": [self._name(c) for c in self.joint.stepm],
                "line_95": self.joint.line_95,
                "candidates": len(self.joint.candidates),
                "steps": self.joint.steps,
                "block_length": self.joint.block_length,
                "reps": self.joint.reps,
                "seed": self.joint.seed,
                "dependence": None if self.joint.dependence is None else {
                    "long_run_ratio": self.joint.dependence.ratio,
                    "cosines": self.joint.dependence.cosines,
                    "time_scale": self.joint.dependence.time_scale,
                    "bandwidth": self.joint.dependence.bandwidth,
                    "span": self.joint.dependence.span,
                    "pooled": self.joint.dependence.pooled,
                    "common": None if self.joint.dependence.common is None else {
                        "phi": self.joint.dependence.common.phi,
                        "share": self.joint.dependence.common.share,
                        "span": self.joint.dependence.common.span,
                        "candidates": self.joint.dependence.common.candidates,
                    },
                },
                "stability": None if self.joint.stability is None else {
                    "tested": [self._name(c) for c in self.joint.stability.tested],
                    "statistics": list(self.joint.stability.statistics),
                    "critical": list(self.joint.stability.critical),
                    "unstable": [self._name(c) for c in self.joint.stability.unstable],
                },
            },
            "joint_missing_reason": self.joint_missing_reason,
            "pbo": None if self.pbo is None else {
                "pbo": self.pbo.pbo, "blocks": self.pbo.blocks,
                "combinations": self.pbo.combinations},
            "decorrelation_span": self.decorrelation_span,
            "embargo_steps": self.embargo_steps,
            "holdout_test": None if self.holdout_test is None else {
                **self.holdout_test.__dict__, "confirmed": self.holdout_test.confirmed,
                "short": self.holdout_test.short, "stable": self.holdout_test.stable},
            "holdout_test_missing_reason": self.holdout_test_missing_reason,
            "winner": self._winner_json(),
            "spend_micro": self.spend_micro,
            "budget_micro": self.budget_micro,
            "estimate_micro": self.estimate_micro,
            "holdout_score": self.holdout_score,
            "holdout_se": self.holdout_se,
            "holdout_missing_reason": self.holdout_missing_reason,
            "min_unseen_steps": self.min_unseen_steps,
            "holdout_baseline": self.holdout_baseline,
            "holdout_diff_se": self.holdout_diff_se,
            "holdout_baseline_missing_reason": self.holdout_baseline_missing_reason,
            "baseline_cost_micro": self.baseline_cost_micro,
            "rows": [{"candidate": f"#{r.index}",
                      **{k: v for k, v in r.__dict__.items() if k != "candidate_id"}}
                     for r in self.rows],
        }


def steps_text(n: int, word: str = "step") -> str:
    """A count of steps in words, singular for one (a refusal said "correlated for 1 steps").

    >>> steps_text(1), steps_text(3), steps_text(2_000, "holdout step"), steps_text(1, "holdout step")
    ('1 step', '3 steps', '2,000 holdout steps', '1 holdout step')
    """
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _reason_group(reason: str) -> str:
    if reason.startswith("duplicate"):
        return "duplicate"
    if reason.startswith("rejected by the workflow"):
        return "rejected by the workflow"
    return reason


def load_leaderboard(engine: Engine, study_id: int) -> Leaderboard:
    """Compute the leaderboard of a study from its stored runs (finished or in flight)."""
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        layout = FoldLayout.from_json(study.layout_json)
        cands = s.execute(
            select(CandidateRow).where(CandidateRow.study_id == study_id).order_by(CandidateRow.idx)
        ).scalars().all()
        seed = int((study.space_json or {}).get("seed", 0))
        ranked = (engine.url.render_as_string(), study_id, study.horizon_steps, seed)
        runs = _read_runs(s, ranked)
        done_eval, done_any = runs.done_eval, runs.done_any
        n_folds = len(layout.folds)
        discards = [c for c in cands if c.state == CandidateState.DISCARDED.value]
        never_ran = [c for c in cands if c.state != CandidateState.DISCARDED.value
                     and c.id not in done_any]
        reasons: Counter[str] = Counter(_reason_group(c.discard_reason or "discarded")
                                        for c in discards)
        if never_ran:
            why = (f"not run: {study.stop_limit} reached" if study.stop_limit
                   else "not run: study cancelled" if study.state == StudyState.CANCELLED.value
                   else "not run yet")
            reasons[why] += len(never_ran)
        by_id = {c.id: c for c in cands}
        ranking = _ranking((*ranked, runs.digest), runs, by_id)
        stats, joint, joint_missing, span = (ranking.stats, ranking.joint, ranking.joint_missing,
                                             ranking.span)
        holdout_runs = runs.holdout
        rank_of = {row.candidate_id: i + 1 for i, row in enumerate(stats.rows)
                   if row.adjusted is not None}
        rows: list[LeaderboardRow] = []
        for st in stats.rows:
            c = by_id[int(st.candidate_id)]
            rows.append(LeaderboardRow(
                rank=rank_of.get(st.candidate_id),
                candidate_id=c.id,
                index=c.idx,
                label=c.label,
                adjusted=st.adjusted,
                oos=st.oos,
                in_sample=st.in_sample,
                gap=st.gap,
                se=st.se,
                cost_micro=c.cost_micro if study.cost_tracked else None,
                oos_steps=st.oos_steps,
                ran=c.id in done_any,
                complete=done_eval[c.id] == n_folds,
            ))
        complete = [r for r in rows if r.complete and r.adjusted is not None]
        pool = complete or [r for r in rows if r.adjusted is not None]
        winner = max(pool, key=lambda r: (r.adjusted or 0.0, -r.index)).candidate_id if pool else None
        ran = len(done_any)
        chosen = study.winner_candidate_id or winner
        htest, htest_missing = _holdout(stats, holdout_runs, chosen, span, layout,
                                        joint.dependence if joint is not None else None)
        return Leaderboard(
            study_id=study.id,
            workspace=study.workspace,
            workflow=study.workflow,
            workflow_version=study.workflow_version,
            state=StudyState(study.state),
            stop_limit=study.stop_limit,
            planned=study.candidates_planned,
            admitted=len([c for c in cands if c.state != CandidateState.DISCARDED.value]),
            run=ran,
            discarded=study.candidates_planned - ran,
            discard_reasons=dict(reasons),
            discarded_candidates=tuple((c.idx, c.label, c.discard_reason or "discarded")
                                       for c in discards),
            stats=stats,
            rows=tuple(rows),
            winner_candidate_id=study.winner_candidate_id or winner,
            cost_tracked=bool(study.cost_tracked),
            spend_micro=study.spend_micro if study.cost_tracked else None,
            budget_micro=study.budget_micro,
            estimate_micro=study.estimate_micro,
            n_folds=n_folds,
            holdout_start=layout.holdout.start.isoformat(),
            holdout_end=layout.holdout.end.isoformat(),
            holdout_steps=layout.holdout.steps,
            holdout_score=study.holdout_score,
            holdout_se=study.holdout_se,
            holdout_missing_reason=study.holdout_missing_reason,
            min_unseen_steps=study.min_unseen_steps,
            holdout_baseline=study.holdout_baseline,
            holdout_diff_se=study.holdout_diff_se,
            holdout_baseline_missing_reason=study.holdout_baseline_missing_reason,
            baseline_cost_micro=runs.baseline_cost if study.cost_tracked else None,
            joint=joint,
            joint_missing_reason=joint_missing,
            pbo=ranking.pbo,
            decorrelation_span=span,
            holdout_label=window_label(layout.holdout.start, layout.holdout.end, layout.step),
            embargo_steps=layout.embargo_steps,
            holdout_test=htest,
            holdout_test_missing_reason=htest_missing,
        )


@dataclass(frozen=True)
class _Ranking:
    """What the search runs alone decide: the luck-adjusted ranking and the joint tests."""

    stats: SearchStats
    joint: JointInference | None
    joint_missing: str | None
    span: int | None
    pbo: Pbo | None


_RANKINGS: dict[tuple[Any, ...], _Ranking] = {}
_RANKINGS_KEPT = 8
"""Rankings computed in this process, by study and the exact set of finished search runs: the
finalize step reads a study's leaderboard before the holdout (to pick the winner) and again
after it (to record it); the search runs, so the ranking and its bootstraps, are the same."""


@dataclass
class _Runs:
    """A study's finished (and cut) runs, read in batches into arrays: per candidate, its eval
    steps (numbered in the order first seen) and scores, and its in-sample scores."""

    steps: dict[str, int] = field(default_factory=dict)
    oos: dict[str, tuple[array[int], array[float]]] = field(default_factory=dict)
    ins: dict[str, array[float]] = field(default_factory=dict)
    done_eval: Counter[int] = field(default_factory=Counter)
    done_any: set[int] = field(default_factory=set)
    holdout: dict[int, dict[str, float]] = field(default_factory=dict)
    baseline_cost: int | None = None
    #: the finished search runs (id, state, attempt, end), in id order: the ranking's cache key
    searched: Any = field(default_factory=lambda: hashlib.blake2b(digest_size=16))
    digest: str = ""

    def add(self, row: Any) -> None:
        """One run: ``(id, candidate_id, window, state, attempt, finished_at, cost_micro,
        scores_json)``."""
        rid, candidate, window, state, attempt, finished, cost, pairs = row
        pairs = pairs or []
        if window == WindowKind.HOLDOUT.value:
            if candidate == repo.BASELINE_CANDIDATE_ID:
                self.baseline_cost = cost
            if state == RunState.DONE.value:
                self.holdout[candidate] = {str(t): float(v) for t, v in pairs}
            return
        self.searched.update(repr((rid, state, attempt, finished)).encode())
        self.done_any.add(candidate)
        cid = str(candidate)
        if window == WindowKind.EVAL.value:
            rows, values = self.oos.setdefault(cid, (array("q"), array("d")))
            steps = self.steps
            rows.extend(steps.setdefault(str(t), len(steps)) for t, _ in pairs)
            values.extend(float(v) for _, v in pairs)
            if state == RunState.DONE.value:
                self.done_eval[candidate] += 1
        else:
            self.ins.setdefault(cid, array("d")).extend(float(v) for _, v in pairs)

    def table(self) -> ScoreTable:
        """The eval scores as a :class:`~typestrict_pipeline.study.stats.ScoreTable`."""
        return ScoreTable.from_indexed(list(self.steps), self.oos)


_RUNS_BATCH = 2000
"""Runs read from the store at a time: the leaderboard of a study of 160,000 window runs holds
their scores as arrays (16 bytes a score), never all their JSON at once."""


_FINISHED = (RunState.DONE.value, RunState.CUT.value)
_READ: dict[tuple[Any, ...], tuple[tuple[Any, ...], _Runs]] = {}
_READ_KEPT = 32
"""The last read of a study's runs without their scores (counts, holdouts, the digest), by
(store, study, horizon, seed), with the runs' fingerprint then: a page view of a study whose
finished runs did not change since its ranking was computed reads no scores again (a 10,000 ×
8 study's scores are 180,000 JSON documents: about 50 s)."""


def _fingerprint(s: Session, study_id: int) -> tuple[Any, ...]:
    """Per (state, window) of the finished runs: how many, the sum of their ids, their first and
    last end. A run that finishes, is cut, or finishes again in a new attempt changes it."""
    query = (select(RunRow.state, RunRow.window, func.count(), func.sum(RunRow.id),
                    func.min(RunRow.finished_at), func.max(RunRow.finished_at))
             .where(RunRow.study_id == study_id, RunRow.state.in_(_FINISHED))
             .group_by(RunRow.state, RunRow.window).order_by(RunRow.state, RunRow.window))
    return tuple(tuple(row) for row in s.execute(query))


def _read_runs(s: Session, ranked: tuple[Any, ...]) -> _Runs:
    """The finished runs of the study ``ranked`` = (store, study, horizon, seed): from the last
    read when its fingerprint still holds and its ranking is still kept, else from the store."""
    study_id = ranked[1]
    mark = _fingerprint(s, study_id)
    kept = _READ.get(ranked)
    if kept is not None and kept[0] == mark and (*ranked, kept[1].digest) in _RANKINGS:
        return kept[1]
    runs = _Runs()
    query = (select(RunRow.id, RunRow.candidate_id, RunRow.window, RunRow.state, RunRow.attempt,
                    RunRow.finished_at, RunRow.cost_micro, RunRow.scores_json)
             .where(RunRow.study_id == study_id, RunRow.state.in_(_FINISHED))
             .order_by(RunRow.id).execution_options(yield_per=_RUNS_BATCH))
    for row in s.execute(query):
        runs.add(tuple(row))
    runs.digest = runs.searched.hexdigest()
    _READ.pop(ranked, None)
    while len(_READ) >= _READ_KEPT:
        _READ.pop(next(iter(_READ)))
    _READ[ranked] = (mark, dataclasses.replace(runs, steps={}, oos={}, ins={}))
    return runs


def _ranking(key: tuple[Any, ...], runs: _Runs, by_id: dict[int, CandidateRow]) -> _Ranking:
    """The ranking of ``key`` = (store, study, horizon, seed, finished search runs), once."""
    found = _RANKINGS.get(key)
    if found is None:
        _, _, horizon, seed, _ = key
        oos, ins = runs.table(), runs.ins
        tested = oos.complete()
        joint, joint_missing = _joint(tested, by_id, seed)
        found = _Ranking(
            stats=search_stats(oos, ins, horizon=horizon), joint=joint, joint_missing=joint_missing,
            span=decorrelation_span(tested[1], horizon) if tested is not None else None,
            pbo=pbo_cscv(tested[1]) if tested is not None else None)
        while len(_RANKINGS) >= _RANKINGS_KEPT:
            _RANKINGS.pop(next(iter(_RANKINGS)))
        _RANKINGS[key] = found
    return found


def _joint(tested: tuple[list[str], FloatArray] | None, by_id: dict[int, CandidateRow],
           seed: int) -> tuple[JointInference | None, str | None]:
    """SPA and StepM against the benchmark: the version's defaults if they ran in the search
    (a candidate with no parameter or prompt changes), else the candidates' mean on each step."""
    if tested is None:
        return None, "no candidate has scores on every out-of-sample step"
    ids, matrix = tested
    defaults = [j for j, cid in enumerate(ids)
                if not by_id[int(cid)].params_json and not by_id[int(cid)].prompts_json]
    if defaults:
        j = defaults[0]
        bench = matrix[:, j]
        label = f"candidate #{by_id[int(ids[j])].idx} (the version's defaults)"
        keep = [i for i in range(len(ids)) if i != j]
        ids, matrix = [ids[i] for i in keep], matrix[:, keep]
    else:
        if len(ids) < 2:
            return None, "one candidate and no default configuration to compare it with"
        bench = matrix.mean(axis=1)
        label = "the candidates' mean on each step (the version's defaults did not run)"
    if not ids:
        return None, "only the version's defaults ran"
    try:
        return joint_inference(matrix, ids, bench, benchmark_label=label, seed=seed,
                               pvalue_type="consistent" if defaults else "upper"), None
    except NotEnoughDataError as exc:
        return None, str(exc)


def _holdout(stats: SearchStats, runs: dict[int, dict[str, float]], winner: int | None,
             span: int | None, layout: FoldLayout,
             dependence: Dependence | None = None) -> tuple[HoldoutTest | None, str | None]:
    """Winner − baseline on the holdout after the measured embargo (see ``inference.holdout_test``)."""
    won = runs.get(winner) if winner is not None else None
    base = runs.get(repo.BASELINE_CANDIDATE_ID)
    if won is None or base is None:
        return None, "the winner and the baseline have not both been scored on the holdout"
    skip = holdout_skip(span, layout.horizon_steps, layout.embargo_steps)
    row = next((r for r in stats.rows if r.candidate_id == str(winner)), None)
    edge = sd = None
    if row is not None and row.adjusted is not None and row.se is not None \
            and stats.baseline is not None:
        edge = row.adjusted - stats.baseline
        sd = row.se * stats.scale * math.sqrt(max(1, row.oos_steps))
    try:
        return holdout_test(won, base, skip=skip, horizon=layout.horizon_steps,
                            edge_to_detect=edge, long_run_sd=sd,
                            dependence=dependence), None
    except NotEnoughDataError as exc:
        return None, str(exc)


def _num(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.4f}"


def header_lines(board: Leaderboard) -> list[tuple[str, str]]:
    """The header as (label, value) pairs, in display order."""
    state = board.state.label
    if board.state == StudyState.BUDGET_REACHED and board.stop_limit:
        state += f" (limit: {board.stop_limit})"
    reasons = "; ".join(f"{n} {why}" for why, n in sorted(board.discard_reasons.items()))
    lines = [
        ("Study", f"{board.study_id} · workflow {board.workflow} (version "
                  f"{board.workflow_version}) · workspace {board.workspace}"),
        ("State", state),
        ("Candidates", f"{board.planned} planned / {board.run} run / {board.discarded} discarded"
                       + (f" ({reasons})" if reasons else "")),
    ]
    lines += _luck_lines(board)
    lines.append(("Spend", spend_text(board)))
    if (board.budget_micro is not None and board.estimate_micro is not None
            and board.budget_micro < board.estimate_micro):
        lines.append(("Budget", f"{format_usd(board.budget_micro)} is below the estimate "
                                f"{format_usd(board.estimate_micro)}: the study stops before the run "
                                "that would exceed it and keeps what ran."))
    if board.holdout_score is not None:
        se = f" ± {board.holdout_se:.4f} (SE)" if board.holdout_se is not None else ""
        lines.append(("Holdout (the number to trust)",
                      f"{board.holdout_score:.4f}{se} for candidate "
                      f"{_index_of(board, board.winner_candidate_id)} on {_holdout_window(board)} "
                      f"({board.holdout_steps} steps)"))
        if board.holdout_baseline is not None:
            lines.append(("Baseline on the holdout",
                          f"{board.holdout_baseline:.4f} (the version's default parameters and "
                          f"prompts, same steps); its run cost {format_usd(board.baseline_cost_micro)}"))
            lines.append(("Holdout: winner − baseline", _holdout_text(board)))
        elif board.holdout_baseline_missing_reason:
            first, *more = board.holdout_baseline_missing_reason.split("\n")
            lines.append(("Baseline on the holdout", f"missing: {first}"))
            lines += [("", line) for line in more]
    elif board.holdout_missing_reason:
        first, *more = board.holdout_missing_reason.split("\n")
        lines.append(("Holdout", first))
        lines += [("", line) for line in more]
    else:
        lines.append(("Holdout", f"not scored yet ({_holdout_window(board)})"))
    return lines


def _holdout_window(board: Leaderboard) -> str:
    """The holdout's first and last step, as the lineage panel writes a window."""
    return board.holdout_label or f"{board.holdout_start} → {board.holdout_end}"


def _luck_lines(board: Leaderboard) -> list[tuple[str, str]]:
    """Three things apart: the expected best by luck, whether the best beats luck, PBO."""
    st = board.stats
    if st.luck_line is None:
        return [(f"Best of {st.n_trials} by pure luck", "— (no out-of-sample scores yet)")]
    lines = [(f"Best of {st.n_trials} by pure luck",
              f"{st.luck_line:.4f} = mean {_num(st.baseline)} + σ₀ {_num(st.sigma0)} × "
              f"√(N/(N−1)) {st.scale:.3f} × e({st.n_trials}) {_num(st.e_n, 3)} (σ₀: median "
              "Newey–West SE of a candidate's score minus the candidates' mean)")]
    joint = board.joint
    if joint is not None:
        stepm = ", ".join(_index_of(board, int(c)) for c in joint.stepm) or "none"
        labels = {r.candidate_id: f"#{r.index}" for r in board.rows}
        if joint.unstable and joint.stability is not None:
            said = ("not said: " + joint.stability.text({str(k): v for k, v in labels.items()})
                    + ", so a single 'beats luck' would average over regimes that came and went; "
                    "the next period may split differently (trust the holdout, and re-run on new "
                    f"data). SPA p = {joint.spa_pvalue:.3f} for the record")
        else:
            said = (f"{'yes' if joint.beats_luck else 'no'} (SPA p = {joint.spa_pvalue:.3f}, "
                    f"{joint.pvalue_type}; StepM set: {stepm}")
        dep = joint.dependence
        chosen = ("" if dep is None else f" (block chosen from the long-run variance: {dep.text()})")
        lines.append(("Beats luck at 5%",
                      f"{said}; benchmark: {joint.benchmark}; 95% line "
                      f"{joint.line_95:.4f}; stationary bootstrap, {joint.reps} resamples, mean "
                      f"block {joint.block_length:.1f} steps{chosen}, seed {joint.seed})"))
    else:
        lines.append(("Beats luck at 5%", f"not tested ({board.joint_missing_reason})"))
    verdict = board.verdict
    if verdict == "found nothing":
        text = ("The top out-of-sample score is at or below what pure luck gives as the best of "
                f"{st.n_trials}: this search found nothing.")
    elif verdict == "no search to judge":
        text = "One candidate: there was no search to judge against luck; see the holdout."
    elif verdict == "beats luck":
        text = ("Beats luck at 5%: the best out-of-sample score is above what the best of "
                f"{st.n_trials} reaches by luck 95% of the time (the holdout is still the number "
                "to trust).")
    elif verdict == "not judged: unstable":
        text = ("Not judged: the best candidates' edges changed during the search period (see "
                "'Beats luck at 5%'); luck cannot be told from a regime that favoured them.")
    elif verdict == "indistinguishable from luck":
        text = ("Indistinguishable from luck: above the expected best of "
                f"{st.n_trials} by luck, but not beyond what luck gives 5% of the time.")
    else:
        text = f"Above the expected best by luck; {verdict}."
    lines.append(("Verdict", text))
    if board.pbo is not None:
        lines.append(("PBO (diagnostic)",
                      f"{board.pbo.pbo:.2f}: share of {board.pbo.combinations} splits of "
                      f"{board.pbo.blocks} time blocks where the in-sample best ranks at or below "
                      "the out-of-sample median (CSCV)"))
    return lines


def _holdout_text(board: Leaderboard) -> str:
    test = board.holdout_test
    if test is None:
        return f"not tested ({board.holdout_test_missing_reason})"
    text = (f"{test.diff:+.4f} ± {test.se:.4f} (Newey–West SE) on {test.steps} steps; one-sided "
            f"95% lower bound {test.lower_bound:+.4f}: "
            + ("beats the baseline" if test.confirmed else "not shown to beat the baseline"))
    if not test.stable:
        text += ("; its mean changed during the holdout (self-normalised change-point statistic "
                 f"{test.change_statistic:.1f} above 40.1), so the bound is not read as a win")
    span = board.decorrelation_span
    if test.skipped:
        why = "" if span is None else f"scores stay correlated for {steps_text(span)}, "
        text += (f"; first {steps_text(test.skipped, 'holdout step')} left out ({why}the embargo is "
                 f"{board.embargo_steps})")
    if test.short and test.required_steps is not None and test.edge_to_detect is not None:
        text += (f". Warning: holdout too short: detecting the search's luck-adjusted edge "
                 f"{test.edge_to_detect:+.4f} with 80% power at one-sided 5% needs "
                 f"{test.required_steps} steps, it has {test.steps}")
    elif test.required_steps is None:
        text += ". No power rule: the winner's luck-adjusted edge is not above the candidates' mean"
    return text


def _index_of(board: Leaderboard, candidate_id: int | None) -> str:
    number = None if candidate_id is None else board.numbers.get(candidate_id)
    return "—" if number is None else f"#{number}"


def candidate_name(board: Leaderboard, candidate_id: int | None) -> str:
    """How every surface names a candidate: ``#N``, its number in the study (the leaderboard's
    Candidate column, the CLI, the API's ``index``, the Dagster metadata); ``—`` for none."""
    return _index_of(board, candidate_id)


def winner_text(board: Leaderboard) -> str:
    """The winner with its rank, as the header and the metadata show it: ``#3 (rank 1)``.

    Its number is the candidate's (the table marks it ★); the rank is the Rank column's.
    """
    row = next((r for r in board.rows if r.candidate_id == board.winner_candidate_id), None)
    if row is None:
        return "none (no candidate has an out-of-sample score)"
    return f"#{row.index}" + (f" (rank {row.rank})" if row.rank is not None else "")


def spend_text(board: Leaderboard) -> str:
    """``$0.0040 of $0.0100 budget (estimate ≈ $0.0120 for …)``, or no cost for old studies."""
    if not board.cost_tracked or board.spend_micro is None:
        return "— (this study was created before cost tracking; no cost is shown)"
    text = format_usd(board.spend_micro)
    if board.budget_micro is not None:
        text += f" of {format_usd(board.budget_micro)} budget"
    else:
        text += " (no USD budget)"
    if board.estimate_micro is not None:
        text += f"; started with {estimate_text(board.estimate_micro, board.admitted, board.n_folds)}"
    return text


def row_cells(r: LeaderboardRow) -> tuple[str, str, str, str, str]:
    """A row's Adjusted, Out-of-sample, In-sample, Overfit gap and Cost cells, in the page's
    order, as every table of the leaderboard writes them (the CLI's, the console's): scores to 4
    decimals, the gap signed (in-sample minus out-of-sample), the cost in USD, ``—`` for none
    (a study created before cost tracking shows no cost, never $0)."""
    return (_num(r.adjusted), _num(r.oos), _num(r.in_sample), _signed(r.gap), format_usd(r.cost_micro))


def render_markdown(board: Leaderboard) -> str:
    """The header and the ranked table as Markdown."""
    out = ["| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in header_lines(board)]
    out += [
        "",
        "| Rank | Candidate | Adjusted | Out-of-sample | In-sample | Overfit gap | Cost | SE | OOS steps |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in board.rows:
        mark = " ★" if r.candidate_id == board.winner_candidate_id else ""
        partial = "" if r.complete else " (incomplete)"
        cells = " | ".join(row_cells(r))
        out.append(f"| {r.rank or '—'} | #{r.index}{mark} {r.label}{partial} | {cells} | {_num(r.se)} | "
                   f"{r.oos_steps} |")
    return "\n".join(out)
