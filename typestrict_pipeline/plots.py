"""Pictures of the product's results, rendered headless: plain numbers in, PNG bytes out.

Each function draws one picture a person would rather look at than read, with matplotlib's Agg
canvas (no display, no pyplot state, safe in threads), and returns the PNG file as bytes:

* :func:`bootstrap_png` — a decision's bootstrap distribution of G, with its 5th percentile and 0;
* :func:`metrics_png` — each metric, model vs Jev, as model − Jev against its margin;
* :func:`leaderboard_png` — a study's out-of-sample vs in-sample scores, with the luck line;
* :func:`lineage_png` — a lineage's holdout scores over its re-runs, with the noise line;
* :func:`score_over_time_png` — a backtest's mean score per period.

Each ``*_png`` has a ``*_picture`` twin that also returns the drawn geometry (:class:`Picture`:
the axes, the legend, the labels), which the tests use to check what a reader sees: pictures
1,100 pixels wide with 11-14 pt text, the legend outside the data, the Okabe-Ito colour-blind-safe
palette (with line styles that differ too), and on a leaderboard labels that overlap nothing
(placed greedily around their points; beyond :data:`LABELLED_TOP` candidates the winner and the
best ranked carry their rank, named in a key beside the axes).

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

import numpy as np
import numpy.typing as npt

from typestrict_pipeline.errors import InputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

WIDTH_IN = 11.0
HEIGHT_IN = 5.5
DPI = 100  # 1100 x 550 pixels: readable at the size the UI shows it, fonts at least 11 px

# The Okabe-Ito palette: told apart with every common colour-vision deficiency (Okabe & Ito,
# "Color Universal Design", 2002; also matplotlib's "tableau-colorblind10" rationale). Lines that
# must be told apart also differ in style (solid, dashed, dotted), never in colour alone.
_MODEL_COLOR = "#0072B2"  # blue
_JEV_COLOR = "#E69F00"  # orange
_LINE_COLOR = "#D55E00"  # vermillion
_ZERO_COLOR = "#000000"  # black
_MUTED_COLOR = "#56B4E9"  # sky blue
_FONT = 12.0  # points: 16.7 px at 100 dpi
_SMALL = 11.0


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
    ax.tick_params(labelsize=_SMALL)
    return fig, ax


def _layout(fig: Figure) -> None:
    """Lay the figure out once (legend outside the axes included), then freeze the layout."""
    fig.tight_layout()
    # tight_layout leaves a placeholder layout engine behind, which makes savefig lay the
    # figure out again in a draw of its own (legend placement and all): drop it, same pixels
    fig.set_layout_engine(None)


def _png(fig: Figure, *, laid_out: bool = False) -> bytes:
    """The figure as PNG bytes, without the chunks that change between runs."""
    if not laid_out:
        _layout(fig)
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


def _legend(ax: Axes) -> None:
    """A legend outside the data, right of the axes, only when something carries a label (an
    empty one warns): it never hides a point or a bar."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  fontsize=_SMALL, frameon=False)


def _title(ax: Axes, text: str) -> None:
    ax.set_title(text, fontsize=_FONT + 2, loc="left")


def _labels(ax: Axes, x: str, y: str) -> None:
    ax.set_xlabel(x, fontsize=_FONT)
    ax.set_ylabel(y, fontsize=_FONT)


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
# Labels placed without overlap
# ------------------------------------------------------------------------------------------------

Box = tuple[float, float, float, float]
"""A rectangle in the picture's pixels: ``(x0, y0, x1, y1)``, origin bottom left."""

# Offsets tried around a point: 16 directions (every 22.5 degrees, right first, then above, ...)
# at growing distances, in points; beyond the second distance a thin leader line joins the label
# to its point.
_DIRECTIONS = tuple((math.cos(math.radians(a)), math.sin(math.radians(a)))
                    for a in (0, 90, 180, 270, 45, 135, 225, 315, 22.5, 67.5, 112.5, 157.5,
                              202.5, 247.5, 292.5, 337.5))
_DISTANCES = (6.0, 12.0, 22.0, 36.0, 54.0, 78.0, 110.0)


