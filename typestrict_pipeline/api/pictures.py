"""The pictures of the result page: the same ones the Dagster UI shows on ``metrics``/``verdict``.

Built from the stored audit with :mod:`typestrict_pipeline.plots` (headless matplotlib): per
decision, its metrics against Jev's with each margin, and the bootstrap distribution of G with
its 5th percentile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typestrict_pipeline import plots
from typestrict_pipeline.api.page import METRICS, Picture

_MARGINS = {"macro_f1": 0.02, "brier_skill": 0.02, "selective_acc_80": 0.02, "worst_class_f1": 0.05}


def result_pictures(audit: Mapping[str, Any]) -> list[Picture]:
    """Two PNG pictures per judged decision (none for a failed training)."""
    out: list[Picture] = []
    for d in audit.get("decisions", []):
        report = d["report"]
        name = str(d["name"])
        model, jev = report["metrics"]["model"], report["metrics"]["jev"]
        out.append(Picture(
            f"Metrics of {name}: model vs Jev, against each margin",
            plots.metrics_png(list(METRICS), [model.get(m) for m in METRICS],
                              [jev.get(m) for m in METRICS], [_MARGINS[m] for m in METRICS]),
        ))
        boot = report["bootstrap"]
        out.append(Picture(
            f"Bootstrap of G for {name}: 5th percentile {boot['q05']:+.4f}",
            plots.bootstrap_png(boot["gains"], boot["q05"], gain=report["gain"],
                                title=f"Bootstrap of G, {name} ({boot['resamples']} resamples)"),
        ))
    return out
