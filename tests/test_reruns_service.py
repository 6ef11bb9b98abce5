"""Scheduled re-runs on the store, with the studies area's real runner and the synthetic workflow."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select

from typestrict_pipeline.errors import ConflictError, InputError
from typestrict_pipeline.reruns import scenario
from typestrict_pipeline.reruns.decide import SkipKind, SubscriptionState
from typestrict_pipeline.reruns.lineage import SCALE_EDGE, summarize
from typestrict_pipeline.reruns.notify import (
    KIND_WINNER_CHANGED,
    TITLE_WINNER_CHANGED,
    set_notification,
)
from typestrict_pipeline.reruns.service import (
    cancel_schedule,
    enable_schedule,
    evaluate_due,
    evaluate_schedule,
    execute_rerun,
    get_schedule,
    lineage_entries,
    lineage_text,
    status_text,
)
from typestrict_pipeline.reruns.studies import StoreStudies, record_data_end
from typestrict_pipeline.reruns.tables import (
    LineageRow,
    LineageState,
    OutboxMessage,
    RerunSchedule,
    ScheduleState,
    TickOutcome,
)
from typestrict_pipeline.reruns.workspace import set_workspace, store_spend_source
from typestrict_pipeline.store import open_store, session_scope
from typestrict_pipeline.study.repository import delete_study
from typestrict_pipeline.study.stats import expected_max_independent
from typestrict_pipeline.study.tables import StudyRow

WS = "demo"
ROOT_END = dt.datetime(2015, 2, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


def _setup(url: str, *, budget: int | None = 1_000_000, min_unseen: int = 10) -> tuple[Engine, StoreStudies, str]:
    engine = open_store(url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    workflow = scenario.backend(shift_at=ROOT_END - 10 * DAY)  # shifts as the root holdout starts
    root = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=budget,
                                      min_unseen_steps=min_unseen, workflow=workflow)
    scenario.run(engine, root)
    return engine, scenario.port(engine), root


def test_enable_refuses_a_study_without_usd_budget(sqlite_url: str) -> None:
    engine, port, root = _setup(sqlite_url, budget=None)
    with pytest.raises(InputError, match="The root study has no USD budget"):
        enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)


def test_enable_cancel_reenable_records_who(store_url: str) -> None:
    engine, port, root = _setup(store_url)
    s1 = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    assert (s1.state, s1.owner, s1.cadence, s1.budget_micro_usd, s1.min_unseen_steps) == (
        ScheduleState.ENABLED, "ana@example.com", "1d", 1_000_000, 10)
    with pytest.raises(ConflictError, match=f"schedule {s1.id}"):
        enable_schedule(engine, port, study_id=root, cadence="6h", owner="bo@example.com", now=T0)
    off = cancel_schedule(engine, s1.id, by="bo@example.com", now=T0 + DAY)
    assert (off.state, off.cancelled_by) == (ScheduleState.CANCELLED, "bo@example.com")
    s2 = enable_schedule(engine, port, study_id=root, cadence="6h", owner="bo@example.com", now=T0 + DAY)
    assert s2.id != s1.id and s2.owner == "bo@example.com" and s2.state is ScheduleState.ENABLED
    assert "cancelled by bo@example.com" in status_text(engine, get_schedule(engine, s1.id))


def test_rerun_skips_then_fires_once_and_notifies_once(store_url: str) -> None:
    engine, port, root = _setup(store_url)
    spend = store_spend_source(engine)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)

    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 7 * DAY)
    r = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert r is not None and r.outcome is TickOutcome.SKIPPED
    assert r.message == "Not enough unseen data yet: 7 of 10 steps"

    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 12 * DAY)
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert fired is not None and fired.outcome is TickOutcome.FIRED
    assert fired.run_key == f"study-rerun:{root}:1"
    again = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert again is not None and again.kind is SkipKind.IN_FLIGHT and again.run_key is None

    record = execute_rerun(engine, port, fired.run_key)
    assert record.state is LineageState.FINISHED and record.winner_changed is True and record.notified
    repeat = execute_rerun(engine, port, fired.run_key)
    assert repeat.study_id == record.study_id and not repeat.notified  # nothing runs twice

    # The re-run's holdout is new: it starts after the root's holdout and holds the newest 10 steps.
    with session_scope(engine) as s:
        root_row = s.get(StudyRow, int(root))
        child = s.get(StudyRow, int(record.study_id or 0))
        assert root_row is not None and child is not None
        assert child.holdout_start >= root_row.holdout_end
        assert (child.holdout_start, child.holdout_end) == (ROOT_END + 2 * DAY, ROOT_END + 12 * DAY)
        assert child.budget_micro == root_row.budget_micro
        assert child.space_json["extra"][0]["origin"] == "previous winner"
        outbox = s.execute(select(OutboxMessage)).scalars().all()
        assert [(m.kind, m.recipient, m.subject) for m in outbox] == [
            (KIND_WINNER_CHANGED, "ana@example.com", TITLE_WINNER_CHANGED)]

    entries = lineage_entries(engine, root)
    assert [(e.seq, e.winner, e.winner_changed) for e in entries] == [
        (0, "arm=steady", None), (1, "arm=late", True)]
    assert "Best expected of 2 under noise" in lineage_text(engine, record.study_id or "")
    # Every study scored its baseline on its own holdout: the panel is on the d_j = h_j − b_j
    # scale, with SE_j the Newey–West SE of the per-step difference, and the line E[max] with each SE_j.
    with session_scope(engine) as s:
        rows = [s.get(StudyRow, int(e.study_id or 0)) for e in entries]
        assert all(r is not None and r.holdout_baseline is not None and r.holdout_diff_se for r in rows)
        assert [e.baseline_score for e in entries] == [r.holdout_baseline for r in rows if r is not None]
        assert [e.holdout_se for e in entries] == [r.holdout_diff_se for r in rows if r is not None]
    summary = summarize(entries)
    ses = [float(e.holdout_se or 0.0) for e in entries]
    assert summary.scale == SCALE_EDGE
    assert summary.noise_line == pytest.approx(expected_max_independent(ses))
    assert summary.best == pytest.approx(max(e.edge or 0.0 for e in entries))

    # Next tick: the previous study is the re-run; no new data, so not enough unseen data again.
    nxt = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert nxt is not None and nxt.message == "Not enough unseen data yet: 0 of 10 steps"


def test_turned_off_notifications_are_not_sent(sqlite_url: str) -> None:
    engine, port, root = _setup(sqlite_url)
    set_notification(engine, "ana@example.com", KIND_WINNER_CHANGED, False)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 10 * DAY)
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine), source="test")
    assert fired is not None and fired.run_key
    record = execute_rerun(engine, port, fired.run_key)
    assert record.winner_changed is True and record.notified is False
    with session_scope(engine) as s:
        assert s.execute(select(OutboxMessage)).first() is None


def test_a_workspace_turns_a_notification_off_for_its_own_schedules_only(sqlite_url: str) -> None:
    """A person who owns schedules in two workspaces: one workspace turning the notification off
    (Settings → Notifications, PUT /v1/notifications/{person}) left it on for the other's
    schedules; the operator's choice (the CLI, no workspace) is about every workspace's and
    replaces theirs. It was one row per person: one workspace silenced another's schedules."""
    from typestrict_pipeline.api.notifications import set_setting, settings

    engine, port, root = _setup(sqlite_url)
    set_workspace(engine, "other", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    other_root = scenario.create_root_study(engine, workspace="other", root_end=ROOT_END, budget_micro_usd=1_000_000,
                                            min_unseen_steps=10, workflow=scenario.backend(shift_at=ROOT_END))
    scenario.run(engine, other_root)
    enable_schedule(engine, port, study_id=other_root, cadence="1d", owner="ana@example.com", now=T0)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)

    set_setting(engine, "other", "ana@example.com", False)  # the other workspace, about its own
    assert [s.enabled for s in settings(engine, "other")] == [False]
    assert [s.enabled for s in settings(engine, WS)] == [True]
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 10 * DAY)
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine), source="test")
    assert fired is not None and fired.run_key
    record = execute_rerun(engine, port, fired.run_key)
    assert record.winner_changed is True and record.notified is True  # this workspace's schedule: sent

    set_setting(engine, WS, "ana@example.com", False)
    set_notification(engine, "ana@example.com", KIND_WINNER_CHANGED, True)  # the operator, every workspace
    assert [s.enabled for s in settings(engine, WS)] == [True] == [s.enabled for s in settings(engine, "other")]
    set_notification(engine, "ana@example.com", KIND_WINNER_CHANGED, False)
    set_setting(engine, "other", "ana@example.com", True)
    assert [s.enabled for s in settings(engine, WS)] == [False]
    assert [s.enabled for s in settings(engine, "other")] == [True]


