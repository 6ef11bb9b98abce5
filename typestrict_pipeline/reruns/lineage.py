"""The lineage panel: every study of a lineage, and the best expected of k under noise.

Statistics (sources in ``docs/method/reruns.md`` §3):

* each study ``j`` of the lineage (the root and every re-run) has a holdout score ``h_j``, the
  baseline's score ``b_j`` on the same holdout steps and the standard error ``SE_j`` of their
  paired difference ``d_j = h_j − b_j``; pairing on the same steps cancels how hard each slice
  of time was;
* the holdouts are disjoint and new (``typestrict_pipeline.reruns.windows``), so under "no
  persistent edge" the ``d_j`` are independent, mean zero, and of comparable spread;
* **Best expected of k under noise** ``= median(SE_j)·e(k)``, with ``e(k)`` the exact expected
  maximum of ``k`` standard normals (the same ``e`` as the study leaderboard's luck line,
  ``typestrict_pipeline.study.stats.expected_max_normal``); it is on the holdout-minus-baseline
  scale, and ``b̄ + median(SE_j)·e(k)`` on the score scale;
* the panel warns that the best result is within noise when ``max_j d_j`` is at or below it;
* ``mean_j d_j`` with ``SE = √(Σ SE_j²)/k`` uses every study with no selection: it is the
  honest estimate of the lineage's edge.

``k`` counts every study of the lineage that has a holdout score. A number that cannot be
computed (no baseline, no standard error) is reported as missing with the reason, never as 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from typestrict_pipeline.study.stats import expected_max_normal

WITHIN_NOISE_WARNING = (
    "The best result is within noise: its holdout is at or below the best expected of {k} under "
    "noise. The winner has not shown that it persists; keep collecting data."
)


@dataclass(frozen=True)
class LineageEntry:
    """One study of a lineage, as the panel shows it.

    Attributes:
        seq: position in the lineage (the root is 0).
        study_id: the study's id (None while a claimed re-run has not created its study).
        state: the study's state, as text (``FINISHED``, ``RUNNING``, ``FAILED``, ...).
        window: the holdout it was scored on, as text (dates or steps).
        winner: the winning candidate's label (None when there is none).
        holdout_score: the winner's score on the holdout (None when not scored).
        baseline_score: the baseline's score on the same holdout steps.
        holdout_se: standard error of ``holdout_score − baseline_score``.
        winner_changed: whether the winner differs from the previous study's (None for the root).
    """

    seq: int
    study_id: str | None
    state: str
    window: str
    winner: str | None
    holdout_score: float | None
    baseline_score: float | None
    holdout_se: float | None
    winner_changed: bool | None

    @property
    def edge(self) -> float | None:
        """``holdout_score − baseline_score``, or None when either is missing."""
        if self.holdout_score is None or self.baseline_score is None:
            return None
        return self.holdout_score - self.baseline_score


@dataclass(frozen=True)
class LineageSummary:
    """The numbers under the lineage table.

    Attributes:
        k: studies with a holdout score.
        scale: ``"holdout − baseline"`` when every holdout has a baseline score on the same
            steps, else ``"holdout score"`` (the baseline is then the lineage's mean holdout
            score, the leaderboard's own default "every candidate has the same skill").
        baseline: ``b̄``, the mean baseline (or the mean holdout score on the score scale).
        best: the best ``d_j`` (or the best holdout score on the score scale).
        best_seq: the lineage position of that best study.
        noise_line: Best expected of k under noise on ``scale`` (``median(SE_j)·e(k)`` on the
            difference scale, ``b̄ + median(SE_j)·e(k)`` on the score scale).
        noise_line_score: the line on the score scale, ``b̄ + median(SE_j)·e(k)``.
        within_noise: ``best ≤ noise_line`` (None if undefined).
        mean_edge: ``mean_j d_j`` (difference scale only); mean_edge_se: ``√(Σ SE_j²)/k``.
        missing_reason: why the line is undefined, when it is.
    """

    k: int
    scale: str
    baseline: float | None
    best: float | None
    best_seq: int | None
    noise_line: float | None
    noise_line_score: float | None
    within_noise: bool | None
    mean_edge: float | None
    mean_edge_se: float | None
    missing_reason: str | None


SCALE_EDGE = "holdout − baseline"
SCALE_SCORE = "holdout score"


def best_expected_under_noise(standard_errors: Sequence[float]) -> float:
    """``median(SE_j)·e(k)`` for ``k = len(standard_errors)`` honest holdouts.

    Args:
        standard_errors: the ``SE_j``, one per study with a holdout score.

    Returns:
        What pure luck would give, on average, as the best of those ``k`` holdouts, above the
        baseline.

    Raises:
        ValueError: with no standard error, or a negative or non-finite one.

    >>> round(best_expected_under_noise([0.02, 0.03]), 6) == round(0.025 / math.sqrt(math.pi), 6)
    True
    >>> best_expected_under_noise([0.05])  # one holdout: no selection, no luck to subtract
    0.0
    """
    if not standard_errors:
        raise ValueError("expected at least one holdout standard error, got none. Score a holdout first.")
    if any(not math.isfinite(s) or s < 0 for s in standard_errors):
        raise ValueError(
            f"expected finite standard errors ≥ 0, got {list(standard_errors)!r}. Fix the holdout scoring."
        )
    return float(statistics.median(standard_errors)) * expected_max_normal(len(standard_errors))


def summarize(entries: Sequence[LineageEntry]) -> LineageSummary:
    """The summary line of the lineage panel.

    >>> e = [LineageEntry(0, "a", "FINISHED", "w0", "x", 0.62, 0.55, 0.03, None),
    ...      LineageEntry(1, "b", "FINISHED", "w1", "y", 0.60, 0.57, 0.03, True)]
    >>> s = summarize(e)
    >>> s.k, s.scale, round(s.best, 3), round(s.noise_line, 4), s.within_noise
    (2, 'holdout − baseline', 0.07, 0.0169, False)
    """
    scored = [e for e in entries if e.holdout_score is not None]
    k = len(scored)
    if k == 0:
        return LineageSummary(0, SCALE_SCORE, None, None, None, None, None, None, None, None,
                              "no study of this lineage has a holdout score yet")
    no_se = [e.seq for e in scored if e.holdout_se is None]
    if no_se:
        return LineageSummary(k, SCALE_SCORE, None, None, None, None, None, None, None, None,
                              f"studies {no_se} have a holdout score without a standard error")
    ses = [float(e.holdout_se) for e in scored if e.holdout_se is not None]
    luck = best_expected_under_noise(ses)
    if all(e.baseline_score is not None for e in scored):
        edges = [(float(e.holdout_score) - float(e.baseline_score), e.seq)  # type: ignore[arg-type]
                 for e in scored]
        best, best_seq = max(edges)
        b_bar = statistics.fmean(float(e.baseline_score) for e in scored)  # type: ignore[arg-type]
        return LineageSummary(
            k=k,
            scale=SCALE_EDGE,
            baseline=b_bar,
            best=best,
            best_seq=best_seq,
            noise_line=luck,
            noise_line_score=b_bar + luck,
            within_noise=best <= luck,
            mean_edge=statistics.fmean(d for d, _ in edges),
            mean_edge_se=math.sqrt(sum(s * s for s in ses)) / k,
            missing_reason=None,
        )
    scores = [(float(e.holdout_score), e.seq) for e in scored]  # type: ignore[arg-type]
    best, best_seq = max(scores)
    b_bar = statistics.fmean(h for h, _ in scores)
    return LineageSummary(
        k=k,
        scale=SCALE_SCORE,
        baseline=b_bar,
        best=best,
        best_seq=best_seq,
        noise_line=b_bar + luck,
        noise_line_score=b_bar + luck,
        within_noise=best <= b_bar + luck,
        mean_edge=None,
        mean_edge_se=None,
        missing_reason=None,
    )


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def render_panel(entries: Sequence[LineageEntry]) -> str:
    """The lineage panel as plain text (the CLI prints it; Dagster shows it as Markdown).

    >>> e = [LineageEntry(0, "a", "FINISHED", "2015-01-01..2015-01-20", "x", 0.6, 0.55, 0.03, None)]
    >>> print(render_panel(e).splitlines()[-2])
    Best expected of 1 under noise: +0.0000 (holdout − baseline)
    """
    header = ["#", "study", "state", "scored on", "winner", "holdout", "baseline", "holdout − baseline", "winner changed"]
    rows: list[list[str]] = []
    for e in entries:
        edge = e.edge
        edge_text = "n/a" if edge is None else f"{edge:+.4f}" + ("" if e.holdout_se is None else f" ± {e.holdout_se:.4f}")
        changed = "—" if e.winner_changed is None else ("yes" if e.winner_changed else "no")
        rows.append([
            str(e.seq), e.study_id or "—", e.state, e.window, e.winner or "—",
            _num(e.holdout_score), _num(e.baseline_score), edge_text, changed,
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.extend(_summary_lines(summarize(entries)))
    return "\n".join(lines)


def render_markdown(entries: Sequence[LineageEntry]) -> str:
    """The lineage panel as a Markdown table (Dagster metadata)."""
    s = summarize(entries)
    out = [
        "| # | study | state | scored on | winner | holdout | baseline | holdout − baseline | winner changed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        edge = e.edge
        edge_text = "n/a" if edge is None else f"{edge:+.4f}" + ("" if e.holdout_se is None else f" ± {e.holdout_se:.4f}")
        changed = "—" if e.winner_changed is None else ("yes" if e.winner_changed else "no")
        out.append(
            f"| {e.seq} | {e.study_id or '—'} | {e.state} | {e.window} | {e.winner or '—'} | "
            f"{_num(e.holdout_score)} | {_num(e.baseline_score)} | {edge_text} | {changed} |"
        )
    out.append("")
    out.extend(line + "  " for line in _summary_lines(s))
    return "\n".join(out)


def _summary_lines(s: LineageSummary) -> list[str]:
    if s.noise_line is None:
        return [f"Best expected of {s.k} under noise: n/a ({s.missing_reason})"]
    signed = s.scale == SCALE_EDGE
    lines = [f"Best expected of {s.k} under noise: {_num(s.noise_line, signed)} ({s.scale})"]
    if signed:
        lines.append(
            f"Best {s.scale}: {_num(s.best, True)} (lineage #{s.best_seq}); "
            f"mean over all {s.k}: {_num(s.mean_edge, True)} ± {_num(s.mean_edge_se)}"
        )
    else:
        lines.append(
            f"Best {s.scale}: {_num(s.best)} (lineage #{s.best_seq}); baseline: the lineage's mean "
            f"holdout score {_num(s.baseline)} (no baseline was scored on the holdouts)"
        )
    if s.within_noise:
        lines.append(WITHIN_NOISE_WARNING.format(k=s.k))
    return lines
