"""Render the summary of the last benchmark run as the Markdown table of docs/benchmarks.md.

Run: ``.venv/bin/python -m bench.render`` (after ``make bench``); paste its output into the
"One run" section of docs/benchmarks.md.
"""

from __future__ import annotations

import sys

from bench.summary import load, results_path


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The run's header line and one table row per figure (targets marked PASS/MISS)."""
    data = load()
    run = data.get("run", {})
    lines = [
        f"Run: {run.get('started', '?')} → {run.get('finished', '?')} "
        f"({run.get('seconds', '?')} s), {run.get('cores', '?')} cores, load average "
        f"{run.get('load_start', '?')} at the start and {run.get('load_end', '?')} at the end; "
        f"{'full' if run.get('full') else 'default (reduced where said)'} configuration. "
        f"Source: `{results_path().name}`.",
        "",
        "| what | ours | strongest alternative, same run | ratio | target | status | load | module |",
        "|---|---:|---:|---:|---|---|---:|---|",
    ]
    for r in data.get("rows", []):
        status = f"**{r['status']}**" if r["status"] else ""
        lines.append(
            "| " + " | ".join(_cell(x) for x in (
                r["what"], r["ours"], r["alternative"], r["ratio"], r["target"], status,
                f"{r['load']:.1f}", f"`bench/{r['bench']}.py`")) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render() + "\n")