def test_a_person_is_one_person_whatever_the_case_of_their_address(sqlite_url: str) -> None:
    """The person of ``PUT /v1/notifications/{person}`` was matched as written: a schedule set up
    by ``Ana@Example.com`` could not be turned off as ``ana@example.com`` (404), and a choice
    stored in one spelling did not apply to an owner stored in another. Now every address is
    its :func:`~typestrict_pipeline.values.person_id` (lower case), including owners stored
    before, so the choice applies and the notification is not sent."""
    from sqlalchemy import update

    from typestrict_pipeline.api.notifications import people, set_setting, settings

    engine, port, root = _setup(sqlite_url)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner=" Ana@Example.com", now=T0)
    assert sched.owner == "ana@example.com"
    with session_scope(engine) as s:  # an owner stored as written, before this rule
        s.execute(update(RerunSchedule).where(RerunSchedule.id == sched.id).values(owner="Ana@Example.COM"))
    assert people(engine, WS) == ["ana@example.com"]
    turned = set_setting(engine, WS, "ANA@example.com", False)
    assert (turned.person, turned.enabled) == ("ana@example.com", False)
    assert [(p.person, p.enabled) for p in settings(engine, WS)] == [("ana@example.com", False)]
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 10 * DAY)
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine), source="test")
    assert fired is not None and fired.run_key
    record = execute_rerun(engine, port, fired.run_key)
    assert record.winner_changed is True and record.notified is False  # turned off: not sent


