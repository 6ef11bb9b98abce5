"""Pictures of the product's results, rendered headless: plain numbers in, PNG bytes out.

Each function draws one picture a person would rather look at than read, with matplotlib's Agg
canvas (no display, no pyplot state, safe in threads), and returns the PNG file as bytes:

* :func:`bootstrap_png` — a decision's bootstrap distribution of G, with its 5th percentile and 0;
* :func:`metrics_png` — each metric, model vs Jev, as model − Jev against its margin;
* :func:`leaderboard_png` — a study's out-of-sample vs in-sample scores, with the luck line;
* :func:`lineage_png` — a lineage's holdout scores over its re-runs, with the noise line;
* :func:`score_over_time_png` — a backtest's mean score per period.

The bytes are deterministic: a fixed size and resolution, and no "Software" or date text chunk,
so the same numbers give the same file (tests compare them). :func:`png_markdown` embeds a PNG
as a Markdown image with a ``data:`` URI, which the Dagster UI shows inline in metadata and an
HTML page can use as it is. Missing values are ``None`` (or NaN) and are left out of a picture,
never drawn as zero.

>>> png = metrics_png(["macro_f1"], [0.81], [0.80], [0.02])
>>> png[:8] == PNG_SIGNATURE and png == metrics_png(["macro_f1"], [0.81], [0.80], [0.02])
True
>>> png_markdown(b"\\x89PNG", "G")
'![G](data:image/png;base64,iVBORw==)'
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from typestrict_pipeline.errors import InputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

WIDTH_IN = 6.4
HEIGHT_IN = 3.2
DPI = 80  # 512 x 256 pixels: readable in the UI's metadata panel, a few tens of kB

_MODEL_COLOR = "#1f77b4"
_JEV_COLOR = "#ff7f0e"
_LINE_COLOR = "#d62728"
_ZERO_COLOR = "#333333"


# ------------------------------------------------------------------------------------------------
# Shared steps
# ------------------------------------------------------------------------------------------------


def _figure() -> tuple[Figure, Axes]:
    # imported here, not at module load: matplotlib would add ~1 s to every run process's start
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    return fig, ax


def _png(fig: Figure) -> bytes:
    """The figure as PNG bytes, without the chunks that change between runs."""
    fig.tight_layout()
    # tight_layout leaves a placeholder layout engine behind, which makes savefig lay the
    # figure out again in a draw of its own (legend placement and all): drop it, same pixels
    fig.set_layout_engine(None)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _present(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _same_length(what: str, fix: str, **columns: Sequence[object]) -> int:
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) > 1:
        got = ", ".join(f"{name}: {n}" for name, n in lengths.items())
        raise InputError(f"{what} of the same length", got, fix)
    return next(iter(lengths.values()), 0)


_Loc = Literal["best", "upper left", "lower right"]


def _legend(ax: Axes, loc: _Loc, fontsize: str = "x-small") -> None:
    """A legend, only when something carries a label (an empty one warns)."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc=loc, fontsize=fontsize)


def for_reading(value: float, digits: int = 4) -> float:
    """``value`` rounded for a person to read (UI metadata); the audit and ``--json`` keep it exact.

    >>> for_reading(0.12675984260475498), for_reading(-0.000049), for_reading(3.14159, 2)
    (0.1268, -0.0, 3.14)
    """
    return round(value, digits)


def png_markdown(png: bytes, alt: str) -> str:
    """A Markdown image of ``png`` as a ``data:`` URI (Dagster metadata, HTML pages).

    >>> png_markdown(b"\\x89PNG", "a [picture]")
    '![a picture](data:image/png;base64,iVBORw==)'
    """
    text = alt.replace("[", "").replace("]", "")
    return f"![{text}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


# ------------------------------------------------------------------------------------------------
# The pictures
# ------------------------------------------------------------------------------------------------


