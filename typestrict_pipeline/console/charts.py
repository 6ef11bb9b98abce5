"""The leaderboard's interactive chart: a Vega-Lite spec whose data is the API's own route.

One picture that stays readable from 4 to 500 candidates: candidates along x by rank (the
ranking is Adjusted), each with its Out-of-sample score (filled), its In-sample score (hollow)
and the overfit gap between them as a thin rule; the luck line (the best score pure luck gives
among that many candidates) across. Marks shrink and thin as candidates grow; x labels are a
handful of ranks, never one per candidate. Interaction: a tooltip per candidate (``#N`` and its
parameters, as the table names it, and every column), drag or wheel to zoom on ranks
(double-click resets), and a click on a legend entry to show one series alone. The table under the chart has every number, so the
chart is never the only way to read them.

A study of many candidates has its chart draw the top ranks only (``shown``, the study page's
:data:`~typestrict_pipeline.console.board_pages.TOP_K`, or down to the winner's rank): the
data URL asks the API for that many rows (``?limit=``), and the description says how many of
how many are drawn and that the rest are summarised under the table.

>>> spec = leaderboard_spec(7, n_candidates=500, luck_line=0.52)
>>> spec["data"]["url"], spec["data"]["format"]["property"]
('/v1/studies/7/leaderboard', 'rows')
>>> top = leaderboard_spec(7, n_candidates=10_000, luck_line=0.52, shown=100)
>>> top["data"]["url"], top["layer"][1]["encoding"]["x"]["scale"]["domain"]
('/v1/studies/7/leaderboard?limit=100', [0.5, 100.5])
>>> point_size(4), point_size(500)
(80, 12)
"""

from __future__ import annotations

from typing import Any

SERIES = {"oos": "Out-of-sample", "in_sample": "In-sample", "adjusted": "Adjusted"}


def point_size(n_candidates: int) -> int:
    """A point's area in px²: 80 for a handful, down to 12 from about 300 candidates."""
    return max(12, min(80, round(4000 / max(n_candidates, 1))))


def chart_text(n_candidates: int, shown: int | None = None) -> str:
    """What the chart draws, in words (its description and the page's ``aria-label``).

    >>> chart_text(12)
    '12 candidates by rank'
    >>> chart_text(10_000, 100)
    'the top 100 of 10,000 ranked candidates by rank (the other 9,900 are summarised under the table)'
    """
    if shown is None or shown >= n_candidates:
        return f"{n_candidates:,} candidates by rank"
    return (f"the top {shown:,} of {n_candidates:,} ranked candidates by rank (the other "
            f"{n_candidates - shown:,} are summarised under the table)")