def test_cadence_slots_evaluate_once_per_slot(sqlite_url: str) -> None:
    engine, port, root = _setup(sqlite_url)
    spend = store_spend_source(engine)
    sched = enable_schedule(engine, port, study_id=root, cadence="1h", owner="ana@example.com", now=T0)
    first, cursor = evaluate_due(engine, port, now=T0 + dt.timedelta(minutes=5), spend=spend, source="sensor")
    assert [r.slot for r in first] == [0] and cursor == {sched.id: 0}
    same, cursor = evaluate_due(engine, port, now=T0 + dt.timedelta(minutes=50), spend=spend, source="sensor", cursor=cursor)
    assert same == []
    # A second evaluator without the cursor (e.g. the Dagster schedule) is held back by the store.
    other, _ = evaluate_due(engine, port, now=T0 + dt.timedelta(minutes=50), spend=spend, source="schedule")
    assert other == []
    nxt, cursor = evaluate_due(engine, port, now=T0 + dt.timedelta(minutes=65), spend=spend, source="sensor", cursor=cursor)
    assert [r.slot for r in nxt] == [1] and cursor == {sched.id: 1}


def test_root_deleted_turns_the_schedule_off(store_url: str) -> None:
    engine, port, root = _setup(store_url)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    delete_study(engine, int(root))  # the product path (typestrict study delete)
    r = evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine), source="test")
    assert r is not None and r.message == "The root study was deleted"
    view = get_schedule(engine, sched.id)
    assert view.state is ScheduleState.OFF and view.off_reason == "The root study was deleted"
    assert evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine)) is None


