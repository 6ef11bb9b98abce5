"""Cost of a leaderboard picture a reader can use, at 12, 64 and 500 candidates (CPU seconds).

* ours: :func:`typestrict_pipeline.plots.leaderboard_png` (1,100 x 550 px; labels placed without
  overlap, every candidate up to 12, beyond that the winner and the 12 best ranked by rank number
  with a key; legend outside the data);
* the alternative: the picture as it was before issue #26 (512 x 256 px, every point annotated
  where it lies, the legend inside the axes), the straightforward way to label a scatter.

The finalize step of every study draws one (docs/benchmarks.md). Candidates are seeded draws
bunched together as a real search's are.

Run: ``.venv/bin/python -m bench.bench_ui_pictures`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import functools
import io
import random
import statistics
import time
from collections.abc import Callable, Sequence

from bench.summary import row
from typestrict_pipeline import plots


def _candidates(n: int) -> tuple[list[str], list[float | None], list[float | None]]:
    rng = random.Random(26)
    ins = [rng.gauss(0.60, 0.015) for _ in range(n)]
    oos = [x - 0.05 + rng.gauss(0, 0.008) for x in ins]
    order = sorted(range(n), key=lambda i: -oos[i])
    labels = [f"threshold={0.3 + 0.4 * i / max(1, n - 1):.4f}" for i in range(n)]
    return [labels[i] for i in order], [oos[i] for i in order], [ins[i] for i in order]


def every_point_labelled(labels: Sequence[str], oos: Sequence[float | None],
                         in_sample: Sequence[float | None], luck_line: float, winner: str) -> bytes:
    """The picture before: 512 x 256 px, each point annotated where it lies, legend inside."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.2), dpi=80)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    pts = [(lab, x, y) for lab, y, x in zip(labels, oos, in_sample, strict=True) if x is not None and y is not None]
    ax.scatter([p[1] for p in pts], [p[2] for p in pts], zorder=3, label="candidates")
    ax.margins(0.12)
    for lab, x, y in pts:
        note = ax.annotate(lab, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
        note.set_in_layout(False)
        if lab == winner:
            ax.scatter([x], [y], s=160, facecolors="none", edgecolors="red", zorder=4, label="winner")
    ax.axhline(luck_line, color="red", linewidth=2, label=f"luck line {luck_line:.4f}")
    ax.legend(loc="upper left", fontsize="x-small")
    fig.tight_layout()
    fig.set_layout_engine(None)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, metadata={"Software": None})
    return buf.getvalue()


def _cpu(fn: Callable[[], bytes], repeats: int = 5) -> float:
    fn()  # fonts and caches warm
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> None:
    name = "bench_ui_pictures"
    for n in (12, 64, 500):
        labels, oos, ins = _candidates(n)
        ours = _cpu(functools.partial(plots.leaderboard_png, labels, oos, ins, 0.56, winner=labels[0]))
        before = _cpu(functools.partial(every_point_labelled, labels, oos, ins, 0.56, labels[0]))
        pic = plots.leaderboard_picture(labels, oos, ins, 0.56, winner=labels[0])
        row(name, f"leaderboard picture, {n} candidates ({len(pic.labels)} labels placed, none overlapping)",
            f"{ours:.3f} s CPU", alternative=f"{before:.3f} s CPU (512 x 256, every point labelled where it lies)",
            ratio=f"{ours / before:.2f}x", numbers={"ours_s": ours, "alternative_s": before})


if __name__ == "__main__":
    main()