@dataclass(frozen=True)
class PlacedLabel:
    """A label drawn on a picture: its text, the point it names and where it sits (pixels)."""

    text: str
    point: tuple[float, float]
    box: Box


@dataclass(frozen=True)
class Picture:
    """A rendered picture and its geometry, for tests that check what a reader can see.

    Attributes:
        png: the PNG bytes.
        width: width in pixels.
        height: height in pixels.
        axes: the data area's box.
        legend: the legend's box (``None`` without a legend).
        labels: the labels drawn, none overlapping another, a point or the legend.
        markers: the boxes of the drawn points.
        unlabelled: how many points carry no label (a picture of many candidates labels the
            winner and the best ones only).
        key: the box of the key beside the axes that names the numbered points (``None``
            when the points carry their names).
        smallest_text: the height in pixels of the smallest font of any text drawn (titles,
            axis labels, tick labels, the legend, the key and the labels).
    """

    png: bytes
    width: int
    height: int
    axes: Box
    legend: Box | None
    labels: tuple[PlacedLabel, ...]
    markers: tuple[Box, ...] = ()
    unlabelled: int = 0
    key: Box | None = None
    smallest_text: float = 0.0


def overlaps(a: Box, b: Box) -> bool:
    """Whether two boxes share any area (touching edges do not count).

    >>> overlaps((0, 0, 2, 2), (1, 1, 3, 3)), overlaps((0, 0, 1, 1), (1, 0, 2, 1))
    (True, False)
    """
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(inner: Box, outer: Box) -> bool:
    return inner[0] >= outer[0] and inner[1] >= outer[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def _box(extent: Any) -> Box:
    return (float(extent.x0), float(extent.y0), float(extent.x1), float(extent.y1))


def _text_size(fig: Figure, ax: Axes, text: str, fontsize: float) -> tuple[float, float]:
    """Width and height in pixels of ``text`` as the figure's renderer draws it."""
    probe = ax.text(0.0, 0.0, text, fontsize=fontsize)
    ext = probe.get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
    probe.remove()
    return float(ext.width), float(ext.height)


def _hits(box: Box, blocks: npt.NDArray[np.float64]) -> bool:
    """Whether ``box`` overlaps any row ``(x0, y0, x1, y1)`` of ``blocks``."""
    return bool(np.any((blocks[:, 0] < box[2]) & (box[0] < blocks[:, 2])
                       & (blocks[:, 1] < box[3]) & (box[1] < blocks[:, 3])))


def _aligned_box(px: float, py: float, ox: float, oy: float, w: float, h: float,
                 ha: str, va: str) -> Box:
    x = px + ox
    y = py + oy
    x0 = x if ha == "left" else (x - w if ha == "right" else x - w / 2)
    y0 = y if va == "bottom" else (y - h if va == "top" else y - h / 2)
    return (x0, y0, x0 + w, y0 + h)


def _place_labels(fig: Figure, ax: Axes, points: Sequence[tuple[str, float, float]],
                  obstacles: Sequence[Box], *, pad: float = 2.0,
                  fontsize: float = _SMALL) -> list[PlacedLabel]:
    """Place each label next to its point where it overlaps nothing already drawn.

    Greedy, in the given order (most important first): each label tries offsets at growing
    distances in sixteen directions and takes the first whose box stays inside the axes and
    overlaps no placed label and no obstacle (the points); a label beyond the second distance
    gets a thin leader line to its point. A label that finds no place is left out (the caller
    says how many are). Text sizes come from the figure's own renderer after the layout, and
    each placed label's box is measured again once drawn, so the boxes are the drawn ones.
    """
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    area = _box(ax.get_window_extent(renderer))
    to_px = fig.dpi / 72.0
    taken: list[Box] = []
    placed: list[PlacedLabel] = []
    blocks = np.asarray(obstacles, dtype=float).reshape(-1, 4)
    for text, x, y in points:
        w, h = _text_size(fig, ax, text, fontsize)
        px, py = (float(v) for v in ax.transData.transform((x, y)))
        spot = None
        for dist in _DISTANCES:
            for dx, dy in _DIRECTIONS:
                ha = "left" if dx > 0.3 else ("right" if dx < -0.3 else "center")
                va = "bottom" if dy > 0.3 else ("top" if dy < -0.3 else "center")
                ox, oy = dx * dist * to_px, dy * dist * to_px
                box = _aligned_box(px, py, ox, oy, w, h, ha, va)
                padded = (box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad)
                if _inside(padded, area) and not any(overlaps(padded, t) for t in taken) \
                        and not _hits(padded, blocks):
                    spot = (dx * dist, dy * dist, ha, va, dist)
                    break
            if spot is not None:
                break
        if spot is None:
            continue
        ox, oy, ha, va, dist = spot
        note = ax.annotate(
            text, (x, y), xytext=(ox, oy), textcoords="offset points", fontsize=fontsize,
            ha=ha, va=va, annotation_clip=False, zorder=5,
            arrowprops=None if dist <= _DISTANCES[1] else {
                "arrowstyle": "-", "color": "#555555", "linewidth": 0.8, "shrinkA": 1, "shrinkB": 4})
        note.set_in_layout(False)
        # the text's own box (an annotation's includes its leader line)
        note.update_positions(renderer)
        drawn = _box(Text.get_window_extent(note, renderer))
        taken.append((drawn[0] - pad, drawn[1] - pad, drawn[2] + pad, drawn[3] + pad))
        placed.append(PlacedLabel(text, (px, py), drawn))
    return placed


def _marker_boxes(ax: Axes, xs: Sequence[float], ys: Sequence[float], size_pt2: float,
                  dpi: float) -> list[Box]:
    radius = math.sqrt(size_pt2) / 2.0 * dpi / 72.0 + 1.0
    out: list[Box] = []
    for x, y in zip(xs, ys, strict=True):
        px, py = ax.transData.transform((x, y))
        out.append((float(px) - radius, float(py) - radius, float(px) + radius, float(py) + radius))
    return out


def _picture(fig: Figure, ax: Axes, labels: Sequence[PlacedLabel] = (),
             markers: Sequence[Box] = (), unlabelled: int = 0, key: Box | None = None) -> Picture:
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legend = ax.get_legend()
    png = _png(fig, laid_out=True)
    width, height = (round(float(v)) for v in fig.get_size_inches() * fig.dpi)
    from matplotlib.text import Text

    sizes = [float(t.get_fontsize()) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip()]
    return Picture(
        png=png, width=width, height=height, axes=_box(ax.get_window_extent(renderer)),
        legend=None if legend is None else _box(legend.get_window_extent(renderer)),
        labels=tuple(labels), markers=tuple(markers), unlabelled=unlabelled, key=key,
        smallest_text=min(sizes, default=0.0) * fig.dpi / 72.0,
    )


# ------------------------------------------------------------------------------------------------
# The pictures
# ------------------------------------------------------------------------------------------------


def bootstrap_picture(gains: Sequence[float], q05: float, *, gain: float | None = None,
                      title: str = "") -> Picture:
    """:func:`bootstrap_png` with its geometry."""
    values = [g for g in gains if _present(g)]
    if not values:
        raise InputError("at least one finite G value", "none", "pass the bootstrap's gains")
    fig, ax = _figure()
    ax.hist(values, bins=min(50, max(5, len(values) // 20)), color=_MUTED_COLOR, alpha=0.9,
            label="G of each resample")
    ax.axvline(0.0, color=_ZERO_COLOR, linewidth=1.5, linestyle=":", label="0 (no gain)")
    ax.axvline(q05, color=_LINE_COLOR, linewidth=2.5, label=f"q05 = {q05:+.4f} (must be > 0)")
    if gain is not None and _present(gain):
        ax.axvline(gain, color=_MODEL_COLOR, linewidth=2, linestyle="--", label=f"G = {gain:+.4f}")
    _labels(ax, "G (model − Jev)", "resamples")
    _title(ax, title or f"Bootstrap of G ({len(values)} resamples)")
    _legend(ax)
    _layout(fig)
    return _picture(fig, ax)


def bootstrap_png(gains: Sequence[float], q05: float, *, gain: float | None = None,
                  title: str = "") -> bytes:
    """Histogram of the bootstrap's G values, with its 5th percentile (q05) and 0 marked.

    ``gain`` is the observed G (drawn as a dashed line when given). The gain is real when q05
    lies right of 0.

    >>> png = bootstrap_png([0.01, 0.02, 0.03, -0.01], q05=-0.01, gain=0.02, title="rotten")
    >>> png.startswith(PNG_SIGNATURE)
    True
    """
    return bootstrap_picture(gains, q05, gain=gain, title=title).png


def metrics_picture(names: Sequence[str], model: Sequence[float | None],
                    jev: Sequence[float | None], margins: Sequence[float], *,
                    model_label: str = "model", jev_label: str = "Jev") -> Picture:
    """:func:`metrics_png` with its geometry."""
    n = _same_length("names, model, jev and margins", "pass one value per metric",
                     names=names, model=model, jev=jev, margins=margins)
    fig, ax = _figure()
    width = 0.6
    labels: list[str] = []
    shown: set[bool] = set()
    for i in range(n):
        m, j = model[i], jev[i]
        both = m is not None and j is not None and _present(m) and _present(j)
        labels.append(f"{names[i]}\n{_short(m)} vs {_short(j)}")
        if both:
            assert m is not None and j is not None
            delta = m - j
            held = delta >= -margins[i]
            ax.bar(i, delta, width, color=_MODEL_COLOR if held else _LINE_COLOR,
                   hatch=None if held else "//", edgecolor="white" if held else _ZERO_COLOR,
                   label=("_" if held in shown else ("margin held" if held else "margin broken")))
            shown.add(held)
        ax.hlines(-margins[i], i - width / 2 - 0.1, i + width / 2 + 0.1, colors=_LINE_COLOR,
                  linewidth=2.5, label="−margin (largest drop allowed)" if i == 0 else "_")
    ax.set_xticks(range(n), labels, fontsize=_SMALL)
    ax.axhline(0.0, color=_ZERO_COLOR, linewidth=0.8)
    _labels(ax, "", f"{model_label} − {jev_label}")
    _title(ax, f"Metrics: {model_label} − {jev_label}, against each margin")
    _legend(ax)
    _layout(fig)
    return _picture(fig, ax)


def metrics_png(names: Sequence[str], model: Sequence[float | None], jev: Sequence[float | None],
                margins: Sequence[float], *, model_label: str = "model",
                jev_label: str = "Jev") -> bytes:
    """Each metric, model vs Jev: the difference model − Jev as a bar, its margin as a tick.

    ``margins`` are the largest drops allowed (positive numbers): a metric holds its margin when
    its bar does not reach below the tick at ``−margin`` (blue bar: held; vermillion, hatched
    bar: broken). Each metric's label shows both values. A missing value (None or NaN) leaves
    its bar out and reads "n/a".

    >>> metrics_png(["macro_f1", "brier_skill"], [0.8, 0.2], [0.78, None], [0.02, 0.02])[:4]
    b'\\x89PNG'
    """
    return metrics_picture(names, model, jev, margins, model_label=model_label,
                           jev_label=jev_label).png


def _short(value: float | None) -> str:
    return f"{value:.3f}" if value is not None and _present(value) else "n/a"


LABELLED_TOP = 12
"""A leaderboard picture labels every candidate up to this many, else the winner and this many
of the best ranked (a label that finds no free place is left out, and the picture says so)."""


def leaderboard_picture(labels: Sequence[str], oos: Sequence[float | None],
                        in_sample: Sequence[float | None], luck_line: float | None, *,
                        luck_line_95: float | None = None, winner: str | None = None,
                        top: int = LABELLED_TOP) -> Picture:
    """The leaderboard picture with its geometry (see :func:`leaderboard_png`).

    >>> pic = leaderboard_picture(["a", "b", "c"], [0.52, 0.48, 0.5], [0.6, 0.55, 0.5], 0.51, winner="a")
    >>> pic.width >= 1000, [p.text for p in pic.labels], pic.unlabelled
    (True, ['a', 'b', 'c'], 0)
    """
    _same_length("labels, oos and in_sample", "pass one value per candidate",
                 labels=labels, oos=oos, in_sample=in_sample)
    # (rank, label, x, y): the rank is the position in ``labels`` (ranking order, best first)
    points = [(i + 1, lab, x, y) for i, (lab, y, x) in enumerate(zip(labels, oos, in_sample, strict=True))
              if x is not None and y is not None and _present(x) and _present(y)]
    fig, ax = _figure()
    size = 60.0 if len(points) <= 64 else 24.0
    xs = [p[2] for p in points]
    ys = [p[3] for p in points]
    best = next((p for p in points if p[1] == winner), None)
    if points:
        ax.scatter(xs, ys, s=size, color=_MODEL_COLOR, alpha=0.85 if len(points) <= 64 else 0.6,
                   edgecolors="white", linewidths=0.5, zorder=3, label=f"candidates ({len(points)})")
        lo, hi = min(xs + ys), max(xs + ys)
        ax.plot([lo, hi], [lo, hi], color=_ZERO_COLOR, linestyle=":", linewidth=1,
                label="out-of-sample = in-sample")
        if best is not None:
            ax.scatter([best[2]], [best[3]], s=size * 4, facecolors="none", edgecolors=_LINE_COLOR,
                       linewidths=2, zorder=4, label=f"winner: {_clip(best[1], 40)}")
        ax.margins(0.18)  # room for labels at the edges
    else:
        ax.text(0.5, 0.5, "no candidate has both scores yet", ha="center", va="center",
                transform=ax.transAxes, fontsize=_FONT)
    if luck_line is not None and _present(luck_line):
        ax.axhline(luck_line, color=_LINE_COLOR, linewidth=2, label=f"luck line {luck_line:.4f}")
    if luck_line_95 is not None and _present(luck_line_95):
        ax.axhline(luck_line_95, color=_LINE_COLOR, linewidth=1.5, linestyle="--",
                   label=f"95% luck line {luck_line_95:.4f}")
    _labels(ax, "in-sample score", "out-of-sample score")
    _title(ax, "Leaderboard: out-of-sample vs in-sample")
    _legend(ax)
    # the winner first, then the best ranked: every candidate up to ``top``, else ``top`` of them
    chosen = ([best] if best is not None else []) + [p for p in points if p is not best][:top]
    numbered = len(points) > top
    key = None
    if numbered:  # many candidates: rank numbers on the points, their names in a key beside
        key = ax.text(1.01, 0.0, _key_text(chosen, best, set()), transform=ax.transAxes,
                      fontsize=_SMALL, va="bottom", ha="left", family="monospace", color="#222222")
    _layout(fig)
    ax.set_autoscale_on(False)  # labels added now must not move the axes they were measured on
    markers = _marker_boxes(ax, xs, ys, size, fig.dpi)
    rings = [] if best is None else _marker_boxes(ax, [best[2]], [best[3]], size * 4, fig.dpi)
    tags = [(str(r) if numbered else _clip(lab, 40), x, y) for r, lab, x, y in chosen]
    placed = _place_labels(fig, ax, tags, markers + rings)
    if key is not None:
        marked = {p.text for p in placed}
        key.set_text(_key_text(chosen, best, {r for r, _, _, _ in chosen if str(r) not in marked}))
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    key_box = None if key is None else _box(key.get_window_extent(renderer))
    return _picture(fig, ax, placed, markers, len(points) - len(placed), key_box)


_Point = tuple[int, str, float, float]


def _key_text(chosen: Sequence[_Point], best: _Point | None, unmarked: set[int]) -> str:
    """The key of a numbered picture: each marked rank and its candidate's label."""
    width = len(str(max((p[0] for p in chosen), default=1)))
    lines = ["ranked (number on the point):"]
    for point in sorted(chosen):
        rank, lab = point[0], point[1]
        shown = str(rank).rjust(width) if rank not in unmarked else "-".rjust(width)
        lines.append(f"{shown}  {_clip(lab, 32)}" + ("  (winner)" if point is best else ""))
    return "\n".join(lines)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def leaderboard_png(labels: Sequence[str], oos: Sequence[float | None],
                    in_sample: Sequence[float | None], luck_line: float | None, *,
                    luck_line_95: float | None = None, winner: str | None = None) -> bytes:
    """Each candidate's out-of-sample score (y) against its in-sample score (x), with the luck line.

    The luck line is the score pure luck gives as the best of that many candidates; a point
    above it beat luck out of sample. The dotted diagonal is "out-of-sample = in-sample".
    Candidates missing either score are left out; ``winner`` (a label) is ringed. ``labels``
    come in ranking order, best first: up to :data:`LABELLED_TOP` candidates every one is
    labelled, beyond that the winner and the best ranked; labels never overlap one another, a
    point or the legend (which sits outside the data).

    >>> leaderboard_png(["a", "b"], [0.52, 0.48], [0.60, 0.55], 0.51, winner="a")[:4]
    b'\\x89PNG'
    """
    return leaderboard_picture(labels, oos, in_sample, luck_line, luck_line_95=luck_line_95,
                               winner=winner).png


def lineage_picture(seqs: Sequence[int], holdout_scores: Sequence[float | None],
                    baseline_scores: Sequence[float | None] | None = None,
                    holdout_ses: Sequence[float | None] | None = None, *,
                    noise_line: float | None = None) -> Picture:
    """:func:`lineage_png` with its geometry."""
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
                    color=_MODEL_COLOR, capsize=3, label="winner on its holdout (± 1 SE)")
    bpts = [(s, b) for s, b in zip(seqs, base, strict=True) if b is not None and _present(b)]
    if bpts:
        ax.plot([p[0] for p in bpts], [p[1] for p in bpts], marker="s", color=_JEV_COLOR,
                linestyle="--", label="baseline on the same holdout")
    if noise_line is not None and _present(noise_line):
        ax.axhline(noise_line, color=_LINE_COLOR, linewidth=2, linestyle="-.",
                   label=f"best expected under noise {noise_line:.4f}")
    if not pts and not bpts:
        ax.text(0.5, 0.5, "no holdout scored yet", ha="center", va="center", transform=ax.transAxes,
                fontsize=_FONT)
    ax.set_xticks(list(seqs))
    _labels(ax, "re-run (lineage position)", "holdout score")
    _title(ax, "Lineage over re-runs")
    _legend(ax)
    _layout(fig)
    return _picture(fig, ax)


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
    return lineage_picture(seqs, holdout_scores, baseline_scores, holdout_ses,
                           noise_line=noise_line).png


def score_over_time_picture(periods: Sequence[str], scores: Sequence[float | None], *,
                            mean_score: float | None = None) -> Picture:
    """:func:`score_over_time_png` with its geometry."""
    n = _same_length("periods and scores", "pass one score per period", periods=periods,
                     scores=scores)
    fig, ax = _figure()
    ys = [y if y is not None and _present(y) else math.nan for y in scores]
    ax.plot(range(n), ys, marker="o", color=_MODEL_COLOR, label="mean score of the period")
    if mean_score is not None and _present(mean_score):
        ax.axhline(mean_score, color=_LINE_COLOR, linewidth=1.5, linestyle="--",
                   label=f"overall mean {mean_score:.4f}")
    step = max(1, math.ceil(n / 8))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [periods[i] for i in ticks], fontsize=_SMALL)
    _labels(ax, "period (first day)", "score")
    _title(ax, "Backtest score over time")
    _legend(ax)
    _layout(fig)
    return _picture(fig, ax)



def score_over_time_png(periods: Sequence[str], scores: Sequence[float | None], *,
                        mean_score: float | None = None) -> bytes:
    """A backtest's mean score per period (``periods`` are labels such as a first date).

    Periods without a scored step are left as gaps; ``mean_score`` (over every scored step)
    is a horizontal line.

    >>> score_over_time_png(["2015-01-01", "2015-02-01", "2015-03-01"], [0.6, None, 0.7],
    ...                     mean_score=0.65)[:4]
    b'\\x89PNG'
    """
    return score_over_time_picture(periods, scores, mean_score=mean_score).png