def test_chain_of_three_stored_reruns_has_new_holdouts(sqlite_url: str) -> None:
    """Three re-runs on the studies runner: each holdout is new and 10 steps long, each re-run's
    folds learn from the previous (spent) holdout, and the lineage lists all four studies."""
    from typestrict_pipeline.study.folds import FoldLayout

    engine, port, root = _setup(sqlite_url)
    spend = store_spend_source(engine)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    study_ids = [root]
    for arrived in (10, 23, 40):  # batches of 10, 13 and 17 new steps
        record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + arrived * DAY)
        fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
        assert fired is not None and fired.run_key is not None, fired
        record = execute_rerun(engine, port, fired.run_key)
        assert record.state is LineageState.FINISHED and record.study_id is not None
        study_ids.append(record.study_id)
    with session_scope(engine) as s:
        rows = [s.get(StudyRow, int(i)) for i in study_ids]
        assert all(r is not None for r in rows)
        holdouts = [(r.holdout_start, r.holdout_end) for r in rows]  # type: ignore[union-attr]
        layouts = [FoldLayout.from_json(r.layout_json) for r in rows]  # type: ignore[union-attr]
    assert holdouts[1:] == [
        (ROOT_END, ROOT_END + 10 * DAY),
        (ROOT_END + 13 * DAY, ROOT_END + 23 * DAY),
        (ROOT_END + 30 * DAY, ROOT_END + 40 * DAY),
    ]
    for (prev_start, prev_end), (start, end), layout in zip(holdouts[:-1], holdouts[1:], layouts[1:], strict=True):
        assert start >= prev_end and end - start == 10 * DAY  # new, full length, disjoint
        last_eval = layout.folds[-1].eval
        assert last_eval.end <= start - layout.embargo_steps * DAY  # folds never see their own holdout
        assert last_eval.end > prev_start  # ... but may learn from the previous, spent one
    entries = lineage_entries(engine, root)
    assert [e.seq for e in entries] == [0, 1, 2, 3]
    assert "Best expected of 4 under noise" in lineage_text(engine, root)


def test_workflow_taken_between_tick_and_run_releases_the_claim(sqlite_url: str) -> None:
    from typestrict_pipeline.study.repository import cancel_study

    engine, port, root = _setup(sqlite_url)
    spend = store_spend_source(engine)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 10 * DAY)
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert fired is not None and fired.run_key == f"study-rerun:{root}:1"
    other = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=None,
                                       min_unseen_steps=10, workflow=scenario.backend(shift_at=ROOT_END))
    released = execute_rerun(engine, port, fired.run_key)
    assert released.state is LineageState.CANCELLED and released.study_id is None
    assert [e.seq for e in lineage_entries(engine, root)] == [0]  # a released claim is not shown
    busy = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert busy is not None and busy.message == "A study or backtest was in flight"
    cancel_study(engine, int(other))
    again = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert again is not None and again.run_key == f"study-rerun:{root}:2"  # a new key Dagster will launch
    assert execute_rerun(engine, port, again.run_key).state is LineageState.FINISHED


class _ProcessDied(BaseException):
    """The re-run's process dying inside its run: nothing after that point of the run happens
    (``kill -9`` unwinds nothing; a ``BaseException`` passes every ``except Exception``)."""


def _fired_then_died(sqlite_url: str, monkeypatch: pytest.MonkeyPatch, where: str,
                     dies: Callable[[Callable[[Any], Any], Any], Any]) -> tuple[Engine, StoreStudies, str, Any, int, str]:
    """A schedule that fired once, whose re-run's process then died inside ``port.<where>``
    (``dies(the real method, its argument)`` raises :class:`_ProcessDied`, which no ``except
    Exception`` stops): the engine, port, root study, spend source, schedule id and the fired
    run key."""
    engine, port, root = _setup(sqlite_url)
    spend = store_spend_source(engine)
    sched = enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 12 * DAY)
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=spend, source="test")
    assert fired is not None and fired.run_key is not None
    real = getattr(port, where)
    monkeypatch.setattr(port, where, lambda arg: dies(real, arg))
    with pytest.raises(_ProcessDied):
        execute_rerun(engine, port, fired.run_key)
    monkeypatch.undo()
    return engine, port, root, spend, sched.id, fired.run_key


