"""Leak tests: does a workflow's decision at ``t`` depend on anything known after ``t``?

The data layer already makes the future unreachable through the views
(:mod:`~typestrict_pipeline.backtest.pit`); these tests catch what it cannot see: a workflow
that reads data through a global, a cache shared between steps, a model or tool that knows
the answer. None of them is sufficient alone (freqtrade issue #11346 is a strategy that passed
both of freqtrade's analyses), so CI runs all of them on every registered workflow:

* **truncation invariance**: replay the decisions on the data cut at ``c`` (every row known
  after ``c`` removed) and compare each decision at ``t <= c`` with the one on the full data;
* **future poisoning**: replace every row known after ``c`` with noise
  (:meth:`PointInTimeTable.poisoned`, seeded) and compare the same way;
* **planted canaries** (``tests/test_backtest_leaks.py``): workflows that read the future
  through the view must be stopped with a ``LookAheadError``.

The full replay runs with concurrency and the cut ones in order, so a "stateless" workflow whose
decisions depend on step order is caught too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from typestrict_pipeline.backtest.engine import StepRecord, replay_decisions
from typestrict_pipeline.backtest.pit import PointInTimeTable, format_time
from typestrict_pipeline.backtest.workflow import Workflow, WorkflowFixture

__all__ = ["LeakFinding", "LeakReport", "check_leaks", "default_cuts"]

POISON_SEED = 20261130
"""The seed of the future-poisoning noise (``numpy.random.default_rng``), one per cut: seed + i."""


@dataclass(frozen=True)
class LeakFinding:
    """One decision that changed.

    Attributes:
        test: ``truncation`` or ``poisoning``.
        cut: the time after which data was removed or poisoned.
        t: the decision time (at or before ``cut``).
        full: the decision (or error) on the full data.
        changed: the decision (or error) on the cut or poisoned data.
    """

    test: str
    cut: dt.datetime
    t: dt.datetime
    full: Any
    changed: Any

    def __str__(self) -> str:
        return (f"{self.test}: the decision at {format_time(self.t)} changed when the data known "
                f"after {format_time(self.cut)} was {'removed' if self.test == 'truncation' else 'replaced by noise'}: "
                f"{self.full!r} became {self.changed!r}")


@dataclass(frozen=True)
class LeakReport:
    """The result of the leak tests on one workflow.

    Attributes:
        workflow: name.
        version_id: version tested.
        cuts: the cut times.
        decisions_compared: decisions compared (both tests, all cuts).
        findings: every decision that changed (empty: no leak found).
    """

    workflow: str
    version_id: str
    cuts: tuple[dt.datetime, ...]
    decisions_compared: int
    findings: tuple[LeakFinding, ...]

    @property
    def ok(self) -> bool:
        """Whether no decision changed."""
        return not self.findings

    def summary(self) -> str:
        """One paragraph for people (and CI logs)."""
        head = (f"{self.workflow}@{self.version_id}: {self.decisions_compared} decisions compared "
                f"at {len(self.cuts)} cut(s)")
        if self.ok:
            return head + ": no look-ahead found (truncation invariance and future poisoning)."
        lines = [head + f": {len(self.findings)} decision(s) depend on the future."]
        lines += [f"  - {f}" for f in self.findings[:10]]
        return "\n".join(lines)


def _key(rec: StepRecord) -> Any:
    return ("failed", rec.error) if rec.error is not None else rec.decision


def default_cuts(start: dt.datetime, end: dt.datetime, step: dt.timedelta, k: int = 3) -> list[dt.datetime]:
    """``k`` step times spread through the range (excluding the last step: nothing after it).

    >>> t = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    >>> [c.day for c in default_cuts(t, t + dt.timedelta(days=8), dt.timedelta(days=1))]
    [3, 5, 7]
    """
    n = (end - start) // step
    picks = sorted({max(0, min(n - 1, round(n * (j + 1) / (k + 1)))) for j in range(k)})
    return [start + i * step for i in picks]


def check_leaks(
    workflow: Workflow,
    fixture: WorkflowFixture,
    *,
    cuts: Sequence[dt.datetime] | None = None,
    seed: int = POISON_SEED,
    max_in_flight: int = 8,
    tests: Sequence[str] = ("truncation", "poisoning"),
) -> LeakReport:
    """Run the truncation-invariance and future-poisoning tests on ``workflow``.

    Args:
        workflow: the workflow (version) to test.
        fixture: its data, range, clients and prices (``workflow.fixture()`` yields one).
        cuts: times after which data is cut/poisoned (default: 3 spread through the range).
        seed: the poisoning seed (cut ``i`` uses ``seed + i``).
        max_in_flight: concurrency of the full replay.
        tests: which tests to run.

    Returns:
        The report; ``report.ok`` is False when any decision at ``t <= cut`` changed.

    Raises:
        LookAheadError: the workflow read the future through a view.
    """
    common: dict[str, Any] = {
        "clients": fixture.clients, "tools": fixture.tools, "prices": fixture.prices,
    }
    full = replay_decisions(workflow, data=fixture.data, start=fixture.start, end=fixture.end,
                            step=fixture.step, max_in_flight=max_in_flight, **common)
    by_t = {r.t: r for r in full}
    cut_times = list(cuts) if cuts is not None else default_cuts(fixture.start, fixture.end, fixture.step)
    findings: list[LeakFinding] = []
    compared = 0
    variants: list[tuple[str, Callable[[PointInTimeTable, int, dt.datetime], PointInTimeTable]]] = []
    if "truncation" in tests:
        variants.append(("truncation", lambda tab, i, c: tab.truncated(c)))
    if "poisoning" in tests:
        variants.append(("poisoning", lambda tab, i, c: tab.poisoned(c, seed=seed + i)))
    for i, cut in enumerate(cut_times):
        for name, make in variants:
            data: Mapping[str, PointInTimeTable] = {n: make(t, i, cut) for n, t in fixture.data.items()}
            again = replay_decisions(workflow, data=data, start=fixture.start, end=cut,
                                     step=fixture.step, max_in_flight=1, **common)
            for rec in again:
                compared += 1
                ref = by_t[rec.t]
                if _key(ref) != _key(rec):
                    findings.append(LeakFinding(name, cut, rec.t, _key(ref), _key(rec)))
    return LeakReport(workflow.name, workflow.version_id, tuple(cut_times), compared, tuple(findings))
