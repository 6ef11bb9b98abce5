"""The demo workflow on real data: "will it rain in Seattle tomorrow?".

Data: Seattle daily weather 2012-01-01 .. 2015-12-31 (NOAA, public domain), the CSV bundled in
the ``vega_datasets`` wheel, read by path (offline; the package is not imported). Columns
``precipitation`` (mm), ``temp_max``, ``temp_min`` (°C), ``wind`` (m/s), ``weather``.

Point-in-time model: a day's row describes that day (``event_time`` = the day at 00:00 UTC) and
becomes known at the end of that day (``known_time`` = the next day at 00:00 UTC). The dates are
Seattle's local dates; we put them on the UTC calendar as they are (no time-zone shift), which
changes nothing in what is knowable since both times move together.

* **Decision** at ``t`` (the end of day D, i.e. D+1 00:00): look back ``lookback_days`` known
  days, describe them in the ``forecast`` prompt, ask the ``forecaster`` model for the
  probability of rain on day D+1; decide ``rain = p >= threshold``.
* **What happened next** (the outcome): whether day D+1 had precipitation > 0 mm, read from the
  data as known at ``t + 1 day`` (the end of day D+1). It rains on 42.6% of the 1,461 days.
* **Score**: 1.0 if ``rain`` matches the outcome, else 0.0 (so the mean score is the accuracy;
  always predicting "dry" scores about 0.574, persistence about 0.72).

The model here is :func:`standin_answer` behind the project's stand-in OpenAI-compatible server
(``typestrict_pipeline.clients.standin``): a fixed, hand-written logistic rule over the numbers
in the prompt, **not a language model**, so runs are deterministic and offline.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import math
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from typestrict_pipeline.backtest.metering import ModelPrice, PriceTable
from typestrict_pipeline.backtest.pit import (
    PointInTimeTable,
    SourceStamp,
    format_time,
    source_stamp,
)
from typestrict_pipeline.backtest.workflow import (
    DecisionContext,
    OutcomeContext,
    Param,
    ScoreContext,
    Workflow,
    WorkflowFixture,
)
from typestrict_pipeline.errors import DatasetError
from typestrict_pipeline.lazy import LazyModule

if TYPE_CHECKING:  # imported on first use: keeps the code location's load quick
    import pandas as pd
else:
    pd = LazyModule("pandas")

__all__ = [
    "DEMO_MODEL",
    "DEMO_PRICES",
    "FIRST_DECISION",
    "LAST_DECISION",
    "WEATHER",
    "load_seattle_weather",
    "parse_probability",
    "standin_answer",
    "standin_probability",
    "weather_fixture",
    "write_seattle_csv",
]

TABLE = "weather"
DEMO_MODEL = "standin-forecaster"
# Illustrative list prices of a small hosted model: $0.15 per 1M input tokens, $0.60 per 1M output.
DEMO_PRICES = PriceTable(models={DEMO_MODEL: ModelPrice(150_000, 600_000)})
FIRST_DECISION = dt.datetime(2012, 1, 2, tzinfo=dt.UTC)  # end of 2012-01-01: its row is known
LAST_DECISION = dt.datetime(2015, 12, 31, tzinfo=dt.UTC)  # end of 2015-12-30: 12-31 is next

FORECAST_PROMPT = (
    "You forecast rain in Seattle. Date: {date}. It rained on {rainy_days} of the last "
    "{lookback_days} days ({total_mm:.1f} mm in all). Today: {today_mm:.1f} mm, high "
    "{temp_max:.1f} C, low {temp_min:.1f} C, wind {wind:.1f} m/s, {weather}. "
    "What is the probability that it rains tomorrow? Answer with one number between 0 and 1."
)


def _csv_path() -> Path:
    spec = importlib.util.find_spec("vega_datasets")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            "the vega_datasets package (it bundles seattle-weather.csv)",
            "it is not installed",
            "pip install vega_datasets==0.9.0 (make demo installs it)",
        )
    return Path(next(iter(spec.submodule_search_locations))) / "_data" / "seattle-weather.csv"


_FRAME: dict[str, tuple[SourceStamp, pd.DataFrame]] = {}
_FRAME_LOCK = threading.Lock()


def _read_frame(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise DatasetError("a readable seattle-weather.csv", str(exc), "reinstall vega_datasets",
                           file=str(path)) from exc
    day = pd.to_datetime(df["date"], format="%Y/%m/%d").dt.tz_localize("UTC")
    return pd.DataFrame({
        "event_time": day,
        "known_time": day + pd.Timedelta(days=1),
        "precipitation": df["precipitation"].astype(float),
        "temp_max": df["temp_max"].astype(float),
        "temp_min": df["temp_min"].astype(float),
        "wind": df["wind"].astype(float),
        "weather": df["weather"].astype(str),
    })


def _frame() -> pd.DataFrame:
    """The CSV as a point-in-time frame; read again whenever the file changed (never a cache
    that outlives new data: one ``stat`` per call decides, see :func:`read_csv_fresh`)."""
    path = _csv_path()
    stamp = source_stamp(path)
    with _FRAME_LOCK:
        kept = _FRAME.get(str(path))
    if kept is not None and kept[0] == stamp:
        return kept[1]
    frame = _read_frame(path)
    if source_stamp(path) == stamp:
        with _FRAME_LOCK:
            _FRAME[str(path)] = (stamp, frame)
    return frame


def load_seattle_weather(*, until: dt.datetime | None = None) -> PointInTimeTable:
    """The Seattle weather table (1,461 days), optionally only the rows known by ``until``.

    >>> table = load_seattle_weather()
    >>> table.n_rows, table.first_known.date().isoformat(), table.last_known.date().isoformat()
    (1461, '2012-01-02', '2016-01-01')
    """
    df = _frame()
    if until is not None:
        df = df[df["known_time"] <= pd.Timestamp(until)]
    return PointInTimeTable.from_frame(TABLE, df, file=str(_csv_path()))


def write_seattle_csv(
    path: str | Path, *, known_after: dt.datetime | None = None, known_until: dt.datetime | None = None
) -> int:
    """Write the Seattle rows known in ``(known_after, known_until]`` as a point-in-time CSV
    (``event_time``, ``known_time`` in ISO 8601 with ``Z``, then the value columns): the file
    ``typestrict data register`` and ``typestrict data append`` take. Returns the row count.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "w.csv"
    >>> write_seattle_csv(f, known_until=dt.datetime(2012, 1, 3, tzinfo=dt.UTC))
    2
    >>> f.read_text().splitlines()[1]
    '2012-01-01T00:00:00Z,2012-01-02T00:00:00Z,0.0,12.8,5.0,4.7,drizzle'
    """
    df = _frame()
    if known_after is not None:
        df = df[df["known_time"] > pd.Timestamp(known_after)]
    if known_until is not None:
        df = df[df["known_time"] <= pd.Timestamp(known_until)]
    out = df.copy()
    for col in ("event_time", "known_time"):
        out[col] = [format_time(t.to_pydatetime()) for t in out[col]]
    from typestrict_pipeline.files import write_atomic

    write_atomic(path, out.to_csv(index=False).encode())
    return len(out)


def parse_probability(text: str) -> float:
    """The first number in a model's answer, as a probability.

    Raises:
        ValueError: no number in [0, 1] in the answer.

    >>> parse_probability("0.63"), parse_probability("About 40%")
    (0.63, 0.4)
    """
    m = re.search(r"(\d+(?:\.\d+)?)\s*(%?)", text)
    if m:
        value = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
        if 0.0 <= value <= 1.0:
            return value
    raise ValueError(
        f"expected a probability between 0 and 1 in the model's answer, got {text[:80]!r}. "
        "Check the forecast prompt asks for one number."
    )


def decide(ctx: DecisionContext) -> dict[str, Any]:
    """Describe the last ``lookback_days`` known days, ask the forecaster, apply the threshold."""
    from typestrict_pipeline.values import prompt_text

    view = ctx.data[TABLE]
    lookback = int(ctx.params["lookback_days"])
    recent = view.tail(lookback)
    precip = recent["precipitation"]
    today = len(precip) - 1
    fields = {
        "date": str(recent["event_time"][today].astype("datetime64[D]")),
        "rainy_days": int(np.count_nonzero(precip > 0)),
        "lookback_days": len(precip),
        "total_mm": float(precip.sum()),
        "today_mm": float(precip[today]),
        "temp_max": float(recent["temp_max"][today]),
        "temp_min": float(recent["temp_min"][today]),
        "wind": float(recent["wind"][today]),
        # A text cell of the data goes into the prompt escaped (plain words as they are,
        # anything else as a quoted JSON string): a cell can never read as an instruction.
        "weather": prompt_text(recent["weather"][today]),
    }
    prompt = ctx.prompts["forecast"].format(**fields)
    answer = ctx.models["forecaster"].complete([{"role": "user", "content": prompt}], max_tokens=8)
    p = parse_probability(answer.text)
    return {"p_rain": p, "rain": p >= float(ctx.params["threshold"])}


def outcome(ctx: OutcomeContext) -> dict[str, Any] | None:
    """Whether the day after the decision had any precipitation (known at its end)."""
    view = ctx.data[TABLE]
    # The day after the decision's day D is the day that starts at t (= D+1 00:00).
    mm = float(view.get("precipitation", ctx.t))
    if math.isnan(mm):
        return None
    return {"rain": mm > 0.0, "precipitation_mm": mm}


def score(decision: dict[str, Any], happened: dict[str, Any], ctx: ScoreContext) -> float:
    """1.0 for a right call, 0.0 for a wrong one."""
    return 1.0 if bool(decision["rain"]) == bool(happened["rain"]) else 0.0


_NUMBERS = {
    "rainy": re.compile(r"rained on (\d+) of the last (\d+) days"),
    "today": re.compile(r"Today: (-?\d+(?:\.\d+)?) mm"),
    "date": re.compile(r"Date: (\d{4})-(\d{2})-(\d{2})"),
}


def standin_probability(prompt: str) -> float:
    """The stand-in forecaster's rule: a logistic function of the numbers in the prompt.

    ``z = -1.2 + 2.0 * rainy_fraction + 1.2 * [today > 0 mm] + 0.03 * min(today_mm, 20)
    + 0.6 * cos(2 pi (month - 1) / 12)`` (wetter winters); missing numbers count as 0 (the
    fraction as 0.5). Hand-written, not fitted to the data; deterministic.

    >>> round(standin_probability("Date: 2013-01-05. It rained on 6 of the last 7 days "
    ...     "(20.0 mm in all). Today: 4.0 mm"), 3)
    0.919
    """
    frac = 0.5
    m = _NUMBERS["rainy"].search(prompt)
    if m and int(m.group(2)) > 0:
        frac = int(m.group(1)) / int(m.group(2))
    today = 0.0
    m = _NUMBERS["today"].search(prompt)
    if m:
        today = float(m.group(1))
    season = 0.0
    m = _NUMBERS["date"].search(prompt)
    if m:
        season = math.cos(2 * math.pi * (int(m.group(2)) - 1) / 12)
    z = -1.2 + 2.0 * frac + 1.2 * (today > 0) + 0.03 * min(today, 20.0) + 0.6 * season
    return 1.0 / (1.0 + math.exp(-z))


def standin_answer(request: Any) -> Any:
    """The stand-in server's answer function (``StandinServer(answer=standin_answer)``)."""
    from typestrict_pipeline.clients.standin import StandinReply

    prompt = " ".join(str(m.get("content", "")) for m in request.messages)
    return StandinReply(text=f"{standin_probability(prompt):.2f}")