@pytest.mark.parametrize("then", ["interrupted", "interrupted, then cancelled", "finished"])
def test_a_rerun_whose_process_died_ends_at_the_next_tick_and_never_blocks_its_schedule(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch, then: str) -> None:
    """docs/lifecycle.md, "Scheduled re-runs": an entry whose run died stays ``RUNNING`` only
    while its study is in flight. Before, only an ``INTERRUPTED`` study ended it: a study
    cancelled after its interruption (``typestrict study cancel``), or one that finished just
    before its run's process died, left the entry ``RUNNING`` and every later tick skipped with
    "A study or backtest was in flight", for good."""
    from typestrict_pipeline.study import repository as repo

    def dies(run: Callable[[str], Any], study_id: str) -> None:
        if then == "finished":
            run(study_id)  # the study ends; the process dies before the run records it
        raise _ProcessDied

    engine, port, root, spend, sched_id, _key = _fired_then_died(sqlite_url, monkeypatch, "run", dies)
    entry = lineage_entries(engine, root)[-1]
    assert (entry.seq, entry.state) == (1, "RUNNING") and entry.study_id is not None
    sid = int(entry.study_id)
    if then != "finished":  # what the reaper does once the holder is gone, then a person's cancel
        assert repo.interrupt_study(engine, sid, "interrupted at 2026-11-30T09:05:00Z: its process is gone")
        if then.endswith("cancelled"):
            assert repo.cancel_study(engine, sid).value == "CANCELLED"

    nxt = evaluate_schedule(engine, port, sched_id, now=T0 + DAY, spend=spend, source="test")
    assert nxt is not None
    assert nxt.kind is not SkipKind.IN_FLIGHT, nxt.message
    with session_scope(engine) as s:
        [ended] = s.execute(select(LineageRow).where(LineageRow.seq == 1)).scalars().all()
        state, error, winner = ended.state, ended.error, ended.winner
        told = [m.kind for m in s.execute(select(OutboxMessage)).scalars()]
    if then == "finished":  # concluded as its run would have: scored, the owner told once
        assert (state, error, winner) == (LineageState.FINISHED, None, "arm=late")
        assert told == [KIND_WINNER_CHANGED]
        assert nxt.message == "Not enough unseen data yet: 0 of 10 steps"
    else:
        assert state is (LineageState.CANCELLED if then.endswith("cancelled") else LineageState.FAILED)
        assert error is not None and (f"study {sid} was interrupted" in error or "CANCELLED" in error)
        assert told == []
        assert nxt.message == "The previous study in the lineage did not finish"  # the page's reason
    again = evaluate_schedule(engine, port, sched_id, now=T0 + 2 * DAY, spend=spend, source="test")
    assert again is not None and again.kind is not SkipKind.IN_FLIGHT