def leaderboard_spec(study_id: int, *, n_candidates: int, luck_line: float | None,
                     shown: int | None = None) -> dict[str, Any]:
    """The Vega-Lite spec of a study's leaderboard chart (data read from the API).

    ``n_candidates`` are the ranked candidates; ``shown`` (fewer) draws the top that many ranks
    only, fetched with ``?limit=``."""
    top = shown is not None and shown < n_candidates
    drawn = shown if shown is not None and top else n_candidates
    url = f"/v1/studies/{study_id}/leaderboard" + (f"?limit={drawn}" if top else "")
    size = point_size(drawn)
    rule_width = 1.5 if drawn <= 40 else 0.6
    tooltip = [
        {"field": "rank", "title": "Rank", "type": "quantitative"},
        {"field": "candidate_name", "title": "Candidate", "type": "nominal"},
        {"field": "adjusted", "title": "Adjusted", "type": "quantitative", "format": ".4f"},
        {"field": "oos", "title": "Out-of-sample", "type": "quantitative", "format": ".4f"},
        {"field": "in_sample", "title": "In-sample", "type": "quantitative", "format": ".4f"},
        {"field": "gap", "title": "Overfit gap", "type": "quantitative", "format": ".4f"},
        {"field": "cost_usd", "title": "Cost (USD)", "type": "quantitative", "format": ".6f"},
    ]
    x = {"field": "rank", "type": "quantitative", "title": "Rank (by Adjusted)",
         "scale": {"domain": [0.5, max(drawn, 1) + 0.5], "nice": False, "zero": False},
         "axis": {"format": "d", "tickMinStep": 1, "tickCount": min(10, max(drawn, 1)),
                  "labelOverlap": True, "grid": False}}
    layers: list[dict[str, Any]] = [
        {"mark": {"type": "rule", "strokeWidth": rule_width, "color": "#8a939c"},
         "encoding": {"x": x, "y": {"field": "oos", "type": "quantitative"}, "y2": {"field": "in_sample"},
                      "tooltip": tooltip}},
        {"transform": [{"fold": list(SERIES), "as": ["series_key", "score"]},
                       {"filter": "isValid(datum.score)"},
                       {"calculate": "{'oos': 'Out-of-sample', 'in_sample': 'In-sample', 'adjusted': 'Adjusted'}"
                                     "[datum.series_key]", "as": "series"}],
         "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"},
                    {"name": "pick", "select": {"type": "point", "fields": ["series"]}, "bind": "legend"}],
         "mark": {"type": "point", "size": size, "strokeWidth": 1.5},
         "encoding": {
             "x": x,
             "y": {"field": "score", "type": "quantitative", "title": "Score", "scale": {"zero": False}},
             "color": {"field": "series", "type": "nominal", "title": None,
                       "scale": {"domain": list(SERIES.values()), "range": ["#0072B2", "#D55E00", "#009E73"]},
                       "legend": {"orient": "top", "direction": "horizontal"}},
             "shape": {"field": "series", "type": "nominal",
                       "scale": {"domain": list(SERIES.values()), "range": ["circle", "circle", "square"]}},
             "fill": {"condition": {"test": "datum.series !== 'In-sample'", "field": "series", "type": "nominal",
                                    "scale": {"domain": list(SERIES.values()),
                                              "range": ["#0072B2", "#D55E00", "#009E73"]}, "legend": None},
                      "value": "white"},
             "opacity": {"condition": {"param": "pick", "value": 0.95}, "value": 0.08},
             "tooltip": tooltip,
         }},
    ]
    if luck_line is not None:
        layers.append({"data": {"values": [{"luck": luck_line, "text": "best expected by luck"}]},
                       "layer": [
                           {"mark": {"type": "rule", "strokeDash": [6, 4], "color": "#444"},
                            "encoding": {"y": {"field": "luck", "type": "quantitative"}}},
                           {"mark": {"type": "text", "align": "right", "baseline": "bottom", "dy": -3,
                                     "x": "width", "color": "#333"},
                            "encoding": {"y": {"field": "luck", "type": "quantitative"},
                                         "text": {"field": "text"}}}]})
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "description": (f"Leaderboard of study {study_id}: {chart_text(n_candidates, shown)}, each with "
                        "its out-of-sample, in-sample and adjusted score; the dashed line is the best "
                        "score luck alone would give. The table below lists every number."),
        "width": "container", "height": 320, "autosize": {"type": "fit-x", "contains": "padding"},
        "data": {"url": url, "format": {"type": "json", "property": "rows"}},
        "transform": [{"filter": "isValid(datum.rank)"},
                      {"calculate": "datum.candidate + ' ' + datum.label", "as": "candidate_name"},
                      {"calculate": "isValid(datum.cost_micro) ? datum.cost_micro / 1000000 : null",
                       "as": "cost_usd"}],
        "layer": layers,
        "config": {"font": "system-ui, sans-serif", "axis": {"labelFontSize": 12, "titleFontSize": 13},
                   "legend": {"labelFontSize": 12}, "view": {"stroke": None}},
    }


__all__ = ["chart_text", "leaderboard_spec", "point_size"]
