"""Running a study: plan its window runs, run each under the budget, rank, score the holdout.

The same functions serve the Dagster job (one op per window run, fanned out) and the local
runner below (a thread pool, for tests and benchmarks). What a run *does* is delegated to a
:class:`StudyBackend`: the backtest engine for a real workflow, or :class:`SyntheticBackend`.

Budget safety inside a run: before each step the run asks ``should_stop(cost_so_far, steps)``;
the guard stops the run (state ``CUT``) when the next step could take its spend past its
reservation (bound: the largest step cost seen so far in the run, or the per-step estimate),
so the study's spend stays within the sum of reservations, which the database keeps within the
budget. The guard also flushes progress to the store about once a second, so a killed run's
spending is recorded, and stops the run when the study is cancelled.

Orphaned workers stop: a window run in a worker process started by ``multiprocessing`` (a
Dagster step of the multiprocess executor) checks before each step, and before each window,
that the process that started it is alive (:func:`parent_gone`). When the run's process was
killed (``kill -9``), the worker cuts its window at the next step (its spend so far is
recorded) and starts no further window; a resumed run re-runs what was cut and charges what
was spent once (see :func:`execute_run`).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import math
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from typestrict_pipeline.errors import NotEnoughDataError
from typestrict_pipeline.progress import Progress, ProgressFn
from typestrict_pipeline.store import session_scope, utcnow
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.dependence import Dependence
from typestrict_pipeline.study.folds import FoldLayout, Window
from typestrict_pipeline.study.inference import holdout_standard_error
from typestrict_pipeline.study.leaderboard import load_leaderboard
from typestrict_pipeline.study.stats import newey_west_se
from typestrict_pipeline.study.tables import (
    CandidateRow,
    CandidateState,
    RunRow,
    RunState,
    StudyRow,
    StudyState,
    WindowKind,
)

ShouldStop = Callable[[int, int], bool]
"""``should_stop(cost_micro_so_far, steps_so_far) -> bool``, asked before each step."""


@dataclass(frozen=True)
class CandidateSpec:
    """What a backend needs to run one candidate."""

    candidate_id: int
    index: int
    params: Mapping[str, Any]
    prompts: Mapping[str, str]


@dataclass(frozen=True)
class WindowOutcome:
    """What one window run produced: per-step scores keyed by step time, its cost and steps."""

    scores: Sequence[tuple[str, float]]
    cost_micro: int
    steps_done: int
    cut: bool = False


class StudyBackend(Protocol):
    """Runs one candidate over one window (a backtest); ``seal_at`` is the holdout seal."""

    def run_window(
        self,
        candidate: CandidateSpec,
        window: Window,
        kind: WindowKind,
        *,
        seal_at: dt.datetime | None,
        should_stop: ShouldStop,
    ) -> WindowOutcome: ...


@dataclass(frozen=True)
class RunKey:
    """One planned window run: the idempotency key (study, candidate, fold, window) and its bounds."""

    study_id: int
    candidate_id: int
    fold: int
    window: WindowKind
    start: dt.datetime
    end: dt.datetime
    steps: int

    @property
    def name(self) -> str:
        """A Dagster-safe mapping key, e.g. ``c12_f3_eval``."""
        return f"c{self.candidate_id}_f{self.fold}_{self.window.value.lower()}"


@dataclass(frozen=True)
class RunResult:
    """How one window run ended: ``DONE``, ``ALREADY_DONE``, ``CUT``, ``REFUSED`` or ``FAILED``."""

    key: RunKey
    status: str
    cost_micro: int = 0
    detail: str | None = None


def plan_runs(engine: Engine, study_id: int) -> list[RunKey]:
    """Every search run of a study, candidate by candidate (tune then eval, fold by fold)."""
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        layout = FoldLayout.from_json(study.layout_json)
        cands = s.execute(
            select(CandidateRow.id)
            .where(CandidateRow.study_id == study_id,
                   CandidateRow.state != CandidateState.DISCARDED.value)
            .order_by(CandidateRow.idx)
        ).scalars().all()
    keys: list[RunKey] = []
    for cid in cands:
        for fold in layout.folds:
            for kind, win in ((WindowKind.TUNE, fold.tune), (WindowKind.EVAL, fold.eval)):
                keys.append(RunKey(study_id, cid, fold.index, kind, win.start, win.end, win.steps))
    return keys


SEARCH_PROGRESS = "search"
"""What :func:`search_progress` reports, in words."""


def search_progress(engine: Engine, study_id: int) -> Progress:
    """How far a study's search is: its finished window runs (done, cut or failed) of every
    planned one (:func:`plan_runs`: the candidates not discarded × folds × tune and
    eval), counted in the store, so any process can ask (the CLI's bar, a Dagster step's log
    lines, the console's page).

    Raises:
        NotFoundError: no study ``study_id``.
    """
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        return searches_progress(s, [study])[study.id]


def searches_progress(session: Session, studies: Sequence[StudyRow]) -> dict[int, Progress]:
    """:func:`search_progress` of each of ``studies`` (rows in hand), in two grouped counts
    whatever their number (a list of studies asks once, not once a study)."""
    ids = [st.id for st in studies]
    if not ids:
        return {}
    candidates = {int(sid): int(n) for sid, n in session.execute(
        select(CandidateRow.study_id, func.count()).where(
            CandidateRow.study_id.in_(ids), CandidateRow.state != CandidateState.DISCARDED.value)
        .group_by(CandidateRow.study_id))}
    done = {int(sid): int(n) for sid, n in session.execute(
        select(RunRow.study_id, func.count()).where(
            RunRow.study_id.in_(ids), RunRow.window != WindowKind.HOLDOUT.value,
            RunRow.finished_at.is_not(None))
        .group_by(RunRow.study_id))}
    out: dict[int, Progress] = {}
    for st in studies:
        total = candidates.get(st.id, 0) * len(FoldLayout.from_json(st.layout_json).folds) * 2
        out[st.id] = Progress(SEARCH_PROGRESS, min(done.get(st.id, 0), total), total,
                              unit="window runs")
    return out


def deal_chunks(keys: Sequence[RunKey], n_chunks: int) -> list[list[RunKey]]:
    """Deal a study's planned window runs into at most ``n_chunks`` work-sized chunks.

    Balanced by estimated steps (the longest work first, each to the least loaded chunk; ties
    go to the lower chunk). A candidate's windows stay together (in plan order: tune then eval,
    fold by fold) while there are at least as many candidates as chunks; with fewer
    candidates, single windows are dealt instead so every chunk has work. Each chunk runs its
    windows in plan order, so it resumes window by window like any step (``execute_run`` is
    idempotent on the window's key). Deterministic: same plan, same chunks.

    Args:
        keys: the planned window runs (``plan_runs``), in plan order.
        n_chunks: the number of chunks wanted (at least 1).

    Returns:
        The non-empty chunks, ordered by their first window in plan order.

    >>> t = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    >>> keys = [RunKey(1, c, f, WindowKind.TUNE, t, t, steps)
    ...         for c, steps in ((10, 5), (11, 3), (12, 2)) for f in (1, 2)]
    >>> [[(k.candidate_id, k.fold) for k in chunk] for chunk in deal_chunks(keys, 2)]
    [[(10, 1), (10, 2)], [(11, 1), (11, 2), (12, 1), (12, 2)]]
    >>> [sum(k.steps for k in chunk) for chunk in deal_chunks(keys[:2], 4)]
    [5, 5]
    """
    if n_chunks < 1:
        raise ValueError(f"expected at least 1 chunk, got {n_chunks}")
    order = {id(k): i for i, k in enumerate(keys)}
    groups: dict[int, list[RunKey]] = {}
    for key in keys:
        groups.setdefault(key.candidate_id, []).append(key)
    units = list(groups.values()) if len(groups) >= n_chunks else [[k] for k in keys]
    units.sort(key=lambda u: -sum(k.steps for k in u))  # stable: plan order among equals
    loads = [0] * min(n_chunks, len(units))
    chunks: list[list[RunKey]] = [[] for _ in loads]
    for unit in units:
        target = loads.index(min(loads))
        chunks[target].extend(unit)
        loads[target] += sum(k.steps for k in unit)
    for chunk in chunks:
        chunk.sort(key=lambda k: order[id(k)])
    return sorted(chunks, key=lambda c: order[id(c[0])])


def default_chunk_count(workers: int, *, per_worker: int = 1) -> int:
    """The default number of chunks: ``per_worker`` chunks for each of the executor's workers.

    One per worker: :func:`deal_chunks` already balances the chunks by estimated steps, and
    every further step costs a step process's start-up on a multiprocess executor (the 64 x 4
    benchmark study: 7.6-8.2 s with 2 chunks against 9.4-12.1 s with 4 on the job's default
    executor, docs/benchmarks.md). Set ``chunks`` for more when windows' costs vary widely.

    >>> default_chunk_count(2), default_chunk_count(2, per_worker=2)
    (2, 4)
    """
    return max(1, workers) * max(1, per_worker)


def limits_stop_search(keys: Sequence[RunKey], *, estimate: Callable[[int], int],
                       budget_micro: int | None, max_total_steps: int | None) -> bool:
    """Whether a study's limits will stop its search before its end, by its own estimate: the
    planned window runs' summed estimate above the USD budget, or their steps above the step
    limit (the holdout comes after the search and is not counted here).

    ``estimate(steps)`` is the study's estimate of a window of that many steps, as its
    reservations price it.

    >>> t = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    >>> keys = [RunKey(1, c, 1, WindowKind.TUNE, t, t, 50) for c in (1, 2)]
    >>> limits_stop_search(keys, estimate=lambda n: 10 * n, budget_micro=1_000, max_total_steps=None)
    False
    >>> limits_stop_search(keys, estimate=lambda n: 10 * n, budget_micro=999, max_total_steps=None)
    True
    >>> limits_stop_search(keys, estimate=lambda n: 0, budget_micro=None, max_total_steps=99)
    True
    """
    if budget_micro is not None and sum(estimate(k.steps) for k in keys) > budget_micro:
        return True
    return max_total_steps is not None and sum(k.steps for k in keys) > max_total_steps


def search_chunks(engine: Engine, study_id: int, keys: Sequence[RunKey],
                  n_chunks: int) -> list[list[RunKey]]:
    """A study's planned window runs as the chunks its steps run: :func:`deal_chunks` into
    ``n_chunks``, or one chunk in plan order when its limits will stop the search
    (:func:`limits_stop_search`).

    The page: a study whose budget is below its estimate "simply stops before the run that
    would exceed it", and "the candidates that ran are ranked, and a winner is picked from
    them". Run side by side, which windows won the budget would be a race: four chunks could
    each reserve a candidate's first tune window and leave nothing for any eval window, and the
    study would end with no candidate ranked. In plan order (candidate by candidate: tune then
    eval, fold by fold) it stops where one process would, and the same study ranks the same
    candidates however many workers it was given. Such a study gives up the parallelism.

    Raises:
        NotFoundError: no study ``study_id``.
    """
    if not keys:
        return []
    if search_in_plan_order(engine, study_id, keys):
        return [list(keys)]
    return deal_chunks(keys, n_chunks)


def search_in_plan_order(engine: Engine, study_id: int, keys: Sequence[RunKey]) -> bool:
    """Whether study ``study_id``'s window runs (``keys``, its plan) must run one at a time in
    plan order: its limits will stop its search (:func:`limits_stop_search`, with the study's
    own estimate per step, budget and step limit). See :func:`search_chunks`.

    Raises:
        NotFoundError: no study ``study_id``.
    """
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        budget, max_steps = study.budget_micro, study.max_total_steps
    static = _static(engine, study_id)
    return limits_stop_search(keys, estimate=lambda n: _estimate(static, n),
                              budget_micro=budget, max_total_steps=max_steps)


@dataclass(frozen=True)
class _StudyStatic:
    """What never changes after a study is created (cached per process)."""

    layout: FoldLayout
    cost_num: int | None
    cost_den: int | None
    enforce_cost: bool


_STATIC: dict[tuple[str, int], _StudyStatic] = {}
_CANDIDATES: dict[tuple[str, int], CandidateSpec] = {}
_CACHE_LOCK = threading.Lock()


def _static(engine: Engine, study_id: int) -> _StudyStatic:
    key = (engine.url.render_as_string(hide_password=False), study_id)
    with _CACHE_LOCK:
        hit = _STATIC.get(key)
    if hit is not None:
        return hit
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        value = _StudyStatic(FoldLayout.from_json(study.layout_json), study.cost_per_step_num,
                             study.cost_per_step_den, study.budget_micro is not None)
    with _CACHE_LOCK:
        if len(_STATIC) > 1024:
            _STATIC.clear()
        _STATIC[key] = value
    return value


def _estimate(static: _StudyStatic, steps: int) -> int:
    if static.cost_num is None or not static.cost_den:
        return 0
    return -(-static.cost_num * steps // static.cost_den)


BASELINE = CandidateSpec(repo.BASELINE_CANDIDATE_ID, -1, {}, {})
"""The baseline scored on the holdout: the studied version with its default parameters and
prompts (no candidate row; its run is stored with ``candidate_id`` 0 and costed like any run)."""


def _candidate_spec(engine: Engine, candidate_id: int) -> CandidateSpec:
    if candidate_id == repo.BASELINE_CANDIDATE_ID:
        return BASELINE
    key = (engine.url.render_as_string(hide_password=False), candidate_id)
    with _CACHE_LOCK:
        hit = _CANDIDATES.get(key)
    if hit is not None:
        return hit
    with session_scope(engine) as s:
        row = s.get(CandidateRow, candidate_id)
        assert row is not None
        spec = CandidateSpec(row.id, row.idx, dict(row.params_json), dict(row.prompts_json))
    with _CACHE_LOCK:
        if len(_CANDIDATES) > 65536:
            _CANDIDATES.clear()
        _CANDIDATES[key] = spec
    return spec


def parent_gone() -> bool:
    """Whether this is a ``multiprocessing`` worker whose starting process has died.

    False in a process not started by ``multiprocessing`` (the CLI, an in-process run): a
    shell that exits does not stop a study. Costs one non-blocking ``select`` on the pipe the
    parent holds open (it reads end-of-file once the parent is gone, however it died).

    >>> parent_gone()
    False
    """
    parent = multiprocessing.parent_process()
    return parent is not None and not parent.is_alive()


ORPHANED = "the process that started this worker is gone (its run was killed)"
"""The ``detail`` of a window run refused, or the reason a window was cut, by :func:`parent_gone`."""


SETTLE_WAIT_S = 600.0
"""How long a model call that does not fit beside the calls in flight waits for one of them to
settle (:meth:`_Guard.admit`) before its run is cut: far above a model call's own timeout, so only
a call that never returns (a bug) ends the wait."""


class _Guard:
    """The per-run ``should_stop``: budget bound per step, progress flushes, cancellation.

    ``guard(cost, steps)`` is for backends that run one step at a time (``cost`` of the
    ``steps`` finished so far). Concurrent backends call ``guard.check(cost_finished,
    steps_started, steps_finished, max_step_cost)`` so that steps in flight, not yet priced,
    are counted at the largest step cost seen.
    """

    def __init__(self, engine: Engine, reservation: repo.Reservation, per_step: int,
                 enforce_cost: bool, flush_every_s: float = 1.0,
                 settle_wait_s: float = SETTLE_WAIT_S) -> None:
        self.engine = engine
        self.reservation = reservation
        self.reserved = reservation.reserved_micro
        self.per_step = per_step
        self.enforce_cost = enforce_cost
        self.flush_every_s = flush_every_s
        self.last_flush = time.monotonic()
        self.last_cost = 0
        self.last_steps = 0
        self.max_step_cost = 0
        self.call_spent = 0
        self.call_held = 0
        self.settlements = 0
        self.waiting = 0  # calls waiting in admit() for a settlement
        self.cut = False
        self.stopped = False
        self.settle_wait_s = settle_wait_s
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)

    def admit(self, bound_micro: int) -> bool:
        """Reserve before calling (a :class:`~typestrict_pipeline.backtest.metering.CallGate`):
        admit a call that can cost at most ``bound_micro`` only if what this attempt spent, the
        calls in flight at their most, and this call fit in its reservation, which is extended
        within the study's budget when they do not. So a run's spend never passes what the
        budget reserved for it, not even by one step.

        When the call does not fit only because of the calls in flight (each held at its bound,
        several times what it really costs), it waits for them to settle, which frees what they
        held beyond their cost, and tries again: the run is cut only when nothing is in flight
        and the call still does not fit, or after :attr:`settle_wait_s` without a settlement,
        or when its process lost its parent. Cutting at once cut a study whose budget equalled
        its estimate at about 80% of it, before its holdout."""
        with self._settled:
            if not self.enforce_cost:
                return True
            waited_since: float | None = None
            while True:
                need = self.call_spent + self.call_held + bound_micro
                if need <= self.reserved or self._extend(
                        need - self.reserved, max(need - self.reserved, self.reservation.reserved_micro // 4)):
                    self.call_held += bound_micro
                    return True
                now = time.monotonic()
                waited_since = now if waited_since is None else waited_since
                left = self.settle_wait_s - (now - waited_since)
                if self.call_held <= 0 or left <= 0 or parent_gone():
                    self.cut = True
                    return False
                seen = self.settlements
                self.waiting += 1
                try:  # woken by a settlement; the timeout only re-reads parent_gone() and the bound
                    self._settled.wait_for(functools.partial(self._settled_since, seen), timeout=min(left, 1.0))
                finally:
                    self.waiting -= 1

    def _settled_since(self, seen: int) -> bool:
        return self.settlements != seen

    def _extend(self, need: int, ask: int) -> bool:
        """Reserve more for this run, within the study's budget (the caller holds the lock):
        ``ask`` (``need`` with room for the next steps, so the run does not come back for every
        step), else only ``need`` when the budget has room for that but not for ``ask``. Asking
        only for the padded amount cut a run whose next step still fitted the budget, near its
        end, and with it the study: a budget equal to the estimate lost its holdout."""
        for extra in (ask, need) if need < ask else (ask,):
            if repo.extend_reservation(self.engine, self.reservation.run_id,
                                       self.reservation.attempt, extra):
                self.reserved += extra
                return True
        return False

    def settle(self, bound_micro: int, cost_micro: int) -> None:
        """A call admitted by :meth:`admit` ended: it cost ``cost_micro``."""
        with self._lock:
            self.call_held -= bound_micro
            self.call_spent += cost_micro
            self.settlements += 1
            self._settled.notify_all()  # a call waiting in admit() may fit now

    def __call__(self, cost_micro: int, steps: int) -> bool:
        with self._lock:
            if steps == self.last_steps + 1:
                self.max_step_cost = max(self.max_step_cost, cost_micro - self.last_cost)
            elif steps > self.last_steps:
                self.max_step_cost = max(self.max_step_cost, -(-(cost_micro - self.last_cost)
                                                                // (steps - self.last_steps)))
            self.last_cost, self.last_steps = cost_micro, steps
            max_step = self.max_step_cost
        return self.check(cost_micro, steps, steps, max_step)

    def check(self, cost_finished: int, started: int, finished: int, max_step_cost: int) -> bool:
        """Stop before the next step if it (and the steps in flight) could pass the reservation."""
        with self._lock:
            self.last_cost = max(self.last_cost, cost_finished)
            self.last_steps = max(self.last_steps, finished)
            if started >= self.reservation.steps:
                return True
            if parent_gone():
                self.stopped = True
                return True
            if self.cut:  # a call was refused: the budget is reached, no further step
                return True
            if self.enforce_cost:
                bound = max(self.per_step, max_step_cost, 1)
                committed = cost_finished + (started - finished + 1) * bound
                if committed > self.reserved and not self._extend(
                        committed - self.reserved,
                        max(committed - self.reserved, self.reservation.reserved_micro // 4, bound)):
                    # The run outgrows its estimate and the budget cannot give what it needs.
                    self.cut = True
                    return True
            now = time.monotonic()
            flush = now - self.last_flush >= self.flush_every_s
            if flush:
                self.last_flush = now
        if flush and not repo.flush_progress(self.engine, self.reservation.run_id,
                                             self.reservation.attempt,
                                             self.reservation.prior_cost_micro + cost_finished,
                                             finished):
            self.stopped = True
            return True
        return False


def execute_run(engine: Engine, key: RunKey, backend: StudyBackend, *,
                attempt: str | None = None,
                reserved: repo.Reservation | repo.AlreadyDone | None = None) -> RunResult:
    """Reserve, run and settle one window run (idempotent on its key).

    Returns ``ALREADY_DONE`` without running anything when an earlier attempt finished it, and
    ``REFUSED`` when a limit (or a cancel) stops the study before this run. ``reserved`` is the
    run's reservation when the caller made it already (:func:`repo.reserve_runs_together`).
    """
    if parent_gone():
        if isinstance(reserved, repo.Reservation):
            repo.settle_run(engine, reserved, cost_micro=reserved.prior_cost_micro, steps_done=0,
                            scores=(), state=RunState.CUT)
        return RunResult(key, "REFUSED", detail=ORPHANED)
    static = _static(engine, key.study_id)
    outcome = reserved if reserved is not None else repo.reserve_run(
        engine, key.study_id, key.candidate_id, key.fold, key.window, key.steps,
        attempt=attempt, estimate_micro=_estimate(static, key.steps))
    if isinstance(outcome, repo.AlreadyDone):
        return RunResult(key, "ALREADY_DONE")
    if isinstance(outcome, repo.Refused):
        why = outcome.limit.value if outcome.limit else outcome.state.label
        return RunResult(key, "REFUSED", detail=why)
    guard = _Guard(engine, outcome, _estimate(static, 1), static.enforce_cost)
    seal = None if key.window == WindowKind.HOLDOUT else static.layout.seal_at
    cand = _candidate_spec(engine, key.candidate_id)
    try:
        result = backend.run_window(cand, Window(key.start, key.end, key.steps), key.window,
                                    seal_at=seal, should_stop=guard)
    except Exception as exc:
        repo.settle_run(engine, outcome, cost_micro=outcome.prior_cost_micro + guard.last_cost,
                        steps_done=guard.last_steps, scores=(), state=RunState.FAILED,
                        error=f"{type(exc).__name__}: {exc}")
        raise
    cut = guard.cut or guard.stopped or result.cut or result.steps_done < key.steps
    state = RunState.CUT if cut else RunState.DONE
    repo.settle_run(engine, outcome, cost_micro=outcome.prior_cost_micro + result.cost_micro,
                    steps_done=result.steps_done, scores=result.scores, state=state)
    if guard.cut:
        repo.record_stop(engine, key.study_id)
    return RunResult(key, state.value, result.cost_micro)


SLICE_MAX_WINDOWS = 32
"""At most this many windows of a chunk are reserved together (:func:`execute_chunk`)."""
SLICE_MAX_BUDGET_SHARE = 50
"""...and, for a study with a USD budget, their summed estimate is at most 1/50 of the budget
(always at least one window): near the end of the budget, the windows a slice holds reserved
and has not yet run are at most 2% of it per chunk in flight."""
SETTLE_EVERY_S = 1.0
"""A slice's finished windows are settled together at least this often (and at its end), so
what a killed process spent and did not record is about a second of work, as with one window's
progress flushes."""


def slice_length(keys: Sequence[RunKey], estimates: Sequence[int],
                 budget_micro: int | None) -> int:
    """How many of the next windows (``keys``, in order, with their estimates) one slice takes.

    >>> t = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    >>> keys = [RunKey(1, c, 1, WindowKind.TUNE, t, t, 10) for c in range(40)]
    >>> slice_length(keys, [0] * 40, None), slice_length(keys, [100] * 40, 1_000)
    (32, 1)
    >>> slice_length(keys, [100] * 40, 50_000), slice_length(keys[:3], [100] * 3, None)
    (10, 3)
    """
    cap = None if budget_micro is None else budget_micro // SLICE_MAX_BUDGET_SHARE
    n = total = 0
    for est in estimates[: min(len(keys), SLICE_MAX_WINDOWS)]:
        if n and cap is not None and total + est > cap:
            break
        total += est
        n += 1
    return max(n, 1) if keys else 0


def execute_chunk(engine: Engine, keys: Sequence[RunKey], backend: StudyBackend, *,
                  attempt: str, progress: ProgressFn | None = None) -> list[RunResult]:
    """Run a chunk's windows in order, reserving and settling them a slice at a time.

    Each slice is the next :func:`slice_length` windows: one reservation for all of them
    (:func:`repo.reserve_slice`, their summed estimate, within the limits, else the longest
    prefix that fits), then each window runs under its own guard (a run that outgrows its
    estimate extends its own reservation; progress is flushed per window), then the finished
    windows are settled together (:func:`repo.settle_runs`) at the slice's end and at least
    every :data:`SETTLE_EVERY_S`. Each window keeps its idempotency key and its attempt
    (``attempt:window name``): a resumed chunk never re-runs or re-charges a settled window,
    and a window left reserved by a killed attempt is released and run again. Before each
    window after the slice's first, the study is asked whether runs may still start: a cancel
    or a limit recorded by another chunk stops the rest of the slice at once (its reservation
    given back). The results stop at the first ``REFUSED`` window. ``progress``, when given,
    hears the whole study's :func:`search_progress` after each slice (every chunk's windows).

    Raises:
        Exception: what the backend raised (the slice's finished windows settled, the failing
            one ``FAILED`` with what it spent, the rest released).
    """
    results: list[RunResult] = []
    if not keys:
        return results
    static = _static(engine, keys[0].study_id)
    budget = _budget(engine, keys[0].study_id) if static.enforce_cost else None
    i = 0
    while i < len(keys):
        if parent_gone():
            results.append(RunResult(keys[i], "REFUSED", detail=ORPHANED))
            break
        rest = keys[i:]
        estimates = [_estimate(static, k.steps) for k in rest[:SLICE_MAX_WINDOWS]]
        piece = rest[: slice_length(rest, estimates, budget)]
        done = _execute_slice(engine, piece, estimates, backend, static, attempt)
        results.extend(done)
        i += len(done)
        if progress is not None:
            progress(search_progress(engine, keys[0].study_id))
        if not done or done[-1].status == "REFUSED" or done[-1].detail == ORPHANED:
            break
    return results


def _budget(engine: Engine, study_id: int) -> int | None:
    with session_scope(engine) as s:
        return repo.get_study(s, study_id).budget_micro


def _execute_slice(engine: Engine, piece: Sequence[RunKey], estimates: Sequence[int],
                   backend: StudyBackend, static: _StudyStatic,
                   attempt: str) -> list[RunResult]:
    study_id = piece[0].study_id
    held = repo.reserve_slice(
        engine, study_id,
        [(k.candidate_id, k.fold, k.window, k.steps, e)
         for k, e in zip(piece, estimates[: len(piece)], strict=True)],
        attempts=[f"{attempt}:{k.name}" for k in piece])
    if isinstance(held, repo.Refused):
        why = held.limit.value if held.limit else held.state.label
        return [RunResult(piece[0], "REFUSED", detail=why)]
    results: list[RunResult] = []
    pending: list[tuple[repo.Reservation, repo.Settlement]] = []
    last_write = time.monotonic()
    runs = list(held.runs)

    def unstarted(j: int) -> list[repo.Reservation]:
        return [r for r in runs[j:] if isinstance(r, repo.Reservation)]

    for j, (key, outcome) in enumerate(zip(piece, runs, strict=False)):  # runs: a prefix
        if isinstance(outcome, repo.AlreadyDone):
            results.append(RunResult(key, "ALREADY_DONE"))
            continue
        stop: str | None = None
        if parent_gone():
            stop = ORPHANED
        elif j > 0 and (refused := repo.study_refusal(engine, study_id)) is not None:
            stop = refused.limit.value if refused.limit else refused.state.label
        if stop is not None:
            repo.settle_runs(engine, pending)
            repo.release_unstarted(engine, unstarted(j), held.fresh)
            results.append(RunResult(key, "REFUSED", detail=stop))
            return results
        guard = _Guard(engine, outcome, _estimate(static, 1), static.enforce_cost)
        seal = None if key.window == WindowKind.HOLDOUT else static.layout.seal_at
        cand = _candidate_spec(engine, key.candidate_id)
        started = utcnow()
        try:
            result = backend.run_window(cand, Window(key.start, key.end, key.steps), key.window,
                                        seal_at=seal, should_stop=guard)
        except Exception as exc:
            pending.append((outcome, repo.Settlement(
                outcome.prior_cost_micro + guard.last_cost, guard.last_steps, (),
                RunState.FAILED, f"{type(exc).__name__}: {exc}", started, utcnow())))
            repo.settle_runs(engine, pending)
            repo.release_unstarted(engine, unstarted(j + 1), held.fresh)
            raise
        cut = guard.cut or guard.stopped or result.cut or result.steps_done < key.steps
        state = RunState.CUT if cut else RunState.DONE
        pending.append((outcome, repo.Settlement(outcome.prior_cost_micro + result.cost_micro,
                                                 result.steps_done, result.scores, state,
                                                 started_at=started, finished_at=utcnow())))
        results.append(RunResult(key, state.value, result.cost_micro))
        if guard.cut or guard.stopped:
            repo.settle_runs(engine, pending)
            repo.release_unstarted(engine, unstarted(j + 1), held.fresh)
            if guard.cut:
                repo.record_stop(engine, study_id)
            return results
        now = time.monotonic()
        if now - last_write >= SETTLE_EVERY_S:
            repo.settle_runs(engine, pending)
            pending, last_write = [], now
    repo.settle_runs(engine, pending)
    return results


@dataclass(frozen=True)
class StudyOutcome:
    """The end of a study: its state, winner, holdout score (or why it is missing), and the
    baseline on the same holdout slice with the SE of the per-step difference."""

    study_id: int
    state: StudyState
    winner_candidate_id: int | None
    holdout_score: float | None
    holdout_se: float | None
    holdout_missing_reason: str | None
    holdout_baseline: float | None = None
    holdout_diff_se: float | None = None
    holdout_baseline_missing_reason: str | None = None


def missing_runs(engine: Engine, study_id: int) -> list[RunKey]:
    """Planned search runs with no finished row (a resumed run may not have re-planned them)."""
    keys = plan_runs(engine, study_id)
    with session_scope(engine) as s:
        # The keys only: loading the rows would decode every run's scores (a 10,000 x 8 study:
        # 160,000 runs of 125 scores, about 5 GB of Python objects in the finalize step).
        finished = {
            (int(cid), int(fold), str(window))
            for cid, fold, window in s.execute(select(
                RunRow.candidate_id, RunRow.fold, RunRow.window).where(
                RunRow.study_id == study_id,
                RunRow.state.in_([RunState.DONE.value, RunState.CUT.value]),
            ))
        }
    return [k for k in keys if (k.candidate_id, k.fold, k.window.value) not in finished]


def finalize_study(engine: Engine, study_id: int, backend: StudyBackend, *,
                   catch_up: bool = True) -> StudyOutcome:
    """Rank what ran, pick the winner, score it once on the holdout, close the study.

    With ``catch_up`` (the default) any planned search run that has not finished (for example
    after a re-execution that did not re-plan every step) is run first, here, in order; runs
    the limits refuse stay unrun.
    """
    if catch_up:
        with session_scope(engine) as s:
            running = repo.get_study(s, study_id).state == StudyState.RUNNING.value
        if running:
            for key in missing_runs(engine, study_id):
                if execute_run(engine, key, backend).status == "REFUSED":
                    break
    board = load_leaderboard(engine, study_id)
    winner = board.winner_candidate_id
    with session_scope(engine) as s:
        study = repo.get_study(s, study_id)
        state = StudyState(study.state)
        layout = FoldLayout.from_json(study.layout_json)
        for row in board.rows:
            cand = s.get(CandidateRow, row.candidate_id)
            if cand is not None and cand.state == CandidateState.PLANNED.value and row.ran:
                cand.state = (CandidateState.DONE if row.complete else CandidateState.PARTIAL).value
    score = se = None
    missing: str | None = None
    base = _BaselineResult(None, None, "the winner's holdout was not scored, so the baseline was not run")
    if winner is None:
        missing = "No candidate has an out-of-sample score, so there is no winner to score."
    elif state == StudyState.CANCELLED:
        missing = "The study was cancelled before the winner's holdout run."
    else:
        h = layout.holdout
        key = RunKey(study_id, winner, repo.HOLDOUT_FOLD, WindowKind.HOLDOUT, h.start, h.end, h.steps)
        base_key = RunKey(study_id, repo.BASELINE_CANDIDATE_ID, repo.HOLDOUT_FOLD,
                          WindowKind.HOLDOUT, h.start, h.end, h.steps)
        # "The holdout" is the winner's run and the baseline's on the same slice: reserved
        # together, so either both run or the holdout is reported missing (docs/method/studies.md).
        pair = repo.reserve_runs_together(
            engine, study_id, [(k.candidate_id, k.fold, k.window, k.steps) for k in (key, base_key)])
        if isinstance(pair, repo.Refused):
            why = pair.limit.value if pair.limit else pair.state.label
            missing = f"{HOLDOUT_MISSING}\nLimit reached: {why}."
        else:
            execute_run(engine, key, backend, reserved=pair[0])
            with session_scope(engine) as s:
                run = s.execute(select(RunRow).where(
                    RunRow.study_id == study_id, RunRow.candidate_id == winner,
                    RunRow.fold == repo.HOLDOUT_FOLD, RunRow.window == WindowKind.HOLDOUT.value,
                )).scalar_one()
                values = [float(v) for _, v in (run.scores_json or [])]
                if run.state != RunState.DONE.value:
                    missing = (f"{HOLDOUT_MISSING}\nThe holdout run stopped after "
                               f"{run.steps_done} of {h.steps} steps; a shorter holdout is "
                               "never scored.")
            if missing is None:
                score = float(np.mean(values)) if values else None
                try:
                    se = newey_west_se(values, layout.horizon_steps)
                except NotEnoughDataError:
                    se = None
                base = _score_baseline(engine, study_id, layout, winner, backend, pair[1],
                                       board.joint.dependence if board.joint is not None else None)
            else:
                release = pair[1]
                if isinstance(release, repo.Reservation):  # the baseline is not run alone
                    repo.settle_run(engine, release, cost_micro=release.prior_cost_micro,
                                    steps_done=0, scores=(), state=RunState.CUT)
    final = repo.finish_study(engine, study_id, winner_candidate_id=winner, holdout_score=score,
                              holdout_se=se, holdout_missing_reason=missing,
                              holdout_baseline=base.score, holdout_diff_se=base.diff_se,
                              holdout_baseline_missing_reason=base.missing)
    return StudyOutcome(study_id, final, winner, score, se, missing, base.score, base.diff_se,
                        base.missing)


HOLDOUT_MISSING = ("The budget was reached before the winner's holdout run. The ranking stands; "
                   "the holdout score does not exist. Raise the budget and run the study again "
                   "to get it.")
"""The page's words for a study whose holdout could not be afforded ("Why is the holdout
missing?"); what the product adds (which limit) follows on its own line."""


