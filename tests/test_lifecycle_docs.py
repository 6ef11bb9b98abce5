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
from typestrict_pipeline.study.tables import RunState, StudyState

DOC = Path(__file__).resolve().parents[1] / "docs" / "lifecycle.md"
_CODE = re.compile(r"`([^`]+)`")

# (section heading, which table under it, the enum it must equal)
TABLES: list[tuple[str, int, type[enum.Enum]]] = [
    ("Trainings", 0, TrainingState),
    ("Verdict runs", 0, dg.DagsterRunStatus),
    ("Backtests", 0, BacktestStatus),
    ("Studies", 0, StudyState),
    ("Studies", 1, RunState),
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


# Every other state enum of the code, and why it has no lifecycle table: none of them is a state
# of something that runs or holds money (a new one must be put in TABLES, or here with a reason).
NOT_A_LIFECYCLE = {
    "typestrict_pipeline.refund.rule:MarginStatus": "a decision's margin, computed, not stored",
    "typestrict_pipeline.refund.trained_on:AttestationStatus": "what a statement of training rows says",
    "typestrict_pipeline.refund.manifest:TrainingStatus": "the manifest's 'the training succeeded or failed'",
    "typestrict_pipeline.backtest.engine:StepStatus": "how one replayed step ended, written once",
    "typestrict_pipeline.reruns.decide:SubscriptionState": "a workspace's subscription, set by billing",
    "typestrict_pipeline.reruns.tables:OutboxState": "a notification's delivery (docs/scheduled-reruns.md)",
    "typestrict_pipeline.api.keys:KeyState": "what a presented API key is, computed per request",
    "typestrict_pipeline.credits.tables:ModelState": "a model's files kept or expired by retention",
    "typestrict_pipeline.study.tables:CandidateState": "a candidate's place on the leaderboard",
}
_STATE_ENUM = re.compile(r"^class (\w+(?:State|Status))\([^)]*Enum\)", re.MULTILINE)


def test_every_state_enum_of_the_code_has_a_table_or_a_reason_it_has_none() -> None:
    root = DOC.parents[1]
    found = {f"{'.'.join(path.relative_to(root).with_suffix('').parts)}:{name}"
             for top in ("typestrict_pipeline", "assets", "resources")
             for path in (root / top).rglob("*.py")
             for name in _STATE_ENUM.findall(path.read_text(encoding="utf-8"))}
    tabled = {f"{e.__module__}:{e.__name__}" for _, _, e in TABLES
              if e.__module__.startswith("typestrict_pipeline") and _STATE_ENUM.match(f"class {e.__name__}(Enum)")}
    assert len(tabled) == 6 and tabled <= found, tabled - found  # the scan sees the tables' enums
    assert found - tabled == set(NOT_A_LIFECYCLE), "a state enum without a table in docs/lifecycle.md"


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
