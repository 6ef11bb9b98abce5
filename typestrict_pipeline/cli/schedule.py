"""``typestrict schedule ...``: re-run a finished study on a schedule, see why it skipped, its lineage.

Commands:

* ``enable STUDY_ID --cadence 1d --owner EMAIL``: re-run a finished study (it must have a USD budget);
* ``cancel SCHEDULE_ID --by EMAIL``;
* ``status [SCHEDULE_ID] [--study ID] [--workspace W]``: each schedule with the reason of its last skip;
* ``lineage STUDY_ID``: the lineage panel (every re-run, its window, winner, holdout score, the
  best expected of k under noise);
* ``tick [--now ISO] [--run]``: evaluate the schedules that are due now (what the Dagster sensor
  does); ``--run`` also executes fired re-runs in this process;
* ``data-arrived WORKSPACE WORKFLOW END``: record that outcomes are known up to ``END``;
* ``workspace WORKSPACE [--subscription ACTIVE|EXPIRED] [--budget-usd X]``: state and spend;
* ``notifications USER --on|--off``: the "A scheduled study changes its winner" notification;
* ``deliver [--requeue ID]``: send the notification outbox (``TYPESTRICT_NOTIFY_TRANSPORT``:
  ``file`` by default, ``smtp``, ``webhook``, ``none``);
* ``outbox [--undelivered]``: every notification, delivered or not, with the reason it is not.

The same ``status``, ``lineage`` and ``schedule enable|cancel`` are also offered under
``typestrict study`` (added to the studies area's command when it does not define them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from typestrict_pipeline import values
from typestrict_pipeline.cli.common import (
    MAX_STEPS,
    Wrote,
    add_json,
    add_store,
    bounded_int,
    identifier,
    now_option,
    print_json,
    read_store,
    say_wrote,
    schedule_id,
    shown_store,
    store_url,
    study_id,
    usd,
    value_type,
    write_store,
    writes,
)
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.store import utcnow

if TYPE_CHECKING:
    from typestrict_pipeline.reruns.service import ScheduleView

SCHEDULE_ID = schedule_id  # the one rule of a schedule id (common.schedule_id)
STUDY_ID = study_id  # the one rule of a study id (common.study_id)
WORKSPACE = value_type(values.workspace_id)
WORKFLOW = identifier("a workflow name")
PERSON = value_type(lambda text: values.email(text, values.PERSON))


def _engine(args: argparse.Namespace) -> Engine:
    return write_store(args)


def _views_json(engine: Engine, views: list[ScheduleView], ticks: int) -> list[dict[str, object]]:
    from typestrict_pipeline.reruns.service import recent_ticks, schedule_timeline
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.reruns.workspace import store_spend_source

    port, spend, now = StoreStudies(engine), store_spend_source(engine), utcnow()
    out: list[dict[str, object]] = []
    for v in views:
        d = dict(v.__dict__)
        d["timeline"] = schedule_timeline(engine, port, v, now=now, spend=spend).to_json()
        d["ticks"] = [{"at": t.at, "source": t.source, "outcome": t.outcome.value, "message": t.message}
                      for t in recent_ticks(engine, v.id, ticks)]
        out.append(d)
    return out


def _time(text: str) -> dt.datetime:
    return values.timestamp(text, "the time", fix="write an ISO 8601 time such as 2015-02-12T00:00:00+00:00")


def _who(value: str | None) -> str:
    who = value or os.environ.get("TYPESTRICT_USER")
    if not who:
        raise InputError("who you are (an email address)", "nothing", "pass --owner/--by or set TYPESTRICT_USER")
    return who


def _enable(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.service import enable_schedule, schedule_timeline, status_text
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.reruns.workspace import store_spend_source, workspace_warning

    engine = _engine(args)
    port = StoreStudies(engine)
    view = enable_schedule(engine, port, study_id=str(args.study_id), cadence=args.cadence,
                           owner=_who(args.owner), min_unseen_steps=args.min_unseen_steps)
    timeline = schedule_timeline(engine, port, view, spend=store_spend_source(engine))
    wrote = Wrote(f"schedule {view.id} (re-runs study {view.root_study_id} every {view.cadence})",
                  (str(view.id),), store=shown_store(store_url(args)))
    if args.json:
        print_json({**view.__dict__, "timeline": timeline.to_json(), "wrote": wrote.to_json()})
    else:
        print(status_text(engine, view, port=port))
        say_wrote(args, wrote)
    warning = workspace_warning(engine, view.workspace_id, utcnow(), store_spend_source(engine))
    if warning is not None:
        print(f"typestrict: warning: {warning}", file=sys.stderr)
    if timeline.never_fires is not None:  # said when enabled, and again at each evaluation
        print(f"typestrict: warning: schedule {view.id}: {timeline.never_fires}", file=sys.stderr)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.service import cancel_schedule

    engine = _engine(args)
    now = utcnow()
    view = cancel_schedule(engine, args.schedule_id, by=_who(args.by), now=now)
    _say_cancelled(args, engine, view, now)
    return 0


def _say_cancelled(args: argparse.Namespace, engine: Engine, view: ScheduleView, now: dt.datetime) -> None:
    """What ``schedule cancel`` (and ``study schedule cancel``) prints: the schedule, and what it
    wrote (nothing for a schedule that was off already)."""
    from typestrict_pipeline.reruns.service import status_text

    store = shown_store(store_url(args))
    if view.cancelled_at == now:
        wrote = Wrote(f"the cancellation of schedule {view.id}", (str(view.id),), store=store)
    else:
        wrote = Wrote(f"schedule {view.id} was {view.state.value.lower()} already", (), store=store)
    if args.json:
        print_json({**view.__dict__, "wrote": wrote.to_json()})
    else:
        print(status_text(engine, view))
        say_wrote(args, wrote)


def _status(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.service import get_schedule, list_schedules, status_text

    engine = read_store(args)
    if args.workspace:
        from typestrict_pipeline.workspaces import require_workspace

        require_workspace(engine, args.workspace)
    if args.schedule_id is not None:
        views = [get_schedule(engine, args.schedule_id)]
    else:
        views = list_schedules(engine, workspace_id=args.workspace,
                               study_id=None if args.study is None else str(args.study))
    if args.json:
        print_json(_views_json(engine, list(views), args.ticks))
        return 0
    if not views:
        print("No re-run schedules. Enable one with: typestrict schedule enable STUDY_ID --cadence 1d --owner EMAIL")
        return 0
    print("\n\n".join(status_text(engine, v, ticks=args.ticks) for v in views))
    return 0


def _lineage(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.lineage import summarize
    from typestrict_pipeline.reruns.service import lineage_entries, lineage_text

    engine = read_store(args)
    entries = lineage_entries(engine, str(args.study_id))
    if not entries:
        _require_study(engine, args.study_id)
    if args.json:
        print_json({"study_id": args.study_id,
                    "entries": [{**e.__dict__, "edge": e.edge} for e in entries],
                    "summary": summarize(entries).__dict__ if entries else None})
        return 0
    print(lineage_text(engine, str(args.study_id)))
    return 0


def _require_study(engine: Engine, study_id: int) -> None:
    from typestrict_pipeline.store import session_scope
    from typestrict_pipeline.study import repository as repo

    with session_scope(engine) as s:
        repo.get_study(s, study_id)


def _tick(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.notify import deliver_pending, transport_from_env
    from typestrict_pipeline.reruns.service import (
        evaluate_due,
        execute_rerun,
        list_schedules,
        tick_reason,
    )
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.reruns.workspace import store_spend_source

    engine = _engine(args)
    port = StoreStudies(engine)
    now = args.now or utcnow()
    results, _ = evaluate_due(engine, port, now=now, spend=store_spend_source(engine), source="cli")
    out: dict[str, object] = {"now": now, "evaluated": [], "notifications": None}
    evaluated: list[dict[str, object]] = []
    if not results and not args.json:
        print(tick_reason(list_schedules(engine), [], now=now))
    for r in results:
        entry: dict[str, object] = {"schedule_id": r.schedule_id, "outcome": r.outcome.value,
                                    "message": r.message, "run_key": r.run_key}
        if not args.json:
            print(f"schedule {r.schedule_id}: {r.outcome.value.lower()}: {r.message}")
        if args.run and r.run_key is not None:
            rec = execute_rerun(engine, port, r.run_key, now=now)
            changed = {True: "winner changed", False: "same winner", None: "no winner"}[rec.winner_changed]
            entry["rerun"] = {"seq": rec.seq, "study_id": rec.study_id, "state": rec.state.value,
                              "winner": rec.winner, "winner_changed": rec.winner_changed}
            if not args.json:
                print(f"  re-run #{rec.seq} (study {rec.study_id}): {rec.state.value}, winner {rec.winner} ({changed})")
        evaluated.append(entry)
    out["evaluated"] = evaluated
    sent: list[int] = []
    if args.run:
        transport = transport_from_env()
        if transport is not None:
            report = deliver_pending(engine, transport, now=now)
            sent = list(report.sent)
            out["notifications"] = {"sent": len(report.sent), "kept_for_retry": len(report.failed)}
            if not args.json:
                print(f"notifications: {len(report.sent)} sent, {len(report.failed)} kept for retry")
    ids = tuple(str(r.schedule_id) for r in results)
    reruns = [e["rerun"] for e in evaluated if "rerun" in e]
    what = f"the evaluation of schedule(s) {', '.join(ids)}" + "".join(
        f"; re-run #{r['seq']} (study {r['study_id']})" for r in reruns if isinstance(r, dict)) + (
        f"; the delivery of message(s) {', '.join(map(str, sent))}" if sent else "")
    wrote = Wrote(what if ids else f"no schedule was due at {now.isoformat()}", ids,
                  store=shown_store(store_url(args)))
    if args.json:
        out["wrote"] = wrote.to_json()
        print_json(out)
    else:
        say_wrote(args, wrote)
    return 0


def _data_arrived(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.studies import record_data_end
    from typestrict_pipeline.workspaces import require_workspace

    end = _time(args.end)  # values.timestamp: 1900-2199, as every time option
    engine = _engine(args)
    require_workspace(engine, args.workspace)  # a typo or the wrong store; a workflow without a study yet may take it
    recorded = record_data_end(engine, args.workspace, args.workflow, end)
    key = f"{args.workspace}/{args.workflow}"
    if recorded > end:  # the recorded end never moves back: nothing was written
        wrote = Wrote(f"the data end of {key} is {recorded.isoformat()} already, after "
                      f"{end.isoformat()} (it never moves back)", (), store=shown_store(store_url(args)))
    else:
        wrote = Wrote(f"the data end of {key}, {end.isoformat()}", (key,), store=shown_store(store_url(args)))
    if args.json:
        print_json({"workspace": args.workspace, "workflow": args.workflow, "data_end": recorded,
                    "wrote": wrote.to_json()})
    else:
        print(f"{args.workspace}/{args.workflow}: outcomes known up to {recorded.isoformat()}")
        say_wrote(args, wrote)
    return 0


def _workspace(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.decide import SubscriptionState
    from typestrict_pipeline.reruns.workspace import (
        set_workspace,
        store_spend_source,
        workspace_status,
    )
    from typestrict_pipeline.study.limits import format_usd, usd_to_micro

    setting = args.subscription is not None or args.budget_usd is not None
    engine = _engine(args) if setting else read_store(args)
    wrote = None  # without --subscription or --budget-usd it only reads
    if setting:
        set_workspace(
            engine, args.workspace,
            subscription=None if args.subscription is None else SubscriptionState(args.subscription),
            usage_budget_micro_usd=None if args.budget_usd is None else usd_to_micro(args.budget_usd),
        )
        what = " and ".join(w for w, given in (("the subscription state", args.subscription),
                                               ("the usage budget", args.budget_usd)) if given is not None)
        wrote = Wrote(f"{what} of workspace {args.workspace}", (args.workspace,),
                      store=shown_store(store_url(args)))
    status = workspace_status(engine, args.workspace, utcnow(), store_spend_source(engine))
    if status is None and not setting:  # an unknown workspace is a typo or the wrong store
        from typestrict_pipeline.workspaces import require_workspace

        require_workspace(engine, args.workspace)
    if args.json:
        shown = None if status is None else dict(status.__dict__)
        if wrote is not None:
            shown = {**(shown or {}), "wrote": wrote.to_json()}
        print_json(shown)
        return 0 if status is not None else 1
    if status is None:
        print(f"Workspace {args.workspace} has no subscription state yet: "
              "set one with --subscription ACTIVE --budget-usd 50")
        return 1
    first, last = status.period
    print(f"Workspace {status.workspace_id}: subscription {status.subscription.value}; "
          f"usage {format_usd(status.spent_micro_usd)} of {format_usd(status.usage_budget_micro_usd)} "
          f"({first.isoformat()} – {last.isoformat()})" + ("; usage budget exhausted" if status.usage_exhausted else ""))
    if wrote is not None:
        say_wrote(args, wrote)
    return 0


def _notifications(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.notify import (
        KIND_WINNER_CHANGED,
        TITLE_WINNER_CHANGED,
        set_notification,
    )

    set_notification(_engine(args), args.user, KIND_WINNER_CHANGED, args.on, workspace_id=args.workspace)
    about = "every workspace's schedules" if args.workspace is None else f"workspace {args.workspace}'s schedules"
    wrote = Wrote(f"the notification '{TITLE_WINNER_CHANGED}' turned {'on' if args.on else 'off'} for {args.user} "
                  f"(about {about})", (args.user,), store=shown_store(store_url(args)))
    if args.json:
        print_json({"user": args.user, "notification": TITLE_WINNER_CHANGED, "on": args.on,
                    "workspace": args.workspace, "wrote": wrote.to_json()})
    else:
        print(f"{args.user}: '{TITLE_WINNER_CHANGED}' {'on' if args.on else 'off'} (about {about})")
        say_wrote(args, wrote)
    return 0


def _deliver(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.notify import (
        FileTransport,
        deliver_pending,
        requeue,
        transport_from_env,
        transport_label,
    )

    engine = _engine(args)
    say = (lambda _text: None) if args.json else print
    if args.requeue is not None:
        requeue(engine, args.requeue)
        say(f"message {args.requeue} put back in the outbox")
    store = shown_store(store_url(args))
    requeued = () if args.requeue is None else (str(args.requeue),)
    transport = transport_from_env()
    if transport is None:
        wrote = (Wrote(f"message {args.requeue} back in the outbox", requeued, store=store) if requeued
                 else Wrote("no transport (TYPESTRICT_NOTIFY_TRANSPORT=none)", (), store=store))
        if args.json:
            print_json({"transport": None, "requeued": args.requeue, "sent": [], "failed": [], "dead": [],
                        "wrote": wrote.to_json()})
        say("TYPESTRICT_NOTIFY_TRANSPORT=none: messages stay in the outbox (typestrict schedule outbox lists them)")
        say_wrote(args, wrote)
        return 0
    if isinstance(transport, FileTransport):
        say(f"delivering to {transport.path}")
    report = deliver_pending(engine, transport)
    tried = tuple(str(m) for m in [*report.sent, *(m for m, _ in report.failed), *report.dead])
    files = (str(transport.path),) if isinstance(transport, FileTransport) and report.sent else ()
    if tried:
        wrote = Wrote(f"the delivery of message(s) {', '.join(tried)} ({len(report.sent)} sent, "
                      f"{len(report.failed)} kept for retry, {len(report.dead)} given up)"
                      + (f"; message {args.requeue} back in the outbox" if requeued else ""),
                      tuple(dict.fromkeys((*requeued, *tried))), store=store, files=files)
    else:
        wrote = (Wrote(f"message {args.requeue} back in the outbox", requeued, store=store) if requeued
                 else Wrote("the outbox has no message due", (), store=store))
    if args.json:
        print_json({"transport": transport_label(transport), "requeued": args.requeue,
                    "sent": list(report.sent), "failed": [{"id": m, "error": e} for m, e in report.failed],
                    "dead": list(report.dead), "wrote": wrote.to_json()})
        return 0 if not report.dead else 1
    print(f"{len(report.sent)} sent, {len(report.failed)} kept for retry, {len(report.dead)} given up")
    for mid, error in report.failed:
        print(f"  message {mid}: {error}")
    say_wrote(args, wrote)
    return 0 if not report.dead else 1


def _outbox(args: argparse.Namespace) -> int:
    from typestrict_pipeline.reruns.notify import outbox, transport_from_env, transport_label

    entries = outbox(read_store(args), undelivered_only=args.undelivered, limit=args.limit)
    if args.json:
        print_json({"transport": transport_label(transport_from_env()),
                    "messages": [dataclasses.asdict(e) for e in entries]})
        return 0
    print(f"Notifications are delivered to {transport_label(transport_from_env())}")
    if not entries:
        print("The outbox is empty" + (" of undelivered messages" if args.undelivered else ""))
        return 0
    for e in entries:
        print("  " + e.line())
    return 0


def _add_common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    return add_store(p)


def _add_enable(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = writes(_add_common(sub.add_parser("enable", help="re-run a finished study (with a USD budget) on a cadence")))
    p.add_argument("study_id", type=STUDY_ID, help="the finished study to re-run (it must have a USD budget)")
    p.add_argument("--cadence", default="1d", help="30m, 6h, 1d, 1w ... (default 1d)")
    p.add_argument("--owner", type=PERSON, help="who sets it up (default TYPESTRICT_USER)")
    p.add_argument("--min-unseen-steps", type=bounded_int("a number of steps", 1, MAX_STEPS),
                   help="only for a study created without the setting")
    add_json(p)
    p.set_defaults(func=_enable)


def _add_cancel(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = writes(_add_common(sub.add_parser("cancel", help="cancel a schedule")))
    p.add_argument("schedule_id", type=SCHEDULE_ID, help="the schedule (see `typestrict schedule status`)")
    p.add_argument("--by", type=PERSON, help="who cancels (default TYPESTRICT_USER)")
    add_json(p)
    p.set_defaults(func=_cancel)


def _add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser], help_text: str) -> None:
    p = _add_common(sub.add_parser("status", help=help_text))
    p.add_argument("schedule_id", type=SCHEDULE_ID, nargs="?", help="one schedule (default: all)")
    p.add_argument("--study", type=STUDY_ID, help="only the schedules of this study")
    p.add_argument("--workspace", type=WORKSPACE, help="only this workspace")
    p.add_argument("--ticks", type=bounded_int("a number of ticks", 0, 1000), default=5,
                   help="recent ticks to show (default 5)")
    add_json(p)
    p.set_defaults(func=_status)


def _add_lineage(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _add_common(sub.add_parser("lineage", help="the lineage panel of a study"))
    p.add_argument("study_id", type=STUDY_ID, help="any study of the lineage")
    add_json(p)
    p.set_defaults(func=_lineage)


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _study_status(args: argparse.Namespace) -> int:
    """``typestrict study status STUDY_ID``: the schedules of a study (a study id, as every
    ``study`` command takes), each with its timeline."""
    from typestrict_pipeline.reruns.service import list_schedules, status_text

    engine = read_store(args)
    _require_study(engine, args.study_id)
    views = list_schedules(engine, study_id=str(args.study_id))
    if args.json:
        print_json(_views_json(engine, list(views), args.ticks))
        return 0
    if not views:
        print(f"Study {args.study_id} has no re-run schedule. Enable one with: typestrict schedule enable "
              f"{args.study_id} --cadence 1h --owner EMAIL")
        return 0
    print("\n\n".join(status_text(engine, v, ticks=args.ticks) for v in views))
    return 0


def _study_cancel(args: argparse.Namespace) -> int:
    """``typestrict study schedule cancel STUDY_ID``: cancel the enabled schedule of a study's lineage."""
    from typestrict_pipeline.reruns.service import (
        cancel_schedule,
        lineage_root_of,
        list_schedules,
    )
    from typestrict_pipeline.reruns.tables import ScheduleState

    engine = _engine(args)
    _require_study(engine, args.study_id)
    root = lineage_root_of(engine, str(args.study_id))
    enabled = [v for v in list_schedules(engine, lineage_root_id=root) if v.state is ScheduleState.ENABLED]
    if not enabled:
        raise InputError(f"an enabled re-run schedule on the lineage of study {args.study_id}", "none",
                         "list the schedules with typestrict schedule status")
    now = utcnow()
    view = cancel_schedule(engine, enabled[0].id, by=_who(args.by), now=now)
    _say_cancelled(args, engine, view, now)
    return 0