@dataclass(frozen=True)
class _BaselineResult:
    score: float | None
    diff_se: float | None
    missing: str | None


def _holdout_scores(engine: Engine, study_id: int, candidate_id: int) -> tuple[RunRow, dict[str, float]]:
    with session_scope(engine) as s:
        run = s.execute(select(RunRow).where(
            RunRow.study_id == study_id, RunRow.candidate_id == candidate_id,
            RunRow.fold == repo.HOLDOUT_FOLD, RunRow.window == WindowKind.HOLDOUT.value,
        )).scalar_one()
        s.expunge(run)
    return run, {str(t): float(v) for t, v in (run.scores_json or [])}


def _score_baseline(engine: Engine, study_id: int, layout: FoldLayout, winner: int,
                    backend: StudyBackend,
                    reserved: repo.Reservation | repo.AlreadyDone | None = None,
                    dependence: Dependence | None = None) -> _BaselineResult:
    """Run the baseline on the holdout slice (after the winner's run, under the reservation
    made with it).

    Returns its mean score and the SE of the per-step difference winner − baseline on the steps
    both scored (``inference.holdout_standard_error``, with the persistence measured over the
    study's candidates carried in: the lineage pools these SEs), or why it is missing.
    """
    h = layout.holdout
    key = RunKey(study_id, repo.BASELINE_CANDIDATE_ID, repo.HOLDOUT_FOLD, WindowKind.HOLDOUT,
                 h.start, h.end, h.steps)
    res = execute_run(engine, key, backend, reserved=reserved)
    if res.status == "REFUSED":
        return _BaselineResult(None, None, (
            f"Budget reached before the baseline's holdout run ({res.detail}). The winner's "
            "holdout score stands; its difference from the baseline does not exist."))
    run, base = _holdout_scores(engine, study_id, repo.BASELINE_CANDIDATE_ID)
    if run.state != RunState.DONE.value:
        return _BaselineResult(None, None, (
            f"The baseline's holdout run stopped after {run.steps_done} of {h.steps} steps (the "
            "budget could not cover it); a shorter baseline is never scored."))
    if not base:
        return _BaselineResult(None, None, "The baseline has no score on the holdout steps.")
    _, won = _holdout_scores(engine, study_id, winner)
    common = sorted(set(won) & set(base))
    diffs = [won[t] - base[t] for t in common]
    try:
        diff_se: float | None = holdout_standard_error(diffs, layout.horizon_steps,
                                                       dependence=dependence)
    except NotEnoughDataError:
        diff_se = None
    return _BaselineResult(float(np.mean(list(base.values()))), diff_se, None)


