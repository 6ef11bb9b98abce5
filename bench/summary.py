"""The machine-readable summary of a benchmark run, and the PASS/MISS lines of its targets.

Every benchmark module calls :func:`row` for each figure worth quoting: what was measured, our
figure, the strongest alternative measured in the same run, their ratio, and — for the issue's
targets — the target and whether it holds. The rows are printed (targets with ``[PASS]`` or
``[MISS]`` in front) and merged into ``bench/results/latest.json`` (or ``$TYPESTRICT_BENCH_RESULTS``;
git-ignored output). ``python -m bench`` starts that file afresh and ends with every target's
line; ``python -m bench.render`` turns the file into the table pasted into docs/benchmarks.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).resolve().parent / "results" / "latest.json"


def results_path() -> Path:
    """Where the summary goes: ``$TYPESTRICT_BENCH_RESULTS`` or ``bench/results/latest.json``."""
    return Path(os.environ.get("TYPESTRICT_BENCH_RESULTS", str(DEFAULT_PATH)))


def load() -> dict[str, Any]:
    """The summary written so far (an empty one when there is none)."""
    path = results_path()
    if path.is_file():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {"run": {}, "rows": []}


def _save(data: dict[str, Any]) -> None:
    path = results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


def start_run() -> None:
    """Begin a full run: a fresh file that records when, where and under what load."""
    _save({"run": {"started": _now(), "cores": os.cpu_count(), "load_start": _load(),
                   "full": bool(os.environ.get("TYPESTRICT_BENCH_FULL"))}, "rows": []})


def end_run(seconds: float) -> None:
    """Close a full run (its duration and the load at the end)."""
    data = load()
    data["run"].update({"finished": _now(), "seconds": round(seconds, 1), "load_end": _load()})
    _save(data)


def row(
    bench: str,
    what: str,
    ours: str,
    *,
    alternative: str = "",
    ratio: str = "",
    target: str = "",
    ok: bool | None = None,
    numbers: dict[str, float] | None = None,
) -> None:
    """Print one figure and merge it into the summary (keyed by ``bench`` and ``what``).

    Args:
        bench: the module (``bench_refund_group_bootstrap``).
        what: what was measured.
        ours: our figure, as quoted (``"0.036 s CPU"``).
        alternative: the strongest alternative in the same run, as quoted.
        ratio: ours against it, as quoted (``"2.0× the floor"``).
        target: the issue's target, when there is one (``"≤ 3× the floor"``).
        ok: whether the target holds (``None`` when there is no target).
        numbers: the raw figures (seconds, ratios) for anyone who wants to recompute.
    """
    status = "" if ok is None else ("PASS" if ok else "MISS")
    entry = {"bench": bench, "what": what, "ours": ours, "alternative": alternative,
             "ratio": ratio, "target": target, "status": status, "load": _load(),
             "at": _now(), "numbers": numbers or {}}
    tag = f"[{status}] " if status else "  "
    extra = f" vs {alternative}" if alternative else ""
    extra += f" -> {ratio}" if ratio else ""
    extra += f" (target {target})" if target else ""
    print(f"{tag}{what}: {ours}{extra}", flush=True)
    data = load()
    data["rows"] = [r for r in data["rows"] if (r["bench"], r["what"]) != (bench, what)] + [entry]
    _save(data)


def targets() -> list[dict[str, Any]]:
    """The rows that carry a target, in the order they were recorded."""
    return [r for r in load()["rows"] if r["status"]]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _load() -> float:
    return round(os.getloadavg()[0], 2)
