"""docs/lifecycle.md and the code's state enums are one: every table's states are exactly an
enum's values, every state a transition leads to is one of them, and every end named in a table
has no way out."""

from __future__ import annotations

import enum
import re
from pathlib import Path

import dagster as dg
import pytest

from typestrict_pipeline.backtest.engine import BacktestStatus
from typestrict_pipeline.lifecycle.leases import LeaseKind
from typestrict_pipeline.lifecycle.trainings import TrainingState
from typestrict_pipeline.reruns.tables import LineageState, ScheduleState
from typestrict_pipeline.study.tables import StudyState

DOC = Path(__file__).resolve().parents[1] / "docs" / "lifecycle.md"
_CODE = re.compile(r"`([^`]+)`")

# (section heading, which table under it, the enum it must equal)
TABLES: list[tuple[str, int, type[enum.Enum]]] = [
    ("Trainings", 0, TrainingState),
    ("Verdict runs", 0, dg.DagsterRunStatus),
    ("Backtests", 0, BacktestStatus),
    ("Studies", 0, StudyState),
    ("Scheduled re-runs", 0, ScheduleState),
    ("Scheduled re-runs", 1, LineageState),
    ("Claims and leases", 0, LeaseKind),
]


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _tables(section: str) -> list[list[list[str]]]:
    """Each Markdown table of a section, as rows of cells (header and rule dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in section.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                tables.append(current)
                continue  # the header
            if set("".join(cells)) <= set("-: "):
                continue  # the rule
            current.append(cells)
        else:
            current = None
    return tables


def _rows(heading: str, index: int) -> list[list[str]]:
    return _tables(_section(DOC.read_text(encoding="utf-8"), heading))[index]


@pytest.mark.parametrize(("heading", "index", "states"), TABLES,
                         ids=[f"{h}-{e.__name__}" for h, _, e in TABLES])
def test_each_table_names_exactly_the_enums_states(heading: str, index: int, states: type[enum.Enum]) -> None:
    rows = _rows(heading, index)
    named = [m for row in rows for m in _CODE.findall(row[0])]
    assert sorted(named) == sorted(str(s.value) for s in states), (heading, named)
    assert len(named) == len(set(named)), f"a state listed twice in {heading}"


@pytest.mark.parametrize(("heading", "index", "states"), TABLES,
                         ids=[f"{h}-{e.__name__}" for h, _, e in TABLES])
def test_every_transition_leads_to_a_state_of_the_enum(heading: str, index: int, states: type[enum.Enum]) -> None:
    rows = _rows(heading, index)
    if len(rows[0]) < 4 or heading == "Claims and leases":
        return
    values = {str(s.value) for s in states}
    for row in rows:
        targets = _CODE.findall(row[3])
        assert set(targets) <= values, (heading, row)


def test_the_training_ends_are_the_terminal_states_and_every_open_state_has_a_deadline_row() -> None:
    rows = _rows("Trainings", 0)
    current = None
    leaves: dict[str, list[str]] = {}
    for row in rows:
        names = _CODE.findall(row[0])
        if names:
            current = names[0]
        assert current is not None
        leaves.setdefault(current, []).append(row[2])
    for state in TrainingState:
        exits = leaves[state.value]
        if state.is_terminal:
            assert exits == ["(an end)"], (state, exits)
        else:
            assert any("deadline" in e for e in exits), f"{state.value} has no deadline in the table"


def test_every_backtest_end_is_an_end_in_the_table() -> None:
    from typestrict_pipeline.backtest.store import ENDED

    ends = {_CODE.findall(r[0])[0] for r in _rows("Backtests", 0) if r[0] and r[2] == "(an end)"}
    assert ends == {s.value for s in ENDED}


def test_the_docs_index_links_the_lifecycle_page() -> None:
    index = (DOC.parent / "README.md").read_text(encoding="utf-8")
    assert "(lifecycle.md)" in index