def run_study_local(engine: Engine, study_id: int, backend: StudyBackend, *,
                    max_workers: int = 4) -> StudyOutcome:
    """Run a whole study in this process with a thread pool (tests, benchmarks, no Dagster):
    its windows dealt into ``max_workers`` chunks (:func:`search_chunks`: one, in plan order,
    when its limits will stop the search), each run by :func:`execute_chunk` in a thread, as
    the Dagster job's chunk steps run them."""
    repo.start_study(engine, study_id)
    keys = plan_runs(engine, study_id)
    attempt = uuid.uuid4().hex
    try:
        with ThreadPoolExecutor(max_workers=max_workers) as pool:
            list(pool.map(lambda chunk: execute_chunk(engine, chunk, backend, attempt=attempt),
                          search_chunks(engine, study_id, keys, max(1, max_workers))))
    except Exception as exc:
        repo.mark_failed(engine, study_id, f"{type(exc).__name__}: {exc}")
        raise
    return finalize_study(engine, study_id, backend)


# --------------------------------------------------------------------------- synthetic backend


def _unit_hash(*parts: Any) -> float:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


@dataclass
class SyntheticBackend:
    """A trivial workflow for tests and benchmarks: each step's score is a draw around the
    candidate's true skill, deterministic in (seed, candidate index, step time).

    ``skill(params) -> float`` gives a candidate's true mean score; ``noise`` the per-step
    standard deviation (Gaussian, by inverse CDF of a hash, so reproducible and order-free);
    ``common`` the share of variance common to all candidates on a step (a hard day is hard
    for everyone); ``cost_per_step`` micro-USD; ``sleep_s`` a pause per step.
    """

    skill: Callable[[Mapping[str, Any]], float] = lambda p: float(p.get("skill", 0.5))
    noise: float = 0.1
    common: float = 0.3
    cost_per_step: int = 10
    seed: int = 0
    sleep_s: float = 0.0
    step: dt.timedelta = dt.timedelta(days=1)
    calls: list[tuple[int, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_window(self, candidate: CandidateSpec, window: Window, kind: WindowKind, *,
                   seal_at: dt.datetime | None, should_stop: ShouldStop) -> WindowOutcome:
        from scipy.special import ndtri

        if seal_at is not None and window.end > seal_at:
            from typestrict_pipeline.errors import LookAheadError

            raise LookAheadError(
                f"expected a search window ending at or before the holdout seal "
                f"{seal_at.isoformat()}, got one ending {window.end.isoformat()}. "
                "The holdout is sealed during the search."
            )
        with self._lock:
            self.calls.append((candidate.index, kind.value, window.start.isoformat()))
        mu = self.skill(candidate.params)
        scores: list[tuple[str, float]] = []
        cost = 0
        for i in range(window.steps):
            if should_stop(cost, i):
                return WindowOutcome(scores, cost, i, cut=True)
            t = window.start + i * self.step
            stamp = t.isoformat()
            z_c = float(ndtri(_unit_hash(self.seed, "common", stamp)))
            z_i = float(ndtri(_unit_hash(self.seed, candidate.index, stamp)))
            value = mu + self.noise * (math.sqrt(self.common) * z_c
                                       + math.sqrt(1.0 - self.common) * z_i)
            if self.sleep_s:
                time.sleep(self.sleep_s)
            scores.append((stamp, value))
            cost += self.cost_per_step
        return WindowOutcome(scores, cost, window.steps)