@contextlib.contextmanager
def weather_fixture(
    *, latency_s: float = 0.0, days: int = 90
) -> Iterator[WorkflowFixture]:
    """A real setup for the leak tests: the first ``days`` decisions of 2012, a stand-in server.

    The whole table is replayed (the leak tests cut and poison it themselves).
    """
    from typestrict_pipeline.clients.openai_http import OpenAICompatibleClient
    from typestrict_pipeline.clients.standin import StandinServer

    with StandinServer(standin_answer, latency_s=latency_s, model_name=DEMO_MODEL) as server:
        client = OpenAICompatibleClient(server.base_url, DEMO_MODEL, max_attempts=2,
                                        backoff_base_s=0.01)
        yield WorkflowFixture(
            data={TABLE: load_seattle_weather()},
            start=FIRST_DECISION + dt.timedelta(days=14),
            end=FIRST_DECISION + dt.timedelta(days=14 + days - 1),
            step=dt.timedelta(days=1),
            clients={"forecaster": client},
            prices=DEMO_PRICES,
        )


WEATHER = Workflow(
    name="seattle_rain",
    decide=decide,
    outcome=outcome,
    score=score,
    tables=(TABLE,),
    columns={TABLE: {"precipitation": "number", "temp_max": "number", "temp_min": "number", "wind": "number",
                     "weather": "text"}},
    horizon=dt.timedelta(days=1),
    outcome_description="whether the next day had any precipitation (> 0 mm), known at its end",
    params={
        "lookback_days": Param(7, "how many known days the prompt describes", minimum=1, maximum=60),
        "threshold": Param(0.5, "say rain when the forecast probability is at least this",
                           minimum=0.0, maximum=1.0),
    },
    prompts={"forecast": FORECAST_PROMPT},
    models=("forecaster",),
    description="At the end of each day, will it rain in Seattle tomorrow? One model call per step.",
    fixture=weather_fixture,
)
