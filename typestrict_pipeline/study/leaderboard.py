"""The leaderboard of a study: rows ranked by Adjusted, and its header (counts, luck, spend, holdout).

Shown in Dagster (the study's materialization metadata, as Markdown) and by
``typestrict study leaderboard STUDY_ID``; both render :func:`render_markdown`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import FoldLayout
from typestrict_pipeline.study.limits import estimate_text, format_usd
from typestrict_pipeline.study.stats import SearchStats, search_stats
from typestrict_pipeline.study.tables import (
    CandidateRow,
    CandidateState,
    RunRow,
    RunState,
    StudyState,
    WindowKind,
)


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

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON form (for H7's lineage and for tests)."""
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
            "winner_candidate_id": self.winner_candidate_id,
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
            "rows": [r.__dict__ for r in self.rows],
        }


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
        runs = s.execute(
            select(RunRow).where(RunRow.study_id == study_id,
                                 RunRow.state.in_([RunState.DONE.value, RunState.CUT.value]))
        ).scalars().all()
        oos: dict[str, dict[str, float]] = {}
        ins: dict[str, list[float]] = {}
        done_eval: Counter[int] = Counter()
        done_any: set[int] = set()
        baseline_cost: int | None = None
        for r in runs:
            if r.window == WindowKind.HOLDOUT.value:
                if r.candidate_id == repo.BASELINE_CANDIDATE_ID:
                    baseline_cost = r.cost_micro
                continue
            done_any.add(r.candidate_id)
            pairs = r.scores_json or []
            cid = str(r.candidate_id)
            if r.window == WindowKind.EVAL.value:
                oos.setdefault(cid, {}).update({str(t): float(v) for t, v in pairs})
                if r.state == RunState.DONE.value:
                    done_eval[r.candidate_id] += 1
            else:
                ins.setdefault(cid, []).extend(float(v) for _, v in pairs)
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
        stats = search_stats(oos, ins, horizon=study.horizon_steps)
        by_id = {c.id: c for c in cands}
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
            baseline_cost_micro=baseline_cost if study.cost_tracked else None,
        )


def _num(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.4f}"


def header_lines(board: Leaderboard) -> list[tuple[str, str]]:
    """The header as (label, value) pairs, in display order."""
    st = board.stats
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
    if st.luck_line is None:
        luck = "— (no out-of-sample scores yet)"
    else:
        luck = (f"{st.luck_line:.4f} = mean {_num(st.baseline)} + σ₀ {_num(st.sigma0)} × "
                f"√(1−ρ̄) (ρ̄ {_num(st.rho_bar, 2)}) × e({st.n_trials}) {_num(st.e_n, 3)}; "
                f"95% line {_num(st.luck_line_95)}")
    lines.append((f"Best of {st.n_trials} by pure luck", luck))
    if st.found_nothing is True:
        lines.append(("Verdict", "The top out-of-sample score is at or below what pure luck "
                                 f"gives as the best of {st.n_trials}: this search found nothing."))
    elif st.found_nothing is None and st.n_trials == 1:
        lines.append(("Verdict", "One candidate: there was no search to judge against luck; "
                                 "see the holdout."))
    elif st.found_nothing is False:
        lines.append(("Verdict", "The top out-of-sample score is above the luck line (being "
                                 "above it is not proof: see the holdout)."))
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
                      f"{_index_of(board, board.winner_candidate_id)} on {board.holdout_start} → "
                      f"{board.holdout_end} ({board.holdout_steps} steps)"))
        if board.holdout_baseline is not None:
            diff = board.holdout_score - board.holdout_baseline
            dse = (f" ± {board.holdout_diff_se:.4f} (Newey–West SE of the per-step difference)"
                   if board.holdout_diff_se is not None else "")
            lines.append(("Baseline on the holdout",
                          f"{board.holdout_baseline:.4f} (the version's default parameters and "
                          f"prompts, same steps); winner − baseline {diff:+.4f}{dse}; "
                          f"its run cost {format_usd(board.baseline_cost_micro)}"))
        elif board.holdout_baseline_missing_reason:
            lines.append(("Baseline on the holdout",
                          f"missing: {board.holdout_baseline_missing_reason}"))
    elif board.holdout_missing_reason:
        lines.append(("Holdout", f"missing: {board.holdout_missing_reason}"))
    else:
        lines.append(("Holdout", f"not scored yet ({board.holdout_start} → {board.holdout_end})"))
    return lines


def _index_of(board: Leaderboard, candidate_id: int | None) -> str:
    for r in board.rows:
        if r.candidate_id == candidate_id:
            return f"#{r.index}"
    return "—"


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
        out.append(
            f"| {r.rank or '—'} | #{r.index}{mark} {r.label}{partial} | {_num(r.adjusted)} | "
            f"{_num(r.oos)} | {_num(r.in_sample)} | {_signed(r.gap)} | "
            f"{format_usd(r.cost_micro)} | {_num(r.se)} | {r.oos_steps} |"
        )
    return "\n".join(out)