def test_a_rerun_whose_process_died_before_it_created_its_study_is_set_aside_at_the_next_tick(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's process dies between claiming the entry (``RUNNING``) and recording its study:
    while that process lives the entry is its (the tick says "in flight"); once it is gone the
    next tick sets the entry aside and fires the next position. Before, nothing held such an
    entry and nothing ended it: ``RUNNING`` with no study, every tick "in flight", for good."""
    import subprocess
    import sys

    from sqlalchemy import update

    from typestrict_pipeline.lifecycle.leases import LeaseKind, holder
    from typestrict_pipeline.lifecycle.tables import LeaseRow

    def dies(create: object, spec: object) -> str:
        raise _ProcessDied

    engine, port, root, spend, sched_id, fired_key = _fired_then_died(sqlite_url, monkeypatch, "create_rerun", dies)
    entry = lineage_entries(engine, root)[-1]
    assert (entry.seq, entry.state, entry.study_id) == (1, "RUNNING", None)
    with session_scope(engine) as s:
        entry_id = s.scalars(select(LineageRow.id).where(LineageRow.seq == 1)).one()
    assert holder(engine, LeaseKind.RERUN, str(entry_id)) is not None  # this (live) process's
    live = evaluate_schedule(engine, port, sched_id, now=T0 + DAY, spend=spend, source="test")
    assert live is not None and live.kind is SkipKind.IN_FLIGHT  # its claimer may still record it

    child = subprocess.Popen([sys.executable, "-c", "pass"])  # the claimer, now gone
    child.wait()
    with session_scope(engine) as s:  # its lease names the gone process (a start tick no process has)
        s.execute(update(LeaseRow).where(LeaseRow.kind == LeaseKind.RERUN.value,
                                         LeaseRow.object_id == str(entry_id))
                  .values(pid=child.pid, start_ticks=1))
    nxt = evaluate_schedule(engine, port, sched_id, now=T0 + 2 * DAY, spend=spend, source="test")
    assert nxt is not None
    assert nxt.kind is not SkipKind.IN_FLIGHT, nxt.message
    with session_scope(engine) as s:
        ended = s.get(LineageRow, entry_id)
        assert ended is not None and ended.state is LineageState.CANCELLED and ended.superseded
        assert ended.error is not None and ended.error.startswith("released: its run ended before it created its study")
    assert holder(engine, LeaseKind.RERUN, str(entry_id)) is None
    assert nxt.run_key is not None and nxt.run_key != fired_key  # the next position fires


def test_min_unseen_steps_comes_from_the_study_and_re_runs_copy_it(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    workflow = scenario.backend(shift_at=ROOT_END)
    port = scenario.port(engine)
    stored = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=10**6,
                                        min_unseen_steps=12, workflow=workflow)
    scenario.run(engine, stored)
    with pytest.raises(InputError, match="match the study's"):  # an override that differs is refused
        enable_schedule(engine, port, study_id=stored, cadence="1d", owner="ana@example.com", min_unseen_steps=5)
    view = enable_schedule(engine, port, study_id=stored, cadence="1d", owner="ana@example.com", now=T0)
    assert view.min_unseen_steps == 12  # the study's own value, set when it was created
    record_data_end(engine, WS, scenario.WORKFLOW, ROOT_END + 12 * DAY)
    fired = evaluate_schedule(engine, port, view.id, now=T0, spend=store_spend_source(engine))
    assert fired is not None and fired.run_key is not None
    record = execute_rerun(engine, port, fired.run_key)
    with session_scope(engine) as s:
        child = s.get(StudyRow, int(record.study_id or 0))
        assert child is not None and child.min_unseen_steps == 12  # the re-run copies it


def test_a_study_created_without_the_minimum_gets_it_once_at_enable(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    port = scenario.port(engine)
    sid = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=10**6,
                                     min_unseen_steps=None, workflow=scenario.backend(shift_at=ROOT_END))
    scenario.run(engine, sid)
    with pytest.raises(InputError, match="Create the study with --min-unseen-steps N"):
        enable_schedule(engine, port, study_id=sid, cadence="1d", owner="ana@example.com", now=T0)
    view = enable_schedule(engine, port, study_id=sid, cadence="1d", owner="ana@example.com",
                           min_unseen_steps=15, now=T0)
    assert view.min_unseen_steps == 15
    with session_scope(engine) as s:
        row = s.get(StudyRow, int(sid))
        assert row is not None and row.min_unseen_steps == 15  # stored on the study, once
    cancel_schedule(engine, view.id, by="ana@example.com")
    with pytest.raises(InputError, match=r"match the study's \(15\)"):
        enable_schedule(engine, port, study_id=sid, cadence="1d", owner="ana@example.com", min_unseen_steps=9)


def test_rerun_of_a_study_on_the_studies_areas_own_backend(sqlite_url: str) -> None:
    """A study created by the studies area itself (its synthetic workflow, its config) re-runs too."""
    from typestrict_pipeline.study.repository import LastBacktest
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import (
        StudyConfig,
        create_study_from_config,
        study_backend,
    )
    from typestrict_pipeline.study.space import SearchSpace

    engine = open_store(sqlite_url)
    set_workspace(engine, "demo", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    config = StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.50, 0.52, 0.54]}),
        start=dt.datetime(2012, 1, 1, tzinfo=dt.UTC), end=dt.datetime(2012, 6, 1, tzinfo=dt.UTC),
        step=DAY, n_folds=2, tune_steps=10, eval_steps=10, holdout_steps=10,
        max_candidates=3, max_total_steps=100_000, budget_micro=1_000_000,
        backend={"backend": "synthetic", "cost_per_step": 3}, min_unseen_steps=15,
    )
    sid = create_study_from_config(engine, config, last_backtest=LastBacktest(30, 10))
    run_study_local(engine, sid, study_backend(engine, sid), max_workers=2)
    port = StoreStudies(engine)
    sched = enable_schedule(engine, port, study_id=str(sid), cadence="1d", owner="ana@example.com", now=T0)
    record_data_end(engine, "demo", "wx", dt.datetime(2012, 6, 21, tzinfo=dt.UTC))
    fired = evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine))
    assert fired is not None and fired.run_key is not None
    record = execute_rerun(engine, port, fired.run_key)
    assert record.state is LineageState.FINISHED
    with session_scope(engine) as s:
        child = s.get(StudyRow, int(record.study_id or 0))
        assert child is not None and child.config_json["backend"] == {"backend": "synthetic", "cost_per_step": 3}
        assert (child.holdout_start, child.holdout_end) == (dt.datetime(2012, 6, 6, tzinfo=dt.UTC),
                                                            dt.datetime(2012, 6, 21, tzinfo=dt.UTC))
        assert child.spend_micro is not None and 0 < child.spend_micro <= 1_000_000


def test_a_broken_schedule_does_not_stop_the_others(sqlite_url: str) -> None:
    from sqlalchemy import update

    engine, port, root = _setup(sqlite_url)
    other = scenario.create_root_study(engine, workspace=WS, root_end=ROOT_END, budget_micro_usd=10**6,
                                       min_unseen_steps=10, workflow=scenario.backend(shift_at=ROOT_END))
    scenario.run(engine, other)
    s1 = enable_schedule(engine, port, study_id=root, cadence="1h", owner="ana@example.com", now=T0)
    s2 = enable_schedule(engine, port, study_id=other, cadence="1h", owner="ana@example.com", now=T0)
    with session_scope(engine) as s:  # the first study's stored layout is unreadable
        s.execute(update(StudyRow).where(StudyRow.id == int(root)).values(layout_json={}))
    results, cursor = evaluate_due(engine, port, now=T0, spend=store_spend_source(engine), source="test")
    by_id = {r.schedule_id: r.message for r in results}
    assert by_id[s1.id].startswith("Evaluation failed: KeyError")
    assert by_id[s2.id] == "Not enough unseen data yet: 0 of 10 steps"
    assert cursor == {s1.id: 0, s2.id: 0}
    assert get_schedule(engine, s1.id).last_message == by_id[s1.id]


def test_data_arrival_is_read_from_a_point_in_time_dataset(sqlite_url: str) -> None:
    """A root study replaying seattle_rain on the seattle_weather dataset: each tick takes the
    data end from the dataset's latest knowledge time (2016-01-01, horizon 1 day), not from a
    recorded signal."""
    from typestrict_pipeline.backtest.workflows.weather import load_seattle_weather
    from typestrict_pipeline.reruns.studies import REGISTERED_SETUP, data_end_from_tables
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.folds import plan_folds
    from typestrict_pipeline.study.limits import StudyLimits
    from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
    from typestrict_pipeline.study.space import SearchSpace

    # Pure rule: rows known up to K give decision steps up to K − horizon a known outcome.
    part = {"weather": load_seattle_weather(until=dt.datetime(2015, 12, 15, tzinfo=dt.UTC))}
    assert data_end_from_tables(part, horizon=DAY, step=DAY) == dt.datetime(2015, 12, 15, tzinfo=dt.UTC)
    assert data_end_from_tables({}, horizon=DAY, step=DAY) is None

    engine = open_store(sqlite_url)
    set_workspace(engine, WS, subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=50_000_000)
    layout = plan_folds(start=dt.datetime(2015, 6, 1, tzinfo=dt.UTC), end=dt.datetime(2015, 12, 2, tzinfo=dt.UTC),
                        step=DAY, n_folds=2, tune_steps=10, eval_steps=10, holdout_steps=10)
    backend = {"backend": "engine", "setup": REGISTERED_SETUP,
               "setup_args": {"workflow": "seattle_rain", "dataset": "seattle_weather"}}
    sid = repo.create_study(
        engine, workspace=WS, workflow="seattle_rain", workflow_version="v", layout=layout,
        space=SearchSpace(grid={"threshold": [0.4, 0.6]}), limits=StudyLimits(2, 10_000, 10**6),
        config={"backend": backend}, last_backtest=repo.LastBacktest(30, 10), min_unseen_steps=40)
    # Scored here with synthetic scores (the stored configuration is what the tick reads).
    run_study_local(engine, sid, SyntheticBackend(skill=lambda p: float(p.get("threshold", 0.5))))
    port = StoreStudies(engine)
    facts = port.get(str(sid))
    assert facts is not None and port.data_end(facts) == dt.datetime(2016, 1, 1, tzinfo=dt.UTC)
    # The signal cannot apply to a workflow whose studies read their dataset: refused, not ignored.
    with pytest.raises(InputError, match="A built-in dataset never grows: register your own"):
        record_data_end(engine, WS, "seattle_rain", dt.datetime(2016, 6, 1, tzinfo=dt.UTC))
    sched = enable_schedule(engine, port, study_id=str(sid), cadence="1d", owner="ana@example.com", now=T0)
    r = evaluate_schedule(engine, port, sched.id, now=T0, spend=store_spend_source(engine))
    # 2015-12-02 .. 2015-12-31: 30 decision steps with a known outcome after the holdout.
    # and the built-in data never grow: the schedule says, at each evaluation, it can never fire
    assert r is not None and r.message.startswith("Not enough unseen data yet: 30 of 40 steps. It can never fire")


def test_the_lineage_says_budget_reached_as_the_leaderboard_does(sqlite_url: str) -> None:
    """A root study stopped by its budget before its holdout has a winner, so a schedule may
    re-run it; its lineage entry said "Finished" (under a leaderboard whose State said "Budget
    reached"), beside a holdout "not scored" that nothing explained."""
    from typestrict_pipeline.reruns.lineage import lineage_cells
    from typestrict_pipeline.reruns.service import lineage_entries, lineage_text
    from typestrict_pipeline.study.leaderboard import load_leaderboard
    from typestrict_pipeline.study.tables import StudyState

    search = len(scenario.ARMS) * 2 * (5 + 5) * 20  # every arm's windows at 20 µ$ a step, no holdout
    engine, port, root = _setup(sqlite_url, budget=search + 100)
    board = load_leaderboard(engine, int(root))
    assert board.state is StudyState.BUDGET_REACHED and board.holdout_score is None
    enable_schedule(engine, port, study_id=root, cadence="1d", owner="ana@example.com", now=T0)
    [entry] = lineage_entries(engine, root)
    assert entry.state == "BUDGET_REACHED"  # the API's code, a study state's
    assert lineage_cells(entry)[2] == "Budget reached"  # was "Finished"
    assert "  Budget reached  " in lineage_text(engine, root)