def bootstrap_png(gains: Sequence[float], q05: float, *, gain: float | None = None,
                  title: str = "") -> bytes:
    """Histogram of the bootstrap's G values, with its 5th percentile (q05) and 0 marked.

    ``gain`` is the observed G (drawn as a dashed line when given). The gain is real when q05
    lies right of 0.

    >>> png = bootstrap_png([0.01, 0.02, 0.03, -0.01], q05=-0.01, gain=0.02, title="rotten")
    >>> png.startswith(PNG_SIGNATURE)
    True
    """
    values = [g for g in gains if _present(g)]
    if not values:
        raise InputError("at least one finite G value", "none", "pass the bootstrap's gains")
    fig, ax = _figure()
    ax.hist(values, bins=min(50, max(5, len(values) // 20)), color=_MODEL_COLOR, alpha=0.75)
    ax.axvline(0.0, color=_ZERO_COLOR, linewidth=1.5, label="0")
    ax.axvline(q05, color=_LINE_COLOR, linewidth=2, label=f"q05 = {q05:+.4f}")
    if gain is not None and _present(gain):
        ax.axvline(gain, color=_MODEL_COLOR, linewidth=1.5, linestyle="--", label=f"G = {gain:+.4f}")
    ax.set_xlabel("G (model − Jev)")
    ax.set_ylabel("resamples")
    ax.set_title(title or f"Bootstrap of G ({len(values)} resamples)")
    _legend(ax, "upper left", "small")
    return _png(fig)


def metrics_png(names: Sequence[str], model: Sequence[float | None], jev: Sequence[float | None],
                margins: Sequence[float], *, model_label: str = "model",
                jev_label: str = "Jev") -> bytes:
    """Each metric, model vs Jev: the difference model − Jev as a bar, its margin as a red tick.

    ``margins`` are the largest drops allowed (positive numbers): a metric holds its margin when
    its bar does not reach below the tick at ``−margin`` (blue bar: held; red bar: broken). Each
    metric's label shows both values. A missing value (None or NaN) leaves its bar out and reads
    "n/a".

    >>> metrics_png(["macro_f1", "brier_skill"], [0.8, 0.2], [0.78, None], [0.02, 0.02])[:4]
    b'\\x89PNG'
    """
    n = _same_length("names, model, jev and margins", "pass one value per metric",
                     names=names, model=model, jev=jev, margins=margins)
    fig, ax = _figure()
    width = 0.6
    labels: list[str] = []
    for i in range(n):
        m, j = model[i], jev[i]
        both = m is not None and j is not None and _present(m) and _present(j)
        labels.append(f"{names[i]}\n{_short(m)} vs {_short(j)}")
        if both:
            assert m is not None and j is not None
            delta = m - j
            held = delta >= -margins[i]
            ax.bar(i, delta, width, color=_MODEL_COLOR if held else _LINE_COLOR)
        ax.hlines(-margins[i], i - width / 2 - 0.1, i + width / 2 + 0.1, colors=_LINE_COLOR,
                  linewidth=2, label="−margin (largest drop allowed)" if i == 0 else "_")
    ax.set_xticks(range(n), labels, fontsize="x-small")
    ax.axhline(0.0, color=_ZERO_COLOR, linewidth=0.8)
    ax.set_ylabel(f"{model_label} − {jev_label}")
    ax.set_title(f"Metrics: {model_label} − {jev_label}, against each margin")
    _legend(ax, "best", "x-small")
    return _png(fig)


def _short(value: float | None) -> str:
    return f"{value:.3f}" if value is not None and _present(value) else "n/a"


def leaderboard_png(labels: Sequence[str], oos: Sequence[float | None],
                    in_sample: Sequence[float | None], luck_line: float | None, *,
                    luck_line_95: float | None = None, winner: str | None = None) -> bytes:
    """Each candidate's out-of-sample score (y) against its in-sample score (x), with the luck line.

    The luck line is the score pure luck gives as the best of that many candidates; a point
    above it beat luck out of sample. The dotted diagonal is "out-of-sample = in-sample".
    Candidates missing either score are left out; ``winner`` (a label) is ringed.

    >>> leaderboard_png(["a", "b"], [0.52, 0.48], [0.60, 0.55], 0.51, winner="a")[:4]
    b'\\x89PNG'
    """
    _same_length("labels, oos and in_sample", "pass one value per candidate",
                 labels=labels, oos=oos, in_sample=in_sample)
    points = [(lab, x, y) for lab, y, x in zip(labels, oos, in_sample, strict=True)
              if x is not None and y is not None and _present(x) and _present(y)]
    fig, ax = _figure()
    if points:
        xs = [p[1] for p in points]
        ys = [p[2] for p in points]
        ax.scatter(xs, ys, color=_MODEL_COLOR, zorder=3, label="candidates")
        ax.margins(0.12)  # room for the labels and the winner's ring at the edges
        lo, hi = min(xs + ys), max(xs + ys)
        ax.plot([lo, hi], [lo, hi], color=_ZERO_COLOR, linestyle=":", linewidth=1,
                label="out-of-sample = in-sample")
        for lab, x, y in points:
            note = ax.annotate(lab, (x, y), textcoords="offset points", xytext=(4, 4),
                               fontsize="x-small")
            # inside the axes (the margins above): left out of the layout, which would measure
            # each label's text (half the picture's time with 64 candidates)
            note.set_in_layout(False)
            if winner is not None and lab == winner:
                ax.scatter([x], [y], s=160, facecolors="none", edgecolors=_LINE_COLOR, zorder=4,
                           label="winner")
    else:
        ax.text(0.5, 0.5, "no candidate has both scores yet", ha="center", va="center",
                transform=ax.transAxes)
    if luck_line is not None and _present(luck_line):
        ax.axhline(luck_line, color=_LINE_COLOR, linewidth=2, label=f"luck line {luck_line:.4f}")
    if luck_line_95 is not None and _present(luck_line_95):
        ax.axhline(luck_line_95, color=_LINE_COLOR, linewidth=1, linestyle="--",
                   label=f"95% luck line {luck_line_95:.4f}")
    ax.set_xlabel("in-sample score")
    ax.set_ylabel("out-of-sample score")
    ax.set_title("Leaderboard: out-of-sample vs in-sample")
    # upper left: low in-sample, high out-of-sample, the corner candidates rarely reach (an
    # overfit one sits lower right); "best" searched every point at each draw (a third of the time)
    _legend(ax, "upper left", "x-small")
    return _png(fig)


def lineage_png(seqs: Sequence[int], holdout_scores: Sequence[float | None],
                baseline_scores: Sequence[float | None] | None = None,
                holdout_ses: Sequence[float | None] | None = None, *,
                noise_line: float | None = None) -> bytes:
    """A lineage's winner holdout scores over its re-runs (position 0 is the first study).

    Error bars are ± one standard error when ``holdout_ses`` is given; the baseline's scores on
    the same holdouts are a second line; ``noise_line`` (on the score scale) is the best score
    expected of that many re-runs under noise alone.

    >>> lineage_png([0, 1, 2], [0.50, None, 0.56], [0.49, 0.5, 0.5], [0.01, None, 0.02],
    ...             noise_line=0.55)[:4]
    b'\\x89PNG'
    """
    base = list(baseline_scores) if baseline_scores is not None else [None] * len(seqs)
    ses = list(holdout_ses) if holdout_ses is not None else [None] * len(seqs)
    _same_length("seqs, holdout_scores, baseline_scores and holdout_ses",
                 "pass one value per re-run", seqs=seqs, holdout_scores=holdout_scores,
                 baseline_scores=base, holdout_ses=ses)
    fig, ax = _figure()
    pts = [(s, y, e) for s, y, e in zip(seqs, holdout_scores, ses, strict=True)
           if y is not None and _present(y)]
    if pts:
        errs = [e if e is not None and _present(e) else 0.0 for _, _, e in pts]
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=errs, marker="o",
                    color=_MODEL_COLOR, capsize=3, label="winner on its holdout")
    bpts = [(s, b) for s, b in zip(seqs, base, strict=True) if b is not None and _present(b)]
    if bpts:
        ax.plot([p[0] for p in bpts], [p[1] for p in bpts], marker="s", color=_JEV_COLOR,
                linestyle="--", label="baseline on the same holdout")
    if noise_line is not None and _present(noise_line):
        ax.axhline(noise_line, color=_LINE_COLOR, linewidth=2,
                   label=f"best expected under noise {noise_line:.4f}")
    if not pts and not bpts:
        ax.text(0.5, 0.5, "no holdout scored yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks(list(seqs))
    ax.set_xlabel("re-run (lineage position)")
    ax.set_ylabel("holdout score")
    ax.set_title("Lineage over re-runs")
    _legend(ax, "best", "x-small")
    return _png(fig)


def score_over_time_png(periods: Sequence[str], scores: Sequence[float | None], *,
                        mean_score: float | None = None) -> bytes:
    """A backtest's mean score per period (``periods`` are labels such as a first date).

    Periods without a scored step are left as gaps; ``mean_score`` (over every scored step)
    is a horizontal line.

    >>> score_over_time_png(["2015-01-01", "2015-02-01", "2015-03-01"], [0.6, None, 0.7],
    ...                     mean_score=0.65)[:4]
    b'\\x89PNG'
    """
    n = _same_length("periods and scores", "pass one score per period", periods=periods,
                     scores=scores)
    fig, ax = _figure()
    ys = [y if y is not None and _present(y) else math.nan for y in scores]
    ax.plot(range(n), ys, marker="o", color=_MODEL_COLOR, label="mean score of the period")
    if mean_score is not None and _present(mean_score):
        ax.axhline(mean_score, color=_LINE_COLOR, linewidth=1.5, linestyle="--",
                   label=f"overall mean {mean_score:.4f}")
    step = max(1, math.ceil(n / 6))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [periods[i] for i in ticks], fontsize="x-small")
    ax.set_xlabel("period (first day)")
    ax.set_ylabel("score")
    ax.set_title("Backtest score over time")
    _legend(ax, "best", "x-small")
    return _png(fig)