def _extend_study(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Also offer ``typestrict study status|lineage|schedule enable|schedule cancel``, each taking a
    study id (one meaning for an id per command group; ``typestrict schedule status`` takes a
    schedule id).

    The ``study`` command belongs to the studies area (``cli/study.py``); these sub-commands are
    added to it only when it exists and does not already define them.
    """
    study = subparsers.choices.get("study")
    sub = None if study is None else _subcommands(study)
    if sub is None:
        return
    if "status" not in sub.choices:
        p = _add_common(sub.add_parser(
            "status", help="a study's re-run schedules: next evaluation, last decision, what would make it fire"))
        p.add_argument("study_id", type=STUDY_ID, help="the study (see `typestrict study list`)")
        p.add_argument("--ticks", type=bounded_int("a number of ticks", 0, 1000), default=5,
                       help="recent ticks to show (default 5)")
        add_json(p)
        p.set_defaults(func=_study_status)
    if "lineage" not in sub.choices:
        _add_lineage(sub)
    if "schedule" not in sub.choices:
        sched = sub.add_parser("schedule", help="re-run a finished study on a schedule (enable, cancel)")
        inner = sched.add_subparsers(dest="study_schedule_command", required=True)
        _add_enable(inner)
        p = writes(_add_common(inner.add_parser("cancel", help="cancel the enabled schedule of a study's lineage")))
        p.add_argument("study_id", type=STUDY_ID, help="any study of the lineage")
        p.add_argument("--by", type=PERSON, help="who cancels (default TYPESTRICT_USER)")
        add_json(p)
        p.set_defaults(func=_study_cancel)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``typestrict schedule ...`` (and ``typestrict study status|schedule|lineage``)."""
    sched = subparsers.add_parser("schedule", help="re-run finished studies on a schedule; lineage; skip reasons")
    sub = sched.add_subparsers(dest="schedule_command", required=True)

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        return _add_common(sub.add_parser(name, help=help_text))

    _add_enable(sub)
    _add_cancel(sub)
    _add_status(sub, "schedules and why they were skipped")
    _add_lineage(sub)

    p = writes(cmd("tick", "evaluate the schedules that are due (what the Dagster sensor does)"))
    p.add_argument("--now", type=now_option, help="evaluate as of this time (ISO 8601 with a zone; default now)")
    p.add_argument("--run", action="store_true", help="also run fired re-runs here and deliver notifications")
    add_json(p)
    p.set_defaults(func=_tick)

    p = writes(cmd("data-arrived", "record that a workflow's outcomes are known up to END"))
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id")
    p.add_argument("workflow", type=WORKFLOW, help="the workflow whose outcomes arrived")
    p.add_argument("end", help="end (exclusive) of the decision steps with a known outcome, ISO 8601")
    add_json(p)
    p.set_defaults(func=_data_arrived)

    p = writes(cmd("workspace", "a workspace's subscription, usage budget and spend"))  # with a setting
    p.add_argument("workspace", type=WORKSPACE, help="the workspace id")
    p.add_argument("--subscription", choices=["ACTIVE", "EXPIRED"], help="set the subscription state")
    p.add_argument("--budget-usd", type=usd, help="set the usage budget per calendar month, in USD")
    add_json(p)
    p.set_defaults(func=_workspace)

    p = writes(cmd("notifications", "turn 'A scheduled study changes its winner' on or off for a person"))
    p.add_argument("user", type=PERSON, help="the person (an email address)")
    onoff = p.add_mutually_exclusive_group(required=True)
    onoff.add_argument("--on", dest="on", action="store_true", help="send it")
    onoff.add_argument("--off", dest="on", action="store_false", help="do not send it")
    p.add_argument("--workspace", type=WORKSPACE, default=None,
                   help="only about this workspace's schedules, as its Settings → Notifications does "
                        "(default: about every workspace's, replacing the choices workspaces made)")
    add_json(p)
    p.set_defaults(func=_notifications)

    p = writes(cmd("deliver", "send the notification outbox now"))
    p.add_argument("--requeue", type=bounded_int("a message id", 1, 2**62), metavar="MESSAGE_ID",
                   help="first put a given-up message back")
    add_json(p)
    p.set_defaults(func=_deliver)

    p = add_json(cmd("outbox", "the notifications: delivered, waiting, or not delivered and why"))
    p.add_argument("--undelivered", action="store_true", help="only messages not delivered yet")
    p.add_argument("--limit", type=bounded_int("a number of messages", 1, 1000), default=50, metavar="N",
                   help="at most N (1-1000, default 50)")
    p.set_defaults(func=_outbox)

    _extend_study(subparsers)
